//! cgroup v2 confinement: where the node has the unified hierarchy with `cpuset` and
//! `memory` delegated to the agent (systemd `Delegate=yes`), each task gets a cgroup of
//! its own, so the kernel enforces what affinity only asks for: its CPUs
//! (`cpuset.cpus`), its NUMA memory (`cpuset.mems`) and its memory request
//! (`memory.max`, and the OOM kill counted in `memory.events`).
//!
//! cgroup v2 lets only a cgroup without processes hand controllers to its children (the
//! "no internal processes" rule), so, as systemd's delegation notes advise, the agent
//! moves itself into a leaf and puts its tasks beside it:
//!
//! ```text
//! <own>/                       the agent's cgroup (its unit's, with Delegate=yes)
//!   cgroup.subtree_control     +cpuset +memory
//!   agent/                     the agent (and the shepherds it starts)
//!   tasks/                     cgroup.subtree_control: +cpuset +memory
//!     <job>.<jobId>.<task>/    one task: cpuset.cpus, cpuset.mems, memory.max
//! ```
//!
//! [`Confinement::detect`] decides this once at start and says once why it falls back to
//! affinity (pinning only) or to none (`--pin off`). Everything here is file reads,
//! writes, `mkdir` and `rmdir` under a root given by the caller (normally
//! [`CGROUP_ROOT`]), so it is tested against a plain directory tree; sysfs content is
//! untrusted and bounded, and every path is built from checked names.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use hyperplan_net::messages::Confinement as Kind;
use hyperplan_shared::names::{NameKind, check_name};

use crate::probe::live::parse_cpu_list;
use crate::shepherd::spec::MAX_NUMA_NODE;

/// Where cgroup v2 is mounted.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The leaf the agent moves itself into, below its own cgroup.
pub const AGENT_LEAF: &str = "agent";
/// The parent of the tasks' cgroups, below the agent's own cgroup.
pub const TASKS_DIR: &str = "tasks";
/// The controllers the agent needs.
pub const CONTROLLERS: [&str; 2] = ["cpuset", "memory"];
/// The largest cgroup interface file (or `/proc/self/cgroup`) read.
const MAX_READ: u64 = 64 * 1024;

/// How this node confines tasks, decided at agent start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Confinement {
    /// Each task in a cgroup of its own under these, and pinned.
    Cgroup(TaskCgroups),
    /// Pinned to its PUs and NUMA memory, without a cgroup of its own.
    Affinity,
    /// Not pinned.
    None,
}

/// Where tasks' cgroups go: `<own>/tasks`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskCgroups {
    base: PathBuf,
}

