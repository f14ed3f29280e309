//! Scenario tests for `segments` (issue 27): groups of consecutive ranks, each inside one
//! HyperNode of its tier, on NVL72 racks the nodes discovered themselves. One layer keeps
//! each 16-rank segment in a rack with 16 free trays and its ranks consecutive; two layers
//! nest (16 per rack, 8 per partition); a partial tail segment; a segment that fits
//! nowhere says which and where the best one stands. Invariants checked after every tick.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use hyperplan_core::PlannerConfig;
use hyperplan_core::model::reason::{NoFit, Reason};
use hyperplan_core::testing::nvl::{gpu_in, rack_uuid};
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, run, run_with_reasons};
use hyperplan_shared::report::{JobReport, JobStatus, Report};

fn job<'a>(r: &'a Report, name: &str) -> &'a JobReport {
    r.jobs.iter().find(|j| j.name == name).unwrap()
}

/// Per segment (the task's innermost sub-job): its racks and its ranks, sorted.
fn segments(r: &Report, name: &str) -> BTreeMap<String, (BTreeSet<String>, Vec<u32>)> {
    let mut out: BTreeMap<String, (BTreeSet<String>, Vec<u32>)> = BTreeMap::new();
    for t in &job(r, name).tasks {
        let e = out.entry(t.sub_job.clone()).or_default();
        e.0.insert(t.node.as_ref().unwrap()[..3].to_string());
        e.1.push(t.rank.unwrap());
        e.1.sort_unstable();
    }
    out
}

/// Racks `r01`, `r02` have only 15 free trays (three busy): no 16-rank segment fits;
/// `r05` has exactly 16 free, the tightest fit, so the first segment goes there, after
/// racks that later segments take in topology order.
fn cluster_with_two_short_racks() -> hyperplan_shared::ClusterSpec {
    with_busy(&[
        "r01t01", "r01t02", "r01t03", "r02t04", "r02t05", "r02t06", "r05t17", "r05t18",
    ])
}

/// 8 racks, two per leaf, two leaves per spine, the trays named busy.
fn with_busy(busy: &[&str]) -> hyperplan_shared::ClusterSpec {
    let mut b = ClusterBuilder::nvl72(8, 2, 2);
    let names: Vec<String> = b.clone().build().nodes.iter().map(|n| n.name.clone()).collect();
    for (i, n) in names.iter().enumerate() {
        if busy.contains(&n.as_str()) {
            b = b.busy(i);
        }
    }
    b.build()
}

#[test]
fn each_segment_of_16_takes_a_rack_with_room_and_holds_consecutive_ranks() {
    let cluster = cluster_with_two_short_racks();
    let jobs = vec![
        JobBuilder::gang("train", 64, "cpu=32,nvidia.com/gpu=4")
            .segment(16, "nvlink")
            .build(),
    ];
    let r = run(&cluster, &jobs, PlannerConfig::default());
    assert_eq!(
        job(&r, "train").status,
        JobStatus::Placed,
        "{:?}",
        job(&r, "train").reason
    );
    let segs = segments(&r, "train");
    assert_eq!(segs.len(), 4, "{segs:?}");
    let mut racks = BTreeSet::new();
    for (k, (id, (in_racks, ranks))) in segs.iter().enumerate() {
        assert_eq!(id, &format!("train/segment-{k}"));
        assert_eq!(in_racks.len(), 1, "{id}: {in_racks:?}");
        assert_eq!(
            *ranks,
            ((k as u32 * 16)..(k as u32 + 1) * 16).collect::<Vec<_>>(),
            "{id}"
        );
        racks.extend(in_racks.iter().cloned());
    }
    assert_eq!(racks.len(), 4, "one rack per segment: {racks:?}");
    assert!(!racks.contains("r01") && !racks.contains("r02"), "{racks:?}");
    // The tightest rack took the first segment: ranks follow segments, not racks.
    assert_eq!(segs["train/segment-0"].0, ["r05".to_string()].into(), "{segs:?}");
}

