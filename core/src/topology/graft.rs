//! Grafting the NVLink HyperNodes (the `nvlink` source) under the fabric's: an NVLink
//! domain is the strongest boundary there is, so it becomes the lowest tier of the tree
//! that holds it (Volcano #5732's `Node → NVL72 (tier 1) → IB Leaf (tier 2) → IB Spine
//! (tier 3)`).
//!
//! The other sources' HyperNodes are indexed first. Each domain then becomes a member of
//! the lowest of them that holds every one of its nodes (its leaf), and every tier of that
//! tree moves up by as many tiers as the NVLink HyperNodes take, so that names keep their
//! order in it (`highestTierName: leaf` still means the leaf). A domain whose nodes sit
//! under different leaves (a rack cabled to two rail groups) is split per leaf: every
//! part is still one NVLink domain, and a warning names them. Trees that hold no domain
//! keep their tiers.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bevy_ecs::prelude::Entity;
use hyperplan_shared::{HyperNodeSpec, Member, MemberType, Selector};

use super::TopologyIndex;
use crate::model::components::{HyperNode, Node, SourceKind};
use crate::model::ids::HnIdx;

/// The HyperNodes to index instead of `hyper_nodes`, and notes for people; `None` when
/// there is no NVLink HyperNode (index them as they are).
pub(super) fn graft(
    nodes: &[(Entity, &Node)],
    hyper_nodes: &[&HyperNode],
    generation: u64,
    removed: &BTreeSet<String>,
) -> Option<(Vec<HyperNode>, Vec<String>)> {
    let (nv, rest): (Vec<&HyperNode>, Vec<&HyperNode>) =
        hyper_nodes.iter().partition(|h| h.source.kind == SourceKind::Nvlink);
    if nv.is_empty() {
        return None;
    }
    let plain = TopologyIndex::build_tree(nodes, &rest, generation, removed);
    let mut out: Vec<HyperNode> = rest.iter().map(|h| (*h).clone()).collect();
    // The spec the plain index kept for each name: the first by (name, source), as there.
    let mut kept: HashMap<String, usize> = HashMap::new();
    let mut order: Vec<usize> = (0..out.len()).collect();
    order.sort_by(|&a, &b| (&out[a].spec.name, &out[a].source).cmp(&(&out[b].spec.name, &out[b].source)));
    for i in order {
        kept.entry(out[i].spec.name.clone()).or_insert(i);
    }
    let nv_specs: BTreeMap<&str, &HyperNode> = nv.iter().map(|h| (h.spec.name.as_str(), *h)).collect();
    let children: BTreeSet<&str> = nv
        .iter()
        .flat_map(|h| h.spec.members.iter())
        .filter(|m| m.kind == MemberType::HyperNode)
        .filter_map(|m| exact(m))
        .collect();
    let shift = nv.iter().map(|h| h.spec.tier).max().unwrap_or(1);
    let mut notes = Vec::new();
    let mut shifted: BTreeSet<HnIdx> = BTreeSet::new();
    let mut grafted: Vec<HyperNode> = Vec::new();
    for (name, top) in nv_specs.iter().filter(|(n, _)| !children.contains(*n)) {
        let mut by_leaf: BTreeMap<Option<HnIdx>, BTreeSet<String>> = BTreeMap::new();
        for node in subtree_nodes(name, &nv_specs) {
            let Some(&n) = plain.node_by_name.get(node) else {
                continue;
            };
            let group = &plain.groups[plain.node_group[n.ix()].ix()];
            by_leaf.entry(group.lowest).or_default().insert(node.to_string());
        }
        let split = by_leaf.len() > 1;
        if by_leaf.is_empty() {
            // No node of it is a planner node (yet): indexed as it is, the build says so.
            by_leaf.insert(None, BTreeSet::new());
        }
        let mut parts = Vec::new();
        for (leaf, members) in &by_leaf {
            let suffix = match (split, leaf) {
                (false, _) => String::new(),
                (true, Some(l)) => format!(".{}", plain.hns[l.ix()].name),
                (true, None) => ".unplaced".to_string(),
            };
            let part = copy(name, &suffix, members, split, &nv_specs, top, &mut grafted);
            if let Some(l) = leaf {
                if let Some(&i) = kept.get(&plain.hns[l.ix()].name) {
                    out[i].spec.members.push(Member {
                        kind: MemberType::HyperNode,
                        selector: Selector::Exact { name: part.clone() },
                    });
                }
                shifted.insert(top_of(&plain, *l));
            }
            parts.push(part);
        }
        if split {
            let leaves: Vec<&str> = by_leaf
                .keys()
                .map(|l| l.map_or("no HyperNode", |l| plain.hns[l.ix()].name.as_str()))
                .collect();
            notes.push(format!(
                "NVLink domain {name} has nodes under {}: split into {}, one per place",
                leaves.join(", "),
                parts.join(", ")
            ));
        }
    }
    // Every tree that took a domain moves up; the others keep their numbers.
    for top in shifted {
        let mut stack = vec![top];
        while let Some(h) = stack.pop() {
            let info = &plain.hns[h.ix()];
            stack.extend(info.children.iter().copied());
            if let Some(&i) = kept.get(&info.name) {
                out[i].spec.tier += shift;
            }
        }
    }
    out.extend(grafted);
    Some((out, notes))
}

