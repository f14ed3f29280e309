//! What-if work on the live caches, with undo. Outside `cache/` nothing takes from or
//! gives back to the capacity and NUMA caches but a [`Scratch`]: the placement search,
//! backfill's look into the future, a preemption's questions, the nodes held for
//! preemptions, the reservations a walk holds and `explain` all borrow the caches through
//! one. Inside a trial ([`Scratch::trial`], [`Scratch::attempt`]) every change is logged
//! and undone when the trial returns (or when an attempt gives up), so a search that
//! fails, or a question asked and answered, leaves the caches as it found them: a give
//! forgotten on some early return cannot leak capacity any more.

use std::sync::Arc;

use crate::model::ids::NodeIdx;
use crate::numa::assign::Assignment;
use crate::topology::TopologyIndex;

use super::capacity::{Capacity, Shape};
use super::holdings::Held;
use super::numa::NumaState;

/// One change a trial made, to undo in reverse order.
#[derive(Debug)]
enum Change {
    Took(NodeIdx, Arc<Shape>, Option<Arc<Assignment>>),
    Gave(NodeIdx, Arc<Shape>, Option<Arc<Assignment>>),
}

/// A point in a trial's log to undo back to ([`Scratch::undo_to`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Mark(usize);

/// The capacity and NUMA caches borrowed for a walk, a search or a question (see the
/// module). Outside a trial, takes and gives are plain (the walk's commits and holds,
/// which their owners give back themselves); inside one they are logged.
pub struct Scratch<'a> {
    index: &'a TopologyIndex,
    cap: &'a mut Capacity,
    numa: &'a mut NumaState,
    log: Vec<Change>,
    /// Trials open now: changes are logged while it is above zero.
    depth: u32,
}

impl<'a> Scratch<'a> {
    /// Borrows `cap` and `numa` (of `index`'s topology).
    pub fn new(index: &'a TopologyIndex, cap: &'a mut Capacity, numa: &'a mut NumaState) -> Self {
        Self {
            index,
            cap,
            numa,
            log: Vec::new(),
            depth: 0,
        }
    }

