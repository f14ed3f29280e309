//! The tier limit a network topology puts on a (sub-)job (Volcano §2.4): soft becomes hard
//! at the soft tier (the whole cluster for a job, the job's limit for a partition), a tier
//! name is looked up. The allocator and `explain` both read it from here.

use hyperplan_shared::{NetworkTopology, TopologyMode};

use crate::topology::{TierCap, TopologyIndex};

/// What [`effective_tier`] resolved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TierLimit {
    /// The hard limit; `None` = no limit (no topology, or an unknown tier name).
    pub tier: Option<TierCap>,
    /// Has a network topology at all: nodes score by LCA, not tier fading.
    pub with_topology: bool,
    /// A `highestTierName` no HyperNode has: placed without a limit, worth a warning.
    pub unknown_name: Option<String>,
}

/// Resolves the tier limit a (sub-)job's network topology puts on it (`nt`: `None` = no
/// topology); soft mode becomes hard at `soft_tier`. A tier name is resolved in each tree
/// on its own ([`TierCap::Named`]).
pub fn effective_tier(nt: Option<&NetworkTopology>, soft_tier: TierCap, index: &TopologyIndex) -> TierLimit {
    let Some(nt) = nt else {
        return TierLimit::default();
    };
    let limited = |tier| TierLimit {
        tier,
        with_topology: true,
        unknown_name: None,
    };
    match nt.mode {
        TopologyMode::Soft => limited(Some(soft_tier)),
        TopologyMode::Hard => match (nt.highest_tier_allowed, &nt.highest_tier_name) {
            (Some(t), _) => limited(Some(TierCap::Tier(t))),
            (None, None) => limited(None),
            (None, Some(name)) => match index.tier_name(name) {
                Some(cap) => limited(Some(cap)),
                None => TierLimit {
                    unknown_name: Some(name.clone()),
                    ..limited(None)
                },
            },
        },
    }
}
