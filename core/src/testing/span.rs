//! The leaf-minimal optimum, computed the slow and obvious way, for the property test and
//! the leaves table in `benches/README.md`: per HyperNode its tier and leaves, then the
//! lowest tier with a HyperNode that holds `k` tasks and the fewest of its leaves that do.

use std::collections::{BTreeMap, BTreeSet};

use hyperplan_shared::report::JobReport;
use hyperplan_shared::{ClusterSpec, MemberType, Selector};

/// The HyperNode tree of a cluster file whose members are exact names.
#[derive(Clone, Debug)]
pub struct FatTreeView {
    tier: BTreeMap<String, u32>,
    /// Per HyperNode the tier-1 HyperNodes under it (itself for a leaf).
    leaves_of: BTreeMap<String, Vec<String>>,
    /// Per leaf its node names.
    pub nodes_of: BTreeMap<String, Vec<String>>,
}

impl FatTreeView {
    /// Test input: panics on a member that is not an exact name.
    pub fn new(cluster: &ClusterSpec) -> Self {
        let mut tier = BTreeMap::new();
        let mut children: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut nodes_of: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for hn in &cluster.hyper_nodes {
            tier.insert(hn.name.clone(), hn.tier);
            for m in &hn.members {
                let Selector::Exact { name } = &m.selector else {
                    panic!("FatTreeView takes exact members only")
                };
                match m.kind {
                    MemberType::Node => nodes_of.entry(hn.name.clone()).or_default().push(name.clone()),
                    MemberType::HyperNode => children.entry(hn.name.clone()).or_default().push(name.clone()),
                }
            }
        }
        fn leaves(h: &str, children: &BTreeMap<String, Vec<String>>, out: &mut Vec<String>) {
            match children.get(h) {
                None => out.push(h.to_string()),
                Some(cs) => cs.iter().for_each(|c| leaves(c, children, out)),
            }
        }
        let leaves_of = tier
            .keys()
            .map(|h| {
                let mut out = Vec::new();
                leaves(h, &children, &mut out);
                (h.clone(), out)
            })
            .collect();
        Self {
            tier,
            leaves_of,
            nodes_of,
        }
    }

    fn max_tier(&self) -> u32 {
        self.tier.values().copied().max().unwrap_or(0)
    }

    /// Per leaf: how many tasks fit, given how many fit on each node.
    pub fn room(&self, per_node: impl Fn(&str) -> u64) -> BTreeMap<String, u64> {
        self.nodes_of
            .iter()
            .map(|(l, ns)| (l.clone(), ns.iter().map(|n| per_node(n)).sum()))
            .collect()
    }

    /// Per leaf: how many of its nodes are wholly free (nothing used on them), the room
    /// of whole-node tasks.
    pub fn free_nodes(&self, cluster: &ClusterSpec) -> BTreeMap<String, u64> {
        let free: BTreeSet<&str> = cluster
            .nodes
            .iter()
            .filter(|n| n.used.0.values().all(|v| *v == 0))
            .map(|n| n.name.as_str())
            .collect();
        self.room(|n| u64::from(free.contains(n)))
    }

    /// The lowest tier with a HyperNode that holds `k` tasks (the whole cluster is the
    /// tier above all), and there the fewest leaves any such HyperNode needs. `exact`
    /// tries every subset of leaves (small trees); otherwise most room first, which is
    /// the same count for tasks of one shape. `None` when nothing holds them.
    pub fn optimum(&self, room: &BTreeMap<String, u64>, k: u64, exact: bool) -> Option<(u32, usize)> {
        let fewest = |leaves: &[String]| -> Option<usize> {
            let mut r: Vec<u64> = leaves.iter().map(|l| room.get(l).copied().unwrap_or(0)).collect();
            if r.iter().sum::<u64>() < k {
                return None;
            }
            if exact {
                let n = r.len();
                assert!(n <= 20, "brute force over {n} leaves");
                return (0u32..1 << n)
                    .filter(|mask| (0..n).filter(|i| mask & (1 << i) != 0).map(|i| r[i]).sum::<u64>() >= k)
                    .map(|mask| mask.count_ones() as usize)
                    .min();
            }
            r.sort_unstable_by(|a, b| b.cmp(a));
            let mut sum = 0;
            r.iter()
                .position(|x| {
                    sum += x;
                    sum >= k
                })
                .map(|p| p + 1)
        };
        for tier in 1..=self.max_tier() + 1 {
            let best = if tier > self.max_tier() {
                let all: Vec<String> = room.keys().cloned().collect();
                fewest(&all)
            } else {
                self.tier
                    .iter()
                    .filter(|(_, ht)| **ht == tier)
                    .filter_map(|(h, _)| fewest(&self.leaves_of[h]))
                    .min()
            };
            if let Some(b) = best {
                return Some((tier, b));
            }
        }
        None
    }

    /// Tier of a placed job: its allocated HyperNode's (the whole cluster above all).
    pub fn placed_tier(&self, job: &JobReport) -> u32 {
        job.allocated_hyper_node
            .as_ref()
            .and_then(|h| self.tier.get(h).copied())
            .unwrap_or(self.max_tier() + 1)
    }
}

/// Distinct leaves (lowest-tier HyperNodes) a job's tasks run under.
pub fn leaves_spanned(job: &JobReport) -> usize {
    job.tasks
        .iter()
        .filter_map(|t| t.hyper_nodes.first())
        .collect::<BTreeSet<_>>()
        .len()
}
