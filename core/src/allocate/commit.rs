//! Applying what the walk answered, in one place: a placement to the job, its sub-jobs
//! and tasks (ranks in topology order), the ledger, the timeline and the queue's charge;
//! a wait or a rejection to the job's state and the commands out; the walk's
//! reservations to the jobs' stored ones.

use bevy_ecs::prelude::*;
use hyperplan_shared::report::ReservationReport;

use crate::cache::holdings::{ShapeMemo, held_by};
use crate::model::commands::Command;
use crate::model::components::{JobPhase, JobState, TaskPhase};
use crate::model::reason::Reason;
use crate::model::tick::{Nominated, Outbox};
use crate::queues;

use super::JobCtx;
use super::backfill::Reservations;
use super::backfill::timeline::Release;
use super::rank;
use super::walk::{Outcome, Walk};
use super::world::{Jobs, Policy};

/// A rejected job the topology changed for is pending again while it is tried; the
/// reason it was rejected with is returned (to tell whether it is rejected again for
/// the same reason, or can run now).
pub fn reopen(entity: Entity, w: &mut Jobs<'_, '_>) -> Option<Reason> {
    let (_, job, mut state) = w.jobs.get_mut(entity).ok()?;
    if state.phase != JobPhase::Rejected {
        return None;
    }
    state.phase = JobPhase::Pending;
    state.failed_epoch = None;
    tracing::debug!(
        job = job.spec.name,
        "rejected before; the topology changed: looking again"
    );
    state.reason.clone()
}

/// Applies `outcome` for `entity` (see the module). Returns whether the walk goes on
/// with the job (another pass: it was placed).
#[allow(clippy::too_many_arguments)]
pub fn apply(
    outcome: Outcome,
    entity: Entity,
    walk: &mut Walk<'_>,
    w: &mut Jobs<'_, '_>,
    policy: &mut Policy<'_, '_>,
    nominated: &mut Nominated,
    out: &mut Outbox,
    was_rejected: &mut Option<Reason>,
) -> bool {
    // "Could it ever run?" was answered against what could ever run, not this rebuild.
    let generation = walk.index.feasibility;
    let Ok((_, job, mut state)) = w.jobs.get_mut(entity) else {
        return false;
    };
    let name = &job.spec.name;
    match outcome {
        Outcome::Done => false,
        Outcome::Unchanged => {
            state.failed_epoch = Some(walk.room_epoch);
            false
        }
        Outcome::Waiting {
            reason,
            checked,
            reopened,
            reserved,
        } => {
            if let Some(start) = reserved {
                tracing::debug!(job = name, start, "reserved");
            }
            state.failed_epoch = Some(walk.room_epoch);
            if checked {
                state.checked_generation = Some(generation);
            }
            if let Some(before) = was_rejected.as_ref().filter(|_| reopened) {
                out.0.push(Command::Info(format!(
                    "job {name}: the topology changed and it can run now; pending again (it was rejected: {before})"
                )));
            }
            state.reason = Some(reason);
            false
        }
        Outcome::Rejected { reason } => {
            state.failed_epoch = Some(walk.room_epoch);
            state.checked_generation = Some(generation);
            state.phase = JobPhase::Rejected;
            if !was_rejected.as_ref().is_some_and(|w| w.says_same(&reason)) {
                out.0.push(Command::Reject {
                    job: name.clone(),
                    reason: reason.to_string(),
                });
            }
            state.reason = Some(reason);
            false
        }
        Outcome::Placed { ctx, decision } => {
            let run = walk.expected_run(entity, job, policy);
            let limit = job.spec.run.time_limit;
            place(walk, w, policy, entity, ctx, decision, run);
            let Ok((_, job, mut state)) = w.jobs.get_mut(entity) else {
                return false;
            };
            if state.phase == JobPhase::Pending {
                state.phase = JobPhase::Running;
                state.start_time = Some(walk.now_s);
                state.expected_run = run;
                walk.overruns.started(entity, walk.now_s, run, limit);
                state.reason = None;
                if state.nomination.take().is_some() {
                    nominated.jobs.remove(&entity);
                }
            }
            if let Some(before) = was_rejected.take() {
                out.0.push(Command::Info(format!(
                    "job {}: the topology changed and it is placed now (it was rejected: {before})",
                    job.spec.name
                )));
            }
            true
        }
    }
}

