//! End-to-end, issue 20 ("Containment"): a planner with `[server] privateData = true`
//! shows a plain user only their own jobs — in `status` (also `--all` and `--since`, from
//! the store after a restart), and another user's job asked for by name (`status`,
//! `explain`, `logs`, `cancel`) answers exactly as a job that does not exist — while an
//! admin sees every job. A plain user may lower a job's priority but not raise it above
//! the default; an admin may set any. No agents: the jobs stay in the planner.
//!
//! Issue 38, with agents and two Unix users: the web view (its JSON and its event
//! stream) shows a plain user only their own jobs, an admin every one, the token none;
//! `queues` shows a plain user only their own share; a preemption names no other user's
//! job to them (the reason, `Preempted by:`, `explain`), while an admin reads every name.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Output;
use std::time::Duration;

use common::ha::MACHINE;
use common::{Cluster, all_running, ensure_user, euid_is_root, path_str, task_user, wait_for};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(60);

fn job(c: &Cluster, name: &str, priority: Option<i32>) -> String {
    let priority = priority.map(|p| format!("priority: {p}\n")).unwrap_or_default();
    let p = c.write(
        &format!("{name}.yaml"),
        &format!("name: {name}\n{priority}tasks:\n  - {{name: t, replicas: 1, resources: {{cpu: 1}}}}\n"),
    );
    path_str(&p).to_string()
}

