//! A job's own `/tmp` and `/dev/shm` on this node (`[exec] privateTmp`), as Slurm's
//! `job_container/tmpfs` gives them: files a task leaves there would otherwise outlive its
//! job and, on tmpfs, hold memory the planner counts free.
//!
//! ```text
//! <privateTmpDir>/<job>.<jobId>/tmp                  on the node's disk (default STATE/jobtmp)
//! /dev/shm/hyperplan/<agent>/<job>.<jobId>/shm       on tmpfs: shared memory stays memory
//! ```
//!
//! The bases are root's, 0711; `<job>.<jobId>` is root's, 0700, so that nobody reaches the
//! job's files from outside its tasks, and no user can put a link in place of the leaf; the
//! leaf (`tmp`, `shm`) is the job's user's, 0700. `<agent>` names the agent's state
//! directory (several agents may share a machine, as in tests: each removes only its own).
//!
//! Whoever starts a process of the job makes them when missing, as root: the shepherd for
//! a task, the agent or the launcher for a `hyperplan exec` step (all tasks and steps of a
//! job on a node share them: MPI ranks meet in `/dev/shm`). [`open`] walks from `/` with
//! `O_NOFOLLOW` and checks each directory on the way (root's, and writable by nobody else
//! unless sticky, as `/tmp` and `/dev/shm`), so no planted link or directory is used (and
//! only root could change any of them after); the child mounts the leaf in its new
//! namespace by path and checks that what it mounted is the directory checked, by device
//! and inode ([`super::exec`]). The agent removes both once the job has no task left on
//! the node (`tasks::jobtmp`).

#![allow(unsafe_code)]

use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Where every agent of this machine keeps its jobs' `/dev/shm` directories.
pub const SHM_ROOT: &str = "/dev/shm/hyperplan";
/// The base of `/tmp` directories below the state directory, unless `privateTmpDir` says.
pub const TMP_DIR_NAME: &str = "jobtmp";
/// Tries at the walk when a directory on the way vanished meanwhile (an idle agent removes
/// empty bases).
const TRIES: u32 = 3;

/// The launch spec's `privateTmp`: the directories mounted on the task's `/tmp` and
/// `/dev/shm`, each `<base>/<job>.<jobId>/<leaf>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JobDirs {
    pub tmp: PathBuf,
    pub shm: PathBuf,
    /// The site asked for them (`privateTmp = true`): a task that cannot have them fails.
    /// Otherwise (the default, on where the agent could tell it works) the task runs with
    /// the node's, and the shepherd's log says why.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
}

/// Whether tasks get a `/tmp` and `/dev/shm` of their job's (`[exec] privateTmp`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// The node's, as a login sees them.
    #[default]
    Off,
    /// The job's, or the node's where they cannot be made (said in the shepherd's log).
    BestEffort,
    /// The job's, or the task fails.
    Required,
}

/// The agent's setting: the mode and where the `/tmp` directories go.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Setting {
    pub mode: Mode,
    /// `[exec] privateTmpDir`; None: `STATE/jobtmp`.
    pub tmp_dir: Option<PathBuf>,
}

impl Setting {
    /// The bases of this agent's job directories: (`/tmp`'s, `/dev/shm`'s). Known whatever
    /// the mode, so that an agent started with it off still removes what an earlier run left.
    pub fn bases(&self, state_dir: &Path) -> (PathBuf, PathBuf) {
        let tmp = self.tmp_dir.clone().unwrap_or_else(|| state_dir.join(TMP_DIR_NAME));
        (tmp, shm_base(state_dir))
    }

    /// The spec's `privateTmp` for a task of job `job` (id `job_id`); None when off.
    pub fn job_dirs(&self, state_dir: &Path, job: &str, job_id: hyperplan_shared::ids::JobId) -> Option<JobDirs> {
        let required = match self.mode {
            Mode::Off => return None,
            Mode::BestEffort => false,
            Mode::Required => true,
        };
        let (tmp, shm) = self.bases(state_dir);
        let name = job_dir_name(job, job_id);
        Some(JobDirs {
            tmp: tmp.join(&name).join("tmp"),
            shm: shm.join(&name).join("shm"),
            required,
        })
    }
}

/// `<job>.<jobId>`, as the task directories name a job.
pub fn job_dir_name(job: &str, job_id: hyperplan_shared::ids::JobId) -> String {
    format!("{job}.{job_id}")
}

