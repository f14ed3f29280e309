//! Scenario tests for the rules of volcano-semantics.md §1–§6 (and §11's differences),
//! built with the test builders. Every run checks the invariants after every tick.

use hyperplan_core::sim::SIM_OWNER;
use std::collections::BTreeSet;

use hyperplan_core::PlannerConfig;
use hyperplan_core::model::reason::{NoFit, Reason};
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, hn, run, run_with_reasons};
use hyperplan_shared::MemberType;
use hyperplan_shared::report::{JobReport, JobStatus, Report};

fn job<'a>(r: &'a Report, name: &str) -> &'a JobReport {
    r.jobs
        .iter()
        .find(|j| j.name == name)
        .unwrap_or_else(|| panic!("no job {name} in {r:#?}"))
}

fn nodes(r: &Report, name: &str) -> Vec<String> {
    let set: BTreeSet<String> = job(r, name).tasks.iter().filter_map(|t| t.node.clone()).collect();
    set.into_iter().collect()
}

/// The lowest-tier HyperNodes (first entry of `hyperNodes`) the job's tasks sit in.
fn leaves(r: &Report, name: &str) -> Vec<String> {
    let set: BTreeSet<String> = job(r, name)
        .tasks
        .iter()
        .filter_map(|t| t.hyper_nodes.first().cloned())
        .collect();
    set.into_iter().collect()
}

fn cfg() -> PlannerConfig {
    PlannerConfig::default()
}

fn cfg_toml(text: &str) -> PlannerConfig {
    PlannerConfig::parse(text, "planner.toml").unwrap_or_else(|e| panic!("{e}"))
}

// 2 nodes per leaf, 2 leaves per spine, 2 spines per pod, 1 pod: n1..n8, cpu=8 each.
fn tree() -> ClusterBuilder {
    ClusterBuilder::fat_tree(&[2, 2, 2], 1).node_resources("cpu=8,memory=32Gi,nvidia.com/gpu=8")
}

#[test]
fn gradient_takes_the_lowest_tier_that_fits() {
    let c = tree().build();
    let jobs = vec![
        JobBuilder::gang("fits-leaf", 2, "cpu=8").hard(3).build(),
        JobBuilder::gang("needs-spine", 3, "cpu=8").hard(3).build(),
    ];
    let r = run(&c, &jobs, cfg());
    assert_eq!(job(&r, "fits-leaf").allocated_hyper_node.as_deref(), Some("leaf-1"));
    assert_eq!(nodes(&r, "fits-leaf"), ["n01", "n02"]);
    // Leaf-1 is taken; 3 nodes need a spine: spine-2 is the only one with 3 free nodes.
    assert_eq!(job(&r, "needs-spine").allocated_hyper_node.as_deref(), Some("spine-2"));
    assert_eq!(leaves(&r, "needs-spine"), ["leaf-3", "leaf-4"]);
}

#[test]
fn hard_limit_is_never_crossed_but_soft_falls_back_to_the_root() {
    let c = tree().build();
    let jobs = vec![
        JobBuilder::gang("hard", 5, "cpu=8").hard(2).build(),
        JobBuilder::gang("soft", 5, "cpu=8").soft().build(),
    ];
    let (r, reasons) = run_with_reasons(&c, &jobs, cfg());
    let hard = job(&r, "hard");
    assert_eq!(hard.status, JobStatus::Rejected, "{hard:#?}");
    let reason = &reasons["hard"];
    assert!(
        matches!(reason, Some(Reason::NoFitEver { fit: NoFit::Topo, detail }) if detail.ends_with("best is spine-1 with 4")),
        "{reason:?}"
    );
    let soft = job(&r, "soft");
    assert_eq!(soft.status, JobStatus::Placed);
    assert_eq!(soft.allocated_hyper_node.as_deref(), Some("pod-1"));
}

#[test]
fn tier_names_resolve_and_an_unknown_name_warns_and_runs_without_limit() {
    let c = tree().build();
    let jobs = vec![
        JobBuilder::gang("by-name", 3, "cpu=8").hard_name("spine").build(),
        JobBuilder::gang("unknown", 2, "cpu=8").hard_name("rack").build(),
    ];
    let r = run(&c, &jobs, cfg());
    assert_eq!(job(&r, "by-name").allocated_hyper_node.as_deref(), Some("spine-1"));
    assert_eq!(job(&r, "unknown").status, JobStatus::Placed);
    assert!(r.warnings.iter().any(|w| w.contains("\"rack\"")), "{:?}", r.warnings);
}

