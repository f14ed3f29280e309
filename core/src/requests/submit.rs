//! A submission, admitted at once: the checks of `ownership`, then each job gets its id,
//! its stored record and its entities in the one call, so the id a person is told is
//! the id the job has (no driver predicts it) and the record the driver commits is the
//! job the core holds.

use hyperplan_shared::JobSpec;

use crate::Planner;
use crate::caller::Caller;
use crate::jobs::ownership::{CountedLive, LiveByOwner, NextJobId, SubmitError, is_live};
use crate::model::components::JobId;
use crate::model::components::JobState;
use crate::model::record::{JobRecord, Persist, RecordError};
use crate::names::JobNames;
use crate::queues::QueueTable;
use crate::queues::check::{QueueRefusal, check};

/// One job of an accepted submission.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// The id the job got (see `ownership`).
    pub id: JobId,
    /// The job's name.
    pub name: String,
    /// Its record, to commit before the submitter is answered.
    pub record: Persist,
}

/// Why a submission was refused.
#[derive(Debug, thiserror::Error)]
pub enum SubmitRefused {
    /// A check of `ownership` (limits, priority cap, names, ids).
    #[error(transparent)]
    Check(#[from] SubmitError),
    /// A job's queue does not exist, does not take the caller, or its time limit is over
    /// the queue's.
    #[error(transparent)]
    Queue(#[from] QueueRefusal),
    /// A job file names another user (`user` is the simulator's; the planner takes the
    /// submitter from their certificate).
    #[error(
        "job {job}: user: {user:?} is not you ({caller}); `user` is read by `hyperplan simulate` only, the planner takes who submits from the certificate"
    )]
    User {
        /// The job.
        job: String,
        /// The user it names.
        user: String,
        /// Who submitted it.
        caller: String,
    },
    /// A job's record could not be encoded: nothing of the submission was admitted.
    #[error("encoding job {job}: {error}")]
    Encode {
        /// The job's name.
        job: String,
        /// Why its record could not be encoded.
        error: RecordError,
    },
}

impl Planner {
    /// Checks `jobs` for `caller` (see [`Planner::check_submission`]) and admits all of
    /// them or none, submitted at `now_ms`: each gets the next id, its record and its
    /// entities now (pending; the next tick looks for room). The caller's live-job count
    /// grows at once, so a second submission before the next tick is counted with it.
    pub fn submit(
        &mut self,
        jobs: Vec<JobSpec>,
        caller: Caller<'_>,
        now_ms: u64,
    ) -> Result<Vec<Admitted>, SubmitRefused> {
        self.check_submission(&jobs, caller)?;
        let owner = caller.user;
        let first = self.next_job_id();
        // Every record first: nothing is admitted if one cannot be encoded.
        let mut admitted = Vec::with_capacity(jobs.len());
        for (id, mut spec) in (first..).zip(jobs) {
            spec.submit_time = now_ms / 1000;
            if let Some(u) = spec.user.as_ref().filter(|u| *u != owner) {
                return Err(SubmitRefused::User {
                    job: spec.name.clone(),
                    user: u.clone(),
                    caller: owner.to_string(),
                });
            }
            // The queue, checked for the caller; its default time limit is written in.
            let world = self.world();
            check(
                world.resource::<QueueTable>(),
                &world.resource::<crate::config::PlannerConfig>().preemption,
                &mut spec,
                Some(caller),
            )?;
            let record = JobRecord::at_submit(id, owner, spec.clone())
                .persist()
                .map_err(|error| SubmitRefused::Encode {
                    job: spec.name.clone(),
                    error,
                })?;
            admitted.push((JobId(id), spec, record));
        }
        let world = self.world_mut();
        let owner_key: std::sync::Arc<str> = std::sync::Arc::from(owner);
        let mut out = Vec::with_capacity(admitted.len());
        for (id, spec, record) in admitted {
            // `check_submission` kept the ids within `MAX_JOB_ID`.
            world.resource_mut::<NextJobId>().0 = id.0 + 1;
            let name = spec.name.clone();
            crate::jobs::admit::admit(
                world,
                spec,
                owner.to_string(),
                id,
                crate::jobs::admit::UnknownQueue::Reject,
            );
            // Counted now, so a second submission before the next tick sees it.
            let job = world.resource::<JobNames>().0.get(&name).copied();
            if let Some(e) = job.filter(|&e| world.get::<JobState>(e).is_some_and(is_live)) {
                *world
                    .resource_mut::<LiveByOwner>()
                    .0
                    .entry(owner_key.clone())
                    .or_default() += 1;
                world.entity_mut(e).insert(CountedLive(true));
            }
            out.push(Admitted { id, name, record });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::config::PlannerConfig;
    use crate::testing::JobBuilder;

    #[test]
    fn a_submission_has_its_ids_and_its_job_at_once_and_counts_against_the_limit() {
        let mut config = PlannerConfig::default();
        config.limits.max_jobs_per_user = 2;
        let mut p = Planner::new(config);
        let jobs = vec![JobBuilder::gang("a", 1, "cpu=1").build()];
        let admitted = p.submit(jobs, Caller::user("alice"), 5_000).unwrap();
        assert_eq!(admitted[0].id, JobId(1));
        assert_eq!(admitted[0].record.id, 1);
        assert!(admitted[0].record.live);
        // No tick yet: the job is there, its name is taken, the next id follows.
        assert_eq!(p.owner_of("a"), Some("alice"));
        assert_eq!(p.job("a").unwrap().submit_time, 5);
        assert_eq!(p.next_job_id(), 2);
        let twice = vec![JobBuilder::gang("a", 1, "cpu=1").build()];
        assert!(matches!(
            p.submit(twice, Caller::user("alice"), 6_000),
            Err(SubmitRefused::Check(SubmitError::Name(_)))
        ));
        let two = vec![
            JobBuilder::gang("b", 1, "cpu=1").build(),
            JobBuilder::gang("c", 1, "cpu=1").build(),
        ];
        assert!(
            matches!(
                p.submit(two, Caller::user("alice"), 6_000),
                Err(SubmitRefused::Check(SubmitError::TooManyJobs { live: 1, more: 2, .. }))
            ),
            "the first job counts before any tick"
        );
        assert_eq!(p.job("b"), None, "all or nothing");
        assert_eq!(p.next_job_id(), 2, "a refusal uses no id");
        p.tick(7);
        assert!(p.violations().is_empty());
        // Its end frees its place in the count.
        p.cancel("a", 0, Caller::user("alice")).unwrap();
        p.tick(8);
        let two = vec![
            JobBuilder::gang("b", 1, "cpu=1").build(),
            JobBuilder::gang("c", 1, "cpu=1").build(),
        ];
        let ids: Vec<u64> = p
            .submit(two, Caller::user("alice"), 9_000)
            .unwrap()
            .iter()
            .map(|a| a.id.0)
            .collect();
        assert_eq!(ids, vec![2, 3]);
        p.tick(10);
        let one = vec![JobBuilder::gang("d", 1, "cpu=1").build()];
        assert!(matches!(
            p.submit(one, Caller::user("alice"), 11_000),
            Err(SubmitRefused::Check(SubmitError::TooManyJobs { live: 2, .. }))
        ));
    }
}
