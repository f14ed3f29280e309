//! End-to-end (issue 43): node health checks with the real `hyperplan-planner`,
//! `hyperplan-agent` and `hyperplan` binaries on 127.0.0.1. The agent of n1 runs a site
//! script (as NHC would be run) every second; when it fails, n1 is drained by health
//! with the script's first line as the reason, its running task runs on and new work goes
//! to n2; when it passes again, n1 returns by itself after `[health] returnAfter`. A
//! script that hangs fails `timeout` and is killed, and the agent's link stays up
//! meanwhile. (That an admin's drain is never undone by health is `core/tests/checks.rs`.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::ha::MACHINE;
use common::{Cluster, all_running, path_str, task_user, wait_for};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(40);

fn node(c: &Cluster, name: &str) -> Value {
    let v = c.cli_json("root", &["nodes"]);
    v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .cloned()
        .unwrap()
}

fn drain_by(c: &Cluster, name: &str) -> Option<String> {
    node(c, name)["drain"]["by"].as_str().map(str::to_string)
}

#[test]
fn a_failing_site_script_drains_its_node_until_it_passes_again() {
    let mut c = Cluster::start_with(&["n1", "n2"], Some("[health]\nreturnAfter = 2\n"));
    let user = task_user();
    c.issue_user(&user);
    let dir = c.dir_str();
    // The site's check: healthy unless `sick` says what is wrong; `hang` makes it hang.
    let script = c.write(
        "check.sh",
        &format!(
            "if [ -e {dir}/hang ]; then exec sleep 600; fi\n\
             if [ -e {dir}/sick ]; then cat {dir}/sick; exit 1; fi\nexit 0\n"
        ),
    );
    let agent_toml = c.write(
        "agent-n1.toml",
        &format!(
            "[health]\ninterval = 1\ntimeout = 5\nscript = [\"/bin/sh\", \"{}\"]\nscriptInterval = 1\nscriptTimeout = 2\n",
            path_str(&script)
        ),
    );
    c.start_agent_with("n1", MACHINE, &[], &["--config", path_str(&agent_toml)]);
    c.start_agent("n2", MACHINE, &[]);
    c.wait_state("n1", "Ready", LONG);
    c.wait_state("n2", "Ready", LONG);
    assert_eq!(drain_by(&c, "n1"), None, "healthy: {}", node(&c, "n1"));

    // The script fails: n1 is drained by health, saying why.
    std::fs::write(c.dir.path().join("sick"), "GPU 3 fell off the bus\nmore detail\n").unwrap();
    wait_for(LONG, "n1 drained by health", || {
        (drain_by(&c, "n1").as_deref() == Some("health")).then_some(())
    });
    let n1 = node(&c, "n1");
    assert_eq!(n1["drain"]["reason"], "script: GPU 3 fell off the bus", "{n1}");
    assert_eq!(n1["health"][0]["check"], "script", "{n1}");
    assert_eq!(n1["health"][0]["state"], "failed", "{n1}");
    let table = c.ok("root", &["nodes"]);
    assert!(
        table.contains("n1: drained by health since ") && table.contains(": script: GPU 3 fell off the bus"),
        "{table}"
    );
    assert!(
        table.contains("health:\n  n1: script failed (script): GPU 3 fell off the bus"),
        "{table}"
    );

    // New work goes to n2.
    let work = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let file = c.write(
        "j.yaml",
        &format!(
            "name: j\ntasks:\n  - name: t\n    replicas: 1\n    resources: {{cpu: 1}}\n    \
             workingDir: {}\n    output: /dev/null\n    command: [sleep, '600']\n",
            path_str(work.path())
        ),
    );
    c.ok(&user, &["submit", path_str(&file)]);
    let on = wait_for(LONG, "j running", || {
        let j = c.jobs(&user, &["j"]).remove(0);
        all_running(&j).then(|| j["tasks"][0]["node"].as_str().map(str::to_string))?
    });
    assert_eq!(on, "n2");

    // Healthy again: it returns by itself.
    std::fs::remove_file(c.dir.path().join("sick")).unwrap();
    wait_for(LONG, "n1 back", || drain_by(&c, "n1").is_none().then_some(()));
    assert!(node(&c, "n1")["health"].is_null(), "{}", node(&c, "n1"));

    // A script that hangs fails `timeout`; the link stays up (n1 Ready throughout).
    std::fs::write(c.dir.path().join("hang"), "").unwrap();
    wait_for(LONG, "n1 drained for a hung script", || {
        let n = node(&c, "n1");
        (n["health"][0]["code"] == "timeout").then_some(())
    });
    assert_eq!(node(&c, "n1")["state"], "Ready");
    assert_eq!(drain_by(&c, "n1").as_deref(), Some("health"));
    std::fs::remove_file(c.dir.path().join("hang")).unwrap();
    wait_for(LONG, "n1 back after the hang", || {
        drain_by(&c, "n1").is_none().then_some(())
    });
}
