//! The invalidate system, the one place that decides what the rest of a tick must
//! rebuild, from what changed since it last ran (bevy's change detection), not from
//! flags each writer remembers to set:
//!
//! - a node appeared, went or reported new hardware: the node set moved
//!   ([`NodeSetGeneration`]; discovery sources filter their hosts against it);
//! - that, or a node's readiness, labels or use changed, the label types changed, or a
//!   discovery source read new input: the HyperNodes and the topology index must be
//!   made again ([`TopologyDirty`]).
//!
//! Runs after everything that applies events (`ingest`, `adopt`, `health`, `lost`) and
//! before `discovery`. Capacity that may have grown ([`CapacityEpoch`](crate::model::tick::CapacityEpoch))
//! is the resource cache's to say (`cache::refresh`): it alone sees what was given back.

use bevy_ecs::prelude::*;

use crate::discovery::Sources;
use crate::model::components::Node;
use crate::model::tick::{LabelTypes, NodeSetGeneration, TopologyDirty};
use crate::numa::node::NodeHardware;

/// A node that appeared or reported new hardware since the system last ran.
type Arrived = Or<(Added<Node>, Changed<NodeHardware>)>;

pub fn invalidate(
    arrived: Query<(), Arrived>,
    changed: Query<(), Changed<Node>>,
    mut gone: RemovedComponents<Node>,
    labels: Res<LabelTypes>,
    sources: Res<Sources>,
    mut generation: ResMut<NodeSetGeneration>,
    mut dirty: ResMut<TopologyDirty>,
) {
    let _span = tracing::info_span!("invalidate").entered();
    let node_set = !arrived.is_empty() | (gone.read().count() > 0);
    if node_set {
        generation.0 += 1;
    }
    if node_set || !changed.is_empty() || labels.is_changed() || sources.0.values().any(|s| s.changed) {
        dirty.0 = true;
    }
}
