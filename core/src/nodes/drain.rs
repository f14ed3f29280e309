//! Admins' drains, applied by `ingest` (the checks are the request's: see
//! `requests::nodes`). A drained node takes no new task: it carries [`Drained`], and the
//! resource cache counts all of it as used. With `--now` its running tasks are killed
//! and end as a lost node's do, so their jobs' `onNodeLost` decides (replaced inside
//! their HyperNode, requeued, or failed). `remove` despawns the node (its HyperNode
//! memberships go with the next rebuild, as with `NodeGone`); an agent that registers
//! again under that name joins anew. Every change writes the whole [`DrainsRecord`].

use std::sync::Arc;

use bevy_ecs::prelude::*;

use crate::jobs::lifecycle::{KILL_GRACE_SECS, kill, lose};
use crate::model::commands::Command;
use crate::model::components::{Node, Task, TaskState};
use crate::model::drain::{Drain, Drained, Drains, DrainsRecord};
use crate::model::kill::KillReason;
use crate::model::tick::Outbox;
use crate::names::NodeNames;

/// `Event::Drain`.
pub(crate) fn drain(world: &mut World, nodes: Vec<String>, drain: Drain, now: bool) {
    for name in nodes {
        if let Some(e) = world.resource::<NodeNames>().0.get(&name).copied() {
            world.entity_mut(e).insert(Drained);
            if now {
                end_tasks_on(world, e, &name, &drain);
            }
        }
        world.resource_mut::<Drains>().nodes.insert(name, drain.clone());
    }
    write(world);
}

/// `Event::Resume`.
pub(crate) fn resume(world: &mut World, nodes: Vec<String>) {
    for name in nodes {
        if let Some(e) = world.resource::<NodeNames>().0.get(&name).copied() {
            world.entity_mut(e).remove::<Drained>();
        }
        world.resource_mut::<Drains>().nodes.remove(&name);
    }
    write(world);
}

/// `Event::Remove`.
pub(crate) fn remove(world: &mut World, nodes: Vec<String>) {
    for name in nodes {
        // Checked when it was asked; checked again, as a task may have started since.
        if let Some(e) = world.resource::<NodeNames>().0.get(&name).copied() {
            if !running_on(world, e).is_empty() {
                let w = format!("node {name}: not removed: it runs tasks again");
                world.resource_mut::<Outbox>().0.push(Command::Warn(w));
                continue;
            }
            world.resource_mut::<NodeNames>().0.remove(&name);
            world.despawn(e);
        }
        let mut drains = world.resource_mut::<Drains>();
        drains.nodes.remove(&name);
        drains.removed.insert(name.clone());
        let line = format!("node {name} removed: it leaves the planner and its HyperNodes");
        world.resource_mut::<Outbox>().0.push(Command::Info(line));
    }
    write(world);
}

/// A node that appears (its agent registered, maybe after a restart) and is drained
/// carries the marker from the start; one that was removed joins anew.
pub(crate) fn mark(world: &mut World, e: Entity, name: &str) {
    if world.resource::<Drains>().nodes.contains_key(name) {
        world.entity_mut(e).insert(Drained);
    }
    if world.resource_mut::<Drains>().removed.remove(name) {
        let line = format!("node {name}, removed before, joins anew");
        world.resource_mut::<Outbox>().0.push(Command::Info(line));
        write(world);
    }
}

/// The tasks running (or placed) on node `e`: (job, task), in task order.
pub fn running_on(world: &World, e: Entity) -> Vec<(Entity, Entity)> {
    let Some(mut q) = world.try_query::<(Entity, &Task, &TaskState)>() else {
        return Vec::new();
    };
    let mut out: Vec<(Entity, Entity)> = q
        .iter(world)
        .filter(|(_, _, ts)| ts.is_running() && ts.node == Some(e))
        .map(|(t, task, _)| (task.job, t))
        .collect();
    out.sort_unstable();
    out
}

/// `--now`: each task on the node is killed and ends as lost, so its job's `onNodeLost`
/// applies.
pub(crate) fn end_tasks_on(world: &mut World, e: Entity, name: &str, drain: &Drain) {
    let Some(node) = world.get::<Node>(e).map(|n| n.name.clone()) else {
        return;
    };
    let reason = match &drain.reason {
        Some(r) if drain.by_health => format!("node {name} failed a health check: {r}"),
        Some(r) => format!("node {name} was drained at once by {}: {r}", drain.by),
        None => format!("node {name} was drained at once by {}", drain.by),
    };
    for (job, task) in running_on(world, e) {
        kill(
            world,
            job,
            task,
            Arc::clone(&node),
            KillReason::Drained,
            KILL_GRACE_SECS,
        );
        lose(world, job, task, reason.clone());
    }
}

/// The whole record, for the store.
pub(crate) fn write(world: &mut World) {
    match DrainsRecord::encode_of(world.resource::<Drains>()) {
        Ok(bytes) => world
            .resource_mut::<Outbox>()
            .0
            .push(Command::PersistDrains(bytes.into())),
        Err(e) => {
            let w = format!("cannot encode the nodes' drains for the store: {e}");
            world.resource_mut::<Outbox>().0.push(Command::Warn(w));
        }
    }
}
