//! A new `[[queue]]`, `[fairshare]`, `[priority]`, `[scheduler]`, `[[reservation]]`,
//! `[preemption]` and `[[priorityClass]]` taken while the
//! planner runs (SIGHUP): the queue table is rebuilt and renumbered, every live job finds
//! its queue again by name, use is counted again (`account`), usage follows its queue by
//! name (`fairshare`), and every waiting job is ranked again (`order`). A queue that
//! still has live jobs may not go: the reload is refused and the old queues stay.

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
        {
            let mut config = world.resource_mut::<PlannerConfig>();
            config.queues = new.queues.clone();
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
