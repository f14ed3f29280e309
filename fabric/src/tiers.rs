//! From a parsed InfiniBand graph to HyperNodes, every tier.
//!
//! 1. CAs: SHARP "Aggregation Node" CAs and CAs sharing a switch's system image GUID live
//!    inside switches and are left out; every other CA is a host port, named by the GUIDs
//!    agents report, else by the GUID map file, else by its description; the rest are
//!    listed as unmapped, never guessed.
//! 2. Switches: the ASICs of one director chassis (same `-g` chassis, same system image
//!    GUID, or `MF0;<chassis>:<model>/<slot>/U1` descriptions) become one logical switch, so
//!    a chassis is one switch layer. A switch's level is its BFS distance from the hosts
//!    (leaf = 1: it has a host link).
//! 3. Tier 1: leaves joined when they share a host (multi-rail nodes), union-find.
//!    Tier k+1: the tier-k groups joined through the switches of level k+1 (and links among
//!    those switches), never through anything higher. Up to the top: stop when one group
//!    remains or no higher switch does. A group with no switch above it stays a root.
//!
//! Names: `<tierName>-<switch>`, the switch being the group's switch at that level whose
//! name sorts first (its description's host name, else its GUID), made a valid Kubernetes
//! name (lower case). Everything is sorted; nothing depends on hash-map order.

use std::collections::VecDeque;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use hyperplan_shared::{HyperNodeSpec, Member, MemberType, Selector};
use serde::Serialize;

use crate::error::FabricError;
use crate::guidmap::GuidMap;
use crate::ibnetdiscover::{IbFabric, NodeKind};
use crate::links::{DegradedLink, End, degraded_links};
use crate::names::{
    director_chassis, host_from_description, k8s_name, natural_key, switch_from_description, tier_name,
};
use crate::unionfind::UnionFind;

/// Where host names come from, in order of trust.
#[derive(Clone, Debug, Default)]
pub struct HostNames {
    /// Node and port GUIDs the agents report for their HCAs (the planner passes these).
    pub reported: GuidMap,
    /// A GUID → host map file (`--guid-map`).
    pub map_file: GuidMap,
}

/// Which source named a host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum NameSource {
    Reported,
    MapFile,
    Description,
}

/// A switch (or director chassis) as discovery saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SwitchInfo {
    /// Readable name: from the description, else the GUID in hex.
    pub name: String,
    /// GUIDs of its ASICs (one unless it is a director chassis), ascending.
    #[serde(serialize_with = "hex_guids")]
    pub guids: Vec<u64>,
    pub description: String,
    /// 1 = leaf (has host links), 2 = one hop further, …; `None` when no host is reachable.
    pub level: Option<u32>,
    /// The HyperNode this switch was grouped into at its level, if any.
    pub hypernode: Option<String>,
}

/// A CA that is a host's port.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostCa {
    pub host: String,
    pub source: NameSource,
    #[serde(serialize_with = "hex_guid")]
    pub guid: u64,
    pub description: String,
    /// Names of the switches its ports are linked to.
    pub switches: Vec<String>,
}

/// A host CA nothing names: listed so a person can add it to the GUID map.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnmappedCa {
    /// ibnetdiscover's name, `H-<guid>`.
    pub id: String,
    #[serde(serialize_with = "hex_guid")]
    pub guid: u64,
    #[serde(serialize_with = "hex_guids")]
    pub port_guids: Vec<u64>,
    pub description: String,
    pub switches: Vec<String>,
}

/// A CA that is part of a switch (SHARP aggregation node and the like), not a host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExcludedCa {
    pub id: String,
    pub description: String,
    pub reason: String,
}

/// Everything discovery found, HyperNodes first.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Discovery {
    /// Sorted by tier, then name; members sorted.
    #[serde(skip)]
    pub hypernodes: Vec<HyperNodeSpec>,
    pub switches: Vec<SwitchInfo>,
    pub hosts: Vec<HostCa>,
    pub unmapped: Vec<UnmappedCa>,
    pub excluded: Vec<ExcludedCa>,
    /// Links narrower or slower than their neighbours (see [`crate::links`]).
    pub degraded_links: Vec<DegradedLink>,
    pub warnings: Vec<String>,
}

