//! The retire system, last in a tick: a job that ended in this tick (finished or
//! cancelled; an ending job is not: its tasks still hold resources) is marked `Retired`, with its sub-jobs and tasks, after the resource caches
//! gave back what it held. The per-tick scans (resource cache, recover, allocate,
//! dispatch) skip retired entities — bevy iterates only the archetypes that match — so
//! a planner that has run for months pays per tick for what is live, not for its
//! history. Views and events that name a job still find it.

use bevy_ecs::prelude::*;

use crate::model::components::{Job, JobPhase, JobState, LiveChanged, Retired};

pub(crate) fn retire(mut commands: Commands, jobs: Query<(Entity, &Job, &JobState), LiveChanged<JobState>>) {
    let _span = tracing::info_span!("retire").entered();
    for (e, job, st) in &jobs {
        if matches!(st.phase, JobPhase::Finished | JobPhase::Cancelled) {
            commands.entity(e).insert(Retired);
            for &sj in &job.sub_jobs {
                commands.entity(sj).insert(Retired);
            }
            for &t in &job.tasks {
                commands.entity(t).insert(Retired);
            }
        }
    }
}
