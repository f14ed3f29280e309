//! UFM port records → HyperNodes, with no I/O: Volcano's leaf grouping for tier 1, upper
//! tiers from switch-to-switch records when the response has them, else Volcano's single
//! spine.
//!
//! Volcano's rule (volcano-semantics §7.2): records whose `description` contains
//! "Computer" link a host (`system_name`) to its leaf switch (`peer_node_name`). Leaves
//! sorted by name; each connected component of the leaf–host graph, found by BFS from
//! each unvisited leaf in that order, is `leaf-hn-<i>` (tier 1, hosts sorted). Then one
//! `spine-hn` (tier 2) over every `leaf-hn-*`, sorted as strings (`leaf-hn-10` before
//! `leaf-hn-2`).
//!
//! hyperplan's addition: records between two switches give the switch graph. A switch is
//! a leaf or the `system_name` of a record that is not "Computer", and not a host; a
//! record counts when both its `system_name` and `peer_node_name` are switches.
//! Switches are layered by hop distance from the leaves; tier k+1 groups the tier-k
//! HyperNodes that are connected through the next layer of switches. A tier that ends in
//! one HyperNode is the top. Names: `spine-hn` / `core-hn` / `tier<k>-hn` when a tier has
//! one HyperNode (so a two-layer fat tree gives exactly Volcano's result), else with
//! `-<i>` appended, ordered by their first child.
//!
//! UFM's own `tier` field is ignored, as Volcano does. Any field may be missing, null,
//! empty or `"N/A"`: such records are skipped and counted in a [`Warning`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

use hyperplan_shared::ibrate::IbRate;
use hyperplan_shared::{HyperNodeSpec, Member, MemberType, Selector};
use serde_json::Value;

use crate::links::{Candidate, DegradedLink, judge};

/// What the grouping found: the HyperNodes (tier, then index order) and why records
/// were left out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UfmTopology {
    pub hypernodes: Vec<HyperNodeSpec>,
    /// One entry per reason, with how many records it covers.
    pub warnings: Vec<Warning>,
    /// Port records in the response.
    pub records: usize,
    /// Host ("Computer") port records used for tier 1.
    pub host_links: usize,
    /// Distinct switch-to-switch links used for the upper tiers.
    pub switch_links: usize,
    /// Links whose `active_width`/`active_speed` fall below their neighbours' (see
    /// [`crate::links`]), each against the HyperNode holding both its ends.
    pub degraded_links: Vec<DegradedLink>,
}

/// Records skipped for one reason. Aggregated so that a fabric with thousands of
/// unconnected ports gives one line, not thousands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    pub reason: String,
    pub count: usize,
    /// Index (0-based) of the first such record in the response array.
    pub first_record: usize,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "UFM: skipped {} port record{} {} (first at index {})",
            self.count,
            if self.count == 1 { "" } else { "s" },
            self.reason,
            self.first_record
        )
    }
}

/// `tierName` per tier; the same words the ibnetdiscover source uses.
fn tier_name(tier: u32) -> String {
    match tier {
        1 => "leaf".to_string(),
        2 => "spine".to_string(),
        3 => "core".to_string(),
        k => format!("tier{k}"),
    }
}

/// Name stem of the tier's HyperNodes (`leaf-hn`, `spine-hn`, …), Volcano's for 1 and 2.
fn name_stem(tier: u32) -> String {
    format!("{}-hn", tier_name(tier))
}

/// A string field that carries a value: present, a string, not blank and not "N/A".
/// Numbers are not names; they count as unusable too.
fn text<'a>(record: &'a serde_json::Map<String, Value>, key: &str) -> Option<&'a str> {
    match record.get(key) {
        Some(Value::String(s)) => {
            let s = s.trim();
            (!s.is_empty() && !s.eq_ignore_ascii_case("N/A")).then_some(s)
        }
        _ => None,
    }
}

