//! End-to-end: what goes wrong on a node, and what the agent and the planner make of it.
//! A real planner and agents on 127.0.0.1 (see `common::live`).
//!
//! - A running task's `pid` file deleted, or naming another process, then the agent
//!   restarted: the task is still the node's (its shepherd found by its command line), its
//!   CPUs stay held, and cancel ends it.

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
