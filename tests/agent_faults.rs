//! End-to-end: what goes wrong on a node, and what the agent and the planner make of it.
//! A real planner and agents on 127.0.0.1 (see `common::live`).
//!
//! - A running task's `pid` file deleted, or naming another process, then the agent
//!   restarted: the task is still the node's (its shepherd found by its command line), its
//!   CPUs stay held, and cancel ends it.
//! - An agent that has obeyed a newer planner epoch than the planner's: refused before it
//!   takes the node, said once on each side, shown in `hyperplan nodes` with the reason;
//!   the agent backs off; the task placed there is lost after `nodeLostAfter` (its job
//!   fails); once the agent's epoch is reset the node comes back and the orphan is killed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use common::live::{LONG, Live};
use common::{alive, path_str, pids, wait_for};

/// Free CPUs of node `n1`, as `hyperplan nodes` shows them.
fn free_cpus(live: &Live) -> u64 {
    let nodes = live.c.cli_json(&live.user, &["nodes"]);
    nodes["nodes"][0]["cpus"]["free"].as_u64().unwrap()
}

#[test]
fn a_task_whose_pid_file_is_lost_or_wrong_survives_an_agent_restart_and_cancel_ends_it() {
    for wrong in [false, true] {
        let mut live = Live::start(&["n1"]);
        let idle = free_cpus(&live);
        let job = live.job(
            "keep",
            "tasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    \
             command: [sleep, '4701']\n",
        );
        assert!(live.cli(&["submit", path_str(&job)]).status.success());
        let j = live.wait_running("keep");
        let pid = pids(&j)[0];
        let held = free_cpus(&live);
        assert_eq!(held + 1, idle, "wrong={wrong}: the task holds a CPU");
        live.c.kill_agent("n1"); // SIGKILL: the shepherd and its task stay
        let pid_file = live.states["n1"].join("tasks/keep.1/t-0/pid");
        let shepherd: u32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        // Another live process, never to be signalled.
        let mut other = Command::new("sleep").arg("4702").spawn().unwrap();
        if wrong {
            std::fs::write(&pid_file, format!("{}\n", other.id())).unwrap();
        } else {
            std::fs::remove_file(&pid_file).unwrap();
        }
        live.start_agent("n1");
        wait_for(LONG, "the restarted agent finds the shepherd", || {
            live.agent_log("n1")
                .contains("found the task's shepherd by its command line")
                .then_some(())
        });
        // Registered again, its reports (none: the task runs) and a heartbeat in.
        wait_for(LONG, "the restarted agent registered", || {
            (live.agent_log("n1").matches("registered").count() >= 2).then_some(())
        });
        live.c.wait_state("n1", "Ready", LONG);
        let j = live.status("keep");
        assert_eq!(j["status"], "running", "wrong={wrong}: {j}\n{}", live.agent_log("n1"));
        assert_eq!(pids(&j), [pid], "wrong={wrong}: the same process");
        assert!(alive(pid));
        assert_eq!(free_cpus(&live), held, "wrong={wrong}: its CPU is still held");
        assert_eq!(
            std::fs::read_to_string(&pid_file).unwrap().trim(),
            shepherd.to_string(),
            "wrong={wrong}: the pid file names the shepherd again"
        );
        assert!(live.cli(&["cancel", "keep", "--grace", "1s"]).status.success());
        live.wait_status("keep", "cancelled");
        wait_for(LONG, "the task gone", || (!alive(pid)).then_some(()));
        wait_for(LONG, "its CPU free", || (free_cpus(&live) == idle).then_some(()));
        assert!(
            matches!(other.try_wait(), Ok(None)),
            "wrong={wrong}: the process the pid file named was spared"
        );
        other.kill().unwrap();
        other.wait().unwrap();
        assert!(!live.agent_log("n1").contains("panicked"));
    }
}

