//! The discovery system: every HyperNode source reconciles the HyperNode entities it
//! owns (create, update, delete), keyed by source.
//!
//! - Label discovery follows the nodes' labels.
//! - Polled sources (static manifests, `ibnetdiscover` dumps, UFM, Slurm `topology.conf`)
//!   arrive as [`crate::Event::Discovered`] results from the driver. A good result
//!   replaces the source's input; a failure is recorded and keeps the last good
//!   HyperNodes ([`sources`]). A dump is tiered here with the agents' HCA GUIDs as the
//!   first host map ([`fabric`]); hosts that are no planner node are left out ([`known`]).

pub mod fabric;
pub mod known;
mod label;
pub mod nvlink;
mod reconcile;
pub mod sources;

use std::collections::BTreeMap;

use bevy_ecs::prelude::*;

use super::names::NodeNames;
use crate::model::commands::Command;
use crate::model::components::{Node, Source, SourceKind};
pub use crate::model::discovered::{Found, SourceError};
use crate::model::tick::{LabelTypes, NodeSetGeneration, Now, NvlinkDiscovery, Outbox, TopologyDirty};
use reconcile::NO_LINKS;
pub use sources::{Good, ReportedGuids, SourceState, Sources};

/// Reconciles each source's HyperNodes when the topology is dirty: label discovery from the
/// nodes' labels, then the polled sources whose input or node set changed.
pub fn discovery(world: &mut World) {
    if !world.resource::<TopologyDirty>().0 {
        return;
    }
    let _span = tracing::info_span!("discovery").entered();
    let types = world.resource::<LabelTypes>().0.clone();
    let mut warnings = Vec::new();
    let labelled = if types.is_empty() {
        Vec::new()
    } else {
        let mut q = world.query::<&Node>();
        let nodes: Vec<(String, BTreeMap<String, String>)> =
            q.iter(world).map(|n| (n.name.to_string(), n.labels.clone())).collect();
        label::discover(&types, nodes.iter().map(|(n, l)| (n.as_str(), l)), &mut warnings)
    };
    reconcile::reconcile(world, &Source::of_kind(SourceKind::Label), labelled, &NO_LINKS);
    world
        .resource_mut::<Outbox>()
        .0
        .extend(warnings.into_iter().map(Command::Warn));
    nvlink_source(world);
    polled(world);
}

/// The `nvlink` source: listed once a node reports NVLink fabric information, its
/// HyperNodes made again whenever the topology is dirty (a node's report changed).
fn nvlink_source(world: &mut World) {
    let name = SourceKind::Nvlink.as_str();
    let source = Source::of_kind(SourceKind::Nvlink);
    if !world.resource::<NvlinkDiscovery>().0 {
        reconcile::reconcile(world, &source, Vec::new(), &NO_LINKS);
        world.resource_mut::<Sources>().0.remove(name);
        return;
    }
    let _span = tracing::info_span!("source", name, kind = name).entered();
    let mut q = world.query::<&Node>();
    let reporting: Vec<(std::sync::Arc<str>, hyperplan_shared::gpufabric::NodeDomain)> = q
        .iter(world)
        .filter_map(|n| n.nvlink.as_ref().map(|v| (n.name.clone(), v.domain.clone())))
        .collect();
    let found = nvlink::discover(reporting.iter().map(|(n, d)| (&**n, d)));
    let at = world.resource::<Now>().secs();
    let listed = world.resource::<Sources>().0.contains_key(name);
    if listed || !reporting.is_empty() {
        let mut sources = world.resource_mut::<Sources>();
        let state = sources
            .0
            .entry(name.to_string())
            .or_insert_with(|| SourceState::new(SourceKind::Nvlink, "the NVLink domains agents report".to_string()));
        state.last_attempt = Some(at);
        state.last_success = Some(at);
        state.summary = found.summary();
        state.discovered = found.hyper_nodes.clone();
    }
    reconcile::reconcile(world, &source, found.hyper_nodes, &NO_LINKS);
}

