//! Admission: a job's entities made from its spec (the job, its sub-jobs and tasks,
//! pending; or the job alone, rejected, saying why: a job refused here never has an entity
//! per replica). A submission (`requests::submit`; the refused ones the simulator keeps,
//! `sim::submit`) and a job brought back from the store (`restore`) both come in this
//! way; a job rejected by the allocator gets its sub-jobs and tasks again from
//! `spawn_parts` when the cluster changes (see `jobs::shed`).

use bevy_ecs::prelude::*;
use hyperplan_shared::JobSpec;

use crate::caller::Caller;
use crate::config::PlannerConfig;
use crate::jobs::ownership::{is_live, task_count};
use crate::jobs::segments;
use crate::model::commands::Command;
use crate::model::components::{
    Job, JobId, JobOwner, JobPhase, JobQueue, JobState, SubJob, SubJobState, Task, TaskState,
};
use crate::model::ids::QueueIdx;
use crate::model::reason::Reason;
use crate::model::tick::Outbox;
use crate::names::JobNames;
use crate::numa::request::task_numa;
use crate::order::Rank;
use crate::queues::check::check;
use crate::queues::{QueueTable, Users};

/// Makes the job `id` with its sub-jobs and tasks, pending (or rejected, saying why);
/// also how `restore` brings a stored job back.
pub(crate) fn admit(world: &mut World, mut spec: JobSpec, owner: String, id: JobId, unknown_queue: UnknownQueue) {
    let taken = world.resource::<JobNames>().0.get(&spec.name).copied();
    if taken.and_then(|e| world.get::<JobState>(e)).is_some_and(is_live) {
        let msg = format!(
            "job {}: a job of that name has not ended; submission ignored",
            spec.name
        );
        world.resource_mut::<Outbox>().0.push(Command::Warn(msg));
        return;
    }
    let user = world
        .resource_mut::<Users>()
        .intern(&std::sync::Arc::from(owner.as_str()));
    // A refused submission the simulator keeps is checked as its owner would be (who may
    // use the queue), to say why; a real one was checked for its caller already, a stored
    // one when it came.
    let caller = (unknown_queue == UnknownQueue::RejectAsOwner).then(|| Caller::user(&owner));
    let preemption = &world.resource::<PlannerConfig>().preemption;
    let table = world.resource::<QueueTable>();
    let (queue, queue_problem) = match check(table, preemption, &mut spec, caller) {
        // A simulated job's account too, as its owner's would be.
        Ok(q) => match caller.map(|c| crate::accounts::check::resolve(&table.accounts, table.get(q), &mut spec, c)) {
            Some(Err(e)) => (q, Some(e.to_string())),
            _ => (q, None),
        },
        Err(e) => (QueueIdx(0), Some(e.to_string())),
    };
    let placed_in = JobQueue { queue, user };
    if let (Some(why), UnknownQueue::Default) = (&queue_problem, unknown_queue) {
        world
            .resource_mut::<Outbox>()
            .0
            .push(Command::Warn(format!("{why}: kept in queue default")));
    }
    // Drivers check the limit before they push; this keeps a job that passed none (the
    // simulator's files) from spawning an entity per replica.
    let limit = world.resource::<PlannerConfig>().limits.max_tasks_per_job;
    let tasks = task_count(&spec);
    let mut refused = match queue_problem {
        Some(why) if unknown_queue != UnknownQueue::Default => Some(why),
        _ => (tasks > limit).then(|| format!("{tasks} tasks, more than [limits] maxTasksPerJob = {limit}")),
    };
    // Each role's NUMA request, before any entity is made: a job refused for its policy
    // is one entity, not one per replica.
    let default_policy = world.resource::<PlannerConfig>().numa.default_policy;
    let mut numa = Vec::with_capacity(spec.tasks.len());
    for (i, t) in spec.tasks.iter().enumerate() {
        match task_numa(t, default_policy) {
            Ok(n) => numa.push(n),
            Err(why) => {
                // The file parser catches an explicit policy; the planner's default can
                // only be checked here.
                refused.get_or_insert_with(|| format!("tasks[{i}] ({}): {why}", t.name));
                numa.push(None);
            }
        }
    }
    if let Some(reason) = refused {
        world.resource_mut::<Outbox>().0.push(Command::Reject {
            job: spec.name.clone(),
            reason: reason.clone(),
        });
        let mut state = JobState::new();
        state.phase = JobPhase::Rejected;
        state.reason = Some(Reason::Refused(reason));
        let gang_min = spec.gang_minimum();
        let name = spec.name.clone();
        let job = Job {
            cpus: cpus_of(&spec),
            spec: std::sync::Arc::new(spec),
            gang_min,
            sub_jobs: Vec::new(),
            tasks: Vec::new(),
            partition_groups: Vec::new(),
            numa,
            trees: Vec::new(),
        };
        let e = world
            .spawn((job, state, JobOwner(owner.into()), id, placed_in, Rank::default()))
            .id();
        world.resource_mut::<JobNames>().0.insert(name, e);
        let spec = world.get::<Job>(e).map(|j| j.spec.clone());
        if let Some(spec) = spec {
            crate::jobs::arrays::register(world, e, &spec, id);
        }
        return;
    }
    let job_e = world.spawn_empty().id();
    let parts = spawn_parts(world, job_e, &spec);
    world.resource_mut::<JobNames>().0.insert(spec.name.clone(), job_e);
    let trees = world
        .resource::<QueueTable>()
        .queues
        .get(queue.ix())
        .map(|q| q.trees.clone())
        .unwrap_or_default();
    let gang_min = spec.gang_minimum();
    // Submitted held: its owner's hold, which they may release.
    let mut state = JobState::new();
    if spec.hold {
        state.held = Some(crate::jobs::holds::Held {
            by: owner.to_string(),
            admin: false,
        });
    }
    let cpus = cpus_of(&spec);
    let spec = std::sync::Arc::new(spec);
    crate::jobs::arrays::register(world, job_e, &spec, id);
    world.entity_mut(job_e).insert((
        Job {
            cpus,
            spec,
            gang_min,
            sub_jobs: parts.sub_jobs,
            tasks: parts.tasks,
            partition_groups: parts.partition_groups,
            numa,
            trees,
        },
        state,
        JobOwner(owner.into()),
        id,
        placed_in,
        Rank::default(),
    ));
}

