//! Discovery sources as the core keeps them: per source its last good input, the
//! HyperNodes made from it, and what people see of it (when it last worked, its error).
//!
//! A failed poll changes only the status: the last good input stays, and so do the
//! HyperNodes made from it.

use std::collections::BTreeMap;
use std::sync::Arc;

use bevy_ecs::prelude::Resource;
use hyperplan_fabric::{GuidMap, IbFabric};
use hyperplan_shared::HyperNodeSpec;

use crate::model::components::SourceKind;
use crate::model::discovered::SourceError;

/// The last good input of a source.
#[derive(Clone, Debug)]
pub enum Good {
    HyperNodes(Vec<HyperNodeSpec>),
    Fabric { fabric: Arc<IbFabric>, map_file: GuidMap },
}

/// One source's state. Fields other than `good` are derived from it or are status.
#[derive(Clone, Debug)]
pub struct SourceState {
    pub kind: SourceKind,
    pub target: String,
    pub last_attempt: Option<u64>,
    pub last_success: Option<u64>,
    pub error: Option<SourceError>,
    pub good: Option<Good>,
    /// Its HyperNodes as the source sees them, before hosts that are no node are left out.
    pub discovered: Vec<HyperNodeSpec>,
    pub summary: String,
    pub warnings: Vec<String>,
    /// Fabric CAs nothing names (`H-<guid> "description"`).
    pub unmapped: Vec<String>,
    /// Hosts the source names that are no planner node.
    pub unknown_hosts: Vec<String>,
    /// A new good input arrived: tier (fabric), filter and reconcile again.
    pub changed: bool,
    /// Per CA of the dump (in dump order), the node its GUIDs were reported by when the
    /// fabric was last tiered; tiering again is needed only when this changes.
    pub tiered_with: Option<Vec<Option<String>>>,
    /// The node-set generation its HyperNodes were last filtered against.
    pub filtered_at: Option<u64>,
}

impl SourceState {
    pub fn new(kind: SourceKind, target: String) -> Self {
        Self {
            kind,
            target,
            last_attempt: None,
            last_success: None,
            error: None,
            good: None,
            discovered: Vec::new(),
            summary: String::new(),
            warnings: Vec::new(),
            unmapped: Vec::new(),
            unknown_hosts: Vec::new(),
            changed: false,
            tiered_with: None,
            filtered_at: None,
        }
    }
}

/// Every source by name (name order is the order they are reconciled and listed in).
#[derive(Debug, Default, Resource)]
pub struct Sources(pub BTreeMap<String, SourceState>);

/// GUID → node, from the HCAs agents report; rebuilt when the node set changes.
#[derive(Debug, Default, Resource)]
pub struct ReportedGuids {
    pub generation: Option<u64>,
    pub map: GuidMap,
    /// GUIDs two nodes report (cloned sysfs, a moved HCA): the first by name keeps it.
    pub conflicts: Vec<String>,
}
