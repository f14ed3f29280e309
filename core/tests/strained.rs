//! A node whose agent cannot start tasks now (its shepherds' forks fail: out of processes
//! or memory, issue 38) takes no new task while it says so, keeps what runs there, reads
//! Ready all along, and takes tasks again once its agent says it can. Agents' nodes, the
//! invariants checked after every tick.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hyperplan_core::testing::{ClusterBuilder, JobBuilder, Rig};
use hyperplan_core::{Command, Event, PlannerConfig};
use hyperplan_shared::report::JobStatus;
use hyperplan_shared::status::{NodeState, NodeStatus};

const WHY: &str =
    "cannot start a task's shepherd: Resource temporarily unavailable (os error 11) (short of processes or memory)";

fn rig() -> Rig {
    let cluster = ClusterBuilder::flat(2).node_resources("cpu=8").build();
    let mut rig = Rig::new(PlannerConfig::default(), cluster.nodes);
    rig.register_all();
    rig.tick();
    rig
}

fn node(rig: &Rig, name: &str) -> NodeStatus {
    rig.p.nodes().into_iter().find(|n| n.name == name).expect("node listed")
}

fn strained(rig: &mut Rig, node: &str, why: Option<&str>) -> Vec<Command> {
    rig.p.push(Event::NodeStrained {
        node: node.into(),
        reason: why.map(str::to_string),
    });
    rig.step()
}

fn said(cmds: &[Command]) -> Vec<String> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Warn(l) | Command::Info(l) if l.contains(" start ") => Some(l.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_strained_node_takes_nothing_new_until_its_agent_can_start_tasks() {
    let mut rig = rig();
    let old = rig.run(JobBuilder::gang("old", 1, "cpu=4").build());
    let busy = rig.node_of("old", "worker-0");
    let other = if busy == "n01" { "n02" } else { "n01" };

    // Said once, on a change only; the node reads Ready with why it takes nothing.
    let cmds = strained(&mut rig, &busy, Some(WHY));
    assert_eq!(
        said(&cmds),
        [format!(
            "node {busy}: {WHY}; it takes no new task until its agent can start them again"
        )]
    );
    assert!(said(&strained(&mut rig, &busy, Some(WHY))).is_empty());
    let n = node(&rig, &busy);
    assert_eq!(n.state, NodeState::Ready);
    assert_eq!(
        n.reason.as_deref(),
        Some(format!("takes no new task until its agent can start them again: {WHY}").as_str())
    );
    assert_eq!(n.cpus.free, 0, "{n:?}");
    // What runs there goes on.
    assert_eq!(rig.job("old").status, JobStatus::Running);

    // A job that fits either node goes to the other one.
    rig.submit_as(JobBuilder::gang("next", 1, "cpu=2").build(), "alice");
    rig.step();
    assert_eq!(rig.node_of("next", "worker-0"), other);

    // Both strained: a job waits.
    strained(&mut rig, other, Some(WHY));
    rig.submit_as(JobBuilder::gang("third", 1, "cpu=2").build(), "alice");
    rig.step();
    rig.step();
    assert_eq!(rig.job("third").status, JobStatus::Pending);

    // The agent can again: said, and the job placed there.
    let cmds = strained(&mut rig, &busy, None);
    assert_eq!(
        said(&cmds),
        [format!(
            "node {busy}: its agent can start tasks again; it takes tasks again"
        )]
    );
    rig.drive_until(5, |r| r.job("third").status == JobStatus::Placed);
    assert_eq!(rig.node_of("third", "worker-0"), busy);
    assert_eq!(node(&rig, &busy).reason, None);
    let _ = old;
}