#[test]
fn binpack_prefers_the_fuller_hypernode_and_weights_change_the_choice() {
    // leaf-1 is fuller in CPU, leaf-2 fuller in GPUs.
    let c = ClusterBuilder::fat_tree(&[2, 2], 1)
        .node_resources("cpu=8,memory=32Gi,nvidia.com/gpu=8")
        .used(0, "cpu=4")
        .used(2, "nvidia.com/gpu=6")
        .build();
    let jobs = vec![JobBuilder::gang("j", 1, "cpu=1,nvidia.com/gpu=1").hard(1).build()];
    let r = run(&c, &jobs, cfg());
    assert_eq!(job(&r, "j").allocated_hyper_node.as_deref(), Some("leaf-1"));
    let gpu_heavy = cfg_toml(
        r#"[scoring]
"hypernode.binpack.resources" = "nvidia.com/gpu"
"hypernode.binpack.resources.nvidia.com/gpu" = 10
"#,
    );
    let r = run(&c, &jobs, gpu_heavy);
    assert_eq!(job(&r, "j").allocated_hyper_node.as_deref(), Some("leaf-2"));
}

#[test]
fn lca_scoring_fills_a_leaf_then_its_sibling_and_ranks_follow_the_tree() {
    // 3 whole nodes; leaf-1 has only one free node, so the job spreads: it must stay
    // under spine-1 (leaf-2) rather than jump to another spine.
    let c = tree().busy(1).build();
    let jobs = vec![JobBuilder::gang("j", 3, "cpu=8").hard(2).build()];
    let r = run(&c, &jobs, cfg());
    let j = job(&r, "j");
    assert_eq!(j.allocated_hyper_node.as_deref(), Some("spine-1"));
    assert_eq!(nodes(&r, "j"), ["n01", "n03", "n04"]);
    // Ranks: topology order (leaf-1 before leaf-2, then node name).
    let mut by_rank: Vec<(u32, String)> = j
        .tasks
        .iter()
        .filter_map(|t| Some((t.rank?, t.node.clone()?)))
        .collect();
    by_rank.sort();
    let order: Vec<&str> = by_rank.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(order, ["n01", "n03", "n04"]);
}

#[test]
fn lca_tie_break_keeps_tasks_together_on_the_leaf_already_used() {
    // Half-node tasks: 4 tasks of 4 CPUs; soft job. After the first task lands on n1,
    // n1 and n2 (same leaf) score 1 and the rest less: all four stay on leaf-1.
    let c = tree().build();
    let jobs = vec![JobBuilder::gang("j", 4, "cpu=4").soft().build()];
    let r = run(&c, &jobs, cfg());
    assert_eq!(leaves(&r, "j"), ["leaf-1"]);
    assert_eq!(nodes(&r, "j"), ["n01", "n02"]);
}

/// Nodes attached directly to a tier-2 HyperNode beside a leaf (Volcano's "nodes outside
/// tier-1 HyperNodes") have no leaf: each is a lowest-tier group of one node, so the job
/// spans the fewest groups and the leaf with the most free room fills first.
#[test]
fn nodes_attached_directly_to_a_spine_are_each_a_group_of_one() {
    // spine-1 holds leaf-1 and, directly, the `direct` nodes (named to sort first).
    let spine = |direct: &[&str]| {
        let mut s = hn("spine-1", 2, MemberType::HyperNode, &["leaf-1"]);
        s.members.extend(hn("direct", 2, MemberType::Node, direct).members);
        s
    };
    let gang = |n: u32, cpu: u32| vec![JobBuilder::gang("j", n, &format!("cpu={cpu}")).hard(2).build()];

    // Leaf of 3 free nodes, 2 direct nodes, 4 whole-node tasks: the leaf's 3 and one
    // direct node (2 groups), not 2 of the leaf and both direct nodes (3 groups).
    let c = ClusterBuilder::flat(5)
        .node_resources("cpu=8")
        .hyper_node(hn("leaf-1", 1, MemberType::Node, &["n03", "n04", "n05"]))
        .hyper_node(spine(&["n01", "n02"]))
        .build();
    let r = run(&c, &gang(4, 8), cfg());
    assert_eq!(job(&r, "j").allocated_hyper_node.as_deref(), Some("spine-1"));
    assert_eq!(nodes(&r, "j"), ["n01", "n03", "n04", "n05"]);
    assert_eq!(leaves(&r, "j"), ["leaf-1", "spine-1"]);

    // Leaf with 2 free nodes, 3 direct nodes, 3 tasks: 2 + 1 (2 groups) beat the three
    // direct nodes (3 groups, however many nodes hang off the spine).
    let c = ClusterBuilder::flat(6)
        .node_resources("cpu=8")
        .busy(5)
        .hyper_node(hn("leaf-1", 1, MemberType::Node, &["n04", "n05", "n06"]))
        .hyper_node(spine(&["n01", "n02", "n03"]))
        .build();
    let r = run(&c, &gang(3, 8), cfg());
    assert_eq!(nodes(&r, "j"), ["n01", "n04", "n05"]);

    // Half-node tasks: leaf room 3, direct n01 room 1, n02 room 2, n03 busy. 5 tasks: the
    // leaf, then the direct node that completes the job alone (n02), not n01 then n02.
    let c = ClusterBuilder::flat(5)
        .node_resources("cpu=8")
        .used(0, "cpu=4")
        .used(4, "cpu=4")
        .busy(2)
        .hyper_node(hn("leaf-1", 1, MemberType::Node, &["n04", "n05"]))
        .hyper_node(spine(&["n01", "n02", "n03"]))
        .build();
    let r = run(&c, &gang(5, 4), cfg());
    assert_eq!(nodes(&r, "j"), ["n02", "n04", "n05"]);
}

