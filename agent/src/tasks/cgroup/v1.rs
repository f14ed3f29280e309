//! cgroup v1 (and the hybrid layout): one directory per task in each hierarchy the agent
//! uses, below the agent's own cgroup there, as Slurm's proctrack/cgroup does:
//!
//! ```text
//! /sys/fs/cgroup/freezer<own>/hyperplan/<job>.<jobId>.<task>/   required: finds and stops every process
//! /sys/fs/cgroup/cpuset<own>/hyperplan/<job>.<jobId>.<task>/    cpuset.cpus, cpuset.mems
//! /sys/fs/cgroup/memory<own>/hyperplan/<job>.<jobId>.<task>/    memory.limit_in_bytes (oom_kill in memory.oom_control)
//! /sys/fs/cgroup/pids<own>/hyperplan/<job>.<jobId>.<task>/      pids.max
//! /sys/fs/cgroup/devices<own>/hyperplan/<job>.<jobId>.<task>/   devices.deny: the node's other GPUs
//! /sys/fs/cgroup/unified<own>/hyperplan/<job>.<jobId>.<task>/   hybrid only: cgroup.kill, GPU device program
//! ```
//!
//! `<own>` is the agent's cgroup in that hierarchy (`/proc/self/cgroup`), so a unit's
//! limits still cover its tasks; `hyperplan` is `cgroupName`. v1 gives a new cpuset no
//! CPUs and no memory nodes, so every level gets its parent's before a task can join.
//! Only `freezer` is required; a hierarchy that is not mounted is left out and said once.

use std::path::{Path, PathBuf};

use super::{CgroupError, Limits, make_dir, make_task_dir, read_bounded, relative_cgroup_path, remove, write};

/// A v1 controller the agent uses, or the hybrid layout's unified (v2) mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Controller {
    Freezer,
    Cpuset,
    Memory,
    Pids,
    /// `devices.deny` for the node's other GPUs.
    Devices,
    /// `/sys/fs/cgroup/unified`: no controllers, but `cgroup.kill` and exact membership
    /// (and, with `CONFIG_CGROUP_BPF`, the GPU device program).
    Unified,
}

impl Controller {
    /// Its directory under the cgroup root, which is also its name in `/proc/self/cgroup`.
    pub fn dir(self) -> &'static str {
        match self {
            Controller::Freezer => "freezer",
            Controller::Cpuset => "cpuset",
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Devices => "devices",
            Controller::Unified => "unified",
        }
    }
}

const V1: [Controller; 5] = [
    Controller::Freezer,
    Controller::Cpuset,
    Controller::Memory,
    Controller::Pids,
    Controller::Devices,
];

/// The parent of the tasks' cgroups in each hierarchy used, freezer first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hierarchies {
    bases: Vec<(Controller, PathBuf)>,
}

impl Hierarchies {
    /// Finds the v1 hierarchies under `root` and the agent's cgroup in each (from
    /// `proc_self_cgroup`), and makes `<own>/<name>` in each. Freezer is required.
    pub fn set_up(root: &Path, proc_self_cgroup: &str, name: &str) -> Result<Hierarchies, CgroupError> {
        check_dir_name(name)?;
        let mut bases = Vec::new();
        let mut missing = Vec::new();
        for controller in V1 {
            let mount = root.join(controller.dir());
            let own = own_path(proc_self_cgroup, controller.dir());
            match own {
                Some(rel) if mount.join("cgroup.procs").is_file() => {
                    bases.push((controller, mount.join(relative_cgroup_path(rel)?).join(name)))
                }
                _ if controller == Controller::Freezer => return Err(CgroupError::NoFreezer { path: mount }),
                _ => missing.push(controller.dir()),
            }
        }
        // The hybrid layout: a v2 mount beside v1, for cgroup.kill (best effort).
        let unified = root.join(Controller::Unified.dir());
        if unified.join("cgroup.procs").is_file()
            && let Some(rel) = proc_self_cgroup.lines().find_map(|l| l.strip_prefix("0::"))
            && let Ok(rel) = relative_cgroup_path(rel)
        {
            let base = unified.join(rel).join(name);
            match make_dir(&base) {
                Ok(()) => bases.push((Controller::Unified, base)),
                Err(e) => tracing::info!("not using the unified cgroup hierarchy for tasks: {e}"),
            }
        }
        if !missing.is_empty() {
            tracing::warn!(
                missing = missing.join(", "),
                "cgroup v1 hierarchies not mounted: tasks are confined without them"
            );
        }
        for (controller, base) in &bases {
            if *controller == Controller::Unified {
                continue;
            }
            make_dir(base)?;
            if *controller == Controller::Cpuset {
                inherit_cpuset(base)?;
            }
        }
        Ok(Hierarchies { bases })
    }

