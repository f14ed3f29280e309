//! How this node confines its tasks, decided once at agent start ([`Confinement::detect`]),
//! and each task's cgroups: made before its shepherd starts, joined by the task before
//! exec, emptied by [`kill`] at cancel, time limit, failure and a shepherd's death, and
//! removed after the task's end is acknowledged.
//!
//! - **cgroup v2** ([`v2`]): the unified hierarchy; one cgroup per task,
//!   `<own>/tasks/<job>.<jobId>.<task>`, killed with `cgroup.kill`, with the limits of
//!   `cpuset`, `memory` and `pids` where they are delegated to the agent (systemd
//!   `Delegate=yes`).
//! - **cgroup v1** ([`v1`]), as Slurm's proctrack/cgroup and task/cgroup use it: the
//!   `freezer` hierarchy (required: it finds and stops every process) and `cpuset`,
//!   `memory` and `pids` where mounted, one directory per task in each,
//!   `<mount>/<controller><own>/<name>/<job>.<jobId>.<task>` (`<name>`: `cgroupName`,
//!   default `hyperplan`), and in the hybrid layout's unified mount as well, for its
//!   `cgroup.kill`. Killed by freezing, SIGKILL to every process listed, thawing.
//! - **affinity** otherwise: pinned, and a task's processes are found by their ancestry
//!   (the shepherd is their subreaper) and session ([`super::sweep`]).
//! - **none** with pinning off (the same sweep, no pinning).
//!
//! Every task cgroup has `pids.max` (from `taskPidsMax`) where the pids controller is
//! there, so one task's fork bomb stops at its own limit. All of it is reads, writes,
//! `mkdir` and `rmdir` under a root given by the caller (normally [`CGROUP_ROOT`]), so it
//! is tested against plain directory trees as well as this machine's real hierarchies;
//! cgroup files are untrusted and bounded, and every path is built from checked names.

pub mod devices;
pub mod kill;
pub mod v1;
pub mod v2;

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use hyperplan_net::messages::Confinement as Kind;
use hyperplan_shared::names::{NameKind, check_name};

use crate::probe::live::parse_cpu_list;
use crate::shepherd::spec::MAX_NUMA_NODE;

/// Where the cgroup file systems are mounted (v2 itself, or v1's hierarchies below it).
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The directory below the agent's own cgroup in each v1 hierarchy (`cgroupName`).
pub const DEFAULT_NAME: &str = "hyperplan";
/// A task's `pids.max` when neither the agent's configuration nor the job says
/// (`taskPidsMax`): room for a rank's threads and helpers, not for a node's worth.
pub const DEFAULT_PIDS_MAX: u64 = 4096;
/// The largest cgroup interface file (or `/proc/self/cgroup`) read.
pub(crate) const MAX_READ: u64 = 256 * 1024;

/// How this node confines tasks, decided at agent start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Confinement {
    /// Each task in cgroups of its own under these, and pinned.
    Cgroup(TaskCgroups),
    /// Pinned to its PUs and NUMA memory, without a cgroup of its own.
    Affinity,
    /// Not pinned.
    None,
}

/// Where tasks' cgroups go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskCgroups {
    /// `<own>/tasks` in the unified hierarchy, with the controllers it was given.
    V2 {
        base: PathBuf,
        controllers: v2::Controllers,
    },
    /// One parent per v1 hierarchy (and the unified mount's, in the hybrid layout).
    V1(v1::Hierarchies),
}

/// What a task's cgroups are given. Empty `cpus` or `mems` leave the parent's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Limits<'a> {
    /// Kernel list form (`0-3,8-11`).
    pub cpus: &'a str,
    pub mems: &'a [u32],
    /// Bytes.
    pub memory_max: Option<u64>,
    /// Processes and threads; None: no limit of its own.
    pub pids_max: Option<u64>,
    /// The node's GPUs it may not open; `None`: no NVIDIA GPU to fence (or no minor
    /// readable for one of its own).
    pub gpus: Option<&'a devices::GpuFence>,
}

