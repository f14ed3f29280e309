//! NUMA allocation scenarios through the whole planner (the same Schedule the daemon
//! runs), with the invariants checked after every tick: each policy admits or rejects
//! CPU-only, CPU+GPU and GPU-only tasks on the NUMA nodes kubelet would pick, GPUs come
//! with their rails, finished tasks give their PUs back, and pending reasons name the
//! node and the policy that turned it away.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hyperplan_core::PlannerConfig;
use hyperplan_core::config::NumaConfig;
use hyperplan_core::model::reason::{NoFit, Reason};
use hyperplan_core::numa::hints::Policy;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, MachineBuilder, run, run_with_reasons};
use hyperplan_shared::report::{JobReport, JobStatus, Report, TaskReport};

fn job<'a>(r: &'a Report, name: &str) -> &'a JobReport {
    r.jobs.iter().find(|j| j.name == name).expect("job in report")
}

fn tasks<'a>(r: &'a Report, name: &str) -> &'a [TaskReport] {
    &job(r, name).tasks
}

/// A two-socket node: 2 NUMA nodes × 8 cores × 2 threads (PUs 0-15 on NUMA 0).
fn two_socket() -> MachineBuilder {
    MachineBuilder::new(2, 1, 8, 2)
}

fn cfg() -> PlannerConfig {
    PlannerConfig::default()
}

#[test]
fn single_numa_node_packs_numa_nodes_then_names_the_refusal() {
    let cluster = ClusterBuilder::flat(1).hardware(two_socket().build()).build();
    // 6 PUs each: two fit per NUMA node (12 of 16), a fifth fits by capacity (8 PUs free
    // in all) but on no single NUMA node.
    let jobs = vec![
        JobBuilder::gang("a", 4, "cpu=6,memory=1Gi")
            .numa("single-numa-node")
            .build(),
        JobBuilder::gang("b", 1, "cpu=6")
            .numa("single-numa-node")
            .submit(1)
            .build(),
    ];
    let r = run(&cluster, &jobs, cfg());
    let a = tasks(&r, "a");
    assert_eq!(job(&r, "a").status, JobStatus::Placed);
    let got: Vec<(&str, Vec<u32>)> = a
        .iter()
        .map(|t| (t.cpus.as_deref().unwrap(), t.numa_nodes.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("0-5", vec![0]),
            ("6-11", vec![0]),
            ("16-21", vec![1]),
            ("22-27", vec![1])
        ]
    );
    for t in a {
        assert_eq!(t.memory_numa.values().sum::<u64>(), 1 << 30);
        assert_eq!(t.memory_numa.keys().copied().collect::<Vec<_>>(), t.numa_nodes);
    }
    let b = job(&r, "b");
    assert_eq!(b.status, JobStatus::Pending);
    assert_eq!(
        b.reason.as_deref(),
        Some(
            "NumaNoFit: task worker: no node with room admits it under single-numa-node; \
             n01: single-numa-node: no NUMA node has 6 free PUs"
        )
    );
}

#[test]
fn each_policy_on_a_task_wider_than_a_numa_node() {
    // 20 PUs on 16-PU NUMA nodes: only two NUMA nodes together hold it.
    for (policy, placed, numa) in [
        ("single-numa-node", false, vec![]),
        ("restricted", true, vec![0, 1]),
        ("best-effort", true, vec![0, 1]),
        ("none", true, vec![]),
    ] {
        let cluster = ClusterBuilder::flat(1).hardware(two_socket().build()).build();
        let jobs = vec![JobBuilder::gang("j", 1, "cpu=20").numa(policy).build()];
        let (r, reasons) = run_with_reasons(&cluster, &jobs, cfg());
        let j = job(&r, "j");
        if placed {
            assert_eq!(j.status, JobStatus::Placed, "{policy}");
            assert_eq!(j.tasks[0].numa_nodes, numa, "{policy}");
            let pinned = j.tasks[0].cpus.is_some();
            assert_eq!(pinned, policy != "none", "{policy}: exclusive PUs only with a policy");
        } else {
            assert_eq!(j.status, JobStatus::Rejected, "{policy}");
            let reason = &reasons["j"];
            assert!(
                matches!(reason, Some(Reason::NoFitEver { fit: NoFit::Numa, detail })
                    if detail.contains("n01: single-numa-node: no NUMA node has 20 free PUs")),
                "{reason:?}"
            );
        }
    }
}

