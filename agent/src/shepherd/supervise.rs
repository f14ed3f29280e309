//! Watching the running task: the shepherd sleeps in `sigtimedwait` on SIGCHLD, SIGTERM,
//! SIGINT and SIGHUP (blocked before the fork, so none is lost and the shepherd runs no
//! signal handler), reaps with `wait4` to get the task's rusage, and acts:
//!
//! Every signal goes to the task's process group and to every process of the task: those
//! in its cgroups, or, without any, every descendant of the shepherd (a child subreaper:
//! what left the session or the group is still below it). So neither `setsid` nor a
//! double fork escapes a cancel, a time limit or the task's end.
//!
//! - SIGTERM or SIGINT (cancel): passed on to the task (or, when the task's `kill_grace`
//!   file names one, that signal instead: a preempted job's checkpoint hook); SIGKILL
//!   follows after the grace period if the task is still there: the seconds in that file
//!   when the agent wrote one (the planner's `Kill` carries its grace), else the spec's.
//!   SIGHUP is ignored. A later cancel may shorten the grace (the agent writes the file
//!   again and signals once more), never lengthen it.
//! - the time limit: SIGTERM to the task, SIGKILL after the grace period; also for a task
//!   already cancelled with a longer grace: the time limit always wins.
//! - the node-lost fence (a task its planner would start again elsewhere): every half
//!   second the agent's deadline is read ([`crate::deadman`]); once it has passed, SIGTERM,
//!   then SIGKILL a second later, before the planner gives the task up.
//! - the task's end: whatever is left of it is killed (SIGKILL; its cgroups frozen and
//!   emptied), and the children the shepherd inherited as a subreaper are reaped.

#![allow(unsafe_code)]

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The signals the shepherd waits for instead of being killed by.
pub struct Signals {
    set: libc::sigset_t,
}

/// Blocks SIGCHLD, SIGTERM, SIGINT and SIGHUP for this (single-threaded) process. The
/// task's mask is cleared again in its child before exec.
pub fn block_signals() -> io::Result<Signals> {
    // SAFETY: `set` is initialised by sigemptyset before any other use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t; the signal numbers are valid.
    unsafe {
        libc::sigemptyset(&mut set);
        for signal in [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, signal);
        }
    }
    // SAFETY: a valid set; the old mask is not wanted.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(Signals { set })
}

impl Signals {
    /// The signals blocked (the launcher reads them from a `signalfd` of this set).
    pub(crate) fn set(&self) -> &libc::sigset_t {
        &self.set
    }

    /// A cancel (SIGTERM or SIGINT) within `timeout`, else None (other signals are
    /// taken and ignored: nothing runs yet).
    pub fn wait_for(&self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            match self.wait(Some(left)) {
                Some(signal @ (libc::SIGTERM | libc::SIGINT)) => return Some(signal),
                _ => continue,
            }
        }
    }

    /// The next of our signals, or None after `timeout` (None: wait for ever).
    fn wait(&self, timeout: Option<Duration>) -> Option<i32> {
        // SAFETY: `info` is written by the kernel before it is read (never here).
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let rc = match timeout {
            Some(t) => {
                let ts = libc::timespec {
                    tv_sec: t.as_secs().min(i32::MAX as u64) as libc::time_t,
                    tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
                };
                // SAFETY: valid set, siginfo and timespec pointers.
                unsafe { libc::sigtimedwait(&self.set, &mut info, &ts) }
            }
            // SAFETY: valid set and siginfo pointers.
            None => unsafe { libc::sigwaitinfo(&self.set, &mut info) },
        };
        (rc > 0).then_some(rc)
    }
}

/// Makes this process the reaper of its orphaned descendants (the task's children whose
/// parent died), so none is left a zombie and none escapes unreaped.
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes an integer flag.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// How the task's own process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Exited(i32),
    Signaled(i32),
}

