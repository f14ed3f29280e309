//! The HyperNode tree (`hyperplan hypernodes`): tiers, parents and children, real nodes
//! (and how many are ready), free and allocatable capacity, the owning discovery source,
//! and the warnings for HyperNodes that were left out.

use std::collections::{BTreeMap, HashMap};

use bevy_ecs::prelude::*;
use hyperplan_shared::status::{HyperNodeStatus, HyperNodeTree, SourceStatus};

use crate::cache::capacity::Capacity;
use crate::discovery::Sources;
use crate::model::components::{HyperNode, Node};
use crate::model::ids::HnIdx;
use crate::topology::TopologyIndex;

/// Parents before children (depth-first from the top tier, children by name).
pub fn hyper_node_tree(world: &World) -> HyperNodeTree {
    let sources: HashMap<String, (String, Vec<String>)> = super::read::<&HyperNode>(world)
        .map(|mut hq| {
            hq.iter(world)
                .map(|h| (h.spec.name.clone(), (h.source.name.clone(), h.degraded_links.clone())))
                .collect()
        })
        .unwrap_or_default();
    let index = world.resource::<TopologyIndex>();
    let cap = world.resource::<Capacity>();
    let ready: Vec<bool> = index
        .node_entities
        .iter()
        .map(|&e| world.get::<Node>(e).is_some_and(|n| n.ready))
        .collect();
    let mut out = Vec::new();
    // The virtual root's children are the top of the tree.
    let mut stack: Vec<HnIdx> = index.hns[index.root.ix()].children.iter().rev().copied().collect();
    while let Some(h) = stack.pop() {
        let info = &index.hns[h.ix()];
        let resources = |v: &[u64]| -> BTreeMap<String, u64> {
            cap.dims
                .iter()
                .cloned()
                .zip(v.iter().copied())
                .filter(|(_, x)| *x > 0)
                .collect()
        };
        let alloc = cap.hn_alloc(h);
        let free: Vec<u64> = alloc
            .iter()
            .zip(cap.hn_used(h))
            .map(|(a, u)| a.saturating_sub(*u))
            .collect();
        out.push(HyperNodeStatus {
            name: info.name.clone(),
            tier: info.tier,
            tier_name: info.tier_name.clone(),
            source: info.source.clone(),
            parent: info
                .parent
                .filter(|p| *p != index.root)
                .map(|p| index.hns[p.ix()].name.clone()),
            children: info.children.iter().map(|c| index.hns[c.ix()].name.clone()).collect(),
            nodes: info.node_count,
            ready_nodes: info
                .nodes
                .ones()
                .filter(|&i| ready.get(i).copied().unwrap_or(false))
                .count() as u32,
            fabric_degraded: info.fabric_degraded,
            degraded_links: sources.get(&info.name).map(|s| s.1.clone()).unwrap_or_default(),
            links_degraded: info.links_degraded,
            free: resources(&free),
            allocatable: resources(alloc),
        });
        stack.extend(info.children.iter().rev().copied());
    }
    HyperNodeTree {
        hyper_nodes: out,
        warnings: index.warnings.clone(),
        sources: source_statuses(world, &sources),
    }
}

/// Every discovery source, by name: what it owns now (from `owner`: HyperNode → source),
/// when it last worked, its error.
fn source_statuses(world: &World, owner: &HashMap<String, (String, Vec<String>)>) -> Vec<SourceStatus> {
    let mut owned: HashMap<&str, u32> = HashMap::new();
    for (source, _) in owner.values() {
        *owned.entry(source.as_str()).or_default() += 1;
    }
    world
        .resource::<Sources>()
        .0
        .iter()
        .map(|(name, s)| SourceStatus {
            name: name.clone(),
            kind: s.kind.as_str().to_string(),
            target: s.target.clone(),
            hyper_nodes: owned.get(name.as_str()).copied().unwrap_or(0),
            last_attempt: s.last_attempt,
            last_success: s.last_success,
            error: s.error.as_ref().map(ToString::to_string),
            summary: s.summary.clone(),
            unknown_hosts: s.unknown_hosts.clone(),
            unmapped: s.unmapped.clone(),
            warnings: s.warnings.clone(),
        })
        .collect()
}
