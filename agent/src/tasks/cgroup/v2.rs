//! cgroup v2: where the node has the unified hierarchy with `cpuset` and `memory`
//! delegated to the agent (systemd `Delegate=yes`), each task gets a cgroup of its own,
//! so the kernel enforces what affinity only asks for: its CPUs (`cpuset.cpus`), its NUMA
//! memory (`cpuset.mems`), its memory request (`memory.max`, the OOM kill counted in
//! `memory.events`) and its process count (`pids.max`, when `pids` is delegated too).
//!
//! cgroup v2 lets only a cgroup without processes hand controllers to its children (the
//! "no internal processes" rule), so, as systemd's delegation notes advise, the agent
//! moves itself into a leaf and puts its tasks beside it:
//!
//! ```text
//! <own>/                       the agent's cgroup (its unit's, with Delegate=yes)
//!   cgroup.subtree_control     +cpuset +memory [+pids]
//!   agent/                     the agent (and the shepherds it starts)
//!   tasks/                     cgroup.subtree_control: +cpuset +memory [+pids]
//!     <job>.<jobId>.<task>/    one task: cpuset.cpus, cpuset.mems, memory.max, pids.max
//! ```

use std::path::{Path, PathBuf};

use super::{CgroupError, Limits, make_dir, make_task_dir, read_bounded, relative_cgroup_path, remove, write};

/// The leaf the agent moves itself into, below its own cgroup.
pub const AGENT_LEAF: &str = "agent";
/// The parent of the tasks' cgroups, below the agent's own cgroup.
pub const TASKS_DIR: &str = "tasks";

/// The controllers the tasks' cgroups have: each where the agent's cgroup was given it
/// (and the agent is alone in it, which v2 needs to hand controllers on). Without any,
/// a task's cgroup still holds every process of the task for `cgroup.kill`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Controllers {
    pub cpuset: bool,
    pub memory: bool,
    pub pids: bool,
}

impl Controllers {
    /// `+cpuset +memory +pids`, those on.
    fn enable_line(self) -> String {
        [(self.cpuset, "+cpuset"), (self.memory, "+memory"), (self.pids, "+pids")]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, c)| *c)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// For the start-up line: `cpuset memory pids`, or `none`.
    pub fn describe(self) -> String {
        match self.enable_line().replace('+', "") {
            none if none.is_empty() => "none".to_string(),
            some => some,
        }
    }
}

/// Checks cgroup v2 under `root` and finds the agent's cgroup in `proc_self_cgroup`.
/// When it was given any of `cpuset`, `memory` and `pids` and the agent (`pid`) is alone
/// in it, moves the agent into its `agent` leaf and enables them for `tasks/`; otherwise
/// says once which limits tasks go without. Returns `tasks/` and its controllers.
pub fn set_up(root: &Path, proc_self_cgroup: &str, pid: u32) -> Result<(PathBuf, Controllers), CgroupError> {
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
    let mut controllers = Controllers {
        cpuset: words.contains(&"cpuset"),
        memory: words.contains(&"memory"),
        pids: words.contains(&"pids"),
    };
    let missing: Vec<&str> = ["cpuset", "memory", "pids"]
        .into_iter()
        .filter(|c| !words.contains(c))
        .collect();
    if !missing.is_empty() {
        tracing::warn!(
            cgroup = %own.display(),
            "the controllers {} are not delegated to the agent's cgroup (run its unit with Delegate=yes): tasks go without those limits",
            missing.join(", ")
        );
    }
    let procs = read_bounded(&own.join("cgroup.procs"))?;
    let me = pid.to_string();
    let others: Vec<&str> = procs.split_whitespace().filter(|p| *p != me).collect();
    if !others.is_empty() && controllers != Controllers::default() {
        let more = if others.len() > 8 { ", …" } else { "" };
        tracing::warn!(
            cgroup = %own.display(),
            "other processes share the agent's cgroup (pids {}{more}); cgroup v2 lets only an empty cgroup hand controllers on (run the agent as its own unit with Delegate=yes): tasks get cgroups without limits",
            others[..others.len().min(8)].join(", ")
        );
        controllers = Controllers::default();
    }
    let enable = controllers.enable_line();
    if !enable.is_empty() {
        let leaf = own.join(AGENT_LEAF);
        make_dir(&leaf)?;
        write(&leaf.join("cgroup.procs"), &format!("{pid}\n"), "move the agent into")?;
        write(&own.join("cgroup.subtree_control"), &enable, "enable controllers in")?;
    }
    let base = own.join(TASKS_DIR);
    make_dir(&base)?;
    if !enable.is_empty() {
        write(&base.join("cgroup.subtree_control"), &enable, "enable controllers in")?;
    }
    Ok((base, controllers))
}

