//! `ReadLog`: up to `max_bytes` (at most [`MAX_LOG_CHUNK`]) of a task's output or error
//! file from an offset, the path taken from the task's spec, or, once its end was
//! acknowledged and its directory removed, from what the agent kept of it (`hyperplan
//! logs` of an ended job). Blocking (a file on NFS may be slow): the link runs it off the
//! async thread, a few at a time.
//!
//! The task's user names the file (and may replace it with a link to anything), so the
//! agent reads it with that user's rights and opens nothing but a regular file:
//!
//! - As root, the reading thread, and only it, takes the user's filesystem identity for
//!   the read: supplementary groups, fsgid and fsuid, with the raw per-thread syscalls
//!   (glibc's `setgroups` would change every thread of the agent). An fsuid other than 0
//!   drops the thread's file capabilities (`CAP_DAC_OVERRIDE`, `CAP_DAC_READ_SEARCH`, …),
//!   so the kernel checks the user's permissions on the file and on every directory on
//!   its way. Each switch is checked, and root's identity comes back when the read ends,
//!   however it ends ([`UserFs`]'s `Drop`). An agent that is not root reads as itself.
//! - The path is first opened with `O_PATH`, which opens nothing (no FIFO writer is
//!   released, no device driver's `open` runs); only a regular file is then opened for
//!   reading, through `/proc/self/fd/N` (which checks the user's read permission), and
//!   checked to be the same file.
//! - Nothing is found through `/proc`'s magic links (`openat2` with
//!   `RESOLVE_NO_MAGICLINKS`; a lexical check where the kernel predates it), nor in `/proc`,
//!   `/sys` or `/dev` at all: `/proc/self/fd/2` opened by the agent is the agent's own log,
//!   whoever names it, and `self` is always ptrace-able by the one who opens it.
//! - A task's output is its user's own file: one of another user's (the agent's log, a
//!   world-readable file the task linked to) is not read, even where the user could read it.
//! - The errors are the user's own (`Permission denied`, `No such file or directory`, `not
//!   a regular file` for what the user can reach): nothing about a file the user could
//!   not see for themselves.

#![allow(unsafe_code)]

use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use hyperplan_net::messages::LogChunk;

use crate::shepherd::user::Identity;
use crate::shepherd::{LaunchSpec, current_euid};

/// The most bytes one answer carries, whatever was asked.
pub const MAX_LOG_CHUNK: u32 = 1 << 20;

/// Where a task's output files are named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The task's spec (its directory is still there).
    Spec(PathBuf),
    /// The files, kept after its directory was removed.
    Files(Outputs),
    /// A step's output (`hyperplan exec`), which the agent wrote in its own directory
    /// (`exec::step::output_path`): read with the agent's rights.
    Step(PathBuf),
}

/// A task's output and error files, and the user it ran as: the agent (root) reads them
/// for `logs` with that user's rights, so a task that swapped its output for a link to a
/// file it may not read (`/etc/shadow`) gets nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outputs {
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    pub user: String,
}

/// The output files a spec names.
pub fn output_files(spec: &Path) -> Option<Outputs> {
    LaunchSpec::read(spec).ok().map(|s| Outputs {
        stdout: s.stdout,
        stderr: s.stderr,
        user: s.user,
    })
}

