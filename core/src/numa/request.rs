//! What a task asks of the NUMA allocator, from its spec and the planner's default policy.
//!
//! - A policy other than `none`: exclusive whole PUs (kubelet's static CPU policy), memory
//!   from the chosen NUMA nodes, GPUs aligned with them.
//! - `none` with GPUs: specific GPUs (like kubelet's device manager), CPUs from the shared
//!   pool, nothing aligned.
//! - `none` without GPUs: nothing to pin; the allocator skips NUMA work entirely.

use hyperplan_shared::TaskSpec;

use super::assign::TaskNuma;
use super::cpus::CpuPlacement;
use super::hints::{Policy, UnknownPolicy};
use super::node::gpus_requested;

/// Why a task spec makes no NUMA request; each names the field and says what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NumaRequestError {
    /// `topologyPolicy` names no policy.
    #[error(transparent)]
    Policy(#[from] UnknownPolicy),
    /// `cpuPlacement` is neither `packed` nor `spread` (the text).
    #[error("cpuPlacement: expected packed or spread, got {0:?}")]
    Placement(String),
    /// `cpu` is not whole under a policy that pins PUs.
    #[error("resources.cpu: {why} ({origin} is {policy})")]
    NotWholeCpus {
        /// How it is not whole.
        why: String,
        /// Where the policy came from: the task's own or the planner's default.
        origin: &'static str,
        /// The policy that pins PUs.
        policy: Policy,
    },
}

/// The NUMA request of one task spec; `Err` names the field and says what is wrong.
pub fn task_numa(spec: &TaskSpec, default_policy: Policy) -> Result<Option<TaskNuma>, NumaRequestError> {
    let policy = match &spec.topology_policy {
        Some(p) => p.parse::<Policy>()?,
        None => default_policy,
    };
    let placement = match spec.cpu_placement.as_deref() {
        None | Some("packed") => CpuPlacement::Packed,
        Some("spread") => CpuPlacement::Spread,
        Some(other) => return Err(NumaRequestError::Placement(other.to_string())),
    };
    let gpus = gpus_requested(&spec.resources);
    if policy == Policy::None {
        return Ok((gpus > 0).then_some(TaskNuma {
            policy,
            cpus: 0,
            memory: 0,
            gpus,
            placement,
            full_cores: false,
        }));
    }
    if let Some(why) = hyperplan_shared::job::whole_cpu_problem(policy.as_str(), &spec.resources) {
        let origin = if spec.topology_policy.is_some() {
            "its topologyPolicy"
        } else {
            "the planner's default topology policy"
        };
        return Err(NumaRequestError::NotWholeCpus { why, origin, policy });
    }
    Ok(Some(TaskNuma {
        policy,
        cpus: (spec.resources.get(hyperplan_shared::CPU) / 1000) as usize,
        memory: spec.resources.get(hyperplan_shared::MEMORY),
        gpus,
        placement,
        full_cores: spec.full_cores,
    }))
}
