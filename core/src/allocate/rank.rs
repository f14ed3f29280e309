//! Rank order: a job's newly placed tasks numbered in topology order (HyperNode path from
//! the top, then node, then slot), so neighbouring ranks share a switch.

use crate::ids::{HnIdx, NodeIdx};
use crate::topology::TopologyIndex;

use super::gang::JobCtx;

/// Task indices of the newly placed tasks, in rank order.
pub fn rank_order(job: &JobCtx, index: &TopologyIndex) -> Vec<usize> {
    let mut new: Vec<(Vec<HnIdx>, NodeIdx, usize)> = job
        .tasks
        .iter()
        .enumerate()
        .filter_map(|(t, slot)| slot.node.filter(|_| slot.new).map(|n| (t, n)))
        .map(|(t, n)| {
            let g = &index.groups[index.node_group[n.ix()].ix()];
            // Highest tier first, the virtual root left out.
            let path: Vec<HnIdx> = g
                .per_tier
                .iter()
                .rev()
                .flatten()
                .copied()
                .filter(|h| *h != index.root)
                .collect();
            (path, n, t)
        })
        .collect();
    new.sort();
    new.into_iter().map(|(_, _, t)| t).collect()
}
