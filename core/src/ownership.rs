//! Who submitted each job, who may cancel it, and which job names are taken. The core
//! decides these, not a driver: the owner arrives with the submission
//! ([`Event::SubmitBy`](super::Event::SubmitBy)) and stays on the job entity, so the
//! daemon's answers and the job views read the same record.

use bevy_ecs::prelude::*;

use super::Planner;
use super::events::Event;
use super::names::JobNames;
use super::queues::Inbox;

/// The owner of jobs submitted with a bare [`Event::Submit`]: the simulator's, the tests'
/// and the benches' jobs. A fixed name, not the local user, so reports are the same on
/// every machine.
pub const SIM_OWNER: &str = "sim";

/// The user who submitted a job: they (and admins) may cancel it.
#[derive(Component, Clone, Debug, PartialEq, Eq)]
pub struct JobOwner(pub String);

/// Why a batch of job names cannot be submitted. The texts are what people see after
/// the file name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameClash {
    /// A job of that name exists (or is queued for the next tick).
    #[error("job {name:?} exists (submitted by {owner}); job names must be unique")]
    Exists { name: String, owner: String },
    /// The batch names it twice: at indexes `first` and `second` (drivers that read
    /// several files say which ones).
    #[error("job {name:?} is submitted twice; job names must be unique")]
    Twice { name: String, first: usize, second: usize },
}

/// Why a user may not cancel a job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CancelError {
    #[error("no job named {0:?}")]
    NoSuchJob(String),
    #[error("job {job} belongs to {owner}; only {owner} or an admin may cancel it")]
    NotOwner { job: String, owner: String },
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

/// The owner of the job called `name`: a job in the world, or one queued for the next
/// tick (two quick submissions of one name must not both pass).
fn owner_in(world: &World, name: &str) -> Option<String> {
    if let Some(&e) = world.resource::<JobNames>().0.get(name) {
        return Some(
            world
                .get::<JobOwner>(e)
                .map_or_else(|| SIM_OWNER.to_string(), |o| o.0.clone()),
        );
    }
    world.resource::<Inbox>().0.iter().rev().find_map(|e| match e {
        Event::SubmitBy { spec, owner } if spec.name == name => Some(owner.clone()),
        Event::Submit(spec) if spec.name == name => Some(SIM_OWNER.to_string()),
        _ => None,
    })
}

impl Planner {
    /// Whether jobs called `names` may be submitted now (see [`check_job_names`]).
    pub fn check_job_names<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Result<(), NameClash> {
        check_job_names(names, |n| owner_in(&self.world, n))
    }

    /// Whether `user` may cancel `job`: its owner may, an admin may cancel any job.
    pub fn authorize_cancel(&self, job: &str, user: &str, admin: bool) -> Result<(), CancelError> {
        let Some(owner) = self
            .world
            .resource::<JobNames>()
            .0
            .get(job)
            .map(|&e| self.world.get::<JobOwner>(e).map_or(SIM_OWNER, |o| o.0.as_str()))
        else {
            return Err(CancelError::NoSuchJob(job.to_string()));
        };
        if owner == user || admin {
            Ok(())
        } else {
            Err(CancelError::NotOwner {
                job: job.to_string(),
                owner: owner.to_string(),
            })
        }
    }

    /// Who submitted `job`, if it exists.
    pub fn owner_of(&self, job: &str) -> Option<&str> {
        let &e = self.world.resource::<JobNames>().0.get(job)?;
        self.world.get::<JobOwner>(e).map(|o| o.0.as_str())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::config::PlannerConfig;
    use crate::testing::JobBuilder;

    fn submit_by(p: &mut Planner, name: &str, owner: &str) {
        p.push(Event::SubmitBy {
            spec: JobBuilder::gang(name, 1, "cpu=1").build(),
            owner: owner.into(),
        });
    }

    #[test]
    fn the_owner_may_cancel_others_may_not_admins_may() {
        let mut p = Planner::new(PlannerConfig::default());
        submit_by(&mut p, "train", "alice");
        p.tick(0);
        assert_eq!(p.owner_of("train"), Some("alice"));
        assert_eq!(p.authorize_cancel("train", "alice", false), Ok(()));
        let err = p.authorize_cancel("train", "bob", false).unwrap_err();
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
        assert_eq!(p.authorize_cancel("train", "root", true), Ok(()));
        assert_eq!(
            p.authorize_cancel("nope", "root", true),
            Err(CancelError::NoSuchJob("nope".into()))
        );
    }

    #[test]
    fn a_bare_submit_belongs_to_the_simulator() {
        let mut p = Planner::new(PlannerConfig::default());
        p.push(Event::Submit(JobBuilder::gang("j", 1, "cpu=1").build()));
        p.tick(0);
        assert_eq!(p.owner_of("j"), Some(SIM_OWNER));
    }

    #[test]
    fn a_name_taken_by_a_job_or_a_queued_submission_is_refused_with_its_owner() {
        let mut p = Planner::new(PlannerConfig::default());
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
            "job \"a\" exists (submitted by alice); job names must be unique"
        );
        // Queued, not yet ticked: taken all the same.
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
}