impl Discovery {
    /// One line for people: switches by level, hosts and how they were named, what was
    /// left unnamed or left out, and the HyperNodes made. `hyperplan topology discover`
    /// prints it on stderr; the planner shows it for an ibnetdiscover source.
    pub fn summary(&self) -> String {
        let levels: Vec<String> = level_counts(self)
            .iter()
            .map(|(l, n)| format!("{n} at level {l}"))
            .collect();
        let mut by_source: BTreeMap<NameSource, usize> = BTreeMap::new();
        for h in &self.hosts {
            *by_source.entry(h.source).or_default() += 1;
        }
        let named: Vec<String> = by_source
            .iter()
            .map(|(s, n)| {
                let by = match s {
                    NameSource::Reported => "agents",
                    NameSource::MapFile => "the GUID map",
                    NameSource::Description => "descriptions",
                };
                format!("{n} named by {by}")
            })
            .collect();
        let links = match self.degraded_links.len() {
            0 => String::new(),
            n => format!("; {n} link(s) below their neighbours' rate"),
        };
        format!(
            "{} switches ({}), {} hosts on {} CAs ({}), {} unmapped CA(s), {} switch-internal CA(s) left out; \
             {} HyperNodes in {} tier(s){links}",
            self.switches.len(),
            if levels.is_empty() {
                "none reach a host".to_string()
            } else {
                levels.join(", ")
            },
            host_count(self),
            self.hosts.len(),
            if named.is_empty() {
                "none named".to_string()
            } else {
                named.join(", ")
            },
            self.unmapped.len(),
            self.excluded.len(),
            self.hypernodes.len(),
            self.hypernodes.iter().map(|h| h.tier).max().unwrap_or(0)
        )
    }
}

/// `H-0002c903000e0b72 "MT25208 InfiniHost Mellanox Technologies" on leaf-a09, leaf-a10`.
impl std::fmt::Display for UnmappedCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {:?} on {}", self.id, self.description, self.switches.join(", "))
    }
}

fn hex_guid<S: serde::Serializer>(g: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{g:#018x}"))
}

fn hex_guids<S: serde::Serializer>(g: &[u64], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(g.iter().map(|g| format!("{g:#018x}")))
}

/// What a CA turned out to be.
enum CaRole {
    Host(String, NameSource),
    Unmapped,
    Excluded(String),
}

/// A switch after chassis grouping.
struct Logical {
    asics: Vec<usize>,
    label: String,
    description: String,
}

/// A HyperNode being built: its level's switches and its members.
struct Group {
    switches: Vec<usize>,
    members: Vec<String>,
    name: String,
}

impl Group {
    /// A group to fill: its name is given later by [`name_groups`], once all of a tier is known.
    fn empty() -> Group {
        Group {
            switches: Vec::new(),
            members: Vec::new(),
            name: String::new(),
        }
    }

    /// The HyperNode of a named group: tier 1 holds nodes, higher tiers hold HyperNodes.
    fn to_spec(&self, tier: u32) -> HyperNodeSpec {
        let kind = if tier == 1 {
            MemberType::Node
        } else {
            MemberType::HyperNode
        };
        HyperNodeSpec {
            name: self.name.clone(),
            tier,
            tier_name: Some(tier_name(tier)),
            members: self
                .members
                .iter()
                .map(|m| Member {
                    kind,
                    selector: Selector::Exact { name: m.clone() },
                })
                .collect(),
        }
    }
}

/// Builds HyperNodes (every tier) from a parsed dump. Fails only when there is no switch.
///
/// The steps below run in the order of the module header; each pushes its warnings in turn,
/// so the warnings keep the order people have seen so far.
pub fn discover(fabric: &IbFabric, names: &HostNames) -> Result<Discovery, FabricError> {
    if fabric.switch_count() == 0 {
        return Err(FabricError::NoSwitches {
            path: fabric.path.clone(),
            cas: fabric.ca_count(),
        });
    }
    let mut warnings = fabric.warnings.clone();
    let roles = classify_cas(fabric, names, &mut warnings);
    let graph = SwitchGraph::build(fabric, &roles);
    warn_lateral_leaves(&graph, &mut warnings);
    let leaves = leaf_groups(fabric, &roles, &graph, &mut warnings);
    let (hypernodes, switch_group) = build_tiers(leaves, &graph, &mut warnings);
    let switches = switch_reports(fabric, &graph, &switch_group, &mut warnings);
    let end = |i: usize| -> Option<End> {
        let n = &fabric.nodes[i];
        match (n.kind, &roles[i]) {
            (NodeKind::Switch, _) => {
                let li = *graph.logical_of.get(i)?;
                Some(End {
                    switch: Some(li),
                    level: graph.level.get(li).copied().flatten()?,
                    label: graph.logical[li].label.clone(),
                })
            }
            (NodeKind::Ca, Some(CaRole::Host(host, _))) => Some(End {
                switch: None,
                level: 0,
                // `gpu017 mlx5_0` names its host; a generic one (`MT25408 ConnectX
                // Mellanox Technologies`, the host named by the GUID map) gets it added.
                label: if n.description.is_empty() {
                    host.clone()
                } else if n.description.contains(host.as_str()) {
                    n.description.clone()
                } else {
                    format!("{host} ({})", n.description)
                },
            }),
            _ => None,
        }
    };
    let degraded_links = degraded_links(fabric, end, &switch_group);
    let (hosts, unmapped, excluded) = ca_reports(fabric, roles, &graph);
    Ok(Discovery {
        hypernodes,
        switches,
        hosts,
        unmapped,
        excluded,
        degraded_links,
        warnings,
    })
}

/// Step 1: what each node is as far as hosts go (`None` for switches and routers), decided
/// before any grouping because only host and unmapped CAs seed the switch levels. Routers are
/// not hosts and get a warning so they do not vanish silently.
fn classify_cas(fabric: &IbFabric, names: &HostNames, warnings: &mut Vec<String>) -> Vec<Option<CaRole>> {
    let nodes = &fabric.nodes;
    let switch_images: HashMap<u64, usize> = nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.kind == NodeKind::Switch)
        .filter_map(|(i, n)| n.sysimgguid.map(|g| (g, i)))
        .collect();
    let mut roles: Vec<Option<CaRole>> = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.iter().enumerate() {
        let role = match n.kind {
            NodeKind::Switch => None,
            NodeKind::Router => {
                warnings.push(format!(
                    "router {} ({:?}) is not a host; ignored",
                    n.id(),
                    n.description
                ));
                None
            }
            NodeKind::Ca => Some(ca_role(fabric, i, names, &switch_images)),
        };
        roles.push(role);
    }
    roles
}

