//! Job specs: hyperplan's own job file and Volcano `batch.volcano.sh/v1alpha1` Jobs.

use crate::resources::Resources;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopologyMode {
    Hard,
    Soft,
}

/// `networkTopology: {mode, highestTierAllowed | highestTierName}`. At most one of the two
/// limits is set (the loader rejects both).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkTopology {
    pub mode: TopologyMode,
    pub highest_tier_allowed: Option<u32>,
    pub highest_tier_name: Option<String>,
}

/// `partitionPolicy`: the task's replicas split into `total_partitions` partitions of
/// `partition_size`; the gang needs `min_partitions` whole partitions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionPolicy {
    pub total_partitions: u32,
    pub partition_size: u32,
    pub min_partitions: u32,
    pub network_topology: Option<NetworkTopology>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskSpec {
    pub name: String,
    pub replicas: u32,
    /// Seconds each replica runs for, used by `simulate`; `None` runs until cancelled.
    pub runtime: Option<u64>,
    /// Per replica.
    pub resources: Resources,
    pub partition_policy: Option<PartitionPolicy>,
    /// NUMA topology policy (`none`, `best-effort`, `restricted`, `single-numa-node`).
    pub topology_policy: Option<String>,
    pub command: Vec<String>,
}

/// A validated job: replicas match partitions, `min_available` ≤ replicas, names unique.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSpec {
    pub name: String,
    pub priority: i32,
    /// Gang minimum; `None` = every replica (partitioned tasks count
    /// `min_partitions × partition_size`).
    pub min_available: Option<u32>,
    pub submit_time: u64,
    pub network_topology: Option<NetworkTopology>,
    pub tasks: Vec<TaskSpec>,
}

impl JobSpec {
    pub fn replicas(&self) -> u32 {
        self.tasks.iter().map(|t| t.replicas).sum()
    }

    /// The gang minimum the planner enforces.
    pub fn gang_minimum(&self) -> u32 {
        self.min_available.unwrap_or_else(|| {
            self.tasks
                .iter()
                .map(|t| match &t.partition_policy {
                    Some(p) if p.min_partitions > 0 => p.min_partitions * p.partition_size,
                    _ => t.replicas,
                })
                .sum()
        })
    }
}
