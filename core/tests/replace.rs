//! Scenario tests for `onNodeLost: replace` (issue 25): the tasks of a lost node start
//! again on spare nodes inside the job's HyperNode, keeping their ranks, while the other
//! ranks run on; several lost at once together; no spare means a requeue or a failure
//! that says why; a node that comes back has its old tasks killed; all of it still after
//! a restart or a failover, once discovery and the agents are back (issue 37). Agents'
//! nodes, the invariants checked after every tick.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use hyperplan_core::config::HealthConfig;
use hyperplan_core::model::events::TaskOnNode;
use hyperplan_core::model::kill::KillReason;
use hyperplan_core::model::reason::Reason;
use hyperplan_core::model::record::JobRecord;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, Rig};
use hyperplan_core::{Command, Event, PlannerConfig};
use hyperplan_shared::JobSpec;
use hyperplan_shared::job::OnNodeLost;
use hyperplan_shared::report::JobStatus;

/// Nodes lost after 10 s silent.
fn config() -> PlannerConfig {
    PlannerConfig {
        health: HealthConfig {
            node_lost_after: Duration::from_secs(10),
            ..HealthConfig::default()
        },
        ..PlannerConfig::default()
    }
}

/// 2 leaves of 4 nodes (cpu=8), agents registered, nodes lost after 10 s silent.
fn rig() -> Rig {
    let cluster = ClusterBuilder::fat_tree(&[4, 2], 1).node_resources("cpu=8").build();
    let mut rig = Rig::new(config(), cluster.nodes);
    rig.p.push(Event::StaticHyperNodes(cluster.hyper_nodes));
    rig.register_all();
    rig.tick();
    rig
}

fn replacing(name: &str, replicas: u32) -> JobSpec {
    let mut j = JobBuilder::gang(name, replicas, "cpu=8").hard(1).build();
    j.run.on_node_lost = Some(OnNodeLost::Replace);
    j
}

/// Silences `nodes` and steps until the planner declares them lost; the commands.
fn lose(rig: &mut Rig, nodes: &[&str]) -> Vec<Command> {
    rig.silent.extend(nodes.iter().map(|n| n.to_string()));
    let mut all = Vec::new();
    for _ in 0..30 {
        let cmds = rig.step();
        let lost = cmds.iter().any(|c| matches!(c, Command::Warn(w) if w.contains("lost")));
        all.extend(cmds);
        if lost {
            return all;
        }
    }
    panic!("{nodes:?} were never lost");
}

