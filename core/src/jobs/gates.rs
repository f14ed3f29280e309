//! The gates system: before the walk, works out for each pending job that may be kept
//! waiting ([`Gated`]) whether its dependency is met (`jobs::dependencies`), whether its
//! array already runs its `%N` elements, and whether another job of its name and user
//! has not ended (`singleton`). A gated job is not tried, does not preempt and gets no
//! reservation (`jobs::holds::waits`), and says why. A dependency that can never be met
//! cancels the job, unless it asks `keepOnFailedDependency`; once decided, a dependency
//! is kept in the job's record ([`Settled`]).
//!
//! It also turns a hard topology soft once its job waited `softAfter` for it (Slurm's
//! `--switches=N@TIME`).
//!
//! `%N` keeps the lowest-indexed elements that may start: with `limit` elements
//! running, none starts; with fewer, only so many of the waiting ones are let through,
//! so one walk never starts more than the limit.

use std::collections::{BTreeSet, HashMap};

use bevy_ecs::prelude::*;

use crate::jobs::arrays::{Gated, singleton_key};
use crate::jobs::dependencies::{Lookup, Outcome, evaluate};
use crate::jobs::holds::{Waiting, held_or_early, spec_not_yet};
use crate::jobs::ownership::is_live;
use crate::model::arrays::Arrays;
use crate::model::components::{Job, JobId, JobOwner, JobPhase, JobState};
use crate::model::gate::{Gate, Settled};
use crate::model::jobstate::Verdict;
use crate::model::reason::Reason;
use crate::model::tick::Now;
use crate::names::{JobIds, JobNames};
use hyperplan_shared::job::TopologyMode;

/// What the system decided for one job.
#[derive(Debug, Default, Clone)]
struct Decision {
    gate: Option<Gate>,
    settle: Option<Settled>,
    /// Its dependency can never be met: cancelled, saying why.
    cancel: Option<String>,
    /// It ended: no longer looked at.
    done: bool,
    /// Its hard topology was waited for long enough (`softAfter`): soft from now on.
    relax: bool,
}

/// Whether a job is one a gate may keep: pending (or rejected for the topology) with
/// nothing placed.
fn waiting(st: &JobState) -> bool {
    matches!(st.phase, JobPhase::Pending | JobPhase::Rejected) && st.next_rank == 0 && is_live(st)
}

/// The gates system (see the module header). Every decision follows from the jobs'
/// states and the time: when no job's state changed since the last run and no time it
/// waits for has come, nothing is looked at; and an array's `%N` is worked out again
/// only when one of its elements changed (so 10,000 elements held back by `%N` cost a
/// tick what none do).
pub(crate) fn gates(
    world: &mut World,
    gated: &mut QueryState<Entity, With<Gated>>,
    changed: &mut QueryState<Entity, (With<Job>, Changed<JobState>)>,
) {
    let now_s = world.resource::<Now>().secs();
    let waiting = world.resource::<Waiting>();
    let due = [waiting.next_dependency, waiting.next_begin]
        .into_iter()
        .flatten()
        .any(|t| t <= now_s);
    let changed: Vec<Entity> = changed.iter(world).collect();
    if !due && changed.is_empty() {
        return;
    }
    // The arrays with a limit to work out again: those with an element that changed
    // (every one when a waited-for time came: a begin time lets elements in).
    let arrays = world.resource::<Arrays>();
    let dirty: BTreeSet<u64> = if due {
        arrays
            .by_id
            .iter()
            .filter(|(_, a)| a.limit.is_some())
            .map(|(&id, _)| id)
            .collect()
    } else {
        changed
            .iter()
            .filter_map(|&e| world.get::<Job>(e)?.spec.element.as_ref())
            .filter(|el| el.limit().is_some())
            .map(|el| el.array_id)
            .collect()
    };
    let mut entities: Vec<Entity> = gated.iter(world).collect();
    for id in &dirty {
        if let Some(a) = arrays.by_id.get(id) {
            entities.extend(a.elements.iter().map(|&(_, e)| e));
        }
    }
    entities.sort_unstable();
    entities.dedup();
    if entities.is_empty() {
        if world.resource::<Waiting>().next_dependency.is_some() {
            world.resource_mut::<Waiting>().next_dependency = None;
        }
        return;
    }
    let _span = tracing::info_span!("gates", jobs = entities.len()).entered();
    let (decided, next) = decide(world, &entities, &dirty, now_s);
    if world.resource::<Waiting>().next_dependency != next {
        world.resource_mut::<Waiting>().next_dependency = next;
    }
    apply(world, &entities, decided, now_s);
}

/// The decisions of one pass, by the place of their job in the pass's sorted entities
/// (a vector, not a map: an array of 10,000 elements is worked out often).
struct Decided<'e> {
    entities: &'e [Entity],
    of: Vec<Option<Decision>>,
}

