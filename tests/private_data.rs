//! End-to-end, issue 20 ("Containment"): a planner with `[server] privateData = true`
//! shows a plain user only their own jobs — in `status` (also `--all` and `--since`, from
//! the store after a restart), and another user's job asked for by name (`status`,
//! `explain`, `logs`, `cancel`) answers exactly as a job that does not exist — while an
//! admin sees every job. A plain user may lower a job's priority but not raise it above
//! the default; an admin may set any. No agents: the jobs stay in the planner.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Output;
use std::time::Duration;

use common::{Cluster, path_str, wait_for};

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
    assert_eq!(sweep[0]["tasks"][0]["workingDir"].as_str(), Some(c.dir_str().as_str()));
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
