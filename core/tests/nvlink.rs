//! Scenario tests for NVLink domains the nodes discover themselves (issue 27): the `nvlink`
//! source makes a HyperNode per domain from what the trays' GPUs report, grafted under
//! the fabric's leaves with that tree's tiers moved up; partitions where Fabric Manager
//! split a rack; a rack across two leaves split per leaf; tier names resolved per tree
//! beside an H100 island; a degraded tray taken last; a tray still registering joins
//! once it completes; the source turned off. Invariants checked after every tick.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use hyperplan_core::model::reason::{NoFit, Reason};
use hyperplan_core::sim::{SIM_OWNER, planner_for};
use hyperplan_core::testing::nvl::{WHOLE_RACK_CLIQUE, gpu_in, rack_uuid, tray_in};
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, hn, run, run_with_reasons};
use hyperplan_core::{Command, Event, Planner, PlannerConfig};
use hyperplan_shared::MemberType;
use hyperplan_shared::gpufabric::FabricState;
use hyperplan_shared::report::{JobStatus, Report};
use hyperplan_shared::status::NvlinkState;

fn tier_of(p: &Planner, name: &str) -> u32 {
    p.index()
        .hn(name)
        .unwrap_or_else(|| panic!("no HyperNode {name}"))
        .1
        .tier
}

fn parent_of(p: &Planner, name: &str) -> String {
    let index = p.index();
    let (_, info) = index.hn(name).unwrap_or_else(|| panic!("no HyperNode {name}"));
    index.hns[info.parent.unwrap().ix()].name.clone()
}

fn hn_names(p: &Planner, prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = p
        .index()
        .hns
        .iter()
        .filter(|h| h.name.starts_with(prefix))
        .map(|h| h.name.clone())
        .collect();
    v.sort();
    v
}

/// A gang of `n` tasks of `resources` held to the tier named `tier`.
fn held(name: &str, n: u32, resources: &str, tier: &str) -> hyperplan_shared::JobSpec {
    JobBuilder::gang(name, n, resources).hard_name(tier).build()
}

fn warnings(cmds: &[Command]) -> Vec<String> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Warn(w) => Some(w.clone()),
            _ => None,
        })
        .collect()
}

/// The racks (`r01` …) a job's tasks landed in.
fn racks(r: &Report, job: &str) -> BTreeSet<String> {
    let j = r.jobs.iter().find(|j| j.name == job).unwrap();
    j.tasks
        .iter()
        .filter_map(|t| t.node.as_ref().map(|n| n[..3].to_string()))
        .collect()
}

fn nodes_of(r: &Report, job: &str) -> BTreeSet<String> {
    let j = r.jobs.iter().find(|j| j.name == job).unwrap();
    j.tasks.iter().filter_map(|t| t.node.clone()).collect()
}

fn status(r: &Report, job: &str) -> (JobStatus, String) {
    let j = r.jobs.iter().find(|j| j.name == job).unwrap();
    (j.status, j.reason.clone().unwrap_or_default())
}

