//! Dependencies (Slurm's `--dependency`): whether a job's conditions are met by the jobs
//! they name, worked out from those jobs' states. `after` waits for the target to start
//! (or be cancelled), `afterok` for it to complete, `afternotok` for it to fail (any end
//! but completed), `afterany` for any end, `aftercorr` for the element of the same index
//! of the target array to complete. A target that is an array means all its elements; a
//! target the world no longer holds ended long ago and counts as met (as Slurm does:
//! what it decided was kept, see `model::gate::Settled`).

use bevy_ecs::prelude::*;
use hyperplan_shared::dependency::{AfterKind, Combine, Condition, Dependency, Target};

use crate::jobs::ownership::is_live;
use crate::model::arrays::Arrays;
use crate::model::components::{Job, JobPhase, JobState};
use crate::model::jobstate::Verdict;
use crate::names::{JobIds, JobNames};

/// Where a dependency stands now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every condition it needs holds.
    Met,
    /// Not yet: the conditions left, with their targets' states; `until`: the earliest
    /// time (Unix seconds) an `after:JOB+MINUTES` will hold with nothing else changing.
    Wait {
        /// The conditions left, as `status` shows them.
        what: String,
        /// When an `after:JOB+MINUTES` holds.
        until: Option<u64>,
    },
    /// It never will: why.
    Never(String),
}

/// What a dependency reads of the world.
pub struct Lookup<'w> {
    /// Jobs by name.
    pub names: &'w JobNames,
    /// Jobs by id.
    pub ids: &'w JobIds,
    /// Arrays by id and name.
    pub arrays: &'w Arrays,
    /// Now, Unix seconds.
    pub now_s: u64,
}

/// A target's jobs: an array's elements, or the one job; `None`: not in the world.
fn targets<'a>(
    look: &Lookup<'_>,
    target: &Target,
    state: &dyn Fn(Entity) -> Option<(&'a Job, &'a JobState)>,
) -> Option<Vec<(u32, Entity)>> {
    match target {
        Target::Id(id) => {
            if let Some(a) = look.arrays.by_id.get(id) {
                return Some(a.elements.clone());
            }
            look.ids.0.get(id).map(|&e| vec![(0, e)])
        }
        Target::Name(name) => {
            let job = look.names.0.get(name).copied();
            let array = look.arrays.named(name).map(|(_, a)| a);
            match (job, array) {
                (Some(e), None) => Some(vec![(0, e)]),
                (None, Some(a)) => Some(a.elements.clone()),
                // A job and an array of one name: the one that has not ended (at most
                // one of them is live), else the array.
                (Some(e), Some(a)) => {
                    let live = state(e).is_some_and(|(_, st)| is_live(st));
                    Some(if live { vec![(0, e)] } else { a.elements.clone() })
                }
                (None, None) => None,
            }
        }
    }
}

/// The word `status` uses for a job's state.
pub fn state_word(st: &JobState) -> &'static str {
    match st.phase {
        JobPhase::Pending => "pending",
        JobPhase::Running => "running",
        JobPhase::Ending => "ending",
        JobPhase::Rejected => "rejected",
        JobPhase::Cancelled => "cancelled",
        JobPhase::Finished => match st.verdict {
            Some(Verdict::Completed) => "completed",
            Some(Verdict::Failed) => "failed",
            Some(Verdict::Timeout) => "timed out",
            Some(Verdict::Preempted) => "preempted",
            Some(Verdict::Cancelled) => "cancelled",
            None => "ended",
        },
    }
}

/// One target job against one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum One {
    Met,
    Wait(Option<u64>),
    Never,
}

fn one(kind: AfterKind, delay_minutes: Option<u32>, st: &JobState, now_s: u64) -> One {
    let ended = !is_live(st);
    let ok = st.phase == JobPhase::Finished && st.verdict == Some(Verdict::Completed);
    match kind {
        AfterKind::After => match st.start_time {
            Some(start) => {
                let at = start.saturating_add(u64::from(delay_minutes.unwrap_or(0)) * 60);
                if now_s >= at { One::Met } else { One::Wait(Some(at)) }
            }
            // Cancelled (or refused) before it started: Slurm's `after` holds then too.
            None if ended => One::Met,
            None => One::Wait(None),
        },
        AfterKind::AfterOk | AfterKind::AfterCorr => match (ended, ok) {
            (true, true) => One::Met,
            (true, false) => One::Never,
            _ => One::Wait(None),
        },
        AfterKind::AfterNotOk => match (ended, ok) {
            (true, false) => One::Met,
            (true, true) => One::Never,
            _ => One::Wait(None),
        },
        AfterKind::AfterAny => {
            if ended {
                One::Met
            } else {
                One::Wait(None)
            }
        }
    }
}

