//! Building the topology index: validate HyperNodes (a broken one is left out with a
//! reason, the rest keeps working), add the virtual `<cluster-top-hypernode>`, number
//! nodes and HyperNodes densely, and precompute node bitsets, tiers and node groups.

use std::collections::{BTreeMap, HashMap};

use bevy_ecs::prelude::{Entity, Resource};
use fixedbitset::FixedBitSet;
use hyperplan_shared::{MemberType, Selector};

use super::marks::NodeMarks;
use super::tree::Tree;
use crate::model::components::{HyperNode, Node};
use crate::model::ids::{GroupIdx, HnIdx, NodeIdx};

/// Name of the virtual HyperNode above every other one (Volcano's name).
pub const VIRTUAL_ROOT: &str = "<cluster-top-hypernode>";

/// One HyperNode of the index, the virtual root included.
#[derive(Clone, Debug)]
pub struct HnInfo {
    /// Its name ([`VIRTUAL_ROOT`] for the virtual root).
    pub name: String,
    /// Its tier; the virtual root's is one above the highest (1 without HyperNodes).
    pub tier: u32,
    /// Its `tierName`; `None` when not given.
    pub tier_name: Option<String>,
    /// Its tree ([`TopologyIndex::trees`]); `None` only for the virtual root.
    pub tree: Option<u32>,
    /// The discovery source that made it (empty for the virtual root).
    pub source: String,
    /// The HyperNode above it; `None` only for the virtual root.
    pub parent: Option<HnIdx>,
    /// Sorted by name: BFS order is deterministic.
    pub children: Vec<HnIdx>,
    /// Distance from the virtual root (0 for the root itself).
    pub depth: u32,
    /// Real nodes under this HyperNode, over dense node indices.
    pub nodes: FixedBitSet,
    /// Number of nodes in `nodes`.
    pub node_count: u32,
    /// Its nodes whose InfiniBand ports a health check finds degraded: a job's
    /// ranks there may not talk at full speed, so hard-topology jobs take a HyperNode of
    /// the same tier without any first (see `allocate::search`).
    pub fabric_degraded: u32,
    /// Links inside it (between its members and its switches, at any tier below) that
    /// its sources found narrower or slower than their neighbours
    /// (`HyperNode::degraded_links`).
    pub links_degraded: u32,
    /// Node groups wholly inside this HyperNode, in node order.
    pub groups: Vec<GroupIdx>,
}

impl HnInfo {
    /// Its fabric is degraded: a node's InfiniBand port, or a link its sources found
    /// slower than its neighbours. Hard-topology jobs take a HyperNode of the same tier
    /// without either first.
    pub fn fabric_sick(&self) -> bool {
        self.fabric_degraded > 0 || self.links_degraded > 0
    }
}

/// Nodes that belong to exactly the same HyperNodes: they score alike, so the allocator
/// scores a group once and takes its first node that fits.
#[derive(Clone, Debug)]
pub struct Group {
    /// Their HyperNode of the lowest tier present (Volcano's leafHyperNodeOf; the first by
    /// name on a tie; the virtual root when there is no HyperNode at all). `None` for nodes
    /// in none of that tier: attached directly to a higher HyperNode, or in no HyperNode.
    /// Such nodes share no leaf with any other node: each is a lowest-tier group of its
    /// own for the span, scores 0 by LCA and does not narrow an allocated HyperNode.
    pub leaf: Option<HnIdx>,
    /// The lowest HyperNode holding these nodes, whatever its tier (the first by name on
    /// a tie): for a node attached directly to a spine, the spine. `None` for nodes in no
    /// HyperNode.
    pub lowest: Option<HnIdx>,
    /// Per position in `TopologyIndex::tiers`: the first (by name) HyperNode of that tier
    /// holding these nodes.
    pub per_tier: Vec<Option<HnIdx>>,
    /// Every HyperNode holding these nodes, the virtual root included.
    pub hyper_nodes: Vec<HnIdx>,
    /// Healthy first, then degraded (`topology::marks`), each in name order.
    pub nodes: Vec<NodeIdx>,
}

