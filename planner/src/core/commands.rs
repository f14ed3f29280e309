//! Commands the core returns from a tick; the drivers carry them out.

/// One placed task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub job: String,
    pub task: String,
    pub node: String,
    pub rank: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// A task is placed: launch it (the simulator schedules its completion).
    Place(Placement),
    /// A job can never run; `reason` says why.
    Reject { job: String, reason: String },
    /// Something a working planner survives (a broken HyperNode, an unknown tier name).
    Warn(String),
}
