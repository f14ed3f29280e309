//! Scheduling policy on a real workload (issue 23; see `benches/README.md`).
//!
//! Replays the first 2,000 jobs (`POLICY_JOBS` to change) of the KTH SP2 log
//! (`testdata/traces`, Parallel Workloads Archive) on 100 nodes, 10 per leaf, 5 leaves per
//! spine: one log processor = one node, `timeLimit` = the log's requested time, hard
//! topology = the lowest tier that can hold each job. Prints every figure of
//! `sim::metrics` for: greedy (`[scheduler] reservations = 0`, the walk before issue 23),
//! EASY (topology-oblivious, `sim::easy`, on the same jobs), and hyperplan with soft and
//! with hard topology.
//!
//! Run: `cargo bench --bench policy` (one core is enough: `taskset -c 0`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Instant;

use hyperplan_core::PlannerConfig;
use hyperplan_core::sim::easy::{TraceJob, easy_backfill};
use hyperplan_core::sim::metrics::{Outcome, TraceMetrics, outcomes, trace_metrics};
use hyperplan_core::sim::swf::{SwfOptions, TopologyAsk, replay};
use hyperplan_core::testing::ClusterBuilder;
use hyperplan_shared::JobSpec;

/// The daemon's allocator (`planner/src/main.rs`), so the figures are the daemon's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const KTH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/traces/KTH-SP2-1996-2.1-cln.swf");

fn config(reservations: u32) -> PlannerConfig {
    PlannerConfig::parse(&format!("[scheduler]\nreservations = {reservations}\n"), "bench").unwrap()
}

fn row(name: &str, m: &TraceMetrics, secs: f64) {
    let opt = |v: Option<f64>, pct: bool| match v {
        Some(v) if pct => format!("{:.1} %", v * 100.0),
        Some(v) => format!("{v:.2}"),
        None => "–".into(),
    };
    println!(
        "| {name} | {:.0} | {} | {} | {:.1} | {:.1} % | {} | {} | {}/{} | {secs:.1} s |",
        m.mean_wait,
        m.p95_wait,
        m.max_wait,
        m.bounded_slowdown,
        m.utilisation * 100.0,
        opt(m.leaves_per_job, false),
        opt(m.leaf_sized_in_one_leaf, true),
        m.started,
        m.jobs,
    );
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let jobs: usize = std::env::var("POLICY_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let log = hyperplan_shared::swf::load_swf_file(Path::new(KTH), Some(jobs)).unwrap();
    let cluster = ClusterBuilder::fat_tree(&[10, 5], 2).node_resources("cpu=8").build();
    let (nodes, leaf) = (cluster.nodes.len() as u32, 10);
    let mk = |topology| {
        let opts = SwfOptions {
            topology,
            ..SwfOptions::default()
        };
        replay(&log, &cluster, &opts).unwrap()
    };
    let (mut hard, mut soft) = (mk(TopologyAsk::Hard), mk(TopologyAsk::Soft));
    // `POLICY_NO_USERS`: every job one user's (no fair share: the order is by age).
    if std::env::var("POLICY_NO_USERS").is_ok() {
        for j in hard.jobs.iter_mut().chain(soft.jobs.iter_mut()) {
            j.user = None;
        }
    }
    println!(
        "KTH SP2, first {} jobs ({} replayed, {} skipped), {nodes} nodes, {leaf} per leaf, 5 leaves per spine\n",
        log.jobs.len(),
        hard.jobs.len(),
        hard.skipped.len()
    );
    println!(
        "| run | mean wait (s) | p95 wait (s) | max wait (s) | bounded slowdown | utilisation | leaves per multi-node job | leaf-sized jobs in one leaf | started | time |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let sim = |name: &str, jobs: &[JobSpec], cfg: PlannerConfig| {
        let t = Instant::now();
        let report = hyperplan_core::sim::simulate(&cluster, jobs, cfg);
        let secs = t.elapsed().as_secs_f64();
        let oc = outcomes(&report);
        let m = trace_metrics(&oc, nodes, leaf);
        row(name, &m, secs);
        if std::env::var("POLICY_CLASSES").is_ok() {
            classes(
                name,
                &oc.iter()
                    .zip(jobs)
                    .map(|(o, j)| (o.clone(), j.replicas()))
                    .collect::<Vec<_>>(),
            );
        }
        m
    };
    let greedy = sim("greedy (reservations = 0), hard", &hard.jobs, config(0));
    let trace: Vec<TraceJob> = hard
        .jobs
        .iter()
        .map(|j| TraceJob {
            submit: j.submit_time,
            nodes: j.replicas(),
            runtime: j.tasks[0].runtime.unwrap_or(0),
            limit: j.run.time_limit.unwrap_or(1),
        })
        .collect();
    let t = Instant::now();
    let starts = easy_backfill(nodes, &trace);
    let easy_secs = t.elapsed().as_secs_f64();
    let easy_outcomes: Vec<Outcome> = trace
        .iter()
        .zip(&starts)
        .map(|(j, s)| Outcome {
            submit: j.submit,
            start: *s,
            end: s.map(|s| s + j.runtime.min(j.limit.max(1))),
            nodes: j.nodes,
            leaves: None,
        })
        .collect();
    let easy = trace_metrics(&easy_outcomes, nodes, leaf);
    if std::env::var("POLICY_CLASSES").is_ok() {
        classes(
            "easy",
            &easy_outcomes.iter().map(|o| (o.clone(), o.nodes)).collect::<Vec<_>>(),
        );
    }
    row("EASY, topology-oblivious", &easy, easy_secs);
    // Experiments: `POLICY_CONFIG` is planner.toml text for the hyperplan runs.
    let ours = match std::env::var("POLICY_CONFIG") {
        Ok(text) => PlannerConfig::parse(&text, "POLICY_CONFIG").unwrap(),
        Err(_) => PlannerConfig::default(),
    };
    let soft_m = sim("hyperplan, soft", &soft.jobs, ours.clone());
    let mut unbounded = ours.clone();
    unbounded.scheduler.starvation = 0;
    sim("hyperplan, hard, no starvation bound", &hard.jobs, unbounded);
    let hard_m = sim("hyperplan, hard", &hard.jobs, ours);
    println!();
    let verdict = |name: &str, m: &TraceMetrics| {
        println!(
            "{name}: mean wait {} EASY's ({:.0} vs {:.0}), max wait {} EASY's ({} vs {})",
            if m.mean_wait <= easy.mean_wait { "≤" } else { "ABOVE" },
            m.mean_wait,
            easy.mean_wait,
            if m.max_wait <= easy.max_wait { "≤" } else { "ABOVE" },
            m.max_wait,
            easy.max_wait
        );
    };
    verdict("hyperplan hard", &hard_m);
    verdict("hyperplan soft", &soft_m);
    verdict("greedy", &greedy);
}

fn classes(name: &str, jobs: &[(Outcome, u32)]) {
    let bounds = [(1, 1), (2, 10), (11, 50), (51, 100)];
    let mut line = format!("{name}:");
    for (lo, hi) in bounds {
        let w: Vec<u64> = jobs
            .iter()
            .filter(|(_, n)| *n >= lo && *n <= hi)
            .filter_map(|(o, _)| o.start.map(|s| s - o.submit))
            .collect();
        let sum: u64 = w.iter().sum();
        line += &format!(
            " [{lo}-{hi}] n={} mean={:.0} total={}",
            w.len(),
            sum as f64 / w.len().max(1) as f64,
            sum
        );
    }
    println!("{line}");
}
