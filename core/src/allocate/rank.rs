//! Rank order: a job's newly placed tasks numbered in topology order (HyperNode path from
//! the top, then node, then slot), so neighbouring ranks share a switch; with `segments`,
//! segment by segment first, so each segment is consecutive ranks.

use crate::model::ids::NodeIdx;
use crate::topology::TopologyIndex;

use super::gang::JobCtx;

/// Task indices of the newly placed tasks, in rank order.
pub(super) fn rank_order(job: &JobCtx, index: &TopologyIndex) -> Vec<usize> {
    // Per task, its innermost segment's number (none: all alike).
    let mut block = vec![0u32; job.tasks.len()];
    for s in job.sub_jobs.iter().filter(|s| s.block.is_some()) {
        for &t in &s.tasks {
            block[t] = s.block.unwrap_or(0);
        }
    }
    // (segment, place of the node's group in topology order, node, task): plain integers.
    let mut new: Vec<(u32, u32, NodeIdx, usize)> = job
        .tasks
        .iter()
        .enumerate()
        .filter_map(|(t, slot)| slot.node.filter(|_| slot.new).map(|n| (t, n)))
        .map(|(t, n)| {
            let g = index.node_group[n.ix()].ix();
            (block[t], index.group_order.get(g).copied().unwrap_or(u32::MAX), n, t)
        })
        .collect();
    new.sort_unstable();
    new.into_iter().map(|(_, _, _, t)| t).collect()
}
