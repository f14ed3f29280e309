//! Who submitted each job, who may cancel it, which job names are taken, each job's id
//! and what a submission may ask (`[limits]`, the priority cap). The core decides these,
//! not a driver: the owner arrives with the submission
//! ([`Planner::submit`](crate::Planner::submit), the daemon's and the simulator's one way
//! in) and stays on the job entity, so the daemon's answers and the job views read the
//! same record.
//!
//! A job name is unique among the jobs that have not ended (pending or running): once a
//! job finished, was cancelled or rejected, its name may be used again, and the name
//! then means the newest job of that name. Every job has an id, a number counted up
//! from 1 in submission order, that tells the jobs of one name apart.

use bevy_ecs::prelude::*;

use hyperplan_shared::JobSpec;

use crate::Planner;
use crate::caller::Caller;
use crate::config::PlannerConfig;
use crate::model::components::{JobOwner, JobState, LiveChanged};
use crate::names::JobNames;

/// The priority of a job whose file names none (`JobSpec::priority`'s default), and the
/// highest a plain user may ask for: a user may put their own jobs behind everyone
/// else's, never ahead of them; an admin may set any priority. One number until queues
/// give each queue its own.
pub const DEFAULT_PRIORITY: i32 = 0;

/// Per owner, the jobs that have not ended (see [`is_live`]) as of the last tick: what
/// `maxJobsPerUser` counts, without a scan of every job per submission.
#[derive(Resource, Debug, Default)]
pub struct LiveByOwner(pub std::collections::HashMap<std::sync::Arc<str>, u64>);

/// On a job: whether [`LiveByOwner`] counts it (`count_live`'s own bookkeeping).
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountedLive(pub bool);

/// After `dispatch`, before `retire`: a job whose state changed moves its owner's count
/// when it turned live or ended, so a tick costs a look at the changed jobs of those not
/// retired, not a recount of every job (a recount was a tenth of a 50,000-node tick).
/// Before `retire`, so a job that ends in this tick is still seen; a job is despawned
/// only once it ended and no longer counts (`forget`), so the counts stay exact.
pub fn count_live(
    mut changed: Query<(Entity, &JobOwner, &JobState, Option<&mut CountedLive>), LiveChanged<JobState>>,
    mut counts: ResMut<LiveByOwner>,
    mut commands: Commands,
) {
    let _span = tracing::info_span!("count_live").entered();
    for (e, owner, st, counted) in &mut changed {
        let live = is_live(st);
        let was = counted.as_ref().is_some_and(|c| c.0);
        if live != was {
            let n = counts.0.entry(owner.0.clone()).or_default();
            *n = if live { *n + 1 } else { n.saturating_sub(1) };
        }
        match counted {
            Some(mut c) if c.0 != live => c.0 = live,
            Some(_) => {}
            None => {
                commands.entity(e).insert(CountedLive(live));
            }
        }
    }
}

/// The largest job id: 2^53 − 1, the largest integer every JSON reader (a JavaScript
/// number, a `double`) holds exactly. Ids run from 1; the allocator stops there (a
/// submit is refused, never given an id twice) and `state import` refuses larger ids.
pub const MAX_JOB_ID: u64 = (1 << 53) - 1;

/// The id the next submission the core admits gets.
#[derive(Resource, Debug)]
pub struct NextJobId(pub u64);

impl Default for NextJobId {
    fn default() -> Self {
        Self(1)
    }
}

/// Whether a job has not ended: it may still run, so its name is taken and it counts
/// against its owner's `maxJobsPerUser`. A job the allocator rejected is looked at again
/// when the topology changes (nodes join), so it has not ended; one rejected at submit
/// (over a limit, a bad NUMA policy) never is, so it has.
pub fn is_live(state: &JobState) -> bool {
    state.is_live()
}

