//! What the store keeps of each job: [`JobRecord`] (the job as submitted, its owner and
//! id, its state, and per task its node, rank, NUMA assignment, pid and end) and
//! [`Persist`], one record to write. The `persist` system makes them; the daemon's store
//! writes and reads them.
//!
//! A record is encoded once (MessagePack with field names, so a later version can add
//! fields). Record format 2 (this build) frames the MessagePack with a checksum, so that a
//! byte changed on disk is an error naming the job, never a changed owner or CPU count:
//!
//! ```text
//! 0xC1  2  crc32c (4 bytes, little-endian, over the MessagePack)  MessagePack…
//! ```
//!
//! `0xC1` is the one byte MessagePack never uses, so a framed record cannot be taken for
//! a format-1 record (bare MessagePack, no checksum). [`JobRecord::decode_checked`]
//! requires the frame (stores of format 2); [`JobRecord::decode`] also reads format-1
//! records, for stores written before it.

use hyperplan_shared::JobSpec;
use hyperplan_shared::taskend::TaskEnd;
use serde::{Deserialize, Serialize};

use crate::model::components::{JobPhase, TaskPhase};
pub use crate::model::jobstate::StateRecord;
use crate::numa::assign::Assignment;

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
    /// The job's id (see `JobId`).
    pub id: u64,
    /// Who submitted it (the CN of their certificate).
    pub owner: String,
    /// As submitted (with its submit time and directory).
    pub spec: JobSpec,
    /// Its durable state: phase, times, verdict, exit code.
    pub state: StateRecord,
    /// In the job's task order (spec order, then replica index). Empty for a job none of
    /// whose tasks was placed that is stored at submit or rejected: its spec makes them,
    /// pending (`restore`), so such a record is its spec, not one record per replica.
    pub tasks: Vec<TaskRecord>,
    /// Per sub-job, in the job's order: its AllocatedHyperNode.
    pub sub_jobs: Vec<Option<String>>,
    /// Times it went back to pending (a lost node and `requeue: true`).
    pub requeued: u32,
}

/// One task as the store keeps it: where it was placed and what its agent reported.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRecord {
    /// `<task name>-<replica>`.
    pub name: String,
    /// How far it got (see [`TaskPhase`]).
    pub phase: TaskPhase,
    /// The node it was placed on, by name; `None` while pending.
    pub node: Option<String>,
    /// Its rank in the job; `None` while pending.
    pub rank: Option<u32>,
    /// When it was placed (Unix seconds); `None` while pending.
    pub start_time: Option<u64>,
    /// The PUs, memory and GPUs it holds; `None` without a NUMA request or while pending.
    pub numa: Option<AssignmentRecord>,
    /// Its process id on its node, as its agent reported; `None` until reported.
    pub pid: Option<u32>,
    /// When its agent reported it started (Unix ms); `None` until then.
    pub start_ms: Option<u64>,
    /// How it ended, as reported (or as the core declared it: lost); `None` until then.
    pub end: Option<TaskEnd>,
}

/// A NUMA assignment in the node's dense indices (valid for the same hardware: checked
/// against the node's when its agent registers again).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssignmentRecord {
    /// NUMA nodes used, as a bit mask of dense indices (see `NumaMask`).
    pub numa: u64,
    /// Indices into the node's PUs, ascending.
    pub pus: Vec<u32>,
    /// (dense NUMA index, bytes), one entry per NUMA node used, in the order taken.
    pub memory: Vec<(u32, u64)>,
    /// Indices into the node's GPUs, ascending.
    pub gpus: Vec<u32>,
}

impl AssignmentRecord {
    /// The record of `a`.
    pub fn of(a: &Assignment) -> Self {
        Self {
            numa: a.numa.0,
            pus: a.pus.iter().map(|p| p as u32).collect(),
            memory: a.memory.iter().map(|&(n, b)| (n as u32, b)).collect(),
            gpus: a.gpus.iter().map(|&g| g as u32).collect(),
        }
    }

    /// The assignment it records, for the same hardware.
    pub fn to_assignment(&self) -> Assignment {
        Assignment {
            numa: crate::numa::NumaMask(self.numa),
            pus: crate::numa::PuSet::from_indices(self.pus.iter().map(|&p| p as usize).collect()),
            memory: self.memory.iter().map(|&(n, b)| (n as usize, b)).collect(),
            gpus: self.gpus.iter().map(|&g| g as usize).collect(),
        }
    }
}

impl JobRecord {
    /// A job as the daemon writes it at submit, before it acknowledges the submission:
    /// pending, nothing placed, no task listed (see [`JobRecord::tasks`]).
    pub fn at_submit(id: u64, owner: &str, spec: JobSpec) -> Self {
        Self {
            id,
            owner: owner.to_string(),
            spec,
            state: StateRecord::new(),
            tasks: Vec::new(),
            sub_jobs: Vec::new(),
            requeued: 0,
        }
    }

