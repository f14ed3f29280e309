//! What a walk tries, in which order, and against which reservations. Before the walk:
//! the jobs that may have something to place ([`Unsettled`](super::world::Unsettled)) grow
//! by what arrived; a held job, or one whose begin time has not come, says why and is not
//! tried; a job that failed with as much room as there is now is not tried again; and
//! the reservations either stand (nothing changed since they were worked out: one
//! [`Since`] says so) or are worked out again in this walk, maintenance windows first.

use std::cmp::Reverse;

use bevy_ecs::prelude::*;

use crate::config::SchedulerConfig;
use crate::model::awaiting::Incomplete;
use crate::model::commands::Command;
use crate::model::components::{Job, JobId, JobPhase, JobState};
use crate::model::since::Since;
use crate::order::{OrderKey, Rank};

use super::backfill::{self, Reservation};
use super::world::{Arrivals, Caches, Jobs, Memory, Policy, Setting};

/// What the walk does this tick (see the module).
pub struct Agenda {
    /// The jobs to try, in order (queue priority, multifactor score, submit time, id).
    pub order: Vec<(OrderKey, Entity)>,
    /// The last walk's job reservations, when the list is worked out again (a due one
    /// starts on its nodes; a recomputed one keeps them when they still hold).
    pub previous: Vec<Reservation>,
    /// Whether `previous` names nodes of this topology.
    pub sticky: bool,
    /// Jobs held for their preemptions (their nodes are held for them in the walk).
    pub held: Vec<Entity>,
    /// Whether every node known from the store is back (else nothing is rejected and no
    /// new reservation is made).
    pub whole: bool,
    /// What the cluster lacks while agents come back.
    pub incomplete: Option<Incomplete>,
    /// A job that failed at this value fails again: it counts up when room may have
    /// grown or the reservations were worked out again.
    pub room_epoch: u64,
}

/// When a job may first run: its submit time, or its begin time when later.
pub fn eligible(job: &Job) -> u64 {
    job.spec
        .begin
        .map_or(job.spec.submit_time, |b| b.max(job.spec.submit_time))
}

/// Whether `job` starves at `now` (see [`SchedulerConfig::starves`]): counted from when it
/// became eligible, by its time limit.
pub fn starves(job: &Job, scheduler: &SchedulerConfig, now: u64) -> bool {
    scheduler.starves(eligible(job), job.spec.run.time_limit, now)
}

/// The order key of job `e` (see [`Agenda::order`]). A job waiting past `[scheduler]
/// starvation` at `now` goes before every other, oldest first: priorities and fair share
/// reorder the queue, but never starve a job. With `[scheduler] keepReservations`, a job
/// holding a reservation (`st`) goes first among the jobs of its queue priority and
/// class, oldest first: a better score (fair share, age, size) that comes later does not
/// take the reservation from it; a higher queue or class still does.
pub fn key_of(
    policy: &Policy<'_, '_>,
    e: Entity,
    job: &Job,
    st: &JobState,
    scheduler: &SchedulerConfig,
    now: u64,
) -> OrderKey {
    let meta = policy.meta.get(e).ok().map(|(_, rank, id)| (rank, *id));
    walk_key(meta, job, st, scheduler, now)
}

/// [`key_of`] from what it reads of the job: `meta`, its rank and id (`None`: not
/// ranked yet, last). The views rank the waiting jobs with it, so the rank a user sees
/// is the walk's.
pub fn walk_key(
    meta: Option<(&Rank, JobId)>,
    job: &Job,
    st: &JobState,
    scheduler: &SchedulerConfig,
    now: u64,
) -> OrderKey {
    let since = eligible(job);
    let id = || meta.map_or(u64::MAX, |(_, id)| id.0);
    if starves(job, scheduler, now) {
        return (Reverse(i32::MAX), Reverse(i32::MAX), Reverse(i64::MAX), since, id());
    }
    if scheduler.keep_reservations
        && st.reservation.is_some()
        && let Some((rank, _)) = meta
    {
        return (
            Reverse(rank.queue_priority),
            Reverse(rank.class),
            Reverse(i64::MAX),
            since,
            id(),
        );
    }
    meta.map_or(
        (Reverse(0), Reverse(0), Reverse(0), job.spec.submit_time, u64::MAX),
        |(rank, id)| rank.key(job.spec.submit_time, id),
    )
}

