//! What one poll of a discovery source found ([`Found`]), or why it failed
//! ([`SourceError`]).
//!
//! The daemon's pollers say which kind of failure it was;
//! the core keeps the source's last good HyperNodes, shows the text, and reports a failure
//! that repeats with the same text once.

use std::sync::Arc;

use hyperplan_fabric::{FabricError, GuidMap, IbFabric};
use hyperplan_shared::HyperNodeSpec;

/// What one poll of a source found. The daemon reads and parses; the core tiers a
/// fabric (it knows the agents' HCA GUIDs) and reconciles.
#[derive(Clone, Debug)]
pub enum Found {
    /// The input is what it was at the last good poll: nothing to redo.
    Unchanged,
    /// Finished HyperNodes (static manifests, UFM, Slurm).
    HyperNodes {
        /// The HyperNodes it defines.
        specs: Vec<HyperNodeSpec>,
        /// What the source tolerated (skipped records, a broken `Switches=` cycle).
        warnings: Vec<String>,
        /// What it held, for people.
        summary: String,
        /// Links below their neighbours' rate (UFM's `active_width`/`active_speed`),
        /// each naming its HyperNode; empty for sources that do not see links.
        degraded_links: Vec<hyperplan_fabric::links::DegradedLink>,
    },
    /// A parsed `ibnetdiscover` dump (with at least one switch) and the GUID map file's
    /// contents; tiered here with the agents' GUIDs as the first host map.
    Fabric {
        /// The parsed dump.
        fabric: Arc<IbFabric>,
        /// GUID → host names from the source's map file (empty without one).
        map_file: GuidMap,
    },
}

/// Why one poll of a source failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// Nothing could be read: a missing or unreadable file, a command that failed or timed
    /// out, UFM unreachable or refusing the credentials. The text names what and why.
    #[error("{0}")]
    Unreadable(String),
    /// What was read is not what the source takes: a truncated dump, a dump without
    /// switches, a bad manifest or topology.conf. The text names the file and line.
    #[error("{0}")]
    Invalid(String),
    /// The dump parsed but could not be tiered into HyperNodes.
    #[error(transparent)]
    Tiering(#[from] FabricError),
}
