//! End-to-end: `hyperplan logs` reads a task's output with the task user's rights, and
//! opens nothing but a regular file. The real daemons on 127.0.0.1 (`hyperplan-planner`,
//! `hyperplan-agent run --pin on` as root), tasks as `hyperplan-e2e`: each task replaces
//! its own output file with a link (`ln -sf TARGET OUT`), and `hyperplan logs` must then
//! refuse, saying nothing the user could not see for themselves, and disturb nothing.
//!
//! Needs root (the agent reads as another user; the targets are root's): skipped
//! otherwise.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::live::{LONG, Live, set_mode};
use common::{alive, euid_is_root, path_str, wait_for};

/// The output file of job `name`'s only task (the default `hyperplan-%j-%t.out`).
fn output(live: &Live, name: &str) -> PathBuf {
    live.work.path().join(format!("hyperplan-{name}-t-0.out"))
}

/// Runs job `name`, whose task, as the user, replaces its output file with a link to
/// `target`, to its end.
fn link_output(live: &Live, name: &str, target: &Path) {
    let job = live.job(
        name,
        &format!(
            "tasks:\n  - name: t\n    replicas: 1\n    resources: {{cpu: 1}}\n    \
             workingDir: WORKDIR\n    command: [sh, -c, 'ln -sf \"$0\" {}', {}]\n",
            path_str(&output(live, name)),
            path_str(target),
        ),
    );
    let (code, err) = live.submit_wait(&job);
    assert_eq!(code, 0, "{err}\nagent log:\n{}", live.agent_log("n1"));
    let link = std::fs::read_link(output(live, name)).unwrap();
    assert_eq!(link, target, "the task replaced its output with a link");
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether process `pid` sleeps in `openat` (a FIFO's writer waiting for a reader).
fn blocked_in_open(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let sleeping = stat.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('S'));
    let syscall = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
    sleeping && syscall.split_whitespace().next() == Some(&libc::SYS_openat.to_string())
}

/// A child killed when dropped: a failed test leaves no writer waiting.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn logs_of_an_output_swapped_for_a_link_read_with_the_users_rights_only() {
    if !euid_is_root() {
        eprintln!("SKIPPED: needs root (the agent reads as the task's user; the targets are root's)");
        return;
    }
    let live = Live::start(&["n1"]);
    // Root's: a directory anyone may enter, and one only root may.
    let targets = tempfile::tempdir().unwrap();
    set_mode(targets.path(), 0o755);
    let private = targets.path().join("private");
    std::fs::create_dir(&private).unwrap();
    set_mode(&private, 0o700);
    // A FIFO only root can reach, and its writer waiting in `open` for a reader: a
    // reader's open would release it, and once that reader closed, its write would die
    // of SIGPIPE.
    let fifo = private.join("fifo");
    run(Command::new("mkfifo").arg("-m0666").arg(&fifo));
    let mut writer = Reaped(
        Command::new("sh")
            .args(["-c", "echo written > \"$0\""])
            .arg(&fifo)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let writer_pid = writer.0.id();
    wait_for(LONG, "the FIFO's writer waiting in open", || {
        blocked_in_open(writer_pid).then_some(())
    });
    // A device (a copy of /dev/null, root's, 0600) the user can see but not read.
    let device = targets.path().join("null");
    run(Command::new("mknod").arg("-m0600").arg(&device).args(["c", "1", "3"]));
    // Root's secret, where the user can see it.
    let secret = targets.path().join("secret");
    std::fs::write(&secret, "root's secret\n").unwrap();
    set_mode(&secret, 0o600);

    for (name, target, want) in [
        ("fifo", &fifo, "Permission denied"),
        ("device", &device, "not a regular file"),
        ("secret", &secret, "Permission denied"),
    ] {
        link_output(&live, name, target);
        let out = live.cli(&["logs", name]);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(!out.status.success(), "{name}: {stdout}");
        assert!(stdout.is_empty(), "{name}: {stdout}");
        // The output's own name, then the user's own error, and nothing else.
        let output = format!("{}: ", path_str(&output(&live, name)));
        let error = stderr.split_once(&output).map(|(_, e)| e).unwrap_or_default();
        assert!(error.starts_with(want), "{name}: {stderr}");
        for secret in ["uid", "owned", "exist", "secret", "root"] {
            assert!(!error.contains(secret), "{name}: {stderr}");
        }
        // The writer was not released.
        assert!(alive(u64::from(writer_pid)), "{name}: the FIFO's writer died");
        assert!(blocked_in_open(writer_pid), "{name}: the FIFO's writer was released");
    }

    // The writer is still waiting for its first reader: that one gets what it writes,
    // and it ends well (no SIGPIPE).
    let mut text = String::new();
    std::fs::File::open(&fifo).unwrap().read_to_string(&mut text).unwrap();
    assert_eq!(text, "written\n");
    assert!(writer.0.wait().unwrap().success());
}
