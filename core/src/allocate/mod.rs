//! The allocate system: jobs in order (priority, then submit time, then name), each
//! searched with the two-level gradient search, committed whole or not at all; the first
//! blocked jobs get reservations and later ones backfill around them ([`backfill`]).

pub mod backfill;
mod binpack;
mod fading;
mod gang;
mod gradient;
pub mod hold;
mod lca_score;
mod rank;
mod reason;
mod search;
mod span;
pub mod tier;

use std::cmp::Reverse;
use std::collections::BTreeSet;

use bevy_ecs::prelude::*;
use hyperplan_shared::NetworkTopology;

use super::topology::{TierCap, TopologyIndex};
use crate::cache::capacity::Capacity;
use crate::cache::holdings::{Holdings, ShapeMemo, held_by};
use crate::cache::numa::NumaState;
use crate::config::PlannerConfig;
use crate::jobs::holds;
use crate::model::awaiting::{Awaiting, Incomplete, Rejoining};
use crate::model::commands::Command;
use crate::model::components::Requeued;
use crate::model::components::{
    Job, JobPhase, JobState, NodeSlot, Retired, SubJob, SubJobState, Task, TaskPhase, TaskState,
};
use crate::model::components::{JobId, JobQueue};
use crate::model::ids::NodeIdx;
use crate::model::tick::{CapacityEpoch, Nominated, Now, Outbox, Replacements};
use crate::order::{OrderKey, OrderState, Rank};
use crate::queues::{self, QueueTable, QueueUse, Users};
use hyperplan_shared::report::ReservationReport;

use backfill::active::{ActiveSet, Window};
use backfill::reserve::Sweep;
use backfill::timeline::{Release, Timeline};
use backfill::{Reservation, Reservations};

pub use gang::{JobCtx, SubJobCtx, TaskSlot};
pub use gradient::gradients;
pub use lca_score::tier_score;
pub use search::Search;

/// A job with tasks left over after a commit (minAvailable < replicas) is tried again
/// in the same tick, from its allocated HyperNode; this bounds the retries.
const PASSES_PER_JOB: usize = 2;

