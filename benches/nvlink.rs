//! NVLink domains and segments (issue 27), two measurements of the core's tick:
//!
//! - `discovery`: 144 agents' registrations (8 NVL72 racks of 18 GB200 trays, two racks
//!   per leaf, two leaves per spine) and the one tick that makes their 8 NVLink
//!   HyperNodes, grafted under the leaves; then the same at 1,152 trays (64 racks).
//! - `segments`: a 1,152-tray GB200 cluster (64 racks, 8 per leaf, 8 leaves under one
//!   spine) with 30 % of the trays busy (per rack 0 to 11 busy trays, fixed-seed
//!   xorshift), one 64-task job of 4 GPUs a task with `segments: [{size: 16, tierName:
//!   nvlink}]`, and the tick that places it. Checked each time: every segment in one
//!   rack, 4 racks in all (the fewest: no rack holds two segments), ranks consecutive.
//!
//! A harness, not a criterion bench: it prints the figures in `benches/README.md`.
//! `cargo bench --bench nvlink` (`NVLINK_REPS`, default 20).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use hyperplan_core::PlannerConfig;
use hyperplan_core::sim::{SIM_OWNER, planner_for};
use hyperplan_core::testing::nvl::TRAYS_PER_RACK;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder};
use hyperplan_shared::ClusterSpec;
use hyperplan_shared::report::JobStatus;

fn reps() -> usize {
    std::env::var("NVLINK_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

fn summary(mut times: Vec<Duration>) -> String {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    format!(
        "median {:.2} ms, p95 {:.2} ms, max {:.2} ms ({} runs)",
        ms(times[times.len() / 2]),
        ms(times[(times.len() * 95 / 100).min(times.len() - 1)]),
        ms(times[times.len() - 1]),
        times.len()
    )
}

/// Registrations of every tray, then the timed tick that makes the NVLink HyperNodes.
fn discovery(racks: u32, per_leaf: u32, per_spine: u32) -> Duration {
    let cluster = ClusterBuilder::nvl72(racks, per_leaf, per_spine).build();
    let mut p = planner_for(&cluster, PlannerConfig::default());
    let t0 = Instant::now();
    p.tick(1);
    let took = t0.elapsed();
    let domains = p.index().hns.iter().filter(|h| h.name.starts_with("nvl-")).count();
    assert_eq!(domains, racks as usize, "one HyperNode per rack");
    assert_eq!(p.index().hn("leaf-1").unwrap().1.tier, 2, "grafted under the leaves");
    took
}

/// xorshift64*, fixed seed: the same busy trays every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// 64 racks, 8 per leaf, one spine; per rack 0 to 11 busy trays at random places.
fn gb200_cluster() -> (ClusterSpec, u32) {
    let mut b = ClusterBuilder::nvl72(64, 8, 8);
    let mut rng = Rng(0x6b8d_7c1e);
    let mut busy = 0;
    for rack in 0..64u32 {
        let count = (rng.next() % 12) as u32;
        let mut trays: BTreeSet<u32> = BTreeSet::new();
        while (trays.len() as u32) < count {
            trays.insert((rng.next() % u64::from(TRAYS_PER_RACK)) as u32);
        }
        for t in trays {
            b = b.busy((rack * TRAYS_PER_RACK + t) as usize);
            busy += 1;
        }
    }
    (b.build(), busy)
}

/// The timed tick placing the 64-task job; checks where its segments went.
fn segments(cluster: &ClusterSpec) -> Duration {
    let mut p = planner_for(cluster, PlannerConfig::default());
    p.tick(1);
    p.tick(2);
    let job = JobBuilder::gang("train", 64, "cpu=32,nvidia.com/gpu=4")
        .segment(16, "nvlink")
        .build();
    hyperplan_core::sim::submit::submit(&mut p, job, SIM_OWNER);
    let t0 = Instant::now();
    p.tick(3);
    let took = t0.elapsed();
    let j = p.job("train").unwrap();
    assert_eq!(j.status, JobStatus::Placed, "{:?}", j.reason);
    let mut by_segment: BTreeMap<String, (BTreeSet<String>, Vec<u32>)> = BTreeMap::new();
    for t in &j.tasks {
        let e = by_segment.entry(t.sub_job.clone()).or_default();
        e.0.insert(t.node.as_deref().unwrap()[..3].to_string());
        e.1.push(t.rank.unwrap());
    }
    let mut racks = BTreeSet::new();
    for (k, (_, (in_racks, ranks))) in by_segment.iter_mut().enumerate() {
        assert_eq!(in_racks.len(), 1, "a segment in one rack");
        ranks.sort_unstable();
        assert_eq!(*ranks, ((k as u32 * 16)..(k as u32 + 1) * 16).collect::<Vec<_>>());
        racks.extend(in_racks.iter().cloned());
    }
    assert_eq!(racks.len(), 4, "the fewest racks");
    took
}

fn main() {
    let reps = reps();
    for (racks, per_leaf, per_spine) in [(8u32, 2u32, 2u32), (64, 8, 8)] {
        let times: Vec<Duration> = (0..reps).map(|_| discovery(racks, per_leaf, per_spine)).collect();
        println!(
            "discovery: {} agents, {racks} NVL72 racks, NVLink HyperNodes in one tick: {}",
            racks * TRAYS_PER_RACK,
            summary(times)
        );
    }
    let (cluster, busy) = gb200_cluster();
    let fit = (0..64u32)
        .filter(|r| {
            let prefix = format!("r{:02}", r + 1);
            cluster
                .nodes
                .iter()
                .filter(|n| n.name.starts_with(&prefix) && n.used.0.is_empty())
                .count()
                >= 16
        })
        .count();
    let times: Vec<Duration> = (0..reps).map(|_| segments(&cluster)).collect();
    println!(
        "segments: 64 tasks in segments of 16 on {} trays ({busy} busy, {:.0} %; {fit} racks with 16 free): placing tick {}",
        cluster.nodes.len(),
        100.0 * f64::from(busy) / cluster.nodes.len() as f64,
        summary(times)
    );
}
