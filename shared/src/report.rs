//! The placement report `hyperplan simulate` prints (and the daemon's status replies carry).
//! Field names are an interface: scripts and tests depend on them.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    /// The gang minimum is placed (it may since have finished).
    Placed,
    /// Could run later; `reason` says why not now.
    Pending,
    /// Can never run, even on the empty cluster; `reason` says why.
    Rejected,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskReport {
    pub name: String,
    pub rank: Option<u32>,
    pub sub_job: String,
    pub node: Option<String>,
    /// The node's HyperNodes from the lowest tier up, the virtual root left out.
    pub hyper_nodes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobReport {
    pub name: String,
    pub status: JobStatus,
    pub reason: Option<String>,
    pub submit_time: u64,
    pub start_time: Option<u64>,
    pub end_time: Option<u64>,
    pub allocated_hyper_node: Option<String>,
    pub tasks: Vec<TaskReport>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub placed: u32,
    pub pending: u32,
    pub rejected: u32,
    pub makespan: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub jobs: Vec<JobReport>,
    pub summary: Summary,
    /// Problems a working planner survives: broken HyperNodes, unknown tier names.
    #[serde(default)]
    pub warnings: Vec<String>,
}
