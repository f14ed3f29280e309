//! Start-up from the store: the jobs that had not ended come back as they were, their
//! running tasks still holding their nodes. A node of a running task that has not
//! registered yet is a stand-in — NotReady, nothing to offer, [`AwaitingAgent`] — so no
//! pending job is placed on it before its agent reports: then its tasks' NUMA
//! assignments are checked against the hardware it reports and taken again ([`adopt`],
//! a system of its own right after `ingest`). If it never
//! comes, `nodeLostAfter` declares its tasks lost, as for any silent node (see `lost`).
//! What its agent lists from then on is adopted, what it does not know is killed
//! (`lifecycle::tasks_on_node`), and a task it stops listing is lost after
//! `nodeLostAfter` (`lost::lose_missing`). The agents of nodes no record names (idle
//! when the planner stopped) get `nodeLostAfter` to come back too ([`Rejoining`]):
//! until then no job is rejected as one the cluster could never hold.

use std::sync::Arc;

use bevy_ecs::prelude::*;

use crate::model::awaiting::{Awaiting, AwaitingAgent, Rejoining, StandIn, give_up};
use hyperplan_shared::Resources;

use crate::Planner;
use crate::jobs::ownership::{MAX_JOB_ID, NextJobId, is_live, task_count};
use crate::model::components::JobId;
use crate::model::components::Requeued;
use crate::model::components::{Job, JobPhase, JobState, Node, SubJobState, TaskPhase, TaskState};
use crate::model::health::{Away, Heartbeats};
use crate::model::record::{AssignmentRecord, JobRecord};
use crate::model::taskrun::TaskRun;
use crate::names::{JobNames, NodeNames};
use crate::numa::node::{HardwareCache, NodeHardware, NodeNuma};
use crate::persist::{Persisted, Persisting, fingerprint};

impl Planner {
    /// The daemon's planner: every tick ends with a [`Command::Persist`](crate::Command::Persist)
    /// per job whose record changed (see `persist`).
    pub fn enable_persist(&mut self) {
        self.world.insert_resource(Persisting);
    }

    /// Loads fair share's usage from the store (a [`UsageRecord`](crate::model::usage::UsageRecord)
    /// as [`Command::PersistUsage`](crate::Command::PersistUsage) wrote it), before the
    /// first tick; it joins what accrues from then on. A damaged record is an error (the
    /// caller says so and starts with no usage).
    pub fn restore_usage(&mut self, bytes: &[u8]) -> Result<(), crate::model::record::RecordError> {
        let record = crate::model::usage::UsageRecord::decode(bytes)?;
        self.world.resource_mut::<crate::fairshare::Usage>().restored = Some(record);
        Ok(())
    }

    /// Loads the live jobs of the store, before the first tick, at `now_ms` (the driver's
    /// clock). `next_job_id` is the store's; ids go on from the larger of it and the
    /// jobs'. Returns what could not be restored, one line each (the rest is loaded).
    pub fn restore(&mut self, records: Vec<JobRecord>, next_job_id: u64, now_ms: u64) -> Vec<String> {
        self.restore_each(records, next_job_id, now_ms)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// [`Planner::restore`], saying which records were not restored and why: what
    /// `state import` and `--check` run on a scratch planner, so that they refuse exactly
    /// what a start would skip.
    pub fn restore_each(&mut self, records: Vec<JobRecord>, next_job_id: u64, now_ms: u64) -> Vec<NotRestored> {
        // A store that had jobs is a restart: agents of nodes it does not name may still
        // come back (see `Rejoining`). A first start has no one to wait for.
        if !records.is_empty() || next_job_id > 1 {
            let after = self.world.resource::<crate::PlannerConfig>().health.node_lost_after;
            let after_ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
            self.world.insert_resource(Rejoining {
                until_ms: now_ms.saturating_add(after_ms),
            });
        }
        let mut refused = Vec::new();
        let mut next = next_job_id.clamp(1, MAX_JOB_ID + 1);
        for rec in records {
            let (id, name) = (rec.id, rec.spec.name.clone());
            let result = if id == 0 || id > MAX_JOB_ID {
                Err(WhyNotRestored::IdOutOfRange)
            } else {
                next = next.max(id + 1);
                restore_job(&mut self.world, rec, now_ms)
            };
            if let Err(why) = result {
                refused.push(NotRestored { id, name, why });
            }
        }
        self.world.resource_mut::<NextJobId>().0 = next;
        // Nodes a preemption freed stay held for their job (see `allocate::hold`).
        let mut q = self
            .world
            .query::<(bevy_ecs::entity::Entity, &crate::model::components::JobState)>();
        let nominated: Vec<_> = q
            .iter(&self.world)
            .filter(|(_, st)| st.phase == crate::model::components::JobPhase::Pending && st.nomination.is_some())
            .map(|(e, _)| e)
            .collect();
        self.world
            .resource_mut::<crate::model::tick::Nominated>()
            .jobs
            .extend(nominated);
        // Lost tasks that were waiting to start again still are.
        let mut q = self
            .world
            .query::<(bevy_ecs::entity::Entity, &crate::model::components::JobState)>();
        let replacing: Vec<_> = q
            .iter(&self.world)
            .filter(|(_, st)| !st.replacing.is_empty())
            .map(|(e, _)| e)
            .collect();
        self.world
            .resource_mut::<crate::model::tick::Replacements>()
            .jobs
            .extend(replacing);
        refused
    }
}

/// A stored job that a start does not load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotRestored {
    /// The job's id as stored.
    pub id: u64,
    /// The job's name.
    pub name: String,
    /// Why it is left out.
    pub why: WhyNotRestored,
}

