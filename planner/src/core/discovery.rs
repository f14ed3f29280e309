//! The discovery system: each HyperNode source (static manifests, label discovery)
//! reconciles the HyperNode entities it owns — create, update, delete — keyed by source.

use std::collections::BTreeMap;

use bevy_ecs::prelude::*;
use hyperplan_shared::HyperNodeSpec;

use super::commands::Command;
use super::components::{HyperNode, Node, Source};
use super::ingest::StaticSpecs;
use super::queues::{LabelTypes, Outbox, TopologyDirty};
use super::topology::label;

pub fn discovery(world: &mut World) {
    if !world.resource::<TopologyDirty>().0 {
        return;
    }
    let _span = tracing::info_span!("discovery").entered();
    let static_specs = world.resource::<StaticSpecs>().0.clone();
    reconcile(world, Source::Static, static_specs);

    let types = world.resource::<LabelTypes>().0.clone();
    let mut warnings = Vec::new();
    let labelled = if types.is_empty() {
        Vec::new()
    } else {
        let mut q = world.query::<&Node>();
        let nodes: Vec<(String, BTreeMap<String, String>)> =
            q.iter(world).map(|n| (n.name.clone(), n.labels.clone())).collect();
        label::discover(&types, nodes.iter().map(|(n, l)| (n.as_str(), l)), &mut warnings)
    };
    reconcile(world, Source::Label, labelled);
    world
        .resource_mut::<Outbox>()
        .0
        .extend(warnings.into_iter().map(Command::Warn));
}

fn reconcile(world: &mut World, source: Source, desired: Vec<HyperNodeSpec>) {
    let mut q = world.query::<(Entity, &HyperNode)>();
    let mut existing: BTreeMap<String, (Entity, bool)> = q
        .iter(world)
        .filter(|(_, h)| h.source == source)
        .map(|(e, h)| (h.spec.name.clone(), (e, false)))
        .collect();
    for spec in desired {
        match existing.get_mut(&spec.name) {
            Some((e, seen)) => {
                *seen = true;
                let e = *e;
                let same = world.get::<HyperNode>(e).is_some_and(|h| h.spec == spec);
                if !same {
                    world.entity_mut(e).insert(HyperNode {
                        spec,
                        source: source.clone(),
                    });
                }
            }
            None => {
                world.spawn(HyperNode {
                    spec,
                    source: source.clone(),
                });
            }
        }
    }
    for (_, (e, seen)) in existing {
        if !seen {
            world.despawn(e);
        }
    }
}