/// Fading picks different nodes for a job without topology as the fading factor moves.
/// leaf-1 (n1 half used) is fuller than leaf-3 (n5 quarter used) at tier 1, but spine-2 is
/// much fuller than spine-1 (leaf-4 is full).
#[test]
fn tier_fading_zero_eight_tenths_and_one() {
    let c = ClusterBuilder::fat_tree(&[2, 2], 2)
        .node_resources("cpu=8")
        .used(0, "cpu=4")
        .used(4, "cpu=2")
        .busy(6)
        .busy(7)
        .build();
    let jobs = vec![JobBuilder::gang("j", 1, "cpu=1").build()];
    let pick = |fading: &str| {
        let r = run(
            &c,
            &jobs,
            cfg_toml(&format!(
                "[scoring]\n\"hypernode.binpack.normal-pod.fading\" = {fading}\n"
            )),
        );
        nodes(&r, "j")
    };
    assert_eq!(pick("0"), ["n01"]);
    assert_eq!(pick("0.8"), ["n05"]);
    assert_eq!(pick("1.0"), ["n05"]);
    let off = cfg_toml("[scoring]\n\"hypernode.binpack.normal-pod.enable\" = false\n");
    assert_eq!(
        nodes(&run(&c, &jobs, off), "j"),
        ["n01"],
        "all scores 0: first node by name"
    );
}

#[test]
fn nodes_outside_every_hypernode_are_preferred_by_fading_and_reachable_only_via_the_root() {
    let c = tree()
        .add_node("x1", "cpu=8,memory=32Gi")
        .add_node("x2", "cpu=8,memory=32Gi")
        .build();
    let jobs = vec![JobBuilder::gang("plain", 1, "cpu=1").build()];
    let r = run(&c, &jobs, cfg());
    assert_eq!(nodes(&r, "plain"), ["x1"]);
    assert!(job(&r, "plain").tasks[0].hyper_nodes.is_empty());
    // Fill the tree; a hard tier-3 job cannot use x1/x2, a soft one can.
    let full = JobBuilder::gang("full", 8, "cpu=8").hard(3).build();
    let jobs = vec![
        full.clone(),
        JobBuilder::gang("hard", 1, "cpu=8").hard(3).build(),
        JobBuilder::gang("soft", 2, "cpu=8").soft().build(),
    ];
    let r = run(&c, &jobs, cfg());
    assert_eq!(job(&r, "hard").status, JobStatus::Pending);
    assert_eq!(nodes(&r, "soft"), ["x1", "x2"]);
    assert_eq!(
        job(&r, "soft").allocated_hyper_node.as_deref(),
        Some("<cluster-top-hypernode>")
    );
}

