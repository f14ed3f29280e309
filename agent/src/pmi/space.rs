//! One job's PMI key-value space on this node, without I/O: what its ranks put, what
//! the job's other nodes put (from each fence's `FenceDone`), and the barrier its ranks
//! here wait in. When every rank of the job on this node has entered the barrier, the
//! node's part of the fence goes to the planner (or, for a job on this node alone, the
//! fence completes here); its `FenceDone` lets them all out.
//!
//! Bounded: keys and values by the sizes the PMI client is told (`get_maxes`), the whole
//! space by [`MAX_SPACE_BYTES`]; a put past a bound is an error to that rank, never
//! growth.

use std::collections::{BTreeSet, HashMap};

use hyperplan_net::messages::PmiFence;

use super::wire::{KEYLEN_MAX, VALLEN_MAX};

/// The most bytes (keys and values) one job's space holds on a node.
pub const MAX_SPACE_BYTES: usize = 64 << 20;
/// The most bytes this node's ranks put between two fences: its part of a fence is one
/// frame to the planner (which takes at most this much from all nodes together).
pub const MAX_PART_BYTES: usize = 12 << 20;

/// What a job's ranks here need to know of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobShape {
    pub job: String,
    pub job_id: u64,
    /// The job's ranks, all nodes.
    pub size: u32,
    /// Its ranks on this node.
    pub local: BTreeSet<u32>,
    /// How many nodes hold its ranks.
    pub nodes: u32,
    /// `PMI_process_mapping` (empty: not given).
    pub mapping: String,
}

impl JobShape {
    /// The key-value space's name (`get_my_kvsname`): one per job id.
    pub fn kvsname(&self) -> String {
        format!("hyperplan_{}", self.job_id)
    }
}

/// Why a put was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PutError {
    #[error("key of {len} bytes, longer than {KEYLEN_MAX}")]
    KeyTooLong { len: usize },
    #[error("value of {len} bytes, longer than {VALLEN_MAX}")]
    ValueTooLong { len: usize },
    #[error("the job's key-value space is full ({MAX_SPACE_BYTES} bytes on this node)")]
    Full,
    #[error("more than {MAX_PART_BYTES} bytes put on this node before a fence")]
    PartFull,
    #[error("the key PMI_process_mapping is reserved")]
    Reserved,
    #[error("the job's PMI space on this node is gone")]
    Gone,
}

/// What a rank entering the barrier leads to.
#[derive(Debug, PartialEq, Eq)]
pub enum Barrier {
    /// Others here have not come yet (or the fence is out): wait.
    Wait,
    /// Every rank here is in: send this node's part to the planner, then wait.
    Send(PmiFence),
    /// The fence is complete (a job on this node alone): these ranks leave it now.
    Release(Vec<u32>),
}

/// One job's space and barrier on this node.
#[derive(Debug)]
pub struct Space {
    pub shape: JobShape,
    values: HashMap<String, String>,
    /// Put here since the last fence, in order: this node's part of the next one.
    pending: Vec<(String, String)>,
    pending_bytes: usize,
    bytes: usize,
    in_barrier: BTreeSet<u32>,
    /// Fences completed.
    seq: u64,
    /// This node's part of fence `seq + 1`, sent and not yet answered.
    sent: Option<PmiFence>,
}

impl Space {
    pub fn new(shape: JobShape) -> Space {
        Space {
            shape,
            values: HashMap::new(),
            pending: Vec::new(),
            pending_bytes: 0,
            bytes: 0,
            in_barrier: BTreeSet::new(),
            seq: 0,
            sent: None,
        }
    }

    /// Fences completed so far.
    pub fn fences(&self) -> u64 {
        self.seq
    }

