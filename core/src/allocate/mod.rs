//! The allocate system: jobs in order (priority, then submit time, then name), each
//! searched with the two-level gradient search, committed whole or not at all; the first
//! blocked jobs get reservations and later ones backfill around them ([`backfill`]).
//! Rooms: `world` (what the system reads and writes), `agenda` (what to try, in which
//! order), `walk` (one job at a time, answering an outcome), `commit` (applying it);
//! the search (`search`, `gradient`, `span`, `binpack`, `lca_score`, `fading`), gangs
//! (`gang`), ranks (`rank`), reasons (`reason`), preemption holds (`hold`) and tiers.

pub mod agenda;
pub mod backfill;
mod binpack;
pub mod commit;
mod fading;
mod gang;
mod gradient;
pub mod hold;
pub mod horizon;
mod lca_score;
mod rank;
mod reason;
mod search;
mod span;
pub mod tier;
pub mod walk;
pub mod world;

use bevy_ecs::prelude::*;
use hyperplan_shared::NetworkTopology;

use super::topology::{TierCap, TopologyIndex};
use crate::cache::capacity::Capacity;
use crate::cache::scratch::Scratch;
use crate::model::commands::Command;
use crate::model::components::{Job, JobPhase, JobState, NodeSlot, SubJob, SubJobState, Task, TaskPhase, TaskState};
use crate::model::ids::NodeIdx;
use crate::model::tick::Outbox;

use walk::Walk;
use world::{Arrivals, Caches, Jobs, Memory, Policy, Setting};

pub use gang::{JobCtx, SubJobCtx, TaskSlot};
pub use gradient::gradients;
pub use lca_score::tier_score;
pub use search::Search;

/// The allocate system: an adapter from the world to the walk. The agenda says which
/// jobs to try and in which order; the walk tries each and answers an outcome; `commit`
/// applies it. The first `[scheduler] reservations` pending jobs that do not fit each get
/// a reservation ([`backfill`]); every later job is tried with the reservations its time
/// limit would overlap holding their room, so it starts only where it delays none.
pub fn allocate(
    at: Setting,
    mut caches: Caches,
    mut w: Jobs,
    mut arrivals: Arrivals,
    mut policy: Policy,
    mut memory: Memory,
) {
    let _span = tracing::info_span!("allocate").entered();
    let mut agenda = agenda::agenda(&at, &caches, &mut w, &mut arrivals, &policy, &mut memory);
    let (index, config) = (&*at.index, &*at.config);
    let Caches { cap, numa, holdings } = &mut caches;
    let Memory {
        reservations,
        overruns,
        nominated,
        out,
        unsettled,
        ..
    } = &mut memory;
    let scratch = Scratch::new(index, cap, numa);
    let mut order = std::mem::take(&mut agenda.order);
    let mut walk = Walk::new(
        index,
        config,
        at.now.secs(),
        scratch,
        holdings,
        reservations,
        overruns,
        &mut agenda,
        &w,
    );
    let mode = config.scheduler.backfill_order;
    let mut reordered = false;
    let mut next = 0;
    while next < order.len() {
        // Once the reservations are made, the rest go in `backfillOrder`.
        if !reordered && !walk.may_reserve() {
            reordered = true;
            let now_s = at.now.secs();
            backfill::order::reorder(&mut order[next..], mode, |e| {
                let (_, job, _) = w.jobs.get(e).ok()?;
                Some(backfill::order::Candidate {
                    starving: agenda::starves(job, &config.scheduler, now_s),
                    waited: now_s.saturating_sub(agenda::eligible(job)),
                    run: walk.expected_run(e, job, &policy),
                })
            });
        }
        let (key, entity) = order[next];
        next += 1;
        if let Some(skip) = walk.enter(entity, &mut w, &policy) {
            commit::apply(skip, entity, &mut walk, &mut w, &mut policy, nominated, out, &mut None);
            continue;
        }
        let mut was_rejected = commit::reopen(entity, &mut w);
        for pass in 0..walk::PASSES_PER_JOB {
            let outcome = walk.try_job(key, entity, pass, &w, &policy, out, was_rejected.as_ref());
            if !commit::apply(
                outcome,
                entity,
                &mut walk,
                &mut w,
                &mut policy,
                nominated,
                out,
                &mut was_rejected,
            ) {
                break;
            }
        }
    }
    let (looked_at, whole) = walk.finish();
    // Not while agents are away: the stored reservations stand until it is whole again.
    if whole {
        commit::record_reservations(reservations, &looked_at, &mut w, index);
    }
    unsettled.jobs.retain(|&e| {
        w.jobs
            .get(e)
            .is_ok_and(|(_, job, st)| commit::unsettled(st, job.tasks.len()))
    });
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
        shapes: job
            .spec
            .tasks
            .iter()
            .map(|t| std::sync::Arc::new(cap.shape(&t.resources)))
            .collect(),
        numa: job.numa.clone(),
        role_names: job.spec.tasks.iter().map(|t| t.name.clone()).collect(),
        tasks: slots,
        sub_jobs: sjs,
    }
}
