//! Rank order: a job's newly placed tasks numbered in topology order (HyperNode path from
//! the top, then node, then slot), so neighbouring ranks share a switch.

use crate::ids::{HnIdx, NodeIdx};
use crate::topology::TopologyIndex;

use super::gang::JobCtx;

/// Task indices of the newly placed tasks, in rank order.
pub fn rank_order(job: &JobCtx, index: &TopologyIndex) -> Vec<usize> {
    // (group, node, task): the path is the group's, so the groups are put in path order
    // once and the tasks sorted on plain integers.
    let mut new: Vec<(u32, NodeIdx, usize)> = job
        .tasks
        .iter()
        .enumerate()
        .filter_map(|(t, slot)| slot.node.filter(|_| slot.new).map(|n| (t, n)))
        .map(|(t, n)| (index.node_group[n.ix()].ix() as u32, n, t))
        .collect();
    let mut groups: Vec<u32> = new.iter().map(|x| x.0).collect();
    groups.sort_unstable();
    groups.dedup();
    let mut by_path: Vec<(Vec<HnIdx>, u32)> = groups
        .iter()
        .map(|&g| {
            // Highest tier first, the virtual root left out.
            let path = index.groups[g as usize]
                .per_tier
                .iter()
                .rev()
                .flatten()
                .copied()
                .filter(|h| *h != index.root)
                .collect();
            (path, g)
        })
        .collect();
    by_path.sort();
    // Group index → its place in path order (`groups` is sorted, so a binary search finds it).
    // Groups with the same path share a place, so their tasks still order by node.
    let mut place = vec![0u32; groups.len()];
    let mut rank = 0u32;
    for (i, (path, g)) in by_path.iter().enumerate() {
        if i > 0 && by_path[i - 1].0 != *path {
            rank += 1;
        }
        if let Ok(k) = groups.binary_search(g) {
            place[k] = rank;
        }
    }
    for x in &mut new {
        x.0 = groups.binary_search(&x.0).map_or(u32::MAX, |k| place[k]);
    }
    new.sort_unstable();
    new.into_iter().map(|(_, _, t)| t).collect()
}
