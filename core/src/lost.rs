//! Lost nodes: a node with an agent link NotReady for longer than `nodeLostAfter` (see
//! [`HealthConfig::node_lost_after`]) has its running tasks declared lost. Their
//! resources are free, and their jobs fail, or go back to pending when they ask
//! `requeue` (see `lifecycle`). If the node comes back, its agent still lists those
//! tasks and they are killed as orphans. Each tick looks at the NotReady nodes only.
//!
//! [`HealthConfig::node_lost_after`]: crate::config::HealthConfig::node_lost_after

use std::sync::Arc;

use bevy_ecs::prelude::*;
use hyperplan_shared::taskend::{TaskEnd, TaskOutcome};

use super::commands::Command;
use super::components::{Job, Node, Retired, Task, TaskState};
use super::health::Away;
use super::lifecycle::end_task;
use super::queues::{CapacityEpoch, NowMillis, Outbox};
use super::taskrun::TaskRun;
use crate::config::PlannerConfig;

/// Called by the node-health system each tick: nodes NotReady past the limit lose their
/// tasks, in node name order, each node's tasks in (job name, rank) order.
pub(crate) fn lose_tasks(world: &mut World) {
    if world.resource::<Away>().0.is_empty() {
        return;
    }
    let now = world.resource::<NowMillis>().0;
    let after = world.resource::<PlannerConfig>().health.node_lost_after;
    let limit = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
    let due: Vec<Entity> = world
        .resource::<Away>()
        .0
        .iter()
        .filter(|&(_, &since)| now.saturating_sub(since) > limit)
        .map(|(&e, _)| e)
        .collect();
    if due.is_empty() {
        return;
    }
    let mut away = world.resource_mut::<Away>();
    for e in &due {
        away.0.remove(e);
    }
    let mut due: Vec<(Arc<str>, Entity)> = due
        .into_iter()
        .filter_map(|e| Some((world.get::<Node>(e)?.name.clone(), e)))
        .collect();
    due.sort();
    let mut tasks = world.query_filtered::<(Entity, &Task, &TaskState), Without<Retired>>();
    for (name, node) in due {
        // Rare (once per lost node): a scan of the live tasks finds the node's.
        let mut lost: Vec<(String, u32, Entity, Entity)> = tasks
            .iter(world)
            .filter(|(_, _, ts)| ts.is_running() && ts.node == Some(node))
            .filter_map(|(e, t, ts)| {
                let job = world.get::<Job>(t.job)?;
                Some((job.spec.name.clone(), ts.rank.unwrap_or(0), t.job, e))
            })
            .collect();
        if lost.is_empty() {
            continue;
        }
        lost.sort();
        // Tasks stopped with their jobs elsewhere may free room at once.
        world.resource_mut::<CapacityEpoch>().0 += 1;
        let reason = format!("node {name} was NotReady for more than {} s", after.as_secs());
        world
            .resource_mut::<Outbox>()
            .0
            .push(Command::Warn(format!("{reason}: {} task(s) on it lost", lost.len())));
        for (_, _, job, task) in lost {
            let run = world.get::<TaskRun>(task);
            let end = TaskEnd {
                outcome: TaskOutcome::Lost,
                pid: run.and_then(|r| r.pid),
                start_time_ms: run.and_then(|r| r.start_ms),
                end_time_ms: now,
                reason: Some(reason.clone()),
                ..TaskEnd::default()
            };
            end_task(world, job, task, end);
        }
    }
}
