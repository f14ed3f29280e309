//! The `nvlink` source: HyperNodes from the NVLink domains the agents report, so that no
//! admin writes a GB200/GB300 rack down by hand.
//!
//! A node is in a domain only when all its GPUs finished fabric registration in the same
//! cluster UUID and clique (`hyperplan_shared::gpufabric::node_domain`). Each domain (cluster
//! UUID) is one HyperNode, `nvl-<8 hex>`, tier name [`DOMAIN_TIER`]. Where Fabric Manager
//! split a domain into partitions (its nodes report more than one clique), each partition
//! is a HyperNode `nvl-<8 hex>-c<clique>` under it, tier name [`PARTITION_TIER`]: GPUs of
//! two partitions cannot reach each other over NVLink. Once one domain is split, every
//! domain gets its partitions (a whole rack is one), so that a job limited to a partition
//! may use the racks that are not split too.
//!
//! Tiers here are the source's own: partition 1 and domain 2 when any domain is split,
//! else domain 1. The topology index grafts each domain under the lowest HyperNode of the
//! other sources that holds all its nodes, and numbers that tree's other tiers above it
//! (`topology::graft`).

use std::collections::BTreeMap;

use hyperplan_shared::gpufabric::{NodeDomain, domain_names, partition_name_under};
use hyperplan_shared::{HyperNodeSpec, Member, MemberType, Selector};

/// The `tierName` of an NVLink domain's HyperNode.
pub const DOMAIN_TIER: &str = "nvlink";

/// The `tierName` of an NVLink partition's HyperNode (a domain Fabric Manager split).
pub const PARTITION_TIER: &str = "nvlink-partition";

/// What the source found, for its status line and for tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NvlinkFound {
    /// Domain and partition HyperNodes, sorted by name.
    pub hyper_nodes: Vec<HyperNodeSpec>,
    /// Nodes in a domain.
    pub in_domain: usize,
    /// Nodes in a domain whose GPUs report fabric trouble.
    pub degraded: usize,
    /// Nodes whose GPUs are still registering.
    pub pending: usize,
    /// Nodes whose registration failed.
    pub failed: usize,
    /// Nodes whose GPUs disagree.
    pub disagree: usize,
}

impl NvlinkFound {
    /// One line for people: `8 NVLink domain(s), 0 partition(s) from 144 node(s)`, then
    /// the nodes that are in none for a reason worth seeing.
    pub fn summary(&self) -> String {
        let domains = self
            .hyper_nodes
            .iter()
            .filter(|h| h.tier_name.as_deref() == Some(DOMAIN_TIER))
            .count();
        let partitions = self.hyper_nodes.len() - domains;
        let mut s = format!(
            "{domains} NVLink domain(s), {partitions} partition(s) from {} node(s)",
            self.in_domain
        );
        for (n, what) in [
            (self.degraded, "degraded"),
            (self.pending, "still registering"),
            (self.failed, "failed registration"),
            (self.disagree, "with GPUs that disagree"),
        ] {
            if n > 0 {
                s.push_str(&format!("; {n} node(s) {what}"));
            }
        }
        s
    }
}

