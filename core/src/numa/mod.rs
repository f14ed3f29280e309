//! NUMA allocation: topology-manager hints and their merge under the four policies
//! (current kubelet semantics, volcano-semantics.md §8.6), kubelet's CPU assignment
//! (`takeByTopology`, packed or spread, optionally whole cores), GPUs and rails aligned
//! with the CPUs, and the per-node free state the allocate system takes from.
//!
//! The algorithms (`hints`, `cpus`, `assign`) are pure: a [`NumaMachine`] describes one
//! node's hardware with dense indices, a [`NumaFree`] what is free on it. `node` and
//! `state` hold them per node for the ECS; `request` reads a task's policy.

pub mod assign;
pub mod cpus;
pub mod hints;
mod machine;
pub mod node;
mod puset;
pub mod request;
pub mod state;

pub use machine::{GpuInfo, NumaFree, NumaMachine, NumaMask, PuInfo};
pub use puset::PuSet;
