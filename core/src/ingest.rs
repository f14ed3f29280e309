//! The ingest system: applies queued events to the world (nodes, their links and
//! heartbeats (see `health`), HyperNode sources, jobs with their owners, sub-jobs and
//! tasks); task starts, ends, cancellations and what nodes run go to `lifecycle`.

use bevy_ecs::prelude::*;
use hyperplan_shared::{JobSpec, NodeSpec};

use super::discovery::{self, Found};
use super::health::{self, Heartbeats};
use super::lifecycle;
use super::numa::node::{HardwareCache, NodeHardware};
use super::numa::request::task_numa;
use super::ownership::{MAX_JOB_ID, NextJobId, is_live, task_count};
use super::refusals::Refusals;
use crate::config::PlannerConfig;
use crate::model::commands::Command;
use crate::model::components::SourceKind;
use crate::model::components::{Job, JobPhase, JobState, Node, SubJob, SubJobState, Task, TaskState};
use crate::model::components::{JobId, JobOwner, SIM_OWNER};
use crate::model::events::Event;
use crate::model::tick::{CapacityEpoch, Inbox, LabelTypes, NodeSetGeneration, Now, Outbox, TopologyDirty};

use super::names::{JobNames, NodeNames};

pub fn ingest(world: &mut World) {
    let _span = tracing::info_span!("ingest").entered();
    let events = std::mem::take(&mut world.resource_mut::<Inbox>().0);
    // Only events that may free or add room move the epoch (a poll that found nothing
    // new must not make every pending job be searched again).
    let quiet = |e: &Event| {
        matches!(
            e,
            Event::Submit(_)
                | Event::SubmitBy { .. }
                | Event::Heartbeat { .. }
                | Event::TaskStarted { .. }
                | Event::TasksOnNode { .. }
                | Event::DeclareSource { .. }
                | Event::Discovered {
                    result: Ok(Found::Unchanged) | Err(_),
                    ..
                }
        )
    };
    if !events.iter().all(quiet) {
        world.resource_mut::<CapacityEpoch>().0 += 1;
    }
    for event in events {
        match event {
            Event::NodeUp(spec) => node_up(world, spec),
            Event::NodeGone { name } => {
                let found = world.resource_mut::<NodeNames>().0.remove(&name);
                if let Some(e) = found {
                    world.despawn(e);
                    world.resource_mut::<TopologyDirty>().0 = true;
                    world.resource_mut::<NodeSetGeneration>().0 += 1;
                }
            }
            Event::StaticHyperNodes(specs) => {
                let at = world.resource::<Now>().0;
                let found = Found::HyperNodes {
                    summary: format!("{} HyperNode(s) from the cluster file", specs.len()),
                    specs,
                    warnings: Vec::new(),
                };
                discovery::record(world, SourceKind::Static.as_str(), SourceKind::Static, at, Ok(found));
            }
            Event::LabelDiscovery(types) => {
                discovery::declare_label(world, &types);
                world.resource_mut::<LabelTypes>().0 = types;
                world.resource_mut::<TopologyDirty>().0 = true;
            }
            Event::DeclareSource { source, kind, target } => discovery::declare(world, &source, kind, target),
            Event::Discovered {
                source,
                kind,
                at,
                result,
            } => discovery::record(world, &source, kind, at, result),
            Event::NodeReady { name, ready } => {
                let found = world.resource::<NodeNames>().0.get(&name).copied();
                if let Some(e) = found
                    && let Some(mut n) = world.get_mut::<Node>(e)
                    && n.ready != ready
                {
                    n.ready = ready;
                    // Capacity per HyperNode changes with it: rebuild the index and cache.
                    world.resource_mut::<TopologyDirty>().0 = true;
                }
            }
            Event::LinkUp { node, link, at_ms } => {
                world.resource_mut::<Refusals>().clear(&node);
                health::link_up(world, &node, link, at_ms);
            }
            Event::NodeRefused { node, reason, at_ms } => {
                // Said once per change of reason: an agent retrying is no news.
                if world.resource_mut::<Refusals>().refuse(&node, &reason, at_ms) {
                    let line = format!("node {node}: its agent is refused until it changes: {reason}");
                    world.resource_mut::<Outbox>().0.push(Command::Warn(line));
                }
            }
            Event::Heartbeat { node, at_ms } => health::heartbeat(world, &node, at_ms),
            Event::LinkDown { node, link, at_ms } => health::link_down(world, &node, link, at_ms),
            Event::Submit(spec) => submit(world, spec, SIM_OWNER.to_string()),
            Event::SubmitBy { spec, owner } => submit(world, spec, owner),
            Event::Cancel { job, grace_secs } => lifecycle::cancel(world, &job, grace_secs),
            Event::TaskFinished { job, task } => lifecycle::task_finished(world, &job, &task),
            Event::TaskStarted {
                node,
                job,
                job_id,
                task,
                pid,
                at_ms,
            } => lifecycle::task_started(world, &node, &job, job_id, &task, pid, at_ms),
            Event::TaskEnded {
                node,
                job,
                job_id,
                task,
                end,
            } => lifecycle::task_ended(world, &node, &job, job_id, &task, end),
            Event::TasksOnNode { node, tasks } => lifecycle::tasks_on_node(world, &node, tasks),
        }
    }
}

