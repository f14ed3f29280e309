//! Starting the task: everything the child does between fork and exec, prepared first.
//!
//! The child is made by `std::process::Command` (stdin `/dev/null`, its own process group,
//! signal mask cleared, the spec's environment only), and a `pre_exec` step that, in this
//! order: joins the cgroup (when the spec names one), sets the CPU affinity
//! (`sched_setaffinity`), binds memory (`set_mempolicy(MPOL_BIND)`), lifts
//! `RLIMIT_MEMLOCK` (RDMA; without the privilege only the soft limit rises to the hard
//! one), switches to the user (`setgroups` with all its groups, `setgid`, `setuid` — std's
//! `Command::uid` would drop the supplementary groups), sets the umask to 0022, opens
//! stdout and stderr as that
//! user (so the files are the user's and the user's permissions apply), and changes to
//! the working directory as that user.
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
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use super::record::describe_errno;
use super::spec::{Checked, MemoryPolicy};
use super::user::Identity;
use crate::probe::live::format_cpu_list;

/// The steps of the child, as numbers in the error pipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Step {
    Cgroup = 1,
    Affinity = 2,
    MemPolicy = 3,
    Memlock = 4,
    Groups = 5,
    Gid = 6,
    Uid = 7,
    Stdout = 8,
    Stderr = 9,
    Chdir = 10,
    /// Every step done; what fails after it is exec itself.
    Ready = 255,
}

impl Step {
    fn from_u8(n: u8) -> Option<Step> {
        Some(match n {
            1 => Step::Cgroup,
            2 => Step::Affinity,
            3 => Step::MemPolicy,
            4 => Step::Memlock,
            5 => Step::Groups,
            6 => Step::Gid,
            7 => Step::Uid,
            8 => Step::Stdout,
            9 => Step::Stderr,
            10 => Step::Chdir,
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
}

/// How the start went.
#[derive(Debug)]
pub enum Started {
    /// The task runs (exec succeeded); its pid is its process group id.
    Running { pid: u32 },
    /// It never ran; why, in words for the record.
    Failed { reason: String },
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
                cgroup_procs: s.cgroup.as_ref().map(|c| cstring(&c.join("cgroup.procs"))),
                cpu_mask,
                node_mask,
                ids: identity.map(|i| (i.groups.clone(), i.gid, i.uid)),
                stdout: cstring(&s.stdout),
                stderr: (s.stderr != s.stdout).then(|| cstring(&s.stderr)),
                working_dir: cstring(&s.working_dir),
                memlock_hard,
            },
            user: s.user.clone(),
            cpus_text: format_cpu_list(&spec.cpus),
            nodes_text: s.numa_nodes.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
            spec,
        }
    }

    /// Forks and execs the task.
    pub fn start(self) -> Started {
        let (mut reader, writer) = match std::io::pipe() {
            Ok(pipe) => pipe,
            Err(e) => {
                return Started::Failed {
                    reason: format!("cannot start the task: creating a pipe failed: {e}"),
                };
            }
        };
        let mut command = Command::new(&self.argv[0]);
        command
            .args(&self.argv[1..])
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        let child = Child {
            pipe: writer.as_raw_fd(),
            setup: self.setup.clone(),
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
        match spawned {
            Ok(child) => Started::Running { pid: child.id() },
            Err(e) => Started::Failed {
                reason: self.reason(&said, &e),
            },
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
        match Step::from_u8(chunk[0]) {
            Some(Step::Cgroup) => format!(
                "cannot join the cgroup {}: {why}",
                s.cgroup.as_deref().unwrap_or(Path::new("")).display()
            ),
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
    /// `cgroup.procs` of the task's cgroup.
    cgroup_procs: Option<CString>,
    cpu_mask: Option<Vec<libc::c_ulong>>,
    node_mask: Option<Vec<libc::c_ulong>>,
    /// (groups, gid, uid) to switch to; None: stay who we are.
    ids: Option<(Vec<libc::gid_t>, libc::gid_t, libc::uid_t)>,
    stdout: CString,
    /// None: the same file as stdout.
    stderr: Option<CString>,
    working_dir: CString,
    memlock_hard: libc::rlim_t,
}

/// What the `pre_exec` closure owns.
struct Child {
    pipe: libc::c_int,
    setup: Setup,
}

const MPOL_BIND: libc::c_long = 2;
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
        if let Some(procs) = &self.setup.cgroup_procs {
            self.join_cgroup(procs)?;
        }
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
        self.lift_memlock()?;
        if let Some((groups, gid, uid)) = &self.setup.ids {
            // SAFETY: `groups` is a live slice of `len` gids.
            let rc = unsafe { libc::setgroups(groups.len(), groups.as_ptr()) };
            self.check(rc.into(), Step::Groups)?;
            // SAFETY: plain syscalls on integers.
            self.check(unsafe { libc::setgid(*gid) }.into(), Step::Gid)?;
            // SAFETY: as above; after this the process is the user, for good.
            self.check(unsafe { libc::setuid(*uid) }.into(), Step::Uid)?;
        }
        // The task's files get the usual modes, whatever umask the agent runs with (its
        // unit's UMask=0077 keeps the agent's own files private).
        // SAFETY: umask cannot fail and touches no memory.
        unsafe { libc::umask(0o022) };
        let out = self.open_output(&self.setup.stdout, Step::Stdout)?;
        self.dup_to(out, 1, Step::Stdout)?;
        match &self.setup.stderr {
            None => self.dup_to(out, 2, Step::Stdout)?,
            Some(path) => {
                let err = self.open_output(path, Step::Stderr)?;
                self.dup_to(err, 2, Step::Stderr)?;
            }
        }
        // SAFETY: a NUL-terminated path that lives as long as `self`.
        let rc = unsafe { libc::chdir(self.setup.working_dir.as_ptr()) };
        self.check(rc.into(), Step::Chdir)?;
        self.tell(Step::Ready, 0);
        Ok(())
    }

    /// Writes this process's pid to `cgroup.procs` (formatted by hand: no allocation).
    fn join_cgroup(&self, procs: &CString) -> std::io::Result<()> {
        // SAFETY: a NUL-terminated path; the descriptor is closed below.
        let fd = unsafe { libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
        self.check(fd.into(), Step::Cgroup)?;
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
        let result = self.check(if written < 0 { -1 } else { 0 }, Step::Cgroup);
        // SAFETY: `fd` is ours and closed once.
        unsafe { libc::close(fd) };
        result
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

    fn open_output(&self, path: &CString, step: Step) -> std::io::Result<libc::c_int> {
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC | libc::O_NOCTTY;
        // SAFETY: a NUL-terminated path; the mode is an integer.
        let fd = unsafe { libc::open(path.as_ptr(), flags, 0o644 as libc::c_uint) };
        self.check(fd.into(), step)?;
        Ok(fd)
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

    fn tell(&self, step: Step, errno: i32) {
        let e = errno.to_le_bytes();
        let message = [step as u8, e[0], e[1], e[2], e[3]];
        // SAFETY: a live 5-byte buffer; a failed write only loses the detail.
        unsafe { libc::write(self.pipe, message.as_ptr().cast(), message.len()) };
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
