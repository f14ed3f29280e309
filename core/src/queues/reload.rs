//! A new `[[queue]]`, `[[account]]`, `[fairshare]`, `[priority]`, `[scheduler]`, `[[reservation]]`,
//! `[preemption]` and `[[priorityClass]]` taken while the
//! planner runs (SIGHUP): the queue table is rebuilt and renumbered, every live job finds
//! its queue again by name, use is counted again (`account`), usage follows its queue by
//! name (`fairshare`), and every waiting job is ranked again (`order`). A queue that
//! still has live jobs may not go, nor an `[[account]]` live jobs are charged to (while
//! any account stays configured): the reload is refused and the old policy stays.

use bevy_ecs::prelude::*;

use super::QueueTable;
use crate::Planner;
use crate::config::{DEFAULT_QUEUE, PlannerConfig};
use crate::model::components::{Job, JobQueue, JobState};

/// Why new queues were not taken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReloadRefused {
    /// A queue that would go still has jobs that have not ended.
    #[error(
        "queue {queue:?} is not in the new configuration but still has {jobs} live job(s) (e.g. {example}); keeping the old queues until they end or are cancelled"
    )]
    QueueInUse {
        /// The queue.
        queue: String,
        /// How many live jobs it has.
        jobs: usize,
        /// One of them.
        example: String,
    },
    /// An account that would go still has jobs charged to it that have not ended.
    #[error(
        "account {account:?} is not in the new configuration but still has {jobs} live job(s) charged to it (e.g. {example}); keeping the old policy until they end or are cancelled"
    )]
    AccountInUse {
        /// The account.
        account: String,
        /// How many live jobs are charged to it.
        jobs: usize,
        /// One of them.
        example: String,
    },
}

impl Planner {
    /// Takes the policy sections of `new` (queues, fair share, priority, scheduler); the
    /// rest of the running configuration stays. Refused, changing nothing, when a queue
    /// that still has live jobs would go.
    pub fn reload_policy(&mut self, new: &PlannerConfig) -> Result<(), ReloadRefused> {
        let world = self.world_mut();
        let mut gone: Vec<(String, usize, String)> = Vec::new();
        let mut q = world.query::<(&Job, &JobState)>();
        for (job, st) in q.iter(world) {
            if !st.is_live() {
                continue;
            }
            let name = job.spec.queue.as_deref().unwrap_or(DEFAULT_QUEUE);
            if name != DEFAULT_QUEUE && !new.queues.iter().any(|c| c.name == name) {
                match gone.iter_mut().find(|(n, _, _)| n == name) {
                    Some(g) => g.1 += 1,
                    None => gone.push((name.to_string(), 1, job.spec.name.clone())),
                }
            }
        }
        gone.sort();
        if let Some((queue, jobs, example)) = gone.into_iter().next() {
            return Err(ReloadRefused::QueueInUse { queue, jobs, example });
        }
        // Accounts: only while some stay configured (with none, an account is free text).
        let old = &world.resource::<PlannerConfig>().accounts;
        if !new.accounts.is_empty() {
            let mut gone: std::collections::BTreeMap<String, (usize, String)> = std::collections::BTreeMap::new();
            for (job, st) in q.iter(world) {
                let Some(a) = job.spec.account.as_deref().filter(|_| st.is_live()) else {
                    continue;
                };
                if old.find(a).is_some() && new.accounts.find(a).is_none() {
                    let g = gone.entry(a.to_string()).or_insert((0, job.spec.name.clone()));
                    g.0 += 1;
                    g.1 = g.1.clone().min(job.spec.name.clone());
                }
            }
            if let Some((account, (jobs, example))) = gone.into_iter().next() {
                return Err(ReloadRefused::AccountInUse { account, jobs, example });
            }
        }
        {
            let mut config = world.resource_mut::<PlannerConfig>();
            config.queues = new.queues.clone();
            config.accounts = new.accounts.clone();
            config.fairshare = new.fairshare.clone();
            config.priority = new.priority.clone();
            config.scheduler = new.scheduler;
            config.maintenance = new.maintenance.clone();
            // A class a live job names may go: the job then has value 0 and may be
            // preempted (see `PreemptionConfig::of`).
            config.preemption = new.preemption.clone();
        }
        let generation = world.resource::<QueueTable>().generation + 1;
        let table = QueueTable::new(world.resource::<PlannerConfig>(), generation);
        let mut q = world.query::<(&Job, &mut JobQueue)>();
        for (job, mut jq) in q.iter_mut(world) {
            if let Some(i) = table.of_spec(job.spec.queue.as_deref()) {
                jq.queue = i;
            }
        }
        world.insert_resource(table);
        Ok(())
    }
}
