//! `[scoring] alignEnds` (issue 42): among the leaves that can hold a job, it goes
//! where it pushes the end of the running tasks out least, so leaves empty whole
//! sooner for the jobs that need a whole leaf. Bin-pack alone cannot tell two leaves
//! equally full apart; their ends can.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hyperplan_core::testing::{ClusterBuilder, JobBuilder, Rig};
use hyperplan_core::{Event, PlannerConfig};

/// Two leaves of three nodes (cpu=8), agents registered.
fn two_leaves(config: PlannerConfig) -> Rig {
    let cluster = ClusterBuilder::fat_tree(&[3, 2], 1).node_resources("cpu=8").build();
    let mut rig = Rig::new(config, cluster.nodes);
    rig.p.push(Event::StaticHyperNodes(cluster.hyper_nodes));
    rig.register_all();
    rig.tick();
    rig
}

fn one(name: &str, limit: u64) -> hyperplan_shared::JobSpec {
    JobBuilder::gang(name, 1, "cpu=8").hard(1).limit(limit).build()
}

/// Leaf 1 holds a job ending in an hour, leaf 2 one ending in ten, one node busy in
/// each; a two-hour job comes.
fn leaves_with_different_ends(config: PlannerConfig) -> Rig {
    let mut rig = two_leaves(config);
    for name in ["short", "a2", "a3"] {
        rig.run(one(name, 3_600));
    }
    rig.run(one("long", 36_000));
    for name in ["a2", "a3"] {
        rig.exit_all(name, 0);
    }
    rig.step();
    assert_eq!(rig.node_of("short", "worker-0"), "n01");
    assert_eq!(rig.node_of("long", "worker-0"), "n04");
    rig
}

#[test]
fn a_job_goes_to_the_leaf_that_stays_busy_past_its_end() {
    let mut rig = leaves_with_different_ends(PlannerConfig::default());
    rig.run(one("mid", 7_200));
    assert_eq!(
        rig.node_of("mid", "worker-0"),
        "n05",
        "beside the job that ends after it"
    );
    assert!(rig.p.violations().is_empty());
}

#[test]
fn without_aligned_ends_the_equally_full_leaves_go_by_name() {
    let config = PlannerConfig::parse("[scoring]\nalignEnds = false\n", "planner.toml").unwrap();
    let mut rig = leaves_with_different_ends(config);
    rig.run(one("mid", 7_200));
    assert_eq!(rig.node_of("mid", "worker-0"), "n02");
}

#[test]
fn align_ends_must_be_true_or_false() {
    let e = PlannerConfig::parse("[scoring]\nalignEnds = 1\n", "planner.toml").unwrap_err();
    assert!(
        e.to_string().contains("alignEnds") && e.to_string().contains("expected true or false"),
        "{e}"
    );
}