/// Why a submission is refused. The texts are what people see after the file name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// One job of the batch has more tasks than `[limits]` allows.
    #[error("job {job:?} has {tasks} tasks, more than [limits] maxTasksPerJob = {limit}")]
    TooManyTasks {
        /// The job's name.
        job: String,
        /// Its tasks' replicas summed.
        tasks: u64,
        /// `maxTasksPerJob`.
        limit: u64,
    },
    /// The batch would leave its submitter with more jobs that have not ended than
    /// `[limits]` allows.
    #[error(
        "{owner} has {live} job(s) that have not ended (pending, running, or rejected and waiting for the cluster to change); {more} more would pass [limits] maxJobsPerUser = {limit} (cancel some, or wait for them to end)"
    )]
    TooManyJobs {
        /// The user submitting.
        owner: String,
        /// Their jobs that have not ended.
        live: u64,
        /// Jobs in this batch.
        more: u64,
        /// `maxJobsPerUser`.
        limit: u64,
    },
    /// A user who is no admin asks for a priority above [`DEFAULT_PRIORITY`].
    #[error("job {job}: priority {priority} is above {cap}, the highest a user may ask for (an admin may set more)")]
    PriorityTooHigh {
        /// The job's name.
        job: String,
        /// The priority its file asks for.
        priority: i32,
        /// The highest a plain user may ask for ([`DEFAULT_PRIORITY`]).
        cap: i32,
    },
    /// A job's `preemptGrace` is longer than the site allows.
    #[error(
        "job {job}: preemptGrace {grace} s is longer than {max} s, the most this planner gives ([preemption] maxGrace)"
    )]
    GraceTooLong {
        /// The job's name.
        job: String,
        /// The grace it asks for, in seconds.
        grace: u64,
        /// `[preemption] maxGrace`.
        max: u64,
    },
    /// A job name is taken or repeated in the batch.
    #[error(transparent)]
    Name(#[from] NameClash),
    /// The ids are used up (see [`MAX_JOB_ID`]).
    #[error("no job id is left: the next would be {next}, above the largest, {max}")]
    NoIdsLeft {
        /// The id the batch's first job would get.
        next: u64,
        /// [`MAX_JOB_ID`].
        max: u64,
    },
}

/// Tasks in `spec`: its tasks' replicas summed.
pub fn task_count(spec: &JobSpec) -> u64 {
    spec.tasks.iter().map(|t| u64::from(t.replicas)).sum()
}

/// Why a batch of job names cannot be submitted. The texts are what people see after
/// the file name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameClash {
    /// A job of that name has not ended.
    #[error(
        "job {name:?} exists (submitted by {owner}) and has not ended; job names must be unique among jobs that have not ended"
    )]
    Exists {
        /// The job name.
        name: String,
        /// Who submitted the job that holds it.
        owner: String,
    },
    /// The batch names it twice: at indexes `first` and `second` (drivers that read
    /// several files say which ones).
    #[error("job {name:?} is submitted twice; job names must be unique")]
    Twice {
        /// The job name.
        name: String,
        /// Index in the batch of its first job (from 0).
        first: usize,
        /// Index in the batch of its second.
        second: usize,
    },
    /// A job of that name has not ended, and `[server] privateData` hides whose it is
    /// (names are unique across users, so that one exists cannot be hidden).
    #[error(
        "the job name {name:?} is taken by a job that has not ended; job names must be unique among jobs that have not ended"
    )]
    Taken {
        /// The job name.
        name: String,
    },
}

/// Why a user may not cancel a job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CancelError {
    /// No job has the name asked for.
    #[error("no job named {0:?}")]
    NoSuchJob(String),
    /// Another user's job, and the caller is no admin.
    #[error("job {job} belongs to {owner}; only {owner} or an admin may cancel it")]
    NotOwner {
        /// The job's name.
        job: String,
        /// Who submitted it.
        owner: String,
    },
    /// Another user's job under `[server] privateData`: said exactly as
    /// [`CancelError::NoSuchJob`], the owner kept for the planner's log.
    #[error("no job named {job:?}")]
    Hidden {
        /// The job's name.
        job: String,
        /// Who submitted it: for the planner's log, not the text.
        owner: String,
    },
    /// `--grace` is longer than the site allows.
    #[error("--grace {grace} s is longer than {max} s, the most this planner gives a cancel ([limits] maxCancelGrace)")]
    GraceTooLong {
        /// The grace asked for, in seconds.
        grace: u64,
        /// `[limits] maxCancelGrace`.
        max: u64,
    },
}

/// The one check of job names, for every driver: each of `names` (in order) must be new
/// to `owner_of` (the owner of a job of that name, if one exists) and appear once in the
/// batch. The first clash in batch order is the one reported.
pub fn check_job_names<'a>(
    names: impl IntoIterator<Item = &'a str>,
    owner_of: impl Fn(&str) -> Option<String>,
) -> Result<(), NameClash> {
    let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, name) in names.into_iter().enumerate() {
        if let Some(owner) = owner_of(name) {
            return Err(NameClash::Exists {
                name: name.to_string(),
                owner,
            });
        }
        if let Some(&first) = seen.get(name) {
            return Err(NameClash::Twice {
                name: name.to_string(),
                first,
                second: i,
            });
        }
        seen.insert(name, i);
    }
    Ok(())
}

