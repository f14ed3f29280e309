//! When each HyperNode is busy until: the latest expected end of the tasks running in it
//! (`[scoring] alignEnds`). A job that fits in several HyperNodes of its tier goes where
//! it pushes that end out least: into a leaf that stays busy past its own end anyway,
//! rather than into one about to empty. Jobs that end together free whole leaves
//! together, and a job that needs a whole leaf finds one sooner.

use crate::model::ids::{HnIdx, NodeIdx};
use crate::topology::TopologyIndex;

/// Per HyperNode (by `HnIdx`), the latest expected end of its running tasks (Unix
/// seconds; 0 when none runs; `u64::MAX` when one has no time limit).
#[derive(Debug, Default)]
pub struct Horizon {
    by_hn: Vec<u64>,
    built: bool,
}

impl Horizon {
    /// Whether it was built in this walk.
    pub fn is_built(&self) -> bool {
        self.built
    }

    /// From every running task's node and expected end.
    pub fn build(&mut self, index: &TopologyIndex, ends: impl Iterator<Item = (NodeIdx, u64)>) {
        let mut per_group = vec![0u64; index.groups.len()];
        for (n, end) in ends {
            if let Some(&g) = index.node_group.get(n.ix()) {
                let e = &mut per_group[g.ix()];
                *e = (*e).max(end);
            }
        }
        self.by_hn = vec![0; index.hns.len()];
        for (g, group) in index.groups.iter().enumerate() {
            for &h in &group.hyper_nodes {
                let e = &mut self.by_hn[h.ix()];
                *e = (*e).max(per_group[g]);
            }
        }
        self.built = true;
    }

    /// A task the walk started on `n`, expected to end at `end`.
    pub fn push(&mut self, index: &TopologyIndex, n: NodeIdx, end: u64) {
        if !self.built {
            return;
        }
        if let Some(&g) = index.node_group.get(n.ix()) {
            for &h in &index.groups[g.ix()].hyper_nodes {
                if let Some(e) = self.by_hn.get_mut(h.ix()) {
                    *e = (*e).max(end);
                }
            }
        }
    }

    /// How far a job ending at `end` would push `h`'s end out (0: `h` is busy past it).
    pub fn extends(&self, h: HnIdx, end: u64) -> u64 {
        end.saturating_sub(self.by_hn.get(h.ix()).copied().unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::testing::ClusterBuilder;

    #[test]
    fn each_hypernode_ends_with_its_last_task_and_grows_with_the_walks() {
        // Two leaves of two nodes under one spine.
        let (index, _) = ClusterBuilder::fat_tree(&[2, 2], 1)
            .node_resources("cpu=4")
            .build_index();
        let leaf = |n: u32| index.groups[index.node_group[n as usize].ix()].leaf.unwrap();
        let mut h = Horizon::default();
        h.push(&index, NodeIdx(0), 5);
        assert!(!h.is_built(), "a push before the build is dropped");
        h.build(&index, [(NodeIdx(0), 100), (NodeIdx(1), 300)].into_iter());
        assert_eq!(h.extends(leaf(0), 250), 0, "busy until 300");
        assert_eq!(h.extends(leaf(2), 250), 250, "empty");
        assert_eq!(h.extends(index.root, 400), 100);
        h.push(&index, NodeIdx(3), u64::MAX);
        assert_eq!(h.extends(leaf(2), u64::MAX), 0, "a task without a limit keeps it busy");
        assert_eq!(h.extends(leaf(0), 250), 0);
    }
}
