//! Nodes known only from the store, whose agents have not registered since the planner
//! started: the restored tasks each holds ([`AwaitingAgent`]) and how many such nodes
//! there are ([`Awaiting`]). `restore` makes them; a node's registration (`restore`'s
//! adoption, once the node is no [`StandIn`]) or its loss (`lost`) ends the wait with
//! `give_up`.

use bevy_ecs::prelude::*;

use super::record::AssignmentRecord;

/// On a node known only from the store: the restored tasks running on it, with the NUMA
/// assignment each held, to take again once its agent says what the node has.
#[derive(Component, Debug, Default)]
pub struct AwaitingAgent(pub Vec<(Entity, Option<AssignmentRecord>)>);

/// On a node the store named before its agent registered: what it has is not known
/// (its hardware is a stand-in). Taken off when the node's spec arrives (`ingest`); a
/// node [`AwaitingAgent`] without it is adopted (`restore::adopt`).
#[derive(Component, Debug, Default)]
pub struct StandIn;

/// How many nodes are [`AwaitingAgent`]: while any is, the cluster is not whole and no
/// job is rejected as one that could never run.
#[derive(Resource, Debug, Default)]
pub struct Awaiting(pub u32);

/// The node no longer awaits its agent (it registered, or was declared lost): what it
/// held for its restored tasks.
pub(crate) fn give_up(world: &mut World, node: Entity) -> Option<AwaitingAgent> {
    let waiting = world.entity_mut(node).take::<AwaitingAgent>()?;
    if let Some(mut a) = world.get_resource_mut::<Awaiting>() {
        a.0 = a.0.saturating_sub(1);
    }
    Some(waiting)
}
