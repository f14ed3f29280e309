//! Starting and stopping shepherds: a task's directory, hostfile and spec written, the
//! task's cgroup made (where the node confines by cgroup, see [`super::cgroup`]), the
//! shepherd started (`PROGRAM shepherd --spec FILE`, stdin and stdout null, stderr to
//! `shepherd.log`; it detaches itself), signalled on `Kill`, and checked for life. A
//! task that cannot be started gets a record written here, with `outcome: failed` and
//! the reason, so its end is reported like any other.

#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use hyperplan_net::messages::{JobWorld, LaunchTask};
use hyperplan_shared::job::{LaunchMode, MpiMode};

use super::TaskOptions;
use super::cgroup::Limits;
use super::cgroup::devices::GpuFence;

/// Where the NVIDIA driver says which GPU is which device minor.
const PROC_ROOT: &str = "/proc";
use crate::launch::{NodeContext, hostfile_path, prepare};
use crate::shepherd::layout::{write_atomic, write_exclusive, write_owned, write_private, write_replace};
use crate::shepherd::{ExitRecord, MemoryPolicy, Outcome, TaskDir, rlimits, user};

/// A shepherd started for a task.
#[derive(Debug)]
pub enum Shepherd {
    /// This agent's child, which it reaps.
    Child(Child),
    /// The launcher's (`launcher` in agent.toml): followed by its pid, as a shepherd an
    /// earlier agent run started.
    Launched(u32),
}

impl Shepherd {
    pub fn pid(&self) -> u32 {
        match self {
            Shepherd::Child(c) => c.id(),
            Shepherd::Launched(pid) => *pid,
        }
    }
}

/// What became of a `Launch`.
#[derive(Debug)]
pub enum Launched {
    /// The shepherd runs (it may still fail the task; its record will say).
    Spawned(Shepherd),
    /// Nothing runs; the record written says why.
    Failed(ExitRecord),
    /// Everything is written, but the shepherd could not be started for a reason that
    /// passes (EAGAIN, ENOMEM: the node is out of processes or memory now): try
    /// [`spawn_shepherd`] again later.
    Retry(std::io::Error),
}

/// The most tries at starting a task's shepherd while the node is short of processes
/// or memory, [`RETRY_EVERY`] apart, before the task fails.
pub const SPAWN_TRIES: u32 = 10;
pub const RETRY_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// A spawn error that may pass: the node is short of processes or memory for now, or
/// the launcher is not answering (being restarted).
pub fn temporary(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ENOMEM)) || e.kind() == std::io::ErrorKind::ConnectionRefused
}

/// Makes `dir` (and its parents) with `mode` on the last component.
pub fn make_dir(dir: &Path, mode: u32) -> std::io::Result<()> {
    std::fs::DirBuilder::new().recursive(true).mode(mode).create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
}

/// The state directory and its `tasks/`: only traversable by others, so a task's user can
/// read its job's hostfile by name and list nothing.
pub fn make_state_dir(state_dir: &Path) -> std::io::Result<()> {
    make_dir(state_dir, 0o711)?;
    make_dir(&state_dir.join("tasks"), 0o711)
}

/// The two ends of a task's PMI socket pair: the task's (`PMI_FD`, inherited by the
/// shepherd, kept until it is started) and the agent's (served by the PMI hub).
#[derive(Debug)]
pub struct PmiPair {
    pub child: std::os::fd::OwnedFd,
    pub task: crate::pmi::PmiTask,
}

