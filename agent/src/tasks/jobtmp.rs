//! Jobs' own `/tmp` and `/dev/shm` on this node, the agent's part (the directories, and how
//! a task gets them: [`crate::shepherd::jobtmp`]): whether tasks get them ([`decide`]), and
//! removing them once their job has no task left here ([`Cleaner`]), so that what a job
//! left in `/dev/shm` gives its memory back when the job ends, not at the next reboot.
//!
//! Removal is bounded, for a user may leave millions of files, or a tree deeper than any
//! path: the job's directories are first renamed into `BASE/.trash` (at once, whatever they
//! hold), then emptied a bounded number of entries at each scan ([`BUDGET`], every 100 ms).
//! Each directory is taken before it is emptied (made root's, 0700: its user can change it
//! no more, and root needs no `CAP_DAC_OVERRIDE`, which the agent's unit does not give it);
//! a subdirectory that is not empty is moved up into the trash, so that depth costs neither
//! descriptors nor stack; nothing is followed (a link is unlinked, never opened). The same
//! happens at start and every minute to the directories of jobs with no task here (left by a
//! crash, or made by a step that started as its job ended), and when the agent has no task
//! left the empty bases go too.

#![allow(unsafe_code)]

use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::shepherd::jobtmp::{Mode, SHM_ROOT, Setting};
use crate::shepherd::layout::parse_job_dir;

/// Entries removed (or moved) at most per scan.
pub const BUDGET: usize = 2048;
/// Between looks for directories of jobs that have no task here.
const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// Where a base keeps what is being removed.
const TRASH: &str = ".trash";

/// Why `[exec] privateTmp = true` cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum PrivateTmpError {
    #[error(
        "[exec] privateTmp = true: the agent runs as uid {0}, and only root can give tasks a /tmp and /dev/shm of their job's"
    )]
    NotRoot(u32),
    #[error(
        "[exec] privateTmp = true: a mount namespace cannot be made here ({0}): give the agent CAP_SYS_ADMIN, start tasks through the launcher, or set privateTmp = false"
    )]
    Unsupported(#[source] io::Error),
    #[error("[exec] privateTmpDir: expected an absolute path, got {0}")]
    Relative(PathBuf),
}

/// Whether tasks get their job's own `/tmp` and `/dev/shm`: `privateTmp` (None: not said)
/// and `privateTmpDir` from agent.toml. Unsaid, they do when the agent runs as root and can
/// make a mount namespace (tried once here), or when a launcher starts the tasks (which
/// runs unconfined: a task that cannot have them there runs with the node's, its shepherd
/// saying why); otherwise not, said once here. `true` where it cannot work is an error.
pub fn decide(
    private_tmp: Option<bool>,
    tmp_dir: Option<PathBuf>,
    launcher: bool,
    state_dir: &Path,
) -> Result<Setting, PrivateTmpError> {
    if let Some(dir) = &tmp_dir
        && !dir.is_absolute()
    {
        return Err(PrivateTmpError::Relative(dir.clone()));
    }
    let euid = crate::shepherd::current_euid();
    let mode = match private_tmp {
        Some(false) => Mode::Off,
        Some(true) if euid != 0 => return Err(PrivateTmpError::NotRoot(euid)),
        Some(true) if launcher => Mode::Required,
        Some(true) => {
            probe().map_err(PrivateTmpError::Unsupported)?;
            Mode::Required
        }
        None if euid != 0 => {
            tracing::info!(
                euid,
                "tasks see the node's /tmp and /dev/shm: only root can give them their job's ([exec] privateTmp)"
            );
            Mode::Off
        }
        None if launcher => Mode::BestEffort,
        None => match probe() {
            Ok(()) => Mode::BestEffort,
            Err(e) => {
                tracing::info!(
                    "tasks see the node's /tmp and /dev/shm: a mount namespace cannot be made here ({e}); \
                     start tasks through the launcher to give them their job's ([exec] privateTmp)"
                );
                Mode::Off
            }
        },
    };
    let setting = Setting { mode, tmp_dir };
    if mode != Mode::Off {
        let (tmp, shm) = setting.bases(state_dir);
        tracing::info!(
            tmp = %tmp.display(),
            shm = %shm.display(),
            required = mode == Mode::Required,
            "each job gets its own /tmp and /dev/shm on this node, removed when its last task here ends ([exec] privateTmp)"
        );
    }
    Ok(setting)
}

