//! Gradient search (Volcano §5.3): the HyperNodes a (sub-)job may try, grouped by tier,
//! lowest tier first, within its hard tier limit and under what it already occupies.

use std::collections::VecDeque;

use crate::model::ids::HnIdx;
use crate::topology::{TierCap, TopologyIndex};

/// `start`: where the search may begin (the virtual root for a job, the job's HyperNode
/// for a sub-job). `tier`: the hard limit (`None` = not hard: only `start` itself).
/// `allocated`: what the (sub-)job already occupies; when set, the search starts from its
/// highest allowed ancestor and skips the capacity pre-filter, as Volcano does.
/// `has_room`: the live capacity pre-filter for a fresh (sub-)job.
pub fn gradients(
    index: &TopologyIndex,
    start: HnIdx,
    tier: Option<TierCap>,
    allocated: Option<HnIdx>,
    mut has_room: impl FnMut(HnIdx) -> bool,
) -> Vec<Vec<HnIdx>> {
    let Some(limit) = tier else {
        return vec![vec![start]];
    };
    let root = match allocated {
        None => start,
        Some(a) => {
            if !index.allows(limit, a) {
                return Vec::new();
            }
            // Highest ancestor-or-self of A within the limit.
            let mut top = a;
            for h in index.ancestors(a).skip(1) {
                if !index.allows(limit, h) {
                    break;
                }
                top = h;
            }
            let l = index.lca(start, top);
            if l == top {
                start
            } else if l == start {
                top
            } else {
                return Vec::new();
            }
        }
    };
    let mut by_tier: Vec<(u32, Vec<HnIdx>)> = Vec::new();
    let mut queue = VecDeque::from([root]);
    while let Some(h) = queue.pop_front() {
        let info = &index.hns[h.ix()];
        queue.extend(info.children.iter().copied());
        if !index.allows(limit, h) || (allocated.is_none() && !has_room(h)) {
            continue;
        }
        match by_tier.iter_mut().find(|(t, _)| *t == info.tier) {
            Some((_, v)) => v.push(h),
            None => by_tier.push((info.tier, vec![h])),
        }
    }
    by_tier.sort_by_key(|(t, _)| *t); // stable: BFS order kept within a tier
    by_tier.into_iter().map(|(_, v)| v).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ClusterBuilder;

    fn names(index: &TopologyIndex, g: &[Vec<HnIdx>]) -> Vec<Vec<String>> {
        g.iter()
            .map(|t| t.iter().map(|h| index.hns[h.ix()].name.clone()).collect())
            .collect()
    }

    #[test]
    fn tiers_ascend_and_stop_at_the_limit() {
        let (index, _) = ClusterBuilder::fat_tree(&[2, 2, 2], 1).build_index();
        let g = gradients(&index, index.root, Some(TierCap::Tier(2)), None, |_| true);
        assert_eq!(
            names(&index, &g),
            vec![vec!["leaf-1", "leaf-2", "leaf-3", "leaf-4"], vec!["spine-1", "spine-2"],]
        );
        let soft = gradients(&index, index.root, Some(TierCap::Tier(index.root_tier())), None, |_| {
            true
        });
        assert_eq!(soft.len(), 4);
        assert_eq!(soft[3].len(), 1, "the virtual root is the last gradient");
        assert!(gradients(&index, index.root, Some(TierCap::Tier(0)), None, |_| true).is_empty());
    }

    #[test]
    fn allocated_hypernode_bounds_the_search_without_prefilter() {
        let (index, _) = ClusterBuilder::fat_tree(&[2, 2, 2], 1).build_index();
        let leaf3 = index.hn("leaf-3").map(|h| h.0);
        let g = gradients(&index, index.root, Some(TierCap::Tier(2)), leaf3, |_| false);
        assert_eq!(names(&index, &g), vec![vec!["leaf-3", "leaf-4"], vec!["spine-2"]]);
        // Already above the limit: no candidates at all.
        let spine = index.hn("spine-2").map(|h| h.0);
        assert!(gradients(&index, index.root, Some(TierCap::Tier(1)), spine, |_| true).is_empty());
    }
}
