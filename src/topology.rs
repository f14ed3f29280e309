//! Nodes described by their real hardware (`topology:` in the cluster file): load each
//! topology once (hwloc XML, synthetic description, or a saved probe), hand it to the
//! planner (NUMA allocation), and derive the node's resources from it when the file
//! gives none.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use hyperplan_agent::probe::{self, ProbeOptions, Source};
use hyperplan_core::numa::node::hardware_resources;
use hyperplan_shared::topology::{NodeTopology, SharedTopology};
use hyperplan_shared::{ClusterSpec, TopologyRef};

/// Loads every node's topology (each distinct source once, shared by its nodes) and fills in `resources` for
/// nodes that have a topology but no resources: `cpu` = PUs, `memory` = total memory,
/// `nvidia.com/gpu` = GPUs, derived by the planner core's `hardware_resources`, the one
/// the daemon uses for its agents' nodes, so both plan with the same numbers.
pub fn fill_resources(cluster: &mut ClusterSpec, cluster_file: &Path) -> anyhow::Result<()> {
    let mut loaded: BTreeMap<TopologyRef, SharedTopology> = BTreeMap::new();
    for node in &mut cluster.nodes {
        let Some(source) = &node.topology else { continue };
        if !loaded.contains_key(source) {
            let topo = load(source)
                .with_context(|| format!("{}: node {}: loading its topology", cluster_file.display(), node.name))?;
            loaded.insert(source.clone(), SharedTopology::new(topo));
        }
        if let Some(t) = loaded.get(source) {
            if node.resources.is_empty() {
                node.resources = hardware_resources(t);
            }
            node.hardware = Some(t.clone());
        }
    }
    Ok(())
}

pub fn load(source: &TopologyRef) -> Result<NodeTopology, probe::ProbeError> {
    let source = match source {
        TopologyRef::Probe(p) => return probe::load_probe_json(p),
        TopologyRef::HwlocXml(p) => Source::HwlocXml(p.clone()),
        TopologyRef::Synthetic(s) => Source::Synthetic(s.clone()),
    };
    probe::probe(&ProbeOptions {
        source,
        ..ProbeOptions::local()
    })
}
