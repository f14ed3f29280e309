//! GPUs confined to their tasks, on this machine's real kernel (issue 27): a task's
//! cgroups made as the agent makes them, with a fence for a node of two GPUs (minors 0
//! and 1, device nodes made with mknod: no GPU or driver is needed, the check comes
//! before the driver's). A process in the task's cgroup opening the other GPU's node is
//! refused (`EPERM`); opening its own reaches the driver, which is not there (`ENXIO`).
//!
//! - cgroup v1 `devices.deny` (the hierarchy this machine mounts);
//! - the eBPF device program on the hybrid layout's unified cgroup, where the kernel
//!   has `CONFIG_CGROUP_BPF`.
//!
//! Also: no swap beyond the task's memory (`memory.memsw.limit_in_bytes`) where v1
//! accounts swap.
//!
//! Needs root (mknod, cgroups, bpf); skips with the reason otherwise.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use hyperplan_agent::tasks::cgroup::devices::GpuFence;
use hyperplan_agent::tasks::cgroup::v1::{Hierarchies, remove_all};
use hyperplan_agent::tasks::cgroup::{CGROUP_ROOT, Limits};

fn skip(why: &str) {
    eprintln!("skipped: {why}");
}

/// `cat`s `node` from a shell that first joins `cgroup` (writes itself into its
/// `cgroup.procs`); returns cat's standard error.
fn open_from(cgroup: &Path, node: &Path) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > '{}/cgroup.procs' && exec cat '{}'",
            cgroup.display(),
            node.display()
        ))
        .output()
        .unwrap();
    assert!(!out.status.success(), "a device node without a driver cannot be read");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_task_cannot_open_the_other_gpu_of_its_node() {
    if !nix_is_root() {
        return skip("needs root (mknod, cgroups, bpf)");
    }
    let root = Path::new(CGROUP_ROOT);
    if !root.join("devices/cgroup.procs").is_file() && !root.join("unified/cgroup.procs").is_file() {
        return skip("neither a cgroup v1 devices hierarchy nor a hybrid unified mount here");
    }
    let dir = tempfile::tempdir().unwrap();
    let (mine, other) = (dir.path().join("nvidia0"), dir.path().join("nvidia1"));
    for (path, minor) in [(&mine, "0"), (&other, "1")] {
        let ok = Command::new("mknod")
            .arg(path)
            .args(["c", "195", minor])
            .status()
            .unwrap()
            .success();
        if !ok {
            return skip("mknod refused (a nodev mount?)");
        }
    }
    let proc_self_cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let name = format!("hyperplan-gpu-test-{}", std::process::id());
    let h = match Hierarchies::set_up(root, &proc_self_cgroup, &name) {
        Ok(h) => h,
        Err(e) => return skip(&format!("no cgroup v1 hierarchies for tasks: {e}")),
    };
    let fence = GpuFence {
        allowed: vec![0],
        hidden: vec![1],
    };
    let limits = Limits {
        gpus: Some(&fence),
        memory_max: Some(256 << 20),
        ..Limits::default()
    };
    // The shells exit at once: the cgroups are empty and go, whatever the asserts say.
    let _cleanup = Cleanup {
        proc_self_cgroup: proc_self_cgroup.clone(),
        name: name.clone(),
    };
    let made: Vec<PathBuf> = h.create("train.7.worker-0", &limits).unwrap();
    {
        // No swap beyond its memory, where the kernel accounts swap.
        if let Some(memory) = made.iter().find(|p| p.starts_with(root.join("memory"))) {
            let memsw = memory.join("memory.memsw.limit_in_bytes");
            if memsw.is_file() {
                assert_eq!(std::fs::read_to_string(&memsw).unwrap().trim(), "268435456");
            }
        }
        let mut checked = 0;
        if let Some(devices) = made.iter().find(|p| p.starts_with(root.join("devices"))) {
            assert!(
                open_from(devices, &other).contains("Operation not permitted"),
                "v1 devices.deny"
            );
            assert!(
                open_from(devices, &mine).contains("No such device"),
                "its own GPU reaches the driver"
            );
            checked += 1;
        }
        if let Some(unified) = made.iter().find(|p| p.starts_with(root.join("unified"))) {
            let refused = open_from(unified, &other);
            if refused.contains("Operation not permitted") {
                assert!(
                    open_from(unified, &mine).contains("No such device"),
                    "the program lets its own GPU through"
                );
                checked += 1;
            } else {
                skip(&format!(
                    "the eBPF device program did not take on this kernel (the agent warns and keeps v1's): {refused}"
                ));
            }
        }
        eprintln!("checked {checked} way(s): {made:?}");
        assert!(checked > 0, "no devices hierarchy or unified cgroup was made: {made:?}");
    }
}

/// Removes the test's cgroups when dropped.
struct Cleanup {
    proc_self_cgroup: String,
    name: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        remove_all(Path::new(CGROUP_ROOT), &self.proc_self_cgroup, &self.name);
    }
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1).map(|e| e == "0"))
        .unwrap_or(false)
}