    /// The tasks' parents, freezer first.
    pub fn bases(&self) -> impl Iterator<Item = &Path> {
        self.bases.iter().map(|(_, b)| b.as_path())
    }

    /// For the start-up log line: `freezer=PATH cpuset=PATH …`.
    pub fn describe(&self) -> String {
        self.bases
            .iter()
            .map(|(c, b)| format!("{}={}", c.dir(), b.display()))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Makes `<base>/<leaf>` in every hierarchy with the task's limits; on an error
    /// removes what it made.
    pub fn create(&self, leaf: &str, limits: &Limits<'_>) -> Result<Vec<PathBuf>, CgroupError> {
        let mut made: Vec<PathBuf> = Vec::new();
        for (controller, base) in &self.bases {
            let path = base.join(leaf);
            let result = make_task_dir(&path).and_then(|()| {
                made.push(path.clone());
                set_limits(*controller, base, &path, limits)
            });
            if let Err(e) = result {
                for p in made.iter().rev() {
                    remove(p);
                }
                return Err(e);
            }
        }
        Ok(made)
    }
}

/// Empties and removes `<own>/<name>` and every task cgroup in it, in every v1 hierarchy
/// and the unified mount under `root`: what an agent made, once it and its tasks are gone
/// for good (tests and demos clean up with it). Returns how many directories went.
pub fn remove_all(root: &Path, proc_self_cgroup: &str, name: &str) -> usize {
    if check_dir_name(name).is_err() {
        return 0;
    }
    let mut removed = 0;
    for controller in V1.into_iter().chain([Controller::Unified]) {
        let own = match controller {
            Controller::Unified => proc_self_cgroup.lines().find_map(|l| l.strip_prefix("0::")),
            c => own_path(proc_self_cgroup, c.dir()),
        };
        let Some(Ok(rel)) = own.map(relative_cgroup_path) else {
            continue;
        };
        let base = root.join(controller.dir()).join(rel).join(name);
        let Ok(entries) = std::fs::read_dir(&base) else {
            continue;
        };
        let tasks: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.path())
            .collect();
        super::kill::kill_all(&tasks, std::time::Duration::from_secs(2), &mut || {});
        for dir in tasks.iter().chain([&base]) {
            if std::fs::remove_dir(dir).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}

/// What one hierarchy's task cgroup is given.
fn set_limits(controller: Controller, base: &Path, path: &Path, limits: &Limits<'_>) -> Result<(), CgroupError> {
    match controller {
        Controller::Cpuset => {
            let cpus = match limits.cpus {
                "" => read_bounded(&base.join("cpuset.cpus"))?.trim().to_string(),
                cpus => cpus.to_string(),
            };
            let mems = match limits.mems {
                [] => read_bounded(&base.join("cpuset.mems"))?.trim().to_string(),
                mems => mems.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
            };
            write(&path.join("cpuset.cpus"), &cpus, "write")?;
            write(&path.join("cpuset.mems"), &mems, "write")
        }
        Controller::Memory => match limits.memory_max {
            Some(bytes) => {
                // Memory and swap together no more than memory (no swap of its own),
                // where the kernel accounts swap. The kernel keeps memsw ≥ the limit, so
                // a reused cgroup's memsw is lifted first.
                let memsw = path.join("memory.memsw.limit_in_bytes");
                let swap_accounted = memsw.is_file();
                if swap_accounted {
                    write(&memsw, "-1", "write")?;
                }
                write(&path.join("memory.limit_in_bytes"), &bytes.to_string(), "write")?;
                if swap_accounted {
                    write(&memsw, &bytes.to_string(), "write")?;
                }
                Ok(())
            }
            None => Ok(()),
        },
        Controller::Devices => {
            // Writing a rule takes CAP_SYS_ADMIN: without it the task runs unfenced.
            for line in limits.gpus.map(super::devices::deny_lines).unwrap_or_default() {
                if let Err(e) = write(&path.join("devices.deny"), &line, "write") {
                    super::devices::unfenced(&e.to_string());
                    break;
                }
            }
            Ok(())
        }
        Controller::Pids => {
            let max = limits.pids_max.map_or_else(|| "max".to_string(), |n| n.to_string());
            write(&path.join("pids.max"), &max, "write")
        }
        Controller::Unified => {
            if let Some(fence) = limits.gpus {
                super::v2::fence_gpus(path, fence);
            }
            Ok(())
        }
        Controller::Freezer => Ok(()),
    }
}

/// A new v1 cpuset has no CPUs and no memory nodes: give it its parent's.
fn inherit_cpuset(dir: &Path) -> Result<(), CgroupError> {
    let Some(parent) = dir.parent() else { return Ok(()) };
    for file in ["cpuset.cpus", "cpuset.mems"] {
        let mine = read_bounded(&dir.join(file))?;
        if mine.trim().is_empty() {
            let theirs = read_bounded(&parent.join(file))?;
            write(&dir.join(file), theirs.trim(), "write")?;
        }
    }
    Ok(())
}

/// The path of `controller`'s line (`N:a,b:/path`) in `/proc/self/cgroup`.
fn own_path<'a>(text: &'a str, controller: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_id, list, path) = (parts.next()?, parts.next()?, parts.next()?);
        list.split(',').any(|c| c == controller).then_some(path)
    })
}