/// Step 2: the logical switches (chassis grouped), how they are cabled to each other and to
/// the CAs, and each one's level. Every later step works on logical switches, never on ASICs,
/// so a director chassis counts as one switch layer.
struct SwitchGraph {
    logical: Vec<Logical>,
    /// Per node of the dump: its logical switch (`usize::MAX` for non-switches).
    logical_of: Vec<usize>,
    /// Per logical switch: the other logical switches cabled to it, sorted.
    adj: Vec<Vec<usize>>,
    /// Per node (filled for CAs only): the logical switches its ports are linked to, sorted.
    ca_switches: Vec<Vec<usize>>,
    /// Per logical switch: BFS distance from the hosts (leaf = 1), `None` when unreachable.
    level: Vec<Option<u32>>,
}

impl SwitchGraph {
    fn build(fabric: &IbFabric, roles: &[Option<CaRole>]) -> SwitchGraph {
        let nodes = &fabric.nodes;
        let node_adj = node_adjacency(fabric);
        let (logical, logical_of) = group_chassis(fabric);
        let mut adj: Vec<Vec<usize>> = vec![Vec::new(); logical.len()];
        let mut ca_switches: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        for (i, n) in nodes.iter().enumerate() {
            match n.kind {
                NodeKind::Switch => {
                    let li = logical_of[i];
                    for &j in &node_adj[i] {
                        if nodes[j].kind == NodeKind::Switch && logical_of[j] != li {
                            adj[li].push(logical_of[j]);
                        }
                    }
                }
                NodeKind::Ca => {
                    for &j in &node_adj[i] {
                        if nodes[j].kind == NodeKind::Switch {
                            ca_switches[i].push(logical_of[j]);
                        }
                    }
                    ca_switches[i].sort_unstable();
                    ca_switches[i].dedup();
                }
                NodeKind::Router => {}
            }
        }
        for a in &mut adj {
            a.sort_unstable();
            a.dedup();
        }
        let level = switch_levels(roles, &adj, &ca_switches);
        SwitchGraph {
            logical,
            logical_of,
            adj,
            ca_switches,
            level,
        }
    }

