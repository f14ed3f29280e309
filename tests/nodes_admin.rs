//! End-to-end (issue 26): an admin drains, resumes and removes nodes with the real
//! `hyperplan-planner`, `hyperplan-agent` and `hyperplan` binaries on 127.0.0.1. A plain
//! user is refused; a drained node's task runs on while nothing new goes there; `--now`
//! kills it and its job (`requeue: true`) runs again elsewhere; the drain, its reason and
//! who said it survive a planner restart; a busy node cannot be removed, an idle drained
//! one can, and its agent, registering again, joins anew.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::ha::MACHINE;
use common::{Cluster, alive, all_running, path_str, pids, task_user, wait_for};
use serde_json::Value;

const NODES: [&str; 3] = ["n1", "n2", "n3"];
const LONG: Duration = Duration::from_secs(40);

fn node(c: &Cluster, name: &str) -> Option<Value> {
    let v = c.cli_json("root", &["nodes"]);
    v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .cloned()
}

fn job(c: &Cluster, user: &str, name: &str) -> Value {
    c.jobs(user, &[name]).remove(0)
}

/// The node of the job's one task once it runs, and its pid.
fn running_on(c: &Cluster, user: &str, name: &str) -> (String, u64) {
    wait_for(LONG, &format!("{name} running"), || {
        let j = job(c, user, name);
        if !all_running(&j) {
            return None;
        }
        Some((j["tasks"][0]["node"].as_str()?.to_string(), *pids(&j).first()?))
    })
}

fn ok(c: &Cluster, user: &str, args: &[&str]) -> String {
    c.ok(user, args)
}

fn refused(c: &Cluster, user: &str, args: &[&str]) -> String {
    let out = c.cli(user, args);
    assert!(!out.status.success(), "{args:?} should fail");
    String::from_utf8(out.stderr).unwrap()
}

#[test]
fn drain_resume_remove_as_an_admin_across_a_restart() {
    let mut c = Cluster::start(&NODES);
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
    let submit = |name: &str, extra: &str| {
        let file = c.write(
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\n{extra}tasks:\n  - name: t\n    replicas: 1\n    resources: {{cpu: 4}}\n    \
                 workingDir: {}\n    output: /dev/null\n    command: [sleep, '600']\n",
                path_str(work.path())
            ),
        );
        ok(&c, &user, &["submit", path_str(&file)]);
    };

    submit("long", "requeue: true\n");
    let (x, old_pid) = running_on(&c, &user, "long");

    // A plain user may not; an unknown node is named.
    let e = refused(&c, "alice", &["nodes", "drain", &x]);
    assert!(e.contains("only an admin may drain nodes"), "{e}");
    let e = refused(&c, "root", &["nodes", "drain", "nope"]);
    assert!(e.contains("no node named \"nope\""), "{e}");

    // Drained: the task runs on; a new job goes elsewhere.
    let said = ok(&c, "root", &["nodes", "drain", &x, "--reason", "firmware 4.2"]);
    assert_eq!(said, format!("{x}: draining: 1 task(s) run on until they end\n"));
    let table = ok(&c, "root", &["nodes"]);
    let row = table.lines().find(|l| l.starts_with(&x)).unwrap();
    assert!(row.contains(" draining "), "{table}");
    assert!(table.contains(&format!("{x}: draining by root since ")), "{table}");
    assert!(table.contains(": firmware 4.2"), "{table}");
    submit("next", "");
    let (y, _) = running_on(&c, &user, "next");
    assert_ne!(x, y);
    assert!(alive(old_pid), "the drained node's task runs on");

    // Now: the task is killed, its job runs again on the one node left.
    let said = ok(&c, "root", &["nodes", "drain", &x, "--now", "--reason", "firmware 4.2"]);
    assert!(said.contains("drained: its 1 task(s) end now"), "{said}");
    wait_for(LONG, "the drained node's task gone", || (!alive(old_pid)).then_some(()));
    let (z, _) = running_on(&c, &user, "long");
    assert!(z != x && z != y, "{x} {y} {z}");
    let d = node(&c, &x).unwrap()["drain"].clone();
    assert_eq!((d["state"].as_str(), d["by"].as_str()), (Some("drained"), Some("root")));

    // Kept across a restart, and shown once its agent is back.
    let addr = c.addr.clone();
    c.stop_planner();
    c.start_planner(&addr);
    c.wait_state(&x, "Ready", LONG);
    let d = node(&c, &x).unwrap()["drain"].clone();
    assert_eq!(d["reason"], "firmware 4.2", "{d}");
    assert_eq!(d["state"], "drained", "{d}");

    // Remove: refused for a busy node, done for the drained idle one.
    let e = refused(&c, "root", &["nodes", "remove", &y]);
    assert!(e.contains(&format!("node {y} runs 1 task(s) (of next)")), "{e}");
    let said = ok(&c, "root", &["nodes", "remove", &x]);
    assert!(said.starts_with(&format!("{x}: removed")), "{said}");
    assert!(node(&c, &x).is_none(), "removed");
    // Its agent, started again, joins anew: Ready and not drained.
    c.kill_agent(&x);
    c.start_agent(&x, MACHINE, &[]);
    c.wait_state(&x, "Ready", LONG);
    assert!(node(&c, &x).unwrap().get("drain").is_none());

    // Resume: drained again, then back in service.
    ok(&c, "root", &["nodes", "drain", &x]);
    let said = ok(&c, "root", &["nodes", "resume", &x]);
    assert_eq!(said, format!("{x}: resumed: it takes tasks again\n"));
    assert!(node(&c, &x).unwrap().get("drain").is_none());
    for j in ["long", "next"] {
        ok(&c, &user, &["cancel", j]);
    }
}