#[derive(Default)]
struct Warnings(BTreeMap<&'static str, (usize, usize)>);

impl Warnings {
    fn add(&mut self, reason: &'static str, index: usize) {
        let e = self.0.entry(reason).or_insert((0, index));
        e.0 += 1;
    }

    fn into_vec(self) -> Vec<Warning> {
        let mut v: Vec<Warning> = self
            .0
            .into_iter()
            .map(|(reason, (count, first_record))| Warning {
                reason: reason.to_string(),
                count,
                first_record,
            })
            .collect();
        v.sort_by_key(|w| w.first_record);
        v
    }
}

/// Parsed `GET /ufmRest/resources/ports` body → HyperNodes. Never fails: records it
/// cannot use become warnings. A body that is not an array is the caller's error to
/// report (see `UfmError::NotPortList`); here it yields no HyperNodes and a warning.
pub fn group_ports(body: &Value) -> UfmTopology {
    let mut warnings = Warnings::default();
    let Some(records) = body.as_array() else {
        warnings.add("because the response is not a JSON array of port records", 0);
        return UfmTopology {
            warnings: warnings.into_vec(),
            ..UfmTopology::default()
        };
    };

    // leaf → hosts and host → leaves, from "Computer" records.
    let mut leaf_hosts: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut host_leaves: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    // Candidate switch-to-switch pairs; filtered once all hosts are known.
    let mut other_links: Vec<(&str, &str)> = Vec::new();
    let mut host_links = 0;

    for (i, rec) in records.iter().enumerate() {
        let Some(rec) = rec.as_object() else {
            warnings.add("that are not JSON objects", i);
            continue;
        };
        let Some(description) = text(rec, "description") else {
            warnings.add("with a missing, null or \"N/A\" description", i);
            continue;
        };
        let system = text(rec, "system_name");
        let peer = text(rec, "peer_node_name");
        if description.contains("Computer") {
            match (system, peer) {
                (Some(host), Some(leaf)) => {
                    host_links += 1;
                    leaf_hosts.entry(leaf).or_default().insert(host);
                    host_leaves.entry(host).or_default().insert(leaf);
                }
                (None, _) => warnings.add("of hosts (\"Computer\") with a missing, null or \"N/A\" system_name", i),
                (_, None) => warnings.add(
                    "of hosts (\"Computer\") with a missing, null or \"N/A\" peer_node_name",
                    i,
                ),
            }
        } else {
            match (system, peer) {
                (Some(a), Some(b)) if a != b => other_links.push((a, b)),
                (Some(_), Some(_)) => warnings.add("linking a switch to itself", i),
                _ => warnings.add(
                    "of switch ports with no peer (system_name or peer_node_name missing, null or \"N/A\")",
                    i,
                ),
            }
        }
    }

    let leaf_groups = leaf_components(&leaf_hosts, &host_leaves);
    let mut hypernodes: Vec<HyperNodeSpec> = leaf_groups
        .iter()
        .enumerate()
        .map(|(i, g)| spec(format!("{}-{i}", name_stem(1)), 1, MemberType::Node, g.hosts.iter()))
        .collect();

    // Switch graph between switches only. A switch is a leaf or the `system_name` of a
    // non-host record; the far end of a switch port must be one too. The switch side of a
    // host link may name the host differently (its node description, say), so "not a
    // known host" is not enough: such a peer would become a fake upper switch.
    let switches: BTreeSet<&str> = other_links
        .iter()
        .map(|&(a, _)| a)
        .chain(leaf_hosts.keys().copied())
        .filter(|s| !host_leaves.contains_key(s))
        .collect();
    let mut adjacency: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for &(a, b) in &other_links {
        if switches.contains(a) && switches.contains(b) {
            adjacency.entry(a).or_default().insert(b);
            adjacency.entry(b).or_default().insert(a);
        }
    }
    let switch_links = adjacency.values().map(BTreeSet::len).sum::<usize>() / 2;
    let leaves_have_uplinks = leaf_hosts.keys().any(|l| adjacency.contains_key(l));

    // Each switch's layer (leaves 1) and the HyperNode it was grouped into there.
    let mut placed: BTreeMap<&str, (u32, String)> = BTreeMap::new();
    for (g, h) in leaf_groups.iter().zip(&hypernodes) {
        for &leaf in &g.leaves {
            placed.insert(leaf, (1, h.name.clone()));
        }
    }
    if !leaf_groups.is_empty() {
        if leaves_have_uplinks {
            let names: Vec<String> = hypernodes.iter().map(|h| h.name.clone()).collect();
            let frontiers: Vec<BTreeSet<&str>> = leaf_groups.iter().map(|g| g.leaves.clone()).collect();
            upper_tiers(&adjacency, names, frontiers, &mut hypernodes, &mut placed);
        } else {
            // Volcano: one spine over all leaf groups.
            let names: Vec<String> = hypernodes.iter().map(|h| h.name.clone()).collect();
            hypernodes.push(spec(name_stem(2), 2, MemberType::HyperNode, names.iter()));
        }
    }

    let degraded_links = judge(link_candidates(records, &placed));
    tracing::debug!(
        records = records.len(),
        host_links,
        switch_links,
        hypernodes = hypernodes.len(),
        "UFM ports grouped"
    );
    UfmTopology {
        hypernodes,
        warnings: warnings.into_vec(),
        records: records.len(),
        host_links,
        switch_links,
        degraded_links,
    }
}

/// The records of links between adjacent layers (a host's port and its leaf, a switch
/// and one a layer above, from the lower end's record only: UFM lists each switch link
/// from both ends) that give `active_width` and `active_speed`, for [`judge`].
fn link_candidates(records: &[Value], placed: &BTreeMap<&str, (u32, String)>) -> Vec<Candidate> {
    let index: BTreeMap<&str, usize> = placed.keys().enumerate().map(|(i, &s)| (s, i)).collect();
    let mut out = Vec::new();
    for (i, rec) in records.iter().enumerate() {
        let Some(rec) = rec.as_object() else { continue };
        let (Some(description), Some(system), Some(peer)) = (
            text(rec, "description"),
            text(rec, "system_name"),
            text(rec, "peer_node_name"),
        ) else {
            continue;
        };
        let (Some(width), Some(speed)) = (text(rec, "active_width"), text(rec, "active_speed")) else {
            continue;
        };
        let Some(rate) = IbRate::parse(&format!("{width}{speed}")) else {
            continue;
        };
        let (Some(&up), Some((up_layer, hypernode))) = (index.get(peer), placed.get(peer)) else {
            continue;
        };
        let lower_level = if description.contains("Computer") {
            0
        } else {
            match placed.get(system) {
                Some((layer, _)) if layer + 1 == *up_layer => *layer,
                _ => continue,
            }
        };
        if lower_level == 0 && *up_layer != 1 {
            continue;
        }
        let port = |name: &str, key: &str| match text(rec, key) {
            Some(p) => format!("{name} port {p}"),
            None => name.to_string(),
        };
        out.push(Candidate {
            upper_switch: up,
            lower_level,
            rate,
            lower: port(system, "dname"),
            upper: port(peer, "peer_port_dname"),
            hypernode: hypernode.clone(),
            at: format!("record {i}"),
        });
    }
    out
}

struct LeafGroup<'a> {
    leaves: BTreeSet<&'a str>,
    hosts: BTreeSet<&'a str>,
}