/// Works out the walk's [`Agenda`] (see the module).
pub fn agenda(
    at: &Setting<'_>,
    caches: &Caches<'_>,
    w: &mut Jobs<'_, '_>,
    arrivals: &mut Arrivals<'_, '_>,
    policy: &Policy<'_, '_>,
    memory: &mut Memory<'_, '_>,
) -> Agenda {
    let (index, config, now_s) = (&*at.index, &*at.config, at.now.secs());
    // While nodes known from the store have not registered, the cluster is not whole:
    // "never fits" is not decided on it, nor while agents of nodes the store does not
    // name may still come back after a restart (see `awaiting`).
    let whole = arrivals.awaiting.as_deref().is_none_or(|a| a.0 == 0);
    let incomplete = Incomplete::at(arrivals.awaiting.as_deref(), arrivals.rejoining.as_deref(), at.now.ms);
    let unsettled = &mut *memory.unsettled;
    // What the cluster lacks changed (an agent came, or the time the others had to come
    // back is over) without a new topology: the jobs that waited for it are looked at
    // again, their reasons worked out anew (a job that can never run is rejected now).
    if *memory.last_incomplete != incomplete {
        if memory.last_incomplete.is_some() {
            unsettled.generation = None;
            for (_, _, mut st) in &mut w.jobs {
                if st.phase == JobPhase::Pending && st.failed_epoch.is_some() {
                    st.failed_epoch = None;
                }
            }
        }
        *memory.last_incomplete = incomplete;
    }
    // A job rejected because it could not run on the emptied cluster is looked at again
    // when the topology changed since (in the daemon nodes register and discovery sources
    // load after people submit): every job is looked over then. One rejected at submit (a
    // bad spec) never is: it has no checked generation.
    let mut fresh: Vec<Entity> = Vec::new();
    if unsettled.generation != Some(index.generation) {
        unsettled.generation = Some(index.generation);
        unsettled.jobs = w.jobs.iter().map(|(e, _, _)| e).collect();
    } else {
        fresh.extend(arrivals.submitted.iter());
        fresh.extend(arrivals.requeued.iter());
        unsettled.jobs.extend(fresh.iter().copied());
    }
    // Jobs with lost tasks to start again (`onNodeLost: replace`), and jobs a gate let
    // go (see `jobs::gates`).
    unsettled.jobs.extend(arrivals.replacements.jobs.iter().copied());
    unsettled.jobs.extend(arrivals.revisit.0.drain(..));
    // Held jobs say why; jobs waiting past `starvation` are counted (when one more starves,
    // the order changed: the reservations are worked out again).
    let starving = settle_waits(w, memory, now_s, &config.scheduler);
    let reservations = &mut *memory.reservations;
    // Reservations stand until room may have grown, a holder stopped waiting, or a job
    // arrived ahead of one; then they are all worked out again in this walk.
    let want = config.scheduler.reservations as usize;
    // Jobs whose preemption's nodes are held (see `hold`): when one of them no longer
    // is (cancelled, or it lost its nomination), room grew for everyone.
    let held: Vec<Entity> = memory
        .nominated
        .jobs
        .iter()
        .copied()
        .filter(|&e| {
            w.jobs
                .get(e)
                .is_ok_and(|(_, _, st)| st.phase == JobPhase::Pending && st.nomination.is_some())
        })
        .collect();
    if memory.last_held.iter().any(|e| !held.contains(e)) {
        reservations.basis = None;
    }
    *memory.last_held = held.clone();
    // A maintenance window that closed gives its nodes back: everything is looked at again.
    let closed = config.maintenance.iter().filter(|w| w.end <= now_s).count() as u64;
    let basis = Since {
        capacity: at.epoch.0,
        topology: index.generation,
        order: policy.order_state.generation,
        windows_closed: closed,
        starving,
        overran: {
            // A running job past its runtime estimate is counted at its limit from now on:
            // the reservations built on its estimate are worked out again.
            let jobs = &w.jobs;
            memory.overruns.settle(now_s, |e| {
                jobs.get(e).is_ok_and(|(_, _, st)| st.phase == JobPhase::Running)
            });
            memory.overruns.passed
        },
        ..Since::default()
    };
    let holder_gone = reservations
        .list
        .iter()
        .filter(|r| r.job != Entity::PLACEHOLDER)
        .any(|r| {
            w.jobs
                .get(r.job)
                .ok()
                .is_none_or(|(_, job, st)| st.phase != JobPhase::Pending || crate::jobs::holds::waits(job, st, now_s))
        });
    let ahead = reservations.list.last().is_some_and(|last| {
        fresh
            .iter()
            .filter_map(|&e| w.jobs.get(e).ok())
            .any(|(e, job, st)| key_of(policy, e, job, st, &config.scheduler, now_s) < last.key)
    });
    // A node drained under a reservation: it is worked out again (drains elsewhere take
    // room no reservation counts on).
    let closed = &arrivals.closed.0;
    let reserved_closed = !closed.is_empty()
        && reservations
            .list
            .iter()
            .any(|r| r.held.iter().any(|h| closed.binary_search(&h.node).is_ok()));
    let mut previous = Vec::new();
    // The old list's nodes mean the same only within one topology generation.
    let mut sticky = false;
    if want == 0 || reservations.basis != Some(basis) || holder_gone || ahead || reserved_closed {
        sticky = reservations.basis.is_some_and(|b| b.topology == index.generation);
        previous = std::mem::take(&mut reservations.list);
        previous.retain(|r| r.job != Entity::PLACEHOLDER);
        reservations.generation += 1;
        reservations.basis = Some(basis);
        // Maintenance windows first: every job is tried around them.
        reservations.list = backfill::maintenance::windows(&config.maintenance, now_s, index, &caches.cap);
        // Once per topology (a node may register later), for windows not yet closed.
        if reservations.checked_windows != Some(index.generation) {
            reservations.checked_windows = Some(index.generation);
            let open: Vec<_> = config.maintenance.iter().filter(|w| w.end > now_s).cloned().collect();
            for w in backfill::maintenance::unknown_names(&open, index) {
                memory.out.0.push(Command::Warn(w));
            }
        }
        reservations.windows = reservations.list.len();
        // While agents known from the store are still away nothing new is reserved (the
        // cluster is not whole), but the reservations the store kept stand: whole nodes
        // for their time, so no job behind takes them while the agents come back.
        if !whole {
            let mut stored: Vec<Reservation> = w
                .jobs
                .iter()
                .filter(|(_, _, st)| st.phase == JobPhase::Pending)
                .filter_map(|(e, job, st)| {
                    let r = st.reservation.as_ref()?;
                    Some(backfill::maintenance::stored(
                        e,
                        key_of(policy, e, job, st, &config.scheduler, now_s),
                        r,
                        job.spec.run.time_limit,
                        index,
                        &caches.cap,
                    ))
                })
                .collect();
            stored.sort_by_key(|r| r.key);
            reservations.list.extend(stored);
        }
    }
    // A job that failed with this much room fails again: retried only when capacity may
    // have grown or the reservations were worked out again (both only ever count up).
    let room_epoch = at.epoch.0.wrapping_add(reservations.generation);
    let order = order(
        w,
        policy,
        &memory.unsettled.jobs,
        (now_s, &config.scheduler),
        room_epoch,
        index.feasibility,
    );
    Agenda {
        order,
        previous,
        sticky,
        held,
        whole,
        incomplete,
        room_epoch,
    }
}