#[test]
fn eight_nvl72_racks_from_144_agents_become_hypernodes_in_one_tick() {
    // 8 racks, 2 per leaf, 2 leaves per spine: the fabric source's leaf is tier 1.
    let cluster = ClusterBuilder::nvl72(8, 2, 2).build();
    assert_eq!(cluster.nodes.len(), 144);
    let mut p = planner_for(&cluster, PlannerConfig::default());
    let cmds = p.tick(1);
    assert!(warnings(&cmds).is_empty(), "{:?}", warnings(&cmds));
    let domains = hn_names(&p, "nvl-");
    assert_eq!(domains.len(), 8, "{domains:?}");
    assert_eq!(domains[0], "nvl-6b8d0001");
    for (r, d) in domains.iter().enumerate() {
        assert_eq!(tier_of(&p, d), 1);
        assert_eq!(p.index().hn(d).unwrap().1.node_count, 18);
        assert_eq!(parent_of(&p, d), format!("leaf-{}", r / 2 + 1), "{d}");
    }
    // The NVLink tree's tiers moved up by one: nvlink 1, leaf 2, spine 3.
    assert_eq!(tier_of(&p, "leaf-1"), 2);
    assert_eq!(tier_of(&p, "spine-1"), 3);
    assert_eq!(p.index().root_tier(), 4);
    let src = p.hyper_nodes().sources;
    let nv = src
        .iter()
        .find(|s| s.name == "nvlink")
        .expect("the nvlink source is listed");
    assert!(
        nv.summary
            .contains("8 NVLink domain(s), 0 partition(s) from 144 node(s)"),
        "{nv:?}"
    );
    // A node's HyperNodes, lowest first, as `hyperplan nodes` and the rank env say them.
    assert_eq!(p.hyper_nodes_of("r03t05"), ["nvl-6b8d0003", "leaf-2", "spine-1"]);
    assert!(p.violations().is_empty(), "{:?}", p.violations());
}

#[test]
fn a_job_held_to_nvlink_stays_in_one_rack_and_a_wider_one_says_why() {
    let cluster = ClusterBuilder::nvl72(4, 2, 0).build();
    let jobs = vec![
        held("rack", 18, "nvidia.com/gpu=4", "nvlink"),
        JobBuilder::gang("numeric", 16, "nvidia.com/gpu=4").hard(1).build(),
        held("too-wide", 19, "nvidia.com/gpu=4", "nvlink"),
        held("leaf", 36, "nvidia.com/gpu=4", "leaf"),
    ];
    let (r, reasons) = run_with_reasons(&cluster, &jobs, PlannerConfig::default());
    assert_eq!(racks(&r, "rack").len(), 1, "{:?}", racks(&r, "rack"));
    assert_eq!(racks(&r, "numeric").len(), 1);
    let (st, why) = status(&r, "too-wide");
    assert_eq!(st, JobStatus::Rejected, "{why}");
    assert!(
        matches!(&reasons["too-wide"], Some(Reason::NoFitEver { fit: NoFit::Topo, detail }) if detail.starts_with("no HyperNode up to tier 1")),
        "{why}"
    );
    // Leaf means tier 2 here: two racks of one leaf.
    assert_eq!(racks(&r, "leaf").len(), 2, "{:?}", racks(&r, "leaf"));
}

/// One NVL leaf (tier 2 once grafted) with 2 racks; beside it an island of 4 H100 nodes
/// (8 GPUs each) in two leaves (tier 1, `leaf`) under `h-spine` (tier 2, `spine`).
fn nvl_beside_h100() -> hyperplan_shared::ClusterSpec {
    let mut b = ClusterBuilder::nvl72(2, 2, 0);
    for i in 1..=4 {
        b = b.add_node(&format!("h{i}"), "cpu=64,memory=512Gi,nvidia.com/gpu=8");
    }
    let mut cluster = b
        .hyper_node(hn("h-leaf-1", 1, MemberType::Node, &["h1", "h2"]))
        .hyper_node(hn("h-leaf-2", 1, MemberType::Node, &["h3", "h4"]))
        .hyper_node(hn("h-spine", 2, MemberType::HyperNode, &["h-leaf-1", "h-leaf-2"]))
        .build();
    for h in &mut cluster.hyper_nodes {
        if h.name.starts_with("h-leaf") {
            h.tier_name = Some("leaf".into());
        } else if h.name == "h-spine" {
            h.tier_name = Some("spine".into());
        }
    }
    cluster
}

