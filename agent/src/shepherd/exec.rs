//! Starting the task: everything the child does between fork and exec, prepared first.
//!
//! The child is made by `std::process::Command` (stdin `/dev/null`, its own process group,
//! signal mask cleared, the spec's environment only), and a `pre_exec` step that, in this
//! order: joins the task's cgroups (each the spec names), puts `oom_score_adj` back to 0
//! (the agent and shepherds run below it, so the OOM killer takes a task), sets the CPU affinity
//! (`sched_setaffinity`), binds memory (`set_mempolicy(MPOL_BIND)`), lifts
//! `RLIMIT_MEMLOCK` (RDMA; without the privilege only the soft limit rises to the hard
//! one), switches to the user (`setgroups` with all its groups, `setgid`, `setuid` — std's
//! `Command::uid` would drop the supplementary groups), sets the umask to 0022, opens
//! stdout and stderr as that user (so the files are the user's and the user's
//! permissions apply; without blocking, and only a regular file or `/dev/null`: a FIFO,
//! socket or device named as output is refused, never waited on), and changes to the
//! working directory as that user.
//!
//! A task with `privateTmp` in its spec (its job's own `/tmp` and `/dev/shm`, see
//! [`super::jobtmp`]) opens its output and enters its working directory as the user with
//! only the effective ids switched (`setegid`, `seteuid`: the node's paths, as without),
//! takes root back, enters a mount namespace of its own (`unshare(CLONE_NEWNS)`), makes
//! every mount in it a slave (`MS_REC | MS_SLAVE`: the host's mounts still reach it, none
//! of its own reach the host), bind-mounts the job's directories (made and checked before
//! the fork; what is mounted must be the directory checked) on `/dev/shm` and `/tmp`, and
//! only then switches to the user for good. A working directory that is `/tmp` or `/dev/shm`
//! itself is entered again after the mounts: the job's.
//!
//! Between fork and exec only async-signal-safe calls happen: every string, group list
//! and CPU/node mask is built before the fork. A failed step writes its number and errno
//! into a close-on-exec pipe and fails the spawn; the parent reads the pipe and turns it
//! into the record's `reason` (std reports the errno, the pipe says which step). A pipe
//! that closes without a word means exec succeeded.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::jobtmp::{self, JobTmpError};
use super::record::describe_errno;
use super::spec::{Checked, MemoryPolicy};
use super::step::StepError;
use super::user::Identity;
use crate::probe::live::format_cpu_list;

/// The steps of the child, as numbers in the error pipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Step {
    Affinity = 2,
    MemPolicy = 3,
    Memlock = 4,
    Groups = 5,
    Gid = 6,
    Uid = 7,
    Stdout = 8,
    Stderr = 9,
    Chdir = 10,
    StdoutKind = 11,
    StderrKind = 12,
    Pmi = 13,
    Namespace = 14,
    Propagation = 15,
    MountTmp = 16,
    MountShm = 17,
    /// Not a failure: the namespace could not be made and is not required (the task runs
    /// with the node's `/tmp` and `/dev/shm`).
    NoNamespace = 18,
    Regain = 19,
    Replaced = 20,
    /// Every step done; what fails after it is exec itself.
    Ready = 255,
}

impl Step {
    fn from_u8(n: u8) -> Option<Step> {
        Some(match n {
            2 => Step::Affinity,
            3 => Step::MemPolicy,
            4 => Step::Memlock,
            5 => Step::Groups,
            6 => Step::Gid,
            7 => Step::Uid,
            8 => Step::Stdout,
            9 => Step::Stderr,
            10 => Step::Chdir,
            11 => Step::StdoutKind,
            12 => Step::StderrKind,
            13 => Step::Pmi,
            14 => Step::Namespace,
            15 => Step::Propagation,
            16 => Step::MountTmp,
            17 => Step::MountShm,
            18 => Step::NoNamespace,
            19 => Step::Regain,
            20 => Step::Replaced,
            255 => Step::Ready,
            _ => return None,
        })
    }
}

/// Everything the child needs, built before the fork.
pub struct Prepared {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    setup: Setup,
    // For messages.
    user: String,
    cpus_text: String,
    nodes_text: String,
    spec: Checked,
    /// Who the task's files belong to (uid, gid).
    owner: (u32, u32),
}

/// How the start went.
#[derive(Debug)]
pub enum Started {
    /// The task runs (exec succeeded); its pid is its process group id.
    Running { pid: u32 },
    /// It never ran; why, in words for the record. `temporary`: the fork itself failed
    /// for want of processes or memory (EAGAIN, ENOMEM), and a later try may work.
    Failed { reason: String, temporary: bool },
}

