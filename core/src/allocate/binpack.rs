//! HyperNode bin-pack score (Volcano HyperNodeOrderFn, §5.4) and the per-pod bin-pack
//! score that tier fading uses (§5.5).

use crate::cache::capacity::Capacity;
use crate::config::ScoringConfig;
use crate::model::ids::HnIdx;

/// Weighted mean over the weighted resources in `request` of `(used + request) /
/// allocatable` for HyperNode `h`; 0 when anything would overflow or nothing is weighted.
pub(super) fn fill_ratio(cap: &Capacity, weights: &[f64], h: HnIdx, request: &[u64]) -> f64 {
    let used = cap.hn_used(h);
    let alloc = cap.hn_alloc(h);
    let (mut num, mut den) = (0.0, 0.0);
    for k in 0..cap.d {
        let w = weights[k];
        if w <= 0.0 && request[k] == 0 {
            continue;
        }
        if used[k] + request[k] > alloc[k] {
            return 0.0;
        }
        if w <= 0.0 || request[k] == 0 {
            continue;
        }
        num += w * (used[k] + request[k]) as f64 / alloc[k] as f64;
        den += w;
    }
    if den == 0.0 { 0.0 } else { num / den }
}

/// Per-dimension bin-pack weights from the config (0 for unweighted resources).
pub(super) fn dim_weights(cap: &Capacity, cfg: &ScoringConfig) -> Vec<f64> {
    cap.dims
        .iter()
        .map(|d| cfg.binpack_weights.get(d).copied().unwrap_or(0.0))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ClusterBuilder;

    #[test]
    fn weights_change_the_mix_and_overflow_scores_zero() {
        let (index, cap) = ClusterBuilder::flat(2)
            .node_resources("cpu=10,memory=100")
            .used(0, "cpu=5")
            .build_index();
        let mut cfg = ScoringConfig::default();
        let w = dim_weights(&cap, &cfg);
        let req = cap
            .shape(&hyperplan_shared::Resources::new().with("cpu", 5000).with("memory", 50))
            .req;
        let root = index.root;
        // cpu (5+5)/20 = 0.5, memory 50/200 = 0.25 → mean 0.375
        assert!((fill_ratio(&cap, &w, root, &req) - 0.375).abs() < 1e-9);
        cfg.binpack_weights.insert("cpu".into(), 3.0);
        let w = dim_weights(&cap, &cfg);
        assert!((fill_ratio(&cap, &w, root, &req) - (3.0 * 0.5 + 0.25) / 4.0).abs() < 1e-9);
        let big = cap.shape(&hyperplan_shared::Resources::new().with("cpu", 16000)).req;
        assert_eq!(fill_ratio(&cap, &w, root, &big), 0.0);
    }
}
