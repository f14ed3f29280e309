//! Finding and stopping every process of a task by its cgroups, whatever the task did with
//! sessions and process groups (`setsid`, double forks): membership is the kernel's, and a
//! task's processes cannot leave (the `cgroup.procs` files are root's).
//!
//! [`kill_all`] uses `cgroup.kill` where a cgroup has one (v2, also the hybrid layout's
//! unified mount): one write kills the whole subtree, forks in flight included. Otherwise
//! it freezes (v1 `freezer.state`, v2 `cgroup.freeze`), sends SIGKILL to every process
//! listed, and thaws, so nothing forks between the listing and the kill; then it waits
//! until the cgroups are empty. [`signal_all`] passes a signal (the SIGTERM of a cancel or
//! a time limit) to every process listed.
//!
//! Used by the shepherd (a task's end, its cancel and time limit) and by the agent (a
//! shepherd that died, an end being acknowledged). Paths come from the agent's own spec
//! files, checked by [`super::TaskCgroups::named_in_spec`].

#![allow(unsafe_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::read_bounded;

/// How long a freeze may take to settle before the kill goes ahead anyway.
const FREEZE_SETTLE: Duration = Duration::from_millis(200);
/// Between looks at the cgroups while waiting for them to empty.
const POLL: Duration = Duration::from_millis(1);

/// The processes listed in `dir/cgroup.procs`; none when it cannot be read.
pub fn procs(dir: &Path) -> Vec<u32> {
    read_bounded(&dir.join("cgroup.procs"))
        .map(|text| {
            text.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok())
                .filter(|&p| p > 0)
                .collect()
        })
        .unwrap_or_default()
}

