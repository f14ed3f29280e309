//! End-to-end (issue 39, holds and begin times) with the real `hyperplan-planner`,
//! `hyperplan-agent` and `hyperplan` binaries on 127.0.0.1: `submit --hold` waits with
//! `held by USER` while there is room, a job whose `begin` is far off waits with `begins
//! …`, both survive a planner restart, `submit --begin now+4seconds` starts by itself,
//! another user cannot release the job, and `release` starts it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::ha::MACHINE;
use common::{Cluster, all_running, path_str, task_user, wait_for};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(40);

fn job(c: &Cluster, user: &str, name: &str) -> Value {
    c.jobs(user, &[name]).remove(0)
}

fn ok(c: &Cluster, user: &str, args: &[&str]) -> String {
    c.ok(user, args)
}

/// Pending, and says why (once the planner has walked its jobs).
fn waits_with(c: &Cluster, user: &str, name: &str, reason: &str) {
    wait_for(LONG, &format!("{name}: {reason}"), || {
        let j = job(c, user, name);
        assert_eq!(j["status"], "pending", "{j}");
        (j["reason"] == reason).then_some(())
    });
}

#[test]
fn a_held_job_waits_across_a_restart_until_released() {
    let mut c = Cluster::start(&["n1"]);
    let user = task_user();
    c.issue_user(&user);
    c.issue_user("mallory");
    c.start_agent("n1", MACHINE, &[]);
    c.wait_state("n1", "Ready", LONG);
    let work = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let file = |name: &str, extra: &str| {
        c.write(
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\n{extra}tasks:\n  - name: t\n    replicas: 1\n    resources: {{cpu: 1}}\n    \
                 workingDir: {}\n    output: /dev/null\n    command: [sleep, '600']\n",
                path_str(work.path())
            ),
        )
    };
    let held = file("held", "");
    let later = file("later", "begin: \"2099-01-01T00:00\"\n");
    ok(&c, &user, &["submit", "--hold", path_str(&held)]);
    ok(&c, &user, &["submit", path_str(&later)]);
    // A relative begin time, resolved by the client: waits, then starts by itself.
    let soon = file("soon", "");
    let asked = std::time::Instant::now();
    ok(&c, &user, &["submit", "--begin", "now+4seconds", path_str(&soon)]);
    let j = job(&c, &user, "soon");
    assert_eq!(j["status"], "pending", "{j}");
    wait_for(LONG, "soon running", || {
        all_running(&job(&c, &user, "soon")).then_some(())
    });
    assert!(asked.elapsed() >= Duration::from_secs(3), "{:?}", asked.elapsed());
    let by = format!("held by {user}");
    waits_with(&c, &user, "held", &by);
    waits_with(&c, &user, "later", "begins 2099-01-01T00:00Z");
    let table = ok(&c, &user, &["explain", "held"]);
    assert!(table.contains(&by), "{table}");

    // Kept across a restart.
    let probe = file("probe", "");
    let addr = c.addr.clone();
    c.stop_planner();
    c.start_planner(&addr);
    c.wait_state("n1", "Ready", LONG);
    // A job submitted now starts in a walk that looked at `held` first (older, and
    // there is room for both): were the hold lost, `held` would run by then.
    ok(&c, &user, &["submit", path_str(&probe)]);
    wait_for(LONG, "probe running", || {
        all_running(&job(&c, &user, "probe")).then_some(())
    });
    waits_with(&c, &user, "held", &by);
    waits_with(&c, &user, "later", "begins 2099-01-01T00:00Z");

    // Another user may not release it; its owner may.
    let out = c.cli("mallory", &["release", "held"]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    // (Under `privateData` the job reads as missing.)
    assert!(
        e.contains("or an admin may release it") || e.contains("no job named \"held\""),
        "{e}"
    );
    assert_eq!(ok(&c, &user, &["release", "held"]), "released held\n");
    wait_for(LONG, "held running", || {
        all_running(&job(&c, &user, "held")).then_some(())
    });
    assert_eq!(job(&c, &user, "later")["status"], "pending");
    for j in ["held", "later", "soon", "probe"] {
        ok(&c, &user, &["cancel", j]);
    }
}
