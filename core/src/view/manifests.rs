//! The HyperNodes the planner places with, as specs: what `hyperplan topology export`
//! writes (Volcano manifests, a Slurm topology.conf). Members are resolved: child
//! HyperNodes by name, and the nodes directly under each HyperNode (those under none of
//! its children) by name, so the result reads without labels or regexes. HyperNodes the
//! index left out (broken) are not in it; the virtual root is not either.

use fixedbitset::FixedBitSet;
use hyperplan_shared::{HyperNodeSpec, Member, MemberType, Selector};

use crate::topology::TopologyIndex;

/// Sorted by tier, then name; members: child HyperNodes, then nodes, each by name.
pub fn resolved_specs(index: &TopologyIndex) -> Vec<HyperNodeSpec> {
    let exact = |kind, name: &str| Member {
        kind,
        selector: Selector::Exact { name: name.to_string() },
    };
    let mut out: Vec<HyperNodeSpec> = index
        .hns
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != index.root.ix())
        .map(|(_, h)| {
            let mut under_children = FixedBitSet::with_capacity(h.nodes.len());
            for c in &h.children {
                under_children.union_with(&index.hns[c.ix()].nodes);
            }
            let mut children: Vec<&str> = h.children.iter().map(|c| index.hns[c.ix()].name.as_str()).collect();
            children.sort_unstable();
            let mut members: Vec<Member> = children.into_iter().map(|c| exact(MemberType::HyperNode, c)).collect();
            // Node indices are in name order.
            members.extend(
                h.nodes
                    .ones()
                    .filter(|&n| !under_children.contains(n))
                    .map(|n| exact(MemberType::Node, &index.node_names[n])),
            );
            HyperNodeSpec {
                name: h.name.clone(),
                tier: h.tier,
                tier_name: h.tier_name.clone(),
                members,
            }
        })
        .collect();
    out.sort_by(|a, b| a.tier.cmp(&b.tier).then_with(|| a.name.cmp(&b.name)));
    out
}