    /// The readable names of the switches a CA's ports are linked to, for the reports.
    fn ca_switch_names(&self, ca: usize) -> Vec<String> {
        self.ca_switches[ca]
            .iter()
            .map(|&s| self.logical[s].label.clone())
            .collect()
    }
}

/// Node adjacency with self-loops and duplicate cables dropped: parallel links between two
/// switches say nothing more about the tree.
fn node_adjacency(fabric: &IbFabric) -> Vec<Vec<usize>> {
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); fabric.nodes.len()];
    for l in &fabric.links {
        if l.a != l.b {
            adj[l.a].push(l.b);
            adj[l.b].push(l.a);
        }
    }
    for a in &mut adj {
        a.sort_unstable();
        a.dedup();
    }
    adj
}

/// Levels by BFS over logical switches, starting at those linked to host or unmapped CAs:
/// the distance from the hosts is what makes a switch a leaf, a spine or a core, whatever
/// its model or name says. Excluded (switch-internal) CAs do not make a switch a leaf.
fn switch_levels(roles: &[Option<CaRole>], switch_adj: &[Vec<usize>], ca_switches: &[Vec<usize>]) -> Vec<Option<u32>> {
    let mut level: Vec<Option<u32>> = vec![None; switch_adj.len()];
    let mut queue = VecDeque::new();
    for (i, role) in roles.iter().enumerate() {
        if matches!(role, Some(CaRole::Host(..) | CaRole::Unmapped)) {
            for &s in &ca_switches[i] {
                if level[s].is_none() {
                    level[s] = Some(1);
                    queue.push_back(s);
                }
            }
        }
    }
    while let Some(s) = queue.pop_front() {
        let next = level[s].map(|l| l + 1);
        for &t in &switch_adj[s] {
            if level[t].is_none() {
                level[t] = next;
                queue.push_back(t);
            }
        }
    }
    level
}

/// A leaf cabled to several other leaves is likely a spine with a management host on it,
/// which flattens the tree (its leaves then have nothing above them): say so, since the
/// missing tiers would otherwise go unexplained.
fn warn_lateral_leaves(graph: &SwitchGraph, warnings: &mut Vec<String>) {
    let level = &graph.level;
    for (s, l) in level.iter().enumerate() {
        let lateral = graph.adj[s].iter().filter(|&&t| level[t] == Some(1)).count();
        if *l == Some(1) && lateral >= 2 {
            warnings.push(format!(
                "switch {} has host links and links to {lateral} other leaf switches: if it is a spine with a \
                 management host on it, tiers above the leaves will be missing",
                graph.logical[s].label
            ));
        }
    }
}

/// Step 3, tier 1: leaves joined (union-find) when they share a host, so a multi-rail node
/// lands in exactly one tier-1 HyperNode. Hosts whose CA has no switch and leaves with only
/// unmapped CAs are warned about: both leave a node out of the tree.
fn leaf_groups(
    fabric: &IbFabric,
    roles: &[Option<CaRole>],
    graph: &SwitchGraph,
    warnings: &mut Vec<String>,
) -> Vec<Group> {
    let mut host_leaves: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, role) in roles.iter().enumerate() {
        if let Some(CaRole::Host(host, _)) = role {
            let ca_switches = &graph.ca_switches[i];
            let leaves = host_leaves.entry(host.as_str()).or_default();
            leaves.extend(ca_switches.iter().copied());
            if ca_switches.is_empty() {
                warnings.push(format!(
                    "host {host}: CA {} has no link to a switch; it is in no HyperNode through this CA",
                    fabric.nodes[i].id()
                ));
            }
        }
    }
    let mut uf = UnionFind::new(graph.logical.len());
    for leaves in host_leaves.values() {
        for w in leaves.windows(2) {
            uf.union(w[0], w[1]);
        }
    }
    let mut by_root: BTreeMap<usize, Group> = BTreeMap::new();
    for (host, leaves) in &host_leaves {
        if let Some(&first) = leaves.first() {
            let g = by_root.entry(uf.find(first)).or_insert_with(Group::empty);
            g.members.push((*host).to_string());
            g.switches.extend(leaves.iter().copied());
        }
    }
    let groups: Vec<Group> = by_root.into_values().collect();
    let mut grouped = vec![false; graph.logical.len()];
    for g in &groups {
        for &s in &g.switches {
            grouped[s] = true;
        }
    }
    for (s, l) in graph.level.iter().enumerate() {
        if *l == Some(1) && !grouped[s] {
            warnings.push(format!(
                "leaf switch {} has only unmapped CAs: it gets no HyperNode (add its hosts to the GUID map)",
                graph.logical[s].label
            ));
        }
    }
    groups
}