/// The task's end as the shepherd saw it.
#[derive(Clone, Debug)]
pub struct Ended {
    pub status: Status,
    pub cpu_seconds: f64,
    pub max_rss_bytes: u64,
    /// The time limit passed (SIGTERM sent for it).
    pub timed_out: bool,
    /// The shepherd was told to stop the task (SIGTERM/SIGINT passed on).
    pub cancelled: bool,
    /// The node-lost fence stopped it: the planner had not acknowledged the node for as
    /// long as it takes to declare the node lost.
    pub fenced: bool,
}

/// Reaps one child that has ended, any child; None when none has.
fn reap_any() -> io::Result<Option<(u32, Status, libc::rusage)>> {
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to locals.
    let pid = unsafe { libc::wait4(-1, &mut status, libc::WNOHANG, &mut usage) };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        return Ok(None);
    }
    let s = if libc::WIFEXITED(status) {
        Status::Exited(libc::WEXITSTATUS(status))
    } else {
        Status::Signaled(libc::WTERMSIG(status))
    };
    Ok(Some((pid as u32, s, usage)))
}

/// Sends `signal` to the process group `pgid` (the task's pid). ESRCH (gone) is fine.
pub fn signal_group(pgid: u32, signal: i32) {
    // SAFETY: kill with a negative pid signals that group; no memory is involved.
    unsafe { libc::kill(-(pgid as libc::pid_t), signal) };
}

fn group_exists(pgid: u32) -> bool {
    // SAFETY: signal 0 only checks that the group exists.
    unsafe { libc::kill(-(pgid as libc::pid_t), 0) == 0 }
}

/// The grace of a cancel, from the agent's `kill_grace` file (`SECONDS [SIGNAL]`), and
/// the signal to warn the task with when it names one it can catch; None when there is
/// no file or it says nothing usable.
pub fn read_kill_grace(path: &Path) -> Option<(Duration, Option<i32>)> {
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(32)
        .read_to_string(&mut text)
        .ok()?;
    let mut words = text.split_whitespace();
    let grace = words.next()?.parse::<u64>().ok().map(Duration::from_secs)?;
    let warn = words
        .next()
        .and_then(|w| w.parse::<i32>().ok())
        .filter(|s| (1..=31).contains(s) && ![libc::SIGKILL, libc::SIGSTOP].contains(s));
    Some((grace, warn))
}

/// What stops a task besides its own end: its time limit, a cancel's grace, the fence.
#[derive(Clone, Copy, Debug, Default)]
pub struct Limits<'a> {
    pub time_limit: Option<Duration>,
    /// SIGTERM to SIGKILL for a time limit or a cancel (unless the cancel's file says).
    pub grace: Duration,
    /// The file that may hold a cancel's grace ([`read_kill_grace`]).
    pub cancel_grace: Option<&'a Path>,
    /// The agent's node-lost deadline file, for a fenced task ([`crate::deadman`]).
    pub fence: Option<&'a Path>,
}

