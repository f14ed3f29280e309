//! Where a task's files live under the agent's state directory, and how they are written:
//! whole or not at all (temporary file, rename); the exit record also durably (fsync of
//! the file and of the directory), since it must outlive anything but the task.
//!
//! ```text
//! STATE/tasks/<job>.<jobId>/hostfile             the job's hostfile (the agent writes it)
//!                          <task>/spec.json      the launch spec (the agent writes it)
//!                                 shepherd.log   the shepherd's stderr (the agent opens it)
//!                                 pid            the shepherd's pid, written first, exclusively
//!                                 started.json   {"pid", "startTimeMs"} once the task was started
//!                                 kill_grace     seconds from SIGTERM to SIGKILL of a cancel
//!                                                (the agent writes it before its SIGTERM)
//!                                 record.json    the exit record (see record.rs), written last
//! ```
//!
//! A job's name may be used again by a later job; its id never is, so the job directory
//! carries both. `<job>` and `<task>` follow the shared name rule (no `/`, no `..`),
//! checked before any path is built.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The files of one task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskDir {
    pub dir: PathBuf,
}

impl TaskDir {
    /// `STATE/tasks/<job>.<jobId>/<task>`; the names must already be checked
    /// ([`LaunchSpec::check_names`](super::spec::LaunchSpec::check_names)).
    pub fn new(state_dir: &Path, job: &str, job_id: hyperplan_shared::ids::JobId, task: &str) -> TaskDir {
        TaskDir {
            dir: job_dir(state_dir, job, job_id).join(task),
        }
    }

    pub fn shepherd_log(&self) -> PathBuf {
        self.dir.join("shepherd.log")
    }

    pub fn kill_grace(&self) -> PathBuf {
        self.dir.join("kill_grace")
    }

    pub fn spec(&self) -> PathBuf {
        self.dir.join("spec.json")
    }

    pub fn pid(&self) -> PathBuf {
        self.dir.join("pid")
    }

    pub fn started(&self) -> PathBuf {
        self.dir.join("started.json")
    }

    pub fn record(&self) -> PathBuf {
        self.dir.join("record.json")
    }
}

/// `STATE/tasks/<job>.<jobId>`: the directory of one job's tasks on this node.
pub fn job_dir(state_dir: &Path, job: &str, job_id: hyperplan_shared::ids::JobId) -> PathBuf {
    state_dir.join("tasks").join(format!("{job}.{job_id}"))
}

/// The job name and id of a job directory's name (`<job>.<jobId>`).
pub fn parse_job_dir(name: &str) -> Option<(&str, u64)> {
    let (job, id) = name.rsplit_once('.')?;
    if job.is_empty() || id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((job, id.parse().ok()?))
}

/// Writes `bytes` to `path` atomically: a reader sees the old file or the whole new one,
/// and after a crash the file is whole or absent.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = temp_name(path);
    let result = write_synced(&tmp, bytes).and_then(|()| fs::rename(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result?;
    sync_parent(path)
}

/// Like [`write_atomic`] without the fsyncs: readers see the old file or the whole new
/// one, but after a power loss it may be empty or gone. For the files that only matter
/// while the machine is up (the spec, the hostfile, `started.json`: a machine that lost
/// power lost its tasks too, and an unreadable file reads as absent); `record.json`, the
/// end a restarted agent must still report, is written with [`write_atomic`]. Launching
/// 64 tasks costs four fsync pairs fewer per task.
pub fn write_replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = temp_name(path);
    let result = write_unsynced(&tmp, bytes).and_then(|()| fs::rename(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Like [`write_replace`] for a file only its owner (and root) may read: made 0400 and
/// given to `owner` (uid, gid) before it takes `path`'s name, so nobody else ever reads
/// it. The job's hostfile, which its tasks (the job's user) read by name.
pub fn write_private(path: &Path, bytes: &[u8], owner: Option<(u32, u32)>) -> io::Result<()> {
    write_owned(path, bytes, owner, 0o400)
}

/// [`write_private`] with another mode (`0o500`: a script the job's user runs).
pub fn write_owned(path: &Path, bytes: &[u8], owner: Option<(u32, u32)>, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = temp_name(path);
    let result = (|| {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o400)
            .open(&tmp)?;
        (&file).write_all(bytes)?;
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::fchown(&file, Some(uid), Some(gid))?;
        }
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Like [`write_replace`], but fails with `AlreadyExists` when `path` exists: of two
/// writers, exactly one wins (the link is atomic; like `write_replace` it is not synced).
pub fn write_exclusive(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = temp_name(path);
    let result = write_unsynced(&tmp, bytes).and_then(|()| fs::hard_link(&tmp, path));
    let _ = fs::remove_file(&tmp);
    result
}

fn temp_name(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp.{}", std::process::id()));
    path.with_file_name(name)
}

fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_file(path, bytes)?.sync_all()
}

fn write_unsynced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_file(path, bytes).map(drop)
}

fn write_file(path: &Path, bytes: &[u8]) -> io::Result<File> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(path)?;
    file.write_all(bytes)?;
    Ok(file)
}

fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) => File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn paths_follow_the_layout() {
        let t = TaskDir::new(Path::new("/var/lib/hyperplan-agent"), "j1", 7.into(), "worker-3");
        assert_eq!(
            t.record(),
            Path::new("/var/lib/hyperplan-agent/tasks/j1.7/worker-3/record.json")
        );
        assert_eq!(t.pid(), Path::new("/var/lib/hyperplan-agent/tasks/j1.7/worker-3/pid"));
        assert_eq!(parse_job_dir("train.v2.42"), Some(("train.v2", 42)));
        assert_eq!(parse_job_dir("train"), None);
        assert_eq!(parse_job_dir("train.x"), None);
        assert_eq!(parse_job_dir(".4"), None);
    }

    #[test]
    fn atomic_and_exclusive_writes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        let q = dir.path().join("pid");
        write_exclusive(&q, b"1\n").unwrap();
        let e = write_exclusive(&q, b"2\n").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&q).unwrap(), b"1\n");
        write_replace(&p, b"three").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"three");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2, "no temporary file left");
    }
}
