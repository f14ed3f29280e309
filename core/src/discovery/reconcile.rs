//! Reconciling one source's HyperNodes into entities: create what is new, update what
//! changed, delete what it no longer has. Other sources' HyperNodes are never touched.
//! Every discovery source comes through here, so this is where a HyperNode name that
//! breaks the name rule (`hyperplan_shared::names`) is left out, with a warning.

use std::collections::BTreeMap;

use bevy_ecs::prelude::*;
use hyperplan_shared::HyperNodeSpec;
use hyperplan_shared::names::{NameKind, check_name};

use crate::model::commands::Command;
use crate::model::components::{HyperNode, Source};
use crate::model::tick::Outbox;

/// No HyperNode with degraded links: for sources that do not see links.
pub(super) static NO_LINKS: BTreeMap<String, Vec<String>> = BTreeMap::new();

/// At most this many degraded links are kept per HyperNode (a dump of a fabric with a
/// bad batch of cables must not grow every HyperNode without bound); the count saturates.
const MAX_LINKS: usize = 64;

/// Makes `source`'s HyperNode entities equal `desired`, each with its degraded links
/// from `links` (by HyperNode name); returns whether anything changed.
pub(super) fn reconcile(
    world: &mut World,
    source: &Source,
    desired: Vec<HyperNodeSpec>,
    links: &BTreeMap<String, Vec<String>>,
) -> bool {
    let mut kept = Vec::with_capacity(desired.len());
    for spec in desired {
        match check_name(NameKind::HyperNode, &spec.name) {
            Ok(()) => kept.push(spec),
            Err(e) => {
                let w = format!("discovery source {:?}: a HyperNode left out: {e}", source.name);
                world.resource_mut::<Outbox>().0.push(Command::Warn(w));
            }
        }
    }
    let desired = kept;
    let mut q = world.query::<(Entity, &HyperNode)>();
    let mut existing: BTreeMap<String, (Entity, bool)> = q
        .iter(world)
        .filter(|(_, h)| &h.source == source)
        .map(|(e, h)| (h.spec.name.clone(), (e, false)))
        .collect();
    let mut changed = false;
    for spec in desired {
        let degraded_links: Vec<String> = links
            .get(&spec.name)
            .map(|l| l.iter().take(MAX_LINKS).cloned().collect())
            .unwrap_or_default();
        match existing.get_mut(&spec.name) {
            Some((e, seen)) => {
                *seen = true;
                let e = *e;
                let same = world
                    .get::<HyperNode>(e)
                    .is_some_and(|h| h.spec == spec && h.degraded_links == degraded_links);
                if !same {
                    changed = true;
                    world.entity_mut(e).insert(HyperNode {
                        spec,
                        source: source.clone(),
                        degraded_links,
                    });
                }
            }
            None => {
                changed = true;
                world.spawn(HyperNode {
                    spec,
                    source: source.clone(),
                    degraded_links,
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
pub(super) fn owned(world: &mut World, source: &str) -> usize {
    let mut q = world.query::<&HyperNode>();
    q.iter(world).filter(|h| h.source.name == source).count()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::model::components::SourceKind;
    use hyperplan_shared::hypernode::{Member, MemberType, Selector};

    fn spec(name: &str) -> HyperNodeSpec {
        HyperNodeSpec {
            name: name.to_string(),
            tier: 1,
            tier_name: None,
            members: vec![Member {
                kind: MemberType::Node,
                selector: Selector::Exact { name: "n1".into() },
            }],
        }
    }

    /// Issue 12 item 8: a discovered HyperNode whose name breaks the rule (a label value
    /// or a switch description with a terminal escape) is left out, saying so escaped.
    #[test]
    fn a_hypernode_with_a_bad_name_is_left_out_with_a_warning() {
        let mut world = World::new();
        world.init_resource::<Outbox>();
        let source = Source::new(SourceKind::Label, "label");
        let changed = reconcile(
            &mut world,
            &source,
            vec![spec("rack-1"), spec("rack\u{1b}[2J"), spec(&"x".repeat(300))],
            &NO_LINKS,
        );
        assert!(changed);
        assert_eq!(owned(&mut world, "label"), 1);
        let out = &world.resource::<Outbox>().0;
        assert_eq!(out.len(), 2, "{out:?}");
        let Command::Warn(w) = &out[0] else { panic!("{out:?}") };
        assert!(
            w.starts_with("discovery source \"label\": a HyperNode left out: expected a HyperNode name"),
            "{w}"
        );
        assert!(!w.contains('\u{1b}'), "{w}");
    }
}
