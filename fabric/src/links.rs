//! Link health from a dump's link rates: a cable that trained narrower or slower than
//! its neighbours (a 4x link at 1x, an HDR link at EDR) still carries traffic, at a
//! fraction of the bandwidth, and a job whose ranks talk across it runs at that speed.
//! Each link between two tiers of the tree is judged against the links of the same
//! switch to the same tier below (a leaf's host links, a spine's leaf links): below the
//! rate most of them have (ties go to the faster) is degraded. A switch with a single
//! link to that tier is judged against all links between the two tiers, so a lone
//! uplink at 1x is still caught. No rate (an `ibnetdiscover` line without one) is no
//! verdict.
//!
//! Each degraded link counts against the HyperNode that holds both its ends: a host's
//! link against its leaf's tier-1 HyperNode, a leaf's uplink against the tier-2
//! HyperNode above it.

use std::collections::BTreeMap;

use hyperplan_shared::ibrate::IbRate;
use serde::Serialize;

use crate::ibnetdiscover::IbFabric;

/// A link below the rate its neighbours have.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DegradedLink {
    /// The HyperNode it counts against (the one holding both ends).
    pub hypernode: String,
    /// The lower end: a host's CA or a switch, with its port (`gpu017 mlx5_0 port 1`).
    pub lower: String,
    /// The upper end: a switch, with its port (`sw95 port 23`).
    pub upper: String,
    /// What it trained at (`1xHDR`).
    pub rate: String,
    /// What its neighbours have (`4xHDR`).
    pub expected: String,
    /// Where the source gives it: `line 812` of a dump, `record 40` of UFM's port list.
    pub at: String,
}

impl std::fmt::Display for DegradedLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} – {}: {} (expected {}), {}",
            self.lower, self.upper, self.rate, self.expected, self.at
        )
    }
}

/// Where one end of a link sits in the tree, for [`degraded_links`].
#[derive(Clone, Debug)]
pub(crate) struct End {
    /// The logical switch (`None` for a host's CA).
    pub switch: Option<usize>,
    /// 0 for a host's CA, else the switch's level (leaf = 1).
    pub level: u32,
    /// How people know it: the host's CA description or the switch's name.
    pub label: String,
}

/// Degraded links of `fabric`, sorted by HyperNode, then lower end. `end` places a
/// node of the dump in the tree (`None`: neither a host's CA nor a switch with a
/// level); `hypernode_of` names the HyperNode a logical switch was grouped into at its
/// own level.
pub(crate) fn degraded_links(
    fabric: &IbFabric,
    end: impl Fn(usize) -> Option<End>,
    hypernode_of: &[Option<String>],
) -> Vec<DegradedLink> {
    let mut candidates = Vec::new();
    for l in &fabric.links {
        let (Some(a), Some(b), Some(rate)) = (end(l.a), end(l.b), IbRate::parse(&l.rate)) else {
            continue;
        };
        let ((lower, lower_port), (upper, upper_port)) = if a.level < b.level {
            ((a, l.a_port), (b, l.b_port))
        } else {
            ((b, l.b_port), (a, l.a_port))
        };
        let Some(up) = upper.switch.filter(|_| upper.level == lower.level + 1) else {
            continue;
        };
        let Some(hypernode) = hypernode_of.get(up).cloned().flatten() else {
            continue;
        };
        candidates.push(Candidate {
            upper_switch: up,
            lower_level: lower.level,
            rate,
            lower: format!("{} port {lower_port}", lower.label),
            upper: format!("{} port {upper_port}", upper.label),
            hypernode,
            at: format!("line {}", l.line),
        });
    }
    judge(candidates)
}

/// A link between two adjacent levels of the tree, to judge by [`judge`].
#[derive(Clone, Debug)]
pub(crate) struct Candidate {
    /// The switch at its upper end (an index the source chose).
    pub upper_switch: usize,
    /// The level of its lower end (0: a host).
    pub lower_level: u32,
    pub rate: IbRate,
    /// Its ends as people know them, with their ports.
    pub lower: String,
    pub upper: String,
    /// The HyperNode holding both ends (the upper switch's at its own level).
    pub hypernode: String,
    /// Where the source gives it.
    pub at: String,
}

/// The candidates below the usual rate of their switch's links to the same level (of
/// all links between the two levels, for a switch with a single one), sorted by
/// HyperNode, then lower end.
pub(crate) fn judge(candidates: Vec<Candidate>) -> Vec<DegradedLink> {
    let mut per_switch: BTreeMap<(usize, u32), BTreeMap<IbRate, u32>> = BTreeMap::new();
    let mut per_level: BTreeMap<u32, BTreeMap<IbRate, u32>> = BTreeMap::new();
    for c in &candidates {
        *per_switch
            .entry((c.upper_switch, c.lower_level))
            .or_default()
            .entry(c.rate)
            .or_default() += 1;
        *per_level.entry(c.lower_level).or_default().entry(c.rate).or_default() += 1;
    }
    let mut out = Vec::new();
    for c in candidates {
        let (Some(mine), Some(all)) = (
            per_switch.get(&(c.upper_switch, c.lower_level)),
            per_level.get(&c.lower_level),
        ) else {
            continue;
        };
        let pool = if mine.values().sum::<u32>() >= 2 { mine } else { all };
        let Some(expected) = usual(pool) else { continue };
        if c.rate.below(expected) {
            out.push(DegradedLink {
                hypernode: c.hypernode,
                lower: c.lower,
                upper: c.upper,
                rate: c.rate.to_string(),
                expected: expected.to_string(),
                at: c.at,
            });
        }
    }
    out.sort_by(|a, b| (&a.hypernode, &a.lower, &a.at).cmp(&(&b.hypernode, &b.lower, &b.at)));
    out
}

/// The rate most links of `pool` have; ties go to the faster.
fn usual(pool: &BTreeMap<IbRate, u32>) -> Option<IbRate> {
    pool.iter().max_by_key(|(r, c)| (**c, **r)).map(|(r, _)| *r)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn rate(s: &str) -> IbRate {
        IbRate::parse(s).unwrap()
    }

    #[test]
    fn the_usual_rate_is_the_commonest_and_ties_go_to_the_faster() {
        let mut pool = BTreeMap::new();
        pool.insert(rate("4xHDR"), 3);
        pool.insert(rate("1xHDR"), 1);
        assert_eq!(usual(&pool), Some(rate("4xHDR")));
        pool.insert(rate("1xHDR"), 3);
        assert_eq!(usual(&pool), Some(rate("4xHDR")));
        assert_eq!(usual(&BTreeMap::new()), None);
    }
}