#[test]
fn virtual_root_alone_serves_hard_jobs_and_tier_zero_is_rejected() {
    let c = ClusterBuilder::flat(3).build();
    let jobs = vec![
        JobBuilder::gang("t1", 2, "cpu=8").hard(1).build(),
        JobBuilder::gang("t0", 1, "cpu=1").hard(0).build(),
    ];
    let (r, reasons) = run_with_reasons(&c, &jobs, cfg());
    assert_eq!(job(&r, "t1").status, JobStatus::Placed);
    assert_eq!(
        job(&r, "t1").allocated_hyper_node.as_deref(),
        Some("<cluster-top-hypernode>")
    );
    let t0 = job(&r, "t0");
    assert_eq!(t0.status, JobStatus::Rejected);
    assert!(
        matches!(reasons["t0"], Some(Reason::TierTooLow { tier: 0, .. })),
        "{t0:#?}"
    );
}

#[test]
fn partitions_stay_inside_one_leaf_and_min_partitions_gates_the_gang() {
    // 4 partitions of 2 whole nodes, tier-1 partitions, job within tier 2; only spine-1
    // is free (spine-2 fully busy) and it has room for exactly 2 partitions.
    let mut b = tree();
    for i in 4..8 {
        b = b.busy(i);
    }
    let c = b.build();
    let jobs = vec![
        JobBuilder::gang("p", 8, "cpu=8")
            .hard(2)
            .partitions(4, 2, 2, Some(1))
            .build(),
    ];
    let r = run(&c, &jobs, cfg());
    let p = job(&r, "p");
    assert_eq!(p.status, JobStatus::Placed, "{p:#?}");
    assert_eq!(p.allocated_hyper_node.as_deref(), Some("spine-1"));
    let placed: Vec<_> = p.tasks.iter().filter(|t| t.node.is_some()).collect();
    assert_eq!(placed.len(), 4);
    for part in ["p/worker-0", "p/worker-1"] {
        let ls: BTreeSet<_> = p
            .tasks
            .iter()
            .filter(|t| t.sub_job == part)
            .filter_map(|t| t.hyper_nodes.first().cloned())
            .collect();
        assert_eq!(ls.len(), 1, "{part} spans {ls:?}");
    }
    assert!(
        p.tasks
            .iter()
            .filter(|t| t.sub_job == "p/worker-3")
            .all(|t| t.node.is_none())
    );

    // With minPartitions 3 the job can never start: a spine holds only 2 partitions.
    let jobs = vec![
        JobBuilder::gang("p", 8, "cpu=8")
            .hard(2)
            .partitions(4, 2, 3, Some(1))
            .build(),
    ];
    let r = run(&c, &jobs, cfg());
    assert_eq!(job(&r, "p").status, JobStatus::Rejected);
    assert!(job(&r, "p").tasks.iter().all(|t| t.node.is_none()));
}

#[test]
fn priority_then_submit_time_then_id_decides_who_gets_the_room() {
    let c = ClusterBuilder::flat(2).node_resources("cpu=8").build();
    let jobs = vec![
        JobBuilder::gang("b-low", 2, "cpu=8").build(),
        JobBuilder::gang("a-low", 2, "cpu=8").build(),
        JobBuilder::gang("z-high", 2, "cpu=8").priority(5).build(),
    ];
    let r = run(&c, &jobs, cfg());
    assert_eq!(job(&r, "z-high").status, JobStatus::Placed);
    assert_eq!(job(&r, "a-low").status, JobStatus::Pending);
    // Submitted at the same time: the first submitted (the lower id) goes first, whatever
    // its name.
    let jobs = vec![
        JobBuilder::gang("b", 2, "cpu=8").build(),
        JobBuilder::gang("a", 2, "cpu=8").build(),
    ];
    assert_eq!(job(&run(&c, &jobs, cfg()), "b").status, JobStatus::Placed);
}

#[test]
fn time_moves_from_event_to_event_and_waiting_jobs_start_when_room_frees() {
    let c = ClusterBuilder::fat_tree(&[2, 2], 1).node_resources("cpu=8").build();
    let jobs = vec![
        JobBuilder::gang("first", 4, "cpu=8").hard(2).runtime(100).build(),
        JobBuilder::gang("second", 2, "cpu=8")
            .hard(1)
            .runtime(50)
            .submit(10)
            .build(),
    ];
    let r = run(&c, &jobs, cfg());
    let second = job(&r, "second");
    assert_eq!(second.start_time, Some(100));
    assert_eq!(second.end_time, Some(150));
    assert_eq!(r.summary.makespan, 150);
    assert_eq!(r.summary.placed, 2);
}