/// Reads the chunk `request` asks for from the task's output (`stderr`: its error file).
pub fn read_chunk(request: u64, source: &Source, stderr: bool, offset: u64, max_bytes: u32) -> LogChunk {
    let mut chunk = LogChunk {
        request,
        offset,
        data: Vec::new(),
        size: 0,
        error: None,
    };
    let outputs = match source {
        Source::Spec(spec) => match output_files(spec) {
            Some(o) => o,
            None => {
                chunk.error = Some(
                    LaunchSpec::read(spec)
                        .err()
                        .map_or_else(|| "cannot read the launch spec".to_string(), |e| e.to_string()),
                );
                return chunk;
            }
        },
        Source::Files(o) => o.clone(),
        Source::Step(path) => {
            match read_file(path, offset, max_bytes.min(MAX_LOG_CHUNK)) {
                Ok((data, size)) => {
                    chunk.data = data;
                    chunk.size = size;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    chunk.error = Some("no output of that step on this node (it wrote none, or it was pruned)".into());
                }
                Err(e) => chunk.error = Some(format!("{}: {e}", path.display())),
            }
            return chunk;
        }
    };
    let path = if stderr { &outputs.stderr } else { &outputs.stdout };
    // Root reads as the task's user (looked up before the switch: NSS may need root's
    // rights); any other agent reads as itself.
    let user = if current_euid() == 0 {
        match crate::shepherd::user::lookup(&outputs.user) {
            Ok(id) => Some(id),
            Err(e) => {
                chunk.error = Some(e.to_string());
                return chunk;
            }
        }
    } else {
        None
    };
    // The file must be the task user's: the one looked up as root, the agent's own
    // otherwise (it runs the tasks as itself).
    let owner = user.as_ref().map_or_else(current_euid, |u| u.uid);
    match read_as(user.as_ref(), owner, path, offset, max_bytes.min(MAX_LOG_CHUNK)) {
        Ok((data, size)) => {
            chunk.data = data;
            chunk.size = size;
        }
        Err(e) => chunk.error = Some(format!("{}: {e}", path.display())),
    }
    chunk
}

/// [`read_file`] with `user`'s filesystem identity on this thread, when given; the
/// thread's own is back when this returns.
fn read_as(user: Option<&Identity>, owner: u32, path: &Path, offset: u64, max: u32) -> io::Result<(Vec<u8>, u64)> {
    if hyperplan_shared::outpattern::in_kernel_tree(path) {
        return Err(io::Error::other(KERNEL_FILE));
    }
    let _as_user = user.map(UserFs::enter).transpose()?;
    let (file, size) = open_regular(path)?;
    // Checked once it was found readable: its owner is no secret then.
    if file.metadata()?.uid() != owner {
        return Err(io::Error::other(
            "a file of another user (a task's output is its user's own file)",
        ));
    }
    read_from(file, size, offset, max)
}

/// Why a path in `/proc`, `/sys` or `/dev`, or through `/proc`'s links, is not read.
const KERNEL_FILE: &str = "not a task's output: in /proc, /sys or /dev, or through /proc's links";

/// `(bytes from offset, the file's length)`, with the thread's rights. Only a regular
/// file is opened: the path is resolved with `O_PATH` first (links followed, nothing
/// opened: a FIFO's writer is not released, a device's driver is not called), and a
/// regular file is then opened for reading through `/proc/self/fd` (read permission
/// checked) and checked to be the same file.
fn read_file(path: &Path, offset: u64, max: u32) -> io::Result<(Vec<u8>, u64)> {
    let (file, size) = open_regular(path)?;
    read_from(file, size, offset, max)
}

/// `path` resolved with `O_PATH` and no magic link followed (`/proc/self/fd/N`,
/// `/proc/PID/root`, ...: `openat2`'s `RESOLVE_NO_MAGICLINKS`); a plain `O_PATH` open on a
/// kernel without `openat2` (before 5.6), where only the path as written was checked.
fn open_path(path: &Path) -> io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: an all-zero `open_how` is valid (no flags, no mode, no resolve flags).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: `c_path` is a NUL-terminated string and `how` a live `open_how` of the
    // size passed; the kernel reads both and returns a new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            c_path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd >= 0 {
        let fd = libc::c_int::try_from(fd).map_err(|_| io::Error::other("openat2 returned no descriptor"))?;
        // SAFETY: `fd` was just opened by this thread and nothing else owns it.
        return Ok(unsafe { std::fs::File::from_raw_fd(fd) });
    }
    let e = io::Error::last_os_error();
    // std adds O_CLOEXEC; with O_PATH, O_RDONLY (0) is ignored. Opens nothing either.
    let plain = || {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH)
            .open(path)
    };
    match e.raw_os_error() {
        // Through a magic link, unless a plain open fails too (a loop of links).
        Some(libc::ELOOP) => plain().and(Err(io::Error::other(KERNEL_FILE))),
        // No openat2 here (before 5.6, or a filter refusing it): the owner check stands.
        Some(libc::ENOSYS | libc::EPERM | libc::E2BIG) => plain(),
        _ => Err(e),
    }
}

