//! A submission, admitted at once: the checks of `ownership`, then each job gets its id,
//! its stored record and its entities in the one call, so the id a person is told is
//! the id the job has (no driver predicts it) and the record the driver commits is the
//! job the core holds.

use hyperplan_shared::JobSpec;

use crate::Planner;
use crate::caller::Caller;
use crate::jobs::ownership::{CountedLive, LiveByOwner, NameClash, NextJobId, SubmitError, is_live};
use crate::model::components::JobId;
use crate::model::components::JobState;
use crate::model::record::{JobRecord, Persist, RecordError};
use crate::names::JobNames;
use crate::queues::QueueTable;
use crate::queues::check::{QueueRefusal, check};

/// Most bytes of job spec an array's elements may hold together: each element is a job
/// with its own spec (in the planner's memory and in the store's one commit), so a large
/// spec times 10,000 elements must not reach the planner.
pub const MAX_ARRAY_BYTES: usize = 128 << 20;

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
    /// A job's account does not exist, may not be charged by the caller, is not taken by
    /// its queue, or (with `[[account]]` sections) the job has none and the caller no
    /// default.
    #[error(transparent)]
    Account(#[from] crate::accounts::check::AccountRefusal),
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
    /// An array whose elements' specs together would hold more than
    /// [`MAX_ARRAY_BYTES`] in the planner and its store.
    #[error(
        "job {job}: {elements} elements × {each} bytes of job spec is more than the {max} bytes an array may hold (each element keeps its own copy): make the spec smaller (a long env or command into a file) or split the array"
    )]
    ArrayTooLarge {
        /// The array's name.
        job: String,
        /// How many elements it has.
        elements: usize,
        /// Bytes of one element's spec, encoded.
        each: usize,
        /// [`MAX_ARRAY_BYTES`].
        max: usize,
    },
    /// A dependency names no job, or is `aftercorr` outside an array.
    #[error(transparent)]
    Dependency(#[from] crate::jobs::dependencies::DependencyRefused),
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
        let owner = caller.user;
        let first = self.next_job_id();
        // An array's name is its elements' stem: taken while a job or an array of that
        // name has not ended.
        for j in jobs.iter().filter(|j| j.array.is_some()) {
            let elements = j.array.as_ref().map_or(0, |a| a.indices().len());
            let each = serde_json::to_vec(j).map_or(usize::MAX, |b| b.len());
            if elements.saturating_mul(each) > MAX_ARRAY_BYTES {
                return Err(SubmitRefused::ArrayTooLarge {
                    job: j.name.clone(),
                    elements,
                    each,
                    max: MAX_ARRAY_BYTES,
                });
            }
        }
        let stems = jobs.iter().filter(|j| j.array.is_some()).map(|j| j.name.as_str());
        self.check_job_names(stems)
            .map_err(|e| SubmitError::Name(self.hide_owner(e, caller)))?;
        let mut jobs = crate::jobs::arrays::expand(jobs, first);
        self.rename_singletons(&mut jobs, first, owner);
        self.check_submission(&jobs, caller)?;
        self.check_dependencies(&jobs, caller)?;
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
            let table = world.resource::<QueueTable>();
            let queue = check(
                table,
                &world.resource::<crate::config::PlannerConfig>().preemption,
                &mut spec,
                Some(caller),
            )?;
            // Its account, resolved for the caller and the queue; written in.
            crate::accounts::check::resolve(&table.accounts, table.get(queue), &mut spec, caller)?;
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

impl Planner {
    /// A name clash as `caller` may see it: under `privateData` another user's job is
    /// only "taken".
    fn hide_owner(&self, e: NameClash, caller: Caller<'_>) -> NameClash {
        match e {
            NameClash::Exists { name, owner } if !caller.sees(Some(&owner)) => NameClash::Taken { name },
            e => e,
        }
    }

    /// A `singleton` job (not an array's element) whose name one of `owner`'s live jobs
    /// has is named `NAME.ID` (its own id): names stay unique, and `singleton` counts it
    /// by `NAME` (see `jobs::arrays::singleton_key`).
    fn rename_singletons(&self, jobs: &mut [JobSpec], first: u64, owner: &str) {
        let names = self.world().resource::<JobNames>();
        for (id, j) in (first..).zip(jobs.iter_mut()) {
            let singleton = j.depends_on.as_ref().is_some_and(|d| d.has_singleton());
            if !singleton || j.element.is_some() {
                continue;
            }
            let taken_by_owner = names.0.get(&j.name).is_some_and(|&e| {
                self.world().get::<JobState>(e).is_some_and(is_live)
                    && self
                        .world()
                        .get::<crate::model::components::JobOwner>(e)
                        .is_some_and(|o| &*o.0 == owner)
            });
            if taken_by_owner {
                j.name = format!("{}.{id}", j.name);
            }
        }
    }

    /// Each dependency names jobs the world holds that `caller` may see, or jobs earlier
    /// in the submission.
    fn check_dependencies(&self, jobs: &[JobSpec], caller: Caller<'_>) -> Result<(), SubmitRefused> {
        if jobs.iter().all(|j| j.depends_on.is_none()) {
            return Ok(());
        }
        let world = self.world();
        let look = crate::jobs::dependencies::Lookup {
            names: world.resource::<JobNames>(),
            ids: world.resource::<crate::names::JobIds>(),
            arrays: world.resource::<crate::model::arrays::Arrays>(),
            now_s: 0,
        };
        let state = |e| {
            Some((
                world.get::<crate::model::components::Job>(e)?,
                world.get::<JobState>(e)?,
            ))
        };
        let visible = |e| caller.sees(world.get::<crate::model::components::JobOwner>(e).map(|o| &*o.0));
        let mut earlier: Vec<&str> = Vec::new();
        for j in jobs {
            if let Some(dep) = &j.depends_on {
                crate::jobs::dependencies::check_targets(
                    &j.name,
                    j.element.is_some(),
                    dep,
                    &look,
                    &earlier,
                    &state,
                    &visible,
                )?;
            }
            earlier.push(j.element.as_ref().map_or(j.name.as_str(), |el| el.array_name.as_str()));
        }
        Ok(())
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