/// The owner of the live job called `name`: a job in the world that has not ended (a
/// submission is admitted at once, so two quick ones of one name cannot both pass).
fn owner_in(world: &World, name: &str) -> Option<String> {
    if let Some(&e) = world.resource::<JobNames>().0.get(name)
        && world.get::<JobState>(e).is_some_and(is_live)
    {
        return world.get::<JobOwner>(e).map(|o| o.0.to_string());
    }
    // An array's name is taken while an element of it has not ended.
    if let Some((_, a)) = world.resource::<crate::model::arrays::Arrays>().named(name)
        && let Some(&(_, e)) = a
            .elements
            .iter()
            .find(|&&(_, e)| world.get::<JobState>(e).is_some_and(is_live))
    {
        return world.get::<JobOwner>(e).map(|o| o.0.to_string());
    }
    None
}

impl Planner {
    /// Whether `caller` may submit `jobs` now, all of them or none: each within `[limits]
    /// maxTasksPerJob` and, unless the caller is an admin, at most [`DEFAULT_PRIORITY`];
    /// the caller's jobs that have not ended plus these within
    /// `maxJobsPerUser`; and names free (see [`check_job_names`]; under `privateData` a
    /// clash with another user's job does not name them).
    pub fn check_submission(&mut self, jobs: &[JobSpec], caller: Caller<'_>) -> Result<(), SubmitError> {
        let owner = caller.user;
        let limits = self.world.resource::<PlannerConfig>().limits;
        let max_grace = self.world.resource::<PlannerConfig>().preemption.max_grace;
        for j in jobs {
            if let Some(grace) = j.run.preempt_grace.filter(|&g| g > max_grace) {
                return Err(SubmitError::GraceTooLong {
                    job: j.name.clone(),
                    grace,
                    max: max_grace,
                });
            }
            let tasks = task_count(j);
            if tasks > limits.max_tasks_per_job {
                return Err(SubmitError::TooManyTasks {
                    job: j.name.clone(),
                    tasks,
                    limit: limits.max_tasks_per_job,
                });
            }
            if !caller.admin && j.priority > DEFAULT_PRIORITY {
                return Err(SubmitError::PriorityTooHigh {
                    job: j.name.clone(),
                    priority: j.priority,
                    cap: DEFAULT_PRIORITY,
                });
            }
        }
        let more = jobs.len() as u64;
        let next = self.next_job_id();
        if next.saturating_add(more.saturating_sub(1)) > MAX_JOB_ID {
            return Err(SubmitError::NoIdsLeft { next, max: MAX_JOB_ID });
        }
        let live = self.world.resource::<LiveByOwner>().0.get(owner).copied().unwrap_or(0);
        if live + more > limits.max_jobs_per_user {
            return Err(SubmitError::TooManyJobs {
                owner: owner.to_string(),
                live,
                more,
                limit: limits.max_jobs_per_user,
            });
        }
        self.check_job_names(jobs.iter().map(|j| j.name.as_str()))
            .map_err(|e| match e {
                NameClash::Exists { name, owner } if !caller.sees(Some(&owner)) => NameClash::Taken { name },
                e => e,
            })?;
        Ok(())
    }

    /// The id the next submission ([`Planner::submit`]) gets: what the daemon keeps in
    /// its store, so a restarted planner never gives an id twice.
    pub fn next_job_id(&self) -> u64 {
        self.world.resource::<NextJobId>().0
    }

    /// Whether jobs called `names` may be submitted now (see [`check_job_names`]).
    pub fn check_job_names<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Result<(), NameClash> {
        check_job_names(names, |n| owner_in(&self.world, n))
    }