/// The allocate system: tries each job that may have something to place ([`Unsettled`])
/// in order, commits it whole or not at all, and sets the pending reason of a job that
/// does not fit. The first `[scheduler] reservations` pending jobs that do not fit each
/// get a reservation ([`backfill`]); every later job is tried with the reservations its
/// time limit would overlap holding their room, so it starts only where it delays none.
#[allow(clippy::too_many_arguments)]
pub fn allocate(
    index: Res<TopologyIndex>,
    config: Res<PlannerConfig>,
    now: Res<Now>,
    epoch: Res<CapacityEpoch>,
    (mut cap, mut numa, mut holdings): (ResMut<Capacity>, ResMut<NumaState>, ResMut<Holdings>),
    mut out: ResMut<Outbox>,
    mut jobs: Query<(Entity, &Job, &mut JobState), Without<Retired>>,
    mut sub_jobs: Query<(&'static SubJob, &'static mut SubJobState)>,
    mut tasks: Query<(&'static Task, &'static mut TaskState)>,
    nodes: Query<&'static NodeSlot>,
    (submitted, requeued): (Arrived<Added<Job>>, Arrived<Changed<Requeued>>),
    mut unsettled: Local<Unsettled>,
    (awaiting, rejoining): (Option<Res<Awaiting>>, Option<Res<Rejoining>>),
    mut reservations: ResMut<Reservations>,
    (policy, mut nominated, replacements, mut revisit): (
        Policy,
        ResMut<Nominated>,
        Res<Replacements>,
        ResMut<crate::model::gate::Revisit>,
    ),
    (mut last_held, mut last_incomplete, mut waiting): (
        Local<Vec<Entity>>,
        Local<Option<Incomplete>>,
        ResMut<holds::Waiting>,
    ),
) {
    let Policy {
        queue_table,
        mut queue_use,
        users,
        order_state,
        meta,
    } = policy;
    // While nodes known from the store have not registered, the cluster is not whole:
    // "never fits" is not decided on it, nor while agents of nodes the store does not
    // name may still come back after a restart (see `awaiting`).
    let whole = awaiting.as_deref().is_none_or(|a| a.0 == 0);
    let incomplete = Incomplete::at(awaiting.as_deref(), rejoining.as_deref(), now.ms);
    let _span = tracing::info_span!("allocate").entered();
    let now_s = now.secs();
    // What the cluster lacks changed (an agent came, or the time the others had to come
    // back is over) without a new topology: the jobs that waited for it are looked at
    // again, their reasons worked out anew (a job that can never run is rejected now).
    if *last_incomplete != incomplete {
        if last_incomplete.is_some() {
            unsettled.generation = None;
            for (_, _, mut st) in &mut jobs {
                if st.phase == JobPhase::Pending && st.failed_epoch.is_some() {
                    st.failed_epoch = None;
                }
            }
        }
        *last_incomplete = incomplete;
    }
    // A job rejected because it could not run on the emptied cluster is looked at again
    // when the topology changed since (in the daemon nodes register and discovery sources
    // load after people submit): every job is looked over then. One rejected at submit (a
    // bad spec) never is: it has no checked generation.
    let mut fresh: Vec<Entity> = Vec::new();
    if unsettled.generation != Some(index.generation) {
        unsettled.generation = Some(index.generation);
        unsettled.jobs = jobs.iter().map(|(e, _, _)| e).collect();
    } else {
        fresh.extend(submitted.iter());
        fresh.extend(requeued.iter());
        unsettled.jobs.extend(fresh.iter().copied());
    }
    // Jobs with lost tasks to start again (`onNodeLost: replace`), and jobs a gate let
    // go (see `jobs::gates`).
    unsettled.jobs.extend(replacements.jobs.iter().copied());
    unsettled.jobs.extend(revisit.0.drain(..));
    // The walk's order (`order`): queue priority, then the multifactor score, then
    // submit time, then id.
    let key_of = |e: Entity, job: &Job| -> OrderKey {
        meta.get(e).map_or(
            (Reverse(0), Reverse(0), Reverse(0), job.spec.submit_time, u64::MAX),
            |(_, rank, id)| rank.key(job.spec.submit_time, *id),
        )
    };
    // Reservations stand until room may have grown, a holder stopped waiting, or a job
    // arrived ahead of one; then they are all worked out again in this walk.
    let want = config.scheduler.reservations as usize;
    // Jobs whose preemption's nodes are held (see `hold`): when one of them no longer
    // is (cancelled, or it lost its nomination), room grew for everyone.
    let held: Vec<Entity> = nominated
        .jobs
        .iter()
        .copied()
        .filter(|&e| {
            jobs.get(e)
                .is_ok_and(|(_, _, st)| st.phase == JobPhase::Pending && st.nomination.is_some())
        })
        .collect();
    if last_held.iter().any(|e| !held.contains(e)) {
        reservations.basis = None;
    }
    *last_held = held.clone();
    // A maintenance window that closed gives its nodes back: everything is looked at again.
    let closed = config.maintenance.iter().filter(|w| w.end <= now_s).count() as u64;
    let basis = (epoch.0, index.generation, order_state.generation, closed);
    let holder_gone = reservations
        .list
        .iter()
        .filter(|r| r.job != Entity::PLACEHOLDER)
        .any(|r| {
            jobs.get(r.job)
                .ok()
                .is_none_or(|(_, job, st)| st.phase != JobPhase::Pending || holds::waits(job, st, now_s))
        });
    let ahead = reservations.list.last().is_some_and(|last| {
        fresh
            .iter()
            .filter_map(|&e| jobs.get(e).ok())
            .any(|(e, job, _)| key_of(e, job) < last.key)
    });
    let mut previous = Vec::new();
    // The old list's nodes mean the same only within one topology generation.
    let mut sticky = false;
    if want == 0 || reservations.basis != Some(basis) || holder_gone || ahead {
        sticky = reservations.basis.is_some_and(|(_, g, _, _)| g == index.generation);
        previous = std::mem::take(&mut reservations.list);
        previous.retain(|r| r.job != Entity::PLACEHOLDER);
        reservations.generation += 1;
        reservations.basis = Some(basis);
        // Maintenance windows first: every job is tried around them.
        reservations.list = backfill::maintenance::windows(&config.maintenance, now_s, &index, &cap);
        // Once per topology (a node may register later), for windows not yet closed.
        if reservations.checked_windows != Some(index.generation) {
            reservations.checked_windows = Some(index.generation);
            let open: Vec<_> = config.maintenance.iter().filter(|w| w.end > now_s).cloned().collect();
            for w in backfill::maintenance::unknown_names(&open, &index) {
                out.0.push(Command::Warn(w));
            }
        }
        reservations.windows = reservations.list.len();
        // While agents known from the store are still away nothing new is reserved (the
        // cluster is not whole), but the reservations the store kept stand: whole nodes
        // for their time, so no job behind takes them while the agents come back.
        if !whole {
            let mut stored: Vec<Reservation> = jobs
                .iter()
                .filter(|(_, _, st)| st.phase == JobPhase::Pending)
                .filter_map(|(e, job, st)| {
                    let r = st.reservation.as_ref()?;
                    Some(backfill::maintenance::stored(
                        e,
                        key_of(e, job),
                        r,
                        job.spec.run.time_limit,
                        &index,
                        &cap,
                    ))
                })
                .collect();
            stored.sort_by_key(|r| r.key);
            reservations.list.extend(stored);
        }
    }
    // Jobs whose stored reservation may be out of date after this walk.
    let mut looked_at: Vec<Entity> = previous.iter().map(|r| r.job).collect();
    // A job that failed with this much room fails again: retried only when capacity may
    // have grown or the reservations were worked out again (both only ever count up).
    let room_epoch = epoch.0.wrapping_add(reservations.generation);
    // A held job, or one whose begin time has not come, is not tried (nor reserved
    // for): it says why (worked out once, not each tick), and stays unsettled until it
    // may be tried.
    let mut next_begin: Option<u64> = None;
    for &e in &unsettled.jobs {
        let Ok((_, job, mut st)) = jobs.get_mut(e) else {
            continue;
        };
        if st.phase != JobPhase::Pending {
            continue; // a rejected job keeps saying why it was
        }
        let shows_wait = st.reason.as_deref().is_some_and(holds::is_wait_reason);
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
            waiting.unheld += 1;
        }
    }
    if waiting.next_begin != next_begin {
        waiting.next_begin = next_begin;
    }
    let mut order: Vec<(OrderKey, Entity)> = unsettled
        .jobs
        .iter()
        .filter_map(|&e| jobs.get(e).ok())
        .filter(|(_, job, st)| !holds::waits(job, st, now_s))
        .filter(|(_, job, st)| match st.phase {
            // Nothing freed since it last failed: it would fail again (see below).
            JobPhase::Pending => st.failed_epoch != Some(room_epoch),
            // Ranks count the placed tasks: a job with all of them placed has none left.
            // One with a verdict (a task failed, `continue`) gets no more.
            JobPhase::Running => st.has_tasks_to_place(job.tasks.len()) && st.failed_epoch != Some(room_epoch),
            JobPhase::Rejected => st.checked_generation.is_some_and(|g| g != index.generation),
            JobPhase::Ending | JobPhase::Finished | JobPhase::Cancelled => false,
        })
        .map(|(e, j, _)| (key_of(e, j), e))
        .collect();
    order.sort();
    // Reservations need to know when running tasks end: only with a ledger of this
    // topology (one being rebuilt is, next tick).
    let can_reserve = want > 0 && holdings.generation == Some(index.generation);
    let mut active = ActiveSet::default();
    let mut timeline = Timeline::default();
    // Sweeps this walk may run: a job that finds no reservation (no time limit near it)
    // uses one up too, so a walk past thousands of such jobs does not sweep for each.
    let mut sweeps_left = want.saturating_mul(2);
    // The cluster's free room with no reservation taken, per dimension: what it is now,
    // less what the walk places (a placement fits, so it takes exactly its request).
    let mut free_room: Vec<u64> = {
        let (alloc, used) = (cap.hn_alloc(index.root), cap.hn_used(index.root));
        alloc.iter().zip(used).map(|(a, u)| a.saturating_sub(*u)).collect()
    };
    // The nodes preemptions freed are held for their jobs (see `hold`).
    let mut holds = hold::Holds::take(
        held.iter().filter_map(|&e| {
            let (_, _, st) = jobs.get(e).ok()?;
            Some((e, st.nomination.as_ref()?.nodes.as_slice()))
        }),
        &index,
        &mut cap,
    );
    for (key, entity) in order {
        looked_at.push(entity);
        if !holds.is_empty() {
            holds.trying(entity, &index, &mut cap);
        }
        let limit = jobs.get(entity).ok().and_then(|(_, j, _)| j.spec.run.time_limit);
        // A waiting job already looked at on this topology, that wants no reservation
        // now and cannot fit in all the free room there is (reservations or not), fails
        // again without a search: on a busy cluster a freed node fits only a few of
        // thousands of waiting jobs, and the walk must not pay a search and a reason
        // for each of the others (its reason stays the one it had).
        if let Ok((_, job, mut state)) = jobs.get_mut(entity)
            && state.phase == JobPhase::Pending
            && state.checked_generation == Some(index.generation)
            && state.next_rank == 0
            && !(can_reserve && whole && sweeps_left > 0 && reservations.list.len() - reservations.windows < want)
            && !could_fit(job, &cap, &free_room)
        {
            state.failed_epoch = Some(room_epoch);
            continue;
        }
        if !reservations.list.is_empty() {
            let window = Window { from: now_s, limit };
            active.set(&reservations.list, window, &index, &mut cap, &mut numa, None);
        }
        let mut was_rejected = None;
        if let Ok((_, job, mut state)) = jobs.get_mut(entity)
            && state.phase == JobPhase::Rejected
        {
            state.phase = JobPhase::Pending;
            state.failed_epoch = None;
            was_rejected = state.reason.clone();
            tracing::debug!(
                job = job.spec.name,
                "rejected before; the topology changed: looking again"
            );
        }
        // A job whose reservation is due may need to know when running tasks end.
        if can_reserve && sticky && !timeline.is_built() && previous.iter().any(|r| r.job == entity && r.start <= now_s)
        {
            timeline.build(backfill::timeline::releases(&holdings, &tasks, &jobs));
        }
        for pass in 0..PASSES_PER_JOB {
            let Ok((_, job, mut state)) = jobs.get_mut(entity) else {
                break;
            };
            if state.failed_epoch == Some(room_epoch) {
                break; // nothing freed since it last failed: it would fail again
            }
            let parts = QueryParts {
                sub_jobs: &sub_jobs,
                tasks: &tasks,
                nodes: &nodes,
            };
            let mut ctx = build_ctx(entity, job, &state, &index, &cap, &parts, &mut out);
            if ctx.pending().next().is_none() {
                break;
            }
            // The queue's limits come first: a job over them waits without a reservation.
            let Ok((jq, _, _)) = meta.get(entity) else { break };
            let mut req = vec![0u64; queue_table.dims.len()];
            for slot in ctx.pending() {
                for (r, v) in req
                    .iter_mut()
                    .zip(queue_table.vector(&job.spec.tasks[slot.role].resources))
                {
                    *r = r.saturating_add(v);
                }
            }
            let running = queue_use.is_running(entity);
            if let Some(why) = queues::limits::blocked(
                &queue_table,
                &queue_use,
                jq.queue,
                jq.user,
                users.name(jq.user),
                &req,
                running,
            ) {
                state.failed_epoch = Some(room_epoch);
                if state.phase == JobPhase::Pending {
                    state.reason = Some(why);
                }
                break;
            }
            // Then its account's quotas, and those of the accounts above it: the same.
            let account = queue_table.account_of(job.spec.account.as_deref());
            if account.is_some_and(|a| {
                queue_table
                    .accounts
                    .chain(a)
                    .any(|a| queue_table.accounts.get(a).has_quota())
            }) {
                let mut ask = crate::accounts::usage::AccountCharge {
                    account,
                    ..Default::default()
                };
                for slot in ctx.pending() {
                    let r = &job.spec.tasks[slot.role].resources;
                    ask.cpu = ask.cpu.saturating_add(r.get(hyperplan_shared::CPU));
                    ask.gpu = ask.gpu.saturating_add(crate::accounts::gpus(r));
                }
                if let Some(why) =
                    crate::accounts::quota::blocked(&queue_table.accounts, &queue_use.accounts, &ask, running)
                {
                    state.failed_epoch = Some(room_epoch);
                    if state.phase == JobPhase::Pending {
                        state.reason = Some(why);
                    }
                    break;
                }
            }
            // A job whose reservation is due starts on the nodes kept for it when they
            // are all free: another search could pick other nodes, ones reserved for
            // the jobs behind it, and push them back.
            let due = previous
                .iter()
                .filter(|_| sticky && pass == 0 && state.phase == JobPhase::Pending)
                .find(|r| r.job == entity && r.start <= now_s);
            let decision = match due.and_then(|r| {
                backfill::reserve::start_as_reserved(&index, &mut cap, &mut ctx, r).or_else(|| {
                    let (window, list) = (Window { from: now_s, limit }, &reservations.list);
                    let releases = timeline.is_built().then(|| timeline.sorted())?;
                    backfill::reserve::start_in_time(
                        &index,
                        &mut cap,
                        &mut numa,
                        &mut ctx,
                        r,
                        window,
                        releases,
                        list,
                        &mut active,
                    )
                })
            }) {
                Some(d) => Some(d),
                None => Search::new(&index, &mut cap, &mut numa, &config).allocate_job(&mut ctx),
            };
            let Some(decision) = decision else {
                state.failed_epoch = Some(room_epoch);
                if pass == 0
                    && state.phase == JobPhase::Pending
                    && let Some(known @ Incomplete::Known(_)) = incomplete
                {
                    state.reason = Some(known.reason(None));
                } else if pass == 0 && state.phase == JobPhase::Pending {
                    explain(
                        &mut ctx,
                        &mut state,
                        &index,
                        &mut cap,
                        &numa,
                        &config,
                        &mut out,
                        was_rejected.as_deref(),
                        incomplete,
                    );
                    if can_reserve
                        && state.phase == JobPhase::Pending
                        && sweeps_left > 0
                        && reservations.list.len() - reservations.windows < want
                    {
                        sweeps_left -= 1;
                        if !timeline.is_built() {
                            timeline.build(backfill::timeline::releases(&holdings, &tasks, &jobs));
                        }
                        let prev = previous
                            .iter()
                            .filter(|_| sticky)
                            .find(|r: &&Reservation| r.job == entity);
                        let found = Sweep {
                            index: &index,
                            cap: &mut cap,
                            numa: &mut numa,
                            config: &config,
                        }
                        .earliest(
                            &ctx,
                            limit,
                            now_s,
                            timeline.sorted(),
                            &reservations.list,
                            &mut active,
                            prev,
                        );
                        if let Some(f) = found {
                            reservations.list.push(Reservation {
                                job: entity,
                                key,
                                start: f.start,
                                end: limit.map(|l| f.start.saturating_add(l)),
                                hyper_node: f.hyper_node,
                                held: f.held,
                                window: None,
                            });
                        }
                    }
                }
                break;
            };
            // Commit: ranks in topology order, each placement in the ledger (the search
            // took its resources from the caches: the next ticks must neither take them
            // again nor forget to give them back), then the AllocatedHyperNode bookkeeping.
            let record = holdings.generation == Some(index.generation);
            let mut shapes = ShapeMemo::default();
            for t in rank::rank_order(&ctx, &index) {
                let slot = &mut ctx.tasks[t];
                let Some(n) = slot.node else { continue };
                for (f, r) in free_room.iter_mut().zip(&ctx.shapes[slot.role].req) {
                    *f = f.saturating_sub(*r);
                }
                if let Ok((task, mut ts)) = tasks.get_mut(slot.entity) {
                    ts.phase = TaskPhase::Running;
                    ts.node = Some(index.node_entities[n.ix()]);
                    // A task started again after its node was lost keeps its rank
                    // (`jobs::replace` settles it right after the walk).
                    if ts.rank.is_none() {
                        ts.rank = Some(state.next_rank);
                        state.next_rank += 1;
                    }
                    ts.start_time = Some(now_s);
                    ts.dispatched = false;
                    ts.numa = slot.assignment.take();
                    if let Ok((jq, _, _)) = meta.get(entity) {
                        queue_use.charge(
                            slot.entity,
                            queues::Charge {
                                queue: jq.queue,
                                user: jq.user,
                                job: entity,
                                req: queue_table.vector(&task.request),
                                account: crate::accounts::usage::AccountCharge::of(
                                    queue_table.account_of(job.spec.account.as_deref()),
                                    &task.request,
                                ),
                            },
                        );
                    }
                    if record {
                        let held = held_by(&cap, &mut shapes, n, task, &ts);
                        if let Some(l) = limit {
                            timeline.push(Release {
                                end: now_s.saturating_add(l),
                                held: held.clone(),
                            });
                        }
                        holdings.record(slot.entity, held);
                    }
                }
            }
            if let Some(h) = decision.job_hn {
                let a = index.lca_opt(ctx.allocated, Some(h));
                state.allocated_hyper_node = a.map(|a| index.hns[a.ix()].name.clone());
            }
            for (sj, h) in decision.sub_job_hn {
                let s = &ctx.sub_jobs[sj];
                if let Ok((_, mut sst)) = sub_jobs.get_mut(s.entity) {
                    let a = index.lca_opt(s.allocated, Some(h));
                    sst.allocated_hyper_node = a.map(|a| index.hns[a.ix()].name.clone());
                }
            }
            if state.phase == JobPhase::Pending {
                state.phase = JobPhase::Running;
                state.start_time = Some(now_s);
                state.reason = None;
                if state.nomination.take().is_some() {
                    nominated.jobs.remove(&entity);
                }
            }
            if let Some(before) = was_rejected.take() {
                out.0.push(Command::Info(format!(
                    "job {}: the topology changed and it is placed now (it was rejected: {before})",
                    ctx.name
                )));
            }
        }
    }
    holds.clear(&index, &mut cap);
    active.clear(&reservations.list, &index, &mut cap, &mut numa);
    // Not while agents are away: the stored reservations stand until it is whole again.
    if whole {
        record_reservations(&reservations, &looked_at, &index, &mut jobs);
    }
    unsettled.jobs.retain(|&e| {
        jobs.get(e).is_ok_and(|(_, job, st)| match st.phase {
            JobPhase::Pending => true,
            JobPhase::Running => st.has_tasks_to_place(job.tasks.len()),
            // Looked at again with the next topology (every job is, then), or when requeued.
            JobPhase::Rejected | JobPhase::Ending | JobPhase::Finished | JobPhase::Cancelled => false,
        })
    });
}