fn infos(cmds: &[Command]) -> Vec<String> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Info(i) | Command::Warn(i) => Some(i.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_lost_nodes_task_starts_again_inside_the_leaf_keeping_its_rank() {
    let mut rig = rig();
    let id = rig.run(replacing("train", 3));
    assert_eq!(
        rig.ranks("train"),
        [(0, "n01".into()), (1, "n02".into()), (2, "n03".into())]
    );
    let cmds = lose(&mut rig, &["n02"]);
    let said = infos(&cmds).join("\n");
    assert!(said.contains("task worker-1 (rank 1) lost"), "{said}");
    assert!(
        said.contains("lost tasks started again: worker-1 on n04 (restart 1)"),
        "{said}"
    );
    // Rank 1 on the spare of leaf-1; ranks 0 and 2 untouched, never killed.
    assert_eq!(
        rig.ranks("train"),
        [(0, "n01".into()), (1, "n04".into()), (2, "n03".into())]
    );
    assert!(!cmds.iter().any(|c| matches!(c, Command::Kill { .. })), "{cmds:?}");
    let placed: Vec<(String, u32, String)> = cmds
        .iter()
        .filter_map(|c| match c {
            Command::Place(p) => Some((p.task.to_string(), p.rank, p.node.to_string())),
            _ => None,
        })
        .collect();
    assert_eq!(placed, [("worker-1".to_string(), 1, "n04".to_string())]);
    let job = rig.job("train");
    assert_eq!(job.status, JobStatus::Running, "{:?}", job.reason);
    assert_eq!(rig.p.job_restarts("train"), Some(1));
    // n2 comes back: its agent still runs the old rank 1, which is killed as an orphan.
    rig.silent.clear();
    rig.register("n02");
    rig.p.push(Event::TasksOnNode {
        node: "n02".into(),
        tasks: vec![TaskOnNode {
            job: "train".into(),
            job_id: id.into(),
            task: "worker-1".into(),
            index: 1,
            pid: 4242,
            cpu_cores: 0.0,
            rss_bytes: 0,
        }],
    });
    let cmds = rig.step();
    let kills: Vec<(String, KillReason)> = cmds
        .iter()
        .filter_map(|c| match c {
            Command::Kill { node, why, .. } => Some((node.to_string(), *why)),
            _ => None,
        })
        .collect();
    assert_eq!(kills, [("n02".to_string(), KillReason::Orphan)]);
    assert_eq!(rig.ranks("train")[1], (1, "n04".into()));
}

#[test]
fn several_nodes_lost_at_once_are_replaced_together() {
    let mut rig = rig();
    // Both of its nodes at once: the two spares of leaf-1 take both ranks.
    rig.run(replacing("train", 2));
    let cmds = lose(&mut rig, &["n01", "n02"]);
    let said = infos(&cmds).join("\n");
    assert!(said.contains("worker-0 on n03, worker-1 on n04 (restart 1)"), "{said}");
    assert_eq!(rig.ranks("train"), [(0, "n03".into()), (1, "n04".into())]);
    assert_eq!(rig.p.job_restarts("train"), Some(1));
}

#[test]
fn no_spare_in_the_leaf_means_requeue_or_failure_saying_why() {
    for requeue in [true, false] {
        let mut rig = rig();
        let mut spec = replacing("train", 3);
        spec.run.requeue = requeue;
        rig.run(spec);
        // The leaf's last node is taken; leaf-2 is free but outside the tier limit.
        rig.run(JobBuilder::gang("other", 1, "cpu=8").build());
        assert_eq!(rig.job("other").tasks[0].node.as_deref(), Some("n04"));
        let cmds = lose(&mut rig, &["n02"]);
        let said = infos(&cmds).join("\n");
        assert!(
            said.contains("job train: no spare node in leaf-1 to start its lost task worker-1 again"),
            "{said}"
        );
        // Its other ranks are killed (they hold until their ends are reported).
        let kills = cmds.iter().filter(|c| matches!(c, Command::Kill { .. })).count();
        assert_eq!(kills, 2, "{cmds:?}");
        let job = rig.job("train");
        let want = if requeue { JobStatus::Pending } else { JobStatus::Failed };
        assert_eq!(job.status, want, "requeue {requeue}: {:?}", job.reason);
        let reason = rig.reason("train");
        let lost = match &reason {
            Some(Reason::Requeued(why)) if requeue => Some(&**why),
            Some(why) if !requeue => Some(why),
            _ => None,
        };
        assert!(
            matches!(lost, Some(Reason::NoSpareNode { within, tasks }) if within == "leaf-1" && tasks == &["worker-1"]),
            "{reason:?}"
        );
    }
}

/// How a restarted planner learns its HyperNodes again, as the daemon does: from a
/// polled source (a Slurm `topology.conf`, here), or from the labels agents bring.
#[derive(Clone, Copy, Debug)]
enum Discovery {
    Polled,
    Labels,
}

/// `rig()`'s cluster (2 leaves of 4 nodes, cpu=8), its nodes labelled `spine` and `leaf`.
fn labelled() -> hyperplan_shared::ClusterSpec {
    let mut b = ClusterBuilder::fat_tree(&[4, 2], 1).node_resources("cpu=8");
    for i in 0..8 {
        b = b
            .label(i, "spine", "s1")
            .label(i, "leaf", if i < 4 { "l1" } else { "l2" });
    }
    b.label_discovery("fabric", &["spine", "leaf"]).build()
}

/// The daemon's planner (records written) for `labelled()`, nodes lost after 10 s
/// silent, no agent registered and no HyperNode known yet.
fn daemon(discovery: Discovery) -> Rig {
    let cluster = labelled();
    let mut rig = Rig::new(config(), cluster.nodes).persisting();
    if let Discovery::Labels = discovery {
        rig.p.push(Event::LabelDiscovery(cluster.label_discovery));
    }
    rig
}

/// A standby or restarted planner on `old`'s records: ticks once before anything else
/// (the daemon's start), then its source's HyperNodes arrive (labels come with the
/// agents) and every agent registers again.
fn taken_over(old: &Rig, discovery: Discovery) -> Rig {
    let (mut rig, warnings) = started_on(old, discovery);
    assert!(warnings.is_empty(), "{warnings:?}");
    rig.tick();
    discover(&mut rig, discovery);
    rig.register_all();
    for _ in 0..3 {
        rig.step();
    }
    rig
}

/// A planner started from `old`'s stored live records 5 s later, configured as `old`.
fn started_on(old: &Rig, discovery: Discovery) -> (Rig, Vec<String>) {
    let (mut rig, warnings) = old.restarted(config(), 5_000);
    if let Discovery::Labels = discovery {
        rig.p.push(Event::LabelDiscovery(labelled().label_discovery));
    }
    (rig, warnings)
}

/// The polled source's HyperNodes, as its poller sends them (labels need nothing).
fn discover(rig: &mut Rig, discovery: Discovery) {
    use hyperplan_core::discovery::Found;
    use hyperplan_core::model::components::SourceKind;
    if let Discovery::Polled = discovery {
        rig.p.push(Event::Discovered {
            source: "slurm".into(),
            kind: SourceKind::Slurm,
            at: rig.now / 1000,
            result: Ok(Found::HyperNodes {
                specs: labelled().hyper_nodes,
                warnings: Vec::new(),
                summary: "2 leaves, 1 spine".into(),
                degraded_links: Vec::new(),
            }),
        });
    }
}

/// `train` (3 ranks, hard tier 1, `replace`) running on n01..n03 of leaf 1; n04 idle.
fn running_train(discovery: Discovery) -> Rig {
    let mut rig = daemon(discovery);
    discover(&mut rig, discovery);
    rig.register_all();
    rig.tick();
    rig.run(replacing("train", 3));
    assert_eq!(
        rig.ranks("train"),
        [(0, "n01".into()), (1, "n02".into()), (2, "n03".into())]
    );
    rig
}

/// n02 is lost: its rank starts again on n04, the idle node of its leaf, the others
/// untouched; the job runs on.
fn lost_rank_starts_again_in_the_leaf(rig: &mut Rig, leaf: &str) {
    let job = rig.job("train");
    assert_eq!(job.allocated_hyper_node.as_deref(), Some(leaf), "{job:?}");
    let cmds = lose(rig, &["n02"]);
    let said = infos(&cmds).join("\n");
    assert!(
        said.contains("lost tasks started again: worker-1 on n04 (restart 1)"),
        "{said}"
    );
    assert_eq!(
        rig.ranks("train"),
        [(0, "n01".into()), (1, "n04".into()), (2, "n03".into())]
    );
    let job = rig.job("train");
    assert_eq!(job.status, JobStatus::Running, "{:?}", job.reason);
}

#[test]
fn after_a_restart_a_lost_task_starts_again_inside_its_leaf() {
    for discovery in [Discovery::Polled, Discovery::Labels] {
        let old = running_train(discovery);
        let leaf = old.job("train").allocated_hyper_node.unwrap();
        assert!(!leaf.starts_with('<'), "{discovery:?}: {leaf}");
        let mut rig = taken_over(&old, discovery);
        lost_rank_starts_again_in_the_leaf(&mut rig, &leaf);
    }
}

#[test]
fn after_a_failover_a_lost_task_starts_again_inside_its_leaf() {
    for discovery in [Discovery::Polled, Discovery::Labels] {
        let old = running_train(discovery);
        let leaf = old.job("train").allocated_hyper_node.unwrap();
        // The planner that took over first ran a tick with no HyperNode known (the
        // nodes of the job's tasks stand-ins in none): the record it wrote names the
        // virtual root. Its standby takes over from that record.
        let (mut first, _) = started_on(&old, discovery);
        first.tick();
        let id = first.p.job("train").unwrap().id;
        let stored = JobRecord::decode(&first.store[&id].1).unwrap();
        assert_eq!(
            stored.state.allocated_hyper_node.as_deref(),
            Some("<cluster-top-hypernode>"),
            "{discovery:?}"
        );
        let mut rig = taken_over(&first, discovery);
        lost_rank_starts_again_in_the_leaf(&mut rig, &leaf);
    }
}