    /// Whether `caller` may cancel `job`: its owner may, an admin may cancel any job.
    /// Under `privateData` another user's job is [`CancelError::Hidden`].
    pub fn authorize_cancel(&self, job: &str, caller: Caller<'_>) -> Result<(), CancelError> {
        let Some(owner) = self
            .world
            .resource::<JobNames>()
            .0
            .get(job)
            .and_then(|&e| self.world.get::<JobOwner>(e).map(|o| &*o.0))
        else {
            return Err(CancelError::NoSuchJob(job.to_string()));
        };
        if owner == caller.user || caller.admin {
            Ok(())
        } else if !caller.sees(Some(owner)) {
            Err(CancelError::Hidden {
                job: job.to_string(),
                owner: owner.to_string(),
            })
        } else {
            Err(CancelError::NotOwner {
                job: job.to_string(),
                owner: owner.to_string(),
            })
        }
    }

    /// Whether `job` exists and `caller` may see it (see [`Caller::sees`]): what the
    /// daemon asks before it answers about one job by name, so that another user's job
    /// under `privateData` reads as one that does not exist.
    pub fn sees_job(&self, job: &str, caller: Caller<'_>) -> bool {
        self.world
            .resource::<JobNames>()
            .0
            .get(job)
            .is_some_and(|&e| caller.sees(self.world.get::<JobOwner>(e).map(|o| &*o.0)))
    }

