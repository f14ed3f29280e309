//! Events the drivers (daemon, simulator) feed into the core; applied by `ingest`.

use std::collections::BTreeMap;

use hyperplan_shared::{HyperNodeSpec, JobSpec, NodeSpec};

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
    Submit(JobSpec),
    Cancel {
        job: String,
    },
    TaskFinished {
        job: String,
        task: String,
    },
}