/// Step 3, every tier: names the groups of a tier, emits them as HyperNodes, and climbs one
/// level with [`next_tier`] until one group is left or nothing is above. Returns the
/// HyperNodes sorted by tier then name, and per logical switch the HyperNode it was grouped
/// into at its own level (for the switch report).
fn build_tiers(
    leaves: Vec<Group>,
    graph: &SwitchGraph,
    warnings: &mut Vec<String>,
) -> (Vec<HyperNodeSpec>, Vec<Option<String>>) {
    let mut groups = leaves;
    let mut used_names: BTreeSet<String> = BTreeSet::new();
    let mut hypernodes: Vec<HyperNodeSpec> = Vec::new();
    let mut switch_group: Vec<Option<String>> = vec![None; graph.logical.len()];
    let mut tier = 1u32;
    loop {
        name_groups(&mut groups, tier, &graph.logical, &mut used_names);
        for g in &groups {
            for &s in &g.switches {
                if graph.level[s] == Some(tier) {
                    switch_group[s] = Some(g.name.clone());
                }
            }
        }
        hypernodes.extend(groups.iter().map(|g| g.to_spec(tier)));
        if groups.len() <= 1 {
            break;
        }
        let Some(next) = next_tier(&groups, tier, &graph.level, &graph.adj, warnings) else {
            break;
        };
        groups = next;
        tier += 1;
    }
    hypernodes.sort_by(|a, b| a.tier.cmp(&b.tier).then_with(|| a.name.cmp(&b.name)));
    (hypernodes, switch_group)
}

/// The switch report, sorted by level then name so it reads top-down and does not depend on
/// the dump's order; switches no host reaches are warned about, as they are in no HyperNode.
fn switch_reports(
    fabric: &IbFabric,
    graph: &SwitchGraph,
    switch_group: &[Option<String>],
    warnings: &mut Vec<String>,
) -> Vec<SwitchInfo> {
    let mut switches: Vec<SwitchInfo> = graph
        .logical
        .iter()
        .enumerate()
        .map(|(i, l)| SwitchInfo {
            name: l.label.clone(),
            guids: {
                let mut g: Vec<u64> = l.asics.iter().map(|&a| fabric.nodes[a].guid).collect();
                g.sort_unstable();
                g
            },
            description: l.description.clone(),
            level: graph.level[i],
            hypernode: switch_group[i].clone(),
        })
        .collect();
    switches.sort_by(|a, b| {
        a.level
            .cmp(&b.level)
            .then_with(|| a.name.cmp(&b.name))
            .then(a.guids.cmp(&b.guids))
    });
    for s in &switches {
        if s.level.is_none() {
            warnings.push(format!(
                "switch {} ({:?}) has no path to any host; it is in no HyperNode",
                s.name, s.description
            ));
        }
    }
    switches
}

/// The CA reports: named hosts (in natural host order), unmapped CAs (by GUID, so a person
/// can add them to the GUID map) and the switch-internal CAs left out, with the reason.
fn ca_reports(
    fabric: &IbFabric,
    roles: Vec<Option<CaRole>>,
    graph: &SwitchGraph,
) -> (Vec<HostCa>, Vec<UnmappedCa>, Vec<ExcludedCa>) {
    let mut hosts = Vec::new();
    let mut unmapped = Vec::new();
    let mut excluded = Vec::new();
    for (i, role) in roles.into_iter().enumerate() {
        let n = &fabric.nodes[i];
        match role {
            Some(CaRole::Host(host, source)) => hosts.push(HostCa {
                host,
                source,
                guid: n.guid,
                description: n.description.clone(),
                switches: graph.ca_switch_names(i),
            }),
            Some(CaRole::Unmapped) => unmapped.push(UnmappedCa {
                id: n.id(),
                guid: n.guid,
                port_guids: n.port_guids.clone(),
                description: n.description.clone(),
                switches: graph.ca_switch_names(i),
            }),
            Some(CaRole::Excluded(reason)) => excluded.push(ExcludedCa {
                id: n.id(),
                description: n.description.clone(),
                reason,
            }),
            None => {}
        }
    }
    hosts.sort_by(|a, b| {
        natural_key(&a.host)
            .cmp(&natural_key(&b.host))
            .then(a.guid.cmp(&b.guid))
    });
    unmapped.sort_by_key(|u| u.guid);
    excluded.sort_by(|a, b| a.id.cmp(&b.id));
    (hosts, unmapped, excluded)
}

