//! `hyperplan demo` dies cleanly (issue 12 item 15): killed by SIGKILL it leaves no planner,
//! agent or CA key behind; SIGHUP (and SIGINT, SIGTERM) stop the children, remove the temp
//! dir and exit nonzero naming the signal; a job file that fails makes the demo fail.
//!
//! Every test runs the demo with `XDG_RUNTIME_DIR` and `TMPDIR` pointing into its own temp
//! dir, so what the demo leaves is visible there and nothing reaches `/tmp`; a Drop guard
//! SIGKILLs the demo and every child it saw, so a failing test leaves nothing running.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running `hyperplan demo`, its output collected by reader threads.
struct Demo {
    child: Option<Child>,
    pid: u32,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    /// Every child of the demo seen so far: killed on drop in case the demo did not.
    seen: Vec<u32>,
    /// The demo's XDG_RUNTIME_DIR and TMPDIR.
    base: tempfile::TempDir,
}

impl Drop for Demo {
    fn drop(&mut self) {
        let mut pids = self.seen.clone();
        pids.extend(children_of(self.pid));
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
        for pid in pids {
            kill("KILL", pid);
        }
    }
}

fn kill(signal: &str, pid: u32) {
    let _ = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

fn collect(mut r: impl Read + Send + 'static) -> Arc<Mutex<String>> {
    let buf = Arc::new(Mutex::new(String::new()));
    let b = buf.clone();
    std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = r.read(&mut chunk) {
            if n == 0 {
                break;
            }
            b.lock().unwrap().push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
    });
    buf
}

impl Demo {
    fn start(args: &[&str]) -> Demo {
        // The daemons must sit next to the CLI: built here when this run did not build them.
        common::bin("hyperplan-planner");
        common::bin("hyperplan-agent");
        let base = tempfile::tempdir().unwrap();
        let mut child = Command::new(common::hyperplan_bin())
            .arg("demo")
            .args(args)
            .env("XDG_RUNTIME_DIR", base.path())
            .env("TMPDIR", base.path())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = collect(child.stdout.take().unwrap());
        let stderr = collect(child.stderr.take().unwrap());
        Demo {
            pid: child.id(),
            child: Some(child),
            stdout,
            stderr,
            seen: Vec::new(),
            base,
        }
    }

    fn output(&self) -> String {
        format!(
            "stdout:\n{}\nstderr:\n{}",
            self.stdout.lock().unwrap(),
            self.stderr.lock().unwrap()
        )
    }

    /// Waits until the demo says the cluster keeps running; returns its children then.
    fn wait_running(&mut self) -> Vec<u32> {
        let start = Instant::now();
        while !self.stdout.lock().unwrap().contains("The cluster keeps running") {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("the demo exited ({status}) before running; {}", self.output());
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "the demo did not say it was running within 120 s; {}",
                self.output()
            );
            self.seen.extend(children_of(self.pid));
            std::thread::sleep(Duration::from_millis(100));
        }
        let children = children_of(self.pid);
        self.seen.extend(&children);
        children
    }

    /// The demo's directory, from the line naming where the certificates are.
    fn dir(&self) -> PathBuf {
        let certs = {
            let out = self.stdout.lock().unwrap();
            out.lines()
                .find_map(|l| l.split_once(" certificate in ").map(|(_, p)| p.trim().to_string()))
        };
        // (The lock is released first: `output` takes it again.)
        let certs = certs.unwrap_or_else(|| panic!("no certificate line; {}", self.output()));
        PathBuf::from(certs).parent().unwrap().to_path_buf()
    }

    fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                // Let the reader threads take the last of the output.
                std::thread::sleep(Duration::from_millis(200));
                return status;
            }
            assert!(
                start.elapsed() < timeout,
                "the demo did not exit within {timeout:?}; {}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The processes whose parent is `pid` (from /proc/*/stat), zombies left out.
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Some(child) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Some((ppid, state)) = stat(child)
            && ppid == pid
            && state != 'Z'
        {
            out.push(child);
        }
    }
    out
}

/// (parent pid, state) of a process.
fn stat(pid: u32) -> Option<(u32, char)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
    let rest = &text[text.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((ppid, state))
}

/// Alive and not a zombie (a reparented child may wait as a zombie for a reaper).
fn alive(pid: u32) -> bool {
    stat(pid).is_some_and(|(_, state)| state != 'Z')
}