/// `/dev/shm/hyperplan/<agent>`: this agent's jobs' `/dev/shm` directories. `<agent>` is the
/// state directory's name and a hash of its path (as given, made lexically plain), the same
/// for every run of the agent on that directory.
pub fn shm_base(state_dir: &Path) -> PathBuf {
    let plain: PathBuf = state_dir.components().collect();
    let name: String = plain
        .file_name()
        .map(|n| {
            n.to_string_lossy()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                .take(48)
                .collect()
        })
        .unwrap_or_default();
    let name = name.trim_start_matches('.');
    let name = if name.is_empty() { "agent" } else { name };
    // FNV-1a: stable across runs and builds (std's hasher is not).
    let hash = plain
        .as_os_str()
        .as_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    Path::new(SHM_ROOT).join(format!("{name}-{:08x}", hash as u32 ^ (hash >> 32) as u32))
}

/// Why a job's directory cannot be used. The messages go into the exit record.
#[derive(Debug, thiserror::Error)]
pub enum JobTmpError {
    #[error("the job's directory {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the job's directory {path}: {what}, expected a directory of root's that nobody else may write")]
    Unsafe { path: PathBuf, what: String },
    #[error("the job's directory {path} belongs to uid {found}, not to the job's user (uid {want})")]
    Owner { path: PathBuf, found: u32, want: u32 },
    #[error("the job's directory {path} is not BASE/<job>.<jobId>/NAME (expected {job_dir} as its parent's name)")]
    Shape { path: PathBuf, job_dir: String },
}

/// The two directories, opened and checked: what the child mounts.
#[derive(Debug)]
pub struct Opened {
    pub tmp: OwnedFd,
    pub shm: OwnedFd,
}

/// Makes (when missing) and opens the job's directories for `uid`/`gid`; `job_dir` is
/// `<job>.<jobId>`, the name each leaf's parent must have.
pub fn open(dirs: &JobDirs, job_dir: &str, uid: u32, gid: u32) -> Result<Opened, JobTmpError> {
    Ok(Opened {
        tmp: open_leaf(&dirs.tmp, job_dir, uid, gid)?,
        shm: open_leaf(&dirs.shm, job_dir, uid, gid)?,
    })
}

