//! A job's ranks and the nodes they run on, for a driver that starts its tasks: every
//! task is told the whole job (world size, node list, hostfile, the master's node).

use std::sync::Arc;

use bevy_ecs::prelude::*;

use crate::model::components::{Job, JobId, Node, Retired, TaskState};
use crate::names::JobNames;

/// The job's running tasks as (rank, node name), by rank; `None` for no live job of
/// that name.
pub fn job_ranks(world: &World, job: &str) -> Option<Vec<(u32, Arc<str>)>> {
    let &e = world.resource::<JobNames>().0.get(job)?;
    if world.get::<Retired>(e).is_some() {
        return None;
    }
    let job = world.get::<Job>(e)?;
    let mut ranks: Vec<(u32, Arc<str>)> = job
        .tasks
        .iter()
        .filter_map(|&t| world.get::<TaskState>(t))
        .filter(|ts| ts.is_running())
        .filter_map(|ts| {
            let node = world.get::<Node>(ts.node?)?;
            Some((ts.rank?, node.name.clone()))
        })
        .collect();
    ranks.sort_unstable();
    Some(ranks)
}

/// The nodes of job `job` (id `job_id`) that run its tasks, sorted; `None` when no live
/// job of that name has that id (a PMI fence of a job that ended, or of another).
pub(super) fn job_nodes(world: &World, job: &str, job_id: hyperplan_shared::ids::JobId) -> Option<Vec<Arc<str>>> {
    let &e = world.resource::<JobNames>().0.get(job)?;
    if world.get::<JobId>(e).is_none_or(|id| *id != job_id) {
        return None;
    }
    let mut nodes: Vec<Arc<str>> = job_ranks(world, job)?.into_iter().map(|(_, n)| n).collect();
    nodes.sort_unstable();
    nodes.dedup();
    Some(nodes)
}

/// The HyperNodes holding `node`, lowest tier first (the virtual root left out).
pub fn hyper_nodes_of(world: &World, node: &str) -> Vec<String> {
    let index = world.resource::<crate::topology::TopologyIndex>();
    index
        .node_by_name
        .get(node)
        .map(|&n| index.hyper_node_names_of(n))
        .unwrap_or_default()
}
