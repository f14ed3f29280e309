//! The site's own health command (`[health] script`, e.g. `["/usr/sbin/nhc"]`, LBNL's
//! Node Health Check as Slurm's `HealthCheckProgram` runs it): exit 0 is healthy;
//! anything else fails `script` with the first line it printed (standard output, else
//! standard error) as the reason, which is how NHC says what failed.
//!
//! Run without a shell, its argv as configured, standard input `/dev/null`, in a
//! process group of its own. Its output is read as it comes (one thread, `poll(2)`), at
//! most [`KEEP`] bytes of each stream kept and the rest read and dropped: a script that
//! prints megabytes neither blocks on a full pipe nor grows the agent. Past its timeout
//! its whole process group is killed and the check fails `timeout`. Whatever happens it
//! is reaped, and what it left running in its group is killed first (while it is an
//! unreaped zombie its pid, the group's id, cannot be reused by anyone else).

#![allow(unsafe_code)]

use std::io::{ErrorKind, Read};
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hyperplan_shared::health::{CheckResult, CheckState};

use super::{Check, Context, TIMEOUT, seconds};

/// Bytes of each of its streams kept for the reason (the first line is what counts).
pub const KEEP: usize = 4096;
/// How long its output is still read after it exited, when something it started holds
/// the pipes open.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(200);
/// The longest `poll` waits before looking at the clock, the child and a stop again.
const POLL: Duration = Duration::from_millis(50);
/// One read of a pipe.
const CHUNK: usize = 64 << 10;

/// What the script check needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptOptions {
    /// The program (an absolute path) and its arguments.
    pub argv: Vec<String>,
    pub interval: Duration,
    pub timeout: Duration,
}

/// One run, as tests and the check see it.
#[derive(Debug)]
pub struct Ran {
    pub result: CheckResult,
    /// Its pid, when it started.
    pub pid: Option<u32>,
    /// What was kept of its output (at most [`KEEP`] bytes each).
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// The check.
pub struct ScriptCheck {
    opts: ScriptOptions,
}

impl ScriptCheck {
    pub fn new(opts: ScriptOptions) -> ScriptCheck {
        ScriptCheck { opts }
    }
}

impl Check for ScriptCheck {
    fn kind(&self) -> &'static str {
        "script"
    }

    fn run(&mut self, ctx: &Context) -> Vec<CheckResult> {
        ctx.at("script");
        vec![run(&self.opts.argv, self.opts.timeout, || ctx.stopping()).result]
    }
}

/// Runs `argv` to its end or `timeout` (or until `stop` says so), as the module says.
pub fn run(argv: &[String], timeout: Duration, stop: impl Fn() -> bool) -> Ran {
    let program = argv.first().map_or("", String::as_str);
    let ran = |result, pid, stdout, stderr| Ran {
        result,
        pid,
        stdout,
        stderr,
    };
    let failed = |code: &str, text: String| CheckResult::bad("script", CheckState::Failed, code, text);
    if program.is_empty() {
        return ran(
            failed("script", "no script to run".into()),
            None,
            Vec::new(),
            Vec::new(),
        );
    }
    let deadline = Instant::now() + timeout;
    let mut cmd = Command::new(program);
    cmd.args(&argv[1..])
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = match crate::probe::nvlink::spawn_retrying_busy(&mut cmd, deadline) {
        Ok(child) => child,
        Err(e) => {
            let text = format!("cannot run {program}: {e}");
            return ran(failed("script", text), None, Vec::new(), Vec::new());
        }
    };
    let pid = child.id();
    let mut streams = [
        child.stdout.take().map(Stream::Out),
        child.stderr.take().map(Stream::Err),
    ];
    let mut kept = [Vec::new(), Vec::new()];
    let mut chunk = vec![0u8; CHUNK];
    let mut exited_at: Option<Instant> = None;
    let end = loop {
        if stop() {
            break End::Stopped;
        }
        let now = Instant::now();
        if exited_at.is_none() && exited(pid) {
            exited_at = Some(now);
        }
        let open = streams.iter().any(Option::is_some);
        match exited_at {
            Some(at) if !open || now >= at + DRAIN_AFTER_EXIT => break End::Exited,
            None if now >= deadline => break End::TimedOut,
            _ => {}
        }
        let wait = POLL
            .min(deadline.saturating_duration_since(now))
            .max(Duration::from_millis(1));
        if open {
            read_some(&mut streams, &mut kept, &mut chunk, wait);
        } else {
            // It closed its output and runs on: look again shortly.
            std::thread::sleep(wait);
        }
    };
    drop(streams);
    // Still a child of ours (unreaped): its group goes, then it is reaped.
    kill_group(pid);
    let _ = child.kill();
    let status = child.wait();
    let [stdout, stderr] = kept;
    let result = match (end, status) {
        (End::Stopped, _) => failed("script", "the agent is stopping".into()),
        (End::TimedOut, _) => failed(
            TIMEOUT,
            format!("{program} did not finish within {}; killed", seconds(timeout)),
        ),
        (End::Exited, Ok(status)) if status.success() => CheckResult::ok("script"),
        (End::Exited, status) => {
            let line = first_line(&stdout).or_else(|| first_line(&stderr));
            let text = line.unwrap_or_else(|| match status {
                Ok(s) => match (s.code(), s.signal()) {
                    (Some(code), _) => format!("{program} exited with status {code}"),
                    (None, Some(signal)) => format!("{program} was killed by signal {signal}"),
                    _ => format!("{program} failed ({s})"),
                },
                Err(e) => format!("{program}: cannot wait for it: {e}"),
            });
            failed("script", text)
        }
    };
    ran(result, Some(pid), stdout, stderr)
}