/// A DGX-like node: 2 NUMA nodes × 16 cores, 4 GPUs and 2 HCAs on each.
fn gpu_node() -> MachineBuilder {
    MachineBuilder::new(2, 1, 16, 2).gpus_per_numa(4).hcas_per_numa(2)
}

#[test]
fn cpu_and_gpus_share_a_numa_node_and_bring_their_rails() {
    let cluster = ClusterBuilder::flat(1).hardware(gpu_node().build()).build();
    let jobs = vec![
        JobBuilder::gang("train", 2, "cpu=8,memory=8Gi,nvidia.com/gpu=4")
            .numa("single-numa-node")
            .build(),
    ];
    let r = run(&cluster, &jobs, cfg());
    let t = tasks(&r, "train");
    assert_eq!(t[0].numa_nodes, vec![0]);
    assert_eq!(t[0].cpus.as_deref(), Some("0-7"));
    assert_eq!(
        t[0].gpus,
        vec!["0000:10:00.0", "0000:11:00.0", "0000:12:00.0", "0000:13:00.0"]
    );
    assert_eq!(t[0].nics, vec!["mlx5_0", "mlx5_1"]);
    assert_eq!(t[1].numa_nodes, vec![1]);
    assert_eq!(t[1].cpus.as_deref(), Some("32-39"));
    assert_eq!(
        t[1].gpus,
        vec!["0000:14:00.0", "0000:15:00.0", "0000:16:00.0", "0000:17:00.0"]
    );
    assert_eq!(t[1].nics, vec!["mlx5_2", "mlx5_3"]);
}

#[test]
fn each_policy_with_gpus_split_across_numa_nodes() {
    // Three GPUs are free on NUMA 0 after a first task, four on NUMA 1; a task asking
    // for 6 GPUs and 4 PUs can only be served across both. Kubelet's restricted refuses
    // too: 4 PUs fit one NUMA node, so the CPU hint for both nodes is not preferred, and
    // the merged hint is preferred only when every provider's is.
    for (policy, admitted) in [
        ("single-numa-node", false),
        ("restricted", false),
        ("best-effort", true),
        ("none", true),
    ] {
        let cluster = ClusterBuilder::flat(1).hardware(gpu_node().build()).build();
        let jobs = vec![
            JobBuilder::gang("first", 1, "cpu=2,nvidia.com/gpu=1")
                .numa("single-numa-node")
                .build(),
            JobBuilder::gang("wide", 1, "cpu=4,nvidia.com/gpu=6")
                .numa(policy)
                .submit(1)
                .build(),
        ];
        let (r, reasons) = run_with_reasons(&cluster, &jobs, cfg());
        let w = job(&r, "wide");
        let first_gpu = &tasks(&r, "first")[0].gpus;
        if admitted {
            assert_eq!(w.status, JobStatus::Placed, "{policy}");
            assert_eq!(w.tasks[0].gpus.len(), 6, "{policy}");
            assert!(!w.tasks[0].gpus.contains(&first_gpu[0]), "{policy}: a GPU given twice");
        } else {
            // No NUMA node has 6 GPUs even when empty: it can never run.
            assert_eq!(w.status, JobStatus::Rejected, "{policy}");
            let reason = &reasons["wide"];
            assert!(
                matches!(reason, Some(Reason::NoFitEver { fit: NoFit::Numa, detail }) if detail.contains(&format!("n01: {policy}: "))),
                "{reason:?}"
            );
        }
    }
}