/// A held job, or one whose begin time has not come, is not tried (nor reserved for): it
/// says why (worked out once, not each tick), and stays unsettled until it may be tried.
/// Returns how many pending jobs starve (see [`key_of`]).
fn settle_waits(w: &mut Jobs<'_, '_>, memory: &mut Memory<'_, '_>, now_s: u64, scheduler: &SchedulerConfig) -> u64 {
    use crate::jobs::holds;
    let mut next_begin: Option<u64> = None;
    let mut starving = 0u64;
    for &e in &memory.unsettled.jobs {
        let Ok((_, job, mut st)) = w.jobs.get_mut(e) else {
            continue;
        };
        if st.phase != JobPhase::Pending {
            continue; // a rejected job keeps saying why it was
        }
        if starves(job, scheduler, now_s) {
            starving += 1;
        }
        let shows_wait = st.reason.as_ref().is_some_and(crate::model::reason::Reason::is_wait);
        if holds::waits(job, &st, now_s) {
            if st.held.is_none()
                && let Some(b) = job.spec.begin.filter(|&b| b > now_s)
            {
                next_begin = Some(next_begin.map_or(b, |n| n.min(b)));
            }
            if !shows_wait {
                st.reason = holds::not_yet(job, &st, now_s);
                st.reservation = None;
            }
        } else if shows_wait {
            // Its begin time came: tried now, and preemption looks again.
            st.reason = None;
            st.failed_epoch = None;
            memory.waiting.unheld += 1;
        }
    }
    if memory.waiting.next_begin != next_begin {
        memory.waiting.next_begin = next_begin;
    }
    starving
}

/// The unsettled jobs to try, in order: not waiting, and not failed at `room_epoch`.
fn order(
    w: &Jobs<'_, '_>,
    policy: &Policy<'_, '_>,
    unsettled: &std::collections::BTreeSet<Entity>,
    (now_s, scheduler): (u64, &SchedulerConfig),
    room_epoch: u64,
    generation: u64,
) -> Vec<(OrderKey, Entity)> {
    let mut order: Vec<(OrderKey, Entity)> = unsettled
        .iter()
        .filter_map(|&e| w.jobs.get(e).ok())
        .filter(|(_, job, st)| !crate::jobs::holds::waits(job, st, now_s))
        .filter(|(_, job, st)| match st.phase {
            // Nothing freed since it last failed: it would fail again (see below).
            JobPhase::Pending => st.failed_epoch != Some(room_epoch),
            // Ranks count the placed tasks: a job with all of them placed has none left.
            // One with a verdict (a task failed, `continue`) gets no more.
            JobPhase::Running => st.has_tasks_to_place(job.tasks.len()) && st.failed_epoch != Some(room_epoch),
            JobPhase::Rejected => st.checked_generation.is_some_and(|g| g != generation),
            JobPhase::Ending | JobPhase::Finished | JobPhase::Cancelled => false,
        })
        .map(|(e, j, st)| (key_of(policy, e, j, st, scheduler, now_s), e))
        .collect();
    order.sort();
    order
}
