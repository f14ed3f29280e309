//! Would the job be placed inside HyperNode H once these victims have gone? The real
//! placement search answers, kept inside H (the job's worksheet says it runs there), on a
//! copy of the caches where the victims' tasks inside H are given back; its placement and
//! the victims' room are undone after each question, so one copy serves every victim set
//! and every HyperNode a decision tries.

use crate::allocate::{JobCtx, Search};
use crate::cache::capacity::Capacity;
use crate::cache::holdings::Held;
use crate::cache::numa::NumaState;
use crate::cache::scratch::Scratch;
use crate::config::PlannerConfig;
use crate::model::ids::{HnIdx, NodeIdx};
use crate::topology::TopologyIndex;

/// The placement search for one job restricted to one HyperNode, on caches it borrows
/// (shared by every HyperNode a decision tries: nothing is copied per HyperNode).
pub struct Trial<'a> {
    config: &'a PlannerConfig,
    s: Scratch<'a>,
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
            config,
            s: Scratch::new(index, caches.0, caches.1),
            hn,
            searches: 0,
        }
    }

    /// The nodes the job's tasks land on inside the HyperNode when the `victims`' tasks
    /// there have gone; `None` when it still does not fit. The search keeps inside the
    /// HyperNode as it keeps a running job inside its own: the job's worksheet names it
    /// as where the job is (its tier the limit), so the gradients start there. A trial of
    /// the scratch: the victims' room and the placement are undone on return.
    pub fn fits(&mut self, ctx: &JobCtx, victims: &[&[Held]]) -> Option<Vec<NodeIdx>> {
        let (index, hn, config) = (self.s.index(), self.hn, self.config);
        let inside = |n: NodeIdx| hn == index.root || index.hns[hn.ix()].nodes.contains(n.ix());
        self.searches += 1;
        self.s.trial(|s| {
            for h in victims.iter().flat_map(|v| v.iter()).filter(|h| inside(h.node)) {
                s.give_held(h);
            }
            let mut trial = ctx.clone();
            if hn != index.root {
                trial.tier = Some(crate::topology::TierCap::Tier(index.hns[hn.ix()].tier));
                trial.allocated = Some(hn);
            }
            Search::new(s, config).allocate_job(&mut trial)?;
            let mut nodes: Vec<NodeIdx> = trial.tasks.iter().filter(|s| s.new).filter_map(|s| s.node).collect();
            // Only inside: a placement that strayed (it cannot, see above) is no answer.
            if !nodes.iter().all(|&n| inside(n)) {
                return None;
            }
            nodes.sort_unstable();
            nodes.dedup();
            Some(nodes)
        })
    }
}