/// Makes the HyperNodes. `nodes`: `(name, what its GPUs say)`, in any order.
pub fn discover<'a>(nodes: impl Iterator<Item = (&'a str, &'a NodeDomain)>) -> NvlinkFound {
    let mut found = NvlinkFound::default();
    // cluster UUID → clique → node names (sorted by the maps and a final sort).
    let mut domains: BTreeMap<&str, BTreeMap<u32, Vec<&str>>> = BTreeMap::new();
    for (name, domain) in nodes {
        match domain {
            NodeDomain::Domain {
                cluster_uuid,
                clique_id,
                degraded,
            } => {
                found.in_domain += 1;
                found.degraded += usize::from(*degraded);
                domains
                    .entry(cluster_uuid.as_str())
                    .or_default()
                    .entry(*clique_id)
                    .or_default()
                    .push(name);
            }
            NodeDomain::None { .. } => {}
            NodeDomain::Pending { .. } => found.pending += 1,
            NodeDomain::Failed { .. } => found.failed += 1,
            NodeDomain::Disagree { .. } => found.disagree += 1,
        }
    }
    let names = domain_names(domains.keys().copied());
    let split = domains.values().any(|cliques| cliques.len() > 1);
    let domain_tier = if split { 2 } else { 1 };
    let members = |kind: MemberType, names: &mut Vec<String>| -> Vec<Member> {
        names.sort();
        names
            .drain(..)
            .map(|name| Member {
                kind,
                selector: Selector::Exact { name },
            })
            .collect()
    };
    for (uuid, cliques) in &domains {
        // `node_domain` accepts only canonical UUIDs, which `domain_names` names all of.
        let Some(domain) = names.get(*uuid) else { continue };
        let mut children = Vec::new();
        if split {
            for (clique, nodes) in cliques {
                let name = partition_name_under(domain, *clique);
                let mut nodes: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
                found.hyper_nodes.push(HyperNodeSpec {
                    name: name.clone(),
                    tier: 1,
                    tier_name: Some(PARTITION_TIER.to_string()),
                    members: members(MemberType::Node, &mut nodes),
                });
                children.push(name);
            }
        }
        let members = if children.is_empty() {
            let mut nodes: Vec<String> = cliques.values().flatten().map(|n| n.to_string()).collect();
            members(MemberType::Node, &mut nodes)
        } else {
            members(MemberType::HyperNode, &mut children)
        };
        found.hyper_nodes.push(HyperNodeSpec {
            name: domain.clone(),
            tier: domain_tier,
            tier_name: Some(DOMAIN_TIER.to_string()),
            members,
        });
    }
    found.hyper_nodes.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn domain(uuid: &str, clique: u32) -> NodeDomain {
        NodeDomain::Domain {
            cluster_uuid: uuid.to_string(),
            clique_id: clique,
            degraded: false,
        }
    }

    fn show(found: &NvlinkFound) -> Vec<String> {
        found
            .hyper_nodes
            .iter()
            .map(|h| {
                let members: Vec<&str> = h
                    .members
                    .iter()
                    .map(|m| match &m.selector {
                        Selector::Exact { name } => name.as_str(),
                        _ => "?",
                    })
                    .collect();
                format!(
                    "{} t{} {} [{}]",
                    h.name,
                    h.tier,
                    h.tier_name.as_deref().unwrap_or(""),
                    members.join(",")
                )
            })
            .collect()
    }

    const A: &str = "6b8d7c1e-2f4a-4c9b-8e3d-5a1f0b9c7d24";
    const B: &str = "0c2f9a31-7d4e-4b8a-9f10-3e6d5c4b2a19";

    #[test]
    fn one_hypernode_per_domain_and_nodes_in_none_counted() {
        let nodes = [
            ("t3", domain(A, 7)),
            ("t1", domain(A, 7)),
            ("u1", domain(B, 9)),
            ("h100", NodeDomain::None { why: String::new() }),
            ("slow", NodeDomain::Pending { why: String::new() }),
            ("bad", NodeDomain::Failed { why: String::new() }),
            ("odd", NodeDomain::Disagree { gpus: Vec::new() }),
        ];
        let found = discover(nodes.iter().map(|(n, d)| (*n, d)));
        assert_eq!(
            show(&found),
            vec!["nvl-0c2f9a31 t1 nvlink [u1]", "nvl-6b8d7c1e t1 nvlink [t1,t3]"]
        );
        assert_eq!(
            found.summary(),
            "2 NVLink domain(s), 0 partition(s) from 3 node(s); 1 node(s) still registering; \
             1 node(s) failed registration; 1 node(s) with GPUs that disagree"
        );
    }

    #[test]
    fn a_split_domain_gets_partitions_and_so_does_every_other_domain() {
        let nodes = [
            ("a1", domain(A, 1)),
            ("a2", domain(A, 2)),
            ("a3", domain(A, 2)),
            ("b1", domain(B, 5)),
        ];
        let found = discover(nodes.iter().map(|(n, d)| (*n, d)));
        assert_eq!(
            show(&found),
            vec![
                "nvl-0c2f9a31 t2 nvlink [nvl-0c2f9a31-c5]",
                "nvl-0c2f9a31-c5 t1 nvlink-partition [b1]",
                "nvl-6b8d7c1e t2 nvlink [nvl-6b8d7c1e-c1,nvl-6b8d7c1e-c2]",
                "nvl-6b8d7c1e-c1 t1 nvlink-partition [a1]",
                "nvl-6b8d7c1e-c2 t1 nvlink-partition [a2,a3]",
            ]
        );
    }

    #[test]
    fn nothing_reported_makes_nothing() {
        let found = discover(std::iter::empty());
        assert!(found.hyper_nodes.is_empty());
        assert_eq!(found.summary(), "0 NVLink domain(s), 0 partition(s) from 0 node(s)");
    }
}