/// Tiers, filters and reconciles the polled sources whose input or node set changed.
fn polled(world: &mut World) {
    let generation = world.resource::<NodeSetGeneration>().0;
    let names: Vec<String> = world.resource::<Sources>().0.keys().cloned().collect();
    for name in names {
        let Some(state) = world.resource::<Sources>().0.get(&name) else {
            continue;
        };
        // Label and NVLink discovery are listed with the sources but reconciled above. A fabric's
        // host names depend on the node set too, so the generation covers re-tiering.
        if matches!(state.kind, SourceKind::Label | SourceKind::Nvlink)
            || (!state.changed && state.filtered_at == Some(generation))
        {
            continue;
        }
        let mut state = state.clone();
        let _span = tracing::info_span!("source", name, kind = state.kind.as_str()).entered();
        match &state.good {
            Some(Good::HyperNodes(specs)) if state.changed => state.discovered = specs.clone(),
            None | Some(Good::HyperNodes(_)) => {}
            Some(Good::Fabric { fabric, map_file }) => {
                refresh_reported_guids(world, generation);
                let reported = world.resource::<ReportedGuids>();
                let names = fabric::reported_names(fabric, &reported.map);
                if state.changed || state.tiered_with.as_ref() != Some(&names) {
                    match fabric::tier(fabric, map_file, &reported.map) {
                        Ok(t) => {
                            state.links = by_hypernode(&t.discovery.degraded_links);
                            state.discovered = t.discovery.hypernodes;
                            state.summary = t.summary;
                            state.unmapped = t.unmapped;
                            state.warnings = t.discovery.warnings;
                            state.warnings.extend(reported.conflicts.iter().cloned());
                        }
                        // The driver sends only dumps with switches, the one thing
                        // tiering refuses; should it fail anyway, keep what was there.
                        Err(e) => state.error = Some(e),
                    }
                    state.tiered_with = Some(names);
                }
            }
        }
        let desired = if state.kind.names_foreign_hosts() {
            let known = &world.resource::<NodeNames>().0;
            let kept = known::keep_known(&state.discovered, |n| known.contains_key(n));
            state.unknown_hosts = kept.unknown_hosts;
            kept.specs
        } else {
            state.discovered.clone()
        };
        state.changed = false;
        state.filtered_at = Some(generation);
        reconcile::reconcile(world, &Source::new(state.kind, name.clone()), desired, &state.links);
        world.resource_mut::<Sources>().0.insert(name, state);
    }
}

/// A source's degraded links by the HyperNode each counts against, as people read them.
fn by_hypernode(links: &[hyperplan_fabric::links::DegradedLink]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for l in links {
        out.entry(l.hypernode.clone()).or_default().push(l.to_string());
    }
    out
}

/// Rebuilds the agents' GUID map when the node set moved since it was built.
fn refresh_reported_guids(world: &mut World, generation: u64) {
    if world.resource::<ReportedGuids>().generation != Some(generation) {
        let mut q = world.query::<&Node>();
        let fresh = fabric::reported_guids(q.iter(world).map(|n| (&*n.name, n.ib_guids.as_slice())), generation);
        world.insert_resource(fresh);
    }
}

/// A polled source exists (from the daemon's config), before its first poll.
pub fn declare(world: &mut World, source: &str, kind: SourceKind, target: String) {
    let mut sources = world.resource_mut::<Sources>();
    let state = sources
        .0
        .entry(source.to_string())
        .or_insert_with(|| SourceState::new(kind, String::new()));
    state.kind = kind;
    state.target = target;
}

/// Label discovery shows in the source list while it has types.
pub fn declare_label(world: &mut World, types: &BTreeMap<String, Vec<String>>) {
    let name = SourceKind::Label.as_str();
    if types.is_empty() {
        world.resource_mut::<Sources>().0.remove(name);
        return;
    }
    let target = types
        .iter()
        .map(|(t, labels)| format!("{t}: {}", labels.join(" > ")))
        .collect::<Vec<_>>()
        .join("; ");
    declare(world, name, SourceKind::Label, format!("node labels ({target})"));
}

/// Records one poll's result (ingest calls this for `Discovered` events).
pub fn record(world: &mut World, source: &str, kind: SourceKind, at: u64, result: Result<Found, SourceError>) {
    let new_error = match &result {
        Err(e) => world
            .resource::<Sources>()
            .0
            .get(source)
            .is_none_or(|s| s.error.as_ref() != Some(e)),
        Ok(_) => false,
    };
    // Said in the warning: counted only when there is one to write.
    let kept = if new_error { reconcile::owned(world, source) } else { 0 };
    let mut notes = Vec::new();
    let mut sources = world.resource_mut::<Sources>();
    let state = sources
        .0
        .entry(source.to_string())
        .or_insert_with(|| SourceState::new(kind, String::new()));
    state.kind = kind;
    state.last_attempt = Some(at);
    let changed = match result {
        Err(error) => {
            if new_error {
                let keeping = match state.last_success {
                    Some(t) => format!(
                        "keeping its {kept} HyperNode(s) from the last good poll ({}s ago)",
                        at.saturating_sub(t)
                    ),
                    None => "it has no HyperNodes yet".to_string(),
                };
                notes.push(Command::Warn(format!(
                    "discovery source {source} ({}): {error}; {keeping}",
                    kind.as_str()
                )));
            }
            state.error = Some(error);
            false
        }
        Ok(found) => {
            if let Some(old) = state.error.take() {
                notes.push(Command::Info(format!(
                    "discovery source {source} ({}) works again (it failed with: {old})",
                    kind.as_str()
                )));
            }
            state.last_success = Some(at);
            match found {
                Found::Unchanged => false,
                Found::HyperNodes {
                    specs,
                    warnings,
                    summary,
                    degraded_links,
                } => {
                    state.good = Some(Good::HyperNodes(specs));
                    state.warnings = warnings;
                    state.summary = summary;
                    state.unmapped.clear();
                    state.links = by_hypernode(&degraded_links);
                    true
                }
                Found::Fabric { fabric, map_file } => {
                    state.good = Some(Good::Fabric { fabric, map_file });
                    state.tiered_with = None;
                    true
                }
            }
        }
    };
    state.changed |= changed;
    world.resource_mut::<Outbox>().0.extend(notes);
}
