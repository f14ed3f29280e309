//! Health marks on the topology index: a node whose GPUs report NVLink trouble, or whose
//! health checks say degraded, is taken after its healthy neighbours and scores lower; a
//! node with a degraded InfiniBand port counts against each of its HyperNodes
//! (`HnInfo::fabric_degraded`). Marks change in place (a storm of a thousand degraded
//! checks reorders a thousand group lists) rather than by a rebuild of the index and
//! every cache built on it: they change no room and no node set.
//!
//! Within a group its healthy nodes come first, then its degraded ones, each in name
//! order, so the allocator's "first node of the group that fits" is a healthy one where
//! one fits.

use crate::model::ids::NodeIdx;
use crate::topology::TopologyIndex;

/// What marks one node, by `NodeIdx` in [`TopologyIndex::marks`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeMarks {
    /// Its GPUs report NVLink fabric trouble (from the probe, set at a rebuild).
    pub nvlink: bool,
    /// A health check of its agent says degraded.
    pub health: bool,
    /// A health check finds one of its InfiniBand ports degraded.
    pub fabric: bool,
}

impl NodeMarks {
    /// Scored lower and taken last within its group.
    pub fn degraded(self) -> bool {
        self.nvlink || self.health
    }
}

impl TopologyIndex {
    /// Whether node `n` is taken after its group's healthy nodes and scores lower.
    pub fn degraded(&self, n: NodeIdx) -> bool {
        self.marks.get(n.ix()).is_some_and(|m| m.degraded())
    }

    /// Sets node `n`'s health marks (`health`, `fabric`) in place: its place in its
    /// group and its HyperNodes' count of degraded fabric follow. Returns whether
    /// anything changed.
    pub fn mark(&mut self, n: NodeIdx, health: bool, fabric: bool) -> bool {
        let Some(was) = self.marks.get(n.ix()).copied() else {
            return false;
        };
        let now = NodeMarks { health, fabric, ..was };
        if now == was {
            return false;
        }
        self.marks[n.ix()] = now;
        let Some(&g) = self.node_group.get(n.ix()) else {
            return true;
        };
        if now.fabric != was.fabric {
            for &h in &self.groups[g.ix()].hyper_nodes {
                let c = &mut self.hns[h.ix()].fabric_degraded;
                *c = if now.fabric { *c + 1 } else { c.saturating_sub(1) };
            }
        }
        if now.degraded() != was.degraded() {
            let mut nodes = std::mem::take(&mut self.groups[g.ix()].nodes);
            nodes.retain(|&m| m != n);
            let at = nodes.partition_point(|&m| (self.degraded(m), m) < (now.degraded(), n));
            nodes.insert(at, n);
            self.groups[g.ix()].nodes = nodes;
        }
        true
    }

    /// Puts every group's nodes in marks order (healthy, then degraded, each by name):
    /// at a build, once the NVLink marks are set.
    pub(super) fn order_groups(&mut self) {
        let marks = std::mem::take(&mut self.marks);
        for g in &mut self.groups {
            g.nodes
                .sort_by_key(|&n| (marks.get(n.ix()).is_some_and(|m| m.degraded()), n));
        }
        self.marks = marks;
    }

    /// Where the marks disagree with the group orders or the HyperNodes' counts: empty
    /// when the index is consistent (checked after every tick in the scenario tests).
    pub fn marks_problems(&self) -> Vec<String> {
        let mut bad = Vec::new();
        for (gi, g) in self.groups.iter().enumerate() {
            let keys: Vec<(bool, NodeIdx)> = g.nodes.iter().map(|&n| (self.degraded(n), n)).collect();
            if !keys.is_sorted() {
                bad.push(format!("group {gi}: nodes not healthy first, then by name"));
            }
        }
        for h in &self.hns {
            let counted = h
                .nodes
                .ones()
                .filter(|&n| self.marks.get(n).is_some_and(|m| m.fabric))
                .count() as u32;
            if counted != h.fabric_degraded {
                bad.push(format!(
                    "HyperNode {}: counts {} nodes with degraded fabric, holds {counted}",
                    h.name, h.fabric_degraded
                ));
            }
        }
        bad
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use crate::model::ids::NodeIdx;
    use crate::testing::ClusterBuilder;

    #[test]
    fn a_degraded_node_goes_last_in_its_group_and_back_in_name_order() {
        let (mut index, _) = ClusterBuilder::fat_tree(&[4], 2).node_resources("cpu=4").build_index();
        let g = index.node_group[0];
        let names = |index: &crate::topology::TopologyIndex| -> Vec<u32> {
            index.groups[g.ix()].nodes.iter().map(|n| n.0).collect()
        };
        assert_eq!(names(&index), [0, 1, 2, 3]);
        assert!(index.mark(NodeIdx(1), true, false));
        assert!(index.mark(NodeIdx(0), true, true));
        assert_eq!(names(&index), [2, 3, 0, 1]);
        assert!(!index.mark(NodeIdx(0), true, true), "the same marks change nothing");
        let leaf = index.groups[g.ix()].leaf.unwrap();
        assert_eq!(index.hns[leaf.ix()].fabric_degraded, 1);
        assert_eq!(index.hns[index.root.ix()].fabric_degraded, 1);
        assert!(index.mark(NodeIdx(0), false, false));
        assert_eq!(names(&index), [0, 2, 3, 1]);
        assert_eq!(index.hns[leaf.ix()].fabric_degraded, 0);
        assert!(index.marks_problems().is_empty(), "{:?}", index.marks_problems());
        assert!(!index.mark(NodeIdx(99), true, true), "no such node");
    }
}