/// Where `dep` stands for the job `index` (its array index, for `aftercorr`), reading
/// the target jobs' states through `state`.
pub fn evaluate<'a>(
    dep: &Dependency,
    index: Option<u32>,
    look: &Lookup<'_>,
    state: &dyn Fn(Entity) -> Option<(&'a Job, &'a JobState)>,
) -> Outcome {
    let mut waits: Vec<String> = Vec::new();
    let mut nevers: Vec<String> = Vec::new();
    let mut met = 0usize;
    let mut until: Option<u64> = None;
    for c in &dep.conditions {
        let Condition::After { kind, targets: ts } = c else {
            // `singleton` is a gate of its own (see `jobs::gates`).
            met += 1;
            continue;
        };
        let mut c_wait: Vec<String> = Vec::new();
        let mut c_never: Vec<String> = Vec::new();
        for t in ts {
            let Some(mut jobs) = targets(look, &t.target, state) else {
                continue; // gone long ago: met
            };
            if *kind == AfterKind::AfterCorr
                && let Some(i) = index
            {
                jobs.retain(|&(j, _)| j == i);
            }
            let shown = format!("{}:{}", kind.as_str(), t.target);
            let mut counts = [0usize; 3];
            let mut word = "";
            for &(_, e) in &jobs {
                let Some((_, st)) = state(e) else { continue };
                match one(*kind, t.delay_minutes, st, look.now_s) {
                    One::Met => counts[0] += 1,
                    One::Wait(at) => {
                        counts[1] += 1;
                        if let Some(at) = at {
                            until = Some(until.map_or(at, |u| u.min(at)));
                        }
                    }
                    One::Never => counts[2] += 1,
                }
                word = state_word(st);
            }
            let many = jobs.len() > 1;
            let how = |n: usize, what: &str| {
                if many {
                    format!("{shown} ({n} of {} {what})", jobs.len())
                } else {
                    format!("{shown} ({word})")
                }
            };
            if counts[2] > 0 {
                c_never.push(how(counts[2], "ended otherwise"));
            } else if counts[1] > 0 {
                c_wait.push(how(counts[0], "done"));
            }
        }
        if !c_never.is_empty() {
            nevers.extend(c_never);
        } else if !c_wait.is_empty() {
            waits.extend(c_wait);
        } else {
            met += 1;
        }
    }
    let total = dep.conditions.len();
    match dep.combine {
        Combine::All if !nevers.is_empty() => Outcome::Never(nevers.join(", ")),
        Combine::All if met == total => Outcome::Met,
        Combine::All => Outcome::Wait {
            what: waits.join(", "),
            until,
        },
        Combine::Any if met > 0 => Outcome::Met,
        Combine::Any if waits.is_empty() => Outcome::Never(nevers.join(" and ")),
        Combine::Any => Outcome::Wait {
            what: waits.join(" or "),
            until,
        },
    }
}

/// A submitted dependency that names no job (none in the world, none earlier in the
/// same submission), or `aftercorr` on a job that is not an array's element.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DependencyRefused {
    /// A target the world does not hold.
    #[error(
        "job {job}: dependency {dependency}: no job {target} (name a job by its name or id that has not been forgotten)"
    )]
    NoTarget {
        /// The job submitted.
        job: String,
        /// Its dependency.
        dependency: String,
        /// The target not found.
        target: String,
    },
    /// `aftercorr` on a job that is no array.
    #[error("job {job}: dependency {dependency}: aftercorr is for an array's elements (submit it with --array)")]
    CorrWithoutArray {
        /// The job submitted.
        job: String,
        /// Its dependency.
        dependency: String,
    },
}

/// Checks the targets of `dep` (of job `job`) at submit: each names a job the world
/// holds or one in `earlier` (names earlier in the same submission).
pub fn check_targets<'a>(
    job: &str,
    is_element: bool,
    dep: &Dependency,
    look: &Lookup<'_>,
    earlier: &[&str],
    state: &dyn Fn(Entity) -> Option<(&'a Job, &'a JobState)>,
) -> Result<(), DependencyRefused> {
    for c in &dep.conditions {
        let Condition::After { kind, targets: ts } = c else {
            continue;
        };
        if *kind == AfterKind::AfterCorr && !is_element {
            return Err(DependencyRefused::CorrWithoutArray {
                job: job.to_string(),
                dependency: dep.to_string(),
            });
        }
        for t in ts {
            let known = targets(look, &t.target, state).is_some()
                || matches!(&t.target, Target::Name(n) if earlier.contains(&n.as_str()));
            if !known {
                return Err(DependencyRefused::NoTarget {
                    job: job.to_string(),
                    dependency: dep.to_string(),
                    target: t.target.to_string(),
                });
            }
        }
    }
    Ok(())
}