fn cstring(path: &Path) -> CString {
    // Checked specs have no NUL bytes; an empty string would only fail the step.
    CString::new(path.as_os_str().as_bytes()).unwrap_or_default()
}

/// A bitmask of `bits` (each below `1 << 20`), at least `min_bits` long.
fn mask(bits: impl Iterator<Item = u32> + Clone, min_bits: usize) -> Vec<libc::c_ulong> {
    let word = libc::c_ulong::BITS as usize;
    let top = bits.clone().max().map_or(0, |b| b as usize + 1).max(min_bits);
    let mut mask = vec![0; top.div_ceil(word)];
    for b in bits {
        let b = b as usize;
        mask[b / word] |= 1 << (b % word);
    }
    mask
}

impl Prepared {
    /// `identity` None: run as this process's user (it is that user already).
    pub fn new(spec: Checked, identity: Option<&Identity>) -> Prepared {
        let s = &spec.spec;
        let cpu_mask = (!spec.cpus.is_empty()).then(|| mask(spec.cpus.iter().copied(), 1024));
        let node_mask = (s.memory_policy == MemoryPolicy::Bind).then(|| mask(s.numa_nodes.iter().copied(), 64));
        let mut current = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `current` is a valid, writable rlimit.
        let memlock_hard = if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut current) } == 0 {
            current.rlim_max
        } else {
            0
        };
        Prepared {
            argv: s.argv.clone(),
            env: s.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            setup: Setup {
                cgroup_procs: s
                    .all_cgroups()
                    .iter()
                    .take(MAX_CGROUPS)
                    .map(|c| cstring(&c.join("cgroup.procs")))
                    .collect(),
                cpu_mask,
                node_mask,
                ids: identity.map(|i| (i.groups.clone(), i.gid, i.uid)),
                stdout: Some(cstring(&s.stdout)),
                output_mode: s.output_mode.unwrap_or(0o600) as libc::mode_t,
                stderr: (s.stderr != s.stdout).then(|| cstring(&s.stderr)),
                working_dir: cstring(&s.working_dir),
                memlock_hard,
                rlimits: s
                    .rlimits
                    .iter()
                    .map(|(&resource, limit)| {
                        let (now_soft, now_hard) = current_limit(resource);
                        let (soft, hard) = limit.resolve(now_soft, now_hard);
                        (
                            resource.libc_resource(),
                            libc::rlimit {
                                rlim_cur: soft,
                                rlim_max: hard,
                            },
                        )
                    })
                    .collect(),
                pmi_fd: s.pmi_fd,
                private: None,
            },
            user: s.user.clone(),
            cpus_text: format_cpu_list(&spec.cpus),
            nodes_text: s.numa_nodes.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
            spec,
            owner: identity.map_or_else(current_ids, |i| (i.uid, i.gid)),
        }
    }

    /// Makes and opens the job's `/tmp` and `/dev/shm` when the spec has `privateTmp`, for
    /// the child to mount. `Err`: they are required and cannot be had; `Ok(Some)`: they
    /// cannot be had and are not required, so the command runs with the node's (why).
    pub fn open_job_dirs(&mut self) -> Result<Option<JobTmpError>, JobTmpError> {
        let s = &self.spec.spec;
        let Some(dirs) = &s.private_tmp else {
            return Ok(None);
        };
        let job_dir = jobtmp::job_dir_name(&s.job, s.job_id);
        let opened = match jobtmp::open(dirs, &job_dir, self.owner.0, self.owner.1) {
            Ok(opened) => opened,
            Err(e) if dirs.required => return Err(e),
            Err(e) => return Ok(Some(e)),
        };
        let id = |fd: &std::os::fd::OwnedFd| {
            let meta = std::fs::File::from(fd.try_clone()?).metadata()?;
            Ok((meta.dev(), meta.ino()))
        };
        let ids = id(&opened.tmp).and_then(|t| Ok((t, id(&opened.shm)?)));
        let (tmp_id, shm_id) = match ids {
            Ok(ids) => ids,
            Err(source) if dirs.required => {
                return Err(JobTmpError::Io {
                    path: dirs.tmp.clone(),
                    source,
                });
            }
            Err(source) => {
                return Ok(Some(JobTmpError::Io {
                    path: dirs.tmp.clone(),
                    source,
                }));
            }
        };
        let working_dir = s.working_dir.as_path();
        self.setup.private = Some(PrivateMounts {
            tmp: (cstring(&dirs.tmp), tmp_id),
            shm: (cstring(&dirs.shm), shm_id),
            required: dirs.required,
            again: [TMP, SHM]
                .into_iter()
                .find(|m| working_dir == Path::new(m))
                .map(|m| cstring(Path::new(m))),
        });
        Ok(None)
    }

    /// Forks and execs the command with its standard input, output and error as pipes
    /// to the caller, set up as a task is otherwise (cgroups, CPUs, memory, limits, user,
    /// working directory): a step of `hyperplan exec`. `Err`: why it did not start.
    pub fn spawn_piped(&self) -> Result<std::process::Child, StepError> {
        let mut setup = self.setup.clone();
        setup.stdout = None;
        setup.stderr = None;
        self.spawn_step(setup, [Stdio::piped(), Stdio::piped(), Stdio::piped()])
    }

    /// As [`Prepared::spawn_piped`], with these descriptors as the command's standard
    /// input, output and error (pipes the agent made and handed to the launcher).
    pub fn spawn_with(
        &self,
        stdin: std::os::fd::OwnedFd,
        stdout: std::os::fd::OwnedFd,
        stderr: std::os::fd::OwnedFd,
    ) -> Result<std::process::Child, StepError> {
        let mut setup = self.setup.clone();
        setup.stdout = None;
        setup.stderr = None;
        self.spawn_step(setup, [Stdio::from(stdin), Stdio::from(stdout), Stdio::from(stderr)])
    }

    fn spawn_step(&self, setup: Setup, stdio: [Stdio; 3]) -> Result<std::process::Child, StepError> {
        match self.spawn(setup, stdio) {
            Ok((Ok(child), _)) => Ok(child),
            Ok((Err(e), said)) => Err(StepError::Start(self.reason(&said, &e))),
            Err(e) => Err(StepError::Pipe(e)),
        }
    }

    /// Forks and execs with `setup` in the child and `stdio` as its standard input,
    /// output and error; the spawn's result and what the child said on the error pipe.
    fn spawn(
        &self,
        setup: Setup,
        stdio: [Stdio; 3],
    ) -> std::io::Result<(std::io::Result<std::process::Child>, Vec<u8>)> {
        let (mut reader, writer) = std::io::pipe()?;
        let mut command = Command::new(&self.argv[0]);
        let [stdin, stdout, stderr] = stdio;
        command
            .args(&self.argv[1..])
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(stdin)
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0);
        let child = Child {
            pipe: writer.as_raw_fd(),
            setup,
        };
        // SAFETY: the closure only makes async-signal-safe calls (raw syscalls on data
        // built before the fork, no allocation, no locks); see `Child::set_up`.
        unsafe {
            command.pre_exec(move || child.set_up());
        }
        let spawned = command.spawn();
        // Ours closes here; the child's closed at exec (or exit): the read ends.
        drop(command);
        drop(writer);
        let mut said = Vec::new();
        let _ = reader.read_to_end(&mut said);
        Ok((spawned, said))
    }

    /// Forks and execs the task.
    pub fn start(&self) -> Started {
        let (spawned, said) = match self.spawn(self.setup.clone(), [Stdio::null(), Stdio::null(), Stdio::null()]) {
            Ok(r) => r,
            Err(e) => {
                return Started::Failed {
                    reason: format!("cannot start the task: creating a pipe failed: {e}"),
                    temporary: false,
                };
            }
        };
        match spawned {
            Ok(child) => {
                if let Some(chunk) = said.chunks_exact(5).find(|c| c[0] == Step::NoNamespace as u8) {
                    let why = describe_errno(i32::from_le_bytes([chunk[1], chunk[2], chunk[3], chunk[4]]));
                    eprintln!(
                        "hyperplan-agent shepherd: the task runs with the node's /tmp and /dev/shm, not its job's: \
                         unshare(CLONE_NEWNS) failed: {why}"
                    );
                }
                Started::Running { pid: child.id() }
            }
            Err(e) => Started::Failed {
                reason: self.reason(&said, &e),
                // Nothing said on the pipe: no child ran, the fork failed.
                temporary: said.is_empty() && matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ENOMEM)),
            },
        }
    }

    /// The job's `/tmp` (`tmp`) or `/dev/shm` directory, for messages.
    fn job_dir(&self, tmp: bool) -> String {
        match &self.spec.spec.private_tmp {
            Some(d) if tmp => d.tmp.display().to_string(),
            Some(d) => d.shm.display().to_string(),
            None => String::new(),
        }
    }

    /// Why the `index`th of the spec's resource limits could not be set.
    fn rlimit_reason(&self, index: u8, why: &str) -> String {
        let show = |v: Option<u64>| match v {
            None => "unchanged".to_string(),
            Some(super::rlimits::UNLIMITED) => "unlimited".to_string(),
            Some(v) => v.to_string(),
        };
        match self.spec.spec.rlimits.iter().nth(usize::from(index)) {
            Some((resource, limit)) => format!(
                "cannot set the task's {resource} limit (soft {}, hard {}): {why}",
                show(limit.soft),
                show(limit.hard)
            ),
            None => format!("cannot set the task's resource limits: {why}"),
        }
    }

    /// The record's words for a failed start.
    fn reason(&self, said: &[u8], error: &std::io::Error) -> String {
        let s = &self.spec.spec;
        let last = said.chunks_exact(5).next_back();
        let Some(chunk) = last else {
            return format!("cannot start the task: {error}");
        };
        let errno = i32::from_le_bytes([chunk[1], chunk[2], chunk[3], chunk[4]]);
        let why = describe_errno(if errno != 0 {
            errno
        } else {
            error.raw_os_error().unwrap_or(0)
        });
        let user = &self.user;
        if let Some(index) = chunk[0]
            .checked_sub(RLIMIT_STEPS)
            .filter(|_| chunk[0] != Step::Ready as u8)
        {
            return self.rlimit_reason(index, &why);
        }
        if let Some(index) = chunk[0]
            .checked_sub(CGROUP_STEPS)
            .filter(|&i| i < RLIMIT_STEPS - CGROUP_STEPS)
        {
            let cgroups = s.all_cgroups();
            let which = cgroups.get(usize::from(index)).map_or(Path::new(""), PathBuf::as_path);
            return format!("cannot join the cgroup {}: {why}", which.display());
        }
        let not_a_file = |path: &Path| {
            format!(
                "the output file {} is not a regular file (a FIFO, socket or device): a task writes to a file or /dev/null",
                path.display()
            )
        };
        match Step::from_u8(chunk[0]) {
            Some(Step::Affinity) => format!("cannot pin the task to CPUs {}: {why}", self.cpus_text),
            Some(Step::MemPolicy) => format!("cannot bind the task's memory to NUMA nodes {}: {why}", self.nodes_text),
            Some(Step::Memlock) => format!("cannot raise RLIMIT_MEMLOCK: {why}"),
            Some(Step::Groups) => format!("cannot switch to user {user}: setgroups failed: {why}"),
            Some(Step::Gid) => format!("cannot switch to user {user}: setgid failed: {why}"),
            Some(Step::Uid) => format!("cannot switch to user {user}: setuid failed: {why}"),
            Some(Step::Stdout) => format!(
                "cannot open the output file {} as user {user}: {why}",
                s.stdout.display()
            ),
            Some(Step::Stderr) => format!(
                "cannot open the error file {} as user {user}: {why}",
                s.stderr.display()
            ),
            Some(Step::StdoutKind) => not_a_file(&s.stdout),
            Some(Step::StderrKind) => not_a_file(&s.stderr),
            Some(Step::Pmi) => format!("cannot pass the PMI socket on to the task: {why}"),
            Some(Step::Namespace | Step::NoNamespace) => format!(
                "cannot give the task its job's own /tmp and /dev/shm: unshare(CLONE_NEWNS) failed: {why} \
                 (agent.toml [exec] privateTmp = false runs tasks with the node's)"
            ),
            Some(Step::Propagation) => {
                format!("cannot keep the task's mounts from the node's (mount --make-rslave /): {why}")
            }
            Some(Step::MountTmp) => format!("cannot mount the job's {} on /tmp: {why}", self.job_dir(true)),
            Some(Step::MountShm) => format!("cannot mount the job's {} on /dev/shm: {why}", self.job_dir(false)),
            Some(Step::Regain) => format!("cannot take root back to mount the job's /tmp and /dev/shm: {why}"),
            Some(Step::Replaced) => format!(
                "the job's {} or {} was replaced between its check and its mount: not used",
                self.job_dir(true),
                self.job_dir(false)
            ),
            Some(Step::Chdir) => format!(
                "cannot chdir to the working directory {} as user {user}: {why}",
                s.working_dir.display()
            ),
            Some(Step::Ready) => {
                let why = describe_errno(error.raw_os_error().unwrap_or(0));
                format!("cannot execute {:?}: {why}", s.argv[0])
            }
            None => format!("cannot start the task: {error}"),
        }
    }
}

