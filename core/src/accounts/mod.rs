//! Accounts (`[[account]]`, Slurm's accounts): every job is charged to one. The account is
//! resolved and checked at submit ([`check`]), what each account and everything below it
//! runs is counted with the queues' use ([`usage`], kept by the queues' `account` system
//! and by the allocator as it commits), and the quotas (`maxRunningJobs`, `maxCpus`,
//! `maxGpus`) keep a job waiting, saying which, as a queue's limits do ([`quota`]).

pub mod check;
pub mod quota;
pub mod usage;

use hyperplan_shared::Resources;

/// GPUs in a request: every resource named `VENDOR/gpu` (`nvidia.com/gpu`, `amd.com/gpu`).
pub fn gpus(r: &Resources) -> u64 {
    r.iter()
        .filter(|(name, _)| name.ends_with("/gpu"))
        .fold(0u64, |n, (_, v)| n.saturating_add(v))
}
