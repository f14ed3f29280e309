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

/// What a target names: an array (all its elements), or one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resolved {
    Array(u64),
    Job(Entity),
}

/// The job or array `target` names; `None`: not in the world.
fn resolve<'a>(
    look: &Lookup<'_>,
    target: &Target,
    state: &dyn Fn(Entity) -> Option<(&'a Job, &'a JobState)>,
) -> Option<Resolved> {
    match target {
        Target::Id(id) => {
            if look.arrays.by_id.contains_key(id) {
                return Some(Resolved::Array(*id));
            }
            look.ids.0.get(id).map(|&e| Resolved::Job(e))
        }
        Target::Name(name) => {
            let job = look.names.0.get(name).copied();
            let array = look.arrays.named(name).map(|(id, _)| id);
            match (job, array) {
                (Some(e), None) => Some(Resolved::Job(e)),
                (None, Some(id)) => Some(Resolved::Array(id)),
                // A job and an array of one name: the one that has not ended (at most
                // one of them is live), else the array.
                (Some(e), Some(id)) => {
                    let live = state(e).is_some_and(|(_, st)| is_live(st));
                    Some(if live { Resolved::Job(e) } else { Resolved::Array(id) })
                }
                (None, None) => None,
            }
        }
    }
}

/// What one target's jobs say for one kind: how many meet it, wait, never will.
#[derive(Debug, Clone, Copy, Default)]
struct Summary {
    met: usize,
    wait: usize,
    never: usize,
    /// The earliest time an `after:JOB+MINUTES` of them holds.
    until: Option<u64>,
    /// The state of the last one (what a single job's line shows).
    word: &'static str,
}

impl Summary {
    fn total(&self) -> usize {
        self.met + self.wait + self.never
    }
}

fn summarize<'a>(
    jobs: impl Iterator<Item = Entity>,
    kind: AfterKind,
    delay: Option<u32>,
    now_s: u64,
    state: &dyn Fn(Entity) -> Option<(&'a Job, &'a JobState)>,
) -> Summary {
    let mut s = Summary::default();
    for e in jobs {
        let Some((_, st)) = state(e) else { continue };
        match one(kind, delay, st, now_s) {
            One::Met => s.met += 1,
            One::Wait(at) => {
                s.wait += 1;
                if let Some(at) = at {
                    s.until = Some(s.until.map_or(at, |u| u.min(at)));
                }
            }
            One::Never => s.never += 1,
        }
        s.word = state_word(st);
    }
    s
}

/// Summaries of whole arrays already worked out in this pass, by (array, kind, delay):
/// ten thousand jobs waiting on one array of ten thousand cost one look at it each tick.
#[derive(Debug, Default)]
pub struct Memo(std::collections::HashMap<(u64, AfterKind, Option<u32>), Summary>);

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
    // Finished without a verdict: the simulator's jobs, whose tasks ran to their end.
    let ok = st.phase == JobPhase::Finished && matches!(st.verdict, Some(Verdict::Completed) | None);
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
/// the target jobs' states through `state`; `memo` keeps what whole arrays say for the
/// rest of the pass.
pub fn evaluate<'a>(
    dep: &Dependency,
    index: Option<u32>,
    look: &Lookup<'_>,
    state: &dyn Fn(Entity) -> Option<(&'a Job, &'a JobState)>,
    memo: &mut Memo,
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
            let Some(resolved) = resolve(look, &t.target, state) else {
                continue; // gone long ago: met
            };
            let s = match resolved {
                Resolved::Job(e) => summarize(std::iter::once(e), *kind, t.delay_minutes, look.now_s, state),
                // Element i of the array: the one of the same index, if it has one.
                Resolved::Array(id) if *kind == AfterKind::AfterCorr && index.is_some() => {
                    let elements = look.arrays.by_id.get(&id).map_or(&[][..], |a| a.elements.as_slice());
                    let i = index.unwrap_or_default();
                    let e = elements
                        .binary_search_by_key(&i, |&(x, _)| x)
                        .ok()
                        .map(|at| elements[at].1);
                    summarize(e.into_iter(), *kind, t.delay_minutes, look.now_s, state)
                }
                Resolved::Array(id) => *memo.0.entry((id, *kind, t.delay_minutes)).or_insert_with(|| {
                    let elements = look.arrays.by_id.get(&id).map_or(&[][..], |a| a.elements.as_slice());
                    summarize(
                        elements.iter().map(|&(_, e)| e),
                        *kind,
                        t.delay_minutes,
                        look.now_s,
                        state,
                    )
                }),
            };
            if let Some(at) = s.until {
                until = Some(until.map_or(at, |u| u.min(at)));
            }
            let shown = format!("{}:{}", kind.as_str(), t.target);
            let how = |n: usize, what: &str| {
                if s.total() > 1 {
                    format!("{shown} ({n} of {} {what})", s.total())
                } else {
                    format!("{shown} ({})", s.word)
                }
            };
            if s.never > 0 {
                c_never.push(how(s.never, "ended otherwise"));
            } else if s.wait > 0 {
                c_wait.push(how(s.met, "done"));
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
/// holds that `visible` says the submitter may see (under `privateData` another user's
/// job reads as missing: neither its existence nor its state leaks through a
/// dependency's reason), or one in `earlier` (names earlier in the same submission).
pub fn check_targets<'a>(
    job: &str,
    is_element: bool,
    dep: &Dependency,
    look: &Lookup<'_>,
    earlier: &[&str],
    state: &dyn Fn(Entity) -> Option<(&'a Job, &'a JobState)>,
    visible: &dyn Fn(Entity) -> bool,
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
            let seen = match resolve(look, &t.target, state) {
                Some(Resolved::Job(e)) => visible(e),
                Some(Resolved::Array(id)) => look
                    .arrays
                    .by_id
                    .get(&id)
                    .and_then(|a| a.elements.first())
                    .is_some_and(|&(_, e)| visible(e)),
                None => false,
            };
            let known = seen || matches!(&t.target, Target::Name(n) if earlier.contains(&n.as_str()));
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
