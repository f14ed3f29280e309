//! The dispatch system: hands each new placement to the driver as a `Place` command
//! (the daemon will launch it; the simulator schedules its completion); and, for a node
//! whose agent registered again, the placements its agent may never have received
//! ([`relaunch`]).

mod relaunch;

pub(crate) use relaunch::{relaunch, unstarted_on};

use bevy_ecs::prelude::*;
use hyperplan_shared::taskenv::{choose_master_port, default_master_port};

use super::numa::hints::Policy;
use super::numa::node::NodeHardware;
use crate::model::commands::{Command, Pinning, Placement};
use crate::model::components::{Job, JobState, LiveChanged, Node, Task, TaskPhase, TaskState};
use crate::model::components::{JobId, JobOwner};
use crate::model::ports::PortsInUse;
use crate::model::tick::Outbox;

pub(crate) fn dispatch(
    mut out: ResMut<Outbox>,
    mut tasks: Query<(Entity, &Task, &mut TaskState), LiveChanged<TaskState>>,
    mut jobs: Query<(&Job, &JobOwner, Option<&JobId>, &mut JobState)>,
    nodes: Query<&Node>,
    hardware: Query<&NodeHardware>,
    ports: Query<&PortsInUse>,
) {
    let _span = tracing::info_span!("dispatch").entered();
    // First the order (job name, then rank) on small keys: by (job entity, rank), then
    // the jobs' runs by name (a few string comparisons, not one per pair of tasks); then
    // one `Place` per task built straight into the outbox, of shared parts only (see
    // `Placement`).
    let mut by_job: Vec<(u64, u32, Entity)> = Vec::new();
    for (e, task, mut ts) in &mut tasks {
        if ts.phase != TaskPhase::Running || ts.dispatched {
            continue;
        }
        ts.dispatched = true;
        by_job.push((task.job.to_bits(), ts.rank.unwrap_or(0), e));
    }
    by_job.sort_unstable();
    // A job placed anew gets its MASTER_PORT now: free on its lowest rank's node (rank 0's).
    for k in by_job.iter().filter(|k| k.1 == 0) {
        let node = tasks.get(k.2).ok().and_then(|(_, _, ts)| ts.node);
        let Ok((job, _, id, mut st)) = jobs.get_mut(Entity::from_bits(k.0)) else {
            continue;
        };
        if st.master_port.is_none() {
            let busy = node.and_then(|n| ports.get(n).ok()).map_or(&[][..], |p| &p.0[..]);
            let id = id.map_or(0, |i| i.0);
            st.master_port = Some(job.spec.run.master_port.unwrap_or_else(|| choose_master_port(id, busy)));
        }
    }
    let mut runs: Vec<(&str, usize, usize)> = Vec::new();
    let mut start = 0;
    while start < by_job.len() {
        let job = by_job[start].0;
        let len = by_job[start..].iter().take_while(|k| k.0 == job).count();
        if let Ok((j, ..)) = jobs.get(Entity::from_bits(job)) {
            runs.push((j.spec.name.as_str(), start, start + len));
        }
        start += len;
    }
    runs.sort_unstable();
    let order = runs.into_iter().flat_map(|(_, a, b)| by_job[a..b].iter().map(|k| k.2));
    out.0.reserve(by_job.len());
    for e in order {
        let Ok((_, task, ts)) = tasks.get(e) else { continue };
        let (Ok((job, owner, id, st)), Some(Ok(node))) = (jobs.get(task.job), ts.node.map(|n| nodes.get(n))) else {
            continue;
        };
        let hw = ts.node.and_then(|n| hardware.get(n).ok());
        out.0
            .push(Command::Place(placement(job, owner, id, task, ts, node, hw, st)));
    }
}

/// The `Place` command of a placed task: shared parts of its job, node and hardware.
#[allow(clippy::too_many_arguments)]
pub(crate) fn placement(
    job: &Job,
    owner: &JobOwner,
    id: Option<&JobId>,
    task: &Task,
    ts: &TaskState,
    node: &Node,
    hardware: Option<&NodeHardware>,
    st: &JobState,
) -> Placement {
    let job_id = id.copied().unwrap_or_default();
    Placement {
        spec: job.spec.clone(),
        job_id,
        owner: owner.0.clone(),
        role: task.role,
        task: task.name.clone(),
        index: task.index,
        node: node.name.clone(),
        rank: ts.rank.unwrap_or(0),
        pinning: ts.numa.as_ref().zip(hardware).map(|(a, hw)| Pinning {
            hardware: hw.0.clone(),
            assignment: a.clone(),
            policy: job
                .numa
                .get(task.role)
                .copied()
                .flatten()
                .map_or(Policy::None, |n| n.policy),
        }),
        run: st.run(),
        master_port: st
            .master_port
            .or(job.spec.run.master_port)
            .unwrap_or_else(|| default_master_port(job_id.0)),
    }
}
