//! The allocate system: jobs in order (priority, then submit time, then name), each
//! searched with the two-level gradient search, committed whole or not at all.

mod binpack;
mod fading;
mod gang;
mod gradient;
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

use super::topology::TopologyIndex;
use crate::cache::capacity::Capacity;
use crate::cache::holdings::{Holdings, ShapeMemo, held_by};
use crate::cache::numa::NumaState;
use crate::config::PlannerConfig;
use crate::model::commands::Command;
use crate::model::components::Requeued;
use crate::model::components::{
    Job, JobPhase, JobState, NodeSlot, Retired, SubJob, SubJobState, Task, TaskPhase, TaskState,
};
use crate::model::tick::{CapacityEpoch, Now, Outbox};

pub use gang::{JobCtx, SubJobCtx, TaskSlot};
pub use gradient::gradients;
pub use lca_score::tier_score;
pub use search::Search;

/// A job with tasks left over after a commit (minAvailable < replicas) is tried again
/// in the same tick, from its allocated HyperNode; this bounds the retries.
const PASSES_PER_JOB: usize = 2;

/// The allocate system: tries each job that may have something to place ([`Unsettled`]),
/// commits it whole or not at all, and sets the pending reason of a job that does not fit.
#[allow(clippy::too_many_arguments)]
pub fn allocate(
    index: Res<TopologyIndex>,
    config: Res<PlannerConfig>,
    now: Res<Now>,
    epoch: Res<CapacityEpoch>,
    mut cap: ResMut<Capacity>,
    mut numa: ResMut<NumaState>,
    mut holdings: ResMut<Holdings>,
    mut out: ResMut<Outbox>,
    mut jobs: Query<(Entity, &Job, &mut JobState), Without<Retired>>,
    mut sub_jobs: Query<(&SubJob, &mut SubJobState)>,
    mut tasks: Query<(&Task, &mut TaskState)>,
    nodes: Query<&NodeSlot>,
    submitted: Query<Entity, (Added<Job>, Without<Retired>)>,
    requeued: Query<Entity, (Changed<Requeued>, Without<Retired>)>,
    mut unsettled: Local<Unsettled>,
    awaiting: Option<Res<crate::model::awaiting::Awaiting>>,
) {
    // While nodes known from the store have not registered, the cluster is not whole:
    // "never fits" is not decided on it.
    let whole = awaiting.is_none_or(|a| a.0 == 0);
    let _span = tracing::info_span!("allocate").entered();
    // A job rejected because it could not run on the emptied cluster is looked at again
    // when the topology changed since (in the daemon nodes register and discovery sources
    // load after people submit): every job is looked over then. One rejected at submit (a
    // bad spec) never is: it has no checked generation.
    if unsettled.generation != Some(index.generation) {
        unsettled.generation = Some(index.generation);
        unsettled.jobs = jobs.iter().map(|(e, _, _)| e).collect();
    } else {
        unsettled.jobs.extend(submitted.iter());
        unsettled.jobs.extend(requeued.iter());
    }
    let mut order: Vec<(Reverse<i32>, u64, String, Entity)> = unsettled
        .jobs
        .iter()
        .filter_map(|&e| jobs.get(e).ok())
        .filter(|(_, job, st)| match st.phase {
            // Nothing freed since it last failed: it would fail again (see below).
            JobPhase::Pending => st.failed_epoch != Some(epoch.0),
            // Ranks count the placed tasks: a job with all of them placed has none left.
            // One with a verdict (a task failed, `continue`) gets no more.
            JobPhase::Running => {
                (st.next_rank as usize) < job.tasks.len() && st.failed_epoch != Some(epoch.0) && st.verdict.is_none()
            }
            JobPhase::Rejected => st.checked_generation.is_some_and(|g| g != index.generation),
            JobPhase::Ending | JobPhase::Finished | JobPhase::Cancelled => false,
        })
        .map(|(e, j, _)| (Reverse(j.spec.priority), j.spec.submit_time, j.spec.name.clone(), e))
        .collect();
    order.sort();
    for (_, _, _, entity) in order {
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
        for pass in 0..PASSES_PER_JOB {
            let Ok((_, job, mut state)) = jobs.get_mut(entity) else {
                break;
            };
            if state.failed_epoch == Some(epoch.0) {
                break; // nothing freed since it last failed: it would fail again
            }
            let mut ctx = build_ctx(entity, job, &state, &index, &cap, &sub_jobs, &tasks, &nodes, &mut out);
            if ctx.pending().next().is_none() {
                break;
            }
            let mut search = Search::new(&index, &mut cap, &mut numa, &config);
            let Some(decision) = search.allocate_job(&mut ctx) else {
                state.failed_epoch = Some(epoch.0);
                if pass == 0 && state.phase == JobPhase::Pending && !whole {
                    state.reason = Some(
                        "waiting for the agents of the nodes that ran its tasks before the planner restarted".into(),
                    );
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
                    );
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
                if let Ok((task, mut ts)) = tasks.get_mut(slot.entity) {
                    ts.phase = TaskPhase::Running;
                    ts.node = Some(index.node_entities[n.ix()]);
                    ts.rank = Some(state.next_rank);
                    ts.start_time = Some(now.secs());
                    ts.dispatched = false;
                    ts.numa = slot.assignment.take();
                    state.next_rank += 1;
                    if record {
                        holdings.record(slot.entity, held_by(&cap, &mut shapes, n, task, &ts));
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
                state.start_time = Some(now.secs());
                state.reason = None;
            }
            if let Some(before) = was_rejected.take() {
                out.0.push(Command::Info(format!(
                    "job {}: the topology changed and it is placed now (it was rejected: {before})",
                    ctx.name
                )));
            }
        }
    }
    unsettled.jobs.retain(|&e| {
        jobs.get(e).is_ok_and(|(_, job, st)| match st.phase {
            JobPhase::Pending => true,
            JobPhase::Running => (st.next_rank as usize) < job.tasks.len() && st.verdict.is_none(),
            // Looked at again with the next topology (every job is, then), or when requeued.
            JobPhase::Rejected | JobPhase::Ending | JobPhase::Finished | JobPhase::Cancelled => false,
        })
    });
}

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
/// is not announced twice, and a job that can run now says so.
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
) {
    let mut rejected = None;
    if state.checked_generation != Some(index.generation) {
        state.checked_generation = Some(index.generation);
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
                let why = reason::pending(ctx, index, &mut empty, &empty_numa);
                rejected = Some(format!("even on the empty cluster: {why}"));
            }
        }
    }
    match rejected {
        Some(why) => {
            state.phase = JobPhase::Rejected;
            if was_rejected != Some(why.as_str()) {
                out.0.push(Command::Reject {
                    job: ctx.name.clone(),
                    reason: why.clone(),
                });
            }
            state.reason = Some(why);
        }
        None => {
            if let Some(before) = was_rejected {
                out.0.push(Command::Info(format!(
                    "job {}: the topology changed and it can run now; pending again (it was rejected: {before})",
                    ctx.name
                )));
            }
            state.reason = Some(reason::pending(ctx, index, cap, numa));
        }
    }
}