#[test]
fn gpu_only_tasks_each_policy() {
    for policy in ["none", "best-effort", "restricted", "single-numa-node"] {
        let cluster = ClusterBuilder::flat(1).hardware(gpu_node().build()).build();
        let jobs = vec![JobBuilder::gang("g", 2, "nvidia.com/gpu=4").numa(policy).build()];
        let r = run(&cluster, &jobs, cfg());
        let t = tasks(&r, "g");
        assert_eq!(job(&r, "g").status, JobStatus::Placed, "{policy}");
        assert!(
            t.iter().all(|t| t.cpus.is_none()),
            "{policy}: no CPUs asked, none pinned"
        );
        let mut all: Vec<&String> = t.iter().flat_map(|t| &t.gpus).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 8, "{policy}: every GPU once");
        if policy != "none" {
            // Aligned: each task's four GPUs on one NUMA node, with that node's rails.
            assert_eq!(t[0].numa_nodes, vec![0], "{policy}");
            assert_eq!(t[1].numa_nodes, vec![1], "{policy}");
            assert_eq!(t[1].nics, vec!["mlx5_2", "mlx5_3"], "{policy}");
        }
    }
}

#[test]
fn finished_tasks_give_their_pus_back() {
    let cluster = ClusterBuilder::flat(1).hardware(two_socket().build()).build();
    let jobs = vec![
        JobBuilder::gang("first", 2, "cpu=16")
            .numa("single-numa-node")
            .runtime(10)
            .build(),
        JobBuilder::gang("second", 2, "cpu=16")
            .numa("single-numa-node")
            .submit(1)
            .runtime(10)
            .build(),
    ];
    let r = run(&cluster, &jobs, cfg());
    assert_eq!(job(&r, "second").start_time, Some(10));
    let cpus = |j: &str| tasks(&r, j).iter().map(|t| t.cpus.clone().unwrap()).collect::<Vec<_>>();
    assert_eq!(cpus("first"), vec!["0-15", "16-31"]);
    assert_eq!(cpus("second"), vec!["0-15", "16-31"]);
}

#[test]
fn pinned_and_unpinned_gpu_tasks_never_share_a_gpu() {
    let cluster = ClusterBuilder::flat(1).hardware(gpu_node().build()).build();
    let jobs = vec![
        JobBuilder::gang("shared-pool", 3, "cpu=1500m,nvidia.com/gpu=1").build(),
        JobBuilder::gang("pinned", 1, "cpu=4,nvidia.com/gpu=4")
            .numa("single-numa-node")
            .submit(1)
            .build(),
    ];
    let r = run(&cluster, &jobs, cfg());
    let shared: Vec<&String> = tasks(&r, "shared-pool").iter().flat_map(|t| &t.gpus).collect();
    assert_eq!(shared, vec!["0000:10:00.0", "0000:11:00.0", "0000:12:00.0"]);
    assert!(tasks(&r, "shared-pool").iter().all(|t| t.cpus.is_none()));
    // NUMA 0 has one GPU left: the pinned task goes to NUMA 1.
    let p = &tasks(&r, "pinned")[0];
    assert_eq!(p.numa_nodes, vec![1]);
    assert_eq!(p.cpus.as_deref(), Some("32-35"));
}

#[test]
fn full_cores_and_spread() {
    let cluster = ClusterBuilder::flat(1).hardware(two_socket().build()).build();
    let jobs = vec![
        JobBuilder::gang("whole", 2, "cpu=2")
            .numa("best-effort")
            .full_cores()
            .build(),
        // One PU of a two-thread core: kubelet's full-pcpus-only refuses it.
        JobBuilder::gang("half", 1, "cpu=1")
            .numa("best-effort")
            .full_cores()
            .build(),
        JobBuilder::gang("spread", 1, "cpu=20")
            .numa("best-effort")
            .cpu_placement("spread")
            .submit(1)
            .build(),
    ];
    let r = run(&cluster, &jobs, cfg());
    let whole: Vec<String> = tasks(&r, "whole").iter().map(|t| t.cpus.clone().unwrap()).collect();
    // Each task holds a whole core (both threads), so no two tasks share one.
    assert_eq!(whole, vec!["0-1", "2-3"]);
    let half = job(&r, "half");
    assert_ne!(half.status, JobStatus::Placed);
    assert!(half.reason.as_deref().unwrap().contains("n01"), "{:?}", half.reason);
    // 20 PUs need both NUMA nodes; spread takes 10 from each (whole cores first).
    let s = &tasks(&r, "spread")[0];
    assert_eq!(s.numa_nodes, vec![0, 1]);
    assert_eq!(s.cpus.as_deref(), Some("4-13,16-25"));
}

