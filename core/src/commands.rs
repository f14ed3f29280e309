//! Commands the core returns from a tick; the drivers carry them out.

use std::sync::Arc;

/// One placed task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub job: String,
    pub task: String,
    pub node: String,
    pub rank: u32,
    /// What to run (the task spec's `command`).
    pub command: Vec<String>,
    /// Where a task with a NUMA request is pinned (what the agent enforces).
    pub pinning: Option<Pinning>,
}

/// A task's NUMA pinning in the agent's terms: OS indexes and device names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pinning {
    /// PU OS indexes in list form (`0-3,8-11`); empty = the node's shared pool.
    pub cpus: String,
    pub numa_nodes: Vec<u32>,
    /// (NUMA OS index, bytes).
    pub memory: Vec<(u32, u64)>,
    /// Shared with the node's hardware description (see `NodeNuma::gpu_ids`).
    pub gpus: Vec<Arc<str>>,
    pub nics: Vec<Arc<str>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// A task is placed: launch it (the simulator schedules its completion).
    Place(Placement),
    /// A job can never run; `reason` says why.
    Reject { job: String, reason: String },
    /// Something a working planner survives (a broken HyperNode, an unknown tier name, a
    /// discovery source that failed).
    Warn(String),
    /// Worth a log line, nothing to do (a discovery source that works again).
    Info(String),
    /// A node turned Ready or NotReady, and why (the daemon logs it; the simulator's
    /// nodes have no link and never change).
    NodeHealth {
        node: String,
        ready: bool,
        why: HealthChange,
    },
}

/// Why a node's readiness changed (see `core::health`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealthChange {
    /// Its agent registered: Ready.
    Registered,
    /// A heartbeat after the node was NotReady: Ready.
    HeartbeatAgain,
    /// Nothing heard for `silent_ms`, more than `missed` heartbeat intervals: NotReady.
    Silent { silent_ms: u64, missed: u32 },
    /// Its agent's link closed: NotReady.
    LinkClosed,
}