    /// A rank's put: visible to this node's ranks at once, to the others after the next
    /// fence.
    pub fn put(&mut self, key: &str, value: &str) -> Result<(), PutError> {
        if key.len() > KEYLEN_MAX {
            return Err(PutError::KeyTooLong { len: key.len() });
        }
        if value.len() > VALLEN_MAX {
            return Err(PutError::ValueTooLong { len: value.len() });
        }
        if key == "PMI_process_mapping" {
            return Err(PutError::Reserved);
        }
        let cost = key.len() + value.len();
        if self.pending_bytes + cost > MAX_PART_BYTES {
            return Err(PutError::PartFull);
        }
        // Counted twice (the value and this node's part of the fence) until the fence.
        if self.bytes + 2 * cost > MAX_SPACE_BYTES {
            return Err(PutError::Full);
        }
        self.bytes += 2 * cost;
        self.pending_bytes += cost;
        self.values.insert(key.to_string(), value.to_string());
        self.pending.push((key.to_string(), value.to_string()));
        Ok(())
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        if key == "PMI_process_mapping" && !self.shape.mapping.is_empty() {
            return Some(&self.shape.mapping);
        }
        // MPICH's ch3 asks which ranks died (hydra answers none, as here).
        if key == "PMI_dead_processes" && !self.values.contains_key(key) {
            return Some("");
        }
        self.values.get(key).map(String::as_str)
    }

    /// `rank` enters the barrier. A rank not of this job here, or already in, changes
    /// nothing.
    pub fn barrier_in(&mut self, rank: u32) -> Barrier {
        if !self.shape.local.contains(&rank) || !self.in_barrier.insert(rank) {
            return Barrier::Wait;
        }
        if self.in_barrier.len() < self.shape.local.len() || self.sent.is_some() {
            return Barrier::Wait;
        }
        let pairs = std::mem::take(&mut self.pending);
        self.bytes = self.bytes.saturating_sub(std::mem::take(&mut self.pending_bytes));
        if self.shape.nodes <= 1 {
            return Barrier::Release(self.complete());
        }
        let fence = PmiFence {
            job: self.shape.job.clone(),
            job_id: self.shape.job_id,
            seq: self.seq + 1,
            pairs,
        };
        self.sent = Some(fence.clone());
        Barrier::Send(fence)
    }

    /// This node's part of a fence sent and not yet answered (sent again on a new link).
    pub fn unanswered(&self) -> Option<&PmiFence> {
        self.sent.as_ref()
    }

    /// The planner's `FenceDone`: every node's pairs; returns the ranks that leave the
    /// barrier. One for another fence (a repeat, a stale one) is ignored: `None`.
    pub fn done(&mut self, fence: PmiFence) -> Result<Option<Vec<u32>>, PutError> {
        if self.sent.as_ref().is_none_or(|s| s.seq != fence.seq) {
            return Ok(None);
        }
        let mut added = 0usize;
        for (k, v) in &fence.pairs {
            // Ours are here already (counted); the others' are new.
            if self.values.get(k) != Some(v) {
                added += k.len() + v.len();
            }
        }
        if self.bytes + added > MAX_SPACE_BYTES {
            return Err(PutError::Full);
        }
        for (k, v) in fence.pairs {
            self.values.insert(k, v);
        }
        self.bytes += added;
        self.sent = None;
        Ok(Some(self.complete()))
    }

    /// The planner's `FenceFailed` for the fence out: the ranks in the barrier leave it
    /// (with an error); `None` when it is not the fence out.
    pub fn failed(&mut self, seq: u64) -> Option<Vec<u32>> {
        if self.sent.as_ref().is_none_or(|s| s.seq != seq) {
            return None;
        }
        self.sent = None;
        Some(std::mem::take(&mut self.in_barrier).into_iter().collect())
    }

