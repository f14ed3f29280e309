//! End-to-end (issue 38, "tasks no kill ends"): with the real `hyperplan-planner`,
//! `hyperplan-agent` and `hyperplan` binaries on 127.0.0.1, a task that traps SIGTERM
//! cannot outlive its kills. Graces are capped by the site (`[preemption] maxGrace`,
//! `[limits] maxCancelGrace`); a later cancel shortens a grace under way and an admin's
//! ends it now; the time limit wins over a cancel's long grace; and after `drain --now`
//! and `resume` no job is placed beside the drained task while its processes live.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::ha::MACHINE;
use common::{Cluster, alive, all_running, path_str, pids, task_user, wait_for};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(40);

const PLANNER_TOML: &str = r#"
[preemption]
maxGrace = "1m"

[limits]
maxCancelGrace = "10m"
"#;

/// The task: says it is ready once its trap is set, says `term` at each SIGTERM, and
/// lives on.
const TRAPS: &str = "trap \"echo term\" TERM; echo ready; while :; do sleep 1; done";

struct Rig {
    c: Cluster,
    user: String,
    work: tempfile::TempDir,
}

impl Rig {
    fn start() -> Rig {
        let mut c = Cluster::start_with(&["n1"], Some(PLANNER_TOML));
        let user = task_user();
        c.issue_user(&user);
        c.start_agent("n1", MACHINE, &[]);
        c.wait_state("n1", "Ready", LONG);
        let work = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        Rig { c, user, work }
    }

    /// Submits a job of one task holding the whole node, running `script`; `extra` is
    /// more of its file. Returns what `submit` said on failure.
    fn submit(&self, name: &str, extra: &str, script: &str) -> Result<(), String> {
        let file = self.c.write(
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\n{extra}tasks:\n  - name: t\n    replicas: 1\n    resources: {{cpu: 4}}\n    \
                 workingDir: {}\n    output: {name}.out\n    command: [sh, -c, '{script}']\n",
                path_str(self.work.path())
            ),
        );
        let out = self.c.cli(&self.user, &["submit", path_str(&file)]);
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    fn output(&self, name: &str) -> String {
        std::fs::read_to_string(self.work.path().join(format!("{name}.out"))).unwrap_or_default()
    }

    fn job(&self, name: &str) -> Value {
        self.c.jobs(&self.user, &[name]).remove(0)
    }

    /// Waits for `name` to run with its trap set; its task's pid.
    fn running(&self, name: &str) -> u64 {
        let pid = wait_for(LONG, &format!("{name} running"), || {
            let j = self.job(name);
            all_running(&j).then(|| pids(&j)[0])
        });
        wait_for(LONG, &format!("{name}'s trap set"), || {
            self.output(name).contains("ready").then_some(())
        });
        pid
    }

    fn cancel(&self, user: &str, name: &str, grace: &str) {
        let out = self.c.cli(user, &["cancel", name, "--grace", grace]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    /// Waits until the task has had `n` SIGTERMs and lives on.
    fn warned(&self, name: &str, n: usize, pid: u64) {
        wait_for(LONG, &format!("{name}'s SIGTERM {n}"), || {
            (self.output(name).matches("term").count() >= n).then_some(())
        });
        assert!(alive(pid), "{name} trapped its SIGTERM");
    }

    fn gone(&self, name: &str, pid: u64) {
        wait_for(LONG, &format!("{name}'s task gone"), || (!alive(pid)).then_some(()));
        wait_for(LONG, &format!("{name} ended"), || {
            let j = self.job(name);
            (j["tasks"][0]["state"] != "running").then_some(())
        });
    }
}

#[test]
fn no_task_outlives_its_kills() {
    let rig = Rig::start();
    let user = rig.user.clone();

    // Graces beyond the site's caps are refused, naming the key.
    let e = rig.submit("greedy", "preemptGrace: 2h\n", "true").unwrap_err();
    assert!(
        e.contains("preemptGrace 7200 s is longer than 60 s") && e.contains("[preemption] maxGrace"),
        "{e}"
    );

    // A later cancel shortens the grace under way; a longer one does not lengthen it.
    rig.submit("first", "", TRAPS).unwrap();
    let pid = rig.running("first");
    let out = rig.c.cli(&user, &["cancel", "first", "--grace", "1h"]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && e.contains("[limits] maxCancelGrace"), "{e}");
    rig.cancel(&user, "first", "5m");
    rig.warned("first", 1, pid);
    rig.cancel(&user, "first", "1s");
    rig.gone("first", pid);

    // An admin's cancel of a job already being stopped kills it now, whatever it asks.
    rig.submit("second", "", TRAPS).unwrap();
    let pid = rig.running("second");
    rig.cancel(&user, "second", "5m");
    rig.warned("second", 1, pid);
    rig.cancel("root", "second", "5m");
    rig.gone("second", pid);

    // The time limit wins over a cancel's long grace.
    rig.submit("limited", "timeLimit: 3s\n", TRAPS).unwrap();
    let pid = rig.running("limited");
    rig.cancel(&user, "limited", "5m");
    rig.warned("limited", 1, pid);
    rig.gone("limited", pid);

    // Drained at once, then resumed: the drained task traps its SIGTERM and lives its
    // kill's grace; no job starts beside it until it is gone.
    rig.submit("stray", "", TRAPS).unwrap();
    let pid = rig.running("stray");
    let out = rig.c.cli("root", &["nodes", "drain", "n1", "--now"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    rig.warned("stray", 1, pid);
    let table = wait_for(LONG, "n1 closed by the stray", || {
        let out = rig.c.cli("root", &["nodes"]);
        let table = String::from_utf8_lossy(&out.stdout).into_owned();
        table.contains("the planner no longer counts").then_some(table)
    });
    assert!(table.contains("stray."), "{table}");
    let out = rig.c.cli("root", &["nodes", "resume", "n1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    rig.submit("next", "", "sleep 600").unwrap();
    let next = wait_for(LONG, "next running", || {
        let j = rig.job("next");
        all_running(&j).then(|| pids(&j)[0])
    });
    assert!(!alive(pid), "next started beside the drained task's live processes");
    assert!(alive(next));
}