#[test]
fn an_h100_island_beside_nvl_racks_reads_tier_names_in_its_own_tree() {
    let cluster = nvl_beside_h100();
    let mut p = planner_for(&cluster, PlannerConfig::default());
    let cmds = p.tick(1);
    assert!(warnings(&cmds).is_empty(), "{:?}", warnings(&cmds));
    assert_eq!(tier_of(&p, "h-leaf-1"), 1);
    assert_eq!(tier_of(&p, "leaf-1"), 2);
    let jobs = vec![
        // "leaf" is tier 1 among the H100s and tier 2 among the trays.
        held("h-pair", 2, "nvidia.com/gpu=8", "leaf"),
        held("trays", 30, "nvidia.com/gpu=4", "leaf"),
        // No NVLink domain among the H100s: a job held to one waits for trays.
        held("h-nvlink", 1, "nvidia.com/gpu=8", "nvlink"),
        // Numbers mean the same number in every tree: spine is tier 2 for the H100s.
        JobBuilder::gang("h-spine", 4, "nvidia.com/gpu=8").hard(2).build(),
    ];
    let r = run(&cluster, &jobs, PlannerConfig::default());
    assert_eq!(status(&r, "h-pair").0, JobStatus::Placed);
    let pair = nodes_of(&r, "h-pair");
    assert!(
        pair == ["h1", "h2"].map(String::from).into() || pair == ["h3", "h4"].map(String::from).into(),
        "{pair:?}"
    );
    assert_eq!(status(&r, "trays").0, JobStatus::Placed, "{:?}", status(&r, "trays"));
    assert_eq!(racks(&r, "trays").len(), 2);
    assert_ne!(status(&r, "h-nvlink").0, JobStatus::Placed);
    // h-spine needs all four H100s: h-pair holds two, so it waits; what matters is that
    // it was never put across trees.
    assert_ne!(
        status(&r, "h-spine").0,
        JobStatus::Rejected,
        "{:?}",
        status(&r, "h-spine")
    );
}

#[test]
fn a_rack_cabled_to_two_leaves_is_split_per_leaf_with_a_warning() {
    let mut cluster = ClusterBuilder::nvl72(2, 1, 0).build();
    // r01t18 moves from leaf-1 to leaf-2.
    for h in &mut cluster.hyper_nodes {
        match h.name.as_str() {
            "leaf-1" => h.members.retain(|m| !format!("{m:?}").contains("r01t18")),
            "leaf-2" => h
                .members
                .push(hn("x", 1, MemberType::Node, &["r01t18"]).members.remove(0)),
            _ => {}
        }
    }
    let mut p = planner_for(&cluster, PlannerConfig::default());
    let w = warnings(&p.tick(1));
    assert!(
        w.iter().any(|w| w.contains(
            "NVLink domain nvl-6b8d0001 has nodes under leaf-1, leaf-2: split into nvl-6b8d0001.leaf-1, nvl-6b8d0001.leaf-2"
        )),
        "{w:?}"
    );
    assert_eq!(p.index().hn("nvl-6b8d0001.leaf-1").unwrap().1.node_count, 17);
    assert_eq!(p.index().hn("nvl-6b8d0001.leaf-2").unwrap().1.node_count, 1);
    assert_eq!(parent_of(&p, "nvl-6b8d0001.leaf-2"), "leaf-2");
    assert_eq!(parent_of(&p, "nvl-6b8d0002"), "leaf-2");
    assert!(p.violations().is_empty(), "{:?}", p.violations());
}

