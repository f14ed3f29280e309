//! Job reports: what `hyperplan simulate` prints and `hyperplan status` shows, with each
//! job's owner and each task's node, HyperNodes and NUMA pinning.

use bevy_ecs::prelude::*;
use hyperplan_shared::report::{JobReport, JobStatus, TaskReport};

use crate::components::{Job, JobPhase, JobState, Node, NodeSlot, SubJob, Task, TaskPhase, TaskState};
use crate::numa::node::NodeHardware;
use crate::ownership::JobOwner;
use crate::topology::TopologyIndex;

/// Every job, in (priority, submit time, name) order.
pub fn job_reports(world: &mut World) -> Vec<JobReport> {
    let mut q = world.query::<(&Job, &JobState, Option<&JobOwner>)>();
    let world = &*world;
    let index = world.resource::<TopologyIndex>();
    let mut jobs: Vec<(&Job, &JobState, Option<&JobOwner>)> = q.iter(world).collect();
    jobs.sort_by(|a, b| {
        b.0.spec
            .priority
            .cmp(&a.0.spec.priority)
            .then(a.0.spec.submit_time.cmp(&b.0.spec.submit_time))
            .then_with(|| a.0.spec.name.cmp(&b.0.spec.name))
    });
    jobs.iter()
        .map(|(job, st, owner)| report(world, index, job, st, *owner))
        .collect()
}

/// One job's report, by name.
pub fn job_report(world: &mut World, name: &str) -> Option<JobReport> {
    let mut q = world.query::<(&Job, &JobState, Option<&JobOwner>)>();
    let world = &*world;
    let index = world.resource::<TopologyIndex>();
    let found = q.iter(world).find(|(j, _, _)| j.spec.name == name);
    found.map(|(job, st, owner)| report(world, index, job, st, owner))
}

fn report(world: &World, index: &TopologyIndex, job: &Job, st: &JobState, owner: Option<&JobOwner>) -> JobReport {
    let status = match st.phase {
        JobPhase::Pending | JobPhase::Cancelled if st.start_time.is_none() => JobStatus::Pending,
        JobPhase::Rejected => JobStatus::Rejected,
        _ => JobStatus::Placed,
    };
    let tasks = job
        .tasks
        .iter()
        .filter_map(|&t| Some((world.get::<Task>(t)?, world.get::<TaskState>(t)?)))
        .map(|(task, ts)| {
            let placed = ts.phase != TaskPhase::Pending;
            let node = ts.node.filter(|_| placed);
            let slot = node.and_then(|n| world.get::<NodeSlot>(n));
            let pinned = node.and_then(|n| world.get::<NodeHardware>(n)).zip(ts.numa.as_ref());
            TaskReport {
                name: task.name.clone(),
                rank: ts.rank.filter(|_| placed),
                sub_job: world
                    .get::<SubJob>(task.sub_job)
                    .map(|s| s.id.clone())
                    .unwrap_or_default(),
                node: node.and_then(|n| world.get::<Node>(n)).map(|n| n.name.clone()),
                hyper_nodes: slot.map(|s| index.hyper_node_names_of(s.0)).unwrap_or_default(),
                cpus: pinned
                    .filter(|(_, a)| !a.pus.is_empty())
                    .map(|(hw, a)| hw.0.cpu_list(a)),
                numa_nodes: pinned.map(|(hw, a)| hw.0.numa_nodes(a)).unwrap_or_default(),
                memory_numa: pinned
                    .map(|(hw, a)| hw.0.memory(a).into_iter().collect())
                    .unwrap_or_default(),
                gpus: pinned.map(|(hw, a)| strings(hw.0.gpus(a))).unwrap_or_default(),
                nics: pinned.map(|(hw, a)| strings(hw.0.nics(a))).unwrap_or_default(),
            }
        })
        .collect();
    JobReport {
        name: job.spec.name.clone(),
        status,
        reason: st.reason.clone(),
        submit_time: job.spec.submit_time,
        start_time: st.start_time,
        end_time: st.end_time,
        allocated_hyper_node: st.allocated_hyper_node.clone(),
        owner: owner.map(|o| o.0.clone()),
        tasks,
    }
}

fn strings(v: Vec<std::sync::Arc<str>>) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}
