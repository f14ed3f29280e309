//! The placements of a node's tasks whose start its agent has not reported: sent again
//! ([`Command::Relaunch`]) when the node's agent registers. A `Launch` sent on a link that
//! then dropped is otherwise lost, and its task would hold its resources for ever; the
//! agent starts nothing twice, so sending one it already has is harmless.

use bevy_ecs::prelude::*;

use super::placement;
use crate::model::commands::{Command, Placement};
use crate::model::components::{Job, JobPhase, JobState, Node, Task, TaskPhase, TaskState};
use crate::model::components::{JobId, JobOwner};
use crate::model::taskrun::TaskRun;
use crate::model::tick::{Outbox, Reregistered};
use crate::names::NodeNames;
use crate::numa::node::NodeHardware;

/// Placed (and dispatched) on `node`, of a job still running, and not known to have
/// started; in job name, then rank order.
pub(crate) fn unstarted_on(world: &World, node: &str) -> Vec<Placement> {
    let Some(&node_e) = world.resource::<NodeNames>().0.get(node) else {
        return Vec::new();
    };
    let Some(mut tasks) = world.try_query::<(&Task, &TaskState, Option<&TaskRun>)>() else {
        return Vec::new(); // no task was ever made
    };
    let (Some(n), hw) = (world.get::<Node>(node_e), world.get::<NodeHardware>(node_e)) else {
        return Vec::new();
    };
    let mut out: Vec<Placement> = tasks
        .iter(world)
        .filter(|(_, ts, run)| {
            ts.phase == TaskPhase::Running
                && ts.dispatched
                && ts.node == Some(node_e)
                && !run.is_some_and(TaskRun::accepted)
        })
        .filter_map(|(task, ts, _)| {
            let job = world.get::<Job>(task.job)?;
            let st = world.get::<JobState>(task.job)?;
            let owner = world.get::<JobOwner>(task.job)?;
            (st.phase == JobPhase::Running)
                .then(|| placement(job, owner, world.get::<JobId>(task.job), task, ts, n, hw, st))
        })
        .collect();
    out.sort_by(|a, b| a.job().cmp(b.job()).then(a.rank.cmp(&b.rank)));
    out
}

/// After `dispatch`: a [`Command::Relaunch`] for each node whose agent registered this
/// tick and has placed tasks it never reported started (see [`unstarted_on`]).
pub(crate) fn relaunch(world: &mut World) {
    let nodes = std::mem::take(&mut world.resource_mut::<Reregistered>().0);
    if nodes.is_empty() {
        return;
    }
    let _span = tracing::info_span!("relaunch").entered();
    for node in nodes {
        let placements = unstarted_on(world, &node);
        if !placements.is_empty() {
            world
                .resource_mut::<Outbox>()
                .0
                .push(Command::Relaunch { node, placements });
        }
    }
}
