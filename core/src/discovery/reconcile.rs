//! Reconciling one source's HyperNodes into entities: create what is new, update what
//! changed, delete what it no longer has. Other sources' HyperNodes are never touched.

use std::collections::BTreeMap;

use bevy_ecs::prelude::*;
use hyperplan_shared::HyperNodeSpec;

use crate::components::{HyperNode, Source};

/// Makes `source`'s HyperNode entities equal `desired`; returns whether anything changed.
pub fn reconcile(world: &mut World, source: &Source, desired: Vec<HyperNodeSpec>) -> bool {
    let mut q = world.query::<(Entity, &HyperNode)>();
    let mut existing: BTreeMap<String, (Entity, bool)> = q
        .iter(world)
        .filter(|(_, h)| &h.source == source)
        .map(|(e, h)| (h.spec.name.clone(), (e, false)))
        .collect();
    let mut changed = false;
    for spec in desired {
        match existing.get_mut(&spec.name) {
            Some((e, seen)) => {
                *seen = true;
                let e = *e;
                let same = world.get::<HyperNode>(e).is_some_and(|h| h.spec == spec);
                if !same {
                    changed = true;
                    world.entity_mut(e).insert(HyperNode {
                        spec,
                        source: source.clone(),
                    });
                }
            }
            None => {
                changed = true;
                world.spawn(HyperNode {
                    spec,
                    source: source.clone(),
                });
            }
        }
    }
    for (_, (e, seen)) in existing {
        if !seen {
            changed = true;
            world.despawn(e);
        }
    }
    changed
}

/// How many HyperNode entities `source` owns.
pub fn owned(world: &mut World, source: &str) -> usize {
    let mut q = world.query::<&HyperNode>();
    q.iter(world).filter(|h| h.source.name == source).count()
}