/// Whether a child can make a mount namespace and make it a slave of this one (what a
/// task's child does first).
fn probe() -> io::Result<()> {
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new("/bin/sh");
    command
        .args(["-c", ":"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: the closure makes two syscalls on constants, async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return Err(io::Error::last_os_error());
            }
            let none = std::ptr::null::<libc::c_char>();
            let flags = libc::MS_REC | libc::MS_SLAVE;
            if libc::mount(none, c"/".as_ptr(), none, flags, std::ptr::null()) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let status = command.status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("/bin/sh -c : {status}")))
    }
}

/// Makes sure `/dev/shm/hyperplan` is root's directory that nobody else may write: any user
/// may take that name first in the world-writable `/dev/shm` (before the agent's first job
/// there). What is there instead is renamed aside (`hyperplan.squatted.<time>`, still its
/// owner's) and the directory made; shepherds refuse anything else there.
pub fn claim_shm_root() {
    claim(Path::new(SHM_ROOT));
}

fn claim(path: &Path) {
    use std::os::unix::fs::MetadataExt;
    for _ in 0..3 {
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() && m.uid() == 0 && m.mode() & 0o022 == 0 => return,
            Ok(m) => {
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("hyperplan");
                let aside = path.with_file_name(unique(&format!("{name}.squatted"), &mut 0));
                tracing::warn!(
                    path = %path.display(),
                    uid = m.uid(),
                    mode = format!("{:04o}", m.mode() & 0o7777),
                    aside = %aside.display(),
                    "the base of jobs' /dev/shm directories is not root's: moved aside"
                );
                if let Err(e) = std::fs::rename(path, &aside) {
                    tracing::warn!(path = %path.display(), "cannot move it aside: {e}");
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                match std::fs::DirBuilder::new().mode(0o711).create(path) {
                    Ok(()) => {
                        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o711));
                        return;
                    }
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => {
                        tracing::warn!(path = %path.display(), "cannot make the base of jobs' /dev/shm directories: {e}");
                        return;
                    }
                }
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), "cannot look at the base of jobs' /dev/shm directories: {e}");
                return;
            }
        }
    }
}

/// Removes jobs' directories: at once out of the way ([`Cleaner::retire`]), then a bounded
/// part at each [`Cleaner::work`].
#[derive(Debug)]
pub struct Cleaner {
    /// `/tmp`'s base, `/dev/shm`'s base.
    bases: [PathBuf; 2],
    /// The `/tmp` base is the state directory's own (else the site's, never removed).
    own_tmp_base: bool,
    /// A trash may hold something.
    pending: bool,
    next_sweep: Instant,
    /// A removal failed: said once per agent run.
    said: bool,
    /// For unique names in the trash.
    moved: u64,
}

impl Cleaner {
    pub fn new(setting: &Setting, state_dir: &Path) -> Cleaner {
        let (tmp, shm) = setting.bases(state_dir);
        Cleaner {
            bases: [tmp, shm],
            own_tmp_base: setting.tmp_dir.is_none(),
            pending: true,
            next_sweep: Instant::now(),
            said: false,
            moved: 0,
        }
    }

    /// Job `job` (id `job_id`) has no task left here: its directories go into the trash.
    pub fn retire(&mut self, job: &str, job_id: hyperplan_shared::ids::JobId) {
        let name = crate::shepherd::jobtmp::job_dir_name(job, job_id);
        for base in self.bases.clone() {
            match self.move_to_trash(&base, &name) {
                Ok(true) => self.pending = true,
                Ok(false) => {}
                Err(e) => tracing::warn!(dir = %base.join(&name).display(), "cannot remove the job's directory: {e}"),
            }
        }
    }

