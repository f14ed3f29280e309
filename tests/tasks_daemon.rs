//! End-to-end: jobs run for real. The `hyperplan-planner`, `hyperplan-agent run` (probing
//! this machine, `--pin on`) and `hyperplan` binaries on 127.0.0.1; tasks are started by
//! shepherds, pinned to the PUs the planner gave them, as the submitting user, and their
//! ends come back as job statuses and exit codes.
//!
//! Tasks run as a real Unix user: as root, the tests create `hyperplan-e2e` (root itself
//! is refused by agents, as it should be); otherwise they run as the current user.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use common::live::{LONG, Live};
use common::{TEST_USER, alive, bin, euid_is_root, path_str, pids, wait_for};

#[test]
fn tasks_run_pinned_as_the_user_with_their_ranks_and_report_how_they_ended() {
    let live = Live::start(&["n1", "n2"]);
    let job = live.job(
        "vars",
        "tasks:\n  - name: w\n    replicas: 4\n    topologyPolicy: single-numa-node\n    \
         resources: {cpu: 1, memory: 64Mi}\n    workingDir: WORKDIR\n    command: [sh, -c, \
         'echo \"$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $HYPERPLAN_NODE $HYPERPLAN_CPUS $(grep Cpus_allowed_list /proc/self/status | cut -f2) $(id -un)\"']\n",
    );
    let (code, err) = live.submit_wait(&job);
    assert_eq!(code, 0, "{err}\n{}", live.c.planner_log());
    assert!(err.contains("vars (id 1): completed, exit code 0"), "{err}");
    let j = live.status("vars");
    assert_eq!(j["status"], "completed");
    assert_eq!(j["exitCode"], 0);
    let mut ranks = BTreeSet::new();
    let mut masters = BTreeSet::new();
    let mut cpus_by_node: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for t in j["tasks"].as_array().unwrap() {
        assert_eq!(t["state"], "exited", "{t}");
        assert_eq!(t["exitCode"], 0, "{t}");
        assert!(
            t["cpuSeconds"].is_number() && t["maxRssBytes"].as_u64().unwrap() > 0,
            "{t}"
        );
        let name = t["name"].as_str().unwrap();
        let out = live.output("vars", name);
        let f: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(f.len(), 10, "{name}: {out:?}");
        let (rank, world, local_world, node, given, allowed, user) = (f[0], f[2], f[3], f[6], f[7], f[8], f[9]);
        assert_eq!(rank, t["rank"].to_string(), "{out}");
        assert_eq!(world, "4");
        assert_eq!(local_world, "2", "two 1-CPU tasks per 2-PU node: {out}");
        assert_eq!(node, t["node"].as_str().unwrap());
        // Pinned: the kernel allows exactly the PUs the planner gave it.
        assert_eq!(given, t["cpus"].as_str().unwrap(), "{out}");
        assert_eq!(allowed, given, "Cpus_allowed_list: {out}");
        assert_eq!(user, live.user);
        ranks.insert(rank.to_string());
        masters.insert(format!("{} {}", f[4], f[5]));
        cpus_by_node
            .entry(node.to_string())
            .or_default()
            .push(given.to_string());
    }
    assert_eq!(ranks.len(), 4, "distinct ranks");
    assert_eq!(masters.len(), 1, "one MASTER_ADDR:MASTER_PORT: {masters:?}");
    // No advertiseAddress: rank 0's node as the planner sees its agent connect.
    assert!(masters.iter().all(|m| m.starts_with("127.0.0.1 ")), "{masters:?}");
    for (node, cpus) in &cpus_by_node {
        let distinct: BTreeSet<_> = cpus.iter().collect();
        assert_eq!(distinct.len(), cpus.len(), "{node}: disjoint PUs {cpus:?}");
    }
    // The output is also readable through the planner, from the task's node.
    let out = live.cli(&["logs", "vars", "--task", "w-0"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), live.output("vars", "w-0"));
    // Another user may not read it.
    let out = live.c.cli("bob", &["logs", "vars"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("only its owner or an admin"));
    if euid_is_root() {
        use std::os::unix::fs::MetadataExt;
        let uid = Command::new("id").args(["-u", TEST_USER]).output().unwrap();
        let uid: u32 = String::from_utf8_lossy(&uid.stdout).trim().parse().unwrap();
        let meta = std::fs::metadata(live.work.path().join("hyperplan-vars-w-0.out")).unwrap();
        assert_eq!(meta.uid(), uid, "the output file belongs to the task's user");
    }
}

#[test]
fn exit_codes_signals_time_limits_and_a_failing_rank() {
    let live = Live::start(&["n1"]);
    let one = |name: &str, extra: &str, script: &str| {
        live.job(
            name,
            &format!(
                "{extra}tasks:\n  - name: t\n    replicas: 1\n    resources: {{cpu: 1}}\n    workingDir: WORKDIR\n    command: [sh, -c, '{script}']\n"
            ),
        )
    };
    let (code, err) = live.submit_wait(&one("three", "", "exit 3"));
    assert_eq!(code, 3, "{err}");
    let j = live.status("three");
    assert_eq!(
        (j["status"].as_str(), j["exitCode"].as_i64()),
        (Some("failed"), Some(3))
    );
    assert_eq!(j["tasks"][0]["exitCode"], 3);

    let (code, err) = live.submit_wait(&one("killed", "", "kill -9 $$"));
    assert_eq!(code, 137, "{err}");
    let j = live.status("killed");
    assert_eq!(j["status"], "failed");
    assert_eq!(j["tasks"][0]["signal"], 9);

    let (code, err) = live.submit_wait(&one("slow", "timeLimit: 1\n", "sleep 30"));
    assert_eq!(code, 124, "{err}");
    let j = live.status("slow");
    assert_eq!(j["status"], "timeout");
    assert_eq!(j["tasks"][0]["state"], "killed");

    // Rank 0 fails at once; rank 1 would sleep: it is killed, and nothing is left.
    let job = live.job(
        "gang",
        "tasks:\n  - name: t\n    replicas: 2\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    \
         command: [sh, -c, 'if [ $RANK = 0 ]; then sleep 1; exit 5; fi; exec sleep 60']\n",
    );
    let out = live.cli(&["submit", path_str(&job)]);
    assert!(out.status.success());
    // Failed at once; the exit code once the other task has been stopped.
    let j = wait_for(LONG, "gang failed, with its exit code", || {
        let j = live.status("gang");
        (j["status"] == "failed" && !j["exitCode"].is_null()).then_some(j)
    });
    assert_eq!(j["exitCode"], 5);
    let states: BTreeSet<String> = j["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["state"].to_string())
        .collect();
    assert!(states.contains("\"killed\""), "{j}");
    assert_eq!(pids(&j).len(), 2, "{j}");
    for pid in pids(&j) {
        assert!(!alive(pid), "pid {pid} still runs");
    }
}

#[test]
fn cancel_stops_every_task_and_frees_the_node() {
    let live = Live::start(&["n1"]);
    let job = live.job(
        "long",
        "tasks:\n  - name: t\n    replicas: 2\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    \
         command: [sh, -c, 'sleep 60 & sleep 60']\n",
    );
    assert!(live.cli(&["submit", path_str(&job)]).status.success());
    let j = wait_for(LONG, "both tasks running", || {
        let j = live.status("long");
        (pids(&j).len() == 2).then_some(j)
    });
    let before = pids(&j);
    let out = live.cli(&["cancel", "long", "--grace", "2s"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j = wait_for(LONG, "the tasks ended", || {
        let j = live.status("long");
        j["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["state"] == "killed")
            .then_some(j)
    });
    assert_eq!(j["status"], "cancelled");
    for pid in before {
        assert!(!alive(pid), "pid {pid} still runs after cancel");
    }
    // Their children (the background sleeps) went with their process groups.
    let left = Command::new("pgrep")
        .args(["-u", &live.user, "-f", "^sleep 60$"])
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "left behind: {}",
        String::from_utf8_lossy(&left.stdout)
    );
    // The node's CPUs are free again: a job that needs both runs.
    let both = live.job(
        "after",
        "tasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 2}\n    workingDir: WORKDIR\n    command: [\"true\"]\n",
    );
    let (code, err) = live.submit_wait(&both);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn an_agent_killed_while_its_task_runs_reports_the_end_once_after_restart() {
    let mut live = Live::start(&["n1"]);
    let job = live.job(
        "survivor",
        "tasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    \
         command: [sh, -c, 'until [ -e go ]; do sleep 0.1; done; echo done']\n",
    );
    assert!(live.cli(&["submit", path_str(&job)]).status.success());
    let j = live.wait_running("survivor");
    let pid = pids(&j)[0];
    live.c.kill_agent("n1"); // SIGKILL: the shepherd and its task stay
    assert!(
        alive(pid),
        "the task {pid} survives its agent\n{}",
        live.agent_log("n1")
    );
    live.start_agent("n1");
    // The task ends only when told, however slow the machine: its end comes while the new agent runs.
    std::fs::write(live.work.path().join("go"), "").unwrap();
    let j = live.wait_status("survivor", "completed");
    assert_eq!(
        j["tasks"][0]["pid"].as_u64(),
        Some(pid),
        "the same process, not a second launch"
    );
    assert_eq!(live.output("survivor", "t-0"), "done\n", "ran once");
    let ended = live
        .c
        .planner_log()
        .lines()
        .filter(|l| l.contains("task ended") && l.contains("survivor"))
        .count();
    assert_eq!(ended, 1, "{}", live.c.planner_log());
    assert!(!live.agent_log("n1").contains("panicked"));
}

#[test]
fn root_is_refused_unless_the_agent_allows_it() {
    let live = Live::start(&["n1"]);
    let job = live.job(
        "as-root",
        "tasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    command: [id, -un]\n",
    );
    // The `root` certificate of the test cluster is an admin's: that does not make root.
    let out = live.c.cli("root", &["submit", "--wait", path_str(&job)]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let j = live.c.cli_json("root", &["status", "as-root"]);
    let t = &j["jobs"][0]["tasks"][0];
    assert_eq!(j["jobs"][0]["status"], "failed");
    let reason = t["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("root") && reason.contains("allowRoot"), "{t}");
}

#[test]
fn logs_follow_prints_what_a_task_writes_until_it_ends() {
    let live = Live::start(&["n1"]);
    let job = live.job(
        "chatty",
        "tasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    \
         command: [sh, -c, 'for i in 1 2 3 4 5; do echo line $i; sleep 0.3; done']\n",
    );
    assert!(live.cli(&["submit", path_str(&job)]).status.success());
    live.wait_running("chatty");
    // Started while the task writes; returns once it has ended and all is printed.
    let out = live.cli(&["logs", "chatty", "--follow"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "line 1\nline 2\nline 3\nline 4\nline 5\n"
    );
    assert_eq!(live.status("chatty")["status"], "completed");
}

/// `logs --follow` goes on through a restart of the task's agent and of the planner, and
/// ends with the task, everything printed once.
#[test]
fn logs_follow_goes_on_through_agent_and_planner_restarts() {
    use std::io::Read;
    let mut live = Live::start(&["n1"]);
    let job = live.job(
        "restarts",
        "tasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    \
         command: [sh, -c, 'echo line 1; while [ ! -e go1 ]; do sleep 0.1; done; echo line 2; \
         while [ ! -e go2 ]; do sleep 0.1; done; echo line 3']\n",
    );
    assert!(live.cli(&["submit", path_str(&job)]).status.success());
    live.wait_running("restarts");
    let mut follower = live
        .c
        .cli_command(&live.user, &["logs", "restarts", "--follow"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let printed = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let mut stdout = follower.stdout.take().unwrap();
    let sink = printed.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let shown = |text: &str| printed.lock().unwrap().contains(text);
    wait_for(LONG, "line 1 followed", || shown("line 1").then_some(()));

    // The agent goes away (kill -9) and comes back; the task runs on.
    live.c.kill_agent("n1");
    std::fs::write(live.work.path().join("go1"), "").unwrap();
    live.start_agent("n1");
    wait_for(LONG, "line 2 followed", || shown("line 2").then_some(()));

    // The planner stops and starts again on the same address.
    let addr = live.c.addr.clone();
    live.c.stop_planner();
    std::fs::write(live.work.path().join("go2"), "").unwrap();
    live.c.start_planner(&addr);
    let status = wait_for(LONG, "the follower's end", || follower.try_wait().unwrap());
    reader.join().unwrap();
    let mut err = String::new();
    follower.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(status.success(), "{err}");
    assert_eq!(*printed.lock().unwrap(), "line 1\nline 2\nline 3\n", "{err}");
    assert!(err.contains("waiting to read the output"), "{err}");
}

#[test]
fn master_addr_is_the_advertised_address_of_rank_0s_node() {
    let live = Live::start_with(&["n1"], &["--advertise-address", "n1.data.example"]);
    let job = live.job(
        "adv",
        "tasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    \
         command: [sh, -c, 'echo $MASTER_ADDR']\n",
    );
    let (code, err) = live.submit_wait(&job);
    assert_eq!(code, 0, "{err}");
    assert_eq!(live.output("adv", "t-0"), "n1.data.example\n");
    // A bad address stops the agent at once, saying why.
    let out = Command::new(bin("hyperplan-agent"))
        .args([
            "run",
            "--planner",
            "127.0.0.1:9",
            "--config",
            "/dev/null",
            "--advertise-address",
            "a b;c",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected an IP address or a host name"));
}