fn assert_gone(pids: &[u32], within: Duration, demo: &Demo) {
    let start = Instant::now();
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
        if left.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < within,
            "children {left:?} still running {within:?} after the demo died; {}",
            demo.output()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn wait_removed(path: &Path, within: Duration) -> bool {
    let start = Instant::now();
    while path.exists() {
        if start.elapsed() > within {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

#[test]
fn sigkill_takes_the_children_and_the_ca_key_with_it() {
    let mut demo = Demo::start(&["--agents", "1", "--keep-running"]);
    let children = demo.wait_running();
    let dir = demo.dir();
    assert!(
        dir.starts_with(demo.base.path()),
        "the demo dir {} is not under XDG_RUNTIME_DIR {}",
        dir.display(),
        demo.base.path().display()
    );
    // The planner and the agent at least.
    assert!(children.len() >= 2, "children {children:?}; {}", demo.output());
    assert!(
        !dir.join("certs/ca.key").exists(),
        "the CA key stays on disk while the demo runs; {}",
        demo.output()
    );

    kill("KILL", demo.pid);
    demo.wait_exit(Duration::from_secs(5));
    assert_gone(&children, Duration::from_secs(10), &demo);
    assert!(
        !dir.join("certs/ca.key").exists(),
        "the CA key outlived the demo: {}",
        dir.display()
    );
    assert!(
        wait_removed(&dir, Duration::from_secs(10)),
        "{} outlived the demo by 10 s",
        dir.display()
    );
}

#[test]
fn sighup_stops_the_children_removes_the_dir_and_fails() {
    let mut demo = Demo::start(&["--agents", "1", "--keep-running"]);
    let children = demo.wait_running();
    let dir = demo.dir();
    assert!(dir.exists());

    kill("HUP", demo.pid);
    let status = demo.wait_exit(Duration::from_secs(20));
    assert!(
        status.code().is_some_and(|c| c != 0),
        "exit {status}: the demo must catch SIGHUP and exit nonzero; {}",
        demo.output()
    );
    assert!(
        demo.stderr.lock().unwrap().contains("SIGHUP"),
        "no message naming the signal; {}",
        demo.output()
    );
    // Stopped before it exited, not after.
    let left: Vec<u32> = children.iter().copied().filter(|&p| alive(p)).collect();
    assert!(
        left.is_empty(),
        "children {left:?} outlived the demo; {}",
        demo.output()
    );
    assert!(!dir.exists(), "{} outlived the demo", dir.display());
}

#[test]
fn a_job_file_that_does_not_parse_fails_the_demo() {
    let bad = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(bad.path(), "name: broken\ntasks:\n  - name: t\n    replicas: [\n").unwrap();
    let mut demo = Demo::start(&["--agents", "1", "--jobs", bad.path().to_str().unwrap()]);
    let status = demo.wait_exit(Duration::from_secs(120));
    assert!(!status.success(), "exit {status}; {}", demo.output());
    let name = bad.path().file_name().unwrap().to_str().unwrap();
    assert!(
        demo.stderr.lock().unwrap().contains(name),
        "the error does not name the job file; {}",
        demo.output()
    );
    assert_eq!(
        std::fs::read_dir(demo.base.path()).unwrap().count(),
        0,
        "the demo left files behind; {}",
        demo.output()
    );
}

#[test]
fn a_job_file_the_planner_refuses_fails_the_demo() {
    // Parses, but more tasks than the planner takes in one job (maxTasksPerJob, 100,000).
    let refused = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        refused.path(),
        "name: huge\ntasks:\n  - name: t\n    replicas: 200000\n    resources: {cpu: 1}\n",
    )
    .unwrap();
    let mut demo = Demo::start(&["--agents", "1", "--jobs", refused.path().to_str().unwrap()]);
    let status = demo.wait_exit(Duration::from_secs(120));
    assert!(!status.success(), "exit {status}; {}", demo.output());
    assert!(
        demo.stderr.lock().unwrap().contains("huge"),
        "the planner's refusal is not printed; {}",
        demo.output()
    );
    assert_eq!(
        std::fs::read_dir(demo.base.path()).unwrap().count(),
        0,
        "the demo left files behind; {}",
        demo.output()
    );
}