    /// Retires the directories of jobs for which `has_tasks` says no.
    pub fn sweep(&mut self, has_tasks: impl Fn(&str, u64) -> bool) {
        for base in self.bases.clone() {
            let Ok(entries) = std::fs::read_dir(&base) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some((job, job_id)) = name.to_str().and_then(parse_job_dir) else {
                    continue;
                };
                if has_tasks(job, job_id) {
                    continue;
                }
                tracing::info!(job, job_id, dir = %entry.path().display(), "removing the directory of a job with no task here");
                if let Err(e) = self.move_to_trash(&base, name.to_str().unwrap_or_default()) {
                    tracing::warn!(dir = %entry.path().display(), "cannot remove the job's directory: {e}");
                }
            }
            if std::fs::read_dir(base.join(TRASH)).is_ok_and(|mut d| d.next().is_some()) {
                self.pending = true;
            }
        }
    }

    /// At each scan: a sweep when one is due (`has_tasks` as for [`Cleaner::sweep`]), and
    /// up to [`BUDGET`] entries of the trash removed; `idle` (no task here): once the trash
    /// is empty, the empty bases go too.
    pub fn work(&mut self, idle: bool, has_tasks: impl Fn(&str, u64) -> bool) {
        let now = Instant::now();
        if now >= self.next_sweep {
            self.next_sweep = now + SWEEP_EVERY;
            self.sweep(has_tasks);
            self.pending |= idle;
        }
        if !self.pending {
            return;
        }
        let mut budget = BUDGET;
        let mut empty = true;
        for base in self.bases.clone() {
            match drain(&base.join(TRASH), &mut budget, &mut self.moved) {
                Ok(done) => empty &= done,
                Err(e) => {
                    if !self.said {
                        tracing::warn!(
                            trash = %base.join(TRASH).display(),
                            "cannot remove what ended jobs left in their /tmp or /dev/shm: {e}; trying again every minute"
                        );
                        self.said = true;
                    }
                    // The next sweep tries again.
                    self.pending = false;
                    return;
                }
            }
        }
        if empty {
            self.pending = false;
            if idle {
                self.remove_empty_bases();
            }
        }
    }

    /// The bases, when empty: made again by the next task that needs them.
    fn remove_empty_bases(&self) {
        let [tmp, shm] = &self.bases;
        let mut dirs = vec![shm.join(TRASH), shm.clone(), PathBuf::from(SHM_ROOT)];
        if self.own_tmp_base {
            dirs.extend([tmp.join(TRASH), tmp.clone()]);
        }
        for dir in dirs {
            let _ = std::fs::remove_dir(dir);
        }
    }

    /// Renames `base/name` into the trash; false when it is not there.
    fn move_to_trash(&mut self, base: &Path, name: &str) -> io::Result<bool> {
        let from = base.join(name);
        if std::fs::symlink_metadata(&from).is_err() {
            return Ok(false);
        }
        let trash = base.join(TRASH);
        match std::fs::DirBuilder::new().mode(0o700).create(&trash) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        match std::fs::rename(&from, trash.join(unique(name, &mut self.moved))) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            other => other.map(|()| true),
        }
    }
}

/// Removes every job directory of the state directory `state_dir` (default bases), now:
/// `tasks::stop` at the end of the demo and tests, once no task runs.
pub fn remove_all(state_dir: &Path) {
    let mut cleaner = Cleaner::new(&Setting::default(), state_dir);
    cleaner.sweep(|_, _| false);
    let mut rounds = 0;
    loop {
        let mut budget = usize::MAX;
        let mut empty = true;
        for base in cleaner.bases.clone() {
            empty &= drain(&base.join(TRASH), &mut budget, &mut cleaner.moved).unwrap_or(true);
        }
        rounds += 1;
        if empty || rounds > 1000 {
            break;
        }
    }
    cleaner.remove_empty_bases();
}

/// A name in the trash that no earlier run used.
fn unique(name: &str, moved: &mut u64) -> String {
    *moved += 1;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{name}.{nanos}.{moved}")
}