#[test]
fn pending_reason_names_the_best_hypernode() {
    let c = tree().busy(0).busy(2).busy(4).build();
    let j = JobBuilder::gang("j", 2, "cpu=8,nvidia.com/gpu=8")
        .hard(1)
        .runtime(10)
        .build();
    // Another job holds leaf-4 for a while, so j waits and then runs.
    let holder = JobBuilder::gang("holder", 2, "cpu=8")
        .hard(1)
        .runtime(100)
        .priority(1)
        .build();
    let r = run(&c, &[holder, j], cfg());
    assert_eq!(job(&r, "j").start_time, Some(100));
    // Without runtimes, j stays pending with a reason that names the best leaf.
    let c2 = tree().busy(0).busy(2).busy(4).busy(6).build();
    let (r, reasons) = run_with_reasons(
        &c2,
        &[JobBuilder::gang("j", 2, "cpu=8,nvidia.com/gpu=8").hard(1).build()],
        cfg(),
    );
    let j = job(&r, "j");
    assert_eq!(j.status, JobStatus::Pending);
    let reason = &reasons["j"];
    assert!(
        matches!(reason, Some(Reason::NoFit { fit: NoFit::Topo, detail })
            if detail.starts_with("no HyperNode up to tier 1") && detail.ends_with("best is leaf-1 with 1")),
        "{reason:?}"
    );
}

#[test]
fn a_task_bigger_than_every_node_or_an_unknown_resource_is_rejected() {
    let c = tree().build();
    let jobs = vec![
        JobBuilder::gang("huge", 1, "cpu=64").build(),
        JobBuilder::gang("fpga", 1, "cpu=1,xilinx.com/fpga=1").build(),
    ];
    let (r, reasons) = run_with_reasons(&c, &jobs, cfg());
    assert_eq!(job(&r, "huge").status, JobStatus::Rejected);
    assert!(
        matches!(&reasons["huge"], Some(Reason::TooBig { task, .. }) if task == "worker"),
        "{:?}",
        reasons["huge"]
    );
    assert!(
        matches!(&reasons["fpga"], Some(Reason::NoSuchResource { resource, .. }) if resource == "xilinx.com/fpga"),
        "{:?}",
        reasons["fpga"]
    );
    assert_eq!(
        job(&r, "fpga").reason.as_deref(),
        Some("task worker: no node offers resource xilinx.com/fpga")
    );
}

#[test]
fn min_available_below_replicas_places_the_gang_then_the_rest_within_the_limit() {
    // Leaf of 2 free nodes; 3 replicas, gang 2, hard tier 1: 2 run, 1 waits (and would
    // only ever go into the same leaf).
    let c = ClusterBuilder::fat_tree(&[2, 2], 1)
        .node_resources("cpu=8")
        .busy(2)
        .busy(3)
        .build();
    let jobs = vec![JobBuilder::gang("j", 3, "cpu=8").hard(1).min_available(2).build()];
    let r = run(&c, &jobs, cfg());
    let j = job(&r, "j");
    assert_eq!(j.status, JobStatus::Placed);
    assert_eq!(j.tasks.iter().filter(|t| t.node.is_some()).count(), 2);
    assert_eq!(j.allocated_hyper_node.as_deref(), Some("leaf-1"));
}

#[test]
fn broken_hypernodes_are_left_out_with_warnings_and_the_rest_works() {
    let c = tree()
        .hyper_node(hn("cyc-a", 5, MemberType::HyperNode, &["cyc-b"]))
        .hyper_node(hn("cyc-b", 6, MemberType::HyperNode, &["cyc-a"]))
        .hyper_node(hn("second-parent", 4, MemberType::HyperNode, &["pod-1"]))
        .hyper_node(hn("zz-again", 4, MemberType::HyperNode, &["pod-1"]))
        .hyper_node(hn("ghost", 1, MemberType::Node, &["no-such-node"]))
        .hyper_node(hyperplan_shared::HyperNodeSpec {
            name: "bad-regex".into(),
            tier: 1,
            tier_name: None,
            members: vec![hyperplan_shared::Member {
                kind: MemberType::Node,
                selector: hyperplan_shared::Selector::Regex { pattern: "n(1".into() },
            }],
        })
        .build();
    let jobs = vec![JobBuilder::gang("j", 2, "cpu=8").hard(1).build()];
    let r = run(&c, &jobs, cfg());
    assert_eq!(job(&r, "j").allocated_hyper_node.as_deref(), Some("leaf-1"));
    let w = r.warnings.join("\n");
    for needle in [
        "cyc-a left out: cycle",
        "zz-again left out: member pod-1 already has parent second-parent",
        "ghost left out",
        "bad-regex left out",
    ] {
        assert!(w.contains(needle), "missing {needle:?} in:\n{w}");
    }
    // second-parent (first by name) keeps pod-1 and is the top: the tasks report it.
    assert_eq!(
        job(&r, "j").tasks[0].hyper_nodes,
        ["leaf-1", "spine-1", "pod-1", "second-parent"]
    );
}