/// The exact name a member selects, if it selects by name.
fn exact(m: &Member) -> Option<&str> {
    match &m.selector {
        Selector::Exact { name } => Some(name),
        _ => None,
    }
}

/// Node names under an NVLink HyperNode (its partitions' too).
fn subtree_nodes<'a>(name: &str, specs: &BTreeMap<&str, &'a HyperNode>) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut stack = vec![name.to_string()];
    let mut seen = BTreeSet::new();
    while let Some(n) = stack.pop() {
        let Some(h) = specs.get(n.as_str()) else { continue };
        if !seen.insert(n) {
            continue;
        }
        for m in &h.spec.members {
            match (m.kind, exact(m)) {
                (MemberType::Node, Some(node)) => out.push(node),
                (MemberType::HyperNode, Some(child)) => stack.push(child.to_string()),
                _ => {}
            }
        }
    }
    out
}

/// Copies the NVLink HyperNode `name` and what is under it into `out`, renamed with
/// `suffix` and, when `restrict`, keeping only the nodes in `keep`; returns the copy's name.
fn copy(
    name: &str,
    suffix: &str,
    keep: &BTreeSet<String>,
    restrict: bool,
    specs: &BTreeMap<&str, &HyperNode>,
    top: &HyperNode,
    out: &mut Vec<HyperNode>,
) -> String {
    let Some(h) = specs.get(name) else {
        return format!("{name}{suffix}");
    };
    let mut spec = HyperNodeSpec {
        name: format!("{name}{suffix}"),
        tier: h.spec.tier,
        tier_name: h.spec.tier_name.clone(),
        members: Vec::new(),
    };
    for m in &h.spec.members {
        match (m.kind, exact(m)) {
            (MemberType::Node, Some(node)) if restrict && !keep.contains(node) => {}
            (MemberType::HyperNode, Some(child)) => {
                let under = subtree_nodes(child, specs);
                if restrict && !under.iter().any(|n| keep.contains(*n)) {
                    continue;
                }
                let c = copy(child, suffix, keep, restrict, specs, top, out);
                spec.members.push(Member {
                    kind: MemberType::HyperNode,
                    selector: Selector::Exact { name: c },
                });
            }
            _ => spec.members.push(m.clone()),
        }
    }
    let copied = spec.name.clone();
    out.push(HyperNode {
        spec,
        source: top.source.clone(),
        degraded_links: h.degraded_links.clone(),
    });
    copied
}

/// The top-level HyperNode above `h` (itself when it is one).
fn top_of(index: &TopologyIndex, h: HnIdx) -> HnIdx {
    let mut cur = h;
    while let Some(p) = index.hns[cur.ix()].parent.filter(|&p| p != index.root) {
        cur = p;
    }
    cur
}