impl Decided<'_> {
    fn get(&self, e: Entity) -> Option<&Decision> {
        let i = self.entities.binary_search(&e).ok()?;
        self.of[i].as_ref()
    }

    fn get_mut(&mut self, e: Entity) -> Option<&mut Decision> {
        let i = self.entities.binary_search(&e).ok()?;
        self.of[i].as_mut()
    }
}

/// Phase one, reading only: every gated job's decision, and the earliest time an
/// `after:JOB+MINUTES` will hold.
fn decide<'e>(world: &World, entities: &'e [Entity], dirty: &BTreeSet<u64>, now_s: u64) -> (Decided<'e>, Option<u64>) {
    let look = Lookup {
        names: world.resource::<JobNames>(),
        ids: world.resource::<JobIds>(),
        arrays: world.resource::<Arrays>(),
        now_s,
    };
    let state = |e: Entity| Some((world.get::<Job>(e)?, world.get::<JobState>(e)?));
    let mut decided = Decided {
        entities,
        of: vec![None; entities.len()],
    };
    let mut next: Option<u64> = None;
    let mut singletons: Vec<Entity> = Vec::new();
    let mut memo = crate::jobs::dependencies::Memo::default();
    for (i, &e) in entities.iter().enumerate() {
        let Some((job, st)) = state(e) else { continue };
        let mut d = Decision::default();
        if !is_live(st) {
            d.done = true;
            decided.of[i] = Some(d);
            continue;
        }
        if !waiting(st) {
            decided.of[i] = Some(d);
            continue;
        }
        if let Some(after) = job.spec.topology_soft_after
            && job
                .spec
                .network_topology
                .as_ref()
                .is_some_and(|t| t.mode == TopologyMode::Hard)
        {
            let at = job.spec.submit_time.saturating_add(after);
            if now_s >= at {
                d.relax = true;
            } else {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        if let Some(dep) = &job.spec.depends_on {
            match &st.dependency {
                Some(Settled::Met) => {}
                Some(Settled::Never(why)) => d.gate = Some(Gate::NeverMet(why.clone())),
                None => match evaluate(
                    dep,
                    job.spec.element.as_ref().map(|el| el.index),
                    &look,
                    &state,
                    &mut memo,
                ) {
                    Outcome::Met => d.settle = Some(Settled::Met),
                    Outcome::Wait { what, until } => {
                        if let Some(u) = until {
                            next = Some(next.map_or(u, |n| n.min(u)));
                        }
                        d.gate = Some(Gate::Dependency(what));
                    }
                    Outcome::Never(why) => {
                        d.settle = Some(Settled::Never(why.clone()));
                        if job.spec.keep_on_failed_dependency {
                            d.gate = Some(Gate::NeverMet(why));
                        } else {
                            d.cancel = Some(why);
                        }
                    }
                },
            }
            if d.gate.is_none() && d.cancel.is_none() && dep.has_singleton() {
                singletons.push(e);
            }
        }
        decided.of[i] = Some(d);
    }
    if !singletons.is_empty() {
        singleton_gates(world, &singletons, &mut decided);
    }
    array_limits(world, look.arrays, dirty, now_s, &mut decided);
    (decided, next)
}

/// A live job as `singleton` sees it: (id, running, name).
type Live<'a> = (u64, bool, &'a str);

/// `singleton`: a job waits while another job of its user and name (see
/// [`singleton_key`]) runs, or waits with a smaller id (the earlier one goes first).
fn singleton_gates(world: &World, singletons: &[Entity], decided: &mut Decided<'_>) {
    // Live jobs by (owner, name): (id, running, name). Only when some job asks it.
    let mut by_key: HashMap<(&str, &str), Vec<Live<'_>>> = HashMap::new();
    let mut all = world.try_query::<(&Job, &JobState, &JobOwner, &JobId)>();
    if let Some(q) = all.as_mut() {
        for (job, st, owner, id) in q.iter(world) {
            if !is_live(st) {
                continue;
            }
            let running = !waiting(st);
            by_key
                .entry((&*owner.0, singleton_key(&job.spec, *id)))
                .or_default()
                .push((id.0, running, &job.spec.name));
        }
    }
    for &e in singletons {
        let (Some(job), Some(owner), Some(&id)) =
            (world.get::<Job>(e), world.get::<JobOwner>(e), world.get::<JobId>(e))
        else {
            continue;
        };
        let Some(others) = by_key.get(&(&*owner.0, singleton_key(&job.spec, id))) else {
            continue;
        };
        let blocker = others
            .iter()
            .filter(|&&(other, running, _)| other != id.0 && (running || other < id.0))
            .min_by_key(|&&(other, _, _)| other);
        if let (Some(&(_, _, name)), Some(d)) = (blocker, decided.get_mut(e)) {
            d.gate = Some(Gate::Singleton {
                other: name.to_string(),
            });
        }
    }
}

/// `%N`: per array with a limit, its running elements count against it; the waiting
/// elements with no other gate get the places left, lowest index first.
fn array_limits(world: &World, arrays: &Arrays, dirty: &BTreeSet<u64>, now_s: u64, decided: &mut Decided<'_>) {
    for a in dirty.iter().filter_map(|id| arrays.by_id.get(id)) {
        let Some(limit) = a.limit else { continue };
        let mut running = 0u32;
        let mut candidates: Vec<Entity> = Vec::new();
        for &(_, e) in &a.elements {
            let (Some(job), Some(st)) = (world.get::<Job>(e), world.get::<JobState>(e)) else {
                continue;
            };
            if !is_live(st) {
                continue;
            }
            if !waiting(st) {
                running += 1;
            } else if !held_or_early(&job.spec, st, now_s)
                && decided.get(e).is_some_and(|d| d.gate.is_none() && d.cancel.is_none())
            {
                candidates.push(e);
            }
        }
        let free = limit.saturating_sub(running) as usize;
        for e in candidates.into_iter().skip(free) {
            if let Some(d) = decided.get_mut(e) {
                d.gate = Some(Gate::ArrayLimit {
                    array: a.name.clone(),
                    limit,
                });
            }
        }
    }
}

/// Phase two: writes the decisions (only what changed, so the store sees only real
/// changes).
fn apply(world: &mut World, entities: &[Entity], decided: Decided<'_>, now_s: u64) {
    for (&e, d) in entities.iter().zip(decided.of) {
        let Some(d) = d else { continue };
        if d.done {
            if world.get::<Gated>(e).is_some() {
                world.entity_mut(e).remove::<Gated>();
            }
            continue;
        }
        if d.relax {
            relax(world, e);
        }
        // Most decisions change nothing: looked at before anything is cloned.
        let same = world.get::<JobState>(e).is_some_and(|st| {
            d.cancel.is_none() && (d.settle.is_none() || st.dependency == d.settle) && st.gate == d.gate
        });
        if same {
            continue;
        }
        let Some(job) = world.get::<Job>(e).map(|j| j.spec.clone()) else {
            continue;
        };
        let Some(mut st) = world.get_mut::<JobState>(e) else {
            continue;
        };
        if d.settle.is_some() && st.dependency != d.settle {
            st.dependency = d.settle;
        }
        if let Some(why) = d.cancel {
            tracing::info!(job = job.name, "dependency never met ({why}): cancelled");
            st.nomination = None;
            st.gate = None;
            st.reservation = None;
            st.phase = JobPhase::Cancelled;
            st.verdict = Some(Verdict::Cancelled);
            st.end_time = Some(now_s);
            st.reason = Some(Reason::DependencyNeverMet(why));
            continue;
        }
        if st.gate != d.gate {
            st.gate = d.gate;
            if st.gate.is_some() {
                st.reason = spec_not_yet(&job, &st, now_s);
                st.reservation = None;
            }
        }
    }
}

/// A job whose hard topology was waited for `softAfter`: it and the sub-jobs that had
/// the job's topology become soft, and it is tried again at once.
fn relax(world: &mut World, e: Entity) {
    let Some(mut job) = world.get_mut::<Job>(e) else {
        return;
    };
    let spec = std::sync::Arc::make_mut(&mut job.spec);
    let Some(topology) = spec.network_topology.as_mut() else {
        return;
    };
    let old = topology.clone();
    topology.mode = TopologyMode::Soft;
    let new = topology.clone();
    tracing::info!(
        job = spec.name,
        "waited softAfter for its hard topology: soft from now on"
    );
    let sub_jobs = job.sub_jobs.clone();
    for sj in sub_jobs {
        if let Some(mut s) = world.get_mut::<crate::model::components::SubJob>(sj)
            && s.network_topology.as_ref() == Some(&old)
        {
            s.network_topology = Some(new.clone());
        }
    }
    if let Some(mut st) = world.get_mut::<JobState>(e) {
        st.failed_epoch = None;
        // Rejected because the empty cluster has no HyperNode within its limit: soft,
        // it may fit, and is looked at again.
        if st.phase == JobPhase::Rejected {
            st.phase = JobPhase::Pending;
            st.reason = None;
            st.checked_generation = None;
            world.resource_mut::<crate::model::gate::Revisit>().0.push(e);
            // Its parts were let go while it was rejected (`jobs::shed`): back, soft.
            if world.entity_mut(e).take::<crate::jobs::shed::Shed>().is_some()
                && let Some(spec) = world.get::<Job>(e).map(|j| j.spec.clone())
            {
                let parts = crate::jobs::admit::spawn_parts(world, e, &spec);
                if let Some(mut job) = world.get_mut::<Job>(e) {
                    job.sub_jobs = parts.sub_jobs;
                    job.tasks = parts.tasks;
                    job.partition_groups = parts.partition_groups;
                }
            }
        }
    }
}