/// What the child sets up between fork and exec, all built before the fork.
#[derive(Clone)]
struct Setup {
    /// `cgroup.procs` of each of the task's cgroups.
    cgroup_procs: Vec<CString>,
    cpu_mask: Option<Vec<libc::c_ulong>>,
    node_mask: Option<Vec<libc::c_ulong>>,
    /// (groups, gid, uid) to switch to; None: stay who we are.
    ids: Option<(Vec<libc::gid_t>, libc::gid_t, libc::uid_t)>,
    /// None: standard output and error are left as the spawner made them (pipes, for
    /// `hyperplan exec`).
    stdout: Option<CString>,
    /// None: the same file as stdout.
    stderr: Option<CString>,
    working_dir: CString,
    memlock_hard: libc::rlim_t,
    /// setrlimit calls, resolved against the shepherd's own limits.
    rlimits: Vec<(super::rlimits::RawResource, libc::rlimit)>,
    /// The PMI socket the task keeps open across exec.
    pmi_fd: Option<libc::c_int>,
    /// The mode output files are created with (less the umask).
    output_mode: libc::mode_t,
    /// The job's own `/tmp` and `/dev/shm`, when the spec asks and they could be opened.
    private: Option<PrivateMounts>,
}

/// What the child mounts for `privateTmp`.
#[derive(Clone)]
struct PrivateMounts {
    /// The job's directories, with the (device, inode) each had when checked before the
    /// fork: the path is looked up again in the new namespace (a descriptor opened in the
    /// old one cannot be bind-mounted there), and what it mounted must be what was checked.
    tmp: (CString, (u64, u64)),
    shm: (CString, (u64, u64)),
    /// Without a mount namespace the task fails (else it runs with the node's).
    required: bool,
    /// The working directory is `/tmp` or `/dev/shm` itself: entered again once mounted.
    again: Option<CString>,
}

