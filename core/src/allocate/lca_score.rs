//! The LCA node score (Volcano BatchNodeOrderFn, §5.5) for tasks of a (sub-)job with a
//! network topology: a node group under the (sub-)job's allocated HyperNode scores by the
//! tier of their lowest common ancestor. Computed per node group, since nodes in the same
//! HyperNodes score alike.

use crate::model::ids::{GroupIdx, HnIdx};
use crate::topology::TopologyIndex;

/// `(max − t) / (max − min)` over the tiers present (the virtual root is `max`).
pub fn tier_score(index: &TopologyIndex, tier: u32) -> f64 {
    let (min, max) = (index.min_tier(), index.root_tier());
    if min == max {
        1.0
    } else if (min..=max).contains(&tier) {
        (max - tier) as f64 / (max - min) as f64
    } else {
        0.0
    }
}

/// What a degraded node (NVLink fabric trouble, or a health check that says degraded) loses
/// from its score: half a tier step, so that a healthy node as close wins over it, and it
/// still wins over a healthy node one tier further away.
pub(super) fn degraded_penalty(index: &TopologyIndex) -> f64 {
    let (min, max) = (index.min_tier(), index.root_tier());
    if max > min { 0.5 / f64::from(max - min) } else { 0.5 }
}

/// LCA score of a node group given the (sub-)job's current allocated HyperNode.
pub(super) fn lca_score(index: &TopologyIndex, group: GroupIdx, allocated: Option<HnIdx>) -> f64 {
    let (Some(a), Some(leaf)) = (allocated, index.groups[group.ix()].leaf) else {
        return 0.0;
    };
    if leaf == a {
        return 1.0;
    }
    tier_score(index, index.hns[index.lca(leaf, a).ix()].tier)
}