    /// Who submitted `job`, if it exists.
    pub fn owner_of(&self, job: &str) -> Option<&str> {
        let &e = self.world.resource::<JobNames>().0.get(job)?;
        self.world.get::<JobOwner>(e).map(|o| &*o.0)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::config::PlannerConfig;
    use crate::model::events::Event;
    use crate::testing::JobBuilder;

    fn submit_by(p: &mut Planner, name: &str, owner: &str) {
        crate::sim::submit::submit(p, JobBuilder::gang(name, 1, "cpu=1").build(), owner);
    }

    #[test]
    fn the_owner_may_cancel_others_may_not_admins_may() {
        let mut p = Planner::new(PlannerConfig::default());
        submit_by(&mut p, "train", "alice");
        p.tick(0);
        assert_eq!(p.owner_of("train"), Some("alice"));
        assert_eq!(p.authorize_cancel("train", Caller::user("alice")), Ok(()));
        let err = p.authorize_cancel("train", Caller::user("bob")).unwrap_err();
        assert_eq!(
            err,
            CancelError::NotOwner {
                job: "train".into(),
                owner: "alice".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "job train belongs to alice; only alice or an admin may cancel it"
        );
        assert_eq!(p.authorize_cancel("train", Caller::admin("root")), Ok(()));
        assert_eq!(
            p.authorize_cancel("nope", Caller::admin("root")),
            Err(CancelError::NoSuchJob("nope".into()))
        );
    }

    #[test]
    fn a_bare_submit_belongs_to_the_simulator() {
        let mut p = Planner::new(PlannerConfig::default());
        crate::sim::submit::submit(&mut p, JobBuilder::gang("j", 1, "cpu=1").build(), crate::sim::SIM_OWNER);
        p.tick(0);
        assert_eq!(p.owner_of("j"), Some(crate::sim::SIM_OWNER));
    }

    /// A planner with one 8-CPU node, so one-CPU jobs wait or run rather than being
    /// rejected.
    fn planner_with_a_node(config: PlannerConfig) -> Planner {
        let mut p = Planner::new(config);
        for n in crate::testing::ClusterBuilder::flat(1).build().nodes {
            p.push(Event::NodeUp(n));
        }
        p
    }

    #[test]
    fn a_name_taken_by_a_job_or_a_submission_not_yet_ticked_is_refused_with_its_owner() {
        let mut p = planner_with_a_node(PlannerConfig::default());
        submit_by(&mut p, "a", "alice");
        p.tick(0);
        let err = p.check_job_names(["new", "a"]).unwrap_err();
        assert_eq!(
            err,
            NameClash::Exists {
                name: "a".into(),
                owner: "alice".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "job \"a\" exists (submitted by alice) and has not ended; job names must be unique among jobs that have not ended"
        );
        // Admitted, not yet ticked: taken all the same.
        submit_by(&mut p, "b", "bob");
        assert!(matches!(p.check_job_names(["b"]), Err(NameClash::Exists { owner, .. }) if owner == "bob"));
        assert_eq!(p.check_job_names(["c", "d"]), Ok(()));
    }

    #[test]
    fn a_name_twice_in_one_batch_is_refused_with_both_places() {
        let p = Planner::new(PlannerConfig::default());
        assert_eq!(
            p.check_job_names(["x", "y", "x", "y"]),
            Err(NameClash::Twice {
                name: "x".into(),
                first: 0,
                second: 2
            })
        );
        assert_eq!(check_job_names(["x", "y"], |_| None), Ok(()));
    }

    #[test]
    fn an_ended_jobs_name_is_free_again_and_each_job_has_its_own_id() {
        let mut p = planner_with_a_node(PlannerConfig::default());
        assert_eq!(p.next_job_id(), 1);
        submit_by(&mut p, "j", "alice");
        assert_eq!(p.next_job_id(), 2, "a submission has its id at once");
        p.tick(0);
        assert!(p.check_job_names(["j"]).is_err());
        p.push(Event::Cancel {
            job: "j".into(),
            grace_secs: 0,
            by_admin: false,
        });
        p.tick(1);
        assert_eq!(p.check_job_names(["j"]), Ok(()));
        submit_by(&mut p, "j", "bob");
        p.tick(2);
        assert_eq!(p.owner_of("j"), Some("bob"), "the name means the newest job");
        let reports = crate::view::job_reports(p.world());
        let seen: Vec<(u64, &str, hyperplan_shared::report::JobStatus)> =
            reports.iter().map(|r| (r.id, r.name.as_str(), r.status)).collect();
        use hyperplan_shared::report::JobStatus;
        assert_eq!(seen, vec![(1, "j", JobStatus::Cancelled), (2, "j", JobStatus::Placed)]);
        assert_eq!(reports[0].reason, None, "a cancelled job has no pending reason");
        let newest = crate::view::newest_of_each_name(reports);
        assert_eq!(newest.iter().map(|r| r.id).collect::<Vec<_>>(), vec![2]);
    }

    /// Issue 12 item 16, the case the report first met: a job still waiting for room
    /// (pending, with a reason) shows `cancelled` and no reason once cancelled, and its
    /// name is free again.
    #[test]
    fn a_cancelled_pending_job_shows_cancelled_without_a_reason() {
        use hyperplan_shared::report::JobStatus;
        let mut p = planner_with_a_node(PlannerConfig::default());
        crate::sim::submit::submit(&mut p, JobBuilder::gang("hog", 1, "cpu=8").build(), "alice");
        crate::sim::submit::submit(&mut p, JobBuilder::gang("waiter", 1, "cpu=4").build(), "alice");
        p.tick(0);
        let status = |p: &mut Planner| {
            crate::view::job_reports(p.world())
                .into_iter()
                .find(|r| r.name == "waiter")
                .map(|r| (r.status, r.reason.is_some()))
        };
        assert_eq!(status(&mut p), Some((JobStatus::Pending, true)), "waits for the node");
        assert!(p.check_job_names(["waiter"]).is_err());
        p.push(Event::Cancel {
            job: "waiter".into(),
            grace_secs: 0,
            by_admin: false,
        });
        p.tick(1);
        assert_eq!(status(&mut p), Some((JobStatus::Cancelled, false)));
        assert_eq!(p.check_job_names(["waiter"]), Ok(()));
    }

    #[test]
    fn submissions_over_the_limits_are_refused_naming_the_key() {
        let mut config = PlannerConfig::default();
        config.limits.max_tasks_per_job = 4;
        config.limits.max_jobs_per_user = 2;
        let mut p = planner_with_a_node(config);
        let big = JobBuilder::gang("big", 5, "cpu=1").build();
        let err = p
            .check_submission(std::slice::from_ref(&big), Caller::user("alice"))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "job \"big\" has 5 tasks, more than [limits] maxTasksPerJob = 4"
        );
        // The simulator keeps it, rejected, no task spawned.
        crate::sim::submit::submit(&mut p, big, "alice");
        let cmds = p.tick(0);
        assert!(
            cmds.iter()
                .any(|c| matches!(c, crate::Command::Reject { job, .. } if job == "big"))
        );
        submit_by(&mut p, "a", "alice");
        p.tick(1);
        let two = [
            JobBuilder::gang("b", 1, "cpu=1").build(),
            JobBuilder::gang("c", 1, "cpu=1").build(),
        ];
        let err = p.check_submission(&two, Caller::user("alice")).unwrap_err();
        assert!(
            matches!(
                err,
                SubmitError::TooManyJobs {
                    live: 1,
                    more: 2,
                    limit: 2,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("maxJobsPerUser = 2"), "{err}");
        assert_eq!(p.check_submission(&two[..1], Caller::user("alice")), Ok(()));
        assert_eq!(p.check_submission(&two, Caller::user("bob")), Ok(()));
    }

    /// Issue 20: a plain user may lower a job's priority, not raise it above the default;
    /// an admin may set any. One job over the cap refuses the whole submission, as the
    /// other per-job checks do.
    #[test]
    fn a_user_may_lower_priority_but_not_raise_it_an_admin_may() {
        let mut p = planner_with_a_node(PlannerConfig::default());
        let job = |name: &str, priority: i32| JobBuilder::gang(name, 1, "cpu=1").priority(priority).build();
        let alice = Caller::user("alice");
        let err = p.check_submission(&[job("train", i32::MAX)], alice).unwrap_err();
        assert_eq!(
            err,
            SubmitError::PriorityTooHigh {
                job: "train".into(),
                priority: i32::MAX,
                cap: DEFAULT_PRIORITY
            }
        );
        assert_eq!(
            err.to_string(),
            "job train: priority 2147483647 is above 0, the highest a user may ask for (an admin may set more)"
        );
        assert_eq!(p.check_submission(&[job("low", -5)], alice), Ok(()));
        assert_eq!(p.check_submission(&[job("same", DEFAULT_PRIORITY)], alice), Ok(()));
        assert!(
            matches!(
                p.check_submission(&[job("ok", -1), job("hi", 1)], alice),
                Err(SubmitError::PriorityTooHigh { job, priority: 1, .. }) if job == "hi"
            ),
            "one job over the cap refuses the batch"
        );
        // Under privateData too: the cap is the role's, not the visibility's.
        assert!(p.check_submission(&[job("hi", 1)], alice.private(true)).is_err());
        assert_eq!(p.check_submission(&[job("hi", 10)], Caller::admin("root")), Ok(()));
        assert_eq!(
            p.check_submission(&[job("top", i32::MAX)], Caller::admin("root")),
            Ok(())
        );
    }

    /// The cap is the priority a job has when its file names none.
    #[test]
    fn the_default_priority_is_what_a_job_file_without_one_gets() {
        let jobs = hyperplan_shared::parse_jobs(
            "name: j\ntasks:\n  - {name: t, replicas: 1, resources: {cpu: 1}}\n",
            std::path::Path::new("j.yaml"),
        )
        .unwrap();
        assert_eq!(jobs[0].priority, DEFAULT_PRIORITY);
    }

    /// Issue 20, `[server] privateData`: another user's job answers as one that does not
    /// exist (cancel, by name); a name clash with it does not say whose it is; the owner
    /// and admins are told as before.
    #[test]
    fn under_private_data_another_users_job_reads_as_missing() {
        let mut p = planner_with_a_node(PlannerConfig::default());
        submit_by(&mut p, "train", "alice");
        p.tick(0);
        let bob = Caller::user("bob").private(true);
        let alice = Caller::user("alice").private(true);
        let root = Caller::admin("root").private(true);

        let hidden = p.authorize_cancel("train", bob).unwrap_err();
        assert_eq!(
            hidden,
            CancelError::Hidden {
                job: "train".into(),
                owner: "alice".into()
            }
        );
        assert_eq!(
            hidden.to_string(),
            CancelError::NoSuchJob("train".into()).to_string(),
            "said exactly as a job that does not exist"
        );
        assert_eq!(p.authorize_cancel("train", alice), Ok(()));
        assert_eq!(p.authorize_cancel("train", root), Ok(()));
        // Without privateData bob hears whose it is, as before.
        assert!(matches!(
            p.authorize_cancel("train", Caller::user("bob")),
            Err(CancelError::NotOwner { .. })
        ));

        assert!(!p.sees_job("train", bob));
        assert!(!p.sees_job("nope", bob));
        assert!(p.sees_job("train", alice) && p.sees_job("train", root));
        assert!(p.sees_job("train", Caller::user("bob")));

        let again = [JobBuilder::gang("train", 1, "cpu=1").build()];
        let err = p.check_submission(&again, bob).unwrap_err();
        assert_eq!(err, SubmitError::Name(NameClash::Taken { name: "train".into() }));
        assert!(!err.to_string().contains("alice"), "{err}");
        assert!(matches!(
            p.check_submission(&again, root),
            Err(SubmitError::Name(NameClash::Exists { owner, .. })) if owner == "alice"
        ));
        assert!(matches!(
            p.check_submission(&again, Caller::user("bob")),
            Err(SubmitError::Name(NameClash::Exists { .. }))
        ));
    }
}