/// Parses a dump and builds its HyperNodes: [`crate::parse_ibnetdiscover`] then [`discover`].
pub fn discover_text(text: &str, path: &std::path::Path, names: &HostNames) -> Result<Discovery, FabricError> {
    discover(&crate::ibnetdiscover::parse_ibnetdiscover(text, path)?, names)
}

fn ca_role(fabric: &IbFabric, i: usize, names: &HostNames, switch_images: &HashMap<u64, usize>) -> CaRole {
    let n = &fabric.nodes[i];
    if n.description.to_ascii_lowercase().contains("aggregation node") {
        return CaRole::Excluded("SHARP aggregation node (inside a switch)".to_string());
    }
    if let Some(img) = n.sysimgguid
        && let Some(&s) = switch_images.get(&img)
    {
        return CaRole::Excluded(format!(
            "shares its system image GUID with switch {} (a switch-internal CA)",
            fabric.nodes[s].id()
        ));
    }
    let guids = std::iter::once(n.guid).chain(n.port_guids.iter().copied());
    for (map, source) in [
        (&names.reported, NameSource::Reported),
        (&names.map_file, NameSource::MapFile),
    ] {
        if let Some(host) = guids.clone().find_map(|g| map.get(g)) {
            return CaRole::Host(host.to_string(), source);
        }
    }
    match host_from_description(&n.description) {
        Some(host) => CaRole::Host(host, NameSource::Description),
        None => CaRole::Unmapped,
    }
}

/// Groups switch ASICs into logical switches: same `-g` chassis number, same system image
/// GUID shared by several switches, or director descriptions naming the same chassis.
/// Returns the logical switches (ordered by their first ASIC in the file) and, per node,
/// its logical switch (`usize::MAX` for non-switches).
fn group_chassis(fabric: &IbFabric) -> (Vec<Logical>, Vec<usize>) {
    let nodes = &fabric.nodes;
    let switches: Vec<usize> = (0..nodes.len())
        .filter(|&i| nodes[i].kind == NodeKind::Switch)
        .collect();
    let mut image_count: HashMap<u64, usize> = HashMap::new();
    let mut chassis_count: HashMap<String, usize> = HashMap::new();
    for &i in &switches {
        if let Some(g) = nodes[i].sysimgguid {
            *image_count.entry(g).or_default() += 1;
        }
        if let Some(c) = director_chassis(&nodes[i].description) {
            *chassis_count.entry(c).or_default() += 1;
        }
    }
    #[derive(PartialEq, Eq, Hash)]
    enum Key {
        Chassis(u32),
        Image(u64),
        Director(String),
        Alone(usize),
    }
    let mut by_key: HashMap<Key, usize> = HashMap::new();
    let mut logical: Vec<Logical> = Vec::new();
    let mut logical_of = vec![usize::MAX; nodes.len()];
    for &i in &switches {
        let n = &nodes[i];
        let director = director_chassis(&n.description).filter(|c| chassis_count.get(c).is_some_and(|&k| k > 1));
        let key = if let Some(c) = n.chassis {
            Key::Chassis(c)
        } else if let Some(g) = n.sysimgguid.filter(|g| image_count.get(g).is_some_and(|&k| k > 1)) {
            Key::Image(g)
        } else if let Some(d) = director {
            Key::Director(d)
        } else {
            Key::Alone(i)
        };
        let li = *by_key.entry(key).or_insert_with(|| {
            logical.push(Logical {
                asics: Vec::new(),
                label: String::new(),
                description: n.description.clone(),
            });
            logical.len() - 1
        });
        logical[li].asics.push(i);
        logical_of[i] = li;
    }
    for l in &mut logical {
        let mut names: Vec<String> = l
            .asics
            .iter()
            .filter_map(|&a| {
                director_chassis(&nodes[a].description).or_else(|| switch_from_description(&nodes[a].description))
            })
            .collect();
        names.sort();
        let min_guid = l.asics.iter().map(|&a| nodes[a].guid).min().unwrap_or(0);
        l.label = names.into_iter().next().unwrap_or_else(|| format!("{min_guid:016x}"));
    }
    (logical, logical_of)
}