/// A job's sub-jobs and tasks as `spawn_parts` made them, in the job's order.
#[derive(Debug, Default)]
pub(crate) struct Parts {
    /// Its sub-jobs (see `Job::sub_jobs`).
    pub(crate) sub_jobs: Vec<Entity>,
    /// Its tasks, pending (see `Job::tasks`).
    pub(crate) tasks: Vec<Entity>,
    /// Its partition groups (see `Job::partition_groups`).
    pub(crate) partition_groups: Vec<(usize, u32)>,
}

/// Spawns the sub-jobs and the pending tasks `spec` makes for job `job_e`: at admission,
/// and again for a job whose parts were shed while it was rejected (`jobs::shed`).
pub(crate) fn spawn_parts(world: &mut World, job_e: Entity, spec: &JobSpec) -> Parts {
    let mut sub_jobs: Vec<Entity> = Vec::new();
    let mut tasks: Vec<Entity> = Vec::new();
    let mut partition_groups = Vec::new();
    let mut default_sj: Option<Entity> = None;
    let default_tasks: u32 = spec
        .tasks
        .iter()
        .filter(|t| t.partition_policy.is_none())
        .map(|t| t.replicas)
        .sum();
    let has_partitions = spec.tasks.iter().any(|t| t.partition_policy.is_some());
    let gang_min = spec.gang_minimum();
    // Sub-job entity → its tasks, filled as tasks are spawned.
    let mut members: Vec<(Entity, Vec<Entity>)> = Vec::new();
    // `segments`: every segment a sub-job (parents first); per rank its innermost one's
    // place in `members`, and per place the one outside it.
    let (seg_slot, seg_parent) = spawn_segments(world, job_e, spec, &mut sub_jobs, &mut members, &mut partition_groups);
    let mut rank = 0usize;
    for (role, t) in spec.tasks.iter().enumerate() {
        let mut partition_sjs = Vec::new();
        if let Some(p) = &t.partition_policy {
            let group = partition_groups.len();
            partition_groups.push((role, p.min_partitions));
            for part in 0..p.total_partitions {
                let sj = world
                    .spawn((
                        SubJob {
                            job: job_e,
                            id: format!("{}/{}-{part}", spec.name, t.name),
                            min_available: p.partition_size,
                            group: Some(group),
                            match_index: part,
                            network_topology: p.network_topology.clone(),
                            tasks: Vec::new(),
                            parent: None,
                            block: None,
                        },
                        SubJobState::default(),
                    ))
                    .id();
                sub_jobs.push(sj);
                members.push((sj, Vec::new()));
                partition_sjs.push(members.len() - 1);
            }
        }
        // One request shared by the role's replicas (a count per task, not a map).
        let request = std::sync::Arc::new(t.resources.clone());
        // First where each replica goes (spawning its sub-job when first needed), then
        // the replicas in one batch: a 512-task job is one table reservation, not 512.
        let mut slots: Vec<(u32, usize)> = Vec::with_capacity(t.replicas as usize);
        for i in 0..t.replicas {
            let in_segment = seg_slot.get(rank).copied().flatten();
            rank += 1;
            if let Some(slot) = in_segment {
                slots.push((i, slot));
                continue;
            }
            let slot = match &t.partition_policy {
                // The loader checks replicas = partitions × size; clamp anyway so a bad
                // event cannot index past the last partition.
                Some(p) => {
                    let part = ((i / p.partition_size.max(1)) as usize).min(partition_sjs.len().saturating_sub(1));
                    match partition_sjs.get(part) {
                        Some(&slot) => slot,
                        None => continue, // totalPartitions 0: nowhere to put the task
                    }
                }
                None => match default_sj {
                    Some(e) => members.iter().position(|(x, _)| *x == e).unwrap_or(0),
                    None => {
                        let e = world
                            .spawn((
                                SubJob {
                                    job: job_e,
                                    id: spec.name.clone(),
                                    min_available: if has_partitions { default_tasks } else { gang_min },
                                    group: None,
                                    match_index: 0,
                                    network_topology: spec.network_topology.clone(),
                                    tasks: Vec::new(),
                                    parent: None,
                                    block: None,
                                },
                                SubJobState::default(),
                            ))
                            .id();
                        default_sj = Some(e);
                        sub_jobs.push(e);
                        members.push((e, Vec::new()));
                        members.len() - 1
                    }
                },
            };
            slots.push((i, slot));
        }
        // `<name>-<i>` in one buffer, one allocation per name (not `format!`'s two).
        let mut name = format!("{}-", t.name);
        let stem = name.len();
        let mut digits = itoa::Buffer::new();
        let first = tasks.len() as u32;
        let spawned = world.spawn_batch(slots.iter().zip(first..).map(|(&(i, slot), index)| {
            name.truncate(stem);
            name.push_str(digits.format(i));
            (
                Task {
                    job: job_e,
                    sub_job: members[slot].0,
                    name: std::sync::Arc::from(name.as_str()),
                    index,
                    role,
                    request: request.clone(),
                    runtime: t.runtime,
                },
                TaskState::pending(),
            )
        }));
        let spawned: Vec<Entity> = spawned.collect();
        for (&(_, slot), te) in slots.iter().zip(spawned) {
            members[slot].1.push(te);
            // An outer segment holds its inner ones' tasks too.
            let mut up = seg_parent.get(slot).copied().flatten();
            while let Some(p) = up {
                members[p].1.push(te);
                up = seg_parent.get(p).copied().flatten();
            }
            tasks.push(te);
        }
    }
    for (sj, ts) in members {
        if let Some(mut s) = world.get_mut::<SubJob>(sj) {
            s.tasks = ts;
        }
    }
    Parts {
        sub_jobs,
        tasks,
        partition_groups,
    }
}