/// Why cgroups cannot be used, or a task's cgroup cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("no cgroup v2 unified hierarchy at {root} (no cgroup.controllers there)")]
    NotUnified { root: PathBuf },
    #[error("/proc/self/cgroup names no cgroup v2 path (no `0::/…` line)")]
    NoOwnCgroup,
    #[error("the agent's cgroup path {0:?} is not a plain absolute path")]
    BadPath(String),
    #[error("expected a directory name of 1 to 64 of A-Z a-z 0-9 . _ -, got {0:?}")]
    BadName(String),
    #[error("no cgroup v1 freezer hierarchy at {path} (it finds and stops every process of a task)")]
    NoFreezer { path: PathBuf },
    #[error("cannot {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is unreadable or too large")]
    Unreadable { path: PathBuf },
    #[error("the cgroup {path} exists and has processes in it")]
    InUse { path: PathBuf },
    #[error("task {job}/{task}: {what}")]
    Task { job: String, task: String, what: String },
}

impl Confinement {
    /// Decides how tasks are confined: `pin` off is none; otherwise a usable cgroup v2
    /// under `root` (normally [`CGROUP_ROOT`]), else usable v1 hierarchies there (their
    /// task parents named `name`), else affinity, logged once with why. May move this
    /// process into its v2 cgroup's `agent` leaf.
    pub fn detect(root: &Path, pin: bool, name: &str) -> Confinement {
        if !pin {
            return Confinement::None;
        }
        let own = read_bounded(Path::new("/proc/self/cgroup"));
        let result = match own {
            Ok(text) => set_up(root, &text, std::process::id(), name),
            Err(e) => Err(e),
        };
        Self::from_setup(root, result)
    }

    /// [`Confinement::detect`] with pinning on, given `/proc/self/cgroup`'s text and
    /// this process's pid (tests).
    pub fn detect_with(root: &Path, proc_self_cgroup: &str, pid: u32, name: &str) -> Confinement {
        Self::from_setup(root, set_up(root, proc_self_cgroup, pid, name))
    }

    fn from_setup(root: &Path, result: Result<TaskCgroups, CgroupError>) -> Confinement {
        match result {
            Ok(cgroups) => {
                match &cgroups {
                    TaskCgroups::V2 { base, controllers } => tracing::info!(
                        tasks = %base.display(),
                        controllers = %controllers.describe(),
                        "tasks are confined by cgroup v2: each in its own cgroup with these controllers' limits, killed with cgroup.kill, and pinned"
                    ),
                    TaskCgroups::V1(h) => tracing::info!(
                        tasks = %h.describe(),
                        "tasks are confined by cgroup v1: each in its own cgroup of every hierarchy listed, killed by freezer, and pinned"
                    ),
                }
                Confinement::Cgroup(cgroups)
            }
            Err(e) => {
                tracing::warn!(
                    root = %root.display(),
                    "tasks are confined by affinity only (pinned, no cgroup: their processes are found by ancestry and session): {e}"
                );
                Confinement::Affinity
            }
        }
    }

    /// The word the agent registers with.
    pub fn kind(&self) -> Kind {
        match self {
            Confinement::Cgroup(_) => Kind::Cgroup,
            Confinement::Affinity => Kind::Affinity,
            Confinement::None => Kind::None,
        }
    }

    pub fn cgroups(&self) -> Option<&TaskCgroups> {
        match self {
            Confinement::Cgroup(c) => Some(c),
            Confinement::Affinity | Confinement::None => None,
        }
    }
}

/// cgroup v2 when the root is unified; else v1 (whose failure is the one reported when
/// the root is not unified either).
fn set_up(root: &Path, proc_self_cgroup: &str, pid: u32, name: &str) -> Result<TaskCgroups, CgroupError> {
    match v2::set_up(root, proc_self_cgroup, pid) {
        Ok((base, controllers)) => Ok(TaskCgroups::V2 { base, controllers }),
        Err(CgroupError::NotUnified { .. }) => {
            v1::Hierarchies::set_up(root, proc_self_cgroup, name).map(TaskCgroups::V1)
        }
        Err(e) => Err(e),
    }
}

