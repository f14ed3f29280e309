//! The shepherd: one small process per task, the task's parent, like Slurm's slurmstepd or
//! podman's conmon. The agent starts it detached (`hyperplan-agent shepherd --spec FILE`),
//! or asks the launcher to ([`crate::launcher`]);
//! it outlives the agent, so an agent restart (`KillMode=process`) leaves tasks running,
//! and it writes how the task ended where a restarted agent finds it.
//!
//! What one run does:
//!
//! 1. reads the launch spec ([`spec`]) and checks the job and task names, which place its
//!    files ([`layout`]): `STATE/tasks/<job>.<jobId>/<task>/`;
//! 2. leaves the agent's session (`setsid`; forking once first if it leads a process
//!    group), blocks the signals it will wait for, becomes a child subreaper;
//! 3. writes its pid to `pid`, exclusively: a task directory runs at most one shepherd,
//!    ever, so a repeated launch starts nothing twice;
//! 4. checks the rest of the spec, looks the user up ([`user`]), refuses uid 0 unless
//!    `allowRoot`; makes the job's own `/tmp` and `/dev/shm` when the spec asks
//!    ([`jobtmp`]); prepares and starts the task ([`exec`]) and writes `started.json`;
//! 5. waits ([`supervise`]): time limit, cancel by SIGTERM/SIGINT, rusage;
//! 6. writes `record.json` ([`record`]) atomically and exits 0. Every failure from step 4
//!    on is a record with `outcome: failed` and a `reason`; only a spec that cannot be
//!    placed (unreadable, bad names) or an unwritable state directory makes the shepherd
//!    exit 1 with the reason on stderr and no record.
//!
//! A shepherd not running as root can only run tasks as its own user.

pub mod exec;
pub mod jobtmp;
pub mod layout;
pub mod record;
pub mod rlimits;
pub mod spec;
pub mod step;
pub mod supervise;
pub mod user;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use layout::TaskDir;
pub use record::{ExitRecord, Outcome, Started};
pub use spec::{LaunchSpec, MemoryPolicy, SpecError};

use self::exec::Prepared;
use self::supervise::Status;

