//! A person's `hold` and `release`: the owner or an admin may hold a pending job; its
//! owner may release their own hold, and only an admin an admin's (Slurm's
//! `scontrol hold`/`release`, where a user cannot lift an operator's hold). Every job
//! named is checked before any is changed, so a refused request changes nothing.

use crate::Planner;
use crate::caller::Caller;
use crate::model::components::{JobPhase, JobState};
use crate::model::events::Event;
use crate::names::JobNames;

/// Why a hold or release was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HoldError {
    /// No job has the name asked for.
    #[error("no job named {0:?}")]
    NoSuchJob(String),
    /// Another user's job under `[server] privateData`: said as [`HoldError::NoSuchJob`],
    /// the owner kept for the planner's log.
    #[error("no job named {job:?}")]
    Hidden {
        /// The job's name.
        job: String,
        /// Who submitted it: for the log, not the text.
        owner: String,
    },
    /// Another user's job, and the caller is no admin.
    #[error("job {job} belongs to {owner}; only {owner} or an admin may {what} it")]
    NotOwner {
        /// The job's name.
        job: String,
        /// Who submitted it.
        owner: String,
        /// `hold` or `release`.
        what: &'static str,
    },
    /// Only a job that waits can be held (one running already is not stopped).
    #[error("job {job} is {phase}; only a pending job can be held")]
    NotPending {
        /// The job's name.
        job: String,
        /// Its phase, in words.
        phase: &'static str,
    },
    /// An admin's hold, and the caller is no admin.
    #[error("job {job} is held by an admin ({by}); only an admin may release it")]
    AdminHold {
        /// The job's name.
        job: String,
        /// The admin who held it.
        by: String,
    },
}

impl HoldError {
    /// The owner of another user's job the caller asked about, for the planner's log.
    pub fn other_owner(&self) -> Option<&str> {
        match self {
            Self::Hidden { owner, .. } | Self::NotOwner { owner, .. } => Some(owner),
            _ => None,
        }
    }
}

impl Planner {
    /// Holds `jobs` for `caller` (each one's owner or an admin): none of them is tried
    /// from the next tick until released. All or none.
    ///
    /// An array (`NAME`, `NAME[3-5]`, its id) stands for its elements that wait.
    pub fn hold(&mut self, jobs: &[String], caller: Caller<'_>) -> Result<(), HoldError> {
        let jobs = &self.selected(jobs)?;
        for job in jobs {
            let st = self.hold_target(job, caller, "hold")?;
            if st.phase != JobPhase::Pending || st.next_rank > 0 {
                return Err(HoldError::NotPending {
                    job: job.clone(),
                    phase: phase_word(st.phase),
                });
            }
        }
        for job in jobs {
            self.push(Event::Hold {
                job: job.clone(),
                by: caller.user.to_string(),
                admin: caller.admin,
            });
        }
        Ok(())
    }

    /// Releases `jobs` for `caller`: an admin's hold only an admin may lift. A job not
    /// held is left as it is. All or none.
    pub fn release(&mut self, jobs: &[String], caller: Caller<'_>) -> Result<(), HoldError> {
        let jobs = &self.selected(jobs)?;
        for job in jobs {
            let st = self.hold_target(job, caller, "release")?;
            if let Some(h) = &st.held
                && h.admin
                && !caller.admin
            {
                return Err(HoldError::AdminHold {
                    job: job.clone(),
                    by: h.by.clone(),
                });
            }
        }
        for job in jobs {
            self.push(Event::Release { job: job.clone() });
        }
        Ok(())
    }

    /// The jobs `selectors` name: a job by its name, or an array's elements that wait
    /// (those running can be neither held nor released).
    fn selected(&self, selectors: &[String]) -> Result<Vec<String>, HoldError> {
        let mut out = Vec::with_capacity(selectors.len());
        for s in selectors {
            let names = crate::jobs::arrays::select(&self.world, s).map_err(|_| HoldError::NoSuchJob(s.clone()))?;
            if names.len() == 1 && names[0] == *s {
                out.push(s.clone());
                continue;
            }
            let waiting: Vec<String> = names
                .iter()
                .filter(|n| {
                    let e = self.world.resource::<JobNames>().0.get(n.as_str()).copied();
                    e.and_then(|e| self.world.get::<JobState>(e))
                        .is_some_and(|st| st.phase == JobPhase::Pending && st.next_rank == 0)
                })
                .cloned()
                .collect();
            match waiting.is_empty() {
                // Said of the first: none of them waits.
                true => out.extend(names.into_iter().take(1)),
                false => out.extend(waiting),
            }
        }
        Ok(out)
    }

    /// `job`'s state, when `caller` may hold or release it.
    fn hold_target(&self, job: &str, caller: Caller<'_>, what: &'static str) -> Result<&JobState, HoldError> {
        let found = self.world.resource::<JobNames>().0.get(job).copied();
        let Some(e) = found else {
            return Err(HoldError::NoSuchJob(job.to_string()));
        };
        let owner = self.owner_of(job).unwrap_or_default();
        if !(owner == caller.user || caller.admin) {
            return Err(if caller.sees(Some(owner)) {
                HoldError::NotOwner {
                    job: job.to_string(),
                    owner: owner.to_string(),
                    what,
                }
            } else {
                HoldError::Hidden {
                    job: job.to_string(),
                    owner: owner.to_string(),
                }
            });
        }
        self.world
            .get::<JobState>(e)
            .ok_or_else(|| HoldError::NoSuchJob(job.to_string()))
    }
}

/// A phase as the refusal says it.
fn phase_word(phase: JobPhase) -> &'static str {
    match phase {
        JobPhase::Pending | JobPhase::Running => "running",
        JobPhase::Ending => "ending",
        JobPhase::Finished => "finished",
        JobPhase::Rejected => "rejected",
        JobPhase::Cancelled => "cancelled",
    }
}