/// Makes one task's cgroup `path` with the limits its controllers take; on an error it is
/// removed again.
pub fn create(path: &Path, limits: &Limits<'_>, controllers: Controllers) -> Result<PathBuf, CgroupError> {
    make_task_dir(path)?;
    let written = (|| {
        if controllers.cpuset && !limits.cpus.is_empty() {
            write(&path.join("cpuset.cpus"), limits.cpus, "write")?;
        }
        if controllers.cpuset && !limits.mems.is_empty() {
            let mems: Vec<String> = limits.mems.iter().map(u32::to_string).collect();
            write(&path.join("cpuset.mems"), &mems.join(","), "write")?;
        }
        if controllers.memory
            && let Some(bytes) = limits.memory_max
        {
            write(&path.join("memory.max"), &bytes.to_string(), "write")?;
            // No swap beyond it (Slurm's AllowedSwapSpace=0): a task over its request is
            // OOM-killed rather than slowing the node. Kernels without swap accounting
            // have no such file.
            let swap = path.join("memory.swap.max");
            if swap.is_file() {
                write(&swap, "0", "write")?;
            }
        }
        if let Some(fence) = limits.gpus {
            fence_gpus(path, fence);
        }
        if controllers.pids
            && let Some(n) = limits.pids_max
        {
            write(&path.join("pids.max"), &n.to_string(), "write")?;
        }
        Ok(())
    })();
    match written {
        Ok(()) => Ok(path.to_path_buf()),
        Err(e) => {
            remove(path);
            Err(e)
        }
    }
}

/// Attaches the device program keeping the task from the node's other GPUs. A kernel
/// that refuses it (no `CONFIG_CGROUP_BPF`, a parent program attached without
/// `BPF_F_ALLOW_MULTI`, an agent without `CAP_BPF`/`CAP_SYS_ADMIN`) leaves the task with
/// `CUDA_VISIBLE_DEVICES` only: said, at most once a minute, not fatal.
pub(super) fn fence_gpus(path: &Path, fence: &super::devices::GpuFence) {
    if let Err(e) = super::devices::attach(path, &super::devices::program(&fence.allowed)) {
        super::devices::unfenced(&e.to_string());
    }
}

/// The cgroup v2 path (`0::/path`) of `/proc/self/cgroup`, relative, checked.
fn own_cgroup(text: &str) -> Result<PathBuf, CgroupError> {
    let path = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or(CgroupError::NoOwnCgroup)?;
    relative_cgroup_path(path)
}

