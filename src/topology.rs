//! Nodes described by their real hardware (`topology:` in the cluster file): load each
//! topology once (hwloc XML, synthetic description, or a saved probe), hand it to the
//! planner (NUMA allocation), and derive the node's resources from it when the file
//! gives none.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use hyperplan_agent::probe::{self, ProbeOptions, Source};
use hyperplan_shared::topology::{NodeTopology, SharedTopology};
use hyperplan_shared::{ClusterSpec, Resources, TopologyRef};

/// The GPU resource name derived from probed GPUs.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// Loads every node's topology (each distinct source once, shared by its nodes) and fills in `resources` for
/// nodes that have a topology but no resources: `cpu` = PUs, `memory` = total memory,
/// `nvidia.com/gpu` = GPUs.
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
                node.resources = resources_of(t);
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

/// What a node offers, from its hardware.
pub fn resources_of(t: &NodeTopology) -> Resources {
    let pus: u64 = t.cores.iter().map(|c| c.pus.len() as u64).sum();
    let mut r = Resources::new()
        .with(hyperplan_shared::CPU, pus * 1000)
        .with(hyperplan_shared::MEMORY, t.total_memory);
    if !t.gpus.is_empty() {
        r = r.with(GPU_RESOURCE, t.gpus.len() as u64);
    }
    r
}