/// Every process in any of `dirs`, each once, in order.
pub fn members(dirs: &[PathBuf]) -> Vec<u32> {
    let mut all: Vec<u32> = dirs.iter().flat_map(|d| procs(d)).collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// Sends `signal` to every process in the task's cgroups; returns how many.
pub fn signal_all(dirs: &[PathBuf], signal: i32) -> usize {
    let all = members(dirs);
    for &pid in &all {
        send(pid, signal);
    }
    all.len()
}

/// Kills every process in the task's cgroups and waits up to `wait` for them to be
/// empty, calling `between` at each look (the shepherd reaps there). Returns how many
/// processes were still listed at the end (0: all gone).
pub fn kill_all(dirs: &[PathBuf], wait: Duration, between: &mut dyn FnMut()) -> usize {
    // Already empty (a task that ended whole): nothing to freeze or kill.
    if members(dirs).is_empty() {
        return 0;
    }
    let kill_file = dirs.iter().map(|d| d.join("cgroup.kill")).find(|p| p.is_file());
    let deadline = Instant::now() + wait;
    loop {
        match &kill_file {
            Some(file) => {
                if let Err(e) = std::fs::write(file, "1") {
                    tracing::debug!(file = %file.display(), "cgroup.kill: {e}");
                    kill_frozen(dirs);
                }
            }
            None => kill_frozen(dirs),
        }
        between();
        let left = members(dirs).len();
        if left == 0 || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(POLL);
    }
}

/// Freeze, SIGKILL everything listed, thaw (a cgroup without a freezer: just the kill).
fn kill_frozen(dirs: &[PathBuf]) {
    let freezer = dirs.iter().find_map(|d| Freezer::of(d));
    if let Some(f) = &freezer {
        f.set(true);
        f.settle();
    }
    for pid in members(dirs) {
        send(pid, libc::SIGKILL);
    }
    if let Some(f) = &freezer {
        f.set(false);
    }
}

/// A cgroup's freezer: v1's `freezer.state` or v2's `cgroup.freeze`.
enum Freezer {
    V1(PathBuf),
    V2(PathBuf),
}

impl Freezer {
    fn of(dir: &Path) -> Option<Freezer> {
        let v1 = dir.join("freezer.state");
        let v2 = dir.join("cgroup.freeze");
        if v1.is_file() {
            Some(Freezer::V1(dir.to_path_buf()))
        } else if v2.is_file() {
            Some(Freezer::V2(dir.to_path_buf()))
        } else {
            None
        }
    }

    fn set(&self, frozen: bool) {
        let (file, value) = match self {
            Freezer::V1(d) => (d.join("freezer.state"), if frozen { "FROZEN" } else { "THAWED" }),
            Freezer::V2(d) => (d.join("cgroup.freeze"), if frozen { "1" } else { "0" }),
        };
        if let Err(e) = std::fs::write(&file, value) {
            tracing::debug!(file = %file.display(), "cannot write {value}: {e}");
        }
    }

    /// Waits (briefly) until the freeze took: a process in the middle of a fork or in
    /// uninterruptible sleep freezes a moment later.
    fn settle(&self) {
        let deadline = Instant::now() + FREEZE_SETTLE;
        while Instant::now() < deadline {
            let done = match self {
                Freezer::V1(d) => read_bounded(&d.join("freezer.state")).is_ok_and(|s| s.trim() == "FROZEN"),
                Freezer::V2(d) => {
                    read_bounded(&d.join("cgroup.events")).is_ok_and(|s| s.lines().any(|l| l.trim() == "frozen 1"))
                }
            };
            if done {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn send(pid: u32, signal: i32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return };
    if pid <= 1 {
        return;
    }
    // SAFETY: kill with a positive pid signals that one process; no memory is involved.
    unsafe { libc::kill(pid, signal) };
}

/// Against this machine's real hierarchies (v1 freezer, and the hybrid unified mount when
/// there), as root: processes that left their session and process group are found and
/// killed. Skipped, saying why, elsewhere.
#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::process::{Command, Stdio};

    use super::*;

    /// A fresh cgroup of `hierarchy` (under the root's), or None (skipped) when this
    /// machine or user cannot have one.
    fn cgroup(hierarchy: &str, probe: &str) -> Option<PathBuf> {
        let base = Path::new(super::super::CGROUP_ROOT).join(hierarchy);
        if crate::shepherd::current_euid() != 0 || !base.join(probe).is_file() {
            eprintln!("SKIPPED: needs root and {}", base.join(probe).display());
            return None;
        }
        let dir = base.join(format!("hp-kill-test-{}-{hierarchy}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        Some(dir)
    }

    /// A shell in `dir` that starts a setsid'd, double-forked sleeper and prints its pid.
    fn escapee(dir: &Path) -> (std::process::Child, u32) {
        let procs = dir.join("cgroup.procs");
        let script = format!(
            "echo $$ > {}; setsid sh -c 'sleep 300 & echo $!' & wait; sleep 300",
            procs.display()
        );
        let mut child = Command::new("sh")
            .args(["-c", &script])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        (child, line.trim().parse().unwrap())
    }

    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rsplit(')').next().is_some_and(|r| !r.trim_start().starts_with('Z')))
    }

    fn check(dir: PathBuf) {
        let (mut child, sleeper) = escapee(&dir);
        assert!(alive(sleeper));
        let members = members(std::slice::from_ref(&dir));
        assert!(members.contains(&sleeper) && members.len() >= 2, "{members:?}");
        let left = kill_all(std::slice::from_ref(&dir), Duration::from_secs(5), &mut || {});
        assert_eq!(left, 0);
        child.wait().unwrap();
        // The sleeper's parent (init here) reaps it; it is dead either way.
        for _ in 0..500 {
            if !alive(sleeper) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!alive(sleeper), "the setsid'd sleeper {sleeper} survived");
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn the_v1_freezer_kills_what_left_the_session() {
        if let Some(dir) = cgroup("freezer", "cgroup.procs") {
            check(dir);
        }
    }

    #[test]
    fn cgroup_kill_kills_what_left_the_session() {
        if let Some(dir) = cgroup("unified", "cgroup.procs") {
            assert!(dir.join("cgroup.kill").is_file(), "kernel without cgroup.kill");
            check(dir);
        }
    }

    #[test]
    fn empty_or_missing_cgroups_are_nothing_to_kill() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cgroup.procs"), "").unwrap();
        let dirs = [dir.path().to_path_buf(), dir.path().join("gone")];
        assert_eq!(kill_all(&dirs, Duration::ZERO, &mut || {}), 0);
        assert_eq!(signal_all(&dirs, 0), 0);
        // Garbage and pids 0/1 are never signalled.
        std::fs::write(dir.path().join("cgroup.procs"), "0\n1\nx\n-5\n").unwrap();
        assert_eq!(members(&dirs), [1]);
    }
}