/// Writes the task's files and starts its shepherd; `dir` must not exist yet as a task.
/// A task of a job with `mpi: pmi` (or on a node whose `[exec] defaultMpi` is `pmi`)
/// leaves its PMI socket pair in `pmi`.
pub fn launch(
    opts: &TaskOptions,
    node: &str,
    gpus: &[String],
    world: Option<&JobWorld>,
    task: &LaunchTask,
    dir: &TaskDir,
    pmi: &mut Option<PmiPair>,
) -> Launched {
    let fail = |reason: String| Launched::Failed(failed_record(dir, task, reason));
    // The job's directory only traversable (its tasks read the hostfile by name), the
    // task's private to the agent.
    let job_dir = dir.dir.parent().unwrap_or(&dir.dir);
    if let Err(e) = make_dir(job_dir, 0o711).and_then(|()| make_dir(&dir.dir, 0o700)) {
        return fail(format!("cannot create the task directory {}: {e}", dir.dir.display()));
    }
    let Some(world) = world else {
        return fail(format!(
            "no Job frame for job {} (id {}) came before its Launch",
            task.job, task.job_id
        ));
    };
    let context = NodeContext {
        node,
        gpus,
        state_dir: &opts.state_dir,
        pin: opts.pin,
        allow_root: opts.allow_root,
    };
    let mut prepared = match prepare(world, task, &context) {
        Ok(p) => p,
        Err(e) => return fail(e.to_string()),
    };
    // HOME and SHELL from the user's passwd entry (the job's own env still wins). An
    // unknown user is the shepherd's to fail, with its reason.
    let identity = user::lookup(&task.user).ok();
    if let Some(identity) = &identity {
        let env = &mut prepared.spec.env;
        env.entry("HOME".into()).or_insert(identity.home.clone());
        env.entry("SHELL".into()).or_insert(identity.shell.clone());
    }
    // Its own cgroup where the node confines by cgroup: made before the spec names it.
    if let Some(cgroups) = opts.confinement.cgroups() {
        let spec = &prepared.spec;
        let mems = if spec.memory_policy == MemoryPolicy::Bind {
            spec.numa_nodes.as_slice()
        } else {
            &[] // memoryPolicy none: memory goes where the kernel puts it
        };
        // Where the driver says which GPU is which device minor: the others are fenced.
        let fence = GpuFence::for_task(Path::new(PROC_ROOT), &task.gpus, gpus);
        let limits = Limits {
            gpus: fence.as_ref(),
            cpus: &spec.cpus,
            mems,
            memory_max: task.memory_bytes.filter(|&b| b > 0),
            // The job may ask for fewer than the node gives each task, not more.
            pids_max: match (task.max_processes, opts.pids_max) {
                (Some(job), Some(node)) => Some(job.min(node)),
                (job, node) => job.or(node),
            },
        };
        match cgroups.create(&task.job, task.job_id, &task.task, &limits) {
            Ok(paths) => prepared.spec.cgroups = paths,
            Err(e) => return fail(format!("cannot set up the task's cgroup: {e}")),
        }
    }
    if let Some(identity) = &identity {
        prepared.spec.rlimits = rlimits_for(opts, identity);
        prepared.spec.output_mode = Some(opts.output_mode);
    }
    // The job's own /tmp and /dev/shm, which its shepherd makes (when missing) and mounts.
    prepared.spec.private_tmp = opts.private_tmp.job_dirs(&opts.state_dir, &task.job, task.job_id);
    if prepared.spec.private_tmp.is_some() {
        super::jobtmp::claim_shm_root();
    }
    // `hyperplan exec` from inside the job: through this agent, with the job's credential.
    if let Some(credential) = &task.credential {
        let env = &mut prepared.spec.env;
        env.insert("HYPERPLAN_CREDENTIAL".into(), credential.clone());
        let socket = crate::exec::socket_path(&opts.state_dir);
        env.insert("HYPERPLAN_EXEC_SOCKET".into(), socket.to_string_lossy().into_owned());
    }
    if task.mpi.unwrap_or(opts.default_mpi) == MpiMode::Pmi {
        let Some(shape) = crate::pmi::shape(world, node) else {
            return fail(format!("the job's world does not place a rank on node {node}"));
        };
        let (ours, theirs) = match std::os::unix::net::UnixStream::pair() {
            Ok(pair) => pair,
            Err(e) => return fail(format!("cannot make the task's PMI socket: {e}")),
        };
        let fd = theirs.as_raw_fd();
        let env = &mut prepared.spec.env;
        env.insert("PMI_FD".into(), fd.to_string());
        env.insert("PMI_RANK".into(), task.rank.to_string());
        env.insert("PMI_SIZE".into(), shape.size.to_string());
        env.insert("PMI_SPAWNED".into(), "0".into());
        prepared.spec.pmi_fd = Some(fd);
        *pmi = Some(PmiPair {
            child: theirs.into(),
            task: crate::pmi::PmiTask {
                shape,
                rank: task.rank,
                // A user the node does not know fails at the shepherd and never puts.
                uid: identity.as_ref().map_or(u32::MAX, |i| i.uid),
                stream: ours,
            },
        });
    }
    let hostfile = hostfile_path(&opts.state_dir, &task.job, task.job_id);
    // One hostfile per job on this node, the same for each of its tasks here: written by
    // the first, read and left alone by the others (a new file costs more than a read on
    // a busy filesystem: ext4 looks for a free inode).
    // Readable by the job's user (its tasks) and root only.
    let owner = identity
        .as_ref()
        .filter(|_| crate::shepherd::current_euid() == 0)
        .map(|i| (i.uid, i.gid));
    let unchanged = std::fs::read(&hostfile).is_ok_and(|old| old == prepared.hostfile.as_bytes());
    if !unchanged && let Err(e) = write_private(&hostfile, prepared.hostfile.as_bytes(), owner) {
        return fail(format!("cannot write the hostfile {}: {e}", hostfile.display()));
    }
    if world.launch == LaunchMode::Batch {
        let files = crate::launch::batch_files(world, &opts.cli);
        for (name, text, mode) in &files.files {
            let path = job_dir.join(name);
            let same = std::fs::read(&path).is_ok_and(|old| old == text.as_bytes());
            if !same && let Err(e) = write_owned(&path, text.as_bytes(), owner, *mode) {
                return fail(format!("cannot write {}: {e}", path.display()));
            }
        }
        for (key, value) in files.env(job_dir) {
            prepared.spec.env.entry(key).or_insert(value);
        }
    }
    let spec = match serde_json::to_vec_pretty(&prepared.spec) {
        Ok(s) => s,
        Err(e) => return fail(format!("cannot encode the launch spec: {e}")),
    };
    if let Err(e) = write_replace(&dir.spec(), &spec) {
        return fail(format!("cannot write {}: {e}", dir.spec().display()));
    }
    match spawn_shepherd(opts, dir, pmi.as_ref().map(|p| p.child.as_raw_fd())) {
        Ok(shepherd) => Launched::Spawned(shepherd),
        Err(e) if temporary(&e) => Launched::Retry(e),
        Err(e) => Launched::Failed(shepherd_failed(opts, dir, task, &e)),
    }
}

