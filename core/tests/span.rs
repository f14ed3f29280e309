//! Leaf-minimal placement (issue 11): a topology job goes to the lowest tier that can hold
//! it and, there, to the HyperNode whose placement spans the fewest leaves. Checked
//! against a brute-force optimum on random small fat trees with random busy patterns,
//! and on the 2,048-node fragmented tree of the issue (16 nodes per leaf, 8 leaves per
//! spine, one top, ~46 % of the nodes busy).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hyperplan_core::PlannerConfig;
use hyperplan_core::config::SpanMode;
use hyperplan_core::testing::{ClusterBuilder, FatTreeView, JobBuilder, leaves_spanned, run};
use hyperplan_shared::ClusterSpec;
use hyperplan_shared::fattree::{self, FatTreeParams};
use hyperplan_shared::quantity::parse_resource_list;
use hyperplan_shared::report::JobStatus;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Random fat trees (up to 12 leaves), random CPU use per node, one soft job of tasks
    /// of 2, 4 or 8 of a node's 8 CPUs: the leaves spanned are the brute-force optimum, in
    /// the lowest tier that can hold the job; and a job that nothing holds waits.
    #[test]
    fn soft_jobs_span_the_fewest_leaves(
        leaf in 2u32..5,
        per_spine in 2u32..4,
        spines in 1u32..5,
        used in proptest::collection::vec(prop_oneof![Just(0u32), Just(2), Just(4), Just(6), Just(8)], 48),
        cpu in prop_oneof![Just(2u32), Just(4), Just(8)],
        replicas in 1u32..24,
    ) {
        let mut fanout = vec![leaf, per_spine];
        if spines > 1 {
            fanout.push(spines);
        }
        let mut b = ClusterBuilder::fat_tree(&fanout, 1).node_resources("cpu=8");
        let n = (leaf * per_spine * spines) as usize;
        prop_assume!(n / leaf as usize <= 12);
        for (i, u) in used.iter().take(n).enumerate() {
            if *u > 0 {
                b = b.used(i, &format!("cpu={u}"));
            }
        }
        let cluster = b.build();
        let t = FatTreeView::new(&cluster);
        let room = t.room(|name| {
            let i = cluster.nodes.iter().position(|x| x.name == name).unwrap_or(0);
            u64::from((8 - used[i]) / cpu)
        });
        let job = JobBuilder::gang("job", replicas, &format!("cpu={cpu}")).soft().build();
        let report = run(&cluster, &[job], PlannerConfig::default());
        let j = &report.jobs[0];
        match t.optimum(&room, u64::from(replicas), true) {
            None => prop_assert_ne!(j.status, JobStatus::Placed),
            Some((tier, leaves)) => {
                prop_assert_eq!(j.status, JobStatus::Placed);
                prop_assert_eq!(t.placed_tier(j), tier, "lowest tier first");
                prop_assert_eq!(leaves_spanned(j), leaves, "fewest leaves");
            }
        }
    }
}

/// `hyperplan cluster generate fat-tree --nodes N --fanout 16,8 --busy 0.46 --seed S`.
fn fragmented(nodes: u32, seed: u64) -> ClusterSpec {
    fattree::generate(&FatTreeParams {
        nodes,
        fanout: vec![16, 8],
        node_resources: parse_resource_list("cpu=128,memory=1Ti,nvidia.com/gpu=8").expect("resources"),
        busy: 0.46,
        seed,
        prefix: "node".into(),
    })
    .expect("fat tree")
}

fn whole_node_job(nodes: u32) -> hyperplan_shared::JobSpec {
    JobBuilder::gang(&format!("job-{nodes}"), nodes, "cpu=128,memory=1Ti,nvidia.com/gpu=8")
        .soft()
        .build()
}

