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
    /// Line of the dump that gives the link.
    pub line: u64,
}

impl std::fmt::Display for DegradedLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} – {}: {} (expected {}), line {}",
            self.lower, self.upper, self.rate, self.expected, self.line
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
    // Links between adjacent levels: (upper switch, lower level) → (link, rate, ends).
    let mut judged: Vec<(usize, u32, IbRate, End, End, usize)> = Vec::new();
    for (k, l) in fabric.links.iter().enumerate() {
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
        let lower = End {
            label: format!("{} port {lower_port}", lower.label),
            ..lower
        };
        let upper = End {
            label: format!("{} port {upper_port}", upper.label),
            ..upper
        };
        judged.push((up, lower.level, rate, lower, upper, k));
    }
    let mut per_switch: BTreeMap<(usize, u32), BTreeMap<IbRate, u32>> = BTreeMap::new();
    let mut per_level: BTreeMap<u32, BTreeMap<IbRate, u32>> = BTreeMap::new();
    for (up, level, rate, ..) in &judged {
        *per_switch.entry((*up, *level)).or_default().entry(*rate).or_default() += 1;
        *per_level.entry(*level).or_default().entry(*rate).or_default() += 1;
    }
    let mut out = Vec::new();
    for (up, level, rate, lower, upper, k) in judged {
        let mine = &per_switch[&(up, level)];
        let pool = if mine.values().sum::<u32>() >= 2 {
            mine
        } else {
            &per_level[&level]
        };
        let Some(expected) = usual(pool) else { continue };
        let Some(hypernode) = hypernode_of.get(up).cloned().flatten() else {
            continue;
        };
        if rate.below(expected) {
            out.push(DegradedLink {
                hypernode,
                lower: lower.label,
                upper: upper.label,
                rate: rate.to_string(),
                expected: expected.to_string(),
                line: fabric.links[k].line,
            });
        }
    }
    out.sort_by(|a, b| (&a.hypernode, &a.lower, a.line).cmp(&(&b.hypernode, &b.lower, b.line)));
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