    /// The topology the caches index.
    pub fn index(&self) -> &'a TopologyIndex {
        self.index
    }

    /// The capacity cache, to read.
    pub fn cap(&self) -> &Capacity {
        self.cap
    }

    /// The capacity cache, for its counting memo ([`Capacity::room_per_hn`]); taking and
    /// giving stay with the scratch.
    pub fn cap_mut(&mut self) -> &mut Capacity {
        self.cap
    }

    /// The capacity cache (for its counting memo) and the NUMA cache, to read both.
    pub fn counting(&mut self) -> (&'a TopologyIndex, &mut Capacity, &NumaState) {
        (self.index, self.cap, self.numa)
    }

    /// The NUMA cache, to read.
    pub fn numa(&self) -> &NumaState {
        self.numa
    }

    /// The NUMA cache, for its assignment memo ([`NumaState::assign_shared`]).
    pub fn numa_mut(&mut self) -> &mut NumaState {
        self.numa
    }

    /// Free room per HyperNode for `s` (counted from here on: later reads are cheap).
    pub fn room_per_hn(&mut self, s: &Shape) -> Vec<u64> {
        self.cap.room_per_hn(self.index, s)
    }

    /// Takes `shape` (and the NUMA assignment `numa`) on node `n`.
    pub fn take(&mut self, n: NodeIdx, shape: &Arc<Shape>, numa: Option<&Arc<Assignment>>) {
        self.cap.take(self.index, n, shape);
        if let Some(a) = numa {
            self.numa.take(n, a);
        }
        if self.depth > 0 {
            self.log.push(Change::Took(n, shape.clone(), numa.cloned()));
        }
    }

    /// Gives `shape` (and the NUMA assignment `numa`) back on node `n`.
    pub fn give(&mut self, n: NodeIdx, shape: &Arc<Shape>, numa: Option<&Arc<Assignment>>) {
        self.cap.give(self.index, n, shape);
        if let Some(a) = numa {
            self.numa.give(n, a);
        }
        if self.depth > 0 {
            self.log.push(Change::Gave(n, shape.clone(), numa.cloned()));
        }
    }

    /// Takes what a running task (or a reservation's task) holds.
    pub fn take_held(&mut self, h: &Held) {
        self.take(h.node, &h.shape, h.numa.as_ref());
    }

    /// Gives back what a running task (or a reservation's task) holds.
    pub fn give_held(&mut self, h: &Held) {
        self.give(h.node, &h.shape, h.numa.as_ref());
    }

    /// Takes everything node `n` has free, so no search places anything there.
    pub fn mask(&mut self, n: NodeIdx) {
        let d = self.cap.d;
        let free = self.cap.free[n.ix() * d..(n.ix() + 1) * d].to_vec();
        if free.iter().any(|&f| f > 0) {
            let shape = Arc::new(Shape {
                req: free,
                missing: None,
            });
            self.take(n, &shape, None);
        }
    }

    /// Where the log stands now; inside a trial, [`Scratch::undo_to`] goes back here.
    pub fn mark(&self) -> Mark {
        Mark(self.log.len())
    }

    /// Undoes every change logged since `mark`, newest first.
    pub fn undo_to(&mut self, mark: Mark) {
        while self.log.len() > mark.0 {
            match self.log.pop() {
                Some(Change::Took(n, s, a)) => {
                    self.cap.give(self.index, n, &s);
                    if let Some(a) = &a {
                        self.numa.give(n, a);
                    }
                }
                Some(Change::Gave(n, s, a)) => {
                    self.cap.take(self.index, n, &s);
                    if let Some(a) = &a {
                        self.numa.take(n, a);
                    }
                }
                None => break,
            }
        }
    }

    /// Opens a trial: changes from here on are logged. Close it with [`Scratch::end`].
    pub fn begin(&mut self) -> Mark {
        self.depth += 1;
        self.mark()
    }

    /// Closes the trial opened at `mark`: its changes are undone, or kept. Kept inside an
    /// outer trial, they stay in the log, so the outer trial undoes them in its turn.
    pub fn end(&mut self, mark: Mark, keep: bool) {
        if !keep {
            self.undo_to(mark);
        }
        self.depth = self.depth.saturating_sub(1);
        if self.depth == 0 {
            self.log.clear();
        }
    }

    /// Runs `f` and undoes whatever it changed: a question about the caches.
    pub fn trial<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let mark = self.begin();
        let r = f(self);
        self.end(mark, false);
        r
    }

    /// Runs `f` and keeps what it changed when it answers `Some`; undoes it on `None`.
    pub fn attempt<R>(&mut self, f: impl FnOnce(&mut Self) -> Option<R>) -> Option<R> {
        let mark = self.begin();
        let r = f(self);
        self.end(mark, r.is_some());
        r
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::testing::{ClusterBuilder, res};

    fn tiny_index() -> (TopologyIndex, Capacity, NumaState) {
        let (index, cap) = ClusterBuilder::fat_tree(&[2, 2], 2)
            .node_resources("cpu=4")
            .build_index();
        let numa = NumaState::build(&index, |_| None);
        (index, cap, numa)
    }

    fn shape(cap: &Capacity, cpu: &str) -> Arc<Shape> {
        Arc::new(cap.shape(&res(&format!("cpu={cpu}"))))
    }

    #[test]
    fn a_trial_leaves_the_caches_as_it_found_them() {
        let (index, mut cap, mut numa) = tiny_index();
        let before = cap.clone();
        let s1 = shape(&cap, "2");
        let mut s = Scratch::new(&index, &mut cap, &mut numa);
        let n0 = NodeIdx(0);
        s.take(n0, &s1, None); // outside a trial: kept
        let after_take = s.cap().clone();
        let fitted = s.trial(|s| {
            s.give(n0, &s1, None);
            s.take(NodeIdx(1), &s1, None);
            s.take(NodeIdx(1), &s1, None);
            let kept = s.attempt(|s| {
                s.take(n0, &s1, None);
                Some(())
            });
            assert!(kept.is_some());
            let dropped: Option<()> = s.attempt(|s| {
                s.take(n0, &s1, None);
                None
            });
            assert!(dropped.is_none());
            s.cap().fits(n0, &s1)
        });
        assert!(fitted);
        assert!(s.cap().diff(&after_take, &index).is_empty(), "the trial was undone");
        s.give(n0, &s1, None);
        assert!(s.cap().diff(&before, &index).is_empty());
        assert_eq!(s.mark(), Mark(0), "nothing is logged outside a trial");
    }

    #[test]
    fn a_kept_attempt_at_the_top_stays() {
        let (index, mut cap, mut numa) = tiny_index();
        let s1 = shape(&cap, "2");
        let before = cap.clone();
        let mut s = Scratch::new(&index, &mut cap, &mut numa);
        s.attempt(|s| {
            s.take(NodeIdx(0), &s1, None);
            Some(())
        });
        s.mask(NodeIdx(1));
        assert!(!s.cap().fits(NodeIdx(1), &s1));
        assert!(!s.cap().diff(&before, &index).is_empty());
        assert_eq!(s.mark(), Mark(0));
    }
}