/// The network topology in dense form: nodes, HyperNodes and node groups by index, with
/// tiers and topology order.
#[derive(Clone, Debug, Default, Resource)]
pub struct TopologyIndex {
    /// Bumped on every rebuild; cached per-topology results compare against it.
    pub generation: u64,
    /// The generation of the last rebuild that changed what could ever run: the nodes,
    /// what they offer, their hardware, the HyperNodes. A rebuild for a drain, a node's
    /// readiness or its health keeps it, so the jobs' "could it ever run here?" answers
    /// (`JobState::checked_generation`) stand: after a storm of health changes on 10,000
    /// nodes, a thousand waiting jobs are not each searched again on the emptied cluster.
    pub feasibility: u64,
    /// What [`Self::feasibility`] was worked out from (see `reindex`).
    pub fingerprint: u64,
    /// Node names by `NodeIdx`, sorted.
    pub node_names: Vec<String>,
    /// Node entities by `NodeIdx`.
    pub node_entities: Vec<Entity>,
    /// `NodeIdx` by node name.
    pub node_by_name: HashMap<String, NodeIdx>,
    /// By `NodeIdx`: the node's group.
    pub node_group: Vec<GroupIdx>,
    /// HyperNodes by `HnIdx`: those kept, in name order, then the virtual root.
    pub hns: Vec<HnInfo>,
    /// `HnIdx` by HyperNode name, the virtual root included.
    pub hn_by_name: HashMap<String, HnIdx>,
    /// The virtual root's index (the last one).
    pub root: HnIdx,
    /// Sorted distinct tiers, the virtual root's included (gaps preserved).
    pub tiers: Vec<u32>,
    /// Every `tierName` and its id, in name order; what tier a name means is the tree's
    /// to say ([`Tree::tiers`]).
    pub tier_names: BTreeMap<String, u16>,
    /// The trees: one per top-level HyperNode, in name order.
    pub trees: Vec<Tree>,
    /// Node groups by `GroupIdx`, in the order of their first node.
    pub groups: Vec<Group>,
    /// By group: its place in topology order, the order ranks follow. Groups are ordered
    /// by their HyperNodes, highest tier first (the virtual root left out); groups with
    /// the same HyperNodes share a place, so their tasks still order by node.
    pub group_order: Vec<u32>,
    /// By `NodeIdx`: what marks the node degraded ([`TopologyIndex::mark`]).
    pub marks: Vec<NodeMarks>,
    /// Why HyperNodes were left out or members ignored.
    pub warnings: Vec<String>,
}

struct Resolved {
    nodes: Vec<NodeIdx>,
    children: Vec<usize>,
}

impl TopologyIndex {
    /// A HyperNode and its index by name; `None` when unknown or left out.
    pub fn hn(&self, name: &str) -> Option<(HnIdx, &HnInfo)> {
        self.hn_by_name.get(name).map(|&h| (h, &self.hns[h.ix()]))
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.node_names.len()
    }

    /// The virtual root's tier: one above the highest HyperNode tier.
    pub fn root_tier(&self) -> u32 {
        self.hns[self.root.ix()].tier
    }

    /// The lowest tier present (1 when there is none).
    pub fn min_tier(&self) -> u32 {
        self.tiers.first().copied().unwrap_or(1)
    }

    /// The node's HyperNode of the lowest tier present (Volcano's leafHyperNodeOf); see
    /// [`Group::leaf`].
    pub fn leaf_of(&self, node: NodeIdx) -> Option<HnIdx> {
        self.groups[self.node_group[node.ix()].ix()].leaf
    }

    /// The lowest HyperNode holding the node, whatever its tier; see [`Group::lowest`].
    pub fn lowest_of(&self, node: NodeIdx) -> Option<HnIdx> {
        self.groups[self.node_group[node.ix()].ix()].lowest
    }

    /// The node's HyperNodes from the lowest tier up, the virtual root left out.
    pub fn hyper_node_names_of(&self, node: NodeIdx) -> Vec<String> {
        let g = &self.groups[self.node_group[node.ix()].ix()];
        let mut hs: Vec<HnIdx> = g.hyper_nodes.iter().copied().filter(|h| *h != self.root).collect();
        hs.sort_by(|a, b| {
            let (x, y) = (&self.hns[a.ix()], &self.hns[b.ix()]);
            x.tier.cmp(&y.tier).then_with(|| x.name.cmp(&y.name))
        });
        hs.into_iter().map(|h| self.hns[h.ix()].name.clone()).collect()
    }