#[test]
fn two_layers_nest_sixteen_per_rack_and_eight_per_partition() {
    // Every rack split in two partitions of 9 trays.
    let mut b = ClusterBuilder::nvl72(4, 2, 0);
    for r in 1..=4 {
        for t in 10..=18 {
            b = b.node_fabric(
                &format!("r{r:02}t{t:02}"),
                (0..4).map(|i| gpu_in(&rack_uuid(r), 2, i)).collect(),
            );
        }
    }
    let cluster = b.build();
    let jobs = vec![
        JobBuilder::gang("nested", 32, "cpu=32,nvidia.com/gpu=4")
            .segment(16, "nvlink")
            .segment(8, "nvlink-partition")
            .build(),
    ];
    let r = run(&cluster, &jobs, PlannerConfig::default());
    assert_eq!(
        job(&r, "nested").status,
        JobStatus::Placed,
        "{:?}",
        job(&r, "nested").reason
    );
    let segs = segments(&r, "nested");
    assert_eq!(
        segs.keys().cloned().collect::<Vec<_>>(),
        [
            "nested/segment-0.0",
            "nested/segment-0.1",
            "nested/segment-1.0",
            "nested/segment-1.1"
        ]
    );
    // Each inner segment in one partition (trays 1-9 or 10-18 of one rack), each outer
    // one in one rack.
    let j = job(&r, "nested");
    let mut outer: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for t in &j.tasks {
        let node = t.node.as_ref().unwrap();
        let tray: u32 = node[4..].parse().unwrap();
        let partition = format!("{}{}", &node[..3], if tray <= 9 { "a" } else { "b" });
        let seg = &t.sub_job;
        outer
            .entry(seg[..seg.len() - 2].to_string())
            .or_default()
            .insert(node[..3].to_string());
        outer.entry(seg.clone()).or_default().insert(partition);
    }
    for (seg, places) in &outer {
        assert_eq!(places.len(), 1, "{seg}: {places:?}");
    }
    for (k, (_, (_, ranks))) in segs.iter().enumerate() {
        assert_eq!(*ranks, ((k as u32 * 8)..(k as u32 + 1) * 8).collect::<Vec<_>>());
    }
}

#[test]
fn a_partial_tail_segment_is_smaller_and_placed_last() {
    let cluster = ClusterBuilder::nvl72(2, 2, 0).build();
    let jobs = vec![
        JobBuilder::gang("leader-and-16", 17, "cpu=32,nvidia.com/gpu=4")
            .segment(16, "nvlink")
            .allow_partial()
            .build(),
    ];
    let r = run(&cluster, &jobs, PlannerConfig::default());
    let segs = segments(&r, "leader-and-16");
    assert_eq!(segs.len(), 2);
    assert_eq!(segs["leader-and-16/segment-1"].1, vec![16]);
    assert_eq!(segs["leader-and-16/segment-0"].0.len(), 1);
}

#[test]
fn a_segment_that_fits_nowhere_says_which_and_the_best_rack() {
    let cluster = with_busy(&["r01t01", "r01t02", "r01t03", "r02t04", "r02t05", "r02t06"]);
    // Racks 3-8 taken by an 18-tray job each; racks 1 and 2 keep 15 free trays.
    let mut jobs: Vec<_> = (3..=8)
        .map(|r| {
            JobBuilder::gang(&format!("fill-{r}"), 18, "cpu=32,nvidia.com/gpu=4")
                .segment(18, "nvlink")
                .build()
        })
        .collect();
    jobs.push(
        JobBuilder::gang("wide", 16, "cpu=32,nvidia.com/gpu=4")
            .segment(16, "nvlink")
            .build(),
    );
    let (r, reasons) = run_with_reasons(&cluster, &jobs, PlannerConfig::default());
    let wide = job(&r, "wide");
    assert_ne!(wide.status, JobStatus::Placed);
    let why = &reasons["wide"];
    assert_eq!(why.as_ref().and_then(Reason::no_fit), Some(NoFit::Segment), "{why:?}");
    assert!(
        wide.reason.as_deref().unwrap_or_default().contains("SegmentNoFit: segment wide/segment-0 (ranks 0-15): no HyperNode up to tier 1 has free room for 16 tasks; best is nvl-6b8d0001 with 15"),
        "{why:?}"
    );
}