/// Why the shepherd could not run a task and could not say so in a record.
#[derive(Debug, thiserror::Error)]
pub enum ShepherdError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("{what} {path}: {source}")]
    File {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{dir} already has a shepherd (pid file {pid_file}): a task directory runs one task, once")]
    AlreadyStarted { dir: PathBuf, pid_file: PathBuf },
    #[error("cannot leave the agent's session: {0}")]
    Detach(#[source] std::io::Error),
    #[error("cannot set up signals: {0}")]
    Signals(#[source] std::io::Error),
    #[error("waiting for the task (pid {pid}): {source}")]
    Wait {
        pid: u32,
        #[source]
        source: std::io::Error,
    },
}

/// Runs the task `spec_path` describes to its end and writes its record; returns it.
/// `pmi_fd`: the task's PMI socket is this descriptor, not the one the spec names (a
/// shepherd the launcher started: the socket crossed into another process).
pub fn run(spec_path: &Path, pmi_fd: Option<i32>) -> Result<ExitRecord, ShepherdError> {
    let mut spec = LaunchSpec::read(spec_path)?;
    spec.check_names(spec_path)?;
    if let Some(fd) = pmi_fd {
        if spec.pmi_fd.is_none() {
            return Err(ShepherdError::Spec(SpecError::Field {
                path: spec_path.to_path_buf(),
                field: "pmiFd",
                message: format!("--pmi-fd {fd} was given, and the spec names no PMI socket"),
            }));
        }
        spec.pmi_fd = Some(fd);
        spec.env.insert("PMI_FD".into(), fd.to_string());
    }
    let dir = TaskDir::new(&spec.state_dir, &spec.job, spec.job_id, &spec.task);
    detach().map_err(ShepherdError::Detach)?;
    let signals = supervise::block_signals().map_err(ShepherdError::Signals)?;
    // Best effort: without it orphans go to init instead, which reaps them too.
    let _ = supervise::become_subreaper();
    let file_err = |what, path: &Path| {
        let path = path.to_path_buf();
        move |source| ShepherdError::File { what, path, source }
    };
    std::fs::create_dir_all(&dir.dir).map_err(file_err("cannot create the task directory", &dir.dir))?;
    let shepherd_pid = std::process::id();
    match layout::write_exclusive(&dir.pid(), format!("{shepherd_pid}\n").as_bytes()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(ShepherdError::AlreadyStarted {
                dir: dir.dir.clone(),
                pid_file: dir.pid(),
            });
        }
        Err(e) => return Err(file_err("cannot write the pid file", &dir.pid())(e)),
    }
    let mut record = ExitRecord {
        job: spec.job.clone(),
        job_id: spec.job_id,
        task: spec.task.clone(),
        rank: spec.rank,
        shepherd_pid,
        pid: None,
        outcome: Outcome::Failed,
        exit_code: None,
        signal: None,
        signal_name: None,
        start_time_ms: now_ms(),
        end_time_ms: 0,
        cpu_seconds: 0.0,
        max_rss_bytes: 0,
        oom_killed: false,
        reason: None,
    };
    let cgroups = spec.all_cgroups();
    match launch(spec, spec_path, &dir, &signals) {
        Ok((pid, ended)) => {
            record.pid = Some(pid.pid);
            record.start_time_ms = pid.start_time_ms;
            record.cpu_seconds = ended.cpu_seconds;
            record.max_rss_bytes = ended.max_rss_bytes;
            match ended.status {
                Status::Exited(code) => record.exit_code = Some(code),
                Status::Signaled(signal) => {
                    record.signal = Some(signal);
                    record.signal_name = Some(record::signal_name(signal));
                }
            }
            record.outcome = match (ended.timed_out, ended.cancelled, ended.status) {
                _ if ended.fenced => Outcome::Fenced,
                (true, _, _) => Outcome::Timeout,
                (_, true, _) => Outcome::Cancelled,
                (_, _, Status::Exited(_)) => Outcome::Exited,
                (_, _, Status::Signaled(_)) => Outcome::Signaled,
            };
            record.oom_killed = cgroups.iter().any(|c| oom_killed(c));
        }
        Err(Failure::Reason(reason)) => record.reason = Some(reason),
        Err(Failure::Fatal(e)) => return Err(e),
    }
    record.end_time_ms = now_ms();
    let text = serde_json::to_vec_pretty(&record).unwrap_or_default();
    write_record(&dir.record(), &text).map_err(file_err("cannot write the exit record", &dir.record()))?;
    Ok(record)
}

/// How long a shepherd keeps trying to write its record on a full file system, and how
/// often it says so.
const RECORD_FULL_TRIES: u32 = 600;
const RECORD_FULL_RETRY: Duration = Duration::from_secs(1);

/// Writes the exit record. The record is the only account of how the task ended: on a
/// full state directory (ENOSPC, EDQUOT) the shepherd stays and tries again every second
/// for ten minutes (the agent sees it alive and waits), saying so once a minute, rather
/// than leave the agent to report a finished task as failed.
fn write_record(path: &Path, text: &[u8]) -> std::io::Result<()> {
    let mut tries = 0;
    loop {
        match layout::write_atomic(path, text) {
            Ok(()) => {
                if tries > 0 {
                    eprintln!("hyperplan-agent shepherd: wrote the exit record after {tries} s of a full file system");
                }
                return Ok(());
            }
            Err(e) if is_full(&e) && tries < RECORD_FULL_TRIES => {
                if tries % 60 == 0 {
                    eprintln!(
                        "hyperplan-agent shepherd: cannot write the exit record {}: {e}; the task has ended, \
                         trying again every second for {} min: free space on that file system",
                        path.display(),
                        RECORD_FULL_TRIES / 60
                    );
                }
                tries += 1;
                std::thread::sleep(RECORD_FULL_RETRY);
            }
            Err(e) => return Err(e),
        }
    }
}

/// The file system (or the user's quota on it) is full.
pub(crate) fn is_full(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

enum Failure {
    /// The task did not run; the record says why.
    Reason(String),
    /// Nothing can be recorded.
    Fatal(ShepherdError),
}

impl From<ShepherdError> for Failure {
    fn from(e: ShepherdError) -> Self {
        Failure::Fatal(e)
    }
}

/// Checks, starts and waits for the task.
fn launch(
    spec: LaunchSpec,
    spec_path: &Path,
    dir: &TaskDir,
    signals: &supervise::Signals,
) -> Result<(Started, supervise::Ended), Failure> {
    let checked = spec.check(spec_path).map_err(|e| Failure::Reason(e.to_string()))?;
    let s = &checked.spec;
    let identity = user::lookup(&s.user).map_err(|e| Failure::Reason(e.to_string()))?;
    if identity.uid == 0 && !s.allow_root {
        return Err(Failure::Reason(format!(
            "user {} is uid 0 (root), and tasks may not run as root on this node (agent setting allowRoot = false)",
            s.user
        )));
    }
    let euid = current_euid();
    let switch = if euid == 0 {
        Some(&identity)
    } else if identity.uid == euid {
        None
    } else {
        return Err(Failure::Reason(format!(
            "the shepherd runs as uid {euid}, not root, and cannot switch to user {} (uid {})",
            s.user, identity.uid
        )));
    };
    let time_limit = s.time_limit_secs.map(Duration::from_secs);
    let cgroups = s.all_cgroups();
    let grace = Duration::from_secs(s.kill_grace_secs.unwrap_or(spec::DEFAULT_KILL_GRACE_SECS));
    let start_time_ms = now_ms();
    let prepared_pmi_fd = s.pmi_fd;
    let fence = s.fence.then(|| crate::deadman::path(&s.state_dir));
    let mut prepared = Prepared::new(checked, switch);
    match prepared.open_job_dirs() {
        Ok(None) => {}
        Ok(Some(why)) => {
            eprintln!("hyperplan-agent shepherd: {why}; the task runs with the node's /tmp and /dev/shm")
        }
        Err(e) => return Err(Failure::Reason(e.to_string())),
    }
    let mut tries = 1;
    let pid = loop {
        match prepared.start() {
            exec::Started::Running { pid } => break pid,
            // The node is out of processes or memory for now (another task's fork bomb
            // at the unit's limit): try again a while, a cancel still heard.
            exec::Started::Failed {
                reason,
                temporary: true,
            } if tries < START_TRIES => {
                eprintln!("hyperplan-agent shepherd: {reason}; trying again ({tries} of {START_TRIES})");
                tries += 1;
                if let Some(signal) = signals.wait_for(START_RETRY) {
                    return Err(Failure::Reason(format!(
                        "cancelled (signal {signal}) before it could start: {reason}"
                    )));
                }
            }
            exec::Started::Failed { reason, .. } => return Err(Failure::Reason(reason)),
        }
    };
    // The task has its PMI socket now: the shepherd's copy would keep it open after the
    // task ends, and the agent would not hear the end.
    if let Some(fd) = prepared_pmi_fd {
        close_fd(fd);
    }
    let started = Started { pid, start_time_ms };
    let text = serde_json::to_vec(&started).unwrap_or_default();
    if let Err(e) = layout::write_replace(&dir.started(), &text) {
        // The task runs; a restarted agent finds its pid in the record instead.
        eprintln!(
            "hyperplan-agent shepherd: cannot write {}: {e}",
            dir.started().display()
        );
    }
    let limits = supervise::Limits {
        time_limit,
        grace,
        cancel_grace: Some(&dir.kill_grace()),
        fence: fence.as_deref(),
    };
    let ended =
        supervise::supervise(pid, &cgroups, signals, limits).map_err(|source| ShepherdError::Wait { pid, source })?;
    Ok((started, ended))
}

/// Tries at forking the task while the node is short of processes or memory.
const START_TRIES: u32 = 10;
const START_RETRY: Duration = Duration::from_secs(1);

/// Leaves the caller's session. A process-group leader cannot, so it forks once: the
/// parent exits 0 at once and the child goes on (the pid file names it).
#[allow(unsafe_code)]
fn detach() -> std::io::Result<()> {
    // SAFETY: setsid takes no arguments and touches no memory.
    if unsafe { libc::setsid() } >= 0 {
        return Ok(());
    }
    // SAFETY: plain queries.
    if unsafe { libc::getsid(0) == libc::getpid() } {
        return Ok(()); // already a session leader
    }
    // SAFETY: the process is single-threaded here (nothing started a thread before the
    // shepherd runs), so the child may go on running ordinary code.
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error()),
        0 => {
            // SAFETY: as above; the child is no group leader, so setsid succeeds.
            if unsafe { libc::setsid() } < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        }
        _parent => std::process::exit(0),
    }
}

/// Closes a descriptor this process inherited.
#[allow(unsafe_code)]
fn close_fd(fd: i32) {
    // SAFETY: closing an integer descriptor touches no memory; nothing else uses it.
    unsafe { libc::close(fd) };
}

/// The effective uid this process runs as.
#[allow(unsafe_code)]
pub fn current_euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// The cgroup counted an OOM kill (`oom_kill` in v2's `memory.events`, v1's
/// `memory.oom_control`).
fn oom_killed(cgroup: &Path) -> bool {
    ["memory.events", "memory.oom_control"].iter().any(|file| {
        std::fs::read_to_string(cgroup.join(file)).is_ok_and(|text| {
            text.lines()
                .filter_map(|l| l.strip_prefix("oom_kill "))
                .any(|n| n.trim().parse::<u64>().is_ok_and(|n| n > 0))
        })
    })
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
