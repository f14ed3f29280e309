//! Would the job be placed inside HyperNode H once these victims have gone? The real
//! placement search answers, kept inside H (the job's worksheet says it runs there), on a
//! copy of the caches where the victims' tasks inside H are given back; its placement and
//! the victims' room are undone after each question, so one copy serves every victim set
//! and every HyperNode a decision tries.

use std::sync::Arc;

use crate::allocate::{JobCtx, Search};
use crate::cache::capacity::{Capacity, Shape};
use crate::cache::holdings::Held;
use crate::cache::numa::NumaState;
use crate::config::PlannerConfig;
use crate::model::ids::{HnIdx, NodeIdx};
use crate::topology::TopologyIndex;

/// The placement search for one job restricted to one HyperNode, on caches it borrows
/// (shared by every HyperNode a decision tries: nothing is copied per HyperNode).
pub struct Trial<'a> {
    index: &'a TopologyIndex,
    config: &'a PlannerConfig,
    cap: &'a mut Capacity,
    numa: &'a mut NumaState,
    hn: HnIdx,
    /// Searches run (for the bench's figures).
    pub searches: usize,
}

impl<'a> Trial<'a> {
    /// The search inside `hn` on `caches` (the live caches with what is ending given
    /// back and other preemptions' nodes held), which every question leaves as it found.
    pub fn new(
        index: &'a TopologyIndex,
        config: &'a PlannerConfig,
        caches: (&'a mut Capacity, &'a mut NumaState),
        hn: HnIdx,
    ) -> Self {
        Self {
            index,
            config,
            cap: caches.0,
            numa: caches.1,
            hn,
            searches: 0,
        }
    }

    /// The nodes the job's tasks land on inside the HyperNode when the `victims`' tasks
    /// there have gone; `None` when it still does not fit. The search keeps inside the
    /// HyperNode as it keeps a running job inside its own: the job's worksheet names it
    /// as where the job is (its tier the limit), so the gradients start there.
    pub fn fits(&mut self, ctx: &JobCtx, victims: &[&[Held]]) -> Option<Vec<NodeIdx>> {
        let (index, hn) = (self.index, self.hn);
        let inside = |n: NodeIdx| hn == index.root || index.hns[hn.ix()].nodes.contains(n.ix());
        for h in victims.iter().flat_map(|v| v.iter()).filter(|h| inside(h.node)) {
            self.cap.give(index, h.node, &h.shape);
            if let Some(a) = &h.numa {
                self.numa.give(h.node, a);
            }
        }
        self.searches += 1;
        let mut trial = ctx.clone();
        if hn != index.root {
            trial.tier = Some(crate::topology::TierCap::Tier(index.hns[hn.ix()].tier));
            trial.allocated = Some(hn);
        }
        let placed = Search::new(index, self.cap, self.numa, self.config)
            .allocate_job(&mut trial)
            .is_some();
        let mut nodes = Vec::new();
        if placed {
            for slot in trial.tasks.iter_mut().filter(|s| s.new) {
                let Some(n) = slot.node else { continue };
                self.cap.give(index, n, &trial.shapes[slot.role]);
                if let Some(a) = slot.assignment.take() {
                    self.numa.give(n, &a);
                }
                nodes.push(n);
            }
        }
        for h in victims.iter().flat_map(|v| v.iter()).filter(|h| inside(h.node)) {
            self.cap.take(index, h.node, &h.shape);
            if let Some(a) = &h.numa {
                self.numa.take(h.node, a);
            }
        }
        // Only inside: a placement that strayed (it cannot, see above) is no answer.
        if placed && nodes.iter().all(|&n| inside(n)) {
            nodes.sort_unstable();
            nodes.dedup();
            Some(nodes)
        } else {
            None
        }
    }
}

/// Takes everything node `n` has free, so no search places anything there.
pub fn mask(index: &TopologyIndex, cap: &mut Capacity, n: NodeIdx) {
    let free = cap.free[n.ix() * cap.d..(n.ix() + 1) * cap.d].to_vec();
    if free.iter().any(|&f| f > 0) {
        cap.take(
            index,
            n,
            &Arc::new(Shape {
                req: free,
                missing: None,
            }),
        );
    }
}
