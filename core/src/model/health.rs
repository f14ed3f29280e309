//! What node health keeps per node ([`Heartbeats`]: what its agent link last did) and
//! which nodes are away ([`Away`]). The `health` system writes them; `lost`, `restore`,
//! `lifecycle`, `claim` and the views read them.

use bevy_ecs::prelude::*;

/// What the node's agent link last did, on nodes whose readiness the links decide.
#[derive(Component, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heartbeats {
    /// When the node was last heard from: its registration, a heartbeat, or its link
    /// closing (`hyperplan nodes` shows the age).
    pub last_ms: u64,
    /// When its agent last spoke: its registration or a heartbeat, not a link's close
    /// (QUIC notices a dead peer only after its idle timeout); for a node known from the
    /// store, the planner's start. What the node-lost fence counts from.
    pub heard_ms: u64,
    /// Its agent's link is open: only then does silence count, and heartbeats.
    pub linked: bool,
    /// The link (the driver's connection id) that holds the node (see `core::claim`).
    pub link: u64,
    /// When its agent last listed the tasks it runs (`Event::TasksOnNode`) on this link:
    /// a started task missing from the lists for `nodeLostAfter` is lost (see `lost`).
    pub listed_ms: Option<u64>,
}

/// The nodes with a link record that are NotReady and whose tasks are not declared lost
/// yet, with since when (the driver's clock, ms): all the lost-node check looks at (see
/// `lost`), so a tick with every node Ready pays nothing for it.
#[derive(Resource, Debug, Default)]
pub struct Away(pub std::collections::BTreeMap<Entity, u64>);
