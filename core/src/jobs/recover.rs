//! The recover system (Volcano §6): clear an AllocatedHyperNode that no longer exists or
//! holds no running task, and recover an empty one from where the tasks run — the
//! lowest-tier HyperNode that holds all of them (ties by name).
//!
//! What it decides for a job depends only on the job's state, its sub-jobs' states, its
//! tasks and the topology index, so it looks again only at jobs where one of those
//! changed since its last run, and at every job when the index was rebuilt.
//!
//! The virtual root is no HyperNode of its own: its name stays while its tier and its
//! children follow the topology. A value naming it was true of the index it was worked
//! out on only, so a rebuilt index recovers it again from where the tasks run. Right
//! after a restart the index has no HyperNode yet (discovery has not delivered, the
//! nodes of running tasks are stand-ins in none): recovery gives the root there, and a
//! root kept once the leaves are known would sit above a hard job's tier limit, where no
//! lost task of it could be placed again.

use bevy_ecs::prelude::*;

use crate::model::components::{
    Job, JobPhase, JobState, LiveChanged, NodeSlot, Retired, SubJob, SubJobState, Task, TaskState,
};
use crate::model::ids::HnIdx;
use crate::topology::TopologyIndex;

/// Jobs whose state changed since the system last ran (by ingest, allocate or anyone
/// else; its own writes do not count), and the jobs to update.
type JobParams<'w, 's> = ParamSet<
    'w,
    's,
    (
        Query<'static, 'static, Entity, (With<Job>, LiveChanged<JobState>)>,
        Query<'static, 'static, (&'static Job, &'static mut JobState), Without<Retired>>,
    ),
>;

/// The same for sub-jobs (the changed ones give their job).
type SubJobParams<'w, 's> = ParamSet<
    'w,
    's,
    (
        Query<'static, 'static, &'static SubJob, LiveChanged<SubJobState>>,
        Query<'static, 'static, (&'static SubJob, &'static mut SubJobState), Without<Retired>>,
    ),
>;

#[allow(clippy::too_many_arguments)]
pub(crate) fn recover(
    index: Res<TopologyIndex>,
    mut seen_generation: Local<Option<u64>>,
    mut job_params: JobParams,
    mut sub_job_params: SubJobParams,
    all_jobs: Query<Entity, (With<Job>, Without<Retired>)>,
    tasks: Query<&TaskState>,
    changed_tasks: Query<&Task, LiveChanged<TaskState>>,
    slots: Query<&NodeSlot>,
) {
    let _span = tracing::info_span!("recover").entered();
    let rebuilt = *seen_generation != Some(index.generation);
    let todo: Vec<Entity> = if rebuilt {
        *seen_generation = Some(index.generation);
        all_jobs.iter().collect()
    } else {
        let mut todo: Vec<Entity> = job_params.p0().iter().collect();
        // A new job's tasks come one after another: push each job once per run of them.
        for t in &changed_tasks {
            if todo.last() != Some(&t.job) {
                todo.push(t.job);
            }
        }
        todo.extend(sub_job_params.p0().iter().map(|sj| sj.job));
        todo.sort_unstable();
        todo.dedup();
        todo
    };
    let mut jobs = job_params.p1();
    let mut sub_jobs = sub_job_params.p1();
    for entity in todo {
        let Ok((job, mut state)) = jobs.get_mut(entity) else {
            continue;
        };
        if !matches!(state.phase, JobPhase::Running | JobPhase::Pending) {
            continue;
        }
        let with_topology = job.spec.network_topology.is_some()
            || job.spec.tasks.iter().any(|t| {
                t.partition_policy
                    .as_ref()
                    .is_some_and(|p| p.network_topology.is_some())
            });
        // Remove: job level.
        let running_nodes = |ts: &[Entity]| -> Vec<crate::model::ids::NodeIdx> {
            ts.iter()
                .filter_map(|t| tasks.get(*t).ok())
                .filter(|t| t.is_running())
                .filter_map(|t| t.node.and_then(|n| slots.get(n).ok()).map(|s| s.0))
                .collect()
        };
        let job_nodes = running_nodes(&job.tasks);
        if let Some(a) = &state.allocated_hyper_node
            && (stale(&index, a, rebuilt && with_topology) || job_nodes.is_empty())
        {
            state.allocated_hyper_node = None;
        }
        let mut changed = false;
        let mut sub_values: Vec<HnIdx> = Vec::new();
        for &se in &job.sub_jobs {
            let Ok((sj, mut sst)) = sub_jobs.get_mut(se) else {
                continue;
            };
            let nodes = running_nodes(&sj.tasks);
            let has_topology = sj.network_topology.is_some();
            if let Some(a) = &sst.allocated_hyper_node
                && (stale(&index, a, rebuilt && with_topology && has_topology) || nodes.is_empty())
            {
                sst.allocated_hyper_node = None;
                changed = true;
            }
            if with_topology
                && has_topology
                && sst.allocated_hyper_node.is_none()
                && !nodes.is_empty()
                && let Some(h) = lowest_common_holder(&index, &nodes)
            {
                sst.allocated_hyper_node = Some(index.hns[h.ix()].name.clone());
                changed = true;
            }
            if let Some(h) = sst.allocated_hyper_node.as_ref().and_then(|a| index.hn_by_name.get(a)) {
                sub_values.push(*h);
            }
        }
        if with_topology && (state.allocated_hyper_node.is_none() || changed) && !sub_values.is_empty() {
            let lca = sub_values
                .iter()
                .copied()
                .map(Some)
                .reduce(|a, b| index.lca_opt(a, b))
                .flatten();
            state.allocated_hyper_node = lca.map(|h| index.hns[h.ix()].name.clone());
        }
    }
}

/// An AllocatedHyperNode to clear: its HyperNode is gone, or it is the virtual root and
/// `recover_root` (the index was rebuilt, and the value is one recovery fills again; see
/// the module).
fn stale(index: &TopologyIndex, name: &str, recover_root: bool) -> bool {
    match index.hn_by_name.get(name) {
        None => true,
        Some(&h) => recover_root && h == index.root,
    }
}

/// The lowest-tier HyperNode (ties by name) whose nodes include every one of `nodes`.
fn lowest_common_holder(index: &TopologyIndex, nodes: &[crate::model::ids::NodeIdx]) -> Option<HnIdx> {
    let mut candidates: Vec<HnIdx> = index.groups[index.node_group[nodes[0].ix()].ix()].hyper_nodes.clone();
    for n in &nodes[1..] {
        candidates.retain(|h| index.hns[h.ix()].nodes.contains(n.ix()));
        if candidates.is_empty() {
            return None;
        }
    }
    candidates
        .into_iter()
        .min_by(|a, b| index.hns[a.ix()].tier.cmp(&index.hns[b.ix()].tier).then(a.cmp(b)))
}
