//! The invalidate system, the one place that decides what the rest of a tick must
//! rebuild, from what changed since it last ran, not from flags each writer remembers to
//! set. Nodes are heard through component hooks ([`watch`]), so the steady tick costs
//! nothing per node:
//!
//! - a node appeared, went or reported new hardware (a `Node` spawned or despawned, a
//!   `NodeHardware` inserted): the node set moved ([`NodeSetGeneration`]; discovery
//!   sources filter their hosts against it);
//! - that, or a node's spec or readiness changed (a `Node` inserted again: see
//!   `model::components::set_node_ready`), runs tasks the planner no longer counts or no more (`Strays`), its agent cannot start tasks or can again (`Strained`), the label types changed, or a discovery
//!   source read new input: the HyperNodes and the topology index must be made again
//!   ([`TopologyDirty`]).
//!
//! A node drained or resumed (`Drained`) rebuilds nothing: the resource cache closes or
//! opens it in place ([`DrainChanges`]). Nor do health marks ([`HealthMarks`]): the
//! topology index takes them in place ([`MarkChanges`]).
//!
//! Runs after everything that applies events (`ingest`, `adopt`, `health`, `lost`) and
//! before `discovery`. Capacity that may have grown ([`CapacityEpoch`](crate::model::tick::CapacityEpoch))
//! is the resource cache's to say (`cache::refresh`): it alone sees what was given back.

use bevy_ecs::lifecycle::HookContext;
use bevy_ecs::prelude::*;
use bevy_ecs::world::DeferredWorld;

use crate::discovery::Sources;
use crate::model::checks::{HealthMarks, MarkChanges};
use crate::model::components::Node;
use crate::model::drain::{DrainChanges, Drained};
use crate::model::strained::Strained;
use crate::model::strays::Strays;
use crate::model::tick::{LabelTypes, NodeSetGeneration, TopologyDirty};
use crate::numa::node::NodeHardware;

/// What the hooks heard since the last tick.
#[derive(Resource, Debug, Default)]
pub(crate) struct NodeChanges {
    /// A node appeared, went or has new hardware.
    set: bool,
    /// A node's spec or readiness changed (or the set did).
    any: bool,
}

/// Registers the hooks, before any node exists (`Planner::new`).
pub(crate) fn watch(world: &mut World) {
    world.init_resource::<NodeChanges>();
    world
        .register_component_hooks::<Node>()
        .on_insert(node_inserted)
        .on_remove(node_removed);
    world
        .register_component_hooks::<NodeHardware>()
        .on_insert(hardware_inserted);
    // Health marks change the topology index in place (`reindex`, `topology::marks`).
    world.init_resource::<MarkChanges>();
    world
        .register_component_hooks::<HealthMarks>()
        .on_insert(marks_changed)
        .on_remove(marks_changed);
    // A drain closes its node in the resource cache in place (`cache::refresh`).
    world.init_resource::<DrainChanges>();
    world.init_resource::<crate::model::drain::Closed>();
    world
        .register_component_hooks::<Drained>()
        .on_insert(drain_changed)
        .on_remove(drain_changed);
    world
        .register_component_hooks::<Strays>()
        .on_add(node_inserted)
        .on_remove(node_inserted);
    world
        .register_component_hooks::<Strained>()
        .on_add(node_inserted)
        .on_remove(node_inserted);
}

fn marks_changed(mut world: DeferredWorld, ctx: HookContext) {
    world.resource_mut::<MarkChanges>().0.push(ctx.entity);
}

fn drain_changed(mut world: DeferredWorld, ctx: HookContext) {
    world.resource_mut::<DrainChanges>().0.push(ctx.entity);
}

fn node_inserted(mut world: DeferredWorld, _: HookContext) {
    world.resource_mut::<NodeChanges>().any = true;
}

fn node_removed(mut world: DeferredWorld, _: HookContext) {
    let mut c = world.resource_mut::<NodeChanges>();
    c.set = true;
    c.any = true;
}

fn hardware_inserted(mut world: DeferredWorld, _: HookContext) {
    let mut c = world.resource_mut::<NodeChanges>();
    c.set = true;
    c.any = true;
}

pub(crate) fn invalidate(
    mut changes: ResMut<NodeChanges>,
    labels: Res<LabelTypes>,
    nvlink: Res<crate::model::tick::NvlinkDiscovery>,
    sources: Res<Sources>,
    mut generation: ResMut<NodeSetGeneration>,
    mut dirty: ResMut<TopologyDirty>,
) {
    let _span = tracing::info_span!("invalidate").entered();
    let NodeChanges { set, any } = std::mem::take(&mut *changes);
    if set {
        generation.0 += 1;
    }
    if any || labels.is_changed() || nvlink.is_changed() || sources.0.values().any(|s| s.changed) {
        dirty.0 = true;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use crate::model::events::Event;
    use crate::model::tick::{NodeSetGeneration, TopologyDirty};
    use crate::sim::{SIM_OWNER, planner_for};
    use crate::testing::{ClusterBuilder, JobBuilder};
    use crate::{Command, Planner, PlannerConfig};

    fn placed(cmds: &[Command]) -> usize {
        cmds.iter().filter(|c| matches!(c, Command::Place(_))).count()
    }

    fn generation(p: &Planner) -> u64 {
        p.world().resource::<NodeSetGeneration>().0
    }

    #[test]
    fn readiness_and_the_node_set_are_heard_without_a_flag_set_by_hand() {
        let cluster = ClusterBuilder::flat(2).node_resources("cpu=4").build();
        let mut p = planner_for(&cluster, PlannerConfig::default());
        p.tick(1);
        let g = generation(&p);
        // A quiet tick rebuilds nothing.
        p.tick(2);
        assert_eq!(generation(&p), g);
        assert!(!p.world().resource::<TopologyDirty>().0);
        // Both nodes NotReady: a job needing one waits; the node set did not move.
        for n in &cluster.nodes {
            p.push(Event::NodeReady {
                name: n.name.clone(),
                ready: false,
            });
        }
        crate::sim::submit::submit(&mut p, JobBuilder::gang("j", 1, "cpu=4").build(), SIM_OWNER);
        assert_eq!(placed(&p.tick(3)), 0);
        assert_eq!(generation(&p), g, "readiness is not a new node set");
        // One back: the job runs on it at once.
        p.push(Event::NodeReady {
            name: cluster.nodes[0].name.clone(),
            ready: true,
        });
        assert_eq!(placed(&p.tick(4)), 1);
        // A node gone and one new: the set moves.
        p.push(Event::NodeGone {
            name: cluster.nodes[1].name.clone(),
        });
        p.tick(5);
        assert_eq!(generation(&p), g + 1);
        let mut fresh = cluster.nodes[1].clone();
        fresh.name = "n-new".into();
        p.push(Event::NodeUp(fresh));
        crate::sim::submit::submit(&mut p, JobBuilder::gang("k", 1, "cpu=4").build(), SIM_OWNER);
        assert_eq!(placed(&p.tick(6)), 1, "the new node takes the next job");
        assert_eq!(generation(&p), g + 2);
        assert!(p.violations().is_empty());
    }
}