fn node_up(world: &mut World, spec: NodeSpec) {
    // The daemon refuses such an agent at registration; a cluster file can still name one.
    if let Some(why) = spec.hardware.as_ref().and_then(|t| t.unsupported()) {
        let w = format!("node {:?} not added: {why}", spec.name);
        world.resource_mut::<Outbox>().0.push(Command::Warn(w));
        return;
    }
    let hardware = NodeHardware(
        world
            .resource_mut::<HardwareCache>()
            .get(spec.hardware.as_ref(), &spec.resources),
    );
    let ib_ports = spec.hardware.as_ref().map_or((0, 0), |t| {
        let ports = t.hcas.iter().flat_map(|h| &h.ports);
        let up = ports.clone().filter(|p| p.state.as_deref() == Some("ACTIVE")).count();
        (up as u32, ports.count() as u32)
    });
    let ib_guids = spec
        .hardware
        .as_ref()
        .map(|t| t.hcas.iter().flat_map(|h| h.guids()).collect())
        .unwrap_or_default();
    let known = world.resource::<NodeNames>().0.get(&spec.name).copied();
    // A node whose readiness its link decides keeps it across a new spec (an agent
    // that is away may still have its topology changed); any other node is Ready.
    let ready = known
        .filter(|&e| world.get::<Heartbeats>(e).is_some())
        .and_then(|e| world.get::<Node>(e))
        .is_none_or(|n| n.ready);
    let node = Node {
        name: spec.name.into(),
        labels: spec.labels,
        allocatable: spec.resources,
        external_used: spec.used,
        ready,
        ib_ports,
        ib_guids,
    };
    match known {
        Some(e) => {
            world.entity_mut(e).insert((node, hardware));
        }
        None => {
            let name = node.name.to_string();
            let e = world.spawn((node, hardware)).id();
            world.resource_mut::<NodeNames>().0.insert(name, e);
        }
    }
    world.resource_mut::<TopologyDirty>().0 = true;
    world.resource_mut::<NodeSetGeneration>().0 += 1;
    // A node known from the store until now: its restored tasks take their NUMA
    // assignments again on the hardware it reports.
    if let Some(e) = known {
        super::restore::adopt(world, e);
    }
}

