//! Scenario tests for an admin's node drain, resume and removal (issue 26): a drained node
//! takes no new task while its running ones finish (`draining`, then `drained`); `--now`
//! ends them as a lost node's, so `onNodeLost` decides (replace keeps the rank inside the
//! HyperNode, requeue, fail); resume puts it back; remove needs it idle and drained (or
//! its agent gone) and takes it out of its HyperNodes, an agent registering again joins
//! anew; only admins may; drains survive a restart. Agents' nodes, the invariants checked
//! after every tick.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hyperplan_core::caller::Caller;
use hyperplan_core::model::kill::KillReason;
use hyperplan_core::model::reason::Reason;
use hyperplan_core::requests::nodes::NodeAdminError;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, Rig};
use hyperplan_core::{Command, PlannerConfig};
use hyperplan_shared::job::OnNodeLost;
use hyperplan_shared::report::{JobStatus, TaskStatus};
use hyperplan_shared::status::{DrainState, NodeStatus};
use hyperplan_shared::taskend::{TaskEnd, TaskOutcome};

const ROOT: Caller<'static> = Caller {
    user: "root",
    admin: true,
    private_data: false,
    groups: &[],
};

/// 2 leaves of 4 nodes (cpu=8), agents registered, the store kept.
fn rig() -> Rig {
    let cluster = ClusterBuilder::fat_tree(&[4, 2], 1).node_resources("cpu=8").build();
    let mut rig = Rig::new(PlannerConfig::default(), cluster.nodes).persisting();
    rig.p.push(hyperplan_core::Event::StaticHyperNodes(cluster.hyper_nodes));
    rig.register_all();
    rig.tick();
    rig
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn node(rig: &Rig, name: &str) -> NodeStatus {
    rig.p.nodes().into_iter().find(|n| n.name == name).expect("node listed")
}

fn drain_state(rig: &Rig, name: &str) -> Option<DrainState> {
    node(rig, name).drain.map(|d| d.state)
}

#[test]
fn a_drained_node_takes_nothing_new_and_its_task_finishes_then_resume() {
    let mut rig = rig();
    let id = rig.run(JobBuilder::gang("old", 1, "cpu=8").build());
    let on = rig.node_of("old", "worker-0");
    let answer = rig
        .p
        .drain_nodes(
            std::slice::from_ref(&on),
            Some("firmware".into()),
            false,
            ROOT,
            1_795_737_600,
        )
        .unwrap();
    assert_eq!(answer.nodes[0].note, "draining: 1 task(s) run on until they end");
    let cmds = rig.step();
    assert!(
        cmds.iter().any(|c| matches!(c, Command::PersistDrains(_))),
        "the drain is written: {cmds:?}"
    );
    assert!(
        !cmds.iter().any(|c| matches!(c, Command::Kill { .. })),
        "nothing killed"
    );
    let d = node(&rig, &on).drain.unwrap();
    assert_eq!(
        (d.state, d.reason.as_deref(), d.by.as_str(), d.since),
        (DrainState::Draining, Some("firmware"), "root", 1_795_737_600)
    );
    // 7 nodes take 7 jobs of one node each; the eighth waits: the drained node is not one.
    for i in 0..8 {
        rig.submit_as(JobBuilder::gang(&format!("j{i}"), 1, "cpu=8").build(), "alice");
    }
    rig.step();
    let placed: Vec<String> = (0..8)
        .filter(|i| rig.job(&format!("j{i}")).status == JobStatus::Placed)
        .map(|i| rig.node_of(&format!("j{i}"), "worker-0"))
        .collect();
    assert_eq!(placed.len(), 7, "{placed:?}");
    assert!(!placed.contains(&on), "{placed:?}");
    // The old task ends: drained, and the waiting job still does not go there.
    rig.ended(
        "old",
        id,
        "worker-0",
        TaskEnd {
            outcome: TaskOutcome::Exited,
            exit_code: Some(0),
            ..TaskEnd::default()
        },
    );
    rig.step();
    assert_eq!(rig.job("old").status, JobStatus::Completed);
    assert_eq!(drain_state(&rig, &on), Some(DrainState::Drained));
    assert_eq!(rig.job("j7").status, JobStatus::Pending);
    // Resumed: it takes the waiting job.
    let answer = rig.p.resume_nodes(std::slice::from_ref(&on), ROOT).unwrap();
    assert_eq!(answer.nodes[0].note, "resumed: it takes tasks again");
    rig.step();
    assert_eq!(drain_state(&rig, &on), None);
    assert_eq!(rig.job("j7").status, JobStatus::Placed);
    assert_eq!(rig.node_of("j7", "worker-0"), on);
}

#[test]
fn drain_now_replaces_the_ranks_inside_the_leaf_and_requeues_or_fails_the_others() {
    // 3 leaves of 4: `again` fills leaf-1, `once` leaf-2, `train` three of leaf-3.
    let cluster = ClusterBuilder::fat_tree(&[4, 3], 1).node_resources("cpu=8").build();
    let mut rig = Rig::new(PlannerConfig::default(), cluster.nodes).persisting();
    rig.p.push(hyperplan_core::Event::StaticHyperNodes(cluster.hyper_nodes));
    rig.register_all();
    rig.tick();
    let mut requeued = JobBuilder::gang("again", 4, "cpu=8").hard(1).build();
    requeued.run.requeue = true;
    rig.run(requeued);
    rig.run(JobBuilder::gang("once", 4, "cpu=8").hard(1).build());
    let mut replaced = JobBuilder::gang("train", 3, "cpu=8").hard(1).build();
    replaced.run.on_node_lost = Some(OnNodeLost::Replace);
    rig.run(replaced);
    assert_eq!(
        rig.ranks("train"),
        [(0, "n09".into()), (1, "n10".into()), (2, "n11".into())]
    );
    let again_on = rig.node_of("again", "worker-0");
    let once_on = rig.node_of("once", "worker-0");
    rig.p
        .drain_nodes(&names(&["n10", &again_on, &once_on]), None, true, ROOT, 5)
        .unwrap();
    let cmds = rig.step();
    let drained: Vec<(String, String)> = cmds
        .iter()
        .filter_map(|c| match c {
            Command::Kill {
                job,
                node,
                why: KillReason::Drained,
                ..
            } => Some((job.to_string(), node.to_string())),
            _ => None,
        })
        .collect();
    assert_eq!(
        drained,
        [
            ("again".to_string(), again_on.clone()),
            ("once".to_string(), once_on.clone()),
            ("train".to_string(), "n10".to_string())
        ],
        "each task on a drained node is killed: {cmds:?}"
    );
    // Rank 1 again on leaf-3's spare; ranks 0 and 2 untouched.
    assert_eq!(
        rig.ranks("train"),
        [(0, "n09".into()), (1, "n12".into()), (2, "n11".into())]
    );
    assert_eq!(rig.p.job_restarts("train"), Some(1));
    // `requeue: true`: its other tasks are killed and it waits to run again.
    let again = rig.job("again");
    assert_eq!(again.status, JobStatus::Pending, "{:?}", again.reason);
    let once = rig.job("once");
    assert_eq!(once.status, JobStatus::Failed);
    let why = rig.reason("once");
    assert!(
        matches!(&why, Some(Reason::TaskEnded { how, .. }) if how.contains(&format!("node {once_on} was drained at once by root"))),
        "{why:?}"
    );
    let lost: Vec<_> = once
        .tasks
        .iter()
        .filter(|t| t.state == Some(TaskStatus::Lost))
        .collect();
    assert_eq!(lost.len(), 1, "{:?}", once.tasks);
    for n in ["n10", &again_on, &once_on] {
        assert_eq!(drain_state(&rig, n), Some(DrainState::Drained), "{n}");
    }
}

#[test]
fn remove_takes_an_idle_drained_node_out_and_its_agent_joins_anew() {
    let mut rig = rig();
    rig.run(JobBuilder::gang("busy", 1, "cpu=8").build());
    let on = rig.node_of("busy", "worker-0");
    // Not drained, agent connected: refused, saying what to do.
    let e = rig.p.remove_nodes(&names(&["n08"]), ROOT).unwrap_err();
    assert_eq!(e, NodeAdminError::InUse("n08".into()));
    insta::assert_snapshot!(e.to_string(), @"node n08 is not drained and its agent is connected: drain it first (`hyperplan nodes drain n08`), or stop its agent, then remove it");
    // Drained but busy: refused, naming the jobs.
    rig.p
        .drain_nodes(std::slice::from_ref(&on), None, false, ROOT, 5)
        .unwrap();
    rig.step();
    let e = rig.p.remove_nodes(std::slice::from_ref(&on), ROOT).unwrap_err();
    assert!(matches!(e, NodeAdminError::Busy { tasks: 1, .. }), "{e}");
    assert!(e.to_string().contains("(of busy)"), "{e}");
    // Drained and idle: removed, from the HyperNodes too.
    rig.p.drain_nodes(&names(&["n08"]), None, false, ROOT, 5).unwrap();
    rig.step();
    assert!(rig.p.hyper_nodes_of("n08").contains(&"leaf-2".to_string()));
    rig.p.remove_nodes(&names(&["n08"]), ROOT).unwrap();
    let cmds = rig.step();
    assert!(
        cmds.iter()
            .any(|c| matches!(c, Command::Info(i) if i.contains("node n08 removed")))
    );
    assert!(rig.p.nodes().iter().all(|n| n.name != "n08"));
    assert!(rig.p.hyper_nodes_of("n08").is_empty());
    let tree = rig.p.hyper_nodes();
    let leaf = tree
        .hyper_nodes
        .iter()
        .find(|h| h.name == "leaf-2")
        .unwrap_or_else(|| panic!("{tree:#?}"));
    assert_eq!(leaf.nodes, 3, "n08 left leaf-2");
    // Its agent registers again: a new node, not drained, that takes work.
    rig.register("n08");
    rig.step();
    assert_eq!(drain_state(&rig, "n08"), None);
    assert!(rig.p.hyper_nodes_of("n08").contains(&"leaf-2".to_string()));
    // A node whose agent is gone may be removed without a drain.
    rig.silent.push("n07".into());
    rig.p.push(hyperplan_core::Event::LinkDown {
        node: "n07".into(),
        link: 1,
        at_ms: rig.now,
    });
    rig.step();
    rig.p.remove_nodes(&names(&["n07"]), ROOT).unwrap();
    rig.step();
    assert!(rig.p.nodes().iter().all(|n| n.name != "n07"));
}

#[test]
fn only_admins_change_nodes_and_unknown_names_are_refused() {
    let mut rig = rig();
    let alice = Caller::user("alice");
    let e = rig.p.drain_nodes(&names(&["n01"]), None, false, alice, 5).unwrap_err();
    insta::assert_snapshot!(e.to_string(), @r#"only an admin may drain nodes: the certificate of "alice" has the role user (use an admin's certificate, made with `hyperplan certs issue --user NAME --role admin`)"#);
    assert!(rig.p.resume_nodes(&names(&["n01"]), alice).is_err());
    assert!(rig.p.remove_nodes(&names(&["n01"]), alice).is_err());
    let e = rig
        .p
        .drain_nodes(&names(&["n01", "nope"]), None, false, ROOT, 5)
        .unwrap_err();
    insta::assert_snapshot!(e.to_string(), @r#"no node named "nope": the planner knows 8 node(s) (`hyperplan nodes` lists them)"#);
    let e = rig
        .p
        .drain_nodes(&names(&["n01"]), Some("a\nb".into()), false, ROOT, 5)
        .unwrap_err();
    assert!(matches!(e, NodeAdminError::Reason(_)), "{e}");
    assert_eq!(
        rig.p.drain_nodes(&[], None, false, ROOT, 5).unwrap_err(),
        NodeAdminError::NoNodes("drain")
    );
    // Nothing was changed by any of these.
    rig.step();
    assert!(rig.p.nodes().iter().all(|n| n.drain.is_none()));
    assert_eq!(rig.drains, None);
}

#[test]
fn drains_survive_a_restart_before_and_after_the_agents_register() {
    let mut rig = rig();
    rig.p
        .drain_nodes(&names(&["n01", "n02"]), Some("rack 1 power".into()), false, ROOT, 9)
        .unwrap();
    rig.step();
    rig.p.resume_nodes(&names(&["n02"]), ROOT).unwrap();
    rig.step();
    let (mut after, warnings) = rig.restarted(PlannerConfig::default(), 5_000);
    assert!(warnings.is_empty(), "{warnings:?}");
    after.tick();
    // Before its agent registers it is listed, drained, from the store.
    let n01 = node(&after, "n01");
    assert_eq!(n01.drain.as_ref().map(|d| d.by.as_str()), Some("root"));
    assert_eq!(n01.reason.as_deref(), Some("drained while its agent is away"));
    after.register_all();
    after.step();
    assert_eq!(drain_state(&after, "n01"), Some(DrainState::Drained));
    assert_eq!(drain_state(&after, "n02"), None);
    // 8 one-node jobs: 7 placed, none on n01.
    for i in 0..8 {
        after.submit_as(JobBuilder::gang(&format!("j{i}"), 1, "cpu=8").build(), "alice");
    }
    after.step();
    let on: Vec<String> = (0..8)
        .filter(|i| after.job(&format!("j{i}")).status == JobStatus::Placed)
        .map(|i| after.node_of(&format!("j{i}"), "worker-0"))
        .collect();
    assert_eq!(on.len(), 7);
    assert!(!on.contains(&"n01".to_string()), "{on:?}");
}
