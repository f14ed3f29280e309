//! One job's PMI key-value space on this node, without I/O: what its ranks put, what
//! the job's other nodes put (from each fence's `FenceDone`), and the barrier its ranks
//! here wait in. When every rank of the job on this node has entered the barrier, the
//! node's part of the fence goes to the planner (or, for a job on this node alone, the
//! fence completes here); its `FenceDone` lets them all out.
//!
//! Bounded: keys and values by the sizes the PMI client is told (`get_maxes`), the whole
//! space by [`MAX_SPACE_BYTES`], and by the [`Room`] the hub leaves it under the node's
//! and the user's bounds; a put past a bound is an error to that rank, never growth. What
//! a space holds is counted as the memory it takes ([`charge`]): a pair's bytes and what
//! keeping it costs, once in the values and once in this node's part of the next fence
//! until that fence is answered.

use std::collections::{BTreeSet, HashMap};

use hyperplan_net::messages::PmiFence;

use super::wire::{KEYLEN_MAX, VALLEN_MAX};

/// The most bytes (keys and values, and what keeping them costs: [`charge`]) one job's
/// space holds on a node.
pub const MAX_SPACE_BYTES: usize = 64 << 20;
/// What keeping one pair costs beyond its bytes, about: two allocations' headers and
/// rounding, and its slot in a hash table or a list (measured with glibc: ~235 bytes for
/// a 10-byte pair kept in both). Without it a rank putting tiny pairs would hold many
/// times the bound.
pub const PAIR_OVERHEAD: usize = 128;
/// The most bytes this node's ranks put between two fences: its part of a fence is one
/// frame to the planner (which takes at most this much from all nodes together).
pub const MAX_PART_BYTES: usize = 12 << 20;

/// What a job's ranks here need to know of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobShape {
    pub job: String,
    pub job_id: hyperplan_shared::ids::JobId,
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
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum PutError {
    #[error("key of {len} bytes, longer than {KEYLEN_MAX}")]
    KeyTooLong { len: usize },
    #[error("value of {len} bytes, longer than {VALLEN_MAX}")]
    ValueTooLong { len: usize },
    #[error("the job's key-value space is full ({MAX_SPACE_BYTES} bytes on this node)")]
    Full,
    #[error("the PMI key-value spaces of the job's user on this node are full ({limit} bytes)")]
    UserFull { limit: usize },
    #[error("this node's PMI key-value spaces are full ({limit} bytes, all jobs)")]
    NodeFull { limit: usize },
    #[error("more than {MAX_PART_BYTES} bytes put on this node before a fence")]
    PartFull,
    #[error("the key PMI_process_mapping is reserved")]
    Reserved,
    #[error("the job's PMI space on this node is gone")]
    Gone,
}

/// What a pair costs the space that keeps it: its bytes and [`PAIR_OVERHEAD`].
pub fn charge(key: &str, value: &str) -> usize {
    key.len() + value.len() + PAIR_OVERHEAD
}

/// How much more a space may take under the node's and the user's bounds (the hub's to
/// say), and the refusal when a change needs more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Room {
    pub bytes: usize,
    /// [`PutError::UserFull`] or [`PutError::NodeFull`]: the bound nearer to full.
    pub refusal: Refusal,
}

/// Which bound a [`Room`] is short by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    User { limit: usize },
    Node { limit: usize },
}

impl Room {
    /// No bound but the space's own (a space alone, as in tests).
    pub const UNBOUNDED: Room = Room {
        bytes: usize::MAX,
        refusal: Refusal::Node { limit: usize::MAX },
    };