#[test]
fn the_planner_default_policy_applies_and_rejects_fractional_cpus() {
    let cluster = ClusterBuilder::flat(1).hardware(two_socket().build()).build();
    let config = PlannerConfig {
        numa: NumaConfig {
            default_policy: Policy::SingleNumaNode,
            weight: 1.0,
        },
        ..PlannerConfig::default()
    };
    let jobs = vec![
        JobBuilder::gang("whole", 1, "cpu=4").build(),
        JobBuilder::gang("fraction", 1, "cpu=1500m").build(),
        JobBuilder::gang("opt-out", 1, "cpu=1500m").numa("none").build(),
    ];
    let r = run(&cluster, &jobs, config);
    assert_eq!(tasks(&r, "whole")[0].cpus.as_deref(), Some("0-3"));
    let f = job(&r, "fraction");
    assert_eq!(f.status, JobStatus::Rejected);
    assert_eq!(
        f.reason.as_deref(),
        Some(
            "tasks[0] (worker): resources.cpu: expected a whole number of CPUs, got 1500m: a task with a \
             NUMA policy gets exclusive CPUs (ask for 1 or 2) (the planner's default topology policy is \
             single-numa-node)"
        )
    );
    assert_eq!(job(&r, "opt-out").status, JobStatus::Placed);
}

#[test]
fn nodes_described_by_resources_are_one_numa_node() {
    let cluster = ClusterBuilder::flat(2)
        .node_resources("cpu=8,memory=32Gi,nvidia.com/gpu=2")
        .build();
    let jobs = vec![
        JobBuilder::gang("j", 3, "cpu=4,memory=8Gi,nvidia.com/gpu=1")
            .numa("single-numa-node")
            .build(),
    ];
    let r = run(&cluster, &jobs, cfg());
    let t = tasks(&r, "j");
    let got: Vec<(&str, &str, Vec<String>)> = t
        .iter()
        .map(|t| (t.node.as_deref().unwrap(), t.cpus.as_deref().unwrap(), t.gpus.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("n01", "0-3", vec!["0".to_string()]),
            ("n01", "4-7", vec!["1".to_string()]),
            ("n02", "0-3", vec!["0".to_string()])
        ]
    );
}

#[test]
fn a_gang_under_a_leaf_with_numa_pinning() {
    // 4 leaves of 4 two-socket nodes; 8 single-NUMA tasks of 16 PUs must share a leaf:
    // two per node, one per NUMA node.
    let cluster = ClusterBuilder::fat_tree(&[4, 4], 1)
        .hardware(two_socket().build())
        .build();
    let jobs = vec![
        JobBuilder::gang("g", 8, "cpu=16,memory=32Gi")
            .numa("single-numa-node")
            .hard(1)
            .build(),
    ];
    let r = run(&cluster, &jobs, cfg());
    let j = job(&r, "g");
    assert_eq!(j.status, JobStatus::Placed);
    assert_eq!(j.allocated_hyper_node.as_deref(), Some("leaf-1"));
    for t in &j.tasks {
        assert_eq!(t.numa_nodes.len(), 1);
    }
    let mut per_node: Vec<(&str, Vec<u32>)> = Vec::new();
    for t in &j.tasks {
        let node = t.node.as_deref().unwrap();
        match per_node.iter_mut().find(|(n, _)| *n == node) {
            Some((_, v)) => v.extend(&t.numa_nodes),
            None => per_node.push((node, t.numa_nodes.clone())),
        }
    }
    for (node, mut numa) in per_node {
        numa.sort_unstable();
        assert_eq!(numa, vec![0, 1], "{node}");
    }
}