/// The regular file at `path`, opened for reading, and its length.
fn open_regular(path: &Path) -> io::Result<(std::fs::File, u64)> {
    let handle = open_path(path)?;
    let meta = handle.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(format!("/proc/self/fd/{}", handle.as_raw_fd()))
        .map_err(|e| match e.kind() {
            // The link of an open descriptor is there, unlinked file or not.
            io::ErrorKind::NotFound => io::Error::other("cannot reopen it through /proc/self/fd: is /proc mounted?"),
            _ => e,
        })?;
    let opened = file.metadata()?;
    if !opened.is_file() || (opened.dev(), opened.ino()) != (meta.dev(), meta.ino()) {
        return Err(io::Error::other("the file changed while it was opened"));
    }
    let size = opened.len();
    Ok((file, size))
}

/// Up to `max` bytes of `file` (of length `size`) from `offset`, and `size`.
fn read_from(mut file: std::fs::File, size: u64, offset: u64, max: u32) -> io::Result<(Vec<u8>, u64)> {
    let mut data = Vec::new();
    if offset < size {
        file.seek(SeekFrom::Start(offset))?;
        let want = u64::from(max).min(size - offset);
        data.reserve(want as usize);
        file.take(want).read_to_end(&mut data)?;
    }
    Ok((data, size))
}

/// This thread's filesystem identity (supplementary groups, fsgid, fsuid) switched to a
/// user's, until dropped: the drop puts back what the thread had, or stops the agent if
/// it cannot (a thread of the blocking pool must not run anything else as the user).
/// The other threads of the agent keep root's.
struct UserFs {
    groups: Vec<libc::gid_t>,
    fsgid: u32,
    fsuid: u32,
}

impl UserFs {
    fn enter(user: &Identity) -> io::Result<UserFs> {
        let saved = UserFs {
            groups: thread_groups()?,
            fsgid: fsgid_now(),
            fsuid: fsuid_now(),
        };
        // From here on, returning drops `saved`, which restores the thread.
        let failed = |what: String| io::Error::other(format!("cannot read as user {}: {what}", user.name));
        set_thread_groups(&user.groups).map_err(|e| failed(format!("setgroups: {e}")))?;
        if !same_groups(&thread_groups()?, &user.groups) {
            return Err(failed("setgroups did not take effect".into()));
        }
        set_fsgid(user.gid);
        if fsgid_now() != user.gid {
            return Err(failed("setfsgid did not take effect".into()));
        }
        set_fsuid(user.uid);
        if fsuid_now() != user.uid {
            return Err(failed("setfsuid did not take effect".into()));
        }
        // The kernel drops the file capabilities when fsuid leaves 0, unless the
        // securebits say otherwise: without that, root's rights would still apply.
        if user.uid != 0 && overrides_permissions()? {
            return Err(failed("the thread kept its file capabilities".into()));
        }
        Ok(saved)
    }
}

impl Drop for UserFs {
    fn drop(&mut self) {
        // fsuid first: back to 0, the file capabilities come back.
        set_fsuid(self.fsuid);
        set_fsgid(self.fsgid);
        let groups = set_thread_groups(&self.groups);
        let restored = fsuid_now() == self.fsuid
            && fsgid_now() == self.fsgid
            && groups.is_ok()
            && thread_groups().is_ok_and(|g| same_groups(&g, &self.groups));
        if !restored {
            tracing::error!("cannot give the log-reading thread its identity back; stopping the agent");
            std::process::abort();
        }
    }
}

/// Sets this thread's fsuid, returning the previous one (`u32::MAX`, an invalid id,
/// changes nothing: [`fsuid_now`]).
fn set_fsuid(uid: u32) -> u32 {
    // SAFETY: setfsuid takes an integer and touches no memory; the raw syscall changes
    // this thread's credentials only. It returns the previous fsuid, success or not.
    unsafe { libc::syscall(libc::SYS_setfsuid, uid as libc::c_long) as u32 }
}

fn set_fsgid(gid: u32) -> u32 {
    // SAFETY: as `set_fsuid`, for the fsgid.
    unsafe { libc::syscall(libc::SYS_setfsgid, gid as libc::c_long) as u32 }
}

