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
    /// Finished HyperNodes (static manifests, UFM, Slurm), as the source gave them.
    HyperNodes(Vec<HyperNodeSpec>),
    /// An `ibnetdiscover` dump, tiered in the core whenever the agents' GUIDs name it anew.
    Fabric {
        /// The parsed dump.
        fabric: Arc<IbFabric>,
        /// The GUID map file's contents: the host names after the agents' own.
        map_file: GuidMap,
    },
}

/// One source's state. Fields other than `good` are derived from it or are status.
#[derive(Clone, Debug)]
pub struct SourceState {
    /// What sort of source it is (label, static, ibnetdiscover, UFM, Slurm).
    pub kind: SourceKind,
    /// What it reads, for people (files, a command, a URL); empty until declared.
    pub target: String,
    /// When it was last polled (Unix seconds, the driver's clock); None: not yet.
    pub last_attempt: Option<u64>,
    /// When a poll last worked (Unix seconds); None: never.
    pub last_success: Option<u64>,
    /// Why the last poll (or tiering) failed; None: it worked, or there was none yet.
    pub error: Option<SourceError>,
    /// The last good input; None: no poll has worked yet.
    pub good: Option<Good>,
    /// Its HyperNodes as the source sees them, before hosts that are no node are left out.
    pub discovered: Vec<HyperNodeSpec>,
    /// One line for people on what the last good input held; empty before one.
    pub summary: String,
    /// What the source tolerated in its last good input; for a dump, also GUIDs two nodes report.
    pub warnings: Vec<String>,
    /// Fabric CAs nothing names (`H-<guid> "description"`).
    pub unmapped: Vec<String>,
    /// Per HyperNode it made: links below their neighbours' rate (a dump's; see
    /// `hyperplan_fabric::links`).
    pub links: BTreeMap<String, Vec<String>>,
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
    /// A source of `kind` reading `target` that has not been polled yet.
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
            links: BTreeMap::new(),
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
    /// The node-set generation the map was built at; None: never built.
    pub generation: Option<u64>,
    /// Each reported GUID (node or port) to the node that reports it.
    pub map: GuidMap,
    /// GUIDs two nodes report (cloned sysfs, a moved HCA): the first by name keeps it.
    pub conflicts: Vec<String>,
}