    fn refused(self) -> PutError {
        match self.refusal {
            Refusal::User { limit } => PutError::UserFull { limit },
            Refusal::Node { limit } => PutError::NodeFull { limit },
        }
    }
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
    /// [`charge`] of `values`.
    values_charge: usize,
    /// Put here since the last fence, in order: this node's part of the next one.
    pending: Vec<(String, String)>,
    /// Keys' and values' bytes in `pending`: what [`MAX_PART_BYTES`] bounds.
    pending_bytes: usize,
    /// [`charge`] of `pending`.
    pending_charge: usize,
    /// [`charge`] of `sent`.
    sent_charge: usize,
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
            values_charge: 0,
            pending: Vec::new(),
            pending_bytes: 0,
            pending_charge: 0,
            sent_charge: 0,
            in_barrier: BTreeSet::new(),
            seq: 0,
            sent: None,
        }
    }

    /// Fences completed so far.
    pub fn fences(&self) -> u64 {
        self.seq
    }

    /// What the space holds, counted as [`charge`]s: what its job costs the node.
    pub fn bytes(&self) -> usize {
        self.values_charge + self.pending_charge + self.sent_charge
    }

    /// A rank's put: visible to this node's ranks at once, to the others after the next
    /// fence. It may take at most `room` more.
    pub fn put(&mut self, key: &str, value: &str, room: Room) -> Result<(), PutError> {
        if key.len() > KEYLEN_MAX {
            return Err(PutError::KeyTooLong { len: key.len() });
        }
        if value.len() > VALLEN_MAX {
            return Err(PutError::ValueTooLong { len: value.len() });
        }
        if key == "PMI_process_mapping" {
            return Err(PutError::Reserved);
        }
        let bytes = key.len() + value.len();
        if self.pending_bytes + bytes > MAX_PART_BYTES {
            return Err(PutError::PartFull);
        }
        // Kept twice (the value and this node's part of the fence) until the fence; a
        // value it replaces goes.
        let cost = charge(key, value);
        let replaced = self.values.get(key).map_or(0, |old| charge(key, old));
        let more = (2 * cost).saturating_sub(replaced);
        if self.bytes() + more > MAX_SPACE_BYTES {
            return Err(PutError::Full);
        }
        if more > room.bytes {
            return Err(room.refused());
        }
        self.values_charge = self.values_charge.saturating_sub(replaced) + cost;
        self.pending_charge += cost;
        self.pending_bytes += bytes;
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
        self.pending_bytes = 0;
        let charge = std::mem::take(&mut self.pending_charge);
        if self.shape.nodes <= 1 {
            return Barrier::Release(self.complete());
        }
        self.sent_charge = charge;
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
    /// barrier. One for another fence (a repeat, a stale one) is ignored: `None`. The
    /// space may end up at most `room` over what it holds now; past a bound the fence
    /// fails (the caller then calls [`Space::failed`]) and nothing is kept.
    pub fn done(&mut self, fence: PmiFence, room: Room) -> Result<Option<Vec<u32>>, PutError> {
        if self.sent.as_ref().is_none_or(|s| s.seq != fence.seq) {
            return Ok(None);
        }
        // Ours are here already (counted); the others' are new. At most this much more
        // (a value replaced is not taken off: a key may come twice).
        let added: usize = fence
            .pairs
            .iter()
            .filter(|(k, v)| self.values.get(k) != Some(v))
            .map(|(k, v)| charge(k, v))
            .sum();
        // What the space holds after, at most: the fence out is answered (its part goes).
        let after = self
            .values_charge
            .saturating_add(added)
            .saturating_add(self.pending_charge);
        if after > MAX_SPACE_BYTES {
            return Err(PutError::Full);
        }
        if after.saturating_sub(self.bytes()) > room.bytes {
            return Err(room.refused());
        }
        for (k, v) in fence.pairs {
            let (key_len, cost) = (k.len(), charge(&k, &v));
            let replaced = self
                .values
                .insert(k, v)
                .map_or(0, |old| key_len + old.len() + PAIR_OVERHEAD);
            self.values_charge = self.values_charge.saturating_sub(replaced) + cost;
        }
        self.drop_sent();
        Ok(Some(self.complete()))
    }

    /// The planner's `FenceFailed` for the fence out: the ranks in the barrier leave it
    /// (with an error); `None` when it is not the fence out.
    pub fn failed(&mut self, seq: u64) -> Option<Vec<u32>> {
        if self.sent.as_ref().is_none_or(|s| s.seq != seq) {
            return None;
        }
        self.drop_sent();
        Some(std::mem::take(&mut self.in_barrier).into_iter().collect())
    }

    fn drop_sent(&mut self) {
        self.sent = None;
        self.sent_charge = 0;
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
            job_id: 7.into(),
            size: 4,
            local: local.iter().copied().collect(),
            nodes,
            mapping: "(vector,(0,2,2))".into(),
        }
    }

    #[test]
    fn a_job_on_one_node_fences_here() {
        let mut s = Space::new(shape(&[0, 1], 1));
        s.put("bc-0", "addr0", Room::UNBOUNDED).unwrap();
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
        s.put("bc-0", "a0", Room::UNBOUNDED).unwrap();
        s.put("bc-1", "a1", Room::UNBOUNDED).unwrap();
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
        assert_eq!(s.done(other, Room::UNBOUNDED).unwrap(), None);
        let mut all = fence.clone();
        all.pairs.push(("bc-2".into(), "a2".into()));
        assert_eq!(s.done(all, Room::UNBOUNDED).unwrap(), Some(vec![0, 1]));
        assert_eq!(s.get("bc-2"), Some("a2"));
        assert_eq!(s.unanswered(), None);
        // The next fence carries only what was put since.
        s.put("x", "1", Room::UNBOUNDED).unwrap();
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
            s.put(&"k".repeat(KEYLEN_MAX + 1), "v", Room::UNBOUNDED),
            Err(PutError::KeyTooLong { len: KEYLEN_MAX + 1 })
        );
        assert!(matches!(
            s.put("k", &"v".repeat(VALLEN_MAX + 1), Room::UNBOUNDED),
            Err(PutError::ValueTooLong { .. })
        ));
        assert_eq!(
            s.put("PMI_process_mapping", "x", Room::UNBOUNDED),
            Err(PutError::Reserved)
        );
        let value = "v".repeat(VALLEN_MAX);
        let mut refused = None;
        for i in 0..(MAX_SPACE_BYTES / VALLEN_MAX + 10) {
            if let Err(e) = s.put(&format!("k{i}"), &value, Room::UNBOUNDED) {
                refused = Some(e);
                break;
            }
        }
        assert_eq!(refused, Some(PutError::PartFull));
        // Fences empty the part; the space as a whole still fills.
        assert_eq!(s.barrier_in(0), Barrier::Release(vec![0]));
        let mut refused = None;
        for i in 0..(MAX_SPACE_BYTES / VALLEN_MAX + 10) {
            if let Err(e) = s.put(&format!("j{i}"), &value, Room::UNBOUNDED) {
                refused = Some(e);
                break;
            }
            if i % 1000 == 999 {
                assert_eq!(s.barrier_in(0), Barrier::Release(vec![0]));
            }
        }
        assert_eq!(refused, Some(PutError::Full));
    }

    #[test]
    fn what_a_space_holds_is_counted_with_each_pair_s_overhead_until_it_goes() {
        let mut s = Space::new(shape(&[0], 2));
        let one = charge("k", "v");
        assert_eq!(one, 2 + PAIR_OVERHEAD);
        s.put("k", "v", Room::UNBOUNDED).unwrap();
        assert_eq!(s.bytes(), 2 * one, "the value and this node's part");
        // A value replaced goes; the part keeps both until the fence.
        s.put("k", "w", Room::UNBOUNDED).unwrap();
        assert_eq!(s.bytes(), 3 * one);
        // Sent: the part is held until the answer.
        let Barrier::Send(fence) = s.barrier_in(0) else {
            panic!()
        };
        assert_eq!(s.bytes(), 3 * one);
        let mut all = fence.clone();
        all.pairs.push(("bc-1".into(), "far".into()));
        assert_eq!(s.done(all, Room::UNBOUNDED).unwrap(), Some(vec![0]));
        assert_eq!(s.bytes(), one + charge("bc-1", "far"));
        // A failed fence lets its part go too.
        s.put("x", "1", Room::UNBOUNDED).unwrap();
        s.barrier_in(0);
        assert_eq!(s.failed(2), Some(vec![0]));
        assert_eq!(s.bytes(), 2 * one + charge("bc-1", "far"));
        // A job on one node keeps only the values after its fence.
        let mut alone = Space::new(shape(&[0], 1));
        alone.put("a", "1", Room::UNBOUNDED).unwrap();
        assert_eq!(alone.barrier_in(0), Barrier::Release(vec![0]));
        assert_eq!(alone.bytes(), one);
    }

    #[test]
    fn tiny_pairs_fill_the_space_by_what_they_cost() {
        let mut s = Space::new(shape(&[0], 1));
        let mut puts = 0usize;
        let refused = loop {
            if let Err(e) = s.put(&format!("{puts:x}"), "v", Room::UNBOUNDED) {
                break e;
            }
            puts += 1;
            if puts.is_multiple_of(100_000) {
                s.barrier_in(0);
            }
        };
        assert_eq!(refused, PutError::Full);
        assert!(s.bytes() <= MAX_SPACE_BYTES);
        // Without the overhead counted it would have taken ~20 times as many.
        assert!(puts < MAX_SPACE_BYTES / PAIR_OVERHEAD, "{puts}");
    }

    #[test]
    fn a_put_or_an_answer_past_the_room_given_is_refused_and_nothing_kept() {
        let user = Room {
            bytes: 3 * charge("k", "v"),
            refusal: Refusal::User { limit: 1 << 20 },
        };
        let mut s = Space::new(shape(&[0], 2));
        s.put("k", "v", user).unwrap();
        let held = s.bytes();
        let room = Room {
            bytes: user.bytes - held,
            ..user
        };
        assert_eq!(s.put("j", "v", room), Err(PutError::UserFull { limit: 1 << 20 }));
        assert_eq!((s.bytes(), s.get("j")), (held, None));
        let node = Room {
            bytes: 0,
            refusal: Refusal::Node { limit: 4 << 20 },
        };
        assert_eq!(s.put("j", "v", node), Err(PutError::NodeFull { limit: 4 << 20 }));
        assert!(
            PutError::NodeFull { limit: 4 << 20 }.to_string().contains("4194304"),
            "the message says the bound"
        );
        // The answer's pairs from other nodes count the same way: the fence fails.
        let Barrier::Send(fence) = s.barrier_in(0) else {
            panic!()
        };
        let mut all = fence.clone();
        all.pairs.push(("bc-1".into(), "v".repeat(100)));
        let small = Room { bytes: 100, ..user };
        assert_eq!(s.done(all.clone(), small), Err(PutError::UserFull { limit: 1 << 20 }));
        assert_eq!((s.bytes(), s.get("bc-1")), (held, None));
        // With room it goes in (what the answered part held is let go first).
        assert_eq!(s.done(all, Room::UNBOUNDED).unwrap(), Some(vec![0]));
        assert_eq!(s.bytes(), charge("k", "v") + charge("bc-1", &"v".repeat(100)));
    }
}