/// Volcano's tier-1 components: BFS over leaf → host → leaf from each unvisited leaf,
/// leaves in sorted order, so group `i` is the one holding the i-th smallest "first" leaf.
fn leaf_components<'a>(
    leaf_hosts: &BTreeMap<&'a str, BTreeSet<&'a str>>,
    host_leaves: &BTreeMap<&'a str, BTreeSet<&'a str>>,
) -> Vec<LeafGroup<'a>> {
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut groups = Vec::new();
    for &start in leaf_hosts.keys() {
        if !seen.insert(start) {
            continue;
        }
        let mut group = LeafGroup {
            leaves: BTreeSet::new(),
            hosts: BTreeSet::new(),
        };
        let mut queue = VecDeque::from([start]);
        while let Some(leaf) = queue.pop_front() {
            group.leaves.insert(leaf);
            for &host in leaf_hosts.get(leaf).into_iter().flatten() {
                if !group.hosts.insert(host) {
                    continue;
                }
                for &next in host_leaves.get(host).into_iter().flatten() {
                    if seen.insert(next) {
                        queue.push_back(next);
                    }
                }
            }
        }
        groups.push(group);
    }
    groups
}

/// Tiers 2 and up (each upper switch's layer and HyperNode go in `placed`).
/// `frontier[i]` = the switches of tier-k HyperNode `names[i]` that
/// face up (its leaves for tier 1, its layer-k switches above). Layer k+1 = switches not
/// yet layered that are adjacent to layer k. A component of (tier-k HyperNodes + layer
/// k+1 switches) holding at least one switch becomes a tier k+1 HyperNode; a HyperNode
/// with no switch above it stays a root. Stops when a tier has one HyperNode or no
/// switch is left above.
fn upper_tiers<'a>(
    adjacency: &BTreeMap<&'a str, BTreeSet<&'a str>>,
    mut names: Vec<String>,
    mut frontiers: Vec<BTreeSet<&'a str>>,
    out: &mut Vec<HyperNodeSpec>,
    placed: &mut BTreeMap<&'a str, (u32, String)>,
) {
    let mut layered: BTreeSet<&str> = frontiers.iter().flatten().copied().collect();
    let mut tier: u32 = 1;
    while names.len() > 1 {
        // Next layer, and which HyperNodes touch each of its switches.
        let mut above: BTreeMap<&str, BTreeSet<usize>> = BTreeMap::new();
        for (i, frontier) in frontiers.iter().enumerate() {
            for &s in frontier {
                for &up in adjacency.get(s).into_iter().flatten() {
                    if !layered.contains(up) {
                        above.entry(up).or_default().insert(i);
                    }
                }
            }
        }
        if above.is_empty() {
            tracing::debug!(tier, roots = names.len(), "UFM switch graph ends below a single top");
            return;
        }
        layered.extend(above.keys().copied());

        // Union-find over child indices, joined through each upper switch.
        let mut parent: Vec<usize> = (0..names.len()).collect();
        fn find(parent: &mut [usize], mut x: usize) -> usize {
            while parent[x] != x {
                parent[x] = parent[parent[x]];
                x = parent[x];
            }
            x
        }
        for children in above.values() {
            let mut it = children.iter();
            if let Some(&first) = it.next() {
                for &c in it {
                    let (ra, rb) = (find(&mut parent, first), find(&mut parent, c));
                    if ra != rb {
                        parent[ra.max(rb)] = ra.min(rb);
                    }
                }
            }
        }
        // Components keyed by their smallest child index, so ordering follows tier k.
        let mut comps: BTreeMap<usize, (BTreeSet<usize>, BTreeSet<&str>)> = BTreeMap::new();
        for (&switch, children) in &above {
            if let Some(&c) = children.iter().next() {
                let root = find(&mut parent, c);
                let e = comps.entry(root).or_default();
                e.0.extend(children.iter().copied());
                e.1.insert(switch);
            }
        }

        tier += 1;
        let stem = name_stem(tier);
        let single = comps.len() == 1;
        let mut next_names = Vec::with_capacity(comps.len());
        let mut next_frontiers = Vec::with_capacity(comps.len());
        for (i, (children, switches)) in comps.into_values().enumerate() {
            let name = if single { stem.clone() } else { format!("{stem}-{i}") };
            out.push(spec(
                name.clone(),
                tier,
                MemberType::HyperNode,
                children.iter().map(|&c| &names[c]),
            ));
            for &s in &switches {
                placed.insert(s, (tier, name.clone()));
            }
            next_names.push(name);
            next_frontiers.push(switches);
        }
        names = next_names;
        frontiers = next_frontiers;
    }
}

