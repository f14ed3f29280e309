//! Finding a task's processes without a cgroup (a node confined by affinity, or not
//! pinned), from `/proc`:
//!
//! - by ancestry: the shepherd is a child subreaper, so every descendant of the task,
//!   however it detached (`setsid`, double fork), stays below the shepherd while the
//!   shepherd lives ([`descendants`]);
//! - by session: the shepherd leads the session its task runs in ([`session`]);
//! - by user and start time, once the shepherd is gone: the user's processes started
//!   since the task started that no live shepherd owns ([`orphans_of`]).
//!
//! `/proc` is read with bounded reads; a process that goes away mid-scan is skipped.

#![allow(unsafe_code)]

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

/// What one `/proc/PID/stat` says that the sweep uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    pub ppid: u32,
    pub session: u32,
    /// Clock ticks after boot.
    pub start_ticks: u64,
    pub zombie: bool,
}

/// Parses `/proc/PID/stat` (the command in parentheses may hold anything).
pub fn parse_stat(pid: u32, text: &str) -> Option<Proc> {
    let rest = text.get(text.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state(3) ppid(4) pgrp(5) session(6) … starttime(22).
    Some(Proc {
        pid,
        zombie: *fields.first()? == "Z",
        ppid: fields.get(1)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}

/// Every process now (from `proc_root`, normally `/proc`).
pub fn all(proc_root: &Path) -> Vec<Proc> {
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(text) = read_small(&entry.path().join("stat"))
            && let Some(p) = parse_stat(pid, &text)
        {
            out.push(p);
        }
    }
    out.sort_by_key(|p| p.pid);
    out
}

/// The live descendants of `root` (not `root` itself).
pub fn descendants(procs: &[Proc], root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for p in procs {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let zombies: HashSet<u32> = procs.iter().filter(|p| p.zombie).map(|p| p.pid).collect();
    let mut out = Vec::new();
    let mut stack = vec![root];
    let mut seen = HashSet::from([root]);
    while let Some(pid) = stack.pop() {
        for &child in children.get(&pid).map_or(&[][..], Vec::as_slice) {
            if seen.insert(child) {
                if !zombies.contains(&child) {
                    out.push(child);
                }
                stack.push(child);
            }
        }
    }
    out.sort_unstable();
    out
}

/// The live members of session `sid` (its leader included).
pub fn session(procs: &[Proc], sid: u32) -> Vec<u32> {
    procs
        .iter()
        .filter(|p| p.session == sid && !p.zombie && sid > 1)
        .map(|p| p.pid)
        .collect()
}

/// Processes of `uid` started at or after `since_ms` (wall clock), except `keep` (the
/// processes of tasks that still run): what a task left behind once its shepherd is gone.
pub fn orphans_of(proc_root: &Path, procs: &[Proc], uid: u32, since_ms: u64, keep: &HashSet<u32>) -> Vec<u32> {
    let Some(boot_ms) = boot_time_ms(proc_root) else {
        return Vec::new();
    };
    // SAFETY: sysconf only reads a value.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .unwrap_or(100)
        .max(1);
    // btime has whole seconds: allow a second of slack.
    let since = since_ms.saturating_sub(1000);
    procs
        .iter()
        .filter(|p| !p.zombie && !keep.contains(&p.pid) && p.pid > 1)
        .filter(|p| boot_ms + p.start_ticks * 1000 / hz >= since)
        .filter(|p| uid_of(proc_root, p.pid) == Some(uid))
        .map(|p| p.pid)
        .collect()
}

/// SIGKILL to the descendants of `root` until none is left (or `wait` passes), calling
/// `between` after each round (the shepherd reaps there). Returns how many were left.
pub fn kill_descendants(root: u32, wait: Duration, between: &mut dyn FnMut()) -> usize {
    let deadline = Instant::now() + wait;
    loop {
        let left = descendants(&all(Path::new("/proc")), root);
        if left.is_empty() {
            return 0;
        }
        for &pid in &left {
            kill(pid, libc::SIGKILL);
        }
        between();
        if Instant::now() >= deadline {
            return descendants(&all(Path::new("/proc")), root).len();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// SIGKILL to each of `pids` (never 0 or 1).
pub fn kill_each(pids: &[u32]) {
    for &pid in pids {
        kill(pid, libc::SIGKILL);
    }
}

fn kill(pid: u32, signal: i32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return };
    if pid <= 1 {
        return;
    }
    // SAFETY: kill with a positive pid signals that one process; no memory is involved.
    unsafe { libc::kill(pid, signal) };
}

/// The real uid of a process (`Uid:` in its status).
fn uid_of(proc_root: &Path, pid: u32) -> Option<u32> {
    let text = read_small(&proc_root.join(pid.to_string()).join("status"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Boot time in ms since the epoch (`btime` in `/proc/stat`).
fn boot_time_ms(proc_root: &Path) -> Option<u64> {
    let text = read_small(&proc_root.join("stat"))?;
    let secs: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(secs * 1000)
}

fn read_small(path: &Path) -> Option<String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(64 * 1024)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn p(pid: u32, ppid: u32, session: u32) -> Proc {
        Proc {
            pid,
            ppid,
            session,
            start_ticks: 0,
            zombie: false,
        }
    }

    #[test]
    fn stat_lines_with_odd_commands_parse() {
        let line = "4242 (a) b (c)) S 17 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 98765 1 2 3";
        let got = parse_stat(4242, line).unwrap();
        assert_eq!(
            (got.ppid, got.session, got.start_ticks, got.zombie),
            (17, 4242, 98765, false)
        );
        assert_eq!(parse_stat(1, "garbage"), None);
        assert_eq!(parse_stat(1, "1 (x) Z"), None);
    }

    #[test]
    fn descendants_follow_the_tree_and_skip_zombies() {
        let mut procs = vec![
            p(10, 1, 10),
            p(11, 10, 10),
            p(12, 11, 12),
            p(13, 12, 12),
            p(20, 1, 20),
            p(21, 20, 20),
        ];
        procs.push(Proc {
            zombie: true,
            ..p(14, 10, 10)
        });
        assert_eq!(descendants(&procs, 10), [11, 12, 13]);
        assert_eq!(session(&procs, 10), [10, 11]);
        assert!(session(&procs, 1).is_empty());
        // A cycle (a pid reused mid-scan) ends.
        let cycle = [p(5, 6, 5), p(6, 5, 5)];
        assert_eq!(descendants(&cycle, 5), [6]);
    }

    #[test]
    fn this_process_s_children_are_found_and_killed() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 300 & sleep 300 & wait"])
            .spawn()
            .unwrap();
        let me = std::process::id();
        let found = crate::tasks::sweep::tests::wait_for_children(me, child.id());
        assert!(found >= 3, "{found}");
        // Only the sh's subtree: kill below it, then it.
        let left = kill_descendants(child.id(), Duration::from_secs(5), &mut || {});
        assert_eq!(left, 0);
        kill_each(&[child.id()]);
        child.wait().unwrap();
        // And a recent process of this uid is found by user and start time.
        let uid = crate::shepherd::current_euid();
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let mut recent = std::process::Command::new("sleep").arg("300").spawn().unwrap();
        let procs = all(Path::new("/proc"));
        let found = orphans_of(Path::new("/proc"), &procs, uid, now_ms, &HashSet::new());
        assert!(found.contains(&recent.id()), "{found:?}");
        let kept = orphans_of(Path::new("/proc"), &procs, uid, now_ms, &HashSet::from([recent.id()]));
        assert!(!kept.contains(&recent.id()));
        assert!(!found.contains(&1));
        recent.kill().unwrap();
        recent.wait().unwrap();
    }

    /// Waits until `pid` has two children; returns the size of `me`'s subtree.
    fn wait_for_children(me: u32, pid: u32) -> usize {
        for _ in 0..500 {
            let procs = all(Path::new("/proc"));
            if descendants(&procs, pid).len() >= 2 {
                return descendants(&procs, me).len();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        0
    }
}
