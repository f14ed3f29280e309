//! `Event::PortsInUse`: what a node's agent says is bound in the `MASTER_PORT` range,
//! kept on the node ([`PortsInUse`]) for `dispatch` to choose a free port from. Only a
//! change is written (and said in the log: which ports are taken on which node is worth
//! knowing when a job's rendezvous fails).

use bevy_ecs::prelude::*;
use hyperplan_shared::taskenv::in_master_range;

use crate::model::commands::Command;
use crate::model::ports::PortsInUse;
use crate::model::tick::Outbox;
use crate::names::NodeNames;

/// Most ports kept per node: the range's size (an agent saying more says nonsense).
const MAX_PORTS: usize = hyperplan_shared::taskenv::MASTER_PORT_SPAN as usize;

pub(crate) fn ports_in_use(world: &mut World, node: &str, mut ports: Vec<u16>) {
    let Some(&e) = world.resource::<NodeNames>().0.get(node) else {
        return;
    };
    ports.retain(|&p| in_master_range(p));
    ports.sort_unstable();
    ports.dedup();
    ports.truncate(MAX_PORTS);
    if world.get::<PortsInUse>(e).is_some_and(|p| p.0 == ports) {
        return;
    }
    if world.get::<PortsInUse>(e).is_some() || !ports.is_empty() {
        let line = format!(
            "node {node}: MASTER_PORT range ports bound now: {}",
            if ports.is_empty() {
                "none".to_string()
            } else {
                ports.iter().map(u16::to_string).collect::<Vec<_>>().join(",")
            }
        );
        world.resource_mut::<Outbox>().0.push(Command::Info(line));
    }
    world.entity_mut(e).insert(PortsInUse(ports));
}