/// `cgroupName`: one plain directory name.
pub fn check_dir_name(name: &str) -> Result<(), CgroupError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name != "."
        && name != ".."
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(CgroupError::BadName(name.chars().take(80).collect()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::super::Confinement;
    use super::*;

    const SELF: &str =
        "9:name=systemd:/\n8:pids:/slurm\n6:freezer:/slurm\n5:devices:/\n4:memory:/box/1\n3:cpuset:/\n0::/\n";

    /// A fake v1 tree: each hierarchy a directory with `cgroup.procs`.
    fn tree(controllers: &[&str]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for c in controllers {
            let own = match *c {
                "pids" | "freezer" => root.path().join(c).join("slurm"),
                "memory" => root.path().join(c).join("box/1"),
                _ => root.path().join(c),
            };
            std::fs::create_dir_all(&own).unwrap();
            std::fs::write(root.path().join(c).join("cgroup.procs"), "").unwrap();
            if *c == "cpuset" {
                std::fs::write(own.join("cpuset.cpus"), "0-7\n").unwrap();
                std::fs::write(own.join("cpuset.mems"), "0-1\n").unwrap();
            }
        }
        root
    }

    fn read(p: &Path) -> String {
        std::fs::read_to_string(p).unwrap()
    }

    #[test]
    fn the_other_gpus_are_denied_and_a_refused_rule_is_not_fatal() {
        let root = tree(&["freezer", "devices"]);
        let h = Hierarchies::set_up(root.path(), SELF, "hyperplan").unwrap();
        let fence = crate::tasks::cgroup::devices::GpuFence {
            allowed: vec![1],
            hidden: vec![3],
        };
        let limits = Limits {
            gpus: Some(&fence),
            ..Limits::default()
        };
        let made = h.create("train.7.worker-0", &limits).unwrap();
        let devices = root.path().join("devices/hyperplan/train.7.worker-0");
        assert!(made.contains(&devices), "{made:?}");
        assert_eq!(read(&devices.join("devices.deny")), "c 195:3 rwm");
        // An agent without CAP_SYS_ADMIN cannot write the rule: the task still starts.
        let refused = root.path().join("devices/hyperplan/train.7.worker-1");
        std::fs::create_dir_all(refused.join("devices.deny")).unwrap();
        assert!(h.create("train.7.worker-1", &limits).is_ok());
    }

    #[test]
    fn each_hierarchy_gets_a_parent_below_the_agent_s_own_cgroup() {
        let root = tree(&["freezer", "cpuset", "memory", "pids"]);
        let r = root.path();
        // The fake cpuset's new directory starts with empty files, as v1's does.
        std::fs::create_dir_all(r.join("cpuset/hp")).unwrap();
        std::fs::write(r.join("cpuset/hp/cpuset.cpus"), "").unwrap();
        std::fs::write(r.join("cpuset/hp/cpuset.mems"), "\n").unwrap();
        let h = Hierarchies::set_up(r, SELF, "hp").unwrap();
        let bases: Vec<&Path> = h.bases().collect();
        assert_eq!(
            bases,
            [
                r.join("freezer/slurm/hp"),
                r.join("cpuset/hp"),
                r.join("memory/box/1/hp"),
                r.join("pids/slurm/hp")
            ]
        );
        assert_eq!(read(&r.join("cpuset/hp/cpuset.cpus")), "0-7");
        assert_eq!(read(&r.join("cpuset/hp/cpuset.mems")), "0-1");

        let limits = Limits {
            cpus: "2-3",
            mems: &[1],
            memory_max: Some(1 << 20),
            pids_max: Some(32),
            gpus: None,
        };
        let paths = h.create("j.4.w-0", &limits).unwrap();
        assert_eq!(paths.len(), 4);
        assert_eq!(read(&r.join("cpuset/hp/j.4.w-0/cpuset.cpus")), "2-3");
        assert_eq!(read(&r.join("cpuset/hp/j.4.w-0/cpuset.mems")), "1");
        assert_eq!(
            read(&r.join("memory/box/1/hp/j.4.w-0/memory.limit_in_bytes")),
            "1048576"
        );
        assert_eq!(read(&r.join("pids/slurm/hp/j.4.w-0/pids.max")), "32");
        // Nothing asked: the parent's CPUs and memory nodes, no pids limit.
        h.create("j.4.w-1", &Limits::default()).unwrap();
        assert_eq!(read(&r.join("cpuset/hp/j.4.w-1/cpuset.cpus")), "0-7");
        assert_eq!(read(&r.join("pids/slurm/hp/j.4.w-1/pids.max")), "max");
        assert!(!r.join("memory/box/1/hp/j.4.w-1/memory.limit_in_bytes").exists());
    }

    #[test]
    fn freezer_is_required_the_others_are_not() {
        let root = tree(&["cpuset", "memory", "pids"]);
        let e = Hierarchies::set_up(root.path(), SELF, "hp").unwrap_err();
        assert!(e.to_string().contains("freezer"), "{e}");
        assert_eq!(
            Confinement::detect_with(root.path(), SELF, 1, "hp"),
            Confinement::Affinity
        );
        let root = tree(&["freezer"]);
        let h = Hierarchies::set_up(root.path(), SELF, "hp").unwrap();
        assert_eq!(h.bases().count(), 1);
        // A bad name or a bad own path makes nothing.
        for name in ["", "..", "a/b", "x y"] {
            assert!(Hierarchies::set_up(root.path(), SELF, name).is_err(), "{name:?}");
        }
        assert!(Hierarchies::set_up(root.path(), "6:freezer:/../x\n", "hp").is_err());
    }

    #[test]
    fn a_failed_write_removes_what_was_made() {
        let root = tree(&["freezer", "pids"]);
        let h = Hierarchies::set_up(root.path(), SELF, "hp").unwrap();
        // pids.max a directory: the write fails, the freezer cgroup made first goes again.
        std::fs::create_dir_all(root.path().join("pids/slurm/hp/j.1.w/pids.max")).unwrap();
        let e = h
            .create(
                "j.1.w",
                &Limits {
                    pids_max: Some(1),
                    ..Limits::default()
                },
            )
            .unwrap_err();
        assert!(e.to_string().contains("pids.max"), "{e}");
        assert!(!root.path().join("freezer/slurm/hp/j.1.w").exists());
    }

    /// This machine's real hierarchies, as root (CI): a task cgroup in every one, its
    /// limits as the kernel took them, removed again.
    #[test]
    fn the_real_v1_hierarchies_take_a_task() {
        let root = Path::new(super::super::CGROUP_ROOT);
        if crate::shepherd::current_euid() != 0 || !root.join("freezer/cgroup.procs").is_file() {
            eprintln!(
                "SKIPPED: needs root and a cgroup v1 freezer hierarchy at {}",
                root.display()
            );
            return;
        }
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let name = format!("hp-unit-{}", std::process::id());
        // Not through `Confinement::detect_with`: on a v2 host that would move a process.
        let h = Hierarchies::set_up(root, &own, &name).unwrap();
        let limits = Limits {
            cpus: "0",
            mems: &[],
            memory_max: Some(64 << 20),
            pids_max: Some(16),
            gpus: None,
        };
        let paths = h.create("j.1.w-0", &limits).unwrap();
        for p in &paths {
            if p.join("pids.max").exists() {
                assert_eq!(read(&p.join("pids.max")).trim(), "16");
            }
            if p.join("cpuset.cpus").exists() {
                assert_eq!(read(&p.join("cpuset.cpus")).trim(), "0");
            }
            if p.join("memory.limit_in_bytes").exists() {
                assert_eq!(read(&p.join("memory.limit_in_bytes")).trim(), (64u64 << 20).to_string());
            }
        }
        for p in paths.iter().rev() {
            std::fs::remove_dir(p).unwrap();
        }
        for b in h.bases() {
            std::fs::remove_dir(b).unwrap();
        }
    }
}
