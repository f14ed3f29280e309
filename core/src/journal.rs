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
//!
//! Record format 2 (this build) frames the MessagePack with a checksum, so that a byte
//! changed on disk is an error naming the job, never a changed owner or CPU count:
//!
//! ```text
//! 0xC1  2  crc32c (4 bytes, little-endian, over the MessagePack)  MessagePack…
//! ```
//!
//! `0xC1` is the one byte MessagePack never uses, so a framed record cannot be taken for
//! a format-1 record (bare MessagePack, no checksum). [`JobRecord::decode_checked`]
//! requires the frame (stores of format 2); [`JobRecord::decode`] also reads format-1
//! records, for stores written before it.

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
/// 1: bare MessagePack; 2: framed with a CRC-32C (see the module's documentation).
pub const RECORD_FORMAT: u32 = 2;

/// The first byte of a framed record: never used by MessagePack.
const FRAMED: u8 = 0xC1;
/// The frame: marker, record format, CRC-32C.
const FRAME_LEN: usize = 6;

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

    /// MessagePack with field names, framed with its checksum (record format 2).
    pub fn encode(&self) -> Result<Vec<u8>, RecordError> {
        let mut out = Vec::with_capacity(512);
        out.extend_from_slice(&[FRAMED, RECORD_FORMAT as u8, 0, 0, 0, 0]);
        rmp_serde::encode::write_named(&mut out, self).map_err(|e| RecordError(e.to_string()))?;
        let crc = crate::checksum::crc32c(&out[FRAME_LEN..]);
        out[2..FRAME_LEN].copy_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    /// A record of format 2 (checksum checked) or 1 (bare MessagePack: nothing to check),
    /// for a store that may still hold format-1 records.
    pub fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        if bytes.first() == Some(&FRAMED) {
            Self::decode_checked(bytes)
        } else {
            rmp_serde::from_slice(bytes).map_err(|e| RecordError(e.to_string()))
        }
    }

    /// A record of format 2 only: a record without its checksum, or whose checksum does
    /// not match its bytes, is an error.
    pub fn decode_checked(bytes: &[u8]) -> Result<Self, RecordError> {
        let (frame, body) = bytes
            .split_first_chunk::<FRAME_LEN>()
            .filter(|(f, _)| f[0] == FRAMED)
            .ok_or_else(|| {
                RecordError("it has no checksum (it is not a record of format 2): damaged on disk".into())
            })?;
        if u32::from(frame[1]) != RECORD_FORMAT {
            return Err(RecordError(format!(
                "record format {} (this build reads format {RECORD_FORMAT}): damaged on disk, or written by another version",
                frame[1]
            )));
        }
        let stored = u32::from_le_bytes([frame[2], frame[3], frame[4], frame[5]]);
        let computed = crate::checksum::crc32c(body);
        if stored != computed {
            return Err(RecordError(format!(
                "checksum mismatch (stored {stored:08x}, computed {computed:08x}): its bytes changed on disk"
            )));
        }
        rmp_serde::from_slice(body).map_err(|e| RecordError(e.to_string()))
    }

    /// The bare MessagePack of a format-1 record (what this build wrote before record
    /// format 2), for tests of reading and migrating old stores.
    pub fn encode_format1(&self) -> Result<Vec<u8>, RecordError> {
        rmp_serde::to_vec_named(self).map_err(|e| RecordError(e.to_string()))
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

    fn sample() -> JobRecord {
        let spec = hyperplan_shared::parse_jobs(
            "name: sample\ntasks:\n  - name: t\n    replicas: 2\n    resources: {cpu: 1}\n    command: [\"true\"]\n",
            std::path::Path::new("job.yaml"),
        )
        .unwrap()
        .remove(0);
        JobRecord::submitted(7, "admin", spec)
    }

    #[test]
    fn a_record_reads_back_and_any_flipped_bit_is_an_error() {
        let rec = sample();
        let bytes = rec.encode().unwrap();
        assert_eq!(bytes[..2], [FRAMED, 2]);
        assert_eq!(JobRecord::decode_checked(&bytes).unwrap(), rec);
        assert_eq!(JobRecord::decode(&bytes).unwrap(), rec);
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                assert!(JobRecord::decode_checked(&b).is_err(), "byte {i} bit {bit}");
                // A record that still decodes is never a different job.
                if let Ok(r) = JobRecord::decode(&b) {
                    assert_eq!(r, rec, "byte {i} bit {bit}");
                }
            }
        }
        let owner = bytes.windows(5).position(|w| w == b"admin").unwrap();
        let mut b = bytes.clone();
        b[owner + 4] ^= 1; // admin -> admio
        let e = JobRecord::decode_checked(&b).unwrap_err().to_string();
        assert!(e.starts_with("checksum mismatch"), "{e}");
    }

    #[test]
    fn format_1_records_are_read_by_decode_and_refused_by_decode_checked() {
        let rec = sample();
        let old = rec.encode_format1().unwrap();
        assert_eq!(JobRecord::decode(&old).unwrap(), rec);
        let e = JobRecord::decode_checked(&old).unwrap_err().to_string();
        assert!(e.contains("no checksum"), "{e}");
    }

    #[test]
    fn fingerprints_are_stable_across_runs() {
        // A fixed value: a change of hasher would rewrite every record once, and say so here.
        assert_eq!(fingerprint(b"hyperplan"), fingerprint(b"hyperplan"));
        assert_ne!(fingerprint(b"a"), fingerprint(b"b"));
    }
}