    /// A job as just submitted with each of its tasks listed, pending: as the persist
    /// system writes a waiting job.
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
            state: StateRecord::new(),
            tasks,
            sub_jobs: Vec::new(),
            requeued: 0,
        }
    }

    /// It has not ended: the planner loads it at start (see `ownership::is_live`).
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
        encode_framed(self)
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
        decode_framed(bytes)
    }

    /// The bare MessagePack of a format-1 record (what this build wrote before record
    /// format 2), for tests of reading and migrating old stores.
    pub fn encode_format1(&self) -> Result<Vec<u8>, RecordError> {
        rmp_serde::to_vec_named(self).map_err(|e| RecordError(e.to_string()))
    }
}

/// MessagePack with field names, framed with its checksum (record format 2): how every
/// record the store keeps is written.
pub fn encode_framed<T: Serialize>(value: &T) -> Result<Vec<u8>, RecordError> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(&[FRAMED, RECORD_FORMAT as u8, 0, 0, 0, 0]);
    rmp_serde::encode::write_named(&mut out, value).map_err(|e| RecordError(e.to_string()))?;
    let crc = crate::checksum::crc32c(&out[FRAME_LEN..]);
    out[2..FRAME_LEN].copy_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// A framed record (see [`encode_framed`]): one without its checksum, or whose checksum
/// does not match its bytes, is an error.
pub fn decode_framed<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, RecordError> {
    let (frame, body) = bytes
        .split_first_chunk::<FRAME_LEN>()
        .filter(|(f, _)| f[0] == FRAMED)
        .ok_or_else(|| RecordError("it has no checksum (it is not a record of format 2): damaged on disk".into()))?;
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

/// A record that cannot be encoded or decoded (the store names the key and file).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RecordError(pub String);

/// One job to write: its record, encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Persist {
    /// The job's id: the key its record is stored under.
    pub id: u64,
    /// Live jobs are loaded at start; ended ones only read for `status --all`.
    pub live: bool,
    /// Unix seconds it ended (its submit time when it never ran), for `keepFinished`
    /// and `status --since`.
    pub ended_at: u64,
    /// The record, encoded (see [`JobRecord::encode`]).
    pub bytes: std::sync::Arc<[u8]>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn an_assignment_reads_back_the_same() {
        let a = Assignment {
            numa: crate::numa::NumaMask(0b101),
            pus: crate::numa::PuSet::from_indices(vec![0, 1, 2, 8, 9]),
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

    /// A reason is a `Reason` now; a store written when it was a sentence still loads,
    /// the sentence as `Reason::Text`, and a typed reason reads back as it went.
    #[test]
    fn a_record_with_a_sentence_for_its_reason_still_loads() {
        use crate::model::reason::{JobRef, Reason};
        let said = "requeued: preempted by job big: its priority is below";
        let mut old = serde_json::to_value(sample()).unwrap();
        old["state"]["phase"] = serde_json::json!("ending");
        old["state"]["reason"] = serde_json::json!(said);
        old["state"]["requeue"] = serde_json::json!(said);
        let bytes = rmp_serde::to_vec_named(&old).unwrap();
        let rec = JobRecord::decode(&bytes).unwrap();
        assert_eq!(rec.state.reason, Some(Reason::Text(said.into())));
        assert_eq!(rec.state.requeue, Some(Reason::Text(said.into())));
        assert_eq!(
            rec.state.reason.as_ref().map(ToString::to_string).as_deref(),
            Some(said)
        );
        let mut typed = sample();
        typed.state.reason = Some(Reason::Requeued(Box::new(Reason::PreemptedBy {
            by: JobRef {
                id: 3,
                name: "big".into(),
            },
            why: "its priority is below".into(),
        })));
        assert_eq!(JobRecord::decode_checked(&typed.encode().unwrap()).unwrap(), typed);
        assert_eq!(typed.state.reason.as_ref().unwrap().to_string(), said);
        // `state export` writes JSON lines: the same.
        let line = serde_json::to_string(&typed).unwrap();
        assert_eq!(serde_json::from_str::<JobRecord>(&line).unwrap(), typed);
    }

    #[test]
    fn format_1_records_are_read_by_decode_and_refused_by_decode_checked() {
        let rec = sample();
        let old = rec.encode_format1().unwrap();
        assert_eq!(JobRecord::decode(&old).unwrap(), rec);
        let e = JobRecord::decode_checked(&old).unwrap_err().to_string();
        assert!(e.contains("no checksum"), "{e}");
    }
}
