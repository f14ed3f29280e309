//! Job reports: what `hyperplan simulate` prints and `hyperplan status` shows, with each
//! job's owner, status and exit code, and each task's node, HyperNodes and NUMA pinning;
//! for the tasks of jobs on agents' nodes also their run (state, pid, times, exit, use).

use bevy_ecs::prelude::*;
use hyperplan_shared::report::{JobReport, PriorityReport, TaskReport};

use crate::allocate::agenda::walk_key;
use crate::jobs::lifecycle::job_status;
use crate::model::components::{Job, JobState, Node, NodeSlot, SubJob, Task, TaskPhase, TaskState};
use crate::model::components::{JobId, JobOwner, JobPhase};
use crate::model::health::Heartbeats;
use crate::model::taskrun::{TaskRun, task_status};
use crate::numa::node::NodeHardware;
use crate::order::Rank;
use crate::topology::TopologyIndex;

/// Every job, in (priority, submit time, name, id) order.
pub fn job_reports(world: &World) -> Vec<JobReport> {
    job_heads(world)
        .into_iter()
        .map(|(e, mut head)| {
            head.tasks = job_tasks(world, e, 0).collect();
            head
        })
        .collect()
}

/// Every job with its entity, in [`job_reports`]' order, each report without its
/// tasks ([`job_tasks`] makes them): a status page makes the task reports it sends only.
pub(crate) fn job_heads(world: &World) -> Vec<(Entity, JobReport)> {
    let Some(mut q) = super::read::<(Entity, &Job, &JobState, Option<&JobOwner>, Option<&JobId>)>(world) else {
        return Vec::new();
    };
    let waiting = WaitingOrder::of(world);
    let mut jobs: Vec<_> = q.iter(world).collect();
    jobs.sort_by(|a, b| {
        b.1.spec
            .priority
            .cmp(&a.1.spec.priority)
            .then(a.1.spec.submit_time.cmp(&b.1.spec.submit_time))
            .then_with(|| a.1.spec.name.cmp(&b.1.spec.name))
            .then(a.4.cmp(&b.4))
    });
    jobs.iter()
        .map(|(e, job, st, owner, id)| (*e, head(world, *e, job, st, *owner, *id, &waiting)))
        .collect()
}

/// The task reports of job `e` from its task `from` (in the job's task order), made as
/// they are taken.
pub(crate) fn job_tasks(world: &World, e: Entity, from: usize) -> impl Iterator<Item = TaskReport> + '_ {
    let index = world.resource::<TopologyIndex>();
    let job = world.get::<Job>(e);
    let tracked = job.is_some_and(|job| tracked(world, job));
    job.into_iter()
        .flat_map(move |job| job.tasks.iter().skip(from).map(move |&t| (job, t)))
        .filter_map(move |(job, t)| task_report(world, index, job, t, tracked))
}

/// `reports` with only the newest job (highest id) of each name, in their order: what a
/// name means once an ended job's name was used again.
pub fn newest_of_each_name(reports: Vec<JobReport>) -> Vec<JobReport> {
    let mut newest: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for r in &reports {
        let id = newest.entry(r.name.as_str()).or_insert(r.id);
        *id = (*id).max(r.id);
    }
    let keep: Vec<bool> = reports
        .iter()
        .map(|r| newest.get(r.name.as_str()) == Some(&r.id))
        .collect();
    reports
        .into_iter()
        .zip(keep)
        .filter_map(|(r, k)| k.then_some(r))
        .collect()
}

/// One job's report, by name.
pub fn job_report(world: &World, name: &str) -> Option<JobReport> {
    let index = world.resource::<TopologyIndex>();
    let e = *world.resource::<crate::names::JobNames>().0.get(name)?;
    let (job, st, owner) = (
        world.get::<Job>(e)?,
        world.get::<JobState>(e)?,
        world.get::<JobOwner>(e),
    );
    let waiting = WaitingOrder::of(world);
    Some(report(world, index, e, job, st, owner, world.get::<JobId>(e), &waiting))
}

/// Whether the job's tasks have run fields: placed on agents' nodes (the simulator's
/// have none).
fn tracked(world: &World, job: &Job) -> bool {
    job.tasks.iter().any(|&t| {
        world.get::<TaskRun>(t).is_some()
            || world
                .get::<TaskState>(t)
                .and_then(|ts| ts.node)
                .is_some_and(|n| world.get::<Heartbeats>(n).is_some())
    })
}

/// The waiting jobs in the walk's order (see `order`), for each one's rank.
struct WaitingOrder(std::collections::HashMap<Entity, u32>);