#[test]
fn a_split_rack_makes_partitions_the_lowest_tier_for_every_rack() {
    let mut b = ClusterBuilder::nvl72(2, 2, 0);
    // Fabric Manager split rack 1: trays 10-18 are partition 2.
    for t in 10..=18 {
        b = b.node_fabric(
            &format!("r01t{t:02}"),
            (0..4).map(|i| gpu_in(&rack_uuid(1), 2, i)).collect(),
        );
    }
    let cluster = b.build();
    let mut p = planner_for(&cluster, PlannerConfig::default());
    p.tick(1);
    let c = WHOLE_RACK_CLIQUE;
    assert_eq!(
        hn_names(&p, "nvl-"),
        [
            "nvl-6b8d0001".to_string(),
            "nvl-6b8d0001-c2".to_string(),
            format!("nvl-6b8d0001-c{c}"),
            "nvl-6b8d0002".to_string(),
            format!("nvl-6b8d0002-c{c}"),
        ]
    );
    assert_eq!(tier_of(&p, "nvl-6b8d0001-c2"), 1);
    assert_eq!(tier_of(&p, "nvl-6b8d0001"), 2);
    assert_eq!(tier_of(&p, "leaf-1"), 3);
    assert_eq!(parent_of(&p, "nvl-6b8d0001-c2"), "nvl-6b8d0001");
    // Ten trays in one partition: only the rack that is not split has one that big.
    let jobs = vec![held("ten", 10, "nvidia.com/gpu=4", "nvlink-partition")];
    let r = run(&cluster, &jobs, PlannerConfig::default());
    assert_eq!(racks(&r, "ten"), ["r02".to_string()].into());
}

#[test]
fn a_degraded_tray_is_taken_after_the_healthy_ones_of_its_rack() {
    let mut degraded = gpu_in(&rack_uuid(1), WHOLE_RACK_CLIQUE, 0);
    degraded.health.degraded_bandwidth = Some(true);
    let mut fabric: Vec<_> = (1..4).map(|i| gpu_in(&rack_uuid(1), WHOLE_RACK_CLIQUE, i)).collect();
    fabric.insert(0, degraded);
    let cluster = ClusterBuilder::nvl72(1, 1, 0).node_fabric("r01t01", fabric).build();
    let jobs = vec![
        held("seventeen", 17, "nvidia.com/gpu=4", "nvlink"),
        held("one-more", 1, "nvidia.com/gpu=4", "nvlink"),
    ];
    let r = run(&cluster, &jobs, PlannerConfig::default());
    let took = nodes_of(&r, "seventeen");
    assert_eq!(took.len(), 17);
    assert!(!took.contains("r01t01"), "the degraded tray was taken: {took:?}");
    // Still in its domain and used when nothing else is left.
    assert_eq!(nodes_of(&r, "one-more"), ["r01t01".to_string()].into());
    let mut p = planner_for(&cluster, PlannerConfig::default());
    p.tick(1);
    let nv = p
        .hyper_nodes()
        .sources
        .into_iter()
        .find(|s| s.name == "nvlink")
        .unwrap();
    assert!(nv.summary.contains("1 node(s) degraded"), "{}", nv.summary);
    // `hyperplan nodes` says which GPU and what.
    let nodes = p.nodes();
    let t1 = nodes
        .iter()
        .find(|n| n.name == "r01t01")
        .unwrap()
        .nvlink
        .clone()
        .unwrap();
    assert_eq!(t1.state, NvlinkState::Degraded);
    assert_eq!(t1.hyper_node.as_deref(), Some("nvl-6b8d0001"));
    assert_eq!(t1.detail.as_deref(), Some("GPU 0: bandwidth degraded"));
    let t2 = nodes
        .iter()
        .find(|n| n.name == "r01t02")
        .unwrap()
        .nvlink
        .clone()
        .unwrap();
    assert_eq!((t2.state, t2.detail), (NvlinkState::Ok, None));
}

