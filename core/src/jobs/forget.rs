//! Ended jobs leave memory. A job that finished, failed, was cancelled or was rejected for
//! good stays in the world, where `status` and `logs` find it, while it is among the
//! newest `[limits] maxEndedJobsPerUser` of its owner, while the tasks of the ended jobs
//! kept stay within `maxEndedTasks`, and (in the daemon) for at most `[store]
//! keepFinished` after its end; then it goes, oldest first: the job, its sub-jobs and its
//! tasks are despawned. Its record stays in the store, where `status --all` and `--since`
//! read it, as they do after a restart. So one user's history cannot fill the planner's
//! memory, nor push everyone else's out of it.
//!
//! Only a planner that keeps records forgets (the daemon's, see `persist`): the
//! simulator's report needs every job. Last in a tick, after `persist`, so a job's final
//! record is written before it goes.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use bevy_ecs::entity::EntityHashMap;
use bevy_ecs::prelude::*;

use crate::config::PlannerConfig;
use crate::jobs::ownership::is_live;
use crate::model::arrays::Arrays;
use crate::model::components::{Job, JobId, JobOwner, JobState};
use crate::model::tick::Now;
use crate::names::{JobIds, JobNames};

/// (when it ended in Unix seconds, its id, the job): the order jobs are let go in.
type Key = (u64, u64, Entity);

/// The ended jobs the world keeps, oldest first, per owner and in all.
#[derive(Resource, Debug, Default)]
pub struct Kept {
    all: BTreeSet<Key>,
    by_owner: HashMap<Arc<str>, BTreeSet<Key>>,
    /// Per kept job: its owner, key and the tasks it counts.
    jobs: EntityHashMap<(Arc<str>, Key, u64)>,
    /// Tasks of the kept jobs, a job with none counting one.
    tasks: u64,
}

impl Kept {
    /// Keeps `key`'s job of `owner`, counting `tasks`; `false` when it was kept already.
    fn add(&mut self, owner: &Arc<str>, key: Key, tasks: u64) -> bool {
        if self.jobs.contains_key(&key.2) {
            return false;
        }
        self.all.insert(key);
        self.by_owner.entry(owner.clone()).or_default().insert(key);
        self.jobs.insert(key.2, (owner.clone(), key, tasks));
        self.tasks = self.tasks.saturating_add(tasks);
        true
    }

    /// Lets job `e` go; whether it was kept.
    fn remove(&mut self, e: Entity) -> bool {
        let Some((owner, key, tasks)) = self.jobs.remove(&e) else {
            return false;
        };
        self.all.remove(&key);
        if let Some(set) = self.by_owner.get_mut(&owner) {
            set.remove(&key);
            if set.is_empty() {
                self.by_owner.remove(&owner);
            }
        }
        self.tasks = self.tasks.saturating_sub(tasks);
        true
    }

    /// The ended jobs kept, in all.
    pub fn len(&self) -> usize {
        self.all.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// The ended jobs of `owner` kept.
    pub fn of_owner(&self, owner: &str) -> usize {
        self.by_owner.get(owner).map_or(0, BTreeSet::len)
    }

    /// Tasks of the ended jobs kept (a job with none counting one).
    pub fn tasks(&self) -> u64 {
        self.tasks
    }
}

/// Keeps the jobs that ended in this tick, then lets the oldest go past the limits (see
/// the module).
pub(crate) fn forget(
    ended: Query<(Entity, &Job, &JobState, &JobOwner, &JobId), Changed<JobState>>,
    jobs: Query<(&Job, &JobId)>,
    mut kept: ResMut<Kept>,
    (mut names, mut ids, mut arrays): (ResMut<JobNames>, ResMut<JobIds>, ResMut<Arrays>),
    config: Res<PlannerConfig>,
    now: Res<Now>,
    mut commands: Commands,
) {
    let limits = config.limits;
    // Owners with a job kept in this tick: only they can be over their limit (all of
    // them after a reload, which may have lowered it).
    let mut owners: Vec<Arc<str>> = Vec::new();
    for (e, job, st, owner, id) in &ended {
        if is_live(st) {
            continue;
        }
        let at = st.end_time.unwrap_or(job.spec.submit_time);
        if kept.add(&owner.0, (at, id.0, e), job.tasks.len().max(1) as u64) {
            owners.push(owner.0.clone());
        }
    }
    if config.is_changed() {
        owners = kept.by_owner.keys().cloned().collect();
    }
    let mut gone: Vec<Entity> = Vec::new();
    owners.sort_unstable();
    owners.dedup();
    for owner in owners {
        loop {
            let oldest = kept
                .by_owner
                .get(&owner)
                .filter(|set| set.len() as u64 > limits.max_ended_jobs_per_user)
                .and_then(|set| set.first().copied());
            let Some((_, _, e)) = oldest else { break };
            kept.remove(e);
            gone.push(e);
        }
    }
    let cutoff = limits.keep_ended_secs.map(|keep| now.secs().saturating_sub(keep));
    while let Some(&(at, _, e)) = kept.all.first()
        && (kept.tasks > limits.max_ended_tasks || cutoff.is_some_and(|c| at < c))
    {
        kept.remove(e);
        gone.push(e);
    }
    if gone.is_empty() {
        return;
    }
    let _span = tracing::info_span!("forget", jobs = gone.len()).entered();
    for e in gone {
        if let Ok((job, &id)) = jobs.get(e) {
            for &part in job.tasks.iter().chain(&job.sub_jobs) {
                commands.entity(part).try_despawn();
            }
            // The name now means the stored job (or a newer one of that name).
            if names.0.get(&job.spec.name) == Some(&e) {
                names.0.remove(&job.spec.name);
            }
            crate::jobs::arrays::unregister(&mut ids, &mut arrays, e, job, id);
        }
        commands.entity(e).try_despawn();
    }
}
