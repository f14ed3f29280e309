//! Lowest common ancestor over the HyperNode tree (depths + parent links; the tree is a
//! handful of tiers deep, so walking up is cheaper than any precomputed table).

use super::index::TopologyIndex;
use crate::model::ids::HnIdx;

impl TopologyIndex {
    /// Volcano's LCA with `None` for "": `lca(a, None) = a`, `lca(None, b) = b`.
    pub fn lca_opt(&self, a: Option<HnIdx>, b: Option<HnIdx>) -> Option<HnIdx> {
        match (a, b) {
            (None, b) => b,
            (a, None) => a,
            (Some(a), Some(b)) => Some(self.lca(a, b)),
        }
    }

    /// Every HyperNode sits under the virtual root, so two always meet.
    pub fn lca(&self, mut a: HnIdx, mut b: HnIdx) -> HnIdx {
        while self.hns[a.ix()].depth > self.hns[b.ix()].depth {
            a = self.parent_or_root(a);
        }
        while self.hns[b.ix()].depth > self.hns[a.ix()].depth {
            b = self.parent_or_root(b);
        }
        while a != b {
            a = self.parent_or_root(a);
            b = self.parent_or_root(b);
        }
        a
    }

    fn parent_or_root(&self, h: HnIdx) -> HnIdx {
        self.hns[h.ix()].parent.unwrap_or(self.root)
    }

    /// `h`, its parent, grandparent, … up to and including the virtual root.
    pub fn ancestors(&self, h: HnIdx) -> impl Iterator<Item = HnIdx> + '_ {
        let mut cur = Some(h);
        std::iter::from_fn(move || {
            let this = cur?;
            cur = self.hns[this.ix()].parent;
            Some(this)
        })
    }

    /// Is `a` an ancestor of `d` (or `d` itself)?
    pub fn contains_hn(&self, a: HnIdx, d: HnIdx) -> bool {
        self.ancestors(d).any(|x| x == a)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::ClusterBuilder;

    #[test]
    fn lca_of_leaves_is_their_spine_and_root_above_spines() {
        let (index, _) = ClusterBuilder::fat_tree(&[2, 2, 2], 1).build_index();
        let h = |n: &str| index.hn(n).map(|x| x.0);
        let (Some(l1), Some(l2), Some(l3)) = (h("leaf-1"), h("leaf-2"), h("leaf-3")) else {
            panic!(
                "fat tree lacks leaves: {:?}",
                index.hns.iter().map(|h| &h.name).collect::<Vec<_>>()
            );
        };
        assert_eq!(index.hns[index.lca(l1, l2).ix()].name, "spine-1");
        assert_eq!(index.hns[index.lca(l1, l3).ix()].name, "pod-1");
        assert_eq!(index.lca(l1, l1), l1);
        assert_eq!(index.lca_opt(None, Some(l2)), Some(l2));
    }
}
