//! The cluster file: nodes, inline HyperNodes, HyperNode manifest files, label discovery.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::FileError;
use crate::hypernode::{self, HyperNodeSpec, RawInlineHyperNode};
use crate::limits::{MAX_CLUSTER_FILE, read_file_text};
use crate::quantity::{LocatedResources, format_quantity};
use crate::resources::Resources;
use crate::yaml::{self, Located, file_error, located_error};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub resources: Resources,
    /// Already taken by work hyperplan does not manage.
    pub used: Resources,
    /// Where the node's hardware topology comes from, for simulating real machines.
    pub topology: Option<TopologyRef>,
    /// The loaded hardware (from `topology`, or an agent's probe); not read from files.
    pub hardware: Option<crate::topology::SharedTopology>,
}

/// `topology: {hwlocXml: FILE} | {synthetic: "..."} | {probe: FILE}` on a node; paths
/// are resolved against the cluster file's directory.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TopologyRef {
    /// An `lstopo` XML export.
    HwlocXml(PathBuf),
    /// An hwloc synthetic description, e.g. `pack:2 numa:2 core:8 pu:2`.
    Synthetic(String),
    /// A saved `hyperplan-agent probe --format json`.
    Probe(PathBuf),
}

/// A loaded cluster: `hyperNodeFiles` already read and merged into `hyper_nodes`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterSpec {
    pub nodes: Vec<NodeSpec>,
    /// Inline specs first, then those of each `hyperNodeFiles` entry in order.
    pub hyper_nodes: Vec<HyperNodeSpec>,
    /// Volcano's `networkTopologyTypes`: type name → node label keys, top tier first.
    pub label_discovery: BTreeMap<String, Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawCluster {
    #[serde(default)]
    nodes: Vec<RawNode>,
    #[serde(default)]
    hyper_nodes: Vec<RawInlineHyperNode>,
    #[serde(default)]
    hyper_node_files: Vec<Located<String>>,
    #[serde(default)]
    discovery: Option<RawDiscovery>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawNode {
    name: Located<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    /// May be left out when `topology` is given: it is then derived from the topology.
    #[serde(default)]
    resources: Option<Resources>,
    #[serde(default)]
    topology: Option<Located<RawTopology>>,
    /// Located per entry so "used exceeds resources" can point at the amount.
    #[serde(default)]
    used: LocatedResources,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawTopology {
    #[serde(default)]
    hwloc_xml: Option<Located<String>>,
    #[serde(default)]
    synthetic: Option<Located<String>>,
    #[serde(default)]
    probe: Option<Located<String>>,
}

/// Exactly one topology source; a file must exist (relative to the cluster file).
fn topology_ref(raw: Located<RawTopology>, dir: &Path, path: &Path) -> Result<TopologyRef, FileError> {
    let t = &raw.value;
    let file = |entry: &Located<String>, what: &str| -> Result<PathBuf, FileError> {
        let file = dir.join(&entry.value);
        if entry.value.trim().is_empty() || !file.is_file() {
            return Err(located_error(
                path,
                entry,
                format!("{what} file {} does not exist", file.display()),
            ));
        }
        Ok(file)
    };
    match (&t.hwloc_xml, &t.synthetic, &t.probe) {
        (Some(x), None, None) => Ok(TopologyRef::HwlocXml(file(x, "hwloc XML")?)),
        (None, Some(s), None) => {
            if s.value.trim().is_empty() {
                return Err(located_error(
                    path,
                    s,
                    "expected an hwloc synthetic description such as \"pack:2 numa:2 core:8 pu:2\"",
                ));
            }
            Ok(TopologyRef::Synthetic(s.value.clone()))
        }
        (None, None, Some(p)) => Ok(TopologyRef::Probe(file(p, "probe")?)),
        _ => Err(located_error(
            path,
            &raw,
            "expected exactly one of hwlocXml, synthetic or probe",
        )),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawDiscovery {
    /// Volcano's `networkTopologyTypes`: type name → label levels, top tier first.
    #[serde(default)]
    label: BTreeMap<String, Located<Vec<RawLabelLevel>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawLabelLevel {
    node_label: Located<String>,
}

/// Reads a cluster file: nodes, inline HyperNodes, HyperNode manifest files (read
/// relative to the cluster file's directory) and label discovery. Nothing partial is
/// returned: the first problem is the error.
pub fn parse_cluster(text: &str, path: &Path) -> Result<ClusterSpec, FileError> {
    let docs = yaml::parse_documents(text, path)?;
    let doc = match docs.as_slice() {
        [doc] => doc,
        [] => {
            return Err(file_error(
                path,
                yaml::Pos::default(),
                "",
                "expected a cluster (a mapping with `nodes:`), the file is empty",
            ));
        }
        [_, second, ..] => {
            return Err(file_error(
                path,
                second.pos,
                "",
                "expected one YAML document, found a second one",
            ));
        }
    };
    let raw: RawCluster = yaml::from_node(doc, "", path)?;

    let dir = path.parent().unwrap_or(Path::new(""));
    let mut nodes = Vec::with_capacity(raw.nodes.len());
    let mut seen: HashMap<String, u64> = HashMap::with_capacity(raw.nodes.len());
    for node in raw.nodes {
        let name = node.name;
        crate::job::check_located_name(crate::names::NameKind::Node, &name, path)?;
        if let Some(first) = seen.insert(name.value.clone(), name.pos.line) {
            return Err(located_error(
                path,
                &name,
                format!("duplicate node name {:?} (first at line {first})", name.value),
            ));
        }
        let topology = match node.topology {
            Some(t) => Some(topology_ref(t, dir, path)?),
            None => None,
        };
        let resources = match (node.resources, &topology) {
            (Some(r), _) => r,
            (None, Some(_)) => Resources::new(),
            (None, None) => {
                return Err(located_error(
                    path,
                    &name,
                    "expected `resources:` (or a `topology:` to derive them from)",
                ));
            }
        };
        for (resource, amount) in &node.used.0 {
            let capacity = resources.get(resource);
            if amount.value > capacity {
                return Err(located_error(
                    path,
                    amount,
                    format!(
                        "used {resource}={} exceeds the node's {resource}={}",
                        format_quantity(resource, amount.value),
                        format_quantity(resource, capacity)
                    ),
                ));
            }
        }
        nodes.push(NodeSpec {
            name: name.value,
            labels: node.labels,
            resources,
            used: node.used.to_resources(),
            topology,
            hardware: None,
        });
    }

    let mut hyper_nodes = Vec::new();
    for h in raw.hyper_nodes {
        hyper_nodes.push(h.build(path)?);
    }
    for entry in &raw.hyper_node_files {
        let file = dir.join(&entry.value);
        if entry.value.trim().is_empty() {
            return Err(located_error(path, entry, "expected a file name, got an empty string"));
        }
        if !file.is_file() {
            return Err(located_error(
                path,
                entry,
                format!("HyperNode file {} does not exist", file.display()),
            ));
        }
        let text = read_file_text(&file, MAX_CLUSTER_FILE, &format!("HyperNode file {}", file.display()))
            .map_err(|e| located_error(path, entry, e.to_string()))?;
        hyper_nodes.extend(hypernode::parse_manifests_located(&text, &file)?);
    }
    hypernode::check_unique(&hyper_nodes)?;

    let mut label_discovery = BTreeMap::new();
    if let Some(discovery) = raw.discovery {
        for (kind, levels) in discovery.label {
            if levels.value.is_empty() {
                return Err(located_error(
                    path,
                    &levels,
                    "expected at least one {nodeLabel: ...} level",
                ));
            }
            let mut keys = Vec::with_capacity(levels.value.len());
            for level in levels.value {
                if level.node_label.value.trim().is_empty() {
                    return Err(located_error(
                        path,
                        &level.node_label,
                        "expected a label key, got an empty string",
                    ));
                }
                keys.push(level.node_label.value);
            }
            label_discovery.insert(kind, keys);
        }
    }

    Ok(ClusterSpec {
        nodes,
        hyper_nodes: hyper_nodes.into_iter().map(|h| h.spec).collect(),
        label_discovery,
    })
}

/// Reads and parses a cluster file; a file that cannot be read is reported at `0:0`.
pub fn load_cluster_file(path: &Path) -> Result<ClusterSpec, FileError> {
    parse_cluster(&yaml::read_file(path, MAX_CLUSTER_FILE, "cluster file")?, path)
}