fn submit(world: &mut World, spec: JobSpec, owner: String) {
    // Every submission uses its id up, refused or not (see `Planner::next_job_id`).
    let id = {
        let mut next = world.resource_mut::<NextJobId>();
        let id = next.0;
        match id.checked_add(1).filter(|_| id <= MAX_JOB_ID) {
            Some(n) => next.0 = n,
            // Drivers refuse the submit first (`check_submission`); ids never wrap.
            None => {
                let msg = format!(
                    "job {}: no job id is left (the largest is {MAX_JOB_ID}); submission ignored",
                    spec.name
                );
                world.resource_mut::<Outbox>().0.push(Command::Warn(msg));
                return;
            }
        }
        JobId(id)
    };
    admit(world, spec, owner, id);
}

/// Makes the job `id` with its sub-jobs and tasks, pending (or rejected, saying why);
/// also how `restore` brings a stored job back.
pub(crate) fn admit(world: &mut World, spec: JobSpec, owner: String, id: JobId) {
    let taken = world.resource::<JobNames>().0.get(&spec.name).copied();
    if taken.and_then(|e| world.get::<JobState>(e)).is_some_and(is_live) {
        let msg = format!(
            "job {}: a job of that name has not ended; submission ignored",
            spec.name
        );
        world.resource_mut::<Outbox>().0.push(Command::Warn(msg));
        return;
    }
    // Drivers check the limit before they push; this keeps a job that passed none (the
    // simulator's files) from spawning an entity per replica.
    let limit = world.resource::<PlannerConfig>().limits.max_tasks_per_job;
    let tasks = task_count(&spec);
    if tasks > limit {
        let reason = format!("{tasks} tasks, more than [limits] maxTasksPerJob = {limit}");
        world.resource_mut::<Outbox>().0.push(Command::Reject {
            job: spec.name.clone(),
            reason: reason.clone(),
        });
        let mut state = JobState::new();
        state.phase = JobPhase::Rejected;
        state.reason = Some(reason);
        let gang_min = spec.gang_minimum();
        let name = spec.name.clone();
        let numa = spec.tasks.iter().map(|_| None).collect();
        let job = Job {
            spec: std::sync::Arc::new(spec),
            gang_min,
            sub_jobs: Vec::new(),
            tasks: Vec::new(),
            partition_groups: Vec::new(),
            numa,
        };
        let e = world.spawn((job, state, JobOwner(owner.into()), id)).id();
        world.resource_mut::<JobNames>().0.insert(name, e);
        return;
    }
    let job_e = world.spawn_empty().id();
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
        let spawned = world.spawn_batch(slots.iter().map(|&(i, slot)| {
            name.truncate(stem);
            name.push_str(digits.format(i));
            (
                Task {
                    job: job_e,
                    sub_job: members[slot].0,
                    name: std::sync::Arc::from(name.as_str()),
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
            tasks.push(te);
        }
    }
    for (sj, ts) in members {
        if let Some(mut s) = world.get_mut::<SubJob>(sj) {
            s.tasks = ts;
        }
    }
    world.resource_mut::<JobNames>().0.insert(spec.name.clone(), job_e);
    let default_policy = world.resource::<PlannerConfig>().numa.default_policy;
    let mut state = JobState::new();
    let mut numa = Vec::with_capacity(spec.tasks.len());
    for (i, t) in spec.tasks.iter().enumerate() {
        match task_numa(t, default_policy) {
            Ok(n) => numa.push(n),
            Err(why) => {
                // The file parser catches an explicit policy; the planner's default can
                // only be checked here.
                let why = format!("tasks[{i}] ({}): {why}", t.name);
                state.phase = JobPhase::Rejected;
                state.reason = Some(why.clone());
                world.resource_mut::<Outbox>().0.push(Command::Reject {
                    job: spec.name.clone(),
                    reason: why,
                });
                numa.push(None);
            }
        }
    }
    world.entity_mut(job_e).insert((
        Job {
            spec: std::sync::Arc::new(spec),
            gang_min,
            sub_jobs,
            tasks,
            partition_groups,
            numa,
        },
        state,
        JobOwner(owner.into()),
        id,
    ));
}
