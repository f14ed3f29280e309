//! Issue 13's shepherd memory target (≤ 2 MB each): starts `SHEPHERDS` real shepherds
//! (`hyperplan-agent shepherd --spec FILE`, this build's binary), each the parent of a
//! `sleep`, and reads every shepherd's `/proc/PID/smaps_rollup` once all tasks run.
//!
//! What a shepherd costs the node is its own pages: anonymous memory (heap, stack) and the
//! file pages only it maps; the binary's code pages are shared by every shepherd (and
//! the agent), so they are counted once, spread over all of them — that is PSS. The
//! harness prints RSS (what `ps` shows, shared pages counted in full in each), PSS and
//! private memory per shepherd. Every process it starts is killed by pid at the end.
//!
//! `cargo bench -p hyperplan-agent --bench shepherd_memory`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_hyperplan-agent");
const SHEPHERDS: usize = 32;

/// kB fields of smaps_rollup.
#[derive(Default, Clone, Copy)]
struct Mem {
    rss: u64,
    pss: u64,
    private: u64,
    anon: u64,
}

fn rollup(pid: u32) -> Option<Mem> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let field = |key: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    Some(Mem {
        rss: field("Rss:"),
        pss: field("Pss:"),
        private: field("Private_Clean:") + field("Private_Dirty:"),
        anon: field("Anonymous:"),
    })
}

fn me() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn kill(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// Kills what it holds by pid when dropped, a panic included: nothing is left running.
struct Reaper(Vec<std::process::Child>, Vec<u32>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for p in self.0.iter().map(std::process::Child::id).chain(self.1.iter().copied()) {
            kill(p);
        }
        for c in &mut self.0 {
            let _ = c.wait();
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list`: nothing to list
    }
    let dir = tempfile::tempdir().unwrap();
    let user = me();
    let mut task_dirs: Vec<PathBuf> = Vec::new();
    let mut reaper = Reaper(Vec::new(), Vec::new());
    for i in 0..SHEPHERDS {
        let task_dir = dir.path().join(format!("state/tasks/mem.1/worker-{i}"));
        std::fs::create_dir_all(&task_dir).unwrap();
        let spec = serde_json::json!({
            "job": "mem", "jobId": 1, "task": format!("worker-{i}"), "rank": i,
            "argv": ["sleep", "600"],
            "env": {"PATH": "/usr/local/bin:/usr/bin:/bin"},
            "workingDir": dir.path(),
            "stdout": dir.path().join(format!("out-{i}.txt")),
            "stderr": dir.path().join(format!("out-{i}.txt")),
            "user": user, "allowRoot": user == "root",
            "cpus": "", "numaNodes": [], "memoryPolicy": "none",
            "stateDir": dir.path().join("state"),
        });
        let path = task_dir.join("spec.json");
        std::fs::write(&path, serde_json::to_vec(&spec).unwrap()).unwrap();
        // Started from here the shepherd is no group leader, so it leaves this session
        // without forking: the child is the shepherd (reaped after the kill below).
        let child = Command::new(BIN)
            .args(["shepherd", "--spec"])
            .arg(&path)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        reaper.0.push(child);
        task_dirs.push(task_dir);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut ready = Vec::new();
    while ready.len() < SHEPHERDS && Instant::now() < deadline {
        ready = task_dirs.iter().filter(|d| d.join("started.json").exists()).collect();
        std::thread::sleep(Duration::from_millis(20));
    }
    let shepherds: Vec<u32> = task_dirs.iter().filter_map(|d| read_pid(&d.join("pid"))).collect();
    let tasks: Vec<u32> = task_dirs
        .iter()
        .filter_map(|d| std::fs::read_to_string(d.join("started.json")).ok())
        .filter_map(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .filter_map(|v| v["pid"].as_u64().map(|p| p as u32))
        .collect();
    reaper.1.extend(shepherds.iter().chain(&tasks));
    let mems: Vec<Mem> = shepherds.iter().filter_map(|&p| rollup(p)).collect();
    drop(reaper);
    assert_eq!(
        mems.len(),
        SHEPHERDS,
        "every shepherd ran ({} of {SHEPHERDS})",
        mems.len()
    );
    let n = mems.len() as u64;
    let sum = mems.iter().fold(Mem::default(), |a, m| Mem {
        rss: a.rss + m.rss,
        pss: a.pss + m.pss,
        private: a.private + m.private,
        anon: a.anon + m.anon,
    });
    let max_pss = mems.iter().map(|m| m.pss).max().unwrap_or(0);
    println!("shepherd memory, {n} shepherds each running `sleep 600` ({BIN}):");
    println!(
        "  RSS     {:>6} kB each (mean; shared code pages counted in every one)",
        sum.rss / n
    );
    println!(
        "  PSS     {:>6} kB each (mean; max {max_pss} kB): what each costs the node",
        sum.pss / n
    );
    println!(
        "  private {:>6} kB each (mean), of which anonymous {} kB",
        sum.private / n,
        sum.anon / n
    );
}
