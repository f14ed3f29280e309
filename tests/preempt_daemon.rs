//! End-to-end (issue 25): preemption with the real `hyperplan-planner`, `hyperplan-agent`
//! and `hyperplan` binaries on 127.0.0.1. Two nodes are full of low-priority jobs of a
//! preemptible queue; a job of a higher priority class that needs both arrives. Its
//! victims get their chosen warning signal (USR1: their checkpoint hook runs), end, and
//! the urgent job starts; the victim that asks `requeue` waits again (who preempted it
//! shown by `status`) and runs once the urgent job is done; the other ends `preempted`,
//! and its `submit --wait` exits 143.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::ha::MACHINE;
use common::{Cluster, all_running, path_str, task_user, wait_for};
use serde_json::Value;

const NODES: [&str; 2] = ["n1", "n2"];
const LONG: Duration = Duration::from_secs(40);

const PLANNER_TOML: &str = r#"
[[queue]]
name = "lo"
preemptible = true

[[priorityClass]]
name = "urgent"
value = 100
preemptible = false

[preemption]
grace = "30s"
"#;

struct Rig {
    c: Cluster,
    user: String,
    work: tempfile::TempDir,
}

impl Rig {
    fn start() -> Rig {
        let mut c = Cluster::start_with(&NODES, Some(PLANNER_TOML));
        let user = task_user();
        c.issue_user(&user);
        for n in NODES {
            c.start_agent(n, MACHINE, &[]);
        }
        for n in NODES {
            c.wait_state(n, "Ready", LONG);
        }
        let work = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        Rig { c, user, work }
    }

    /// A job file: `replicas` tasks of 4 CPUs (a whole node) running `script`, with
    /// more top-level fields `extra`.
    fn job(&self, name: &str, extra: &str, replicas: u32, script: &str) -> PathBuf {
        self.c.write(
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\n{extra}tasks:\n  - name: t\n    replicas: {replicas}\n    \
                 resources: {{cpu: 4}}\n    workingDir: {}\n    output: /dev/null\n    \
                 command: [sh, -c, '{script}']\n",
                path_str(self.work.path())
            ),
        )
    }

    fn submit(&self, file: &std::path::Path) {
        let out = self.c.cli(&self.user, &["submit", path_str(file)]);
        assert!(
            out.status.success(),
            "submit {}: {}\nplanner log:\n{}",
            file.display(),
            String::from_utf8_lossy(&out.stderr),
            self.c.planner_log()
        );
    }

    fn status(&self, name: &str) -> Value {
        self.c.jobs(&self.user, &[name]).remove(0)
    }

    /// Waits for `ok`; a job not submitted yet (a `submit --wait` still on its way) is
    /// waited for too.
    fn wait_status(&self, name: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
        wait_for(LONG, &format!("{name} {what}"), || {
            let out = self.c.cli(&self.user, &["status", "--output", "json", name]);
            let j: Value = serde_json::from_slice(&out.stdout).ok()?;
            let j = j["jobs"].as_array()?.first()?.clone();
            ok(&j).then_some(j)
        })
    }

    fn touch(&self, file: &str) {
        std::fs::write(self.work.path().join(file), b"").unwrap();
    }
}

/// Writes `ckpt-<job>-<rank>` on USR1 (its checkpoint) and leaves; else runs until the
/// file `go-<job>` exists.
fn checkpointing(job: &str) -> String {
    format!("trap \"echo checkpointed > ckpt-{job}-$RANK; exit 0\" USR1; until [ -e go-{job} ]; do sleep 0.1; done")
}

#[test]
fn a_higher_class_preempts_with_the_chosen_signal_and_the_victims_requeue_or_end() {
    let rig = Rig::start();
    // One node each: `again` asks requeue, `once` does not; both warn with USR1.
    let again = rig.job(
        "again",
        "queue: lo\nrequeue: true\npreemptSignal: USR1\npreemptGrace: 20s\n",
        1,
        &checkpointing("again"),
    );
    rig.submit(&again);
    rig.wait_status("again", "running", all_running);
    let once = rig.job(
        "once",
        "queue: lo\npreemptSignal: USR1\npreemptGrace: 20s\n",
        1,
        &checkpointing("once"),
    );
    let waiting = rig
        .c
        .cli_command(&rig.user, &["submit", "--wait", path_str(&once)])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    rig.wait_status("once", "running", all_running);

    // Needs both nodes: both jobs are its victims.
    rig.submit(&rig.job(
        "urgent",
        "priorityClassName: urgent\n",
        2,
        "until [ -e go-urgent ]; do sleep 0.1; done",
    ));
    let urgent = rig.wait_status("urgent", "running", all_running);
    let mut nodes: Vec<&str> = urgent["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["node"].as_str().unwrap())
        .collect();
    nodes.sort();
    assert_eq!(nodes, NODES, "{urgent}");
    // The victims were warned with USR1 (their checkpoint ran), not killed.
    for job in ["again", "once"] {
        let ckpt = rig.work.path().join(format!("ckpt-{job}-0"));
        assert_eq!(
            std::fs::read_to_string(&ckpt).unwrap_or_default(),
            "checkpointed\n",
            "{job}'s checkpoint; planner log:\n{}",
            rig.c.planner_log()
        );
    }
    // `once` ended preempted: its submit --wait says so and exits 143.
    let out = waiting.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{err}");
    assert!(err.contains("once (id 2): preempted"), "{err}");
    assert!(err.contains("preempted by job urgent"), "{err}");
    let once = rig.status("once");
    assert_eq!(
        (once["status"].as_str(), once["preemptedBy"].as_str()),
        (Some("preempted"), Some("urgent")),
        "{once}"
    );
    // `again` waits again, and says who preempted it.
    let again = rig.status("again");
    assert_eq!(again["status"], "pending", "{again}");
    assert_eq!(again["preemptedBy"], "urgent", "{again}");
    let text = rig.c.cli(&rig.user, &["status", "again"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("Preempted by:    urgent"), "{text}");
    let explain = rig.c.cli(&rig.user, &["explain", "again"]);
    let explain = String::from_utf8_lossy(&explain.stdout);
    assert!(
        explain.contains("preemption: none: no running job may be preempted for it"),
        "{explain}"
    );

    // The urgent job ends: `again` runs once more, then ends when told.
    rig.touch("go-urgent");
    rig.wait_status("urgent", "completed", |j| j["status"] == "completed");
    rig.wait_status("again", "running again", all_running);
    rig.touch("go-again");
    let again = rig.wait_status("again", "completed", |j| j["status"] == "completed");
    assert_eq!(again["preemptedBy"], "urgent", "{again}");
    let log = rig.c.planner_log();
    assert!(log.contains("preempted"), "{log}");
}
