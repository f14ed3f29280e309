//! How the simulator (and the tests that drive a planner as it does) submits a job of its
//! files: through [`Planner::submit`], the call the daemon makes, so a job gets its id,
//! its checks and its entities the one way, at once (no event queued for the next tick,
//! no id predicted for it).
//!
//! A job's `priority` above the default is the site's to give (an admin's, in a running
//! planner): such a job is submitted as an admin once its owner may use its queue and
//! charge its account. What a running planner would refuse, the simulator keeps as it
//! always has, with the next id like any other job, so the ids follow the files:
//! rejected, saying why, for its queue, its account or its task count (what its owner
//! would have read at `hyperplan submit`); as the files say otherwise (over `[limits]
//! maxJobsPerUser` or `[preemption] maxGrace`, or a dependency on a job of the files
//! submitted after it, which waits for it: the files are replayed, not refused). A job
//! whose name a live job has is left out, with a warning.

use hyperplan_shared::JobSpec;

use crate::Planner;
use crate::caller::Caller;
use crate::jobs::admit::{UnknownQueue, admit};
use crate::jobs::ownership::{DEFAULT_PRIORITY, MAX_JOB_ID, NextJobId};
use crate::model::commands::Command;
use crate::model::components::JobId;
use crate::model::tick::Outbox;
use crate::queues::QueueTable;
use crate::requests::submit::{Admitted, SubmitRefused};

/// Submits `spec` as `owner` when its file says (`submit_time`, whole seconds), through
/// [`Planner::submit`]; a job it refuses is kept as the module documentation says. The
/// jobs [`Planner::submit`] admitted; none when it refused.
pub fn submit(planner: &mut Planner, spec: JobSpec, owner: &str) -> Vec<Admitted> {
    let now_ms = spec.submit_time.saturating_mul(1000);
    let user = Caller::user(owner);
    let caller = if spec.priority > DEFAULT_PRIORITY && owner_may_submit(planner, &spec, user) {
        Caller::admin(owner)
    } else {
        user
    };
    match planner.submit(vec![spec.clone()], caller, now_ms) {
        Ok(admitted) => admitted,
        Err(why) => {
            keep(planner, spec, owner, &why);
            Vec::new()
        }
    }
}

/// Whether `caller` may use the queue of `spec` and charge its account (what an admin
/// may do whoever they are): checked on a copy.
fn owner_may_submit(planner: &Planner, spec: &JobSpec, caller: Caller<'_>) -> bool {
    let world = planner.world();
    let table = world.resource::<QueueTable>();
    let mut spec = spec.clone();
    let preemption = &world.resource::<crate::config::PlannerConfig>().preemption;
    crate::queues::check::check(table, preemption, &mut spec, Some(caller))
        .is_ok_and(|q| crate::accounts::check::resolve(&table.accounts, table.get(q), &mut spec, caller).is_ok())
}

/// A refused submission as the simulator keeps it (see the module documentation): each
/// job (an array's elements) with the next id, admitted as its owner's (`admit` checks
/// its queue, account and task count as theirs and says why it rejects it). Its id is
/// used even when a live job has its name, so the ids of the jobs after it are those
/// of their place in the files.
fn keep(planner: &mut Planner, spec: JobSpec, owner: &str, why: &SubmitRefused) {
    tracing::debug!(job = spec.name, "kept as the simulator's: {why}");
    let world = planner.world_mut();
    let first = world.resource::<NextJobId>().0;
    for element in crate::jobs::arrays::expand_one(spec, first) {
        let id = world.resource::<NextJobId>().0;
        if id > MAX_JOB_ID {
            let msg = format!(
                "job {}: no job id is left (the largest is {MAX_JOB_ID}); submission ignored",
                element.name
            );
            world.resource_mut::<Outbox>().0.push(Command::Warn(msg));
            return;
        }
        world.resource_mut::<NextJobId>().0 = id + 1;
        admit(
            world,
            element,
            owner.to_string(),
            JobId(id),
            UnknownQueue::RejectAsOwner,
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use hyperplan_shared::report::JobStatus;

    use super::*;
    use crate::config::PlannerConfig;
    use crate::testing::JobBuilder;

    #[test]
    fn a_refused_job_is_kept_rejected_with_its_id_and_the_ids_go_on() {
        let config = PlannerConfig::parse("[[queue]]\nname = \"mine\"\nusers = [\"alice\"]\n", "planner.toml").unwrap();
        let mut p = Planner::new(config);
        let bob = JobBuilder::gang("by-bob", 1, "cpu=1").queue("mine").user("bob").build();
        assert!(submit(&mut p, bob, "bob").is_empty());
        let alice = JobBuilder::gang("by-alice", 1, "cpu=1").queue("mine").build();
        assert_eq!(submit(&mut p, alice, "alice")[0].id, JobId(2));
        let by_bob = p.job("by-bob").unwrap();
        assert_eq!((by_bob.id, by_bob.status), (1, JobStatus::Rejected));
        assert_eq!(
            by_bob.reason.as_deref(),
            Some("job by-bob: user bob may not submit to queue \"mine\"; it takes users alice")
        );
    }

    #[test]
    fn a_job_over_a_limit_is_replayed_as_the_files_say() {
        let mut config = PlannerConfig::default();
        config.limits.max_jobs_per_user = 1;
        let mut p = crate::sim::planner_for(&crate::testing::ClusterBuilder::flat(1).build(), config);
        assert_eq!(
            submit(&mut p, JobBuilder::gang("a", 1, "cpu=1").build(), "alice").len(),
            1
        );
        assert!(submit(&mut p, JobBuilder::gang("b", 1, "cpu=1").build(), "alice").is_empty());
        p.tick(0);
        let b = p.job("b").unwrap();
        assert_eq!((b.id, b.status), (2, JobStatus::Placed));
        assert_eq!(p.next_job_id(), 3);
    }

    #[test]
    fn a_priority_above_the_default_is_given_where_the_owner_may_submit() {
        let mut p = Planner::new(PlannerConfig::default());
        let high = JobBuilder::gang("high", 1, "cpu=1").priority(10).submit(7).build();
        let admitted = submit(&mut p, high, "alice");
        assert_eq!(admitted[0].id, JobId(1));
        let high = p.job("high").unwrap();
        assert_eq!((high.submit_time, p.owner_of("high")), (7, Some("alice")));
    }
}
