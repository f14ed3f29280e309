//! Events the drivers (daemon, simulator) feed into the core; applied by `ingest`.

use std::collections::BTreeMap;

use hyperplan_shared::{HyperNodeSpec, JobSpec, NodeSpec};

use super::components::SourceKind;
pub use super::discovery::Found;

#[derive(Clone, Debug)]
pub enum Event {
    /// A node appears (or its spec changes: same name replaces).
    NodeUp(NodeSpec),
    NodeGone {
        name: String,
    },
    /// A node stopped (or resumed) heartbeating: while not ready it keeps its running
    /// tasks but is no candidate for new ones.
    NodeReady {
        name: String,
        ready: bool,
    },
    /// The static HyperNodes (inline + manifest files) as a whole; replaces the previous set.
    StaticHyperNodes(Vec<HyperNodeSpec>),
    /// Label discovery configuration (Volcano `networkTopologyTypes`); replaces the previous.
    LabelDiscovery(BTreeMap<String, Vec<String>>),
    /// A polled discovery source exists (people see it before its first poll). `target`
    /// says what it reads (files, a command, a URL).
    DeclareSource {
        source: String,
        kind: SourceKind,
        target: String,
    },
    /// What one poll of a source gave, at `at` (Unix seconds, the driver's clock). An
    /// `Err` keeps the source's last good HyperNodes and is reported; an `Ok` replaces
    /// them (only this source's).
    Discovered {
        source: String,
        kind: SourceKind,
        at: u64,
        result: Result<Found, String>,
    },
    Submit(JobSpec),
    Cancel {
        job: String,
    },
    TaskFinished {
        job: String,
        task: String,
    },
}