/// The case: 32-, 64- and 512-node whole-node soft jobs on the fragmented
/// 2,048-node tree span exactly the optimum number of leaves at the lowest tier; Volcano's
/// order (`span = "volcano"`) spans more on the same tree.
#[test]
fn fragmented_2048_node_tree() {
    let cluster = fragmented(2048, 46);
    let t = FatTreeView::new(&cluster);
    let room = t.free_nodes(&cluster);
    let mut volcano = PlannerConfig::default();
    volcano.scoring.span = SpanMode::Volcano;
    let mut worse = 0;
    for nodes in [8u32, 32, 64, 512] {
        let job = whole_node_job(nodes);
        let (tier, best) = t.optimum(&room, u64::from(nodes), false).expect("fits");
        let report = run(&cluster, std::slice::from_ref(&job), PlannerConfig::default());
        let j = &report.jobs[0];
        assert_eq!(j.status, JobStatus::Placed, "{nodes} nodes");
        assert_eq!((t.placed_tier(j), leaves_spanned(j)), (tier, best), "{nodes} nodes");
        let v = run(&cluster, &[job], volcano.clone());
        assert!(leaves_spanned(&v.jobs[0]) >= best);
        worse += usize::from(leaves_spanned(&v.jobs[0]) > best);
    }
    assert!(worse > 0, "Volcano's order spans more leaves somewhere on this tree");
}

/// Hard tier limits still bind: a job that fits only under the top is never placed with
/// `highestTierAllowed: 1`, and a tier-1 job takes the leaf with the least room left.
#[test]
fn hard_leaf_job_takes_the_tightest_leaf() {
    // leaf-1: 3 free of 4, leaf-2: 4 free, leaf-3: 2 free, leaf-4: 4 free.
    let cluster = ClusterBuilder::fat_tree(&[4, 2, 2], 1)
        .node_resources("cpu=8")
        .busy(0)
        .busy(8)
        .busy(9)
        .build();
    let report = run(
        &cluster,
        &[
            JobBuilder::gang("two", 2, "cpu=8").hard(1).build(),
            JobBuilder::gang("five", 5, "cpu=8").hard(1).build(),
        ],
        PlannerConfig::default(),
    );
    let two = &report.jobs.iter().find(|j| j.name == "two").expect("two");
    assert_eq!(two.allocated_hyper_node.as_deref(), Some("leaf-3"));
    let five = &report.jobs.iter().find(|j| j.name == "five").expect("five");
    assert_ne!(five.status, JobStatus::Placed);
}

/// A partitioned job: the partition goes where it spans the fewest leaves (spine-2: a
/// free leaf and a 3-free leaf), not to the fuller spine-1 where every leaf has 2 free,
/// which Volcano's bin-pack order takes.
#[test]
fn partitions_span_the_fewest_leaves() {
    // spine-1: leaf-1..3 with 2 free each; spine-2: leaf-4 4 free, leaf-5 3, leaf-6 none.
    let mut b = ClusterBuilder::fat_tree(&[4, 3, 2], 1).node_resources("cpu=8");
    for i in [0, 1, 4, 5, 8, 9, 16, 20, 21, 22, 23] {
        b = b.busy(i);
    }
    let cluster = b.build();
    let job = JobBuilder::gang("part", 5, "cpu=8")
        .soft()
        .partitions(1, 5, 1, Some(2))
        .build();
    let minimal = run(&cluster, std::slice::from_ref(&job), PlannerConfig::default());
    let mut volcano = PlannerConfig::default();
    volcano.scoring.span = SpanMode::Volcano;
    let v = run(&cluster, &[job], volcano);
    assert_eq!(minimal.jobs[0].status, JobStatus::Placed);
    assert_eq!(leaves_spanned(&minimal.jobs[0]), 2);
    assert!(
        minimal.jobs[0]
            .tasks
            .iter()
            .all(|t| t.hyper_nodes.get(1).map(String::as_str) == Some("spine-2")),
        "{:?}",
        minimal.jobs[0].tasks
    );
    assert_eq!(leaves_spanned(&v.jobs[0]), 3, "Volcano's order: the fuller spine-1");
}
