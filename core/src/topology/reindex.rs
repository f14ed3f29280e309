//! The topology-index system: rebuilds the `TopologyIndex` when nodes or HyperNodes
//! changed and gives every node its dense slot.

use bevy_ecs::prelude::*;

use crate::model::commands::Command;
use crate::model::components::{HyperNode, Node, NodeSlot};
use crate::model::tick::{Outbox, TopologyDirty};
use crate::topology::TopologyIndex;

pub(crate) fn reindex(world: &mut World) {
    if !world.resource::<TopologyDirty>().0 {
        return;
    }
    let _span = tracing::info_span!("topology_index").entered();
    let generation = world.resource::<TopologyIndex>().generation + 1;
    let mut nq = world.query::<(Entity, &Node)>();
    let mut hq = world.query::<&HyperNode>();
    let nodes: Vec<(Entity, &Node)> = nq.iter(world).collect();
    let hns: Vec<&HyperNode> = hq.iter(world).collect();
    let removed = &world.resource::<crate::model::drain::Drains>().removed;
    let index = TopologyIndex::build(&nodes, &hns, generation, removed);
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
    let warnings = index.warnings.clone();
    world.insert_resource(index);
    world
        .resource_mut::<Outbox>()
        .0
        .extend(warnings.into_iter().map(Command::Warn));
    world.resource_mut::<TopologyDirty>().0 = false;
}