    /// Builds the index. `nodes` and `hyper_nodes` in any order; both are sorted by name
    /// here so the result does not depend on entity order.
    /// `removed`: nodes an admin removed (`hyperplan nodes remove`): a member naming one
    /// is left out quietly instead of breaking its HyperNode.
    /// The `nvlink` source's HyperNodes are grafted under the others first ([`super::graft`]).
    pub fn build(
        nodes: &[(Entity, &Node)],
        hyper_nodes: &[&HyperNode],
        generation: u64,
        removed: &std::collections::BTreeSet<String>,
    ) -> Self {
        match super::graft::graft(nodes, hyper_nodes, generation, removed) {
            None => Self::build_tree(nodes, hyper_nodes, generation, removed),
            Some((grafted, notes)) => {
                let refs: Vec<&HyperNode> = grafted.iter().collect();
                let mut index = Self::build_tree(nodes, &refs, generation, removed);
                index.warnings.extend(notes);
                index
            }
        }
    }

    /// [`Self::build`] without grafting: the HyperNodes as their sources gave them.
    pub(super) fn build_tree(
        nodes: &[(Entity, &Node)],
        hyper_nodes: &[&HyperNode],
        generation: u64,
        removed: &std::collections::BTreeSet<String>,
    ) -> Self {
        let mut nodes: Vec<(Entity, &Node)> = nodes.to_vec();
        nodes.sort_by(|a, b| a.1.name.cmp(&b.1.name));
        let node_names: Vec<String> = nodes.iter().map(|(_, n)| n.name.to_string()).collect();
        let node_entities: Vec<Entity> = nodes.iter().map(|(e, _)| *e).collect();
        let node_by_name: HashMap<String, NodeIdx> = node_names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), NodeIdx(i as u32)))
            .collect();
        let mut warnings = Vec::new();

        // One spec per name: the first source (static, label, then discovered; by name) wins.
        let mut specs: Vec<&HyperNode> = hyper_nodes.to_vec();
        specs.sort_by(|a, b| a.spec.name.cmp(&b.spec.name).then_with(|| a.source.cmp(&b.source)));
        specs.dedup_by(|later, first| {
            let dup = later.spec.name == first.spec.name;
            if dup {
                warnings.push(format!(
                    "HyperNode {}: defined by both {} and {} sources; the {} one is used",
                    first.spec.name, first.source.name, later.source.name, first.source.name
                ));
            }
            dup
        });
        let spec_by_name: HashMap<&str, usize> = specs
            .iter()
            .enumerate()
            .map(|(i, s)| (s.spec.name.as_str(), i))
            .collect();
        let n_specs = specs.len();

        // 1. Resolve members; a member that matches nothing or a bad regex breaks the HyperNode.
        let mut broken: Vec<Option<String>> = vec![None; n_specs];
        let mut resolved: Vec<Resolved> = Vec::with_capacity(n_specs);
        for (i, hn) in specs.iter().enumerate() {
            let mut r = Resolved {
                nodes: Vec::new(),
                children: Vec::new(),
            };
            for (m, member) in hn.spec.members.iter().enumerate() {
                let before = (r.nodes.len(), r.children.len());
                match (member.kind, &member.selector) {
                    (MemberType::Node, Selector::Exact { name }) => {
                        if let Some(&n) = node_by_name.get(name) {
                            r.nodes.push(n);
                        } else if removed.contains(name) {
                            continue;
                        }
                    }
                    (MemberType::Node, Selector::Regex { pattern }) => match regex::Regex::new(pattern) {
                        Ok(re) => r.nodes.extend(
                            node_names
                                .iter()
                                .enumerate()
                                .filter(|(_, n)| re.is_match(n))
                                .map(|(i, _)| NodeIdx(i as u32)),
                        ),
                        Err(e) => {
                            let first = e.to_string().lines().last().unwrap_or_default().trim().to_string();
                            broken[i]
                                .get_or_insert(format!("members[{m}]: regex {pattern:?} does not compile: {first}"));
                            continue;
                        }
                    },
                    (MemberType::Node, sel @ Selector::Label { .. }) => r.nodes.extend(
                        nodes
                            .iter()
                            .enumerate()
                            .filter(|(_, (_, n))| sel.matches_labels(&n.labels))
                            .map(|(i, _)| NodeIdx(i as u32)),
                    ),
                    (MemberType::HyperNode, Selector::Exact { name }) => {
                        if let Some(&c) = spec_by_name.get(name.as_str()) {
                            r.children.push(c);
                        }
                    }
                    (MemberType::HyperNode, _) => {
                        warnings.push(format!(
                            "HyperNode {}: members[{m}]: a HyperNode member only takes exactMatch; this selector is ignored",
                            hn.spec.name
                        ));
                        continue;
                    }
                }
                if (r.nodes.len(), r.children.len()) == before {
                    broken[i].get_or_insert(format!("members[{m}] {} matches nothing", describe(member)));
                }
            }
            resolved.push(r);
        }

        // 2. One parent per HyperNode: the first claimant by name keeps it, later ones break.
        let mut parent: Vec<Option<usize>> = vec![None; n_specs];
        for p in 0..n_specs {
            if broken[p].is_some() {
                continue;
            }
            for &c in &resolved[p].children {
                if broken[c].is_some() {
                    continue;
                }
                match parent[c] {
                    None => parent[c] = Some(p),
                    Some(first) if first != p => {
                        broken[p].get_or_insert(format!(
                            "member {} already has parent {}; a HyperNode has one parent",
                            specs[c].spec.name, specs[first].spec.name
                        ));
                    }
                    Some(_) => {}
                }
            }
        }
        // A broken claimant's children are free again.
        for p in parent.iter_mut() {
            if p.is_some_and(|p| broken[p].is_some()) {
                *p = None;
            }
        }
        // 3. Cycles: follow parent links; every HyperNode on a cycle breaks.
        let mut state = vec![0u8; n_specs]; // 0 new, 1 on current walk, 2 done
        for start in 0..n_specs {
            let mut walk = Vec::new();
            let mut cur = Some(start);
            while let Some(c) = cur {
                if state[c] == 2 {
                    break;
                }
                if state[c] == 1 {
                    let pos = walk.iter().position(|&x| x == c).unwrap_or(0);
                    let cycle: Vec<&str> = walk[pos..]
                        .iter()
                        .chain(std::iter::once(&c))
                        .map(|&x| specs[x].spec.name.as_str())
                        .collect();
                    for &x in &walk[pos..] {
                        broken[x].get_or_insert(format!("cycle {}", cycle.join(" → ")));
                    }
                    break;
                }
                state[c] = 1;
                walk.push(c);
                cur = parent[c];
            }
            for x in walk {
                state[x] = 2;
            }
        }
        for p in parent.iter_mut() {
            if p.is_some_and(|p| broken[p].is_some()) {
                *p = None;
            }
        }
        for (i, why) in broken.iter().enumerate() {
            if let Some(why) = why {
                warnings.push(format!("HyperNode {} left out: {why}", specs[i].spec.name));
            }
        }

        // 4. Dense numbering of the HyperNodes that stay, in name order; root last.
        let keep: Vec<usize> = (0..n_specs).filter(|&i| broken[i].is_none()).collect();
        let mut dense = vec![None; n_specs];
        for (d, &i) in keep.iter().enumerate() {
            dense[i] = Some(HnIdx(d as u32));
        }
        let n_nodes = node_names.len();
        let max_tier = keep.iter().map(|&i| specs[i].spec.tier).max();
        let root = HnIdx(keep.len() as u32);
        let mut hns: Vec<HnInfo> = keep
            .iter()
            .map(|&i| HnInfo {
                name: specs[i].spec.name.clone(),
                tier: specs[i].spec.tier,
                tier_name: specs[i].spec.tier_name.clone(),
                tree: None,
                source: specs[i].source.name.clone(),
                parent: Some(parent[i].and_then(|p| dense[p]).unwrap_or(root)),
                children: Vec::new(),
                depth: 0,
                nodes: FixedBitSet::with_capacity(n_nodes),
                node_count: 0,
                fabric_degraded: 0,
                links_degraded: specs[i].degraded_links.len() as u32,
                groups: Vec::new(),
            })
            .collect();
        hns.push(HnInfo {
            name: VIRTUAL_ROOT.to_string(),
            tier: max_tier.map_or(1, |t| t + 1),
            tier_name: None,
            tree: None,
            source: String::new(),
            parent: None,
            children: Vec::new(),
            depth: 0,
            nodes: FixedBitSet::with_capacity(n_nodes),
            node_count: 0,
            fabric_degraded: 0,
            links_degraded: 0,
            groups: Vec::new(),
        });
        for h in 0..keep.len() {
            if let Some(p) = hns[h].parent {
                hns[p.ix()].children.push(HnIdx(h as u32)); // h ascending = name order
            }
        }
        // Depths and trees top-down, node sets bottom-up (children before parents in
        // post-order).
        let mut order = vec![root];
        let mut tops = Vec::new();
        let mut k = 0;
        while k < order.len() {
            let h = order[k];
            let d = hns[h.ix()].depth;
            let children = hns[h.ix()].children.clone();
            for c in children {
                hns[c.ix()].depth = d + 1;
                hns[c.ix()].tree = if h == root {
                    tops.push(c);
                    Some(tops.len() as u32 - 1)
                } else {
                    hns[h.ix()].tree
                };
                order.push(c);
            }
            k += 1;
        }
        for (d, &i) in keep.iter().enumerate() {
            for &n in &resolved[i].nodes {
                hns[d].nodes.insert(n.ix());
            }
        }
        hns[root.ix()].nodes.insert_range(..);
        for &h in order.iter().rev() {
            if let Some(p) = hns[h.ix()].parent {
                let child = hns[h.ix()].nodes.clone();
                hns[p.ix()].nodes.union_with(&child);
                let links = hns[h.ix()].links_degraded;
                hns[p.ix()].links_degraded += links;
            }
        }
        // Health marks come after the build (`topology::marks`): no node counts yet.
        for h in &mut hns {
            h.node_count = h.nodes.count_ones(..) as u32;
        }

        let mut tiers: Vec<u32> = hns.iter().map(|h| h.tier).collect();
        tiers.sort_unstable();
        tiers.dedup();
        let (tier_names, trees) = tree_tiers(&hns, tops, &mut warnings);

        // 5. Node groups: nodes with the same set of HyperNodes. Nodes whose GPUs report
        // fabric trouble are taken last within theirs, and score lower (`topology::marks`).
        let mut node_hns: Vec<Vec<HnIdx>> = vec![Vec::new(); nodes.len()];
        for (h, info) in hns.iter().enumerate() {
            for n in info.nodes.ones() {
                node_hns[n].push(HnIdx(h as u32));
            }
        }
        let min_tier = tiers.first().copied().unwrap_or(1);
        let mut by_signature: BTreeMap<Vec<HnIdx>, GroupIdx> = BTreeMap::new();
        let mut groups: Vec<Group> = Vec::new();
        let mut node_group = Vec::with_capacity(n_nodes);
        for (n, key) in node_hns.into_iter().enumerate() {
            let next = GroupIdx(groups.len() as u32);
            let g = *by_signature.entry(key.clone()).or_insert(next);
            if g == next {
                let sig = key;
                // sig is in HnIdx = name order, so the first hit per tier is the first by name.
                let per_tier = tiers
                    .iter()
                    .map(|t| sig.iter().copied().find(|h| hns[h.ix()].tier == *t))
                    .collect::<Vec<_>>();
                // Only the lowest tier present makes a leaf: a spine is no leaf for the
                // nodes attached to it directly, even where no leaf holds them.
                let leaf = sig.iter().copied().find(|h| hns[h.ix()].tier == min_tier);
                let lowest = sig
                    .iter()
                    .copied()
                    .filter(|&h| h != root)
                    .min_by_key(|h| hns[h.ix()].tier);
                groups.push(Group {
                    leaf,
                    lowest,
                    per_tier,
                    hyper_nodes: sig,
                    nodes: Vec::new(),
                });
            }
            groups[g.ix()].nodes.push(NodeIdx(n as u32));
            node_group.push(g);
        }
        for (g, group) in groups.iter().enumerate() {
            for &h in &group.hyper_nodes {
                hns[h.ix()].groups.push(GroupIdx(g as u32));
            }
        }

        let hn_by_name = hns
            .iter()
            .enumerate()
            .map(|(i, h)| (h.name.clone(), HnIdx(i as u32)))
            .collect();
        let group_order = group_order(&groups, root);
        let marks = nodes
            .iter()
            .map(|(_, n)| NodeMarks {
                nvlink: n.nvlink.as_ref().is_some_and(|v| v.degraded()),
                ..NodeMarks::default()
            })
            .collect();
        let mut index = TopologyIndex {
            generation,
            feasibility: generation,
            fingerprint: 0,
            node_names,
            node_entities,
            node_by_name,
            node_group,
            hns,
            hn_by_name,
            root,
            tiers,
            tier_names,
            trees,
            groups,
            group_order,
            marks,
            warnings,
        };
        index.order_groups();
        index
    }
}