/// `<job>.<jobId>.<task>`, the names checked: the leaf of a task's cgroup everywhere.
pub fn leaf(job: &str, job_id: hyperplan_shared::ids::JobId, task: &str) -> Result<String, CgroupError> {
    let bad = |e: hyperplan_shared::names::NameError| CgroupError::Task {
        job: job.to_string(),
        task: task.to_string(),
        what: e.to_string(),
    };
    hyperplan_shared::names::check_job_name(job).map_err(bad)?;
    check_name(NameKind::Task, task).map_err(bad)?;
    Ok(format!("{job}.{job_id}.{task}"))
}

impl TaskCgroups {
    /// The cgroups of one task, one per hierarchy; the names are checked.
    pub fn paths(
        &self,
        job: &str,
        job_id: hyperplan_shared::ids::JobId,
        task: &str,
    ) -> Result<Vec<PathBuf>, CgroupError> {
        let leaf = leaf(job, job_id, task)?;
        Ok(match self {
            TaskCgroups::V2 { base, .. } => vec![base.join(leaf)],
            TaskCgroups::V1(h) => h.bases().map(|b| b.join(&leaf)).collect(),
        })
    }

    /// Makes the task's cgroups and writes its limits; returns their paths for the spec.
    /// A leftover empty cgroup of the same name is used again; on an error what was made
    /// is removed.
    pub fn create(
        &self,
        job: &str,
        job_id: hyperplan_shared::ids::JobId,
        task: &str,
        limits: &Limits<'_>,
    ) -> Result<Vec<PathBuf>, CgroupError> {
        let bad = |what: String| CgroupError::Task {
            job: job.to_string(),
            task: task.to_string(),
            what,
        };
        // Checked before anything is written: the files get exactly the kernel's forms.
        if !limits.cpus.is_empty() {
            parse_cpu_list(limits.cpus).map_err(|e| bad(format!("its CPUs {:?}: {e}", limits.cpus)))?;
        }
        if let Some(&n) = limits.mems.iter().find(|&&n| n > MAX_NUMA_NODE) {
            return Err(bad(format!("NUMA node {n} is beyond any machine")));
        }
        let leaf = leaf(job, job_id, task)?;
        match self {
            TaskCgroups::V2 { base, controllers } => {
                v2::create(&base.join(leaf), limits, *controllers).map(|p| vec![p])
            }
            TaskCgroups::V1(h) => h.create(&leaf, limits),
        }
    }

    /// The cgroups a task's spec names that are this task's (a `<job>.<jobId>.<task>`
    /// directory with a plain absolute path: a restarted agent's parents may differ), so
    /// that they can be killed and removed. Anything else in the spec is ignored.
    pub fn named_in_spec(
        spec_cgroups: &[PathBuf],
        job: &str,
        job_id: hyperplan_shared::ids::JobId,
        task: &str,
    ) -> Vec<PathBuf> {
        let Ok(leaf) = leaf(job, job_id, task) else {
            return Vec::new();
        };
        spec_cgroups
            .iter()
            .filter(|c| {
                c.is_absolute()
                    && c.components()
                        .all(|p| matches!(p, Component::RootDir | Component::Normal(_)))
                    && c.components().count() > 3
                    && c.file_name().is_some_and(|f| f == leaf.as_str())
            })
            .cloned()
            .collect()
    }
}

/// Removes a task's cgroup once its end is acknowledged. Gone already, or still holding
/// a process: logged at debug, left.
pub fn remove(path: &Path) {
    match std::fs::remove_dir(path) {
        Ok(()) => tracing::debug!(cgroup = %path.display(), "removed the task's cgroup"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::EBUSY) => {
            tracing::debug!(cgroup = %path.display(), "the task's cgroup is not removed: {e}");
        }
        Err(e) => tracing::warn!(cgroup = %path.display(), "cannot remove the task's cgroup: {e}"),
    }
}

