//! A rejected job keeps only what people need to see why: its spec (a few hundred bytes
//! however many replicas it asks for), owner, id, queue, state and reason. The allocator
//! rejects a job that could not run even on the empty cluster and looks at it again when
//! the cluster changes (in the daemon nodes register after people submit), so such a job
//! stays; but between those looks its sub-jobs and tasks, an entity per replica (100,000
//! for one job), would hold memory for nothing. `shed` despawns them at the end of the
//! tick that rejected it (its stored record then lists no task either), and `revive`
//! spawns them again from the spec just before the walk that looks at it again.

use bevy_ecs::prelude::*;

use crate::model::components::{Job, JobPhase, JobState, LiveChanged};
use crate::topology::TopologyIndex;

/// On a rejected job whose sub-jobs and tasks `shed` despawned.
#[derive(Component, Clone, Copy, Debug, Default)]
pub struct Shed;

/// After the walk (and the preemptions, which look only at waiting jobs): each job
/// rejected in this tick lets go of its sub-jobs and tasks, none of them placed (only a
/// pending job is rejected).
pub(crate) fn shed(mut jobs: Query<(Entity, &mut Job, &JobState), LiveChanged<JobState>>, mut commands: Commands) {
    let _span = tracing::info_span!("shed").entered();
    for (e, mut job, st) in &mut jobs {
        if st.phase != JobPhase::Rejected || (job.tasks.is_empty() && job.sub_jobs.is_empty()) {
            continue;
        }
        let tasks = std::mem::take(&mut job.tasks);
        let sub_jobs = std::mem::take(&mut job.sub_jobs);
        job.partition_groups = Vec::new();
        for part in tasks.into_iter().chain(sub_jobs) {
            commands.entity(part).try_despawn();
        }
        commands.entity(e).insert(Shed);
    }
}

/// Before the walk, once the topology index is built: a shed job the walk will look at
/// again (rejected on another topology than this one) gets its sub-jobs and tasks back,
/// pending, from its spec. Costs nothing while the topology stays the same.
pub(crate) fn revive(world: &mut World, mut seen: Local<Option<u64>>) {
    let generation = world.resource::<TopologyIndex>().feasibility;
    if *seen == Some(generation) {
        return;
    }
    *seen = Some(generation);
    let mut q = world.query_filtered::<(Entity, &JobState), With<Shed>>();
    // (job, whether it gets its parts back): a rejected one looked at again does; one
    // that is no longer rejected (cancelled meanwhile) only loses the mark.
    let todo: Vec<(Entity, bool)> = q
        .iter(world)
        .filter_map(|(e, st)| {
            let rejected = st.phase == JobPhase::Rejected;
            let again = rejected && st.checked_generation.is_some_and(|g| g != generation);
            (again || !rejected).then_some((e, again))
        })
        .collect();
    if todo.is_empty() {
        return;
    }
    let _span = tracing::info_span!("revive", jobs = todo.len()).entered();
    for (e, again) in todo {
        world.entity_mut(e).remove::<Shed>();
        if !again {
            continue;
        }
        let Some(spec) = world.get::<Job>(e).map(|j| j.spec.clone()) else {
            continue;
        };
        let parts = crate::jobs::admit::spawn_parts(world, e, &spec);
        if let Some(mut job) = world.get_mut::<Job>(e) {
            job.sub_jobs = parts.sub_jobs;
            job.tasks = parts.tasks;
            job.partition_groups = parts.partition_groups;
        }
    }
}