/// The task's resource limits: the user's `limits.conf` (when the agent applies it), the
/// site's `[exec] rlimits` over them, made consistent. What is wrong in the files is
/// logged once per agent run, not at every launch.
fn rlimits_for(opts: &TaskOptions, identity: &user::Identity) -> rlimits::Rlimits {
    let mut warnings = Vec::new();
    let mut limits = if opts.limits_conf {
        let who = rlimits::Who {
            name: identity.name.clone(),
            uid: identity.uid,
            gid: identity.gid,
            groups: identity
                .groups
                .iter()
                .filter_map(|&g| user::group_name(g).map(|n| (n, g)))
                .collect(),
        };
        let (limits, said) = rlimits::for_user(&who, Path::new("/"));
        warnings = said;
        limits
    } else {
        rlimits::Rlimits::new()
    };
    rlimits::merge(&mut limits, &opts.rlimits);
    rlimits::finalize(&mut limits, rlimits::read_nr_open(Path::new("/")), &mut warnings);
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    if let Ok(mut said) = SAID.lock() {
        for w in warnings {
            if said.len() < 256 && !said.contains(&w) {
                tracing::warn!("resource limits for tasks: {w}");
                said.push(w);
            }
        }
    }
    limits
}

/// Starts the shepherd of the task whose files are in `dir` (stderr to its log), as this
/// agent's child or, with a launcher, as the launcher's; `inherit`: a descriptor it keeps
/// (the task's PMI socket, at the number its spec names; the launcher's shepherd is told
/// its own number with `--pmi-fd`).
pub fn spawn_shepherd(opts: &TaskOptions, dir: &TaskDir, inherit: Option<RawFd>) -> std::io::Result<Shepherd> {
    let log = std::fs::File::create(dir.shepherd_log())?;
    if let Some(socket) = &opts.launcher {
        return crate::launcher::client::start_shepherd(socket, &dir.spec(), &log, inherit).map(Shepherd::Launched);
    }
    let mut command = Command::new(&opts.shepherd);
    command
        .arg("shepherd")
        .arg("--spec")
        .arg(dir.spec())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    if let Some(fd) = inherit {
        // SAFETY: fcntl on a descriptor this process owns (open until after the spawn),
        // async-signal-safe; it clears close-on-exec in the child only.
        unsafe {
            command.pre_exec(move || {
                if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    command.spawn().map(Shepherd::Child)
}

/// No shepherd will ever run the task: says so where a restarted agent looks (a pid
/// tombstone) and writes its failed record.
pub fn shepherd_failed(opts: &TaskOptions, dir: &TaskDir, task: &LaunchTask, e: &std::io::Error) -> ExitRecord {
    let _ = write_exclusive(&dir.pid(), b"0\n");
    failed_record(
        dir,
        task,
        match &opts.launcher {
            Some(socket) => format!(
                "cannot start the shepherd through the launcher ({}): {e}",
                socket.display()
            ),
            None => format!("cannot start the shepherd {}: {e}", opts.shepherd.display()),
        },
    )
}

/// A record for a task that did not run (or whose shepherd vanished), written atomically.
/// A write failure is logged: the report still goes out from memory.
pub fn failed_record(dir: &TaskDir, task: &LaunchTask, reason: String) -> ExitRecord {
    let record = synthesized(&task.job, task.job_id, &task.task, task.rank, 0, None, reason);
    write_record(dir, &record);
    record
}

/// An exit record the agent makes itself: outcome failed, with `reason`.
pub fn synthesized(
    job: &str,
    job_id: hyperplan_shared::ids::JobId,
    task: &str,
    rank: u32,
    shepherd_pid: u32,
    pid: Option<u32>,
    reason: String,
) -> ExitRecord {
    let now = now_ms();
    ExitRecord {
        job: job.to_string(),
        job_id,
        task: task.to_string(),
        rank,
        shepherd_pid,
        pid,
        outcome: Outcome::Failed,
        exit_code: None,
        signal: None,
        signal_name: None,
        start_time_ms: now,
        end_time_ms: now,
        cpu_seconds: 0.0,
        max_rss_bytes: 0,
        oom_killed: false,
        reason: Some(reason),
    }
}

pub fn write_record(dir: &TaskDir, record: &ExitRecord) {
    let text = serde_json::to_vec_pretty(record).unwrap_or_default();
    if let Err(e) = write_atomic(&dir.record(), &text) {
        tracing::warn!(path = %dir.record().display(), "cannot write the exit record: {e}");
    }
}

/// Asks the shepherd `pid` to cancel its task: the grace first (`kill_grace`, which the
/// shepherd reads on SIGTERM), then SIGTERM, which it passes on to the task's group.
pub fn cancel(dir: &TaskDir, shepherd_pid: u32, grace_secs: u64, warn: Option<i32>) {
    // `GRACE [SIGNAL]`: the shepherd warns the task with SIGNAL rather than SIGTERM.
    let text = match warn {
        Some(s) => format!("{grace_secs} {s}\n"),
        None => format!("{grace_secs}\n"),
    };
    if let Err(e) = write_replace(&dir.kill_grace(), text.as_bytes()) {
        tracing::warn!(path = %dir.kill_grace().display(), "cannot write the kill grace: {e}");
    }
    signal(shepherd_pid, libc::SIGTERM);
}

/// The files of a job already running here that describe its world (its hostfile, a
/// batch job's MPI hostfiles, the `restart` file), written again for a new world, owned
/// as its hostfile is (by the job's user, who reads them). Nothing is created for a job
/// whose hostfile is not here, and nothing is followed that is not a plain file.
pub fn rewrite_world(opts: &TaskOptions, world: &JobWorld) {
    use std::os::unix::fs::MetadataExt;
    let hostfile = hostfile_path(&opts.state_dir, &world.job, world.job_id);
    let Ok(meta) = std::fs::symlink_metadata(&hostfile) else {
        return;
    };
    if !meta.file_type().is_file() {
        return;
    }
    let owner = (crate::shepherd::current_euid() == 0).then(|| (meta.uid(), meta.gid()));
    let nodes_by_rank: Vec<&str> = world
        .node_of_rank
        .iter()
        .filter_map(|&i| world.nodes.get(i as usize))
        .map(String::as_str)
        .collect();
    let job_dir = crate::shepherd::layout::job_dir(&opts.state_dir, &world.job, world.job_id);
    let mut files: Vec<(PathBuf, String, u32)> = vec![
        (
            hostfile.clone(),
            hyperplan_shared::taskenv::hostfile(&nodes_by_rank),
            0o400,
        ),
        (job_dir.join("restart"), format!("{}\n", world.restart), 0o400),
    ];
    if world.launch == LaunchMode::Batch {
        for (name, text, mode) in crate::launch::batch_files(world, &opts.cli).files {
            files.push((job_dir.join(name), text, mode));
        }
    }
    for (path, text, mode) in files {
        if std::fs::read(&path).is_ok_and(|old| old == text.as_bytes()) {
            continue;
        }
        if let Err(e) = write_owned(&path, text.as_bytes(), owner, mode) {
            tracing::warn!(path = %path.display(), "cannot write the job's new world: {e}");
        }
    }
    tracing::info!(
        job = %world.job,
        job_id = %world.job_id,
        restart = world.restart,
        nodes = world.nodes.join(","),
        "the job's world changed: hostfile written again"
    );
}

/// Sends `signal` to the process `pid` (never to a group or to every process).
pub fn signal(pid: u32, signal: i32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return };
    if pid <= 0 {
        return;
    }
    // SAFETY: kill with a positive pid signals that one process; no memory is involved.
    unsafe { libc::kill(pid, signal) };
}

/// Signals the process group `pgid` leads (a `hyperplan exec` command and what it
/// started in its group).
pub fn signal_group(pgid: u32, signal: i32) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else { return };
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill with a negative pid signals that process group; no memory is involved.
    unsafe { libc::kill(-pgid, signal) };
}

/// After its shepherd died: kills what is left of the task's process group, when the
/// group's leader `task_pid` is still in the dead shepherd's session (not a recycled pid).
pub fn kill_orphaned_task(task_pid: u32, shepherd_pid: u32) {
    let (Ok(task), Ok(shepherd)) = (libc::pid_t::try_from(task_pid), libc::pid_t::try_from(shepherd_pid)) else {
        return;
    };
    if task <= 0 || shepherd <= 0 {
        return;
    }
    // SAFETY: getsid only queries; kill with a negative pid signals that one group.
    unsafe {
        if libc::getsid(task) == shepherd {
            libc::kill(-task, libc::SIGKILL);
        }
    }
}

/// The shepherd of `spec` runs as `pid`: a live process whose command line names the
/// spec (so a recycled pid is not mistaken for it).
pub fn shepherd_alive(pid: u32, spec: &Path) -> bool {
    if pid == 0 {
        return false;
    }
    let Some(cmdline) = super::scan::read_small(Path::new(&format!("/proc/{pid}/cmdline")), 64 * 1024) else {
        return false; // gone, or a zombie (empty command line reads as Some(empty))
    };
    use std::os::unix::ffi::OsStrExt;
    let want = spec.as_os_str().as_bytes();
    !want.is_empty() && cmdline.split(|&b| b == 0).any(|arg| arg == want)
}

/// What `/proc/PID/stat` says of `pid` now; None when it is gone.
pub fn proc_stat(pid: u32) -> Option<super::sweep::Proc> {
    let bytes = super::scan::read_small(Path::new(&format!("/proc/{pid}/stat")), 4096)?;
    super::sweep::parse_stat(pid, std::str::from_utf8(&bytes).ok()?)
}

/// `pid` is the live shepherd of `spec`: its command line names the spec and it leads
/// its own session (a shepherd's first act; the task it forks, before its exec, still
/// shows the shepherd's command line but is no session leader).
pub(crate) fn is_shepherd(pid: u32, spec: &Path) -> bool {
    shepherd_alive(pid, spec) && proc_stat(pid).is_some_and(|p| !p.zombie && p.session == pid)
}

/// The shepherd of `spec` when its pid file is lost or names another process: looked
/// for first among `hints` (the parents and sessions of the task's known processes: its
/// `started.json` pid, its cgroups' members), then among every process in `/proc`, by
/// its command line. Returns its pid and start time (clock ticks after boot), which
/// together name it: a pid alone may be used again.
pub fn find_shepherd(spec: &Path, hints: &[u32]) -> Option<(u32, u64)> {
    let mut candidates: Vec<u32> = Vec::new();
    for &pid in hints {
        if let Some(p) = proc_stat(pid) {
            candidates.extend([p.ppid, p.session]);
        }
    }
    let found = candidates
        .into_iter()
        .filter(|&p| p > 1)
        .find(|&p| is_shepherd(p, spec))
        .or_else(|| {
            let entries = std::fs::read_dir("/proc").ok()?;
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
                .filter(|&p| p > 1 && p != std::process::id())
                .find(|&p| is_shepherd(p, spec))
        })?;
    Some((found, proc_stat(found)?.start_ticks))
}

/// The last line of the shepherd's stderr: why it exited without a record.
pub fn last_log_line(dir: &TaskDir) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(dir.shepherd_log()).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(4096))).ok()?;
    let mut tail = Vec::new();
    file.take(4096).read_to_end(&mut tail).ok()?;
    let text = String::from_utf8_lossy(&tail);
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