/// A cgroup path of `/proc/self/cgroup`'s form (`/a/b`), relative, checked.
pub(crate) fn relative_cgroup_path(path: &str) -> Result<PathBuf, CgroupError> {
    let path = path.trim_end();
    // A cgroup removed under us reads `/path (deleted)`: not a path to use.
    let rel = Path::new(path)
        .strip_prefix("/")
        .map_err(|_| CgroupError::BadPath(path.to_string()))?;
    if path.contains('\0')
        || path.ends_with(" (deleted)")
        || !rel.components().all(|c| matches!(c, Component::Normal(_)))
    {
        return Err(CgroupError::BadPath(path.to_string()));
    }
    Ok(rel.to_path_buf())
}

/// A small text file, whole (at most [`MAX_READ`] bytes).
pub(crate) fn read_bounded(path: &Path) -> Result<String, CgroupError> {
    let file = std::fs::File::open(path).map_err(|source| CgroupError::Io {
        what: "read",
        path: path.to_path_buf(),
        source,
    })?;
    let mut bytes = Vec::new();
    file.take(MAX_READ + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| CgroupError::Io {
            what: "read",
            path: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > MAX_READ {
        return Err(CgroupError::Unreadable {
            path: path.to_path_buf(),
        });
    }
    String::from_utf8(bytes).map_err(|_| CgroupError::Unreadable {
        path: path.to_path_buf(),
    })
}

/// `mkdir`, an existing directory being fine.
pub(crate) fn make_dir(path: &Path) -> Result<(), CgroupError> {
    match std::fs::create_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && path.is_dir() => Ok(()),
        Err(source) => Err(CgroupError::Io {
            what: "create the cgroup",
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Makes a task's cgroup `path`; a leftover one is used again when it has no process.
pub(crate) fn make_task_dir(path: &Path) -> Result<(), CgroupError> {
    match std::fs::create_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let procs = match read_bounded(&path.join("cgroup.procs")) {
                Ok(text) => text,
                Err(CgroupError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => String::new(),
                Err(e) => return Err(e),
            };
            if !procs.trim().is_empty() {
                return Err(CgroupError::InUse {
                    path: path.to_path_buf(),
                });
            }
            tracing::debug!(cgroup = %path.display(), "using a leftover empty cgroup of the same task again");
            Ok(())
        }
        Err(source) => Err(CgroupError::Io {
            what: "create the cgroup",
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// One write of `text` (an interface file takes a value per write).
pub(crate) fn write(path: &Path, text: &str, what: &'static str) -> Result<(), CgroupError> {
    std::fs::write(path, text).map_err(|source| CgroupError::Io {
        what,
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_s_cgroups_are_kept_only_when_they_are_that_task_s() {
        let ok = PathBuf::from("/sys/fs/cgroup/system.slice/a.service/tasks/train.7.worker-3");
        let v1 = PathBuf::from("/sys/fs/cgroup/freezer/hyperplan/train.7.worker-3");
        let bad: Vec<PathBuf> = [
            "/sys/fs/cgroup/system.slice/a.service/tasks/train.7.worker-4",
            "/sys/fs/cgroup/x/tasks/../tasks/train.7.worker-3",
            "tasks/train.7.worker-3",
            "/train.7.worker-3",
            "/",
        ]
        .into_iter()
        .map(PathBuf::from)
        .collect();
        let mut all = bad.clone();
        all.insert(1, ok.clone());
        all.push(v1.clone());
        assert_eq!(
            TaskCgroups::named_in_spec(&all, "train", 7.into(), "worker-3"),
            [ok, v1]
        );
        assert!(TaskCgroups::named_in_spec(&all, "../x", 7.into(), "worker-3").is_empty());
    }
}