/// What the `pre_exec` closure owns.
struct Child {
    pipe: libc::c_int,
    setup: Setup,
}

const MPOL_BIND: libc::c_long = 2;
/// Error-pipe step numbers from here on name the cgroup (`CGROUP_STEPS + index`).
const CGROUP_STEPS: u8 = 64;
/// And from here on the resource limit (`RLIMIT_STEPS + index`).
const RLIMIT_STEPS: u8 = 128;
/// The most cgroups a task joins (one per hierarchy in practice).
const MAX_CGROUPS: usize = 16;
/// `/proc/self/oom_score_adj` with its NUL, for the child.
const OOM_SCORE_ADJ: &[u8] = b"/proc/self/oom_score_adj\0";
/// Where the job's directories are mounted, with and without their NUL.
const TMP: &str = "/tmp";
const SHM: &str = "/dev/shm";
const TMP_C: &[u8] = b"/tmp\0";
const SHM_C: &[u8] = b"/dev/shm\0";
const ROOT_C: &[u8] = b"/\0";
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

impl Child {
    /// Runs in the child between fork and exec: async-signal-safe calls only.
    fn set_up(&self) -> std::io::Result<()> {
        // The shepherd blocks the signals it waits for, and whoever started it may have
        // ignored some: the task starts with none blocked and these at their defaults.
        for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGCHLD, libc::SIGQUIT] {
            // SAFETY: resetting a disposition to SIG_DFL is async-signal-safe.
            unsafe { libc::signal(signal, libc::SIG_DFL) };
        }
        // SAFETY: `set` is initialised by sigemptyset before use.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: a valid sigset_t; the old mask is not wanted.
        unsafe {
            libc::sigemptyset(&mut set);
            libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        }
        // SAFETY: close_range only flags descriptors close-on-exec; descriptors 0-2 and
        // the error pipe (already close-on-exec) stay usable until exec. Older kernels
        // answer ENOSYS, which changes nothing.
        unsafe {
            libc::syscall(
                libc::SYS_close_range,
                3 as libc::c_uint,
                libc::c_uint::MAX,
                CLOSE_RANGE_CLOEXEC,
            )
        };
        if let Some(fd) = self.setup.pmi_fd {
            // SAFETY: fcntl on an integer descriptor, async-signal-safe.
            let rc = unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
            self.check(rc.into(), Step::Pmi)?;
        }
        for (index, procs) in self.setup.cgroup_procs.iter().enumerate() {
            self.join_cgroup(procs, index as u8)?;
        }
        reset_oom_score_adj();
        if let Some(mask) = &self.setup.cpu_mask {
            let bytes = std::mem::size_of_val(mask.as_slice());
            // SAFETY: `mask` is a live buffer of `bytes` bytes; pid 0 is this process.
            let rc = unsafe { libc::syscall(libc::SYS_sched_setaffinity, 0 as libc::pid_t, bytes, mask.as_ptr()) };
            self.check(rc, Step::Affinity)?;
        }
        if let Some(mask) = &self.setup.node_mask {
            // The kernel reads maxnode - 1 bits (as libnuma passes them).
            let maxnode = mask.len() as libc::c_ulong * libc::c_ulong::from(libc::c_ulong::BITS) + 1;
            // SAFETY: `mask` is a live buffer of at least (maxnode - 1) bits.
            let rc = unsafe { libc::syscall(libc::SYS_set_mempolicy, MPOL_BIND, mask.as_ptr(), maxnode) };
            self.check(rc, Step::MemPolicy)?;
        }
        // The spec's limits, as root still (a hard limit may rise); memlock is lifted for
        // RDMA unless the spec names it.
        for (index, (resource, limit)) in self.setup.rlimits.iter().enumerate() {
            self.set_rlimit(*resource, limit, index as u8)?;
        }
        if !self.setup.rlimits.iter().any(|(r, _)| *r == libc::RLIMIT_MEMLOCK) {
            self.lift_memlock()?;
        }
        let private = self.setup.private.as_ref();
        if let Some((groups, gid, uid)) = &self.setup.ids {
            // SAFETY: `groups` is a live slice of `len` gids.
            let rc = unsafe { libc::setgroups(groups.len(), groups.as_ptr()) };
            self.check(rc.into(), Step::Groups)?;
            if private.is_some() {
                // The user's files are opened as the user; the mounts below still need root.
                // SAFETY: plain syscalls on integers; the saved uid stays 0.
                self.check(unsafe { libc::setegid(*gid) }.into(), Step::Gid)?;
                // SAFETY: as above.
                self.check(unsafe { libc::seteuid(*uid) }.into(), Step::Uid)?;
            } else {
                self.become_user(*gid, *uid)?;
            }
        }
        // The task's files get the usual modes, whatever umask the agent runs with (its
        // unit's UMask=0077 keeps the agent's own files private).
        // SAFETY: umask cannot fail and touches no memory.
        unsafe { libc::umask(0o022) };
        if let Some(stdout) = &self.setup.stdout {
            let out = self.open_output(stdout, Step::Stdout)?;
            self.dup_to(out, 1, Step::Stdout)?;
            match &self.setup.stderr {
                None => self.dup_to(out, 2, Step::Stdout)?,
                Some(path) => {
                    let err = self.open_output(path, Step::Stderr)?;
                    self.dup_to(err, 2, Step::Stderr)?;
                }
            }
        }
        // SAFETY: a NUL-terminated path that lives as long as `self`.
        let rc = unsafe { libc::chdir(self.setup.working_dir.as_ptr()) };
        self.check(rc.into(), Step::Chdir)?;
        if let Some(private) = private {
            if self.setup.ids.is_some() {
                // SAFETY: a plain syscall; the real and saved uids are still 0.
                self.check(unsafe { libc::seteuid(0) }.into(), Step::Regain)?;
            }
            let mounted = self.mount_job_dirs(private)?;
            if let Some((_, gid, uid)) = &self.setup.ids {
                self.become_user(*gid, *uid)?;
            }
            if let (true, Some(dir)) = (mounted, &private.again) {
                // SAFETY: a NUL-terminated path that lives as long as `self`.
                let rc = unsafe { libc::chdir(dir.as_ptr()) };
                self.check(rc.into(), Step::Chdir)?;
            }
        }
        self.tell(Step::Ready, 0);
        Ok(())
    }

    /// `setgid`, `setuid`: after this the process is the user, for good.
    fn become_user(&self, gid: libc::gid_t, uid: libc::uid_t) -> std::io::Result<()> {
        // SAFETY: plain syscalls on integers.
        self.check(unsafe { libc::setgid(gid) }.into(), Step::Gid)?;
        // SAFETY: as above.
        self.check(unsafe { libc::setuid(uid) }.into(), Step::Uid)
    }

    /// A mount namespace of the process's own, slave to the host's, with the job's
    /// directories on `/dev/shm` and `/tmp`. `Ok(false)`: no namespace could be made and
    /// none is required (said on the pipe; the task sees the node's).
    fn mount_job_dirs(&self, private: &PrivateMounts) -> std::io::Result<bool> {
        // SAFETY: unshare takes flags only.
        if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
            if !private.required && matches!(errno, libc::EPERM | libc::EINVAL | libc::ENOSYS) {
                self.tell(Step::NoNamespace, errno);
                return Ok(false);
            }
            self.tell(Step::Namespace, errno);
            return Err(std::io::Error::from_raw_os_error(errno));
        }
        let none = std::ptr::null::<libc::c_char>();
        // SAFETY: NUL-terminated constant paths, null type and data (a propagation change).
        let rc = unsafe {
            libc::mount(
                none,
                ROOT_C.as_ptr().cast(),
                none,
                libc::MS_REC | libc::MS_SLAVE,
                std::ptr::null(),
            )
        };
        self.check(rc.into(), Step::Propagation)?;
        for ((source, id), target, step) in [
            (&private.shm, SHM_C, Step::MountShm),
            (&private.tmp, TMP_C, Step::MountTmp),
        ] {
            // SAFETY: NUL-terminated paths that live as long as `self`; a bind mount takes
            // no type nor data.
            let rc = unsafe {
                libc::mount(
                    source.as_ptr(),
                    target.as_ptr().cast(),
                    none,
                    libc::MS_BIND,
                    std::ptr::null(),
                )
            };
            self.check(rc.into(), step)?;
            // SAFETY: `st` is written by stat before it is read; a constant path.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            let rc = unsafe { libc::stat(target.as_ptr().cast(), &mut st) };
            self.check(rc.into(), step)?;
            if (st.st_dev, st.st_ino) != *id {
                self.tell(Step::Replaced, 0);
                return Err(std::io::Error::from_raw_os_error(libc::ESTALE));
            }
        }
        Ok(true)
    }

    /// Writes this process's pid to `cgroup.procs` (formatted by hand: no allocation).
    fn join_cgroup(&self, procs: &CString, index: u8) -> std::io::Result<()> {
        // SAFETY: a NUL-terminated path; the descriptor is closed below.
        let fd = unsafe { libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
        self.check_cgroup(fd.into(), index)?;
        // SAFETY: getpid cannot fail.
        let mut pid = unsafe { libc::getpid() } as u32;
        let mut digits = [0u8; 12];
        let mut start = digits.len();
        loop {
            start -= 1;
            digits[start] = b'0' + (pid % 10) as u8;
            pid /= 10;
            if pid == 0 {
                break;
            }
        }
        let text = &digits[start..];
        // SAFETY: `text` is a live buffer of `text.len()` bytes; `fd` is open.
        let written = unsafe { libc::write(fd, text.as_ptr().cast(), text.len()) };
        let result = self.check_cgroup(if written < 0 { -1 } else { 0 }, index);
        // SAFETY: `fd` is ours and closed once.
        unsafe { libc::close(fd) };
        result
    }

    /// One of the spec's limits. Without the privilege to raise a hard limit (a
    /// container without CAP_SYS_RESOURCE), both stop at the current hard limit, as a
    /// login's would.
    fn set_rlimit(&self, resource: super::rlimits::RawResource, want: &libc::rlimit, index: u8) -> std::io::Result<()> {
        // SAFETY: a valid rlimit value.
        if unsafe { libc::setrlimit(resource, want) } == 0 {
            return Ok(());
        }
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
        let mut now = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `now` is a valid, writable rlimit.
        if errno == libc::EPERM && unsafe { libc::getrlimit(resource, &mut now) } == 0 {
            let hard = want.rlim_max.min(now.rlim_max);
            let clamped = libc::rlimit {
                rlim_cur: want.rlim_cur.min(hard),
                rlim_max: hard,
            };
            // SAFETY: a valid rlimit value.
            if unsafe { libc::setrlimit(resource, &clamped) } == 0 {
                return Ok(());
            }
        }
        self.tell_raw(RLIMIT_STEPS + index, errno);
        Err(std::io::Error::from_raw_os_error(errno))
    }

    fn lift_memlock(&self) -> std::io::Result<()> {
        let unlimited = libc::rlimit {
            rlim_cur: libc::RLIM_INFINITY,
            rlim_max: libc::RLIM_INFINITY,
        };
        // SAFETY: a valid rlimit value.
        if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) } == 0 {
            return Ok(());
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
            return self.check(-1, Step::Memlock);
        }
        // Not privileged: the soft limit may still rise to the hard one.
        let hard = libc::rlimit {
            rlim_cur: self.setup.memlock_hard,
            rlim_max: self.setup.memlock_hard,
        };
        // SAFETY: a valid rlimit value; a failure here is ignored (best effort).
        unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &hard) };
        Ok(())
    }

    /// Opens an output file as the user without ever blocking: a path that is there and
    /// is not a regular file (or `/dev/null`) is refused before it is opened, the open is
    /// non-blocking (a FIFO would wait for a reader), and what was opened is checked
    /// again; then the descriptor is made blocking for the task.
    fn open_output(&self, path: &CString, step: Step) -> std::io::Result<libc::c_int> {
        let kind = if step == Step::Stdout {
            Step::StdoutKind
        } else {
            Step::StderrKind
        };
        // SAFETY: `st` is written by stat before it is read.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated path and a live stat buffer.
        if unsafe { libc::stat(path.as_ptr(), &mut st) } == 0 && !writable_kind(&st) {
            return self.refuse(kind);
        }
        let flags =
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK;
        // SAFETY: a NUL-terminated path; the mode is an integer.
        let fd = unsafe { libc::open(path.as_ptr(), flags, self.setup.output_mode as libc::c_uint) };
        self.check(fd.into(), step)?;
        // SAFETY: `fd` is open and `st` a live buffer.
        if unsafe { libc::fstat(fd, &mut st) } != 0 || !writable_kind(&st) {
            // SAFETY: `fd` is ours, closed once.
            unsafe { libc::close(fd) };
            return self.refuse(kind);
        }
        // SAFETY: fcntl on an open descriptor with integer arguments.
        let rc = unsafe {
            let fl = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK)
        };
        self.check(rc.into(), step)?;
        Ok(fd)
    }

    /// Fails `step` with no errno (what it found is the reason).
    fn refuse(&self, step: Step) -> std::io::Result<libc::c_int> {
        self.tell(step, 0);
        Err(std::io::Error::from_raw_os_error(libc::EINVAL))
    }

    fn dup_to(&self, fd: libc::c_int, target: libc::c_int, step: Step) -> std::io::Result<()> {
        // SAFETY: both descriptors are open; dup2 clears close-on-exec on `target`.
        let rc = unsafe { libc::dup2(fd, target) };
        self.check(rc.into(), step)
    }

    /// `rc < 0`: the step failed with errno; say so on the pipe and fail the spawn.
    fn check(&self, rc: libc::c_long, step: Step) -> std::io::Result<()> {
        if rc >= 0 {
            return Ok(());
        }
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
        self.tell(step, errno);
        Err(std::io::Error::from_raw_os_error(errno))
    }

    /// As [`Child::check`] for joining the `index`th cgroup.
    fn check_cgroup(&self, rc: libc::c_long, index: u8) -> std::io::Result<()> {
        if rc >= 0 {
            return Ok(());
        }
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
        self.tell_raw(CGROUP_STEPS + index, errno);
        Err(std::io::Error::from_raw_os_error(errno))
    }

    fn tell(&self, step: Step, errno: i32) {
        self.tell_raw(step as u8, errno);
    }

    fn tell_raw(&self, step: u8, errno: i32) {
        let e = errno.to_le_bytes();
        let message = [step, e[0], e[1], e[2], e[3]];
        // SAFETY: a live 5-byte buffer; a failed write only loses the detail.
        unsafe { libc::write(self.pipe, message.as_ptr().cast(), message.len()) };
    }
}