/// Removes what `trash` holds, spending `budget` (one per entry); true when it is empty.
fn drain(trash: &Path, budget: &mut usize, moved: &mut u64) -> io::Result<bool> {
    // Listed again while there is budget: what moved up meanwhile is there too.
    loop {
        let entries = match std::fs::read_dir(trash) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
            Err(e) => return Err(e),
        };
        let mut listed = false;
        for entry in entries {
            listed = true;
            if *budget == 0 {
                return Ok(false);
            }
            let path = entry?.path();
            if !empty_and_remove(&path, trash, budget, moved)? {
                return Ok(false);
            }
        }
        if !listed {
            return Ok(true);
        }
        if *budget == 0 {
            return Ok(false);
        }
    }
}

/// Removes `path` (a directory is taken, then emptied: files unlinked, empty
/// subdirectories removed, others moved up into `trash`); false when the budget ran out.
fn empty_and_remove(path: &Path, trash: &Path, budget: &mut usize, moved: &mut u64) -> io::Result<bool> {
    *budget = budget.saturating_sub(1);
    match take(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
        // Not a directory (a link, a file): unlinked, never followed.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
            return gone(std::fs::remove_file(path)).map(|()| true);
        }
        Err(e) => return Err(e),
    }
    for entry in std::fs::read_dir(path)? {
        if *budget == 0 {
            return Ok(false);
        }
        *budget -= 1;
        let child = entry?.path();
        match std::fs::remove_file(&child) {
            Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {}
            other => {
                gone(other)?;
                continue;
            }
        }
        match std::fs::remove_dir(&child) {
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOTEMPTY | libc::EEXIST | libc::EACCES | libc::EPERM)
                ) =>
            {
                take(&child)?;
                let name = child.file_name().and_then(|n| n.to_str()).unwrap_or("d");
                let name: String = name.chars().take(64).collect();
                gone(std::fs::rename(&child, trash.join(unique(&name, moved))))?;
            }
            other => gone(other)?,
        }
    }
    match std::fs::remove_dir(path) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => Ok(false),
        other => gone(other).map(|()| true),
    }
}