/// Why a stored job is not loaded (the texts follow "not restored: ").
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WhyNotRestored {
    /// The stored id is 0 or above [`MAX_JOB_ID`].
    #[error("its id is outside 1 to {MAX_JOB_ID}")]
    IdOutOfRange,
    /// The record is of a job that finished, was cancelled or was rejected for good.
    #[error("it has ended")]
    Ended,
    /// An earlier record of the same store, still live, holds the name.
    #[error("a job of that name is already loaded")]
    NameLoaded,
    /// The spec is over today's `[limits] maxTasksPerJob` (it may have been lowered).
    #[error("its spec makes {tasks} tasks, more than [limits] maxTasksPerJob = {limit}")]
    TooManyTasks {
        /// Its tasks' replicas summed.
        tasks: u64,
        /// `maxTasksPerJob`.
        limit: u64,
    },
    /// The record cannot be encoded again to fingerprint what was loaded.
    #[error("{0}")]
    Encode(crate::model::record::RecordError),
    /// Admission did not make the job from its spec.
    #[error("its spec was refused")]
    Refused,
    /// The spec no longer makes the tasks (or sub-jobs) the record holds.
    #[error("its spec makes {spec} tasks, its record has {record}")]
    TaskCount {
        /// Tasks the spec makes.
        spec: usize,
        /// Tasks in the record.
        record: usize,
    },
}

impl std::fmt::Display for NotRestored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "job {:?} (id {}) not restored: {}", self.name, self.id, self.why)
    }
}

fn restore_job(world: &mut World, rec: JobRecord, now_ms: u64) -> Result<(), WhyNotRestored> {
    if !rec.is_live() {
        return Err(WhyNotRestored::Ended);
    }
    let name = rec.spec.name.clone();
    if let Some(&e) = world.resource::<JobNames>().0.get(&name)
        && world.get::<JobState>(e).is_some_and(is_live)
    {
        return Err(WhyNotRestored::NameLoaded);
    }
    let limit = world.resource::<crate::PlannerConfig>().limits.max_tasks_per_job;
    let tasks = task_count(&rec.spec);
    if tasks > limit {
        return Err(WhyNotRestored::TooManyTasks { tasks, limit });
    }
    let bytes = rec.encode().map_err(WhyNotRestored::Encode)?;
    crate::jobs::admit::admit(
        world,
        rec.spec.clone(),
        rec.owner.clone(),
        JobId(rec.id),
        crate::jobs::admit::UnknownQueue::Default,
    );
    let job_e = *world
        .resource::<JobNames>()
        .0
        .get(&name)
        .ok_or(WhyNotRestored::Refused)?;
    let job = world.get::<Job>(job_e).cloned().ok_or(WhyNotRestored::Refused)?;
    // A record that lists no task is of a job none of whose tasks was placed (one stored
    // at submit, or rejected): its spec made them all, pending.
    let listed = !rec.tasks.is_empty();
    if (listed && job.tasks.len() != rec.tasks.len()) || job.sub_jobs.len() < rec.sub_jobs.len() {
        world.resource_mut::<JobNames>().0.remove(&name);
        world.resource_mut::<crate::names::JobIds>().0.remove(&rec.id);
        if let Some(el) = &rec.spec.element {
            world
                .resource_mut::<crate::model::arrays::Arrays>()
                .remove(el.array_id, job_e);
        }
        world.despawn(job_e);
        return Err(WhyNotRestored::TaskCount {
            spec: job.tasks.len(),
            record: rec.tasks.len(),
        });
    }
    let mut s = rec.state;
    // A job the allocator rejected is looked at again on the topology the agents bring.
    if s.phase == JobPhase::Rejected {
        s.phase = JobPhase::Pending;
    }
    s.rejected_for_topology = false;
    world.entity_mut(job_e).insert(JobState::from_stored(s));
    if rec.requeued > 0 {
        world.entity_mut(job_e).insert(Requeued(rec.requeued));
    }
    for (&sj, hn) in job.sub_jobs.iter().zip(rec.sub_jobs) {
        world.entity_mut(sj).insert(SubJobState {
            allocated_hyper_node: hn,
        });
    }
    for (&task_e, t) in job.tasks.iter().zip(rec.tasks) {
        let node = match (t.phase, t.node.as_deref()) {
            (TaskPhase::Pending, _) | (_, None) => None,
            (TaskPhase::Running, Some(n)) => Some(node_for(world, n, now_ms)),
            (TaskPhase::Finished, Some(n)) => world.resource::<NodeNames>().0.get(n).copied(),
        };
        let phase = if t.phase == TaskPhase::Running && node.is_none() {
            TaskPhase::Pending // a record without its node: placed again
        } else {
            t.phase
        };
        world.entity_mut(task_e).insert(TaskState {
            phase,
            node,
            rank: t.rank.filter(|_| phase != TaskPhase::Pending),
            start_time: t.start_time,
            dispatched: phase != TaskPhase::Pending,
            numa: None,
        });
        if phase == TaskPhase::Running
            && let Some(n) = node
        {
            adopt_later(world, n, task_e, t.numa);
        }
        if t.pid.is_some() || t.start_ms.is_some() || t.end.is_some() {
            world.entity_mut(task_e).insert(TaskRun {
                pid: t.pid,
                start_ms: t.start_ms,
                end: t.end,
                seen_ms: Some(now_ms),
                ..TaskRun::default()
            });
        }
    }
    world.entity_mut(job_e).insert(Persisted(fingerprint(&bytes)));
    Ok(())
}

