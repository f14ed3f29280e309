//! Tier fading (Volcano BatchNodeOrderFn for normal pods, §5.5): tasks of a job without a
//! network topology prefer nodes whose HyperNodes are full, the leaf tier weighing most.
//! Computed per node group, since nodes in the same HyperNodes score alike.

use crate::cache::capacity::Capacity;
use crate::config::ScoringConfig;
use crate::model::ids::GroupIdx;
use crate::topology::TopologyIndex;

use super::binpack::fill_ratio;

/// Normal-pod fading score: `Σ_t fading^(t−1) · binpack(HyperNode at tier t) / Σ_t
/// fading^(t−1)` over every integer tier, 1.0 where the node has no HyperNode of a tier.
pub(super) fn fading_score(
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