/// This thread's fsuid: setfsuid with an invalid id fails and returns the current one.
fn fsuid_now() -> u32 {
    set_fsuid(u32::MAX)
}

fn fsgid_now() -> u32 {
    set_fsgid(u32::MAX)
}

/// Sets this thread's supplementary groups (glibc's `setgroups` would set every
/// thread's).
fn set_thread_groups(groups: &[libc::gid_t]) -> io::Result<()> {
    // SAFETY: the kernel reads `groups.len()` gids from the pointer, all inside
    // `groups` (nothing when it is empty); it changes this thread's credentials only.
    let rc = unsafe { libc::syscall(libc::SYS_setgroups, groups.len() as libc::c_long, groups.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// This thread's supplementary groups.
fn thread_groups() -> io::Result<Vec<libc::gid_t>> {
    // SAFETY: with a size of 0 getgroups writes nothing and returns the count.
    let n = unsafe {
        libc::syscall(
            libc::SYS_getgroups,
            0 as libc::c_long,
            std::ptr::null_mut::<libc::gid_t>(),
        )
    };
    let mut groups: Vec<libc::gid_t> = vec![0; usize::try_from(n).map_err(|_| io::Error::last_os_error())?];
    // SAFETY: `groups` has room for the `groups.len()` gids the kernel may write; only
    // this thread changes its groups, so their count is still `n`.
    let m = unsafe { libc::syscall(libc::SYS_getgroups, groups.len() as libc::c_long, groups.as_mut_ptr()) };
    groups.truncate(usize::try_from(m).map_err(|_| io::Error::last_os_error())?);
    Ok(groups)
}

/// The same set of groups, whatever their order (the kernel sorts them).
fn same_groups(a: &[libc::gid_t], b: &[libc::gid_t]) -> bool {
    let set = |g: &[libc::gid_t]| g.iter().copied().collect::<std::collections::BTreeSet<_>>();
    set(a) == set(b)
}

/// Whether this thread's effective capabilities still bypass file permissions
/// (`CAP_DAC_OVERRIDE`, `CAP_DAC_READ_SEARCH`, `CAP_FOWNER`).
fn overrides_permissions() -> io::Result<bool> {
    /// `struct __user_cap_header_struct`.
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    /// `struct __user_cap_data_struct`.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    const BYPASS: u32 = (1 << 1) | (1 << 2) | (1 << 3);
    // pid 0: the calling thread.
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: `header` and `data` are live and laid out as the kernel's header and the
    // two data structs version 3 writes.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut header as *mut Header, data.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(data[0].effective & BYPASS != 0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    fn me() -> String {
        let out = Command::new("id").arg("-un").output().unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    #[test]
    fn reads_pieces_and_refuses_what_is_not_a_file() {
        let me = me();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        std::fs::write(&out, b"hello world\n").unwrap();
        let spec = serde_json::json!({
            "job": "j", "task": "t", "rank": 0, "argv": ["true"], "workingDir": "/",
            "stdout": out, "stderr": dir.path(), "user": me, "stateDir": "/s"
        });
        let spec_path = Source::Spec(dir.path().join("spec.json"));
        std::fs::write(dir.path().join("spec.json"), spec.to_string()).unwrap();
        let c = read_chunk(1, &spec_path, false, 6, 3);
        assert_eq!((c.data.as_slice(), c.size, c.error), (&b"wor"[..], 12, None));
        let c = read_chunk(2, &spec_path, false, 100, 3);
        assert!(c.data.is_empty() && c.size == 12 && c.error.is_none());
        let c = read_chunk(3, &spec_path, true, 0, 3);
        assert!(c.error.unwrap().contains("not a regular file"));
        let c = read_chunk(4, &Source::Spec(dir.path().join("nope.json")), false, 0, 3);
        assert!(c.error.unwrap().contains("cannot read the launch spec"));
        let kept = Source::Files(Outputs {
            stdout: out.clone(),
            stderr: out,
            user: me,
        });
        assert_eq!(read_chunk(5, &kept, true, 0, 5).data, b"hello");
    }

    /// The user the root tests read as (`nobody`), or why they are skipped.
    fn test_user() -> Option<Identity> {
        if current_euid() != 0 {
            eprintln!("skipped: needs root (to read as another user)");
            return None;
        }
        match crate::shepherd::user::lookup("nobody") {
            Ok(id) if id.uid != 0 => Some(id),
            other => {
                eprintln!("skipped: no user nobody to read as ({other:?})");
                None
            }
        }
    }

    fn set_mode(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// A directory root owns, mode `mode`.
    fn root_dir(mode: u32) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        set_mode(dir.path(), mode);
        dir
    }

    /// Reads `target` as `user` through a link in `links` (the task's output swapped for
    /// a link), then checks this thread is root's again: `(data, error)`.
    fn read_through_link(links: &Path, user: &Identity, target: &Path) -> (Vec<u8>, Option<String>) {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let link = links.join(format!("out-{n}"));
        std::os::unix::fs::symlink(target, &link).unwrap();
        let groups = thread_groups().unwrap();
        let kept = Source::Files(Outputs {
            stdout: link.clone(),
            stderr: link.clone(),
            user: user.name.clone(),
        });
        let c = read_chunk(1, &kept, false, 0, 100);
        assert_eq!((fsuid_now(), fsgid_now()), (0, 0), "the thread is root's again");
        assert!(same_groups(&thread_groups().unwrap(), &groups));
        assert!(overrides_permissions().unwrap(), "the file capabilities are back");
        // What the error says after the link's own name.
        let error = c.error.map(|e| {
            let prefix = format!("{}: ", link.display());
            assert!(e.starts_with(&prefix), "{e}");
            let e = e[prefix.len()..].to_string();
            for secret in ["uid", "owned", "exist", "root"] {
                assert!(!e.contains(secret), "{e}");
            }
            e
        });
        (c.data, error)
    }

    /// As root, a task's output is read with its user's rights: what that user may not
    /// read is refused with the user's own error, saying nothing the user could not see.
    #[test]
    fn root_reads_a_tasks_output_with_the_users_rights() {
        let Some(user) = test_user() else { return };
        let base = root_dir(0o755);
        let b = base.path();
        let write = |name: &str, mode: u32, owner: Option<u32>| {
            let p = b.join(name);
            std::fs::write(&p, format!("{name}\n")).unwrap();
            set_mode(&p, mode);
            std::os::unix::fs::chown(&p, owner, None).unwrap();
            p
        };
        let secret = write("secret", 0o600, Some(0));
        let public = write("public", 0o644, Some(0));
        let mine = write("mine", 0o600, Some(user.uid));
        let private = b.join("private");
        std::fs::create_dir(&private).unwrap();
        let theirs = write("private/theirs", 0o644, Some(user.uid));
        set_mode(&private, 0o700);

        let (data, error) = read_through_link(b, &user, &mine);
        assert_eq!((data.as_slice(), error), (&b"mine\n"[..], None));
        // World-readable, but root's: not the task's output, though the user could read it.
        let (data, error) = read_through_link(b, &user, &public);
        assert!(data.is_empty());
        assert_eq!(
            error.as_deref(),
            Some("a file of another user (a task's output is its user's own file)")
        );
        // The user's own file, held open by the agent: not through /proc/self/fd (the
        // agent's descriptors, its log among them, are no task's).
        let held = std::fs::File::open(&mine).unwrap();
        let through = PathBuf::from(format!("/proc/self/fd/{}", held.as_raw_fd()));
        let (data, error) = read_through_link(b, &user, &through);
        assert!(data.is_empty());
        assert_eq!(error.as_deref(), Some(KERNEL_FILE));
        let kept = Source::Files(Outputs {
            stdout: through.clone(),
            stderr: through,
            user: user.name.clone(),
        });
        let c = read_chunk(1, &kept, false, 0, 100);
        assert!(c.data.is_empty() && c.error.unwrap().ends_with(KERNEL_FILE));

        let denied = read_through_link(b, &user, &secret);
        assert!(denied.0.is_empty());
        assert!(
            denied.1.as_deref().unwrap().starts_with("Permission denied"),
            "{denied:?}"
        );
        // The user's own file, in a directory the user may not enter.
        let hidden = read_through_link(b, &user, &theirs);
        assert!(hidden.0.is_empty());
        assert!(
            hidden.1.as_deref().unwrap().starts_with("Permission denied"),
            "{hidden:?}"
        );
        // ... which says no more than about nothing there.
        assert_eq!(read_through_link(b, &user, &private.join("nothing")), hidden);
        let (_, error) = read_through_link(b, &user, &b.join("nothing"));
        assert!(error.unwrap().starts_with("No such file or directory"));
        // A device is not opened (`O_PATH`), only found not to be a file.
        let (data, error) = read_through_link(b, &user, Path::new("/dev/null"));
        assert!(data.is_empty());
        assert_eq!(error.as_deref(), Some("not a regular file"));

        // Root's own task reads as root, its own files only.
        let root = crate::shepherd::user::lookup("root").unwrap();
        let (data, error) = read_through_link(b, &root, &secret);
        assert_eq!((data.as_slice(), error), (&b"secret\n"[..], None));
        let (data, error) = read_through_link(b, &root, &theirs);
        assert!(data.is_empty() && error.is_some());
    }

    /// Whether process `pid` sleeps in `openat` (a FIFO's writer waiting for a reader).
    fn blocked_in_open(pid: u32) -> bool {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let sleeping = state
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('S'));
        let syscall = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
        sleeping && syscall.split_whitespace().next() == Some(&libc::SYS_openat.to_string())
    }

    /// A child killed when dropped: a failed test leaves no writer waiting.
    struct Reaped(std::process::Child);

    impl Drop for Reaped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// A link to a FIFO is refused without opening it: the FIFO's writer, waiting in
    /// `open` for a reader, goes on waiting (opened and closed by a reader, it would
    /// write into a pipe without one and die of SIGPIPE).
    #[test]
    fn a_fifo_is_refused_without_releasing_its_writer() {
        let Some(user) = test_user() else { return };
        let base = root_dir(0o755);
        let private = base.path().join("private");
        std::fs::create_dir(&private).unwrap();
        set_mode(&private, 0o700);
        for (fifo, want) in [
            (base.path().join("fifo"), "not a regular file"),
            (private.join("fifo"), "Permission denied"),
        ] {
            assert!(
                Command::new("mkfifo")
                    .arg("-m0666")
                    .arg(&fifo)
                    .status()
                    .unwrap()
                    .success()
            );
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
            let start = Instant::now();
            while !blocked_in_open(writer.0.id()) {
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "the writer never waited in open"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            let (data, error) = read_through_link(base.path(), &user, &fifo);
            assert!(data.is_empty());
            assert!(error.as_deref().unwrap().starts_with(want), "{error:?}");
            // Not woken: a reader's open wakes it at once, before the reader's returns.
            assert!(blocked_in_open(writer.0.id()), "the writer was released");
            assert!(writer.0.try_wait().unwrap().is_none());
            // The first reader gets what it writes, and it ends well.
            let mut text = String::new();
            std::fs::File::open(&fifo).unwrap().read_to_string(&mut text).unwrap();
            assert_eq!(text, "written\n");
            assert!(writer.0.wait().unwrap().success());
        }
    }

    /// The switch is this thread's only: another thread stays root's meanwhile.
    #[test]
    fn only_the_reading_thread_takes_the_users_identity() {
        let Some(user) = test_user() else { return };
        // Started before the switch (a new thread starts with its creator's identity).
        let (ask, asked) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            asked.recv().unwrap();
            (fsuid_now(), fsgid_now(), overrides_permissions().unwrap())
        });
        let entered = UserFs::enter(&user).unwrap();
        assert_eq!((fsuid_now(), fsgid_now()), (user.uid, user.gid));
        assert!(same_groups(&thread_groups().unwrap(), &user.groups));
        assert!(!overrides_permissions().unwrap());
        ask.send(()).unwrap();
        assert_eq!(other.join().unwrap(), (0, 0, true));
        drop(entered);
        assert_eq!((fsuid_now(), fsgid_now()), (0, 0));
        assert!(overrides_permissions().unwrap());
    }
}
