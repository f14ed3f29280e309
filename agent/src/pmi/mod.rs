//! PMI for the ranks this node starts (`mpi: pmi`, or `[exec] defaultMpi = "pmi"`): MPICH,
//! Intel MPI and MVAPICH find each other through it without `mpirun`, as under hydra,
//! Slurm or Flux.
//!
//! Each such task gets one end of a socket pair as `PMI_FD` (private to the task: no port
//! anyone can reach), with `PMI_RANK` and `PMI_SIZE`; the agent serves the other end with
//! the PMI-1 "simple" wire protocol ([`wire`]). A job's key-value space ([`space`]) is
//! per job id on each node; at a fence the node's part goes over the agent's mutual-TLS
//! link to the planner, which answers every node of the job with the pairs of all of
//! them (`FenceDone`), so a job's keys reach only that job's nodes.
//!
//! - [`wire`]: the protocol's lines, parsed and answered (no I/O).
//! - [`mapping`]: `PMI_process_mapping` from the job's ranks and nodes.
//! - [`space`]: one job's keys and barrier on this node (no I/O).
//! - [`hub`]: every job's space, shared by the ranks' connections and the link; bounded
//!   per node and per user, and given back when a job's last rank here ends.
//! - [`conn`]: one rank's connection.
//!
//! An agent restart closes the agent's ends: ranks still wiring up then fail (MPI has
//! no way back into PMI); ranks past `MPI_Init` only notice at `MPI_Finalize`.

pub mod conn;
pub mod hub;
pub mod mapping;
pub mod space;
pub mod wire;

use std::collections::BTreeSet;

use hyperplan_net::messages::JobWorld;

pub use hub::{Hub, PmiTask};
pub use space::JobShape;

/// The job as this node's ranks see it; `None` when `world` places no rank on `node`.
pub fn shape(world: &JobWorld, node: &str) -> Option<JobShape> {
    let here = world.nodes.iter().position(|n| n == node)?;
    let here = u32::try_from(here).ok()?;
    let local: BTreeSet<u32> = world
        .node_of_rank
        .iter()
        .enumerate()
        .filter(|&(_, &n)| n == here)
        .filter_map(|(rank, _)| u32::try_from(rank).ok())
        .collect();
    if local.is_empty() {
        return None;
    }
    let nodes: BTreeSet<u32> = world.node_of_rank.iter().copied().filter(|&n| n != u32::MAX).collect();
    Some(JobShape {
        job: world.job.clone(),
        job_id: world.job_id,
        size: u32::try_from(world.node_of_rank.len()).ok()?,
        local,
        nodes: u32::try_from(nodes.len()).ok()?,
        mapping: mapping::process_mapping(&world.node_of_rank),
    })
}