/// `BASE/<job>.<jobId>/LEAF`: the base made and checked from `/`, the job's directory
/// root's 0700, the leaf the user's 0700. A walk that found a directory removed under it
/// (ENOENT after it was opened) starts again.
fn open_leaf(path: &Path, job_dir: &str, uid: u32, gid: u32) -> Result<OwnedFd, JobTmpError> {
    let shape = || JobTmpError::Shape {
        path: path.to_path_buf(),
        job_dir: job_dir.to_string(),
    };
    let leaf = path.file_name().ok_or_else(shape)?;
    let parent = path.parent().ok_or_else(shape)?;
    if parent.file_name() != Some(OsStr::new(job_dir)) {
        return Err(shape());
    }
    let base = parent.parent().ok_or_else(shape)?;
    let mut tries = 0;
    loop {
        tries += 1;
        match try_open_leaf(base, OsStr::new(job_dir), leaf, path, uid, gid) {
            Err(JobTmpError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound && tries < TRIES => {}
            other => return other,
        }
    }
}

fn try_open_leaf(
    base: &Path,
    job_dir: &OsStr,
    leaf: &OsStr,
    path: &Path,
    uid: u32,
    gid: u32,
) -> Result<OwnedFd, JobTmpError> {
    let base_fd = open_chain(base)?;
    let outer_path = base.join(job_dir);
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| JobTmpError::Io { path: p, source }
    };
    let (outer, made) = make_at(&base_fd, job_dir, 0o700).map_err(not_a_link(&outer_path))?;
    let meta = stat(&outer).map_err(io(&outer_path))?;
    if made {
        chmod(&outer, 0o700).map_err(io(&outer_path))?;
    } else if meta.uid() != 0 || meta.mode() & 0o077 != 0 {
        return Err(JobTmpError::Unsafe {
            path: outer_path,
            what: format!("uid {}, mode {:04o}", meta.uid(), meta.mode() & 0o7777),
        });
    }
    // Tasks and steps of the job start at once: one makes the leaf and gives it away
    // while the others wait, so none sees it half made.
    // SAFETY: flock on a descriptor we own; released when it closes.
    if unsafe { libc::flock(outer.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(io(&outer_path)(std::io::Error::last_os_error()));
    }
    let (fd, made) = make_at(&outer, leaf, 0o700).map_err(not_a_link(path))?;
    let meta = stat(&fd).map_err(io(path))?;
    // Root's: made here, or by a shepherd that died before it gave it away.
    if made || (meta.uid() == 0 && uid != 0) {
        std::os::unix::fs::fchown(&fd, Some(uid), Some(gid)).map_err(io(path))?;
        chmod(&fd, 0o700).map_err(io(path))?;
    } else if meta.uid() != uid {
        return Err(JobTmpError::Owner {
            path: path.to_path_buf(),
            found: meta.uid(),
            want: uid,
        });
    }
    Ok(fd)
}

/// Opens directory `path` from `/`, one component at a time without following a link,
/// making missing ones (root's, 0711); each must be root's and writable by nobody else,
/// unless sticky (`/tmp`, `/dev/shm`: others cannot replace what is root's there).
fn open_chain(path: &Path) -> Result<OwnedFd, JobTmpError> {
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| JobTmpError::Io { path: p, source }
    };
    let mut walked = PathBuf::from("/");
    let mut fd = open_at(None, OsStr::new("/")).map_err(io(&walked))?;
    for component in path.components() {
        let name = match component {
            Component::RootDir => continue,
            Component::Normal(name) => name,
            _ => {
                return Err(JobTmpError::Unsafe {
                    path: path.to_path_buf(),
                    what: "not a plain absolute path".into(),
                });
            }
        };
        walked.push(name);
        let (next, made) = make_at(&fd, name, 0o711).map_err(not_a_link(&walked))?;
        if made {
            chmod(&next, 0o711).map_err(io(&walked))?;
        }
        let meta = stat(&next).map_err(io(&walked))?;
        let others_write = meta.mode() & 0o022 != 0 && meta.mode() & libc::S_ISVTX == 0;
        if meta.uid() != 0 || others_write {
            return Err(JobTmpError::Unsafe {
                path: walked,
                what: format!("uid {}, mode {:04o}", meta.uid(), meta.mode() & 0o7777),
            });
        }
        fd = next;
    }
    Ok(fd)
}

/// An error opening `path`: a link or another file where a directory should be is unsafe.
fn not_a_link(path: &Path) -> impl FnOnce(std::io::Error) -> JobTmpError {
    let path = path.to_path_buf();
    move |e| match e.raw_os_error() {
        Some(libc::ELOOP | libc::ENOTDIR) => JobTmpError::Unsafe {
            path,
            what: "a symbolic link or not a directory".into(),
        },
        _ => JobTmpError::Io { path, source: e },
    }
}

/// Makes directory `name` in `dir` (mode `mode` less the umask) unless it is there, and
/// opens it without following a link; whether it was made here.
fn make_at(dir: &OwnedFd, name: &OsStr, mode: libc::mode_t) -> std::io::Result<(OwnedFd, bool)> {
    match open_at(Some(dir), name) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        other => return other.map(|fd| (fd, false)),
    }
    let cname = CString::new(name.as_bytes()).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a descriptor we own and a NUL-terminated name.
    let made = unsafe { libc::mkdirat(dir.as_raw_fd(), cname.as_ptr(), mode) } == 0;
    if !made {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(e);
        }
    }
    Ok((open_at(Some(dir), name)?, made))
}