    fn complete(&mut self) -> Vec<u32> {
        self.seq += 1;
        std::mem::take(&mut self.in_barrier).into_iter().collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn shape(local: &[u32], nodes: u32) -> JobShape {
        JobShape {
            job: "mpi".into(),
            job_id: 7,
            size: 4,
            local: local.iter().copied().collect(),
            nodes,
            mapping: "(vector,(0,2,2))".into(),
        }
    }

    #[test]
    fn a_job_on_one_node_fences_here() {
        let mut s = Space::new(shape(&[0, 1], 1));
        s.put("bc-0", "addr0").unwrap();
        assert_eq!(s.barrier_in(0), Barrier::Wait);
        assert_eq!(s.barrier_in(0), Barrier::Wait, "a repeat changes nothing");
        assert_eq!(s.barrier_in(5), Barrier::Wait, "not a rank here");
        assert_eq!(s.barrier_in(1), Barrier::Release(vec![0, 1]));
        assert_eq!(s.fences(), 1);
        assert_eq!(s.get("bc-0"), Some("addr0"));
        assert_eq!(s.get("PMI_process_mapping"), Some("(vector,(0,2,2))"));
    }

    #[test]
    fn a_job_on_two_nodes_sends_its_part_and_waits_for_the_others() {
        let mut s = Space::new(shape(&[0, 1], 2));
        s.put("bc-0", "a0").unwrap();
        s.put("bc-1", "a1").unwrap();
        assert_eq!(s.get("bc-0"), Some("a0"), "visible here at once");
        assert_eq!(s.barrier_in(1), Barrier::Wait);
        let Barrier::Send(fence) = s.barrier_in(0) else {
            panic!("expected a fence to send")
        };
        assert_eq!(fence.seq, 1);
        assert_eq!(
            fence.pairs,
            [("bc-0".into(), "a0".into()), ("bc-1".into(), "a1".into())]
        );
        assert_eq!(s.unanswered(), Some(&fence));
        // A stale answer is ignored; the right one lets both out with the others' keys.
        let mut other = fence.clone();
        other.seq = 9;
        assert_eq!(s.done(other).unwrap(), None);
        let mut all = fence.clone();
        all.pairs.push(("bc-2".into(), "a2".into()));
        assert_eq!(s.done(all).unwrap(), Some(vec![0, 1]));
        assert_eq!(s.get("bc-2"), Some("a2"));
        assert_eq!(s.unanswered(), None);
        // The next fence carries only what was put since.
        s.put("x", "1").unwrap();
        s.barrier_in(0);
        let Barrier::Send(next) = s.barrier_in(1) else { panic!() };
        assert_eq!((next.seq, next.pairs.len()), (2, 1));
        assert_eq!(s.failed(2), Some(vec![0, 1]));
        assert_eq!(s.failed(2), None);
    }

    #[test]
    fn puts_past_the_bounds_are_refused() {
        let mut s = Space::new(shape(&[0], 1));
        assert_eq!(
            s.put(&"k".repeat(KEYLEN_MAX + 1), "v"),
            Err(PutError::KeyTooLong { len: KEYLEN_MAX + 1 })
        );
        assert!(matches!(
            s.put("k", &"v".repeat(VALLEN_MAX + 1)),
            Err(PutError::ValueTooLong { .. })
        ));
        assert_eq!(s.put("PMI_process_mapping", "x"), Err(PutError::Reserved));
        let value = "v".repeat(VALLEN_MAX);
        let mut refused = None;
        for i in 0..(MAX_SPACE_BYTES / VALLEN_MAX + 10) {
            if let Err(e) = s.put(&format!("k{i}"), &value) {
                refused = Some(e);
                break;
            }
        }
        assert_eq!(refused, Some(PutError::PartFull));
        // Fences empty the part; the space as a whole still fills.
        assert_eq!(s.barrier_in(0), Barrier::Release(vec![0]));
        let mut refused = None;
        for i in 0..(MAX_SPACE_BYTES / VALLEN_MAX + 10) {
            if let Err(e) = s.put(&format!("j{i}"), &value) {
                refused = Some(e);
                break;
            }
            if i % 1000 == 999 {
                assert_eq!(s.barrier_in(0), Barrier::Release(vec![0]));
            }
        }
        assert_eq!(refused, Some(PutError::Full));
    }
}