#[test]
fn fewer_numa_nodes_spanned_scores_higher() {
    // Both fragmenting tasks land on n01 (first by name, all else equal), leaving 6 PUs
    // on each of its NUMA nodes: a 12-PU best-effort task would span two there and one
    // on n02, so the numa-aware score sends it to n02.
    let cluster = ClusterBuilder::flat(2).hardware(two_socket().build()).build();
    let jobs = vec![
        JobBuilder::gang("frag", 2, "cpu=10").numa("single-numa-node").build(),
        JobBuilder::gang("wide", 1, "cpu=12")
            .numa("best-effort")
            .submit(1)
            .build(),
    ];
    let r = run(&cluster, &jobs, cfg());
    let frag: Vec<(&str, Vec<u32>)> = tasks(&r, "frag")
        .iter()
        .map(|t| (t.node.as_deref().unwrap(), t.numa_nodes.clone()))
        .collect();
    assert_eq!(frag, vec![("n01", vec![0]), ("n01", vec![1])]);
    let w = &tasks(&r, "wide")[0];
    assert_eq!((w.node.as_deref(), w.numa_nodes.clone()), (Some("n02"), vec![0]));
}

/// Issue 12 item 11: on nodes of different hardware the numa-aware score still decides.
/// n01 (two NUMA nodes of 8 PUs) sorts first, but a 12-PU task spans two NUMA nodes there
/// and one on n02 (one NUMA node of 16 PUs): under every policy but `none` it goes to
/// n02, outside every HyperNode and inside one.
#[test]
fn fewer_numa_nodes_spanned_wins_across_different_hardware() {
    let narrow = MachineBuilder::new(2, 1, 8, 1).build();
    let wide = MachineBuilder::new(1, 1, 16, 1).build();
    let flat = ClusterBuilder::flat(2)
        .node_hardware(0, narrow.clone())
        .node_hardware(1, wide.clone())
        .build();
    let leaf = ClusterBuilder::fat_tree(&[2], 1)
        .node_hardware(0, narrow)
        .node_hardware(1, wide)
        .build();
    for (where_, cluster, hard) in [("outside", &flat, false), ("inside", &leaf, true)] {
        for policy in ["best-effort", "restricted", "single-numa-node", "none"] {
            let mut job = JobBuilder::gang("w", 1, "cpu=12").numa(policy);
            if hard {
                job = job.hard(1);
            }
            let r = run(cluster, &[job.build()], cfg());
            let t = &tasks(&r, "w")[0];
            let node = names_of(&cluster.nodes, 1);
            let want = if policy == "none" {
                names_of(&cluster.nodes, 0)
            } else {
                node
            };
            assert_eq!(t.node.as_deref(), Some(want.as_str()), "{where_} a HyperNode, {policy}");
        }
    }
}

fn names_of(nodes: &[hyperplan_shared::NodeSpec], i: usize) -> String {
    nodes[i].name.clone()
}

/// Issue 12 item 9: a machine of more than 64 NUMA nodes was cut to 64 in silence (its
/// other PUs counted as NUMA node 0's). It is not added, and the warning says why.
#[test]
fn a_machine_beyond_the_numa_or_pu_limits_is_refused_saying_why() {
    let huge = MachineBuilder::new(65, 1, 1, 1).build();
    assert_eq!(huge.numa_nodes.len(), 65);
    let cluster = ClusterBuilder::flat(2).node_hardware(0, huge).build();
    let mut p = hyperplan_core::sim::planner_for(&cluster, cfg());
    let out = p.tick(0);
    let warned: Vec<String> = out
        .iter()
        .filter_map(|c| match c {
            hyperplan_core::Command::Warn(w) => Some(w.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        warned,
        vec!["node \"n01\" not added: 65 NUMA nodes; hyperplan places on machines of at most 64".to_string()]
    );
    let r = run(&cluster, &[JobBuilder::gang("j", 2, "cpu=1").build()], cfg());
    assert!(!job(&r, "j").tasks.iter().any(|t| t.node.as_deref() == Some("n01")));
    // Nor one of more than 16,384 PUs (what the agent's probe refuses to build).
    let many = MachineBuilder::new(2, 1, 4097, 2).build();
    let cluster = ClusterBuilder::flat(1).node_hardware(0, many).build();
    let out = hyperplan_core::sim::planner_for(&cluster, cfg()).tick(0);
    assert!(
        out.iter().any(|c| matches!(c, hyperplan_core::Command::Warn(w)
            if w == "node \"n01\" not added: 16388 PUs; hyperplan places on machines of at most 16384")),
        "{out:?}"
    );
}
