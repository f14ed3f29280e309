//! An `ibnetdiscover` source in the core: the dump is tiered here, not in the daemon,
//! because the most trusted host names come from the agents: a CA whose node or port
//! GUID a node reports is that node, whatever its description says. Registrations
//! change that map, so a dump is tiered again, but only when the names the agents give
//! its CAs changed.

use hyperplan_fabric::ibnetdiscover::NodeKind;
use hyperplan_fabric::{Discovery, GuidMap, HostNames, IbFabric};

use super::sources::ReportedGuids;
use crate::model::discovered::SourceError;

/// Rebuilds the GUID → node map from `(node name, GUIDs)` in name order: a GUID two nodes
/// report stays with the first, and the clash is remembered.
pub fn reported_guids<'a>(nodes: impl Iterator<Item = (&'a str, &'a [u64])>, generation: u64) -> ReportedGuids {
    let mut sorted: Vec<(&str, &[u64])> = nodes.collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let mut map = GuidMap::new();
    let mut conflicts = Vec::new();
    for (node, guids) in sorted {
        for &g in guids {
            match map.get(g) {
                Some(first) if first != node => conflicts.push(format!(
                    "GUID {g:#018x} is reported by nodes {first} and {node}; {first} keeps it"
                )),
                Some(_) => {}
                None => map.insert(g, node),
            }
        }
    }
    ReportedGuids {
        generation: Some(generation),
        map,
        conflicts,
    }
}

/// Per CA of the dump, in dump order, the node that reports one of its GUIDs.
pub fn reported_names(fabric: &IbFabric, reported: &GuidMap) -> Vec<Option<String>> {
    fabric
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Ca)
        .map(|n| {
            std::iter::once(n.guid)
                .chain(n.port_guids.iter().copied())
                .find_map(|g| reported.get(g))
                .map(str::to_string)
        })
        .collect()
}

/// What tiering a dump gave, in the terms of a source's status.
#[derive(Debug)]
pub struct Tiered {
    /// Everything tiering found, the HyperNodes first.
    pub discovery: Discovery,
    /// One line for people: switches, hosts and how they were named, HyperNodes made.
    pub summary: String,
    /// Host CAs nothing names (`H-<guid> "description" on switches`).
    pub unmapped: Vec<String>,
}

/// Tiers the dump with the agents' GUIDs first, then the map file, then descriptions.
pub fn tier(fabric: &IbFabric, map_file: &GuidMap, reported: &GuidMap) -> Result<Tiered, SourceError> {
    let names = HostNames {
        reported: reported.clone(),
        map_file: map_file.clone(),
    };
    let d = hyperplan_fabric::discover(fabric, &names)?;
    let summary = d.summary();
    let unmapped = d.unmapped.iter().map(ToString::to_string).collect();
    Ok(Tiered {
        discovery: d,
        summary,
        unmapped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guid_two_nodes_report_stays_with_the_first_by_name() {
        let nodes = [("n2", &[1u64, 2][..]), ("n1", &[2u64, 3][..])];
        let r = reported_guids(nodes.iter().map(|(n, g)| (*n, *g)), 7);
        assert_eq!(r.map.get(2), Some("n1"));
        assert_eq!(r.map.get(1), Some("n2"));
        assert_eq!(r.generation, Some(7));
        assert_eq!(r.conflicts.len(), 1, "{:?}", r.conflicts);
        assert!(r.conflicts[0].contains("n1 and n2; n1 keeps it"), "{:?}", r.conflicts);
    }
}
