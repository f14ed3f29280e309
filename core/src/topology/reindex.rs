//! The topology-index system: rebuilds the `TopologyIndex` when nodes or HyperNodes
//! changed and gives every node its dense slot.

use std::sync::Arc;

use bevy_ecs::prelude::*;

use crate::model::checks::{HealthMarks, MarkChanges};
use crate::model::commands::Command;
use crate::model::components::{HyperNode, Node, NodeSlot};
use crate::model::tick::{Outbox, TopologyDirty};
use crate::numa::node::NodeHardware;
use crate::topology::TopologyIndex;

/// A hash of what decides whether a job could ever run: each node (by name, in index
/// order) with what it offers and its hardware (by identity: the hardware cache shares
/// one per kind of machine), and each HyperNode with its tier, parent and nodes. Not
/// readiness, drains or health: those only change what is free now.
fn fingerprint<'a>(
    index: &TopologyIndex,
    allocatable: impl Fn(Entity) -> Option<&'a hyperplan_shared::Resources>,
    hardware: impl Fn(Entity) -> usize,
) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    index.node_names.hash(&mut h);
    for &e in &index.node_entities {
        allocatable(e).hash(&mut h);
        hardware(e).hash(&mut h);
    }
    for hn in &index.hns {
        (&hn.name, hn.tier, &hn.tier_name, hn.tree, hn.parent.map(|p| p.0)).hash(&mut h);
        hn.nodes.as_slice().hash(&mut h);
    }
    h.finish()
}

pub(crate) fn reindex(world: &mut World) {
    let changed = std::mem::take(&mut world.resource_mut::<MarkChanges>().0);
    if !world.resource::<TopologyDirty>().0 {
        // Health marks that came or went: in place (`topology::marks`).
        if !changed.is_empty() {
            remark(world, changed);
        }
        return;
    }
    let _span = tracing::info_span!("topology_index").entered();
    let generation = world.resource::<TopologyIndex>().generation + 1;
    let mut nq = world.query::<(Entity, &Node)>();
    let mut hq = world.query::<&HyperNode>();
    let nodes: Vec<(Entity, &Node)> = nq.iter(world).collect();
    let hns: Vec<&HyperNode> = hq.iter(world).collect();
    let removed = &world.resource::<crate::model::drain::Drains>().removed;
    let mut index = TopologyIndex::build(&nodes, &hns, generation, removed);
    // The same nodes, offers, hardware and HyperNodes as before: what could ever run is
    // what it was (see `TopologyIndex::feasibility`).
    let hardware = |e: Entity| world.get::<NodeHardware>(e).map_or(0, |h| Arc::as_ptr(&h.0) as usize);
    let allocatable = |e: Entity| world.get::<Node>(e).map(|n| &n.allocatable);
    index.fingerprint = fingerprint(&index, allocatable, hardware);
    let before = world.resource::<TopologyIndex>();
    if before.generation > 0 && before.fingerprint == index.fingerprint {
        index.feasibility = before.feasibility;
    }
    tracing::debug!(
        nodes = index.node_count(),
        hyper_nodes = index.hns.len(),
        "topology index rebuilt"
    );
    for (i, &e) in index.node_entities.iter().enumerate() {
        world
            .entity_mut(e)
            .insert(NodeSlot(crate::model::ids::NodeIdx(i as u32)));
    }
    // Every node's health marks, on the fresh index.
    let mut mq = world.query::<(Entity, &NodeSlot, &HealthMarks)>();
    for (e, slot, m) in mq.iter(world) {
        if index.node_entities.get(slot.0.ix()) == Some(&e) {
            index.mark(slot.0, m.degraded, m.fabric);
        }
    }
    let warnings = index.warnings.clone();
    world.insert_resource(index);
    world
        .resource_mut::<Outbox>()
        .0
        .extend(warnings.into_iter().map(Command::Warn));
    world.resource_mut::<TopologyDirty>().0 = false;
}

/// The health marks of `nodes` (inserted or removed since the last tick), taken into the
/// index in place.
fn remark(world: &mut World, mut nodes: Vec<Entity>) {
    let _span = tracing::info_span!("topology_marks").entered();
    nodes.sort_unstable();
    nodes.dedup();
    let index = world.resource::<TopologyIndex>();
    let marks: Vec<(crate::model::ids::NodeIdx, HealthMarks)> = nodes
        .into_iter()
        .filter_map(|e| {
            let slot = world
                .get::<NodeSlot>(e)
                .filter(|s| index.node_entities.get(s.0.ix()) == Some(&e))?;
            Some((slot.0, world.get::<HealthMarks>(e).copied().unwrap_or_default()))
        })
        .collect();
    let mut index = world.resource_mut::<TopologyIndex>();
    for (n, m) in marks {
        index.mark(n, m.degraded, m.fabric);
    }
}
