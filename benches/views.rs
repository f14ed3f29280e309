//! What the operability views cost the planner on a 10,000-node fabric (issue 26): the
//! gauges a Prometheus scrape reads (`Planner::gauges`) and the web view's state
//! (`hyperplan_planner::web::state::state_json`, built once a second while someone
//! watches), with 2,000 jobs placed. 10,000 nodes of 128 CPUs and 8 GPUs, 25 per leaf,
//! 10 leaves per spine, 40 spines.
//!
//! A harness, not a criterion bench: it prints the lines in `benches/README.md`.
//! `cargo bench --bench views`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use hyperplan_core::PlannerConfig;
use hyperplan_core::sim::{SIM_OWNER, planner_for};
use hyperplan_core::testing::JobBuilder;
use hyperplan_shared::fattree::{self, FatTreeParams};
use hyperplan_shared::quantity::parse_resource_list;

const NODE: &str = "cpu=128,memory=1Ti,nvidia.com/gpu=8";

/// (median, max) in ms of `runs` calls of `f`.
fn time(runs: usize, mut f: impl FnMut()) -> (f64, f64) {
    let mut ms: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    (ms[runs / 2], ms[runs - 1])
}

fn main() {
    if std::env::args().skip(1).any(|a| !a.starts_with('-') && a != "views") {
        return;
    }
    let cluster = fattree::generate(&FatTreeParams {
        nodes: 10_000,
        fanout: vec![25, 10],
        node_resources: parse_resource_list(NODE).unwrap(),
        busy: 0.0,
        seed: 26,
        prefix: "node".into(),
    })
    .unwrap();
    let mut p = planner_for(&cluster, PlannerConfig::default());
    p.tick(1);
    // 2,000 jobs of 1 to 8 whole nodes: most of the cluster placed.
    for i in 0..2000u32 {
        let nodes = 1 + i % 8;
        hyperplan_core::sim::submit::submit(
            &mut p,
            JobBuilder::gang(&format!("job{i:04}"), nodes, NODE).build(),
            SIM_OWNER,
        );
    }
    let t = Instant::now();
    p.tick(2);
    let placing = t.elapsed().as_secs_f64();
    let placed = p
        .jobs()
        .iter()
        .filter(|j| j.start_time.is_some() || !j.tasks.is_empty())
        .count();
    let (g50, gmax) = time(21, || {
        std::hint::black_box(p.gauges());
    });
    let mut bytes = 0;
    let (s50, smax) = time(21, || {
        let snapshot = hyperplan_planner::web::state::snapshot(&p, "head:7400", 3, false);
        bytes = snapshot.json_for(&hyperplan_planner::web::state::Viewer::Token).len();
    });
    println!("views: 10,000 nodes, 2,000 jobs submitted, {placed} placed (in {placing:.1} s)");
    println!("views: gauges for /metrics: median {g50:.1} ms, max {gmax:.1} ms");
    println!(
        "views: web state JSON: median {s50:.1} ms, max {smax:.1} ms, {:.2} MB",
        bytes as f64 / 1e6
    );
}
