//! Stopping every task of a state directory, by the pids its shepherds wrote: what `hyperplan
//! demo` and the end-to-end tests do when they end, since shepherds leave their starter's
//! session on purpose (they outlive agent restarts) and nothing else would stop them.
//! The tasks' cgroups are emptied and removed too, and their parents when empty, and the
//! jobs' own `/tmp` and `/dev/shm` directories ([`super::jobtmp`]): nothing is left behind.

use std::path::Path;
use std::time::{Duration, Instant};

use super::cgroup::{self, TaskCgroups, kill};
use super::runner::{kill_orphaned_task, shepherd_alive, signal};
use super::scan;

/// SIGTERM to every live shepherd under `state_dir` (each passes it on to its task's
/// process group); after `grace`, SIGKILL to what is left of each task's group and to
/// its shepherd. Returns how many shepherds were running.
pub fn stop_all(state_dir: &Path, grace: Duration) -> usize {
    let shepherds: Vec<(u32, Option<u32>, std::path::PathBuf)> = scan::list(state_dir)
        .into_iter()
        .filter_map(|(_, dir)| {
            let pid = scan::read_pid(&dir)?;
            let spec = dir.spec();
            shepherd_alive(pid, &spec).then(|| (pid, scan::read_started(&dir).map(|s| s.pid), spec))
        })
        .collect();
    for (pid, _, _) in &shepherds {
        signal(*pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    let mut left = shepherds.clone();
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        left.retain(|(pid, _, spec)| shepherd_alive(*pid, spec));
    }
    for (pid, task, _) in left {
        if let Some(task) = task {
            kill_orphaned_task(task, pid);
        }
        signal(pid, libc::SIGKILL);
    }
    for (task, dir) in scan::list(state_dir) {
        let Ok(spec) = crate::shepherd::LaunchSpec::read(&dir.spec()) else {
            continue;
        };
        let paths = TaskCgroups::named_in_spec(&spec.all_cgroups(), &task.job, task.job_id, &task.task);
        kill::kill_all(&paths, Duration::from_secs(2), &mut || {});
        for path in &paths {
            cgroup::remove(path);
            if let Some(parent) = path.parent() {
                let _ = std::fs::remove_dir(parent); // only when empty: the last task's
            }
        }
    }
    super::jobtmp::remove_all(state_dir);
    shepherds.len()
}