/// How the run ended.
#[derive(Clone, Copy)]
enum End {
    Exited,
    TimedOut,
    Stopped,
}

/// One of its pipes.
enum Stream {
    Out(std::process::ChildStdout),
    Err(std::process::ChildStderr),
}

impl Stream {
    fn fd(&self) -> i32 {
        match self {
            Stream::Out(s) => s.as_raw_fd(),
            Stream::Err(s) => s.as_raw_fd(),
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Out(s) => s.read(buf),
            Stream::Err(s) => s.read(buf),
        }
    }
}

/// Waits up to `wait` for output, then reads once from each pipe that has some (or its
/// end); keeps up to [`KEEP`] bytes of each, drops the rest, and closes pipes at their end.
fn read_some(streams: &mut [Option<Stream>; 2], kept: &mut [Vec<u8>; 2], chunk: &mut [u8], wait: Duration) {
    let mut fds: Vec<libc::pollfd> = streams
        .iter()
        .flatten()
        .map(|s| libc::pollfd {
            fd: s.fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = libc::c_int::try_from(wait.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `fds` is a live, writable array of `fds.len()` pollfd structs for the whole
    // call, and each fd is a pipe we own and keep open until after the call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if n <= 0 {
        return; // nothing yet, or EINTR: the caller loops
    }
    for (slot, keep) in streams.iter_mut().zip(kept.iter_mut()) {
        let Some(stream) = slot else { continue };
        let ready = fds.iter().any(|p| p.fd == stream.fd() && p.revents != 0);
        if !ready {
            continue;
        }
        // poll said readable: this read returns at once (data, or 0 at the end).
        match stream.read(chunk) {
            Ok(0) => *slot = None,
            Ok(n) => {
                let room = KEEP.saturating_sub(keep.len()).min(n);
                keep.extend_from_slice(&chunk[..room]);
            }
            Err(e) if matches!(e.kind(), ErrorKind::Interrupted | ErrorKind::WouldBlock) => {}
            Err(_) => *slot = None,
        }
    }
}

/// Whether the child has ended, leaving it unreaped (`WNOWAIT`), so that its pid stays
/// its own until [`Child::wait`].
fn exited(pid: u32) -> bool {
    let id = libc::id_t::from(pid);
    // SAFETY: siginfo_t is plain data for which all zeros is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a writable siginfo_t for the call; waitid with WNOWAIT only
    // looks at the child's state and changes nothing about it.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            id,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: after a successful waitid the kernel filled `info`; with WNOHANG and no
    // child ended, si_pid stays the 0 it was zeroed to.
    rc == 0 && unsafe { info.si_pid() } != 0
}

/// SIGKILL to the child's process group (it leads one: `process_group(0)`).
fn kill_group(pid: u32) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) takes plain integers and touches none of our memory. The child
        // is not reaped yet, so its pid, which is also its process group's id, cannot
        // have been reused: the signal reaches only what it started in its group.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}

/// The first line with something on it, trimmed.
fn first_line(bytes: &[u8]) -> Option<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    fn sh(script: &str) -> Vec<String> {
        vec!["/bin/sh".into(), "-c".into(), script.into()]
    }

    const LONG: Duration = Duration::from_secs(30);

    /// Gone, or a zombie its new parent has not reaped yet.
    fn gone(pid: u32) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
            if stat.is_empty() || state == Some(Some('Z')) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn exit_0_is_ok_and_a_failure_says_its_first_line() {
        let ok = run(&sh("echo all fine; exit 0"), LONG, || false);
        assert_eq!(ok.result, CheckResult::ok("script"));
        let nhc = run(
            &sh("echo; echo 'ERROR:  nhc:  Health check failed:  /scratch not mounted'; echo more; exit 1"),
            LONG,
            || false,
        );
        assert_eq!(
            nhc.result,
            CheckResult::bad(
                "script",
                CheckState::Failed,
                "script",
                "ERROR:  nhc:  Health check failed:  /scratch not mounted"
            )
        );
        let stderr = run(&sh("echo 'cannot stat /scratch' >&2; exit 2"), LONG, || false);
        assert_eq!(stderr.result.text, "cannot stat /scratch");
        let silent = run(&sh("exit 4"), LONG, || false);
        assert_eq!(silent.result.text, "/bin/sh exited with status 4");
        let signal = run(&sh("kill -TERM $$"), LONG, || false);
        assert_eq!(signal.result.text, "/bin/sh was killed by signal 15");
        let missing = run(&["/nonexistent/hyperplan/nhc".to_string()], LONG, || false);
        assert_eq!(
            (missing.result.state, missing.result.code.as_str()),
            (CheckState::Failed, "script")
        );
        assert!(
            missing
                .result
                .text
                .starts_with("cannot run /nonexistent/hyperplan/nhc: "),
            "{:?}",
            missing.result
        );
        for pid in [ok.pid, nhc.pid, stderr.pid, silent.pid].into_iter().flatten() {
            assert!(gone(pid), "{pid} reaped");
        }
    }

    #[test]
    fn a_hanging_script_times_out_and_its_whole_group_is_killed() {
        let started = Instant::now();
        let ran = run(&sh("sleep 100 & echo $!; wait"), Duration::from_secs(1), || false);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(1) && took < Duration::from_secs(5),
            "{took:?}"
        );
        assert_eq!(
            (ran.result.state, ran.result.code.as_str()),
            (CheckState::Failed, TIMEOUT)
        );
        assert_eq!(ran.result.text, "/bin/sh did not finish within 1 s; killed");
        let sleeper: u32 = String::from_utf8_lossy(&ran.stdout).trim().parse().unwrap();
        assert!(gone(ran.pid.unwrap()), "the script");
        assert!(gone(sleeper), "what it started");
        // One that closes its output and runs on is timed out all the same.
        let closed = run(&sh("exec >&- 2>&-; sleep 100"), Duration::from_millis(500), || false);
        assert_eq!(closed.result.code, TIMEOUT);
        assert!(gone(closed.pid.unwrap()));
    }

    #[test]
    fn a_script_printing_megabytes_is_drained_kept_short_and_judged() {
        let started = Instant::now();
        let ran = run(
            &sh("yes | head -c 5000000; yes no | head -c 3000000 >&2; exit 3"),
            LONG,
            || false,
        );
        assert!(started.elapsed() < Duration::from_secs(20));
        assert_eq!(
            ran.result,
            CheckResult::bad("script", CheckState::Failed, "script", "y")
        );
        assert_eq!((ran.stdout.len(), ran.stderr.len()), (KEEP, KEEP));
    }

    #[test]
    fn what_it_leaves_running_does_not_hold_the_check_and_is_killed() {
        let started = Instant::now();
        let ran = run(&sh("sleep 100 & echo $!; exit 0"), LONG, || false);
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(ran.result, CheckResult::ok("script"));
        let sleeper: u32 = String::from_utf8_lossy(&ran.stdout).trim().parse().unwrap();
        assert!(gone(sleeper));
    }

    #[test]
    fn a_stop_ends_a_running_script_at_once() {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let waiter = std::thread::spawn(move || run(&sh("sleep 100"), LONG, || flag.load(Ordering::SeqCst)));
        std::thread::sleep(Duration::from_millis(200));
        let asked = Instant::now();
        stop.store(true, Ordering::SeqCst);
        let ran = waiter.join().unwrap();
        assert!(asked.elapsed() < Duration::from_secs(2));
        assert!(gone(ran.pid.unwrap()));
    }
}
