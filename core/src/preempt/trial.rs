//! Would the job be placed inside HyperNode H once these victims have gone? The real
//! placement search answers, on copies of the caches where every node outside H offers
//! nothing and the victims' tasks inside H are given back; its placement is undone after
//! each question, so one copy serves every victim set tried in H.

use std::sync::Arc;

use crate::allocate::{JobCtx, Search};
use crate::cache::capacity::{Capacity, Shape};
use crate::cache::holdings::Held;
use crate::cache::numa::NumaState;
use crate::config::PlannerConfig;
use crate::model::ids::{HnIdx, NodeIdx};
use crate::topology::TopologyIndex;

/// The caches as one HyperNode sees them, for one job.
pub struct Trial<'a> {
    index: &'a TopologyIndex,
    config: &'a PlannerConfig,
    cap: Capacity,
    numa: NumaState,
    hn: HnIdx,
    /// Searches run (for the bench's figures).
    pub searches: usize,
}

impl<'a> Trial<'a> {
    /// `base` (the live caches with what is ending given back and other preemptions'
    /// nodes held), with every node outside `hn` taken whole.
    pub fn new(index: &'a TopologyIndex, config: &'a PlannerConfig, base: (&Capacity, &NumaState), hn: HnIdx) -> Self {
        let mut cap = base.0.clone();
        if hn != index.root {
            let inside = &index.hns[hn.ix()].nodes;
            for n in 0..index.node_names.len() {
                if !inside.contains(n) {
                    mask(index, &mut cap, NodeIdx(n as u32));
                }
            }
        }
        Self {
            index,
            config,
            cap,
            numa: base.1.clone(),
            hn,
            searches: 0,
        }
    }

    /// Whether `node` is inside the HyperNode.
    pub fn inside(&self, node: NodeIdx) -> bool {
        self.hn == self.index.root || self.index.hns[self.hn.ix()].nodes.contains(node.ix())
    }

    /// What is free inside the HyperNode, per dimension.
    pub fn free(&self) -> Vec<u64> {
        let (a, u) = (self.cap.hn_alloc(self.hn), self.cap.hn_used(self.hn));
        a.iter().zip(u).map(|(a, u)| a.saturating_sub(*u)).collect()
    }

    /// The nodes the job's tasks land on when the `victims`' tasks (inside the
    /// HyperNode) have gone; `None` when it still does not fit. The caches are left as
    /// they were.
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
        let placed = Search::new(index, &mut self.cap, &mut self.numa, self.config)
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
        nodes.sort_unstable();
        nodes.dedup();
        placed.then_some(nodes)
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
