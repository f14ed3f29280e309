//! The cluster file: nodes, inline HyperNodes, HyperNode manifest files, label discovery.

use std::collections::BTreeMap;

use crate::hypernode::HyperNodeSpec;
use crate::resources::Resources;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub resources: Resources,
    /// Already taken by work hyperplan does not manage.
    pub used: Resources,
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
