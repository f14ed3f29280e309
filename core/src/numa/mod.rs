//! NUMA allocation: topology-manager hints and their merge under the four policies
//! (current kubelet semantics, volcano-semantics.md §8.6), kubelet's CPU assignment
//! (`takeByTopology`, packed or spread, optionally whole cores), GPUs and rails aligned
//! with the CPUs.
//!
//! A plain library below the model: no system, no topology. The algorithms (`hints`,
//! `cpus`, `assign`) are pure: a [`NumaMachine`] describes one node's hardware with
//! dense indices, a [`NumaFree`] what is free on it. `node` holds them per node for the
//! ECS; `request` reads a task's policy. The per-node free state the allocator takes
//! from is a cache (`cache::numa`).

pub mod assign;
pub mod cpus;
pub mod hints;
mod machine;
pub mod node;
mod puset;
pub mod request;

pub use machine::{GpuInfo, NumaFree, NumaMachine, NumaMask, PuInfo};
pub use puset::PuSet;
