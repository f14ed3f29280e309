//! NUMA allocation (issue 4, in progress): the pure algorithms the allocate system will
//! call per candidate node — topology-manager hints and their merge under the four
//! policies (current kubelet semantics, volcano-semantics.md §8.6), and kubelet's CPU
//! assignment (`takeByTopology`, packed or spread, optionally whole cores).
//!
//! Nothing here touches the ECS: a [`NumaMachine`] describes one node's hardware with
//! dense indices, a [`NumaFree`] what is free on it, and the functions answer "which
//! NUMA nodes, which PUs, which GPUs".

pub mod assign;
pub mod cpus;
pub mod hints;
mod machine;

pub use machine::{GpuInfo, NumaFree, NumaMachine, NumaMask, PuInfo};