/// [`tier::effective_tier`], warning once about a tier name no HyperNode has.
fn effective_tier(
    nt: Option<&NetworkTopology>,
    soft_tier: u32,
    index: &TopologyIndex,
    job: &str,
    out: &mut Outbox,
    warn: bool,
) -> (Option<u32>, bool) {
    let limit = tier::effective_tier(nt, soft_tier, index);
    if let Some(name) = limit.unknown_name.filter(|_| warn) {
        out.0.push(Command::Warn(format!(
            "job {job}: highestTierName {name:?} names no tier (known: {}); placed without a tier limit",
            index.tier_names.keys().cloned().collect::<Vec<_>>().join(", ")
        )));
    }
    (limit.tier, limit.with_topology)
}

#[allow(clippy::too_many_arguments)]
fn build_ctx(
    entity: Entity,
    job: &Job,
    state: &JobState,
    index: &TopologyIndex,
    cap: &Capacity,
    sub_jobs: &Query<(&SubJob, &mut SubJobState)>,
    tasks: &Query<(&Task, &mut TaskState)>,
    nodes: &Query<&NodeSlot>,
    out: &mut Outbox,
) -> JobCtx {
    let root_tier = index.root_tier();
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
    let hn = |name: &Option<String>| name.as_ref().and_then(|n| index.hn_by_name.get(n).copied());
    // One sub-job holding every task, in order (a job without partitions): its task
    // indices are the job's, no map needed.
    let single = match job.sub_jobs.as_slice() {
        [se] => sub_jobs.get(*se).is_ok_and(|(sj, _)| sj.tasks == job.tasks),
        _ => false,
    };
    let mut task_index = bevy_ecs::entity::EntityHashMap::default();
    let mut slots = Vec::with_capacity(job.tasks.len());
    for &te in &job.tasks {
        let Ok((task, ts)) = tasks.get(te) else { continue };
        let node = match ts.phase {
            TaskPhase::Pending => None,
            // Finished tasks count as placed for the gang but hold nothing.
            TaskPhase::Running | TaskPhase::Finished => ts.node.and_then(|n| nodes.get(n).ok()).map(|s| s.0),
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
    for &se in &job.sub_jobs {
        let Ok((sj, sst)) = sub_jobs.get(se) else { continue };
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
        with_topology,
        allocated: hn(&state.allocated_hyper_node),
        shapes: job.spec.tasks.iter().map(|t| cap.shape(&t.resources)).collect(),
        numa: job.numa.clone(),
        role_names: job.spec.tasks.iter().map(|t| t.name.clone()).collect(),
        tasks: slots,
        sub_jobs: sjs,
    }
}