#[test]
fn label_discovery_builds_path_keyed_hypernodes_named_by_label_key() {
    let mut b = ClusterBuilder::flat(4).node_resources("cpu=8");
    for (i, (s, l)) in [("s1", "r1"), ("s1", "r1"), ("s2", "r1"), ("s2", "r2")]
        .iter()
        .enumerate()
    {
        b = b.label(i, "spine", s).label(i, "rack", l);
    }
    let c = b
        .label_discovery("fabric", &["spine", "rack", "kubernetes.io/hostname"])
        .build();
    let jobs = vec![
        JobBuilder::gang("two", 2, "cpu=8").hard_name("rack").build(),
        JobBuilder::gang("one", 1, "cpu=8").hard_name("rack").build(),
    ];
    let r = run(&c, &jobs, cfg());
    assert_eq!(job(&r, "two").allocated_hyper_node.as_deref(), Some("fabric-s1-r1"));
    assert_eq!(job(&r, "two").tasks[0].hyper_nodes, ["fabric-s1-r1", "fabric-s1"]);
    // rack r1 under s2 is a different HyperNode from r1 under s1.
    assert_eq!(job(&r, "one").allocated_hyper_node.as_deref(), Some("fabric-s2-r1"));
}

#[test]
fn same_inputs_give_the_same_report() {
    let c = tree().busy(3).build();
    let jobs = vec![
        JobBuilder::gang("a", 3, "cpu=4").soft().runtime(30).build(),
        JobBuilder::gang("b", 2, "cpu=8").hard(2).runtime(20).submit(5).build(),
        JobBuilder::gang("c", 4, "cpu=2").runtime(10).build(),
    ];
    let one = serde_json::to_string(&run(&c, &jobs, cfg())).unwrap_or_default();
    let two = serde_json::to_string(&run(&c, &jobs, cfg())).unwrap_or_default();
    assert!(!one.is_empty());
    assert_eq!(one, two);
}

#[test]
fn allocated_hypernode_is_removed_when_gone_and_recovered_from_running_tasks() {
    use hyperplan_core::model::components::{Job, JobState, SubJob, SubJobState};
    let c = tree().build();
    let mut planner = hyperplan_core::sim::planner_for(&c, cfg());
    hyperplan_core::sim::submit::submit(
        &mut planner,
        JobBuilder::gang("j", 3, "cpu=8").hard(2).build(),
        SIM_OWNER,
    );
    planner.tick(0);
    let allocated = |p: &mut hyperplan_core::Planner| {
        let w = p.world_mut_for_tests();
        let job = w
            .query::<(&Job, &JobState)>()
            .iter(w)
            .map(|(_, s)| s.allocated_hyper_node.clone())
            .next();
        let sj = w
            .query::<(&SubJob, &SubJobState)>()
            .iter(w)
            .map(|(_, s)| s.allocated_hyper_node.clone())
            .next();
        (job.flatten(), sj.flatten())
    };
    assert_eq!(
        allocated(&mut planner),
        (Some("spine-1".into()), Some("spine-1".into()))
    );

    // Forget both (as after a restart): recovered as the lowest-tier HyperNode holding
    // every running task.
    {
        let w = planner.world_mut_for_tests();
        for mut s in w.query::<&mut JobState>().iter_mut(w) {
            s.allocated_hyper_node = None;
        }
        for mut s in w.query::<&mut SubJobState>().iter_mut(w) {
            s.allocated_hyper_node = None;
        }
    }
    planner.tick(1);
    assert_eq!(
        allocated(&mut planner),
        (Some("spine-1".into()), Some("spine-1".into()))
    );

    // A name that no longer exists is removed, then recovered.
    {
        let w = planner.world_mut_for_tests();
        for mut s in w.query::<&mut SubJobState>().iter_mut(w) {
            s.allocated_hyper_node = Some("gone".into());
        }
    }
    planner.tick(2);
    assert_eq!(allocated(&mut planner).1, Some("spine-1".into()));
    assert!(planner.violations().is_empty());
}