/// Waits for the task `pid` (a child of this process, leader of its own group, in
/// `cgroups`) to end.
pub fn supervise(pid: u32, cgroups: &[PathBuf], signals: &Signals, limits: Limits<'_>) -> io::Result<Ended> {
    let Limits {
        time_limit,
        grace,
        cancel_grace,
        fence,
    } = limits;
    let start = Instant::now();
    // A limit beyond what an Instant can hold is no limit (the planner refuses such jobs).
    let term_at = time_limit.and_then(|limit| start.checked_add(limit));
    let mut kill_at: Option<Instant> = None;
    let (mut timed_out, mut cancelled, mut fenced) = (false, false, false);
    // The time limit was reached (it counts once, cancelled or not).
    let mut term_passed = false;
    let mut fence_check = fence.map(|_| start);
    loop {
        loop {
            match reap_any() {
                Ok(Some((p, status, usage))) if p == pid => {
                    finish(pid, cgroups);
                    return Ok(Ended {
                        status,
                        cpu_seconds: seconds(usage.ru_utime) + seconds(usage.ru_stime),
                        max_rss_bytes: u64::try_from(usage.ru_maxrss).unwrap_or(0).saturating_mul(1024),
                        timed_out,
                        cancelled,
                        fenced,
                    });
                }
                Ok(Some(_orphan)) => continue,
                Ok(None) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        let now = Instant::now();
        // The time limit wins over a cancel's longer grace: SIGKILL comes at most `grace`
        // after the limit, whenever the cancel came (the outcome stays the cancel's).
        if let Some(at) = term_at
            && now >= at
            && !term_passed
        {
            signal_task(pid, cgroups, libc::SIGTERM);
            timed_out = !cancelled;
            term_passed = true;
            if let Some(at) = now.checked_add(grace) {
                kill_at = Some(kill_at.map_or(at, |k| k.min(at)));
            }
        }
        if let (Some(at), Some(file)) = (fence_check, fence)
            && now >= at
        {
            fence_check = now.checked_add(crate::deadman::CHECK_EVERY);
            if let Some(late_ms) = crate::deadman::expired(file) {
                eprintln!(
                    "hyperplan-agent shepherd: fenced: the planner has not acknowledged this node for as \
                     long as it takes to declare it lost ({late_ms} ms past the deadline in {}); stopping \
                     the task, which the planner starts again elsewhere",
                    file.display()
                );
                signal_task(pid, cgroups, libc::SIGTERM);
                fenced = true;
                fence_check = None;
                if let Some(at) = now.checked_add(crate::deadman::FENCE_GRACE) {
                    kill_at = Some(kill_at.map_or(at, |k| k.min(at)));
                }
            }
        }
        if let Some(at) = kill_at
            && now >= at
        {
            signal_task(pid, cgroups, libc::SIGKILL);
            kill_at = None;
        }
        let next = [term_at.filter(|_| !term_passed), kill_at, fence_check]
            .into_iter()
            .flatten()
            .min();
        if let Some(signal @ (libc::SIGTERM | libc::SIGINT)) =
            signals.wait(next.map(|at| at.saturating_duration_since(now)))
        {
            let (wait, warn) = cancel_grace.and_then(read_kill_grace).unwrap_or((grace, None));
            signal_task(pid, cgroups, warn.unwrap_or(signal));
            if !timed_out {
                cancelled = true;
            }
            if let Some(at) = Instant::now().checked_add(wait) {
                kill_at = Some(kill_at.map_or(at, |k| k.min(at)));
            }
        }
    }
}

/// `signal` to the task's group and to every process of the task (see the module doc).
fn signal_task(pgid: u32, cgroups: &[PathBuf], signal: i32) {
    signal_group(pgid, signal);
    if !cgroups.is_empty() {
        if signal == libc::SIGKILL {
            crate::tasks::cgroup::kill::kill_all(cgroups, Duration::ZERO, &mut || {});
        } else {
            crate::tasks::cgroup::kill::signal_all(cgroups, signal);
        }
        return;
    }
    let procs = crate::tasks::sweep::all(Path::new("/proc"));
    for pid in crate::tasks::sweep::descendants(&procs, std::process::id()) {
        // SAFETY: kill with a positive pid signals that one process.
        unsafe { libc::kill(pid as libc::pid_t, signal) };
    }
}

/// After the task ended: kills what is left of it (its cgroups emptied, else every
/// descendant of the shepherd) and reaps what died. Bounded: 5 s for the cgroups, then
/// at most a second of reaping.
fn finish(pgid: u32, cgroups: &[PathBuf]) {
    signal_group(pgid, libc::SIGKILL);
    let mut reap = || while let Ok(Some(_)) = reap_any() {};
    let left = if cgroups.is_empty() {
        crate::tasks::sweep::kill_descendants(std::process::id(), Duration::from_secs(5), &mut reap)
    } else {
        crate::tasks::cgroup::kill::kill_all(cgroups, Duration::from_secs(5), &mut reap)
    };
    if left > 0 {
        eprintln!("hyperplan-agent shepherd: {left} processes of the task are still there after SIGKILL");
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        match reap_any() {
            Ok(Some(_)) => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
            Ok(None) if !group_exists(pgid) => return,
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

fn seconds(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 / 1e6
}