/// Against a fake cgroup tree of plain files and directories in a temp dir: as root a
/// test would move itself and make cgroups on the host's v2 hierarchy, and machines with
/// delegated v2 are not where these run. The code uses only reads, writes, `mkdir` and
/// `rmdir`, which behave the same on both (the kernel's refusals, such as EBUSY or
/// EINVAL, are what the fallbacks are for). The real kernel's v1 and hybrid hierarchies
/// are exercised by `v1`'s and `kill`'s tests.
#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::super::{Confinement, TaskCgroups};
    use super::*;
    use hyperplan_net::messages::Confinement as Kind;

    const PID: u32 = 4242;
    const NAME: &str = "hyperplan";
    const ALL: Controllers = Controllers {
        cpuset: true,
        memory: true,
        pids: true,
    };

    fn full_limits() -> Limits<'static> {
        Limits {
            cpus: "0-1",
            mems: &[0],
            memory_max: Some(1 << 20),
            pids_max: Some(8),
            gpus: None,
        }
    }

    /// A v2 root with the agent's unit cgroup holding only the agent.
    #[test]
    fn no_swap_beyond_memory_and_a_gpu_fence_the_kernel_refuses_is_not_fatal() {
        let (root, own) = tree("cpuset memory pids\n");
        let c = match Confinement::detect_with(root.path(), SELF, PID, NAME) {
            Confinement::Cgroup(c) => c,
            other => panic!("{other:?}"),
        };
        // The kernel makes memory.swap.max where it accounts swap: so does this tree.
        let path = own.join("tasks/train.7.worker-5");
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(path.join("memory.swap.max"), "max\n").unwrap();
        let fence = crate::tasks::cgroup::devices::GpuFence {
            allowed: vec![0],
            hidden: vec![1, 2, 3],
        };
        let limits = Limits {
            memory_max: Some(1 << 30),
            gpus: Some(&fence),
            ..Limits::default()
        };
        // A plain directory is no cgroup: the device program cannot attach, said once.
        let made = c.create("train", 7.into(), "worker-5", &limits).unwrap();
        assert_eq!(made, std::slice::from_ref(&path));
        assert_eq!(read(&path.join("memory.swap.max")), "0");
        assert_eq!(read(&path.join("memory.max")), "1073741824");
        // Without swap accounting, no file is made.
        let other = c.create("train", 7.into(), "worker-6", &limits).unwrap().remove(0);
        assert!(!other.join("memory.swap.max").exists());
    }

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

    fn why(root: &Path, text: &str) -> String {
        set_up(root, text, PID).unwrap_err().to_string()
    }

    #[test]
    fn a_delegated_cgroup_moves_the_agent_to_a_leaf_and_enables_the_controllers() {
        let (root, own) = tree("cpuset cpu memory pids\n");
        let c = Confinement::detect_with(root.path(), SELF, PID, NAME);
        assert_eq!(c.kind(), Kind::Cgroup);
        assert_eq!(
            c.cgroups().unwrap(),
            &TaskCgroups::V2 {
                base: own.join("tasks"),
                controllers: ALL
            }
        );
        assert_eq!(read(&own.join("agent/cgroup.procs")), "4242\n");
        assert_eq!(read(&own.join("cgroup.subtree_control")), "+cpuset +memory +pids");
        assert_eq!(read(&own.join("tasks/cgroup.subtree_control")), "+cpuset +memory +pids");

        // Detected again from the leaf (a re-executed agent): the same base.
        let again = Confinement::detect_with(
            root.path(),
            "0::/system.slice/hyperplan-agent.service/agent\n",
            PID,
            NAME,
        );
        assert_eq!(again, c);

        // Without pids delegated: no pids.max, the rest as before.
        let (root, own) = tree("cpuset memory\n");
        let no_pids = Controllers { pids: false, ..ALL };
        assert_eq!(set_up(root.path(), SELF, PID).unwrap(), (own.join("tasks"), no_pids));
        assert_eq!(read(&own.join("cgroup.subtree_control")), "+cpuset +memory");
    }

    #[test]
    fn fewer_controllers_or_a_shared_cgroup_still_give_tasks_cgroups() {
        // cpuset not delegated: memory and pids only (pinning stays affinity's).
        let (root, own) = tree("cpu memory pids\n");
        let (base, c) = set_up(root.path(), SELF, PID).unwrap();
        assert_eq!((base, c), (own.join("tasks"), Controllers { cpuset: false, ..ALL }));
        assert_eq!(read(&own.join("cgroup.subtree_control")), "+memory +pids");
        let path = create(&own.join("tasks/j.1.w"), &full_limits(), c).unwrap();
        assert!(!path.join("cpuset.cpus").exists() && path.join("memory.max").exists());

        // Others in the agent's cgroup (started from a shell, a container): no controller
        // can be handed on; the tasks' cgroups hold their processes all the same.
        let (root, own) = tree("cpuset memory pids\n");
        std::fs::write(own.join("cgroup.procs"), "17\n4242\n99\n").unwrap();
        let (base, c) = set_up(root.path(), SELF, PID).unwrap();
        assert_eq!((base.clone(), c), (own.join("tasks"), Controllers::default()));
        assert!(!own.join("agent").exists(), "not moved");
        assert!(!own.join("cgroup.subtree_control").exists());
        let path = create(&base.join("j.1.w"), &full_limits(), c).unwrap();
        assert_eq!(std::fs::read_dir(path).unwrap().count(), 0, "no limits written");
        assert_eq!(Controllers::default().describe(), "none");
        assert_eq!(ALL.describe(), "cpuset memory pids");
    }

    #[test]
    fn anything_less_falls_back_and_pin_off_is_none() {
        assert_eq!(
            Confinement::detect(Path::new("/nonexistent"), false, NAME),
            Confinement::None
        );
        // No cgroup.controllers at the root, and no v1 hierarchies either.
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(
            Confinement::detect_with(empty.path(), SELF, PID, NAME),
            Confinement::Affinity
        );
        assert!(why(empty.path(), SELF).contains("no cgroup v2"));

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
            assert!(set_up(root.path(), text, PID).is_err(), "{text:?}");
            assert_eq!(
                Confinement::detect_with(root.path(), text, PID, NAME),
                Confinement::Affinity
            );
        }
        // A missing own cgroup, or one whose files are directories.
        assert!(why(root.path(), "0::/nope\n").contains("cannot read"));
        let (root, own) = tree("cpuset memory\n");
        std::fs::remove_file(own.join("cgroup.procs")).unwrap();
        std::fs::create_dir(own.join("cgroup.procs")).unwrap();
        assert!(set_up(root.path(), SELF, PID).is_err());
    }

    #[test]
    fn a_task_cgroup_gets_its_limits_and_is_removed() {
        let (root, own) = tree("cpuset memory pids\n");
        let c = match Confinement::detect_with(root.path(), SELF, PID, NAME) {
            Confinement::Cgroup(c) => c,
            other => panic!("{other:?}"),
        };
        let limits = Limits {
            cpus: "0-3,8-11",
            mems: &[0, 1],
            memory_max: Some(1 << 30),
            pids_max: Some(64),
            gpus: None,
        };
        let paths = c.create("train", 7.into(), "worker-3", &limits).unwrap();
        let path = own.join("tasks/train.7.worker-3");
        assert_eq!(paths, std::slice::from_ref(&path));
        assert_eq!(c.paths("train", 7.into(), "worker-3").unwrap(), paths);
        assert_eq!(read(&path.join("cpuset.cpus")), "0-3,8-11");
        assert_eq!(read(&path.join("cpuset.mems")), "0,1");
        assert_eq!(read(&path.join("memory.max")), "1073741824");
        assert_eq!(read(&path.join("pids.max")), "64");

        // Nothing asked: only the directory (the parent's CPUs, memory and no limit).
        let bare = c
            .create("train", 7.into(), "worker-4", &Limits::default())
            .unwrap()
            .remove(0);
        assert_eq!(std::fs::read_dir(&bare).unwrap().count(), 0);

        // A leftover empty cgroup is used again; one with processes refused.
        assert_eq!(
            c.create("train", 7.into(), "worker-4", &Limits::default()).unwrap(),
            std::slice::from_ref(&bare)
        );
        std::fs::write(bare.join("cgroup.procs"), "123\n").unwrap();
        assert!(matches!(
            c.create("train", 7.into(), "worker-4", &Limits::default()),
            Err(CgroupError::InUse { .. })
        ));

        // Removal: an empty directory goes; a missing one or a busy one is only logged.
        for f in ["cpuset.cpus", "cpuset.mems", "memory.max", "pids.max"] {
            std::fs::remove_file(path.join(f)).unwrap();
        }
        remove(&path);
        assert!(!path.exists());
        remove(&path);
        remove(&bare); // not empty here: stays, no panic
        assert!(bare.exists());
    }

    #[test]
    fn bad_names_and_limits_make_nothing() {
        let (root, own) = tree("cpuset memory\n");
        let Confinement::Cgroup(c) = Confinement::detect_with(root.path(), SELF, PID, NAME) else {
            panic!("no cgroups")
        };
        for (job, task) in [("../x", "w-0"), ("j", "a/b"), ("j", ".."), ("", "w-0")] {
            assert!(
                c.create(job, 1.into(), task, &Limits::default()).is_err(),
                "{job:?} {task:?}"
            );
        }
        let cpus = Limits {
            cpus: "3-1\n+",
            ..Limits::default()
        };
        assert!(
            c.create("j", 1.into(), "w-0", &cpus)
                .unwrap_err()
                .to_string()
                .contains("its CPUs")
        );
        let mems = Limits {
            mems: &[5000],
            ..Limits::default()
        };
        assert!(c.create("j", 1.into(), "w-0", &mems).is_err());
        assert_eq!(
            std::fs::read_dir(own.join("tasks")).unwrap().count(),
            1,
            "only subtree_control"
        );

        // A write the kernel refuses (here: the file is a directory) is an error naming it.
        let path = c.paths("j", 1.into(), "w-1").unwrap().remove(0);
        std::fs::create_dir_all(path.join("memory.max")).unwrap();
        let limits = Limits {
            memory_max: Some(1),
            ..Limits::default()
        };
        let e = c.create("j", 1.into(), "w-1", &limits).unwrap_err();
        assert!(e.to_string().contains("memory.max"), "{e}");
    }
}
