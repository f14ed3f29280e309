//! Several topology trees in one cluster (Volcano #5732): each top-level HyperNode and
//! everything under it is a tree with its own tier numbers and tier names. An H100 island
//! has leaf = tier 1, spine = tier 2; NVL72 racks beside it have nvlink = tier 1, leaf =
//! tier 2, spine = tier 3. A job's `highestTierName: leaf` means tier 1 in the first tree
//! and tier 2 in the second ([`TierCap::Named`]); `highestTierAllowed: 2` means tier 2 in
//! whichever tree it lands ([`TierCap::Tier`]), as in Volcano.

use crate::model::ids::HnIdx;

use super::TopologyIndex;

/// One tree: a top-level HyperNode (a child of the virtual root) and all under it.
#[derive(Clone, Debug)]
pub struct Tree {
    /// Its top-level HyperNode.
    pub top: HnIdx,
    /// By tier-name id ([`TopologyIndex::tier_names`]): the tier that name has in this
    /// tree; 0 where the tree has no HyperNode of that name.
    pub tiers: Vec<u32>,
}

/// A hard tier limit, resolved: up to a tier number in every tree, or up to the tier a
/// name has in each tree (no HyperNode of a tree without that name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TierCap {
    /// `highestTierAllowed: N`, a soft limit made hard, or a HyperNode's own tier.
    Tier(u32),
    /// `highestTierName`, by its id in [`TopologyIndex::tier_names`].
    Named(u16),
}

impl TopologyIndex {
    /// Whether HyperNode `h` is within `cap`. The virtual root is within a number at or
    /// above its tier, never within a name: names are resolved inside trees.
    pub fn allows(&self, cap: TierCap, h: HnIdx) -> bool {
        let info = &self.hns[h.ix()];
        match cap {
            TierCap::Tier(t) => info.tier <= t,
            TierCap::Named(k) => info.tree.is_some_and(|tree| {
                let limit = self.trees[tree as usize].tiers[usize::from(k)];
                limit != 0 && info.tier <= limit
            }),
        }
    }

    /// The highest tier `cap` allows in any tree (0: none).
    pub fn cap_tier(&self, cap: TierCap) -> u32 {
        match cap {
            TierCap::Tier(t) => t,
            TierCap::Named(k) => self.trees.iter().map(|t| t.tiers[usize::from(k)]).max().unwrap_or(0),
        }
    }

    /// Whether `cap` allows the whole cluster (the virtual root).
    pub fn cap_is_whole(&self, cap: TierCap) -> bool {
        self.allows(cap, self.root)
    }

    /// `cap` for people: `tier 2`, or `tier leaf` when the name means different numbers
    /// in different trees.
    pub fn cap_label(&self, cap: TierCap) -> String {
        match cap {
            TierCap::Tier(t) => format!("tier {t}"),
            TierCap::Named(k) => {
                let mut tiers = self.trees.iter().map(|t| t.tiers[usize::from(k)]).filter(|&t| t != 0);
                let first = tiers.next().unwrap_or(0);
                if tiers.all(|t| t == first) {
                    format!("tier {first}")
                } else {
                    let name = self.tier_names.iter().find(|(_, id)| **id == k).map_or("?", |(n, _)| n);
                    format!("tier {name}")
                }
            }
        }
    }

    /// A tier name's id, when some HyperNode has it.
    pub fn tier_name(&self, name: &str) -> Option<TierCap> {
        self.tier_names.get(name).map(|&k| TierCap::Named(k))
    }
}