/// Each reserved job's stored reservation follows the list (written only where it
/// changed, so the store sees only real changes); jobs that lost theirs have none.
fn record_reservations(
    reservations: &Reservations,
    looked_at: &[Entity],
    index: &TopologyIndex,
    jobs: &mut Query<(Entity, &Job, &mut JobState), Without<Retired>>,
) {
    for r in reservations.list.iter().filter(|r| r.job != Entity::PLACEHOLDER) {
        let mut nodes: Vec<String> = r.held.iter().map(|h| index.node_names[h.node.ix()].clone()).collect();
        nodes.sort();
        nodes.dedup();
        let record = ReservationReport {
            start: r.start,
            hyper_node: r.hyper_node.map(|h| index.hns[h.ix()].name.clone()),
            nodes,
        };
        if let Ok((_, _, mut st)) = jobs.get_mut(r.job)
            && st.reservation.as_ref() != Some(&record)
        {
            st.reservation = Some(record);
        }
    }
    for &job in looked_at {
        if reservations.of(job).is_none()
            && let Ok((_, _, mut st)) = jobs.get_mut(job)
            && st.reservation.is_some()
        {
            st.reservation = None;
        }
    }
}

/// What the walk reads of queues and order: the queue table and use (charged as it
/// commits), users, the order's generation, and each job's queue, rank and id.
#[derive(bevy_ecs::system::SystemParam)]
pub struct Policy<'w, 's> {
    queue_table: Res<'w, QueueTable>,
    queue_use: ResMut<'w, QueueUse>,
    users: Res<'w, Users>,
    order_state: Res<'w, OrderState>,
    meta: Query<'w, 's, (&'static JobQueue, &'static Rank, &'static JobId)>,
}

/// Whether the job's gang could fit in `free` (the cluster's free room with no
/// reservation taken, per dimension) at all: a necessary condition, in sums over the whole
/// cluster (a gang of every task needs their sum; one of fewer needs at least that many of
/// its smallest task).
fn could_fit(job: &Job, cap: &Capacity, free: &[u64]) -> bool {
    let whole_gang = job.gang_min >= job.spec.replicas();
    let mut sum = vec![0u64; cap.d];
    let mut smallest: Vec<Option<u64>> = vec![None; cap.d];
    for t in &job.spec.tasks {
        let shape = cap.shape(&t.resources);
        if shape.missing.is_some() {
            return false;
        }
        for (k, &r) in shape.req.iter().enumerate() {
            sum[k] = sum[k].saturating_add(r.saturating_mul(u64::from(t.replicas)));
            smallest[k] = Some(smallest[k].map_or(r, |m| m.min(r)));
        }
    }
    (0..cap.d).all(|k| {
        let need = if whole_gang {
            sum[k]
        } else {
            smallest[k].unwrap_or(0).saturating_mul(u64::from(job.gang_min))
        };
        need <= free.get(k).copied().unwrap_or(0)
    })
}

/// Live jobs that arrived in the walk's view since the last tick by filter `F`
/// (submitted, requeued).
type Arrived<'w, 's, F> = Query<'w, 's, Entity, (F, Without<Retired>)>;

/// The jobs that may have something to try: submitted since, pending, or running with
/// tasks left to place. A running job with every task placed leaves it, so the many
/// running jobs of a busy cluster cost nothing per tick (a tick used to look at each).
#[derive(Debug, Default)]
pub struct Unsettled {
    jobs: BTreeSet<Entity>,
    /// The topology generation the set was last filled from every job for.
    generation: Option<u64>,
}

/// Sets the pending reason, or rejects the job when it could not run even on the empty
/// cluster (checked once per topology generation: it costs a whole search).
/// `was_rejected`: the reason it was rejected with before this look; the same rejection
/// is not announced twice, and a job that can run now says so. `incomplete`: agents may
/// still register after a restart; a job the nodes so far could never hold waits for
/// them, and is checked again once they had their time.
#[allow(clippy::too_many_arguments)]
fn explain(
    ctx: &mut JobCtx,
    state: &mut JobState,
    index: &TopologyIndex,
    cap: &mut Capacity,
    numa: &NumaState,
    config: &PlannerConfig,
    out: &mut Outbox,
    was_rejected: Option<&str>,
    incomplete: Option<Incomplete>,
) {
    let mut rejected = None;
    if state.checked_generation != Some(index.generation) {
        if incomplete.is_none() {
            state.checked_generation = Some(index.generation);
        }
        rejected = reason::impossible(ctx, index, cap);
        if rejected.is_none() {
            let mut empty = cap.emptied();
            let mut empty_numa = numa.emptied();
            let mut trial = ctx.clone();
            let fits = Search::new(index, &mut empty, &mut empty_numa, config)
                .allocate_job(&mut trial)
                .is_some();
            if !fits {
                // A failed attempt rolls back everything: `empty` is still empty.
                let (code, why) = reason::pending(ctx, index, &mut empty, &empty_numa);
                rejected = Some(format!("{code}: even on the empty cluster: {why}"));
            }
        }
    }
    match (rejected, incomplete) {
        (Some(why), Some(lacks)) => state.reason = Some(lacks.reason(Some(&why))),
        (Some(why), None) => {
            state.phase = JobPhase::Rejected;
            if was_rejected != Some(why.as_str()) {
                out.0.push(Command::Reject {
                    job: ctx.name.clone(),
                    reason: why.clone(),
                });
            }
            state.reason = Some(why);
        }
        (None, _) => {
            if let Some(before) = was_rejected {
                out.0.push(Command::Info(format!(
                    "job {}: the topology changed and it can run now; pending again (it was rejected: {before})",
                    ctx.name
                )));
            }
            let (code, why) = reason::pending(ctx, index, cap, numa);
            state.reason = Some(format!("{code}: {why}"));
        }
    }
}

/// [`tier::effective_tier`], warning once about a tier name no HyperNode has.
fn effective_tier(
    nt: Option<&NetworkTopology>,
    soft_tier: TierCap,
    index: &TopologyIndex,
    job: &str,
    out: &mut Outbox,
    warn: bool,
) -> (Option<TierCap>, bool) {
    let limit = tier::effective_tier(nt, soft_tier, index);
    if let Some(name) = limit.unknown_name.filter(|_| warn) {
        out.0.push(Command::Warn(format!(
            "job {job}: highestTierName {name:?} names no tier (known: {}); placed without a tier limit",
            index.tier_names.keys().cloned().collect::<Vec<_>>().join(", ")
        )));
    }
    (limit.tier, limit.with_topology)
}

/// Where [`build_ctx`] reads a job's sub-jobs, tasks and nodes: the walk's queries, or
/// the world (the views, `preempt`).
pub trait Parts {
    /// A sub-job and what the allocator decided for it.
    fn sub_job(&self, e: Entity) -> Option<(&SubJob, &SubJobState)>;
    /// A task and where it is.
    fn task(&self, e: Entity) -> Option<(&Task, &TaskState)>;
    /// A node's dense index.
    fn slot(&self, e: Entity) -> Option<NodeIdx>;
}

/// The walk's queries as [`Parts`].
struct QueryParts<'a, 'w, 's> {
    sub_jobs: &'a Query<'w, 's, (&'static SubJob, &'static mut SubJobState)>,
    tasks: &'a Query<'w, 's, (&'static Task, &'static mut TaskState)>,
    nodes: &'a Query<'w, 's, &'static NodeSlot>,
}