impl WaitingOrder {
    fn of(world: &World) -> Self {
        let Some(mut q) = super::read::<(Entity, &Job, &JobState, &Rank, &JobId)>(world) else {
            return Self(Default::default());
        };
        // The walk's own key: jobs past `starvation` and holders of kept reservations
        // go first, as they do in the walk.
        let scheduler = world
            .get_resource::<crate::config::PlannerConfig>()
            .map(|c| c.scheduler)
            .unwrap_or_default();
        let now = world.get_resource::<crate::model::tick::Now>().map_or(0, |n| n.secs());
        let mut keyed: Vec<_> = q
            .iter(world)
            .filter(|(_, _, st, _, _)| st.phase == JobPhase::Pending)
            .map(|(e, job, st, rank, id)| (walk_key(Some((rank, *id)), job, st, &scheduler, now), e))
            .collect();
        keyed.sort();
        Self(
            keyed
                .into_iter()
                .enumerate()
                .map(|(i, (_, e))| (e, i as u32 + 1))
                .collect(),
        )
    }
}

#[allow(clippy::too_many_arguments)]
fn report(
    world: &World,
    index: &TopologyIndex,
    e: Entity,
    job: &Job,
    st: &JobState,
    owner: Option<&JobOwner>,
    id: Option<&JobId>,
    waiting: &WaitingOrder,
) -> JobReport {
    let mut r = head(world, e, job, st, owner, id, waiting);
    let tracked = tracked(world, job);
    r.tasks = job
        .tasks
        .iter()
        .filter_map(|&t| task_report(world, index, job, t, tracked))
        .collect();
    r
}

/// Task `t` of `job`, as people see it; `tracked`: see [`tracked`].
fn task_report(world: &World, index: &TopologyIndex, job: &Job, t: Entity, tracked: bool) -> Option<TaskReport> {
    let (task, ts, run) = (
        world.get::<Task>(t)?,
        world.get::<TaskState>(t)?,
        world.get::<TaskRun>(t),
    );
    let placed = ts.phase != TaskPhase::Pending;
    let node = ts.node.filter(|_| placed);
    let slot = node.and_then(|n| world.get::<NodeSlot>(n));
    let pinned = node.and_then(|n| world.get::<NodeHardware>(n)).zip(ts.numa.as_ref());
    let end = run.and_then(|r| r.end.as_ref());
    Some(TaskReport {
        state: tracked.then(|| task_status(ts, run)),
        exit_code: end.and_then(|e| e.exit_code),
        signal: end.and_then(|e| e.signal),
        pid: run.and_then(|r| r.pid),
        start_time: run.and_then(|r| r.start_ms),
        end_time: end.map(|e| e.end_time_ms),
        cpu_seconds: end.map(|e| e.cpu_seconds),
        max_rss_bytes: end.map(|e| e.max_rss_bytes),
        reason: end.and_then(|e| e.reason.clone()),
        cpu_cores: run.and_then(|r| r.cpu_cores),
        rss_bytes: run.and_then(|r| r.rss_bytes),
        name: task.name.to_string(),
        rank: ts.rank.filter(|_| placed),
        sub_job: world
            .get::<SubJob>(task.sub_job)
            .map(|s| s.id.clone())
            .unwrap_or_default(),
        node: node.and_then(|n| world.get::<Node>(n)).map(|n| n.name.to_string()),
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
        working_dir: job.spec.working_dir(task.role),
    })
}

/// The job's report without its tasks.
fn head(
    world: &World,
    e: Entity,
    job: &Job,
    st: &JobState,
    owner: Option<&JobOwner>,
    id: Option<&JobId>,
    waiting: &WaitingOrder,
) -> JobReport {
    let status = job_status(st);
    JobReport {
        id: id.map_or(0, |i| i.0),
        name: job.spec.name.clone(),
        status,
        reason: st.reason.as_ref().map(ToString::to_string),
        submit_time: job.spec.submit_time,
        start_time: st.start_time,
        end_time: st.end_time,
        allocated_hyper_node: st.allocated_hyper_node.clone(),
        owner: owner.map(|o| o.0.to_string()),
        exit_code: st.exit_code,
        tasks: Vec::new(),
        reservation: st
            .reservation
            .clone()
            .filter(|_| status == hyperplan_shared::report::JobStatus::Pending),
        queue: Some(
            job.spec
                .queue
                .clone()
                .unwrap_or_else(|| crate::config::DEFAULT_QUEUE.to_string()),
        ),
        priority: waiting
            .0
            .get(&e)
            .zip(world.get::<Rank>(e))
            .map(|(&rank, r)| PriorityReport {
                queue_priority: r.queue_priority,
                score: r.score as f64 / 1000.0,
                job: r.job,
                fairshare: r.fairshare,
                age: r.age,
                size: r.size,
                rank,
                of: waiting.0.len() as u32,
            }),
        preempted_by: st.preempted_by.clone(),
        preempting: st.nomination.clone().filter(|_| st.phase == JobPhase::Pending),
        array: job.spec.element.clone(),
        steps: st.steps.iter().map(|s| s.report()).collect(),
    }
}

fn strings(v: Vec<std::sync::Arc<str>>) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}
