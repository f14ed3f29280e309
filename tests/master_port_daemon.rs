//! End-to-end (issue 38): another local user who binds a job's default `MASTER_PORT`
//! (29500 + id mod 1000) first no longer makes the job fail (or answers its rendezvous):
//! the agent reports the range's bound ports with its heartbeats, and the planner gives
//! the job a free one on rank 0's node. Real planner, agent and CLI on 127.0.0.1; the
//! squatter is a second ordinary user.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::ha::MACHINE;
use common::{Cluster, path_str, task_user, wait_for};

const LONG: Duration = Duration::from_secs(40);
/// Not the one on PATH: a pyenv shim under /root is not for the other users.
const PYTHON: &str = "/usr/bin/python3";

/// A process of `user` listening on `port` until killed.
struct Squatter(Child);

impl Drop for Squatter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn squat(user: &str, port: u16) -> Squatter {
    let script = format!(
        "import socket, time\ns = socket.socket()\ns.bind(('0.0.0.0', {port}))\ns.listen()\nprint('bound', flush=True)\ntime.sleep(600)\n"
    );
    let mut child = Command::new("setpriv")
        .args(["--reuid", user, "--regid", user, "--init-groups", PYTHON, "-c", &script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "bound", "the squatter could not bind {port}");
    Squatter(child)
}

#[test]
fn a_port_another_user_bound_first_is_not_the_jobs() {
    if !common::euid_is_root() {
        eprintln!("skipped: needs root (a second user binds the port)");
        return;
    }
    if !std::path::Path::new(PYTHON).exists() {
        eprintln!("skipped: needs {PYTHON}");
        return;
    }
    let mut c = Cluster::start(&["n1"]);
    let user = task_user();
    c.issue_user(&user);
    c.start_agent("n1", MACHINE, &[]);
    c.wait_state("n1", "Ready", LONG);
    let work = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let job = |name: &str, script: &str| {
        c.write(
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\ntasks:\n  - name: t\n    replicas: 1\n    resources: {{cpu: 1}}\n    \
                 workingDir: {}\n    output: {name}.out\n    command: [/usr/bin/python3, -c, '{script}']\n",
                path_str(work.path())
            ),
        )
    };

    // The next job's id, and so its default port.
    let out = c.cli(&user, &["submit", "--wait", path_str(&job("first", "pass"))]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let id = c.jobs(&user, &["first"])[0]["id"].as_u64().unwrap() + 1;
    let port = hyperplan_shared::taskenv::default_master_port(id);
    common::ensure_user("hp-intruder");
    let _squatter = squat("hp-intruder", port);
    wait_for(LONG, "the planner told of the bound port", || {
        c.planner_log()
            .lines()
            .any(|l| l.contains("MASTER_PORT range ports bound now") && l.contains(&port.to_string()))
            .then_some(())
    });

    let binds = "import os, socket; p = int(os.environ[\"MASTER_PORT\"]); s = socket.socket(); \
                 s.bind((\"0.0.0.0\", p)); s.listen(); print(\"bound\", p)";
    let out = c.cli(&user, &["submit", "--wait", path_str(&job("rendezvous", binds))]);
    let said = std::fs::read_to_string(work.path().join("rendezvous.out")).unwrap_or_default();
    assert!(
        out.status.success(),
        "the job could not bind its MASTER_PORT: {}\n{said}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(c.jobs(&user, &["rendezvous"])[0]["id"].as_u64(), Some(id));
    let bound: u16 = said.trim().strip_prefix("bound ").unwrap().parse().unwrap();
    assert_ne!(bound, port, "{said}");
    assert!(hyperplan_shared::taskenv::in_master_range(bound));
}