/// The names of the jobs `user`'s `status ARGS` lists.
fn names(c: &Cluster, user: &str, args: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = c
        .jobs(user, args)
        .iter()
        .map(|j| j["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_string()
}

/// `user`'s `ARGS` about another user's job `name` fails as it does for a job that
/// never existed (with the name in its place): same exit code, same message.
fn reads_as_missing(c: &Cluster, user: &str, args: &[&str], name: &str) {
    let run = |n: &str| {
        let a: Vec<&str> = args.iter().map(|a| if *a == "JOB" { n } else { a }).collect();
        c.cli(user, &a)
    };
    let hidden = run(name);
    let missing = run("no-such-job");
    assert!(
        !hidden.status.success(),
        "{args:?} {name}: {}",
        String::from_utf8_lossy(&hidden.stdout)
    );
    assert_eq!(hidden.status.code(), missing.status.code(), "{args:?}");
    assert_eq!(
        stderr(&hidden).replace(name, "no-such-job"),
        stderr(&missing),
        "{args:?}: another user's job must read as a missing one"
    );
    assert!(stderr(&missing).contains("no job named"), "{}", stderr(&missing));
    assert!(hidden.stdout.is_empty(), "{}", String::from_utf8_lossy(&hidden.stdout));
}

#[test]
fn private_data_hides_other_users_jobs_and_users_cannot_raise_priority() {
    let mut c = Cluster::start_with(&[], Some("[server]\nprivateData = true\n"));

    // alice's jobs: one that stays, one that ends (and after the restart is on disk only).
    c.cli_json("alice", &["submit", &job(&c, "train", None)]);
    c.cli_json("alice", &["submit", &job(&c, "old", None)]);
    c.cli_json("alice", &["cancel", "old"]);

    // Priority: bob may lower his job's, not raise it; the refusal says job, value, cap,
    // and takes nothing of that submission.
    let out = c.cli("bob", &["submit", &job(&c, "hurry", Some(10))]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("job hurry: priority 10 is above 0, the highest a user may ask for (an admin may set more)"),
        "{err}"
    );
    let both = c.write(
        "both.yaml",
        "name: fine\ntasks:\n  - {name: t, replicas: 1, resources: {cpu: 1}}\n---\n\
         name: greedy\npriority: 1\ntasks:\n  - {name: t, replicas: 1, resources: {cpu: 1}}\n",
    );
    let out = c.cli("bob", &["submit", path_str(&both)]);
    assert!(
        stderr(&out).contains("job greedy: priority 1 is above 0"),
        "{}",
        stderr(&out)
    );
    let v = c.cli_json("bob", &["submit", &job(&c, "sweep", Some(-5))]);
    assert_eq!(v["submitted"], serde_json::json!(["sweep"]));
    let v = c.cli_json("root", &["submit", &job(&c, "urgent", Some(10))]);
    assert_eq!(v["submitted"], serde_json::json!(["urgent"]));
    assert!(c.planner_log().contains("refused a submission: job hurry: priority 10"));

    // bob sees his own job only; alice hers; root every one.
    assert_eq!(names(&c, "bob", &[]), ["sweep"]);
    assert_eq!(names(&c, "bob", &["--all"]), ["sweep"]);
    assert_eq!(names(&c, "alice", &["--all"]), ["old", "train"]);
    assert_eq!(names(&c, "root", &[]), ["old", "sweep", "train", "urgent"]);
    let sweep = c.jobs("bob", &["sweep"]);
    assert_eq!(sweep[0]["owner"], "bob");
    // No nodes: it is rejected, and a rejected job keeps no task (issue 38).
    assert_eq!(sweep[0]["tasks"].as_array().map(Vec::len), Some(0), "{}", sweep[0]);
    let listing = String::from_utf8_lossy(&c.cli("bob", &["status", "--all"]).stdout).into_owned();
    assert!(!listing.contains("alice") && !listing.contains("train"), "{listing}");

    // alice's jobs by name, as bob, read as jobs that do not exist.
    for args in [
        &["status", "JOB"][..],
        &["status", "JOB", "--all"],
        &["explain", "JOB"],
        &["logs", "JOB"],
        &["cancel", "JOB"],
    ] {
        reads_as_missing(&c, "bob", args, "train");
    }
    assert!(c.planner_log().contains("refused: cancel of another user's job"));
    // bob's try to cancel changed nothing; the name stays taken without saying whose.
    // (No nodes: it waits as `rejected` until one joins, its name taken all the while.)
    assert_ne!(c.jobs("alice", &["train"])[0]["status"], "cancelled");
    let out = c.cli("bob", &["submit", &job(&c, "train", None)]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("is taken by a job that has not ended"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("alice"), "{}", stderr(&out));
    // The admin reads and explains anyone's job.
    assert_eq!(c.jobs("root", &["train"])[0]["owner"], "alice");
    assert_eq!(c.cli_json("root", &["explain", "train"])["job"]["name"], "train");

    // After a restart alice's ended job is in the store only: still hers alone.
    c.stop_planner();
    c.start_planner("127.0.0.1:0");
    wait_for(LONG, "the ended job back from the store", || {
        names(&c, "root", &["--all"]).contains(&"old".to_string()).then_some(())
    });
    assert_eq!(names(&c, "root", &["--all"]), ["old", "sweep", "train", "urgent"]);
    assert_eq!(names(&c, "bob", &["--all"]), ["sweep"]);
    assert_eq!(names(&c, "bob", &["--since", "1h"]), ["sweep"]);
    assert_eq!(names(&c, "alice", &["--since", "1h"]), ["old", "train"]);
    reads_as_missing(&c, "bob", &["status", "JOB"], "old");
    reads_as_missing(&c, "bob", &["status", "JOB", "--all"], "old");
    assert_eq!(c.jobs("alice", &["old"])[0]["status"], "cancelled");
}

/// Without `privateData` (the default) everyone sees every job, as before; the priority
/// cap holds all the same.
#[test]
fn without_private_data_users_see_each_others_jobs() {
    let c = Cluster::start(&[]);
    c.cli_json("alice", &["submit", &job(&c, "train", None)]);
    assert_eq!(names(&c, "bob", &[]), ["train"]);
    assert_eq!(c.jobs("bob", &["train"])[0]["owner"], "alice");
    let out = c.cli("bob", &["cancel", "train"]);
    assert!(stderr(&out).contains("belongs to alice"), "{}", stderr(&out));
    let out = c.cli("bob", &["submit", &job(&c, "hurry", Some(1))]);
    assert!(
        stderr(&out).contains("job hurry: priority 1 is above 0"),
        "{}",
        stderr(&out)
    );
}

/// The other task user (tasks of two users need two Unix users as root).
const OTHER_USER: &str = "hyperplan-e2e2";

const WEB_TOKEN: &str = "s3cret-token-for-the-proxy-0123";

const PREEMPTING_TOML: &str = r#"
[server]
privateData = true

[web]
tokenFile = "web.token"

[[queue]]
name = "lo"
preemptible = true

[[priorityClass]]
name = "urgent"
value = 100
preemptible = false
"#;

/// `curl` of the web view's `path` as `who` (a certificate's user, or `None`: the token):
/// the body, which must come with 200.
fn web(c: &Cluster, base: &str, path: &str, who: Option<&str>, extra: &[&str]) -> String {
    let certs = c.certs();
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-sk", "-w", "\n%{http_code}"]).args(extra);
    match who {
        Some(user) => {
            cmd.arg("--cert")
                .arg(certs.join(format!("users/{user}.pem")))
                .arg("--key")
                .arg(certs.join(format!("users/{user}.key")));
        }
        None => {
            cmd.args(["-H", &format!("Authorization: Bearer {WEB_TOKEN}")]);
        }
    }
    let out = cmd.arg(format!("{base}{path}")).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap();
    assert!(
        code == "200" || path == "api/events",
        "{path} as {who:?}: {code} {body}"
    );
    body.to_string()
}

/// The web view's state as `who` reads it: (the job names, the whole JSON text).
fn web_jobs(c: &Cluster, base: &str, who: Option<&str>) -> (Vec<String>, String) {
    let text = web(c, base, "api/state", who, &[]);
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let mut names: Vec<String> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    (names, text)
}

/// Whether `text` names `name` as a whole word (a job name holds letters, digits, `.`,
/// `_`, `-`: "victims" does not name "victim").
fn mentions(text: &str, name: &str) -> bool {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        .any(|w| w == name)
}

#[test]
fn under_private_data_the_web_view_queues_and_preemptions_show_only_ones_own_jobs() {
    let nodes = ["n1", "n2"];
    let long = Duration::from_secs(40);
    let mut c = Cluster::prepare(&nodes, Some(PREEMPTING_TOML));
    let token = c.write("web.token", &format!("{WEB_TOKEN}\n"));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    c.planner_args = ["--web-listen", "127.0.0.1:0", "--metrics-listen", ""]
        .map(String::from)
        .to_vec();
    c.start_planner("127.0.0.1:0");
    // a: the victim's owner; b: the preemptor's (who also owns a victim).
    let a = task_user();
    c.issue_user(&a);
    let b = if euid_is_root() {
        ensure_user(OTHER_USER);
        c.issue_user(OTHER_USER);
        OTHER_USER.to_string()
    } else {
        "bob".to_string()
    };
    for n in nodes {
        c.start_agent(n, MACHINE, &[]);
    }
    for n in nodes {
        c.wait_state(n, "Ready", long);
    }
    let base = wait_for(long, "the web view's address", || {
        let log = c.planner_log();
        let at = log.find("serving the web view on https://")? + "serving the web view on https://".len();
        Some(format!("https://{}/", &log[at..at + log[at..].find('/')?]))
    });
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let job = |name: &str, extra: &str, replicas: u32, script: &str| {
        let file = c.write(
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\n{extra}tasks:\n  - name: t\n    replicas: {replicas}\n    \
                 resources: {{cpu: 4}}\n    workingDir: {}\n    output: /dev/null\n    \
                 command: [sh, -c, '{script}']\n",
                path_str(work.path())
            ),
        );
        path_str(&file).to_string()
    };
    let submit = |user: &str, file: &str| {
        let out = c.cli(user, &["submit", file]);
        assert!(out.status.success(), "{}\n{}", stderr(&out), c.planner_log());
    };
    let status = |user: &str, name: &str| c.jobs(user, &[name]).remove(0);
    let wait_status = |user: &str, name: &str, what: &str, ok: &dyn Fn(&Value) -> bool| {
        wait_for(long, &format!("{name} {what}"), || {
            let j = status(user, name);
            ok(&j).then_some(j)
        })
    };

    // a's `victim` (it asks requeue, and ends only when killed after its 10 s grace) and
    // b's `mine` hold a node each; b's `rush` needs both.
    submit(
        &a,
        &job(
            "victim",
            "queue: lo\nrequeue: true\npreemptGrace: 10s\n",
            1,
            "trap \"\" TERM; while :; do sleep 0.1; done",
        ),
    );
    wait_status(&a, "victim", "running", &all_running);
    submit(&b, &job("mine", "queue: lo\n", 1, "sleep 600"));
    wait_status(&b, "mine", "running", &all_running);
    submit(&b, &job("rush", "priorityClassName: urgent\n", 2, "sleep 600"));

    // While a's victim takes its grace: b's rush is preempting it and names only his own.
    let rush = wait_status(&b, "rush", "preempting", &|j| j["preempting"].is_object());
    let mut victims: Vec<&str> = rush["preempting"]["victims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    victims.sort();
    assert_eq!(victims, ["another user's job", "mine"], "{rush}");
    assert!(!mentions(&rush.to_string(), "victim"), "{rush}");
    let text = String::from_utf8_lossy(&c.cli(&b, &["status", "rush"]).stdout).into_owned();
    assert!(
        text.contains("another user's job") && !mentions(&text, "victim"),
        "{text}"
    );
    let explain = String::from_utf8_lossy(&c.cli(&b, &["explain", "rush"]).stdout).into_owned();
    assert!(!mentions(&explain, "victim"), "{explain}");
    let seen = status("root", "rush");
    assert!(
        mentions(&seen.to_string(), "victim"),
        "the admin reads every name: {seen}"
    );

    // The web view: each user their own jobs, the admin all, the token none.
    let (names, text) = web_jobs(&c, &base, Some(&b));
    assert_eq!(names, ["mine", "rush"], "{text}");
    assert!(
        !mentions(&text, "victim") && !text.contains(&format!("\"{a}\"")),
        "{text}"
    );
    let (names, text) = web_jobs(&c, &base, Some(&a));
    assert_eq!(names, ["victim"], "{text}");
    assert!(!mentions(&text, "rush") && !text.contains(&b), "{text}");
    let (names, _) = web_jobs(&c, &base, Some("root"));
    assert_eq!(names, ["mine", "rush", "victim"]);
    let (names, _) = web_jobs(&c, &base, Some("alice"));
    assert!(names.is_empty(), "{names:?}");
    let (names, text) = web_jobs(&c, &base, None);
    assert!(names.is_empty(), "the token names no one: {text}");
    assert!(
        text.contains("\"n1\"") && text.contains("\"lo\""),
        "nodes and queues stay: {text}"
    );
    // Its event stream too.
    let events = web(&c, &base, "api/events", Some(&a), &["--max-time", "3"]);
    assert!(events.starts_with("event: state\ndata: {"), "{events}");
    assert!(
        mentions(&events, "victim") && !mentions(&events, "rush") && !mentions(&events, "mine"),
        "{events}"
    );

    // Past the grace: a's victim waits again; it and its `Preempted by:` do not name rush.
    wait_status(&b, "rush", "running", &all_running);
    let victim = wait_status(&a, "victim", "pending again", &|j| j["status"] == "pending");
    assert_eq!(victim["preemptedBy"], "another user's job", "{victim}");
    // (Its reason says why it waits now: whatever it says, it names no other user's job.)
    assert!(!mentions(&victim.to_string(), "rush"), "{victim}");
    let text = String::from_utf8_lossy(&c.cli(&a, &["status", "victim"]).stdout).into_owned();
    assert!(text.contains("Preempted by:    another user's job"), "{text}");
    assert!(!mentions(&text, "rush"), "{text}");
    let explain = String::from_utf8_lossy(&c.cli(&a, &["explain", "victim"]).stdout).into_owned();
    assert!(!mentions(&explain, "rush"), "{explain}");
    let (_, text) = web_jobs(&c, &base, Some(&a));
    assert!(!mentions(&text, "rush"), "{text}");
    // b's own victim names his own job; the admin reads every name.
    let mine = status(&b, "mine");
    assert_eq!(mine["preemptedBy"], "rush", "{mine}");
    let seen = status("root", "victim");
    assert_eq!(seen["preemptedBy"], "rush", "{seen}");

    // queues: a's own share only, the queues' totals whole; the admin's every user's.
    let users = |v: &Value| -> Vec<String> {
        let mut u: Vec<String> = v["queues"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|q| q["users"].as_array().unwrap().iter())
            .map(|u| u["user"].as_str().unwrap().to_string())
            .collect();
        u.sort();
        u.dedup();
        u
    };
    let all = c.cli_json("root", &["queues"]);
    let mut both = vec![a.clone(), b.clone()];
    both.sort();
    assert_eq!(users(&all), both, "{all}");
    let theirs = c.cli_json(&a, &["queues"]);
    assert_eq!(users(&theirs), std::slice::from_ref(&a), "{theirs}");
    assert!(!theirs.to_string().contains(&b), "{theirs}");
    let running = |v: &Value| -> Vec<u64> {
        v["queues"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q["runningJobs"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(running(&theirs), running(&all), "the totals stay");
    let text = String::from_utf8_lossy(&c.cli(&a, &["queues"]).stdout).into_owned();
    assert!(!text.contains(&b), "{text}");
}