/// Orders groups by their representative switch and gives each a unique name.
fn name_groups(groups: &mut [Group], tier: u32, logical: &[Logical], used: &mut BTreeSet<String>) {
    let tname = tier_name(tier);
    let label_of = |g: &Group| -> String {
        g.switches
            .iter()
            .map(|&s| logical[s].label.as_str())
            .min()
            .unwrap_or("group")
            .to_string()
    };
    for g in groups.iter_mut() {
        g.switches.sort_unstable();
        g.switches.dedup();
        g.members.sort_by(|a, b| natural_key(a).cmp(&natural_key(b)));
        g.members.dedup();
    }
    groups.sort_by_cached_key(|g| (label_of(g), g.switches.clone()));
    for g in groups.iter_mut() {
        let base = k8s_name(&format!("{tname}-{}", label_of(g)));
        let mut name = base.clone();
        let mut n = 2;
        while used.contains(&name) {
            name = format!("{base}-{n}");
            n += 1;
        }
        used.insert(name.clone());
        g.name = name;
    }
}

/// Tier k+1 from tier k: union-find over tier-k groups and level-(k+1) switches.
/// `None` when no tier-k group has a switch above it.
fn next_tier(
    groups: &[Group],
    tier: u32,
    level: &[Option<u32>],
    switch_adj: &[Vec<usize>],
    warnings: &mut Vec<String>,
) -> Option<Vec<Group>> {
    let up_level = Some(tier + 1);
    // Dense maps from logical switch to its tier-k group and to its index among the uppers.
    let mut group_of: Vec<Option<usize>> = vec![None; level.len()];
    for (gi, g) in groups.iter().enumerate() {
        for &s in &g.switches {
            if level[s] == Some(tier) {
                group_of[s] = Some(gi);
            }
        }
    }
    let uppers: Vec<usize> = (0..level.len()).filter(|&s| level[s] == up_level).collect();
    if uppers.is_empty() {
        return None;
    }
    let mut upper_index: Vec<Option<usize>> = vec![None; level.len()];
    for (i, &s) in uppers.iter().enumerate() {
        upper_index[s] = Some(i);
    }
    // Items: 0..groups.len() are groups, then the upper switches.
    let base = groups.len();
    let mut uf = UnionFind::new(base + uppers.len());
    for (ui, &u) in uppers.iter().enumerate() {
        for &v in &switch_adj[u] {
            if let Some(gi) = group_of[v] {
                uf.union(base + ui, gi);
            } else if let Some(vi) = upper_index[v] {
                uf.union(base + ui, base + vi);
            }
        }
    }
    let mut has_upper = vec![false; base + uppers.len()];
    for ui in base..base + uppers.len() {
        let root = uf.find(ui);
        has_upper[root] = true;
    }
    let mut by_root: BTreeMap<usize, Group> = BTreeMap::new();
    for (gi, g) in groups.iter().enumerate() {
        let root = uf.find(gi);
        if !has_upper[root] {
            warnings.push(format!(
                "{} has no switch above it at level {}; it stays a top HyperNode",
                g.name,
                tier + 1
            ));
            continue;
        }
        by_root
            .entry(root)
            .or_insert_with(Group::empty)
            .members
            .push(g.name.clone());
    }
    if by_root.is_empty() {
        return None;
    }
    for (ui, &u) in uppers.iter().enumerate() {
        if let Some(g) = by_root.get_mut(&uf.find(base + ui)) {
            g.switches.push(u);
        }
    }
    Some(by_root.into_values().collect())
}

/// Counts used in summaries: hosts, switches per level.
pub fn level_counts(d: &Discovery) -> BTreeMap<u32, usize> {
    let mut m = BTreeMap::new();
    for s in &d.switches {
        if let Some(l) = s.level {
            *m.entry(l).or_insert(0) += 1;
        }
    }
    m
}

/// Distinct host names found.
pub fn host_count(d: &Discovery) -> usize {
    d.hosts.iter().map(|h| h.host.as_str()).collect::<HashSet<_>>().len()
}
