//! End-to-end (issue 38, item d): files in `/dev/shm` and `/tmp` no longer outlive their
//! job. The real planner and agent (`--private-tmp on`), a real user: each job gets its own
//! `/tmp` and `/dev/shm` on the node, shared by its tasks there and by its `hyperplan
//! exec` steps, never seen in the node's, and removed when its last task here ends.
//!
//! Needs root (a mount namespace, the job's directories, users); elsewhere it says SKIPPED.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::live::{LONG, Live};
use common::{path_str, wait_for};

/// Every path below `dir` whose name starts with `tag` (what the job wrote, wherever).
fn found(dir: &Path, tag: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let path = e.path();
            if e.file_name().to_string_lossy().starts_with(tag) {
                out.push(path.clone());
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            }
        }
    }
    out
}

fn can_run() -> bool {
    if !common::euid_is_root() {
        eprintln!("SKIPPED: a job's own /tmp and /dev/shm need root (a mount namespace, a user to give them to)");
        return false;
    }
    true
}

/// Tasks (and a step) forked by the agent.
#[test]
fn a_job_s_tmp_and_dev_shm_are_its_own_and_go_with_it() {
    if !can_run() {
        return;
    }
    let live = Live::start_with(&["n1"], &["--private-tmp", "on"]);
    job_keeps_its_files_to_itself(&live, "a");
}

/// A launcher that is stopped (SIGKILL) on drop: its shepherds and steps outlive it.
struct Launcher(std::process::Child);

impl Drop for Launcher {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Tasks and the step started by the launcher, as the shipped units do.
#[test]
fn through_the_launcher_too() {
    if !can_run() {
        return;
    }
    let mut live = Live::prepare(&["n1"]);
    let dir = live.c.dir.path().join("launcher");
    let socket = dir.join("launcher.sock");
    let log_path = dir.join("launcher.log");
    std::fs::create_dir_all(&dir).unwrap();
    let log = std::fs::File::create(&log_path).unwrap();
    let _launcher = Launcher(
        std::process::Command::new(common::bin("hyperplan-agent"))
            .args(["launcher", "--config", "/dev/null", "--socket"])
            .arg(&socket)
            .arg("--state-dir")
            .arg(live.state_dir("n1"))
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .env("RUST_LOG", "info")
            .spawn()
            .unwrap(),
    );
    wait_for(LONG, "the launcher listening", || {
        std::fs::read_to_string(&log_path)
            .unwrap_or_default()
            .contains("launcher ready")
            .then_some(())
    });
    live.agent_args = ["--launcher", path_str(&socket), "--private-tmp", "on"]
        .map(String::from)
        .to_vec();
    live.start_agent("n1");
    live.c.wait_state("n1", "Ready", LONG);
    job_keeps_its_files_to_itself(&live, "b");
}

/// A job of two ranks on n1 (named `shm-<name>`): each writes into /tmp and /dev/shm and
/// reads the other's there, a step reads both, none of it reaches the node's, and the
/// job's directories go when it ends.
fn job_keeps_its_files_to_itself(live: &Live, name: &str) {
    let tag = format!("hp-e2e-jobtmp-{}-{name}", std::process::id());
    let name = format!("shm-{name}");
    // Two ranks on the node: each writes into /tmp and /dev/shm, waits for the other's
    // files there, says what it read and who owns /tmp and /dev/shm, then waits for the
    // test's go (a file in its working directory, which is the node's).
    let script = format!(
        "echo $RANK > /tmp/{tag}.$RANK && echo $RANK > /dev/shm/{tag}.$RANK && \
         other=$((1 - RANK)) && \
         until [ -e /tmp/{tag}.$other ] && [ -e /dev/shm/{tag}.$other ]; do sleep 0.1; done && \
         cat /tmp/{tag}.$other /dev/shm/{tag}.$other && stat -c '%U %a' /tmp /dev/shm && \
         until [ -e go ]; do sleep 0.1; done"
    );
    let job = live.job(
        &name,
        &format!(
            "timeLimit: 120\ntasks:\n  - name: w\n    replicas: 2\n    resources: {{cpu: 1}}\n    \
             workingDir: WORKDIR\n    command: [sh, -c, {script:?}]\n"
        ),
    );
    let out = live.cli(&["submit", path_str(&job)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j = live.wait_running(&name);
    let id = j["id"].as_u64().unwrap();
    let state = live.state_dir("n1");
    let tmp_dir = state.join("jobtmp").join(format!("{name}.{id}"));
    let shm_dir = hyperplan_agent::shepherd::jobtmp::shm_base(&state).join(format!("{name}.{id}"));
    // What the ranks wrote is in the job's directories on the node, and in no other.
    wait_for(LONG, "both ranks' files in the job's /tmp and /dev/shm", || {
        let all = (0..2).all(|r| {
            tmp_dir.join("tmp").join(format!("{tag}.{r}")).is_file()
                && shm_dir.join("shm").join(format!("{tag}.{r}")).is_file()
        });
        all.then_some(())
    });
    for r in 0..2 {
        let out = wait_for(LONG, "the rank's report", || {
            let out = live.output(&name, &format!("w-{r}"));
            (out.lines().count() >= 4).then_some(out)
        });
        let other = 1 - r;
        assert_eq!(
            out,
            format!("{other}\n{other}\n{u} 700\n{u} 700\n", u = live.user),
            "rank {r} read rank {other}'s files; /tmp and /dev/shm are the user's own"
        );
    }
    // A step of the job sees the same ones.
    let out = live.cli(&[
        "exec",
        &name,
        "--",
        "sh",
        "-c",
        &format!("cat /tmp/{tag}.0 /dev/shm/{tag}.1"),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "0\n1\n");
    // Where the ranks and the step wrote without a /tmp and /dev/shm of their own.
    for name in [format!("{tag}.0"), format!("{tag}.1")] {
        assert!(!Path::new("/tmp").join(&name).exists(), "/tmp/{name} on the node");
        assert!(
            !Path::new("/dev/shm").join(&name).exists(),
            "/dev/shm/{name} on the node"
        );
    }

    // The job ends: its directories go, and what it wrote with them.
    std::fs::write(live.work.path().join("go"), "").unwrap();
    let j = live.wait_status(&name, "completed");
    assert_eq!(j["exitCode"], 0, "{j}");
    wait_for(Duration::from_secs(30), "the job's directories removed", || {
        (!tmp_dir.exists() && !shm_dir.exists()).then_some(())
    });
    wait_for(
        Duration::from_secs(30),
        "nothing the job wrote left on the node",
        || {
            let left: Vec<PathBuf> = [
                found(&state, &tag),
                found(Path::new(hyperplan_agent::shepherd::jobtmp::SHM_ROOT), &tag),
            ]
            .concat();
            left.is_empty().then_some(())
        },
    );
    for name in [format!("{tag}.0"), format!("{tag}.1")] {
        assert!(!Path::new("/tmp").join(&name).exists(), "/tmp/{name} on the node");
        assert!(
            !Path::new("/dev/shm").join(&name).exists(),
            "/dev/shm/{name} on the node"
        );
    }
}