/// Makes directory `path` root's and 0700 (opened without following a link): its user can
/// no longer change what it holds, and root may empty it without overriding permissions.
/// Best effort where the agent is not root.
fn take(path: &Path) -> io::Result<()> {
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(path)?;
    if crate::shepherd::current_euid() == 0 {
        std::os::unix::fs::fchown(&dir, Some(0), Some(0))?;
        dir.set_permissions(std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// A removal of what is already gone is done.
fn gone(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// A cleaner of two bases in a temporary directory (the `/dev/shm` one there too).
    fn cleaner(dir: &Path) -> Cleaner {
        Cleaner {
            bases: [dir.join("tmp"), dir.join("shm")],
            own_tmp_base: true,
            pending: false,
            next_sweep: Instant::now() + SWEEP_EVERY,
            said: false,
            moved: 0,
        }
    }

    #[test]
    fn a_retired_job_is_removed_a_budget_at_a_time_deep_trees_and_links_included() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), "x").unwrap();
        let job = dir.path().join("tmp/j.7/tmp");
        // Deeper than a walk holding a descriptor per level should go, within PATH_MAX.
        let deep: PathBuf = std::iter::repeat_n("d", 1500).collect();
        std::fs::create_dir_all(job.join(&deep)).unwrap();
        std::fs::write(job.join(&deep).join("f"), "x").unwrap();
        for i in 0..3000 {
            std::fs::write(job.join(format!("f{i}")), "x").unwrap();
        }
        std::os::unix::fs::symlink(&outside, job.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.join("keep"), job.join("d/filelink")).unwrap();
        std::fs::create_dir_all(dir.path().join("shm/j.7/shm")).unwrap();
        std::fs::create_dir_all(dir.path().join("tmp/other.8/tmp")).unwrap();
        let mut c = cleaner(dir.path());
        c.retire("j", 7.into());
        assert!(!dir.path().join("tmp/j.7").exists() && !dir.path().join("shm/j.7").exists());
        assert!(c.pending);
        let mut scans = 0;
        while c.pending {
            c.work(false, |_, _| true);
            scans += 1;
            assert!(scans < 100, "not done after {scans} scans");
        }
        assert!(scans > 2, "a budget at a time: {scans}");
        for base in ["tmp", "shm"] {
            let left: Vec<_> = std::fs::read_dir(dir.path().join(base).join(TRASH)).unwrap().collect();
            assert!(left.is_empty(), "{left:?}");
        }
        // What the links named is untouched; the other job too.
        assert_eq!(std::fs::read_to_string(outside.join("keep")).unwrap(), "x");
        assert!(dir.path().join("tmp/other.8/tmp").is_dir());
        // A sweep takes the other job (no task), and an idle agent's empty bases go.
        c.sweep(|job, _| job != "other");
        while c.pending {
            c.work(true, |_, _| false);
        }
        assert!(!dir.path().join("tmp").exists() && !dir.path().join("shm").exists());
    }

    #[test]
    fn the_setting_follows_the_key_the_user_and_the_launcher() {
        let state = Path::new("/var/lib/hyperplan-agent");
        assert_eq!(decide(Some(false), None, false, state).unwrap().mode, Mode::Off);
        let e = decide(None, Some("jobtmp".into()), false, state).unwrap_err();
        assert!(matches!(e, PrivateTmpError::Relative(_)), "{e}");
        let dir = decide(Some(false), Some("/scratch/jt".into()), false, state).unwrap();
        assert_eq!(dir.bases(state).0, Path::new("/scratch/jt"));
        if crate::shepherd::current_euid() == 0 {
            // A launcher's shepherds make them, or say why not.
            assert_eq!(decide(None, None, true, state).unwrap().mode, Mode::BestEffort);
            assert_eq!(decide(Some(true), None, true, state).unwrap().mode, Mode::Required);
            // Without one, whether a child can make a namespace here decides.
            let here = decide(None, None, false, state).unwrap().mode;
            assert_eq!(here == Mode::BestEffort, probe().is_ok(), "{here:?}");
        } else {
            assert_eq!(decide(None, None, true, state).unwrap().mode, Mode::Off);
            let e = decide(Some(true), None, true, state).unwrap_err();
            assert!(matches!(e, PrivateTmpError::NotRoot(_)), "{e}");
        }
    }

    #[test]
    fn a_base_someone_else_made_first_is_moved_aside() {
        use std::os::unix::fs::MetadataExt;
        if crate::shepherd::current_euid() != 0 {
            eprintln!("skipped: the base is root's, made as root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("hyperplan");
        claim(&base);
        let meta = std::fs::symlink_metadata(&base).unwrap();
        assert!(meta.is_dir() && meta.mode() & 0o7777 == 0o711, "{meta:?}");
        // Writable by others, or a link: moved aside, and made again.
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).unwrap();
        claim(&base);
        std::fs::remove_dir(&base).unwrap();
        std::os::unix::fs::symlink(dir.path(), &base).unwrap();
        claim(&base);
        let meta = std::fs::symlink_metadata(&base).unwrap();
        assert!(meta.is_dir() && meta.mode() & 0o7777 == 0o711, "{meta:?}");
        let aside = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("hyperplan.squatted.")
            })
            .count();
        assert_eq!(aside, 2);
    }

    #[test]
    fn a_sweep_keeps_the_directories_of_jobs_with_tasks() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("tmp/live.1/tmp")).unwrap();
        std::fs::create_dir_all(dir.path().join("tmp/gone.2/tmp")).unwrap();
        std::fs::create_dir_all(dir.path().join("tmp/not-a-job")).unwrap();
        let mut c = cleaner(dir.path());
        c.sweep(|job, id| job == "live" && id == 1);
        while c.pending {
            c.work(false, |_, _| true);
        }
        assert!(dir.path().join("tmp/live.1/tmp").is_dir());
        assert!(!dir.path().join("tmp/gone.2").exists());
        assert!(dir.path().join("tmp/not-a-job").is_dir());
    }
}
