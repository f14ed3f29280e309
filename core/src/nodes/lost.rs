//! Lost nodes: a node with an agent link NotReady for longer than `nodeLostAfter` (see
//! [`HealthConfig::node_lost_after`]) has its running tasks declared lost. Their
//! resources are free, and their jobs fail, or go back to pending when they ask
//! `requeue` (see `lifecycle`). If the node comes back, its agent still lists those
//! tasks and they are killed as orphans. Tasks of jobs that are started again elsewhere
//! are fenced: their node stops them itself after `nodeLostAfter` without the planner's
//! acknowledgement, so they are lost [`FENCE_MARGIN`] later, and no rank runs twice.
//! Each tick looks at the NotReady nodes only.
//!
//! [`FENCE_MARGIN`]: crate::config::FENCE_MARGIN
//!
//! [`HealthConfig::node_lost_after`]: crate::config::HealthConfig::node_lost_after

use std::sync::Arc;

use bevy_ecs::prelude::*;

use crate::config::PlannerConfig;
use crate::model::commands::Command;
use crate::model::components::{Job, Node, Retired, Task, TaskState};
use crate::model::health::{Away, Heartbeats};
use crate::model::taskrun::TaskRun;
use crate::model::tick::{Now, Outbox};

/// The system, right after node health: nodes NotReady for too long lose their tasks,
/// then started tasks their agents stopped listing (a tick with no node away and no
/// sweep due pays two lookups).
pub fn lost(world: &mut World) {
    let _span = tracing::info_span!("lost").entered();
    lose_tasks(world);
    lose_missing(world);
}

/// Nodes NotReady past the limit lose their tasks, in node name order, each node's
/// tasks in (job name, rank) order. The tasks of jobs the planner starts again elsewhere
/// (`onNodeLost: replace` or `requeue`) are fenced on their node: they are lost only
/// at [`HealthConfig::fenced_lost_at`], once their node has stopped them; the node stays
/// away until then.
///
/// [`HealthConfig::fenced_lost_at`]: crate::config::HealthConfig::fenced_lost_at
fn lose_tasks(world: &mut World) {
    if world.resource::<Away>().0.is_empty() {
        return;
    }
    let now = world.resource::<Now>().ms;
    let health = world.resource::<PlannerConfig>().health;
    let after = health.node_lost_after;
    let limit = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
    let due: Vec<(Entity, u64)> = world
        .resource::<Away>()
        .0
        .iter()
        .filter(|&(_, &since)| now.saturating_sub(since) > limit)
        .map(|(&e, &since)| (e, since))
        .collect();
    if due.is_empty() {
        return;
    }
    let mut due: Vec<(Arc<str>, Entity, u64)> = due
        .into_iter()
        .filter_map(|(e, since)| Some((world.get::<Node>(e)?.name.clone(), e, since)))
        .collect();
    due.sort();
    let mut tasks = world.query_filtered::<(Entity, &Task, &TaskState), Without<Retired>>();
    for (name, node, since) in due {
        let heard = world.get::<Heartbeats>(node).map(|h| h.heard_ms);
        let fenced_at = health.fenced_lost_at(since, heard);
        let fence_over = now > fenced_at;
        // Rare (once or twice per lost node): a scan of the live tasks finds the node's.
        let mut lost: Vec<(String, u32, Entity, Entity)> = Vec::new();
        let mut fenced_left = 0usize;
        for (e, t, ts) in tasks.iter(world) {
            if !ts.is_running() || ts.node != Some(node) {
                continue;
            }
            let Some(job) = world.get::<Job>(t.job) else { continue };
            if job.spec.run.node_lost().restarts() && !fence_over {
                fenced_left += 1;
                continue;
            }
            lost.push((job.spec.name.clone(), ts.rank.unwrap_or(0), t.job, e));
        }
        if fenced_left == 0 {
            world.resource_mut::<Away>().0.remove(&node);
            // A node known from the store whose agent never came: nothing to wait for
            // (once its last task is lost: what it holds stays held until then).
            crate::model::awaiting::give_up(world, node);
        }
        if lost.is_empty() {
            continue;
        }
        lost.sort();
        let reason = if fence_over {
            format!(
                "node {name} was NotReady for more than {} s (and {} s for its fenced tasks to be stopped on it)",
                after.as_secs(),
                fenced_at.saturating_sub(since) / 1000
            )
        } else {
            format!("node {name} was NotReady for more than {} s", after.as_secs())
        };
        world
            .resource_mut::<Outbox>()
            .0
            .push(Command::Warn(format!("{reason}: {} task(s) on it lost", lost.len())));
        for (_, _, job, task) in lost {
            crate::jobs::lifecycle::lose(world, job, task, reason.clone());
        }
    }
}

/// How often `lose_missing` looks (the driver's clock, ms).
pub(crate) const MISSING_SWEEP_MS: u64 = 5_000;

/// When `lose_missing` last looked.
#[derive(Resource, Debug, Default)]
pub struct MissingSweep(pub u64);

/// Started tasks that their node's agent — linked and Ready — has left out of what it
/// lists as running for longer than `nodeLostAfter` are lost: their shepherd is gone without a report (the node's
/// state directory was wiped, or it rebooted), so nothing will ever end them. A scan of
/// the live tasks every few seconds, in (job name, rank) order.
fn lose_missing(world: &mut World) {
    let now = world.resource::<Now>().ms;
    let last = world.get_resource::<MissingSweep>().map_or(0, |s| s.0);
    if now < last.saturating_add(MISSING_SWEEP_MS) {
        return;
    }
    world.insert_resource(MissingSweep(now));
    let after = world.resource::<PlannerConfig>().health.node_lost_after;
    let limit = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
    let mut tasks = world.query_filtered::<(Entity, &Task, &TaskState, &TaskRun), Without<Retired>>();
    let mut missing: Vec<(String, u32, Entity, Entity, Arc<str>)> = tasks
        .iter(world)
        .filter(|(_, _, ts, run)| ts.is_running() && run.accepted() && run.end.is_none())
        .filter_map(|(e, t, ts, run)| {
            let node = ts.node?;
            // Its agent has listed what it runs since, more than `limit` after it was seen.
            let listed = world
                .get::<Heartbeats>(node)
                .filter(|h| h.linked)
                .and_then(|h| h.listed_ms)?;
            if listed.saturating_sub(run.seen_ms.unwrap_or(listed)) <= limit {
                return None;
            }
            let n = world.get::<Node>(node).filter(|n| n.ready)?;
            let job = world.get::<Job>(t.job)?;
            Some((job.spec.name.clone(), ts.rank.unwrap_or(0), t.job, e, n.name.clone()))
        })
        .collect();
    if missing.is_empty() {
        return;
    }
    missing.sort();
    for (job_name, _, job, task, node) in missing {
        let reason = format!(
            "node {node}'s agent has not listed it as running for more than {} s",
            after.as_secs()
        );
        world
            .resource_mut::<Outbox>()
            .0
            .push(Command::Warn(format!("job {job_name}: a task was lost: {reason}")));
        crate::jobs::lifecycle::lose(world, job, task, reason);
    }
}