/// Commits a placement: ranks in topology order, each placement in the ledger (the
/// search took its resources on the scratch: the next ticks must neither take them again
/// nor forget to give them back), the queue's charge, then the AllocatedHyperNode
/// bookkeeping.
fn place(
    walk: &mut Walk<'_>,
    w: &mut Jobs<'_, '_>,
    policy: &mut Policy<'_, '_>,
    entity: Entity,
    mut ctx: Box<JobCtx>,
    decision: super::search::Decision,
    run: Option<u64>,
) {
    let index = walk.index;
    let now_s = walk.now_s;
    let record = walk.holdings.generation == Some(index.generation);
    let mut shapes = ShapeMemo::default();
    let Ok((_, job, mut state)) = w.jobs.get_mut(entity) else {
        return;
    };
    let account = policy.queue_table.account_of(job.spec.account.as_deref());
    let jq = policy.meta.get(entity).ok().map(|(jq, _, _)| (jq.queue, jq.user));
    for t in rank::rank_order(&ctx, index) {
        let slot = &mut ctx.tasks[t];
        let Some(n) = slot.node else { continue };
        for (f, r) in walk.free_room.iter_mut().zip(&ctx.shapes[slot.role].req) {
            *f = f.saturating_sub(*r);
        }
        let Ok((task, mut ts)) = w.tasks.get_mut(slot.entity) else {
            continue;
        };
        ts.phase = TaskPhase::Running;
        ts.node = Some(index.node_entities[n.ix()]);
        // A task started again after its node was lost keeps its rank (`jobs::replace`
        // settles it right after the walk).
        if ts.rank.is_none() {
            ts.rank = Some(state.next_rank);
            state.next_rank += 1;
        }
        ts.start_time = Some(now_s);
        ts.dispatched = false;
        ts.numa = slot.assignment.take();
        if let Some((queue, user)) = jq {
            policy.queue_use.charge(
                slot.entity,
                queues::Charge {
                    queue,
                    user,
                    job: entity,
                    req: policy.queue_table.vector(&task.request),
                    account: crate::accounts::usage::AccountCharge::of(account, &task.request),
                },
            );
        }
        if record {
            let held = held_by(walk.s.cap(), &mut shapes, n, task, &ts);
            if let Some(l) = run {
                walk.timeline.push(Release {
                    end: now_s.saturating_add(l),
                    held: held.clone(),
                });
            }
            let end = run.map_or(u64::MAX, |l| now_s.saturating_add(l));
            walk.horizon.push(index, n, end);
            walk.holdings.record(slot.entity, held);
        }
    }
    if let Some(h) = decision.job_hn {
        let a = index.lca_opt(ctx.allocated, Some(h));
        state.allocated_hyper_node = a.map(|a| index.hns[a.ix()].name.clone());
    }
    for (sj, h) in decision.sub_job_hn {
        let s = &ctx.sub_jobs[sj];
        if let Ok((_, mut sst)) = w.sub_jobs.get_mut(s.entity) {
            let a = index.lca_opt(s.allocated, Some(h));
            sst.allocated_hyper_node = a.map(|a| index.hns[a.ix()].name.clone());
        }
    }
}

/// Each reserved job's stored reservation follows the list (written only where it
/// changed, so the store sees only real changes); jobs that lost theirs have none.
pub fn record_reservations(
    reservations: &Reservations,
    looked_at: &[Entity],
    w: &mut Jobs<'_, '_>,
    index: &crate::topology::TopologyIndex,
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
        if let Ok((_, _, mut st)) = w.jobs.get_mut(r.job)
            && st.reservation.as_ref() != Some(&record)
        {
            st.reservation = Some(record);
        }
    }
    for &job in looked_at {
        if reservations.of(job).is_none()
            && let Ok((_, _, mut st)) = w.jobs.get_mut(job)
            && st.reservation.is_some()
        {
            st.reservation = None;
        }
    }
}

/// Whether the job state says it still has something to try (see `Unsettled`).
pub fn unsettled(state: &JobState, tasks: usize) -> bool {
    match state.phase {
        JobPhase::Pending => true,
        JobPhase::Running => state.has_tasks_to_place(tasks),
        // Looked at again with the next topology (every job is, then), or when requeued.
        JobPhase::Rejected | JobPhase::Ending | JobPhase::Finished | JobPhase::Cancelled => false,
    }
}
