//! The placement report `hyperplan simulate` prints (and the daemon's status replies carry).
//! Field names are an interface: scripts and tests depend on them.

use std::collections::BTreeMap;

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
    /// Cancelled (before or after it was placed); its name is free again.
    Cancelled,
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
    /// Exclusive PUs (OS indexes in list form, `0-3,8-11`), for a task with a NUMA policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
    /// OS indexes of the NUMA nodes the task uses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub numa_nodes: Vec<u32>,
    /// Bytes of memory per NUMA node (OS index).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub memory_numa: BTreeMap<u32, u64>,
    /// PCI bus ids (`0000:3b:00.0`; an index on nodes described only by resources).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<String>,
    /// RDMA devices and fast NICs local to the task's GPUs (or CPUs), shared: `mlx5_0`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nics: Vec<String>,
    /// Where the task runs on its node ([`crate::JobSpec::working_dir`]); the
    /// simulator has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobReport {
    /// The number the planner gave the job at submit (1, 2, …): tells jobs of one name
    /// apart once an ended job's name is used again.
    #[serde(default)]
    pub id: u64,
    pub name: String,
    pub status: JobStatus,
    pub reason: Option<String>,
    pub submit_time: u64,
    pub start_time: Option<u64>,
    pub end_time: Option<u64>,
    pub allocated_hyper_node: Option<String>,
    /// Who submitted it (they and admins may cancel it); `sim` in the simulator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
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
