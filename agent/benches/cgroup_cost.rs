//! What a task's cgroups cost its launch and its end (issue 20), on this machine's real
//! hierarchies (v1 freezer, cpuset, memory and pids, and the hybrid unified mount, or v2):
//! for `TASKS` tasks, the time to make each task's cgroups with its limits (what the agent
//! adds to a launch), and the time to kill and remove them once a process is in them (the
//! freeze, kill, thaw or `cgroup.kill` of a task's end, then `rmdir`).
//!
//! Needs root; elsewhere it says why and measures nothing. Everything it makes is removed.
//!
//! `cargo bench -p hyperplan-agent --bench cgroup_cost` (`TASKS=256` for more)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hyperplan_agent::tasks::cgroup::{CGROUP_ROOT, Confinement, Limits, kill, remove, v1};

fn main() {
    let tasks: usize = std::env::var("TASKS").ok().and_then(|t| t.parse().ok()).unwrap_or(64);
    if hyperplan_agent::shepherd::current_euid() != 0 {
        println!("cgroup_cost: needs root (it makes cgroups); nothing measured");
        return;
    }
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let name = format!("hp-bench-{}", std::process::id());
    let root = Path::new(CGROUP_ROOT);
    // Pinning on: v2 when delegated here, else v1 (a v2 host moves this process into a leaf).
    let Confinement::Cgroup(cgroups) = Confinement::detect_with(root, &own, std::process::id(), &name) else {
        println!("cgroup_cost: no usable cgroups under {CGROUP_ROOT}; nothing measured");
        return;
    };
    let limits = Limits {
        cpus: "0",
        mems: &[],
        memory_max: Some(256 << 20),
        pids_max: Some(4096),
        gpus: None,
    };
    let mut create = Vec::with_capacity(tasks);
    let mut release = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let task = format!("w-{i}");
        let start = Instant::now();
        let paths = cgroups.create("bench", 1u64.into(), &task, &limits).unwrap();
        create.push(start.elapsed());
        // One process in them, as a task would be.
        let mut child = Command::new("sleep").arg("60").stdout(Stdio::null()).spawn().unwrap();
        for p in &paths {
            std::fs::write(p.join("cgroup.procs"), child.id().to_string()).unwrap();
        }
        let start = Instant::now();
        let left = kill::kill_all(&paths, Duration::from_secs(5), &mut || {
            let _ = child.try_wait();
        });
        for p in &paths {
            remove(p);
        }
        release.push(start.elapsed());
        assert_eq!(left, 0);
        let _ = child.wait();
    }
    v1::remove_all(root, &own, &name);
    report("make a task's cgroups", &mut create);
    report("kill and remove them", &mut release);
}

fn report(what: &str, times: &mut [Duration]) {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mean = times.iter().map(|&d| ms(d)).sum::<f64>() / times.len() as f64;
    println!(
        "{what}: {} tasks, mean {:.2} ms, median {:.2} ms, p90 {:.2} ms, max {:.2} ms",
        times.len(),
        mean,
        ms(times[times.len() / 2]),
        ms(times[times.len() * 9 / 10]),
        ms(times[times.len() - 1])
    );
}