/// A HyperNode with exact-match members, sorted as strings (Volcano's order).
fn spec<S: AsRef<str>>(name: String, tier: u32, kind: MemberType, members: impl Iterator<Item = S>) -> HyperNodeSpec {
    let sorted: BTreeSet<String> = members.map(|m| m.as_ref().to_string()).collect();
    HyperNodeSpec {
        name,
        tier,
        tier_name: Some(tier_name(tier)),
        members: sorted
            .into_iter()
            .map(|name| Member {
                kind,
                selector: Selector::Exact { name },
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use serde_json::json;

    fn host(h: &str, leaf: &str) -> Value {
        json!({"description": "Computer IB Port", "system_name": h, "peer_node_name": leaf})
    }

    fn link(a: &str, b: &str) -> Value {
        json!({"description": "Switch IB Port", "system_name": a, "peer_node_name": b})
    }

    fn members(h: &HyperNodeSpec) -> Vec<&str> {
        h.members
            .iter()
            .map(|m| match &m.selector {
                Selector::Exact { name } => name.as_str(),
                _ => panic!("not exact"),
            })
            .collect()
    }

    fn summary(t: &UfmTopology) -> Vec<(String, u32, Vec<&str>)> {
        t.hypernodes
            .iter()
            .map(|h| (h.name.clone(), h.tier, members(h)))
            .collect()
    }

    #[test]
    fn volcano_rule_joins_leaves_that_share_a_host_and_adds_one_spine() {
        let body = json!([
            host("n1", "leafB"),
            host("n1", "leafC"),
            host("n2", "leafC"),
            host("n3", "leafA"),
            host("n0", "leafA"),
        ]);
        let t = group_ports(&body);
        assert_eq!(
            summary(&t),
            vec![
                ("leaf-hn-0".into(), 1, vec!["n0", "n3"]),
                ("leaf-hn-1".into(), 1, vec!["n1", "n2"]),
                ("spine-hn".into(), 2, vec!["leaf-hn-0", "leaf-hn-1"]),
            ]
        );
        assert!(t.warnings.is_empty());
        assert_eq!(t.host_links, 5);
    }

    #[test]
    fn spine_members_sort_as_strings_like_volcano() {
        let body: Vec<Value> = (0..12)
            .map(|i| host(&format!("n{i:02}"), &format!("l{i:02}")))
            .collect();
        let t = group_ports(&Value::Array(body));
        let spine = t.hypernodes.last().unwrap();
        assert_eq!(spine.name, "spine-hn");
        let m = members(spine);
        assert_eq!(&m[..4], &["leaf-hn-0", "leaf-hn-1", "leaf-hn-10", "leaf-hn-11"]);
    }

    #[test]
    fn null_na_missing_and_non_string_fields_are_skipped_with_counted_warnings() {
        let body = json!([
            host("n0", "l0"),
            {"description": "Computer IB Port", "system_name": null, "peer_node_name": "l0"},
            {"description": "Computer IB Port", "system_name": "N/A", "peer_node_name": "l0"},
            {"description": "Computer IB Port", "system_name": "n9"},
            {"description": "Computer IB Port", "system_name": 7, "peer_node_name": "l0"},
            {"description": null, "system_name": "n1", "peer_node_name": "l0"},
            {"system_name": "n1", "peer_node_name": "l0"},
            {"description": "Switch IB Port", "system_name": "l0", "peer_node_name": "N/A"},
            42,
            null,
        ]);
        let t = group_ports(&body);
        assert_eq!(summary(&t)[0], ("leaf-hn-0".into(), 1, vec!["n0"]));
        let counts: Vec<(usize, usize)> = t.warnings.iter().map(|w| (w.first_record, w.count)).collect();
        assert_eq!(counts, vec![(1, 3), (3, 1), (5, 2), (7, 1), (8, 2)]);
        assert_eq!(t.warnings.iter().map(|w| w.count).sum::<usize>(), 9);
        assert!(t.warnings[0].to_string().contains("system_name"), "{}", t.warnings[0]);
    }

    #[test]
    fn not_an_array_gives_nothing_and_a_warning() {
        let t = group_ports(&json!({"error": "nope"}));
        assert!(t.hypernodes.is_empty());
        assert_eq!(t.warnings.len(), 1);
    }

    #[test]
    fn no_host_records_gives_no_spine() {
        let t = group_ports(&json!([link("s1", "s2")]));
        assert!(t.hypernodes.is_empty());
    }

    /// Two pods of two leaves each, each pod with its own spine pair, joined by cores.
    fn three_layer_fabric() -> Value {
        let mut v = Vec::new();
        for (leaf, h) in [("L0", "h0"), ("L1", "h1"), ("L2", "h2"), ("L3", "h3")] {
            v.push(host(h, leaf));
        }
        for (leaf, spines) in [
            ("L0", ["S0", "S1"]),
            ("L1", ["S0", "S1"]),
            ("L2", ["S2", "S3"]),
            ("L3", ["S2", "S3"]),
        ] {
            for s in spines {
                v.push(link(leaf, s));
                v.push(link(s, leaf)); // UFM lists both ends
            }
        }
        for s in ["S0", "S1", "S2", "S3"] {
            v.push(link(s, "C0"));
            v.push(link("C0", s));
        }
        // The switch side of a host link is not a switch-to-switch link.
        v.push(link("L0", "h0"));
        Value::Array(v)
    }

    #[test]
    fn switch_links_build_pods_then_a_core() {
        let t = group_ports(&three_layer_fabric());
        assert_eq!(
            summary(&t),
            vec![
                ("leaf-hn-0".into(), 1, vec!["h0"]),
                ("leaf-hn-1".into(), 1, vec!["h1"]),
                ("leaf-hn-2".into(), 1, vec!["h2"]),
                ("leaf-hn-3".into(), 1, vec!["h3"]),
                ("spine-hn-0".into(), 2, vec!["leaf-hn-0", "leaf-hn-1"]),
                ("spine-hn-1".into(), 2, vec!["leaf-hn-2", "leaf-hn-3"]),
                ("core-hn".into(), 3, vec!["spine-hn-0", "spine-hn-1"]),
            ]
        );
        assert_eq!(t.switch_links, 12);
        assert_eq!(t.hypernodes[6].tier_name.as_deref(), Some("core"));
    }

    /// Every record of `three_layer_fabric` at `4xHDR`, as UFM gives them, but for
    /// h1's port at `1xHDR` and L2's record of its link to S2 at EDR.
    #[test]
    fn links_below_their_neighbours_rate_count_against_their_hypernode() {
        let Value::Array(mut v) = three_layer_fabric() else {
            unreachable!()
        };
        for r in &mut v {
            let o = r.as_object_mut().unwrap();
            let (sys, peer) = (o["system_name"].clone(), o["peer_node_name"].clone());
            let slow = sys == "h1" || (sys == "L2" && peer == "S2");
            o.insert("active_width".into(), json!(if sys == "h1" { "1x" } else { "4x" }));
            o.insert(
                "active_speed".into(),
                json!(if slow && sys == "L2" { "EDR" } else { "HDR" }),
            );
            o.insert(
                "dname".into(),
                json!(if o["description"] == "Computer IB Port" {
                    "HCA-1/1"
                } else {
                    "3"
                }),
            );
            o.insert("peer_port_dname".into(), json!("7"));
        }
        // More hosts on L1, so its own host links say what they should be.
        for h in ["h1b", "h1c"] {
            v.push(
                json!({"description": "Computer IB Port", "system_name": h, "peer_node_name": "L1",
                "active_width": "4x", "active_speed": "HDR"}),
            );
        }
        let t = group_ports(&Value::Array(v));
        let said: Vec<String> = t
            .degraded_links
            .iter()
            .map(|l| format!("{}: {l}", l.hypernode))
            .collect();
        assert_eq!(
            said,
            [
                "leaf-hn-1: h1 port HCA-1/1 – L1 port 7: 1xHDR (expected 4xHDR), record 1",
                "spine-hn-1: L2 port 3 – S2 port 7: 4xEDR (expected 4xHDR), record 12",
            ]
        );
        // Without rates (Volcano's records), nothing is judged.
        assert!(group_ports(&three_layer_fabric()).degraded_links.is_empty());
    }

    #[test]
    fn full_two_layer_fat_tree_equals_volcano_spine() {
        let mut v = vec![host("a", "L0"), host("b", "L1")];
        for l in ["L0", "L1"] {
            for s in ["S0", "S1"] {
                v.push(link(l, s));
                v.push(link(s, l));
            }
        }
        let with_links = group_ports(&Value::Array(v));
        let without = group_ports(&json!([host("a", "L0"), host("b", "L1")]));
        assert_eq!(with_links.hypernodes, without.hypernodes);
        assert_eq!(with_links.switch_links, 4);
    }

    #[test]
    fn switch_side_of_host_links_under_other_names_is_not_an_uplink() {
        // UFM may name the host on the switch side by its node description.
        let v = vec![
            host("a", "L0"),
            host("b", "L1"),
            link("L0", "a mlx5_0"),
            link("L1", "b mlx5_0"),
        ];
        let t = group_ports(&Value::Array(v));
        let volcano = group_ports(&json!([host("a", "L0"), host("b", "L1")]));
        assert_eq!(t.hypernodes, volcano.hypernodes);
        assert_eq!(t.switch_links, 0);
    }

    #[test]
    fn disconnected_islands_stay_separate_roots() {
        let v = vec![
            host("a", "L0"),
            host("b", "L1"),
            host("c", "L2"),
            link("L0", "S0"),
            link("L1", "S0"),
            link("L2", "S9"),
            link("S0", "L0"),
            link("S9", "L2"),
        ];
        let t = group_ports(&Value::Array(v));
        let s = summary(&t);
        assert_eq!(s[3], ("spine-hn-0".into(), 2, vec!["leaf-hn-0", "leaf-hn-1"]));
        assert_eq!(s[4], ("spine-hn-1".into(), 2, vec!["leaf-hn-2"]));
        assert_eq!(s.len(), 5);
    }

    #[test]
    fn output_is_independent_of_record_order() {
        let Value::Array(mut v) = three_layer_fabric() else {
            unreachable!()
        };
        let a = group_ports(&Value::Array(v.clone()));
        v.reverse();
        let b = group_ports(&Value::Array(v.clone()));
        v.rotate_left(7);
        let c = group_ports(&Value::Array(v));
        assert_eq!(a.hypernodes, b.hypernodes);
        assert_eq!(a.hypernodes, c.hypernodes);
    }
}
