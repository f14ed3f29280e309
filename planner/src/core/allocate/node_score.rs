//! Node scores (Volcano BatchNodeOrderFn, §5.5): the LCA score for tasks of a (sub-)job
//! with a network topology, and normal-pod tier fading for the rest. Both are computed
//! per node group, since nodes in the same HyperNodes score alike.

use crate::config::ScoringConfig;
use crate::core::capacity::Capacity;
use crate::core::ids::{GroupIdx, HnIdx};
use crate::core::topology::TopologyIndex;

use super::binpack::fill_ratio;

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

/// LCA score of a node group given the (sub-)job's current allocated HyperNode.
pub fn lca_score(index: &TopologyIndex, group: GroupIdx, allocated: Option<HnIdx>) -> f64 {
    let (Some(a), Some(leaf)) = (allocated, index.groups[group.ix()].leaf) else {
        return 0.0;
    };
    if leaf == a {
        return 1.0;
    }
    tier_score(index, index.hns[index.lca(leaf, a).ix()].tier)
}

/// Normal-pod fading score: `Σ_t fading^(t−1) · binpack(HyperNode at tier t) / Σ_t
/// fading^(t−1)` over every integer tier, 1.0 where the node has no HyperNode of a tier.
pub fn fading_score(
    index: &TopologyIndex,
    cap: &Capacity,
    cfg: &ScoringConfig,
    weights: &[f64],
    group: GroupIdx,
    request: &[u64],
) -> f64 {
    if !cfg.normal_pod_enable {
        return 0.0;
    }
    let g = &index.groups[group.ix()];
    let (mut num, mut den) = (0.0, 0.0);
    for t in index.min_tier()..=index.root_tier() {
        let w = cfg.normal_pod_fading.powi(t as i32 - 1);
        let hn = index.tiers.binary_search(&t).ok().and_then(|pos| g.per_tier[pos]);
        let s = match hn {
            Some(h) => fill_ratio(cap, weights, h, request),
            None => 1.0,
        };
        num += w * s;
        den += w;
    }
    if den == 0.0 || !num.is_finite() { 0.0 } else { num / den }
}