/// Opens directory `name` in `dir` (or absolute `name`) read-only, never through a link.
fn open_at(dir: Option<&OwnedFd>, name: &OsStr) -> std::io::Result<OwnedFd> {
    let cname = CString::new(name.as_bytes()).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let at = dir.map_or(libc::AT_FDCWD, AsRawFd::as_raw_fd);
    // SAFETY: a valid directory descriptor (or AT_FDCWD) and a NUL-terminated name.
    let fd = unsafe { libc::openat(at, cname.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: openat returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn stat(fd: &OwnedFd) -> std::io::Result<std::fs::Metadata> {
    std::fs::File::from(fd.try_clone()?).metadata()
}

fn chmod(fd: &OwnedFd, mode: u32) -> std::io::Result<()> {
    std::fs::File::from(fd.try_clone()?).set_permissions(std::fs::Permissions::from_mode(mode))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn is_root() -> bool {
        super::super::current_euid() == 0
    }

    #[test]
    fn the_bases_follow_the_state_directory() {
        let s = Setting::default();
        let (tmp, shm) = s.bases(Path::new("/var/lib/hyperplan-agent"));
        assert_eq!(tmp, Path::new("/var/lib/hyperplan-agent/jobtmp"));
        assert!(shm.starts_with(SHM_ROOT), "{}", shm.display());
        let name = shm.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with("hyperplan-agent-") && name.len() == "hyperplan-agent-".len() + 8,
            "{name}"
        );
        // The same directory (as given, lexically plain) is the same key; another is not.
        assert_eq!(shm, shm_base(Path::new("/var/lib//hyperplan-agent/")));
        assert_ne!(shm, shm_base(Path::new("/srv/hyperplan-agent")));
        let root = shm_base(Path::new("/"));
        assert!(
            root.file_name().unwrap().to_str().unwrap().starts_with("agent-"),
            "{}",
            root.display()
        );
        assert_eq!(s.job_dirs(Path::new("/s"), "j", 1.into()), None);
        let on = Setting {
            mode: Mode::Required,
            tmp_dir: Some("/scratch/jt".into()),
        };
        let dirs = on.job_dirs(Path::new("/s"), "train", 7.into()).unwrap();
        assert_eq!(dirs.tmp, Path::new("/scratch/jt/train.7/tmp"));
        assert!(dirs.shm.ends_with("train.7/shm") && dirs.required);
    }

    #[test]
    fn dirs_are_made_owned_and_checked() {
        if !is_root() {
            eprintln!("skipped: the job's directories are made as root");
            return;
        }
        let base = tempfile::tempdir().unwrap();
        let dirs = JobDirs {
            tmp: base.path().join("t/j.1/tmp"),
            shm: base.path().join("s/j.1/shm"),
            required: true,
        };
        let opened = open(&dirs, "j.1", 4242, 4343).unwrap();
        let meta = stat(&opened.tmp).unwrap();
        assert_eq!((meta.uid(), meta.gid(), meta.mode() & 0o7777), (4242, 4343, 0o700));
        let outer = std::fs::metadata(base.path().join("t/j.1")).unwrap();
        assert_eq!((outer.uid(), outer.mode() & 0o7777), (0, 0o700));
        assert_eq!(std::fs::metadata(base.path().join("s")).unwrap().mode() & 0o7777, 0o711);
        // Again: the same directories, found.
        drop(open(&dirs, "j.1", 4242, 4343).unwrap());
        // Another user's leaf is refused.
        let e = open(&dirs, "j.1", 4444, 4444).unwrap_err();
        assert!(matches!(e, JobTmpError::Owner { found: 4242, .. }), "{e}");
        // A link in place of a leaf, or of the job's directory, is never followed.
        std::fs::remove_dir(base.path().join("t/j.1/tmp")).unwrap();
        std::os::unix::fs::symlink("/etc", base.path().join("t/j.1/tmp")).unwrap();
        let e = open(&dirs, "j.1", 4242, 4343).unwrap_err();
        assert!(
            matches!(e, JobTmpError::Unsafe { .. }) && e.to_string().contains("t/j.1/tmp"),
            "{e}"
        );
        std::fs::remove_file(base.path().join("t/j.1/tmp")).unwrap();
        std::fs::remove_dir(base.path().join("t/j.1")).unwrap();
        std::os::unix::fs::symlink("/etc", base.path().join("t/j.1")).unwrap();
        let e = open(&dirs, "j.1", 4242, 4343).unwrap_err();
        assert!(
            matches!(e, JobTmpError::Unsafe { .. }) && e.to_string().contains("t/j.1"),
            "{e}"
        );
        std::fs::remove_file(base.path().join("t/j.1")).unwrap();
        // A base others may write is refused.
        std::fs::set_permissions(base.path().join("s"), std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = open(&dirs, "j.1", 4242, 4343).unwrap_err();
        assert!(matches!(e, JobTmpError::Unsafe { .. }), "{e}");
        // The parent must be the job's directory.
        let e = open(&dirs, "k.2", 4242, 4343).unwrap_err();
        assert!(matches!(e, JobTmpError::Shape { .. }), "{e}");
    }
}
