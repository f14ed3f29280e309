//! `Event::NodeStrained`: whether a node's agent can start tasks now (each heartbeat),
//! kept on the node as [`Strained`] while it cannot; the resource cache then offers
//! nothing of it. Only a change is written and said in the log.

use bevy_ecs::prelude::*;

use crate::model::commands::Command;
use crate::model::strained::Strained;
use crate::model::tick::Outbox;
use crate::names::NodeNames;

/// The most bytes of an agent's reason kept (an agent saying more says nonsense).
const MAX_REASON: usize = 512;

pub(crate) fn node_strained(world: &mut World, node: &str, reason: Option<String>) {
    let Some(&e) = world.resource::<NodeNames>().0.get(node) else {
        return;
    };
    let reason = reason.map(|mut r| {
        if r.len() > MAX_REASON {
            let mut end = MAX_REASON;
            while !r.is_char_boundary(end) {
                end -= 1;
            }
            r.truncate(end);
        }
        r
    });
    let before = world.get::<Strained>(e).map(|s| s.0.clone());
    if before == reason {
        return;
    }
    match reason {
        Some(why) => {
            if before.is_none() {
                let line = format!("node {node}: {why}; it takes no new task until its agent can start them again");
                world.resource_mut::<Outbox>().0.push(Command::Warn(line));
            }
            world.entity_mut(e).insert(Strained(why));
        }
        None => {
            world.entity_mut(e).remove::<Strained>();
            let line = format!("node {node}: its agent can start tasks again; it takes tasks again");
            world.resource_mut::<Outbox>().0.push(Command::Info(line));
        }
    }
}
