//! `networkTopology.softAfter` (Slurm's `--switches=N@TIME`, issue 39): a job with a hard
//! topology waits for it that long, then is placed as soft; before that it stays inside
//! its limit. Virtual clock; invariants are checked after every tick.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hyperplan_core::PlannerConfig;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, Rig};
use hyperplan_shared::report::JobStatus;

#[test]
fn a_hard_job_waits_its_time_then_spans_leaves() {
    // Two leaves of two 8-CPU nodes, one node of each up: no leaf holds two nodes.
    let cluster = ClusterBuilder::fat_tree(&[2, 2], 1).node_resources("cpu=8").build();
    let mut rig = Rig::new(PlannerConfig::default(), cluster.nodes).persisting();
    rig.p.push(hyperplan_core::Event::StaticHyperNodes(cluster.hyper_nodes));
    let names: Vec<String> = rig.nodes.iter().map(|n| n.name.clone()).collect();
    rig.register(&names[0]);
    rig.register(&names[2]);
    rig.tick();
    let submitted = rig.now / 1000;
    rig.submit_now(
        vec![
            JobBuilder::gang("pair", 2, "cpu=8").hard(1).soft_after(120).build(),
            JobBuilder::gang("control", 2, "cpu=8").hard(1).build(),
        ],
        "alice",
    )
    .unwrap();
    while rig.now / 1000 < submitted + 119 {
        rig.step();
        assert_ne!(rig.job("pair").status, JobStatus::Placed, "at {} s", rig.now / 1000);
    }
    assert!(rig.p.next_deadline().is_some_and(|d| d <= (submitted + 120) * 1000));
    rig.step();
    rig.step();
    let pair = rig.job("pair");
    assert_eq!(pair.status, JobStatus::Placed, "{:?}", pair.reason);
    let mut nodes: Vec<String> = rig.ranks("pair").into_iter().map(|(_, n)| n).collect();
    nodes.sort();
    assert_eq!(nodes, [names[0].clone(), names[2].clone()], "across the two leaves");
    assert_ne!(
        rig.job("control").status,
        JobStatus::Placed,
        "without softAfter it stays hard"
    );
}