/// The sub-jobs of a job's `segments` (none without), pushed to `sub_jobs` and
/// `members`, one partition group per layer needing all its segments. Returns per rank
/// the place in `members` of its innermost segment, and per place in `members` the
/// place of the segment outside it.
fn spawn_segments(
    world: &mut World,
    job_e: Entity,
    spec: &JobSpec,
    sub_jobs: &mut Vec<Entity>,
    members: &mut Vec<(Entity, Vec<Entity>)>,
    groups: &mut Vec<(usize, u32)>,
) -> (Vec<Option<usize>>, Vec<Option<usize>>) {
    if spec.segments.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let ranks = spec.replicas();
    let plan = segments::plan(&spec.name, &spec.segments, ranks);
    let first_group = groups.len();
    for layer in 0..spec.segments.len() {
        let count = plan.iter().filter(|s| s.layer == layer).count() as u32;
        groups.push((0, count));
    }
    let deepest = spec.segments.len() - 1;
    let base = members.len();
    let mut parent_of = vec![None; base];
    for s in &plan {
        let parent = s.parent.map(|p| members[base + p].0);
        let sj = world
            .spawn((
                SubJob {
                    job: job_e,
                    id: s.id.clone(),
                    min_available: s.ranks.len() as u32,
                    group: Some(first_group + s.layer),
                    match_index: s.index,
                    network_topology: Some(spec.segments[s.layer].network_topology()),
                    tasks: Vec::new(),
                    parent,
                    block: (s.layer == deepest).then_some(s.index),
                },
                SubJobState::default(),
            ))
            .id();
        sub_jobs.push(sj);
        members.push((sj, Vec::new()));
        parent_of.push(s.parent.map(|p| base + p));
    }
    let slot = segments::innermost(&plan, ranks)
        .into_iter()
        .map(|s| s.map(|i| base + i))
        .collect();
    (slot, parent_of)
}

/// What admission does with a job whose queue does not exist (or takes a limit it is
/// over): a submission is rejected; a job brought back from the store, already accepted
/// once, stays in `default` (the queue went with a config change).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnknownQueue {
    /// Reject the job, saying why (a submission checked for its caller already).
    Reject,
    /// Reject the job, saying why, checking also that its owner may use the queue (the
    /// refused submissions the simulator keeps, `sim::submit`).
    RejectAsOwner,
    /// Keep it in the `default` queue, with a warning.
    Default,
}

/// The CPUs `spec`'s tasks ask for in all ([`Job::cpus`]).
fn cpus_of(spec: &JobSpec) -> u64 {
    spec.tasks
        .iter()
        .map(|t| {
            t.resources
                .get(hyperplan_shared::CPU)
                .saturating_mul(u64::from(t.replicas))
        })
        .sum()
}