/// What a task's cgroup is given. Empty `cpus` or `mems` leave the parent's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Limits<'a> {
    /// Kernel list form (`0-3,8-11`).
    pub cpus: &'a str,
    pub mems: &'a [u32],
    /// Bytes.
    pub memory_max: Option<u64>,
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
    #[error(
        "the controllers {missing} are not delegated to the agent's cgroup {path} (its cgroup.controllers has `{have}`; run the agent's unit with Delegate=yes)"
    )]
    NotDelegated {
        path: PathBuf,
        missing: String,
        have: String,
    },
    #[error(
        "other processes share the agent's cgroup {path} ({pids}); cgroup v2 lets only an empty cgroup enable controllers for children (run the agent as its own unit with Delegate=yes)"
    )]
    Shared { path: PathBuf, pids: String },
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
    /// under `root` (normally [`CGROUP_ROOT`]) is cgroup, anything less affinity, logged
    /// once with why. May move this process into its cgroup's `agent` leaf.
    pub fn detect(root: &Path, pin: bool) -> Confinement {
        if !pin {
            return Confinement::None;
        }
        let own = read_bounded(Path::new("/proc/self/cgroup"));
        let result = match own {
            Ok(text) => TaskCgroups::set_up(root, &text, std::process::id()),
            Err(e) => Err(e),
        };
        Self::from_setup(root, result)
    }

    /// [`Confinement::detect`] with pinning on, given `/proc/self/cgroup`'s text and
    /// this process's pid (tests).
    pub fn detect_with(root: &Path, proc_self_cgroup: &str, pid: u32) -> Confinement {
        Self::from_setup(root, TaskCgroups::set_up(root, proc_self_cgroup, pid))
    }

    fn from_setup(root: &Path, result: Result<TaskCgroups, CgroupError>) -> Confinement {
        match result {
            Ok(cgroups) => {
                tracing::info!(
                    tasks = %cgroups.base.display(),
                    "tasks are confined by cgroup v2: each in its own cgroup (cpuset.cpus, cpuset.mems, memory.max), and pinned"
                );
                Confinement::Cgroup(cgroups)
            }
            Err(e @ CgroupError::NotUnified { .. }) => {
                tracing::info!(root = %root.display(), "tasks are confined by affinity only (pinned, no cgroup): {e}");
                Confinement::Affinity
            }
            Err(e) => {
                tracing::warn!(root = %root.display(), "tasks are confined by affinity only (pinned, no cgroup): {e}");
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

impl TaskCgroups {
    /// Checks cgroup v2 under `root`, finds the agent's cgroup in `proc_self_cgroup`,
    /// moves `pid` into its `agent` leaf and enables `cpuset` and `memory` for `tasks/`.
    pub fn set_up(root: &Path, proc_self_cgroup: &str, pid: u32) -> Result<TaskCgroups, CgroupError> {
        if !root.join("cgroup.controllers").is_file() {
            return Err(CgroupError::NotUnified {
                root: root.to_path_buf(),
            });
        }
        let relative = own_cgroup(proc_self_cgroup)?;
        // Already in the leaf (an agent that re-executed itself): its parent is ours.
        let relative = match relative.file_name() {
            Some(leaf) if leaf == AGENT_LEAF => relative.parent().map(Path::to_path_buf).unwrap_or_default(),
            _ => relative,
        };
        let own = root.join(&relative);
        let have = read_bounded(&own.join("cgroup.controllers"))?;
        let words: Vec<&str> = have.split_whitespace().collect();
        let missing: Vec<&str> = CONTROLLERS.into_iter().filter(|c| !words.contains(c)).collect();
        if !missing.is_empty() {
            return Err(CgroupError::NotDelegated {
                path: own,
                missing: missing.join(" and "),
                have: have.trim().chars().take(200).collect(),
            });
        }
        let procs = read_bounded(&own.join("cgroup.procs"))?;
        let me = pid.to_string();
        let others: Vec<&str> = procs.split_whitespace().filter(|p| *p != me).collect();
        if !others.is_empty() {
            let more = if others.len() > 8 { ", …" } else { "" };
            return Err(CgroupError::Shared {
                path: own,
                pids: format!("pids {}{more}", others[..others.len().min(8)].join(", ")),
            });
        }
        let leaf = own.join(AGENT_LEAF);
        make_dir(&leaf)?;
        write(&leaf.join("cgroup.procs"), &format!("{pid}\n"), "move the agent into")?;
        let enable = CONTROLLERS.map(|c| format!("+{c}")).join(" ");
        write(
            &own.join("cgroup.subtree_control"),
            &enable,
            "enable cpuset and memory in",
        )?;
        let base = own.join(TASKS_DIR);
        make_dir(&base)?;
        write(
            &base.join("cgroup.subtree_control"),
            &enable,
            "enable cpuset and memory in",
        )?;
        Ok(TaskCgroups { base })
    }

    /// The tasks' cgroups' parent, `<own>/tasks`.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// The cgroup of one task, `<own>/tasks/<job>.<jobId>.<task>`; the names are checked.
    pub fn path(&self, job: &str, job_id: u64, task: &str) -> Result<PathBuf, CgroupError> {
        let bad = |e: hyperplan_shared::names::NameError| CgroupError::Task {
            job: job.to_string(),
            task: task.to_string(),
            what: e.to_string(),
        };
        check_name(NameKind::Job, job).map_err(bad)?;
        check_name(NameKind::Task, task).map_err(bad)?;
        Ok(self.base.join(format!("{job}.{job_id}.{task}")))
    }

    /// Makes the task's cgroup and writes its limits; returns its path for the spec. A
    /// leftover empty cgroup of the same name is used again; on an error what was made
    /// is removed.
    pub fn create(&self, job: &str, job_id: u64, task: &str, limits: &Limits<'_>) -> Result<PathBuf, CgroupError> {
        let path = self.path(job, job_id, task)?;
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
        match std::fs::create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let procs = match read_bounded(&path.join("cgroup.procs")) {
                    Ok(text) => text,
                    Err(CgroupError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                        String::new()
                    }
                    Err(e) => return Err(e),
                };
                if !procs.trim().is_empty() {
                    return Err(CgroupError::InUse { path });
                }
                tracing::debug!(cgroup = %path.display(), "using a leftover empty cgroup of the same task again");
            }
            Err(source) => {
                return Err(CgroupError::Io {
                    what: "create the cgroup",
                    path,
                    source,
                });
            }
        }
        let written = (|| {
            if !limits.cpus.is_empty() {
                write(&path.join("cpuset.cpus"), limits.cpus, "write")?;
            }
            if !limits.mems.is_empty() {
                let mems: Vec<String> = limits.mems.iter().map(u32::to_string).collect();
                write(&path.join("cpuset.mems"), &mems.join(","), "write")?;
            }
            if let Some(bytes) = limits.memory_max {
                write(&path.join("memory.max"), &bytes.to_string(), "write")?;
            }
            Ok(())
        })();
        match written {
            Ok(()) => Ok(path),
            Err(e) => {
                remove(&path);
                Err(e)
            }
        }
    }

    /// The cgroup a task's spec names, when it is one of this agent's for that task (a
    /// `tasks/<job>.<jobId>.<task>` directory under any base: a restarted agent may have
    /// another one), so that it can be removed.
    pub fn named_in_spec(spec_cgroup: &Path, job: &str, job_id: u64, task: &str) -> Option<PathBuf> {
        let leaf = format!("{job}.{job_id}.{task}");
        let plain = spec_cgroup.is_absolute()
            && spec_cgroup
                .components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
        let parent = spec_cgroup.parent()?;
        (plain && spec_cgroup.file_name()? == leaf.as_str() && parent.file_name()? == TASKS_DIR)
            .then(|| spec_cgroup.to_path_buf())
    }
}

/// Removes a task's cgroup once its end is acknowledged. Gone already, or still holding
/// a process (a daemon the task left behind): logged at debug, left.
pub fn remove(path: &Path) {
    match std::fs::remove_dir(path) {
        Ok(()) => tracing::debug!(cgroup = %path.display(), "removed the task's cgroup"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::EBUSY) => {
            tracing::debug!(cgroup = %path.display(), "the task's cgroup is not removed: {e}");
        }
        Err(e) => tracing::warn!(cgroup = %path.display(), "cannot remove the task's cgroup: {e}"),
    }
}

/// The cgroup v2 path (`0::/path`) of `/proc/self/cgroup`, relative, checked.
fn own_cgroup(text: &str) -> Result<PathBuf, CgroupError> {
    let path = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or(CgroupError::NoOwnCgroup)?
        .trim_end();
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
fn read_bounded(path: &Path) -> Result<String, CgroupError> {
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
fn make_dir(path: &Path) -> Result<(), CgroupError> {
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

/// One write of `text` (an interface file takes a value per write).
fn write(path: &Path, text: &str, what: &'static str) -> Result<(), CgroupError> {
    std::fs::write(path, text).map_err(|source| CgroupError::Io {
        what,
        path: path.to_path_buf(),
        source,
    })
}

/// Against a fake cgroup tree of plain files and directories in a temp dir. Real cgroup
/// v2 cannot be tested here: the machines these run on have cgroup v1 (or no delegated
/// v2), and as root a test would move itself and make cgroups on the host. The code uses
/// only reads, writes, `mkdir` and `rmdir`, which behave the same on both (the kernel's
/// refusals, such as EBUSY or EINVAL, are what the fallbacks are for).
#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const PID: u32 = 4242;

    /// A v2 root with the agent's unit cgroup holding only the agent.
    fn tree(controllers: &str) -> (tempfile::TempDir, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("cgroup.controllers"), "cpuset cpu io memory pids\n").unwrap();
        let own = root.path().join("system.slice/hyperplan-agent.service");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(own.join("cgroup.controllers"), controllers).unwrap();
        std::fs::write(own.join("cgroup.procs"), format!("{PID}\n")).unwrap();
        (root, own)
    }

    const SELF: &str = "0::/system.slice/hyperplan-agent.service\n";

    fn read(p: &Path) -> String {
        std::fs::read_to_string(p).unwrap()
    }

    #[test]
    fn a_delegated_cgroup_moves_the_agent_to_a_leaf_and_enables_the_controllers() {
        let (root, own) = tree("cpuset cpu memory pids\n");
        let c = Confinement::detect_with(root.path(), SELF, PID);
        assert_eq!(c.kind(), Kind::Cgroup);
        let cgroups = c.cgroups().unwrap();
        assert_eq!(cgroups.base(), own.join("tasks"));
        assert_eq!(read(&own.join("agent/cgroup.procs")), "4242\n");
        assert_eq!(read(&own.join("cgroup.subtree_control")), "+cpuset +memory");
        assert_eq!(read(&own.join("tasks/cgroup.subtree_control")), "+cpuset +memory");

        // Detected again from the leaf (a re-executed agent): the same base.
        let again = Confinement::detect_with(root.path(), "0::/system.slice/hyperplan-agent.service/agent\n", PID);
        assert_eq!(again, c);
    }

    #[test]
    fn anything_less_falls_back_to_affinity_and_pin_off_is_none() {
        assert_eq!(Confinement::detect(Path::new("/nonexistent"), false), Confinement::None);
        // cgroup v1 (no cgroup.controllers at the root).
        let v1 = tempfile::tempdir().unwrap();
        assert_eq!(Confinement::detect_with(v1.path(), SELF, PID), Confinement::Affinity);
        let why = |root: &Path, text: &str| TaskCgroups::set_up(root, text, PID).unwrap_err().to_string();
        assert!(why(v1.path(), SELF).contains("no cgroup v2"));

        // cpuset not delegated.
        let (root, own) = tree("cpu memory pids\n");
        assert_eq!(Confinement::detect_with(root.path(), SELF, PID), Confinement::Affinity);
        let e = why(root.path(), SELF);
        assert!(
            e.contains("cpuset are not delegated") && e.contains("Delegate=yes"),
            "{e}"
        );
        assert!(!own.join("agent").exists(), "nothing moved");

        // Others in the agent's cgroup (started from a shell).
        let (root, own) = tree("cpuset memory\n");
        std::fs::write(own.join("cgroup.procs"), "17\n4242\n99\n").unwrap();
        let e = why(root.path(), SELF);
        assert!(e.contains("pids 17, 99"), "{e}");
        assert!(!own.join("agent").exists(), "nothing moved");

        // Odd /proc/self/cgroup content: no v2 line, a relative or escaping path, deleted.
        let (root, _own) = tree("cpuset memory\n");
        for text in [
            "",
            "1:name=systemd:/x\n",
            "0::relative\n",
            "0::/a/../../etc\n",
            "0::/gone (deleted)\n",
            "\u{0}\u{ff}garbage",
        ] {
            assert!(TaskCgroups::set_up(root.path(), text, PID).is_err(), "{text:?}");
        }
        // A missing own cgroup, or one whose files are directories.
        assert!(why(root.path(), "0::/nope\n").contains("cannot read"));
        let (root, own) = tree("cpuset memory\n");
        std::fs::remove_file(own.join("cgroup.procs")).unwrap();
        std::fs::create_dir(own.join("cgroup.procs")).unwrap();
        assert!(TaskCgroups::set_up(root.path(), SELF, PID).is_err());
    }

    #[test]
    fn a_task_cgroup_gets_its_limits_and_is_removed() {
        let (root, own) = tree("cpuset memory\n");
        let c = TaskCgroups::set_up(root.path(), SELF, PID).unwrap();
        let limits = Limits {
            cpus: "0-3,8-11",
            mems: &[0, 1],
            memory_max: Some(1 << 30),
        };
        let path = c.create("train", 7, "worker-3", &limits).unwrap();
        assert_eq!(path, own.join("tasks/train.7.worker-3"));
        assert_eq!(read(&path.join("cpuset.cpus")), "0-3,8-11");
        assert_eq!(read(&path.join("cpuset.mems")), "0,1");
        assert_eq!(read(&path.join("memory.max")), "1073741824");

        // Nothing asked: only the directory (the parent's CPUs, memory and no limit).
        let bare = c.create("train", 7, "worker-4", &Limits::default()).unwrap();
        assert_eq!(std::fs::read_dir(&bare).unwrap().count(), 0);

        // A leftover empty cgroup is used again; one with processes refused.
        assert_eq!(c.create("train", 7, "worker-4", &Limits::default()).unwrap(), bare);
        std::fs::write(bare.join("cgroup.procs"), "123\n").unwrap();
        assert!(matches!(
            c.create("train", 7, "worker-4", &Limits::default()),
            Err(CgroupError::InUse { .. })
        ));

        // Removal: an empty directory goes; a missing one or a busy one is only logged.
        std::fs::remove_file(path.join("cpuset.cpus")).unwrap();
        std::fs::remove_file(path.join("cpuset.mems")).unwrap();
        std::fs::remove_file(path.join("memory.max")).unwrap();
        remove(&path);
        assert!(!path.exists());
        remove(&path);
        remove(&bare); // not empty here: stays, no panic
        assert!(bare.exists());
    }

    #[test]
    fn bad_names_and_limits_make_nothing() {
        let (root, own) = tree("cpuset memory\n");
        let c = TaskCgroups::set_up(root.path(), SELF, PID).unwrap();
        for (job, task) in [("../x", "w-0"), ("j", "a/b"), ("j", ".."), ("", "w-0")] {
            assert!(c.create(job, 1, task, &Limits::default()).is_err(), "{job:?} {task:?}");
        }
        let cpus = Limits {
            cpus: "3-1\n+",
            ..Limits::default()
        };
        assert!(
            c.create("j", 1, "w-0", &cpus)
                .unwrap_err()
                .to_string()
                .contains("its CPUs")
        );
        let mems = Limits {
            mems: &[5000],
            ..Limits::default()
        };
        assert!(c.create("j", 1, "w-0", &mems).is_err());
        assert_eq!(
            std::fs::read_dir(own.join("tasks")).unwrap().count(),
            1,
            "only subtree_control"
        );

        // A write the kernel refuses (here: the file is a directory) is an error naming it.
        let path = c.path("j", 1, "w-1").unwrap();
        std::fs::create_dir_all(path.join("memory.max")).unwrap();
        let limits = Limits {
            memory_max: Some(1),
            ..Limits::default()
        };
        let e = c.create("j", 1, "w-1", &limits).unwrap_err();
        assert!(e.to_string().contains("memory.max"), "{e}");
    }

    #[test]
    fn a_spec_s_cgroup_is_removed_only_when_it_is_that_task_s() {
        let ok = Path::new("/sys/fs/cgroup/system.slice/a.service/tasks/train.7.worker-3");
        assert_eq!(
            TaskCgroups::named_in_spec(ok, "train", 7, "worker-3").as_deref(),
            Some(ok)
        );
        for bad in [
            "/sys/fs/cgroup/system.slice/a.service/tasks/train.7.worker-4",
            "/sys/fs/cgroup/system.slice/a.service/other/train.7.worker-3",
            "/sys/fs/cgroup/x/tasks/../tasks/train.7.worker-3",
            "tasks/train.7.worker-3",
            "/",
        ] {
            assert_eq!(
                TaskCgroups::named_in_spec(Path::new(bad), "train", 7, "worker-3"),
                None,
                "{bad}"
            );
        }
    }
}