/// `hyperplan nodes --output json`'s entry for `node`.
fn node_json(live: &Live, node: &str) -> serde_json::Value {
    let nodes = live.c.cli_json(&live.user, &["nodes"]);
    nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == node)
        .cloned()
        .unwrap_or_default()
}

#[test]
fn an_agent_that_obeyed_a_newer_planner_is_refused_once_shown_why_and_its_tasks_are_lost_in_time() {
    let mut live = Live::start(&["n1"]);
    // Restarted on the same address, with tasks lost after 3 s NotReady.
    let addr = live.c.addr.clone();
    live.c.stop_planner();
    live.c.planner_args = vec!["--node-lost-after".into(), "3".into()];
    live.c.start_planner(&addr);
    live.c.wait_state("n1", "Ready", LONG);
    let job = live.job(
        "held",
        "tasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    \
         command: [sleep, '4703']\n",
    );
    assert!(live.cli(&["submit", path_str(&job)]).status.success());
    let pid = pids(&live.wait_running("held"))[0];

    // The node has since obeyed a planner far ahead of this one (a newer leader
    // elsewhere, or this planner's store replaced by an older copy).
    live.c.kill_agent("n1");
    std::fs::write(live.states["n1"].join("epoch"), "1000\n").unwrap();
    live.agent_rust_log = "info,hyperplan_agent::link=debug".into();
    live.start_agent("n1");
    let n1 = wait_for(LONG, "n1 shown refused", || {
        let n = node_json(&live, "n1");
        n["reason"]
            .as_str()
            .is_some_and(|r| r.contains("epoch 1000"))
            .then_some(n)
    });
    assert_eq!(n1["state"], "NotReady", "{n1}");
    let table = String::from_utf8(live.cli(&["nodes"]).stdout).unwrap();
    assert!(
        table.contains("why not ready:\n  n1: refused: its agent has obeyed planner epoch 1000"),
        "{table}"
    );

    // Its task is lost after nodeLostAfter, as any silent node's: the job ends.
    let j = live.wait_status("held", "failed");
    assert!(j.to_string().contains("lost"), "{j}");
    // Meanwhile the agent tried again, ever more slowly, and said why once; so did the
    // planner.
    wait_for(LONG, "the agent refused twice more", || {
        (live.agent_log("n1").matches("planner link down again").count() >= 2).then_some(())
    });
    let agent_log = live.agent_log("n1");
    let said = agent_log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("epoch 1000"))
        .count();
    assert_eq!(said, 1, "the agent says it once:\n{agent_log}");
    let planner_log = live.c.planner_log();
    assert_eq!(
        planner_log.matches("its agent is refused until it changes").count(),
        1,
        "the planner says it once:\n{planner_log}"
    );
    // After it: NotReady, and the lost task: nothing per retry.
    let after: Vec<&str> = planner_log
        .lines()
        .skip_while(|l| !l.contains("its agent is refused until it changes"))
        .skip(1)
        .collect();
    assert!(after.len() <= 3, "a line per retry:\n{planner_log}");
    assert_eq!(
        planner_log.matches("node registered: Ready").count(),
        1,
        "registered once before the refusals, never by the refused agent:\n{planner_log}"
    );
    assert!(alive(pid), "the refused agent's task runs on, unreported");

    // The old state is gone for good: the admin removes the node's epoch. The node comes
    // back, without the reason, and the task the planner gave up on is killed.
    live.c.kill_agent("n1");
    std::fs::remove_file(live.states["n1"].join("epoch")).unwrap();
    live.start_agent("n1");
    live.c.wait_state("n1", "Ready", LONG);
    // The refusal's reason goes with the registration; a loaded machine may show the
    // node Ready a heartbeat before its reason is cleared.
    wait_for(LONG, "n1 back without a reason", || {
        node_json(&live, "n1")["reason"].is_null().then_some(())
    });
    wait_for(LONG, "the lost task killed as an orphan", || {
        (!alive(pid)).then_some(())
    });
    assert!(!live.agent_log("n1").contains("panicked"));
}