/// Tier names and what each means per tree: ids in name order, and per tree the tier of
/// each name (a name given to two tiers of one tree keeps the first by HyperNode name).
fn tree_tiers(hns: &[HnInfo], tops: Vec<HnIdx>, warnings: &mut Vec<String>) -> (BTreeMap<String, u16>, Vec<Tree>) {
    let mut names: BTreeMap<String, u16> = BTreeMap::new();
    for h in hns {
        if let Some(tn) = h.tier_name.as_ref().filter(|t| !t.is_empty()) {
            names.entry(tn.clone()).or_insert(0);
        }
    }
    for (k, id) in names.values_mut().enumerate() {
        // HyperNode specs are far fewer than 65,536 names in practice; beyond, ids wrap
        // and a name may read another's tiers, which only loosens a limit.
        *id = k as u16;
    }
    let mut trees: Vec<Tree> = tops
        .into_iter()
        .map(|top| Tree {
            top,
            tiers: vec![0; names.len()],
        })
        .collect();
    for h in hns {
        let (Some(tree), Some(tn)) = (h.tree, h.tier_name.as_ref().filter(|t| !t.is_empty())) else {
            continue;
        };
        let tree = &mut trees[tree as usize];
        let slot = &mut tree.tiers[usize::from(names[tn])];
        if *slot == 0 {
            *slot = h.tier;
        } else if *slot != h.tier {
            warnings.push(format!(
                "tierName {tn:?} names tiers {} and {} ({}) in the tree under {}; tier {} is used",
                slot,
                h.tier,
                h.name,
                hns[tree.top.ix()].name,
                slot
            ));
        }
    }
    (names, trees)
}

/// See `TopologyIndex::group_order`.
fn group_order(groups: &[Group], root: HnIdx) -> Vec<u32> {
    let mut by_path: Vec<(Vec<HnIdx>, usize)> = groups
        .iter()
        .enumerate()
        .map(|(g, group)| {
            let path = group
                .per_tier
                .iter()
                .rev()
                .flatten()
                .copied()
                .filter(|h| *h != root)
                .collect();
            (path, g)
        })
        .collect();
    by_path.sort();
    let mut order = vec![0u32; groups.len()];
    let mut place = 0u32;
    for (i, (path, g)) in by_path.iter().enumerate() {
        if i > 0 && by_path[i - 1].0 != *path {
            place += 1;
        }
        order[*g] = place;
    }
    order
}

fn describe(member: &hyperplan_shared::Member) -> String {
    let kind = match member.kind {
        MemberType::Node => "Node",
        MemberType::HyperNode => "HyperNode",
    };
    match &member.selector {
        Selector::Exact { name } => format!("({kind} exactMatch {name:?})"),
        Selector::Regex { pattern } => format!("({kind} regexMatch {pattern:?})"),
        Selector::Label { .. } => format!("({kind} labelMatch)"),
    }
}