/// This process's effective (uid, gid).
fn current_ids() -> (u32, u32) {
    // SAFETY: geteuid and getegid cannot fail.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// This process's (soft, hard) limit of `resource`; unlimited when unreadable.
fn current_limit(resource: super::rlimits::Resource) -> (u64, u64) {
    let mut now = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: `now` is a valid, writable rlimit.
    unsafe { libc::getrlimit(resource.libc_resource(), &mut now) };
    (now.rlim_cur, now.rlim_max)
}

/// A regular file, or the null device (`/dev/null`, 1:3): what a task may write to.
fn writable_kind(st: &libc::stat) -> bool {
    let kind = st.st_mode & libc::S_IFMT;
    kind == libc::S_IFREG || (kind == libc::S_IFCHR && st.st_rdev == libc::makedev(1, 3))
}

/// Back to the kernel's default OOM score for the task: the agent and its shepherds run
/// with a low one so that the OOM killer takes the task that overran, not them. Best
/// effort (async-signal-safe: open, write, close).
fn reset_oom_score_adj() {
    // SAFETY: a NUL-terminated constant path; the descriptor is closed below.
    let fd = unsafe { libc::open(OOM_SCORE_ADJ.as_ptr().cast(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd >= 0 {
        // SAFETY: a live 1-byte buffer; `fd` is ours, closed once.
        unsafe {
            libc::write(fd, b"0".as_ptr().cast(), 1);
            libc::close(fd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_set_the_right_bits() {
        let m = mask([0u32, 3, 64, 65].into_iter(), 1024);
        assert_eq!(m.len(), 1024 / libc::c_ulong::BITS as usize);
        assert_eq!(m[0], 0b1001);
        assert_eq!(m[64 / libc::c_ulong::BITS as usize] & 0b11, 0b11);
        assert_eq!(
            mask([2000u32].into_iter(), 1024).len(),
            2001usize.div_ceil(libc::c_ulong::BITS as usize)
        );
    }
}