impl Parts for QueryParts<'_, '_, '_> {
    fn sub_job(&self, e: Entity) -> Option<(&SubJob, &SubJobState)> {
        self.sub_jobs.get(e).ok()
    }
    fn task(&self, e: Entity) -> Option<(&Task, &TaskState)> {
        self.tasks.get(e).ok()
    }
    fn slot(&self, e: Entity) -> Option<NodeIdx> {
        self.nodes.get(e).ok().map(|s| s.0)
    }
}

impl Parts for World {
    fn sub_job(&self, e: Entity) -> Option<(&SubJob, &SubJobState)> {
        Some((self.get::<SubJob>(e)?, self.get::<SubJobState>(e)?))
    }
    fn task(&self, e: Entity) -> Option<(&Task, &TaskState)> {
        Some((self.get::<Task>(e)?, self.get::<TaskState>(e)?))
    }
    fn slot(&self, e: Entity) -> Option<NodeIdx> {
        self.get::<NodeSlot>(e).map(|s| s.0)
    }
}

/// The job's worksheet for an attempt: its tasks (placed where), sub-jobs, tier limits
/// and shapes; an unknown tier name is warned about in `out` on the job's first look.
pub fn build_ctx(
    entity: Entity,
    job: &Job,
    state: &JobState,
    index: &TopologyIndex,
    cap: &Capacity,
    parts: &dyn Parts,
    out: &mut Outbox,
) -> JobCtx {
    let root_tier = TierCap::Tier(index.root_tier());
    // Warn about an unknown tier name once per job: on its first pass while pending.
    let warn = state.phase == JobPhase::Pending && state.checked_generation.is_none() && state.next_rank == 0;
    let (tier, with_topology) = effective_tier(
        job.spec.network_topology.as_ref(),
        root_tier,
        index,
        &job.spec.name,
        out,
        warn,
    );
    // A queue with trees keeps the job inside one of them: below the virtual root.
    let trees = (!job.trees.is_empty()).then(|| {
        std::sync::Arc::new(
            index
                .trees
                .iter()
                .map(|t| job.trees.iter().any(|n| *n == index.hns[t.top.ix()].name))
                .collect::<Vec<bool>>(),
        )
    });
    let tier = match (tier, &trees) {
        (None, Some(_)) => Some(TierCap::Tier(index.root_tier().saturating_sub(1))),
        (t, _) => t,
    };
    let hn = |name: &Option<String>| name.as_ref().and_then(|n| index.hn_by_name.get(n).copied());
    // One sub-job holding every task, in order (a job without partitions): its task
    // indices are the job's, no map needed.
    let single = match job.sub_jobs.as_slice() {
        [se] => parts.sub_job(*se).is_some_and(|(sj, _)| sj.tasks == job.tasks),
        _ => false,
    };
    let mut task_index = bevy_ecs::entity::EntityHashMap::default();
    let mut slots = Vec::with_capacity(job.tasks.len());
    for &te in &job.tasks {
        let Some((task, ts)) = parts.task(te) else { continue };
        let node = match ts.phase {
            TaskPhase::Pending => None,
            // Finished tasks count as placed for the gang but hold nothing.
            TaskPhase::Running | TaskPhase::Finished => ts.node.and_then(|n| parts.slot(n)),
        };
        if !single {
            task_index.insert(te, slots.len());
        }
        slots.push(TaskSlot {
            entity: te,
            role: task.role,
            node,
            new: false,
            assignment: None,
        });
    }
    let mut sjs = Vec::with_capacity(job.sub_jobs.len());
    // Segments name the one outside them by entity; parents come first.
    let mut sj_index: Vec<(Entity, usize)> = Vec::new();
    for &se in &job.sub_jobs {
        let Some((sj, sst)) = parts.sub_job(se) else { continue };
        sj_index.push((se, sjs.len()));
        let parent = sj
            .parent
            .and_then(|p| sj_index.iter().find(|(e, _)| *e == p).map(|(_, i)| *i));
        let (t, with) = match sj.group {
            None => (tier, with_topology),
            Some(_) => effective_tier(
                sj.network_topology.as_ref(),
                tier.unwrap_or(root_tier),
                index,
                &job.spec.name,
                out,
                warn,
            ),
        };
        sjs.push(SubJobCtx {
            entity: se,
            id: sj.id.clone(),
            min_available: sj.min_available,
            group: sj.group,
            match_index: sj.match_index,
            tier: t,
            with_topology: with,
            allocated: hn(&sst.allocated_hyper_node),
            parent,
            block: sj.block,
            tasks: if single && slots.len() == job.tasks.len() {
                (0..slots.len()).collect()
            } else {
                if single {
                    task_index = slots.iter().enumerate().map(|(i, s)| (s.entity, i)).collect();
                }
                sj.tasks.iter().filter_map(|t| task_index.get(t).copied()).collect()
            },
        });
    }
    JobCtx {
        entity,
        name: job.spec.name.clone(),
        gang_min: job.gang_min,
        group_min: job.partition_groups.iter().map(|(_, m)| *m).collect(),
        tier,
        trees,
        with_topology,
        allocated: hn(&state.allocated_hyper_node),
        shapes: job.spec.tasks.iter().map(|t| cap.shape(&t.resources)).collect(),
        numa: job.numa.clone(),
        role_names: job.spec.tasks.iter().map(|t| t.name.clone()).collect(),
        tasks: slots,
        sub_jobs: sjs,
    }
}
