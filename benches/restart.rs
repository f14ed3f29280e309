//! Restart time (issue 14): a store with 10,000 live jobs (half of them running, one task
//! each on 500 nodes whose agents have not come back yet) and 50,000 ended ones; the
//! release planner is started on it and timed until it listens and until it has answered
//! a `status` (served again). A start reads only the live jobs: the ended ones are on
//! disk for `status --all`.
//!
//! `cargo bench --bench restart` (`LIVE=10000 ENDED=50000 ROUNDS=3`). Not a criterion
//! bench: it measures a process start.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{daemon, env_or};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use hyperplan_core::model::components::{JobPhase, TaskPhase, Verdict};
use hyperplan_core::model::record::JobRecord;
use hyperplan_planner::store::{Batch, Embedded};
use hyperplan_shared::taskend::{TaskEnd, TaskOutcome};

/// Writes `live` live jobs (every other one running) and `ended` ended ones.
fn fill(store: &Path, live: u64, ended: u64) {
    let spec = hyperplan_shared::parse_jobs(
        "name: x\ntasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 1, memory: 1Gi}\n    command: [sleep, '600']\n",
        Path::new("job.yaml"),
    )
    .unwrap()
    .remove(0);
    let s = Embedded::open(store).unwrap();
    let mut batch = Batch::default();
    for id in 1..=live + ended {
        let mut spec = spec.clone();
        spec.name = format!("job-{id}");
        spec.submit_time = 1_700_000_000;
        let mut rec = JobRecord::submitted(id, "bench", spec);
        if id > live {
            rec.state.phase = JobPhase::Finished;
            rec.state.verdict = Some(Verdict::Completed);
            rec.state.end_time = Some(1_700_000_100);
            rec.state.exit_code = Some(0);
            let t = &mut rec.tasks[0];
            t.phase = TaskPhase::Finished;
            t.node = Some(format!("n{}", id % 500));
            t.end = Some(TaskEnd {
                outcome: TaskOutcome::Exited,
                exit_code: Some(0),
                end_time_ms: 1_700_000_100_000,
                ..TaskEnd::default()
            });
        } else if id % 2 == 0 {
            rec.state.phase = JobPhase::Running;
            rec.state.task_started = true;
            rec.state.start_time = Some(1_700_000_001);
            let t = &mut rec.tasks[0];
            t.phase = TaskPhase::Running;
            t.node = Some(format!("n{}", id % 500));
            t.rank = Some(0);
            t.pid = Some(1000 + id as u32);
            t.start_ms = Some(1_700_000_001_000);
        }
        batch.jobs.push(rec.persist().unwrap());
        if batch.jobs.len() == 5000 {
            s.commit(&std::mem::take(&mut batch)).unwrap();
        }
    }
    batch.next_job_id = Some(live + ended + 1);
    s.commit(&batch).unwrap();
}

fn main() {
    let live = env_or("LIVE", 10_000);
    let ended = env_or("ENDED", 50_000);
    let rounds = env_or("ROUNDS", 3);
    let planner_bin = daemon("hyperplan-planner", "hyperplan-planner");
    let (dir, certs, cli_bin) = common::bench_dir();
    let store = dir.path().join("state.redb");
    let t = Instant::now();
    fill(&store, live, ended);
    let size = std::fs::metadata(&store).unwrap().len();
    println!(
        "store: {live} live + {ended} ended jobs, {:.1} MB, written in {:.1} s",
        size as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    let config = dir.path().join("planner.toml");
    std::fs::write(&config, "[limits]\nmaxJobsPerUser = 1000000\n").unwrap();
    for round in 1..=rounds {
        let started = Instant::now();
        let mut planner = common::planner(&planner_bin, &certs, &config, &store)
            .env("RUST_LOG", "warn")
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let addr = common::listening(&mut planner);
        let listening = started.elapsed();
        let out = Command::new(&cli_bin)
            .args(["status", "job-2", "--output", "json"])
            .env("HYPERPLAN_PLANNER", &addr)
            .env("HYPERPLAN_CERT_DIR", &certs)
            .env("HYPERPLAN_USER", "bench")
            .output()
            .unwrap();
        let served = started.elapsed();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["jobs"][0]["status"], "running");
        println!(
            "round {round}: listening after {:.0} ms, first status answered after {:.0} ms",
            listening.as_secs_f64() * 1e3,
            served.as_secs_f64() * 1e3
        );
        let _ = Command::new("kill").args(["-TERM", &planner.id().to_string()]).status();
        let _ = planner.wait();
    }
}