#[test]
fn a_tray_still_registering_joins_its_rack_once_it_completes() {
    let mut pending = gpu_in(&rack_uuid(1), 0, 0);
    pending.state = FabricState::InProgress;
    pending.cluster_uuid = String::new();
    let cluster = ClusterBuilder::nvl72(1, 1, 0)
        .node_fabric("r01t18", vec![pending])
        .build();
    let mut p = planner_for(&cluster, PlannerConfig::default());
    p.tick(1);
    assert_eq!(p.index().hn("nvl-6b8d0001").unwrap().1.node_count, 17);
    let nv = p
        .hyper_nodes()
        .sources
        .into_iter()
        .find(|s| s.name == "nvlink")
        .unwrap();
    assert!(nv.summary.contains("1 node(s) still registering"), "{}", nv.summary);
    let t18 = p
        .nodes()
        .into_iter()
        .find(|n| n.name == "r01t18")
        .unwrap()
        .nvlink
        .unwrap();
    assert_eq!((t18.state, t18.hyper_node), (NvlinkState::Registering, None));
    let why = t18.detail.unwrap();
    assert!(why.contains("GPU 0 (0000:10:00.0): fabric registration"), "{why}");
    // Its agent reports again with registration complete.
    let mut done = cluster.nodes.iter().find(|n| n.name == "r01t18").unwrap().clone();
    done.hardware = Some(hyperplan_shared::topology::SharedTopology::new(tray_in(
        &rack_uuid(1),
        WHOLE_RACK_CLIQUE,
    )));
    p.push(Event::NodeUp(done));
    p.tick(2);
    assert_eq!(p.index().hn("nvl-6b8d0001").unwrap().1.node_count, 18);
    assert!(p.violations().is_empty(), "{:?}", p.violations());
}

#[test]
fn turned_off_the_source_takes_its_hypernodes_and_the_tiers_fall_back() {
    let cluster = ClusterBuilder::nvl72(2, 2, 0).build();
    let mut p = planner_for(&cluster, PlannerConfig::default());
    p.tick(1);
    assert_eq!(tier_of(&p, "leaf-1"), 2);
    p.push(Event::NvlinkDiscovery(false));
    p.tick(2);
    assert!(hn_names(&p, "nvl-").is_empty());
    assert_eq!(tier_of(&p, "leaf-1"), 1);
    assert!(p.hyper_nodes().sources.iter().all(|s| s.name != "nvlink"));
    p.push(Event::NvlinkDiscovery(true));
    hyperplan_core::sim::submit::submit(&mut p, held("j", 18, "nvidia.com/gpu=4", "nvlink"), SIM_OWNER);
    p.tick(3);
    assert_eq!(hn_names(&p, "nvl-").len(), 2);
    assert!(p.violations().is_empty(), "{:?}", p.violations());
}

#[test]
fn a_queue_with_trees_keeps_its_jobs_in_them() {
    let cluster = nvl_beside_h100();
    let config = PlannerConfig::parse(
        "[[queue]]\nname = \"gb200\"\ntrees = [\"leaf-1\"]\n\n[[queue]]\nname = \"h100\"\ntrees = [\"h-spine\"]\n",
        "planner.toml",
    )
    .unwrap();
    let jobs = vec![
        // Without the queue, a job with no topology goes first to h1 (first by name).
        JobBuilder::gang("on-trays", 4, "cpu=1").queue("gb200").build(),
        JobBuilder::gang("on-h100", 2, "cpu=1").queue("h100").build(),
        // More than the H100 island holds: waits rather than spill onto the trays.
        JobBuilder::gang("too-big", 5, "cpu=64").queue("h100").build(),
        JobBuilder::gang("anywhere", 1, "cpu=1").build(),
    ];
    let (r, reasons) = run_with_reasons(&cluster, &jobs, config);
    assert!(
        nodes_of(&r, "on-trays").iter().all(|n| n.starts_with('r')),
        "{:?}",
        nodes_of(&r, "on-trays")
    );
    assert!(
        nodes_of(&r, "on-h100").iter().all(|n| n.starts_with('h')),
        "{:?}",
        nodes_of(&r, "on-h100")
    );
    let (st, why) = status(&r, "too-big");
    assert_ne!(st, JobStatus::Placed);
    assert_eq!(
        reasons["too-big"].as_ref().and_then(Reason::no_fit),
        Some(NoFit::Topo),
        "{why}"
    );
    assert!(why.contains("best is h-"), "{why}");
    assert_eq!(nodes_of(&r, "anywhere"), ["h1".to_string()].into());
}