/// The node called `name`: the one the world has, or a stand-in until its agent registers.
fn node_for(world: &mut World, name: &str, now_ms: u64) -> Entity {
    if let Some(&e) = world.resource::<NodeNames>().0.get(name) {
        return e;
    }
    let empty = Resources::default();
    let hardware = NodeHardware(world.resource_mut::<HardwareCache>().get(None, &empty));
    let e = world
        .spawn((
            Node {
                name: Arc::from(name),
                labels: Default::default(),
                allocatable: empty.clone(),
                external_used: empty,
                ready: false,
                ib_ports: (0, 0),
                ib_guids: Vec::new(),
                nvlink: None,
            },
            hardware,
            // Its agent's link: none yet, silent since the start.
            Heartbeats {
                last_ms: now_ms,
                heard_ms: now_ms,
                linked: false,
                link: 0,
                listed_ms: None,
            },
            AwaitingAgent::default(),
            StandIn,
        ))
        .id();
    world.resource_mut::<NodeNames>().0.insert(name.to_string(), e);
    world.resource_mut::<Away>().0.insert(e, now_ms);
    world.get_resource_or_insert_with(Awaiting::default).0 += 1;
    e
}

fn adopt_later(world: &mut World, node: Entity, task: Entity, numa: Option<AssignmentRecord>) {
    match world.get_mut::<AwaitingAgent>(node) {
        Some(mut waiting) => waiting.0.push((task, numa)),
        // A node the world already has with its hardware (not the daemon's case).
        None => adopt_one(world, node, task, numa),
    }
}

/// The adopt system, right after `ingest`: on each node whose spec arrived (no longer a
/// [`StandIn`]) while it awaited its agent, the restored tasks take their NUMA
/// assignments again, checked against the hardware it now reports; a task whose
/// assignment no longer fits (the node's hardware changed) is lost, saying why. Nodes
/// by name, tasks in the order they were restored.
pub fn adopt(world: &mut World) {
    let mut q = world.query_filtered::<(Entity, &Node), (With<AwaitingAgent>, Without<StandIn>)>();
    let mut nodes: Vec<(Arc<str>, Entity)> = q.iter(world).map(|(e, n)| (n.name.clone(), e)).collect();
    if nodes.is_empty() {
        return;
    }
    let _span = tracing::info_span!("adopt").entered();
    nodes.sort();
    for (_, node) in nodes {
        let Some(waiting) = give_up(world, node) else {
            continue;
        };
        for (task, numa) in waiting.0 {
            adopt_one(world, node, task, numa);
        }
    }
}

fn adopt_one(world: &mut World, node: Entity, task: Entity, numa: Option<AssignmentRecord>) {
    let Some(numa) = numa else { return };
    let Some(hw) = world.get::<NodeHardware>(node).map(|h| h.0.clone()) else {
        return;
    };
    let still_there = world
        .get::<TaskState>(task)
        .is_some_and(|ts| ts.is_running() && ts.node == Some(node));
    if !still_there {
        return;
    }
    if fits(&numa, &hw) {
        if let Some(mut ts) = world.get_mut::<TaskState>(task) {
            ts.numa = Some(Arc::new(numa.to_assignment()));
        }
        return;
    }
    let Some(job) = world.get::<crate::model::components::Task>(task).map(|t| t.job) else {
        return;
    };
    crate::jobs::lifecycle::lose(
        world,
        job,
        task,
        "its node's hardware changed since the planner placed it".into(),
    );
}

/// The assignment names only PUs, GPUs and NUMA nodes the hardware has.
fn fits(a: &AssignmentRecord, hw: &NodeNuma) -> bool {
    let m = &hw.machine;
    let numa = m.numa_count();
    a.pus.iter().all(|&p| (p as usize) < m.pus.len())
        && a.gpus.iter().all(|&g| (g as usize) < m.gpus.len())
        && a.memory.iter().all(|&(n, _)| (n as usize) < numa)
        && (numa >= 64 || a.numa >> numa == 0)
}
