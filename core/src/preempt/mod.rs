//! Preemption and reclaim that respect the fabric. A waiting job that the walk could not
//! place, and that may preempt ([`eligible`]), chooses ONE HyperNode of a tier its
//! topology allows and the victims inside it ([`victims`]): the fewest jobs, then the
//! least work lost (seconds run × CPUs), then the fewest queues, then the lowest tier and
//! the name; a set that would still leave it unplaceable there is never chosen (the real
//! search says, [`trial`]). Volcano skips every job with a network topology here; Kueue
//! lost the freed domain between cycles.
//!
//! One system, after `allocate`: [`preempt`] looks, for at most `[preemption] maxPerTick`
//! waiting jobs in walk order (each again only when room, the topology or what runs
//! changed), at [`plan`]; when it finds victims, the job gets a nomination
//! (`StateRecord::nomination`): the nodes its tasks will use, held whole against every
//! other job by the walk (`allocate::hold`) until it starts or is cancelled; one whose
//! victims have all ended and that still does not fit loses it. The victims are preempted
//! at once (`jobs::lifecycle::preempt`): the job's `preemptSignal` (SIGTERM by default),
//! its `preemptGrace` (`[preemption] grace`, 30 s), then SIGKILL; back to pending with
//! `requeue: true`, else ended `preempted`. `explain` shows [`plan`] before it happens.

pub mod eligible;
pub mod trial;
pub mod victims;

use std::collections::BTreeMap;

use bevy_ecs::prelude::*;
use hyperplan_shared::report::Nomination;

use crate::allocate::{JobCtx, build_ctx};
use crate::cache::capacity::Capacity;
use crate::cache::holdings::{Held, Holdings};
use crate::cache::numa::NumaState;
use crate::cache::scratch::Scratch;
use crate::config::PlannerConfig;
use crate::model::awaiting::Awaiting;
use crate::model::commands::Command;
use crate::model::components::{Job, JobId, JobPhase, JobQueue, JobState, Retired, Task, TaskState};
use crate::model::ids::{HnIdx, NodeIdx};
use crate::model::reason::{JobRef, Reason};
use crate::model::since::Since;
use crate::model::tick::{CapacityEpoch, Nominated, Now, Outbox};
use crate::names::JobNames;
use crate::order::Rank;
use crate::queues::{QueueTable, QueueUse};
use crate::topology::TopologyIndex;

use eligible::Standing;
use trial::Trial;
use victims::{Candidate, Choice};

/// A running job that could be a victim: its standing, what its tasks hold, its work.
struct Running {
    entity: Entity,
    name: String,
    standing: Standing,
    held: Vec<Held>,
    work: u64,
}

/// What each job was last looked at with, and what the whole was: capacity epoch,
/// topology generation, tasks placed, jobs submitted, jobs let go.
#[derive(Debug, Default)]
pub struct Memo {
    jobs: BTreeMap<Entity, Since>,
    last: Option<Since>,
}

/// A preemption found for one job (by [`plan`]), not carried out.
#[derive(Debug, Clone)]
pub struct Found {
    /// The HyperNode (its index; the root for the whole cluster).
    pub hn: HnIdx,
    /// The victims: (entity, name, why it may be preempted, work it loses), by name.
    pub victims: Vec<(Entity, String, String, u64)>,
    /// The nodes the job's tasks land on there.
    pub nodes: Vec<NodeIdx>,
    /// Fewest victims, least work, fewest queues.
    pub key: (usize, u64, usize),
    /// Placement searches it cost.
    pub searches: usize,
}

/// Preempts for waiting jobs the walk could not place (see the module).
pub fn preempt(world: &mut World, mut memo: Local<Memo>) {
    let config = world.resource::<PlannerConfig>();
    if !config.preemption.enabled || world.get_resource::<Awaiting>().is_some_and(|a| a.0 > 0) {
        return;
    }
    let (max, grace, max_grace) = (
        config.preemption.max_per_tick as usize,
        config.preemption.grace,
        config.preemption.max_grace,
    );
    let _span = tracing::info_span!("preempt").entered();
    let now = world.resource::<Now>().secs();
    let generation = world.resource::<TopologyIndex>().generation;
    let feasibility = world.resource::<TopologyIndex>().feasibility;
    let stamp = Since {
        capacity: world.resource::<CapacityEpoch>().0,
        topology: generation,
        held: world.resource::<Holdings>().len() as u64,
        jobs: world.resource::<crate::jobs::ownership::NextJobId>().0,
        unheld: world.resource::<crate::model::held::Waiting>().unheld,
        ..Since::default()
    };
    // Each nomination stands while its job waits and some victim is still ending; one
    // whose victims have all ended, on a job the walk still could not place (it was
    // tried after their ends), is dropped: the job may look again.
    let nominated: Vec<Entity> = world.resource::<Nominated>().jobs.iter().copied().collect();
    for e in nominated {
        let names = world.resource::<JobNames>();
        let keep = world.get::<JobState>(e).is_some_and(|st| {
            st.phase == JobPhase::Pending
                && st.nomination.as_ref().is_some_and(|n| {
                    n.victims.iter().any(|v| {
                        names
                            .0
                            .get(v)
                            .and_then(|&ve| world.get::<JobState>(ve))
                            .is_some_and(|vst| vst.phase == JobPhase::Ending)
                    })
                })
        });
        if !keep {
            world.resource_mut::<Nominated>().jobs.remove(&e);
            if let Some(mut st) = world.get_mut::<JobState>(e)
                && st.nomination.is_some()
            {
                st.nomination = None;
                memo.jobs.remove(&e);
                memo.last = None;
            }
        }
    }
    // Nothing new since the last look (no job, no room, no placement): nothing to do.
    if memo.last == Some(stamp) {
        return;
    }
    memo.last = Some(stamp);
    let Some(mut q) = world.try_query::<(Entity, &Job, &JobState, &Rank, &JobId, Has<Retired>)>() else {
        return;
    };
    let mut waiting = Vec::new();
    let now_s = world.resource::<Now>().secs();
    for (e, job, st, rank, id, retired) in q.iter(world) {
        if !retired
            && st.phase == JobPhase::Pending
            && st.nomination.is_none()
            && st.next_rank == 0
            && !crate::jobs::holds::waits(job, st, now_s)
            && st.reason.is_some()
            && st.checked_generation == Some(feasibility)
            && memo.jobs.get(&e) != Some(&stamp)
        {
            waiting.push((rank.key(job.spec.submit_time, *id), e));
        }
    }
    memo.jobs.retain(|e, _| {
        world
            .get::<JobState>(*e)
            .is_some_and(|st| st.phase == JobPhase::Pending)
    });
    waiting.sort();
    for (_, e) in waiting.into_iter().take(max) {
        memo.jobs.insert(e, stamp);
        let Ok(found) = plan(world, e) else { continue };
        if found.victims.is_empty() {
            continue; // it fits once what is ending has gone: nothing to preempt
        }
        let index = world.resource::<TopologyIndex>();
        let hyper_node = (found.hn != index.root).then(|| index.hns[found.hn.ix()].name.clone());
        let nodes: Vec<String> = found.nodes.iter().map(|n| index.node_names[n.ix()].clone()).collect();
        let victims: Vec<String> = found.victims.iter().map(|v| v.1.clone()).collect();
        let victim_refs: Vec<JobRef> = found
            .victims
            .iter()
            .map(|v| JobRef {
                id: world.get::<JobId>(v.0).map_or(0, |i| i.0),
                name: v.1.clone(),
            })
            .collect();
        let Some(name) = world.get::<Job>(e).map(|j| j.spec.name.clone()) else {
            continue;
        };
        let by = JobRef {
            id: world.get::<JobId>(e).map_or(0, |i| i.0),
            name: name.clone(),
        };
        tracing::info!(
            job = name,
            hyper_node = hyper_node.as_deref().unwrap_or("(cluster)"),
            victims = victims.join(","),
            "preempting"
        );
        if let Some(mut st) = world.get_mut::<JobState>(e) {
            st.reason = Some(Reason::Preempting {
                hyper_node: hyper_node.clone(),
                victims: victim_refs,
            });
            st.nomination = Some(Nomination {
                hyper_node: hyper_node.clone(),
                nodes,
                victims,
                at: now,
            });
        }
        world.resource_mut::<Nominated>().jobs.insert(e);
        for (v, victim, why, work) in found.victims {
            let Some(job) = world.get::<Job>(v) else { continue };
            let requeued = job.spec.run.requeue;
            // A job admitted before the site lowered maxGrace gets no more than it now.
            let grace = job.spec.run.preempt_grace.unwrap_or(grace).min(max_grace);
            let reason = Reason::PreemptedBy {
                by: by.clone(),
                why: why.clone(),
            };
            crate::jobs::lifecycle::preempt(world, v, &name, reason, grace);
            world.resource_mut::<Outbox>().0.push(Command::Preempted {
                victim,
                by: name.clone(),
                hyper_node: hyper_node.clone(),
                lost_cpu_seconds: work,
                requeued,
                why,
            });
        }
    }
}

/// Why a job has no preemption to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoPreemption(pub String);

/// The preemption job `e` would make now: where, and whom (none when what is ending
/// already makes room), or why it can make none. Reads the world only: `explain` shows
/// it before it happens, and [`preempt`] carries it out.
pub fn plan(world: &World, e: Entity) -> Result<Found, NoPreemption> {
    plan_with(world, e, world.resource::<PlannerConfig>())
}

/// As [`plan`], under `config` (whether preemption is on is not asked: `explain` shows
/// what it would do were it on).
pub fn plan_with(world: &World, e: Entity, config: &PlannerConfig) -> Result<Found, NoPreemption> {
    let setting = Setting::of(world, e, config)?;
    setting.find().ok_or_else(|| {
        let n = setting.cands.len();
        NoPreemption(format!(
            "preempting the {n} job{} it may preempt would not make room for it in any one HyperNode it may use",
            if n == 1 { "" } else { "s" }
        ))
    })
}

/// What a preemption for one job is decided on: its worksheet, the running jobs it may
/// preempt (with why), and the caches as they will be (what is ending given back, what
/// other preemptions hold taken). [`plan_with`] decides on it; the property test asks it
/// directly, by brute force, with the same placement search.
pub struct Setting<'a> {
    index: &'a TopologyIndex,
    config: &'a PlannerConfig,
    ctx: JobCtx,
    /// The jobs it may preempt, by name, and why.
    cands: Vec<(Running, String)>,
    base: (Capacity, NumaState),
}

impl<'a> Setting<'a> {
    /// Job `e`'s setting now, under `config`; why it can preempt no one instead.
    pub fn of(world: &'a World, e: Entity, config: &'a PlannerConfig) -> Result<Self, NoPreemption> {
        let no = |why: &str| Err(NoPreemption(why.to_string()));
        let (Some(job), Some(st), Some(jq)) = (world.get::<Job>(e), world.get::<JobState>(e), world.get::<JobQueue>(e))
        else {
            return no("no such job");
        };
        if st.phase != JobPhase::Pending {
            return no("it is not waiting");
        }
        if crate::jobs::holds::waits(job, st, world.resource::<Now>().secs()) {
            return no("it is held or its begin time has not come");
        }
        let index = world.resource::<TopologyIndex>();
        let cap = world.resource::<Capacity>();
        let numa = world.resource::<NumaState>();
        let holdings = world.resource::<Holdings>();
        let table = world.resource::<QueueTable>();
        let queue_use = world.resource::<QueueUse>();
        let now = world.resource::<Now>().secs();
        let mut scratch = Outbox::default();
        let ctx = build_ctx(e, job, st, index, cap, world, &mut scratch);
        let me = Standing::of(config, table, jq.queue, job.spec.priority_class.as_deref());
        let reclaiming = eligible::may_reclaim(table, queue_use, jq.queue, &table_request(table, job));
        let Some(mut q) = world.try_query::<(Entity, &Job, &JobState, &JobQueue, Has<Retired>)>() else {
            return no("no jobs");
        };
        let live: Vec<_> = q
            .iter(world)
            .filter(|x| !x.4)
            .map(|(e, j, s, jq, _)| (e, j, s, jq))
            .collect();
        let cands: Vec<(Running, String)> = running_jobs(world, &live, holdings, config, table, now)
            .into_iter()
            .filter_map(|r| {
                let borrows = eligible::borrows(table, queue_use, r.standing.queue);
                eligible::ground(table, &me, &r.standing, reclaiming, borrows).map(|why| (r, why))
            })
            .collect();
        if cands.is_empty() {
            return no(
                "no running job may be preempted for it (none of lower priority in a preemptible queue and class, and no reclaim)",
            );
        }
        let base = base(&live, holdings, index, cap, numa);
        Ok(Self {
            index,
            config,
            ctx,
            cands,
            base,
        })
    }

    /// The jobs it may preempt: (entity, name), by name; [`Setting::fits`] takes
    /// indices into this list.
    pub fn candidates(&self) -> Vec<(Entity, String)> {
        self.cands.iter().map(|(r, _)| (r.entity, r.name.clone())).collect()
    }

    /// The HyperNodes its topology allows it to be placed in whole (the whole cluster
    /// too without a hard limit), lower tiers first, then by name.
    pub fn hyper_nodes(&self) -> Vec<HnIdx> {
        let index = self.index;
        let mut hns: Vec<HnIdx> = (0..index.hns.len())
            .map(|i| HnIdx(i as u32))
            .filter(|&h| match self.ctx.tier {
                Some(t) => index.allows(t, h) && h != index.root,
                None => true,
            })
            .filter(|&h| index.hns[h.ix()].node_count > 0 && self.ctx.in_trees(index, h))
            .collect();
        hns.sort_by(|&a, &b| {
            let (x, y) = (&index.hns[a.ix()], &index.hns[b.ix()]);
            x.tier.cmp(&y.tier).then(x.name.cmp(&y.name))
        });
        hns
    }

    /// Whether the job is placed inside `hn` once the candidates `set` (indices into
    /// [`Setting::candidates`]) have gone: the placement search says.
    pub fn fits(&self, hn: HnIdx, set: &[usize]) -> bool {
        let (mut cap, mut numa) = (self.base.0.clone(), self.base.1.clone());
        let mut trial = Trial::new(self.index, self.config, (&mut cap, &mut numa), hn);
        let held: Vec<&[Held]> = set.iter().map(|&i| self.cands[i].0.held.as_slice()).collect();
        trial.fits(&self.ctx, &held).is_some()
    }

    /// The work candidate `i` would lose (seconds run × CPUs).
    pub fn work(&self, i: usize) -> u64 {
        self.cands[i].0.work
    }

    /// The best preemption (see the module), or `None` when no set of candidates makes
    /// room.
    pub fn find(&self) -> Option<Found> {
        let cands: Vec<(&Running, String)> = self.cands.iter().map(|(r, w)| (r, w.clone())).collect();
        find(
            self.index,
            self.config,
            (&self.base.0, &self.base.1),
            &self.ctx,
            &cands,
            self.hyper_nodes(),
        )
    }
}

/// The best preemption for the job of `ctx` among `cands` (victims with why they may
/// be): over every HyperNode of a tier its topology allows (the whole cluster too when
/// it has no hard limit), on `base` (the caches as they will be: what ends given back,
/// what is held taken). `None` when no set of them makes room.
fn find(
    index: &TopologyIndex,
    config: &PlannerConfig,
    base: (&Capacity, &NumaState),
    ctx: &JobCtx,
    cands: &[(&Running, String)],
    hns: Vec<HnIdx>,
) -> Option<Found> {
    let d = base.0.d;
    let mut need = vec![0u64; d];
    for slot in ctx.pending() {
        for (n, r) in need.iter_mut().zip(&ctx.shapes[slot.role].req) {
            *n = n.saturating_add(*r);
        }
    }
    let mut best: Option<Found> = None;
    let mut searches = 0;
    // One copy of the caches for every HyperNode tried (each question undoes itself).
    let (mut cap, mut numa) = (base.0.clone(), base.1.clone());
    // What the exact step may add to this decision, over every HyperNode.
    let mut budget = victims::Budget::default();
    for h in hns {
        let inside = &index.hns[h.ix()].nodes;
        let all = h == index.root;
        // The candidates with tasks in H, and what they free there.
        let mut local: Vec<(usize, Candidate)> = Vec::new();
        for (i, (r, _)) in cands.iter().enumerate() {
            let mut freed = vec![0u64; d];
            let mut any = false;
            for held in r.held.iter().filter(|h| all || inside.contains(h.node.ix())) {
                any = true;
                for (f, x) in freed.iter_mut().zip(&held.shape.req) {
                    *f = f.saturating_add(*x);
                }
            }
            if any {
                local.push((
                    i,
                    Candidate {
                        freed,
                        work: r.work,
                        queue: r.standing.queue.0,
                        name: r.name.clone(),
                    },
                ));
            }
        }
        // Cheap bound: what is free plus all they hold must cover the request.
        let (alloc, used) = (base.0.hn_alloc(h), base.0.hn_used(h));
        let free: Vec<u64> = alloc.iter().zip(used).map(|(a, u)| a.saturating_sub(*u)).collect();
        let deficit: Vec<u64> = need.iter().zip(&free).map(|(n, f)| n.saturating_sub(*f)).collect();
        let total: Vec<u64> = local.iter().fold(free.clone(), |mut acc, (_, c)| {
            for (a, f) in acc.iter_mut().zip(&c.freed) {
                *a = a.saturating_add(*f);
            }
            acc
        });
        if total.iter().zip(&need).any(|(t, n)| t < n) {
            continue;
        }
        let at_most = best.as_ref().map(|b| b.key.0);
        let mut trial = Trial::new(index, config, (&mut cap, &mut numa), h);
        let only: Vec<Candidate> = local.iter().map(|(_, c)| c.clone()).collect();
        let room = || {
            let held = local.iter().map(|(i, _)| cands[*i].0.held.as_slice());
            room(index, base.0, ctx, h, held)
        };
        let choice: Option<Choice> = victims::choose(&only, &deficit, &need, at_most, &mut budget, room, |set| {
            let held: Vec<&[Held]> = set.iter().map(|&v| cands[local[v].0].0.held.as_slice()).collect();
            trial.fits(ctx, &held).is_some()
        });
        searches += trial.searches;
        let Some(choice) = choice else { continue };
        let held: Vec<&[Held]> = choice
            .victims
            .iter()
            .map(|&v| cands[local[v].0].0.held.as_slice())
            .collect();
        let Some(nodes) = trial.fits(ctx, &held) else { continue };
        searches += 1;
        let key = choice.key();
        // Strictly better only: the earlier (lower tier, then name) wins a tie.
        if best.as_ref().is_none_or(|b| key < b.key) {
            best = Some(Found {
                hn: h,
                victims: choice
                    .victims
                    .iter()
                    .map(|&v| {
                        let (r, why) = &cands[local[v].0];
                        (r.entity, r.name.clone(), why.clone(), r.work)
                    })
                    .collect(),
                nodes,
                key,
                searches: 0,
            });
            if key.0 == 0 {
                break;
            }
        }
    }
    best.map(|mut b| {
        b.searches = searches;
        b
    })
}

/// HyperNode `h` for the exact step: what each of `held` (the local candidates' tasks) holds
/// on each of its nodes there, what is free on every node in `cap`, and the job's pending
/// roles and the tasks it must place.
fn room<'a>(
    index: &TopologyIndex,
    cap: &Capacity,
    ctx: &JobCtx,
    h: HnIdx,
    held: impl Iterator<Item = &'a [Held]>,
) -> victims::Room {
    let all = h == index.root;
    let inside = &index.hns[h.ix()].nodes;
    // The nodes candidates hold part of, numbered as first met.
    let mut nodes: BTreeMap<NodeIdx, usize> = BTreeMap::new();
    let mut on: Vec<Vec<(usize, Vec<u64>)>> = Vec::new();
    for tasks in held {
        let mut per: Vec<(usize, Vec<u64>)> = Vec::new();
        for t in tasks.iter().filter(|t| all || inside.contains(t.node.ix())) {
            let next = nodes.len();
            let n = *nodes.entry(t.node).or_insert(next);
            let at = per.iter().position(|(m, _)| *m == n).unwrap_or_else(|| {
                per.push((n, vec![0u64; cap.d]));
                per.len() - 1
            });
            for (f, x) in per[at].1.iter_mut().zip(&t.shape.req) {
                *f = f.saturating_add(*x);
            }
        }
        on.push(per);
    }
    let mut free = vec![Vec::new(); nodes.len()];
    for (&n, &i) in &nodes {
        free[i] = cap.free_of(n).to_vec();
    }
    let every: Box<dyn Iterator<Item = usize>> = if all {
        Box::new(0..index.node_names.len())
    } else {
        Box::new(inside.ones())
    };
    let others = every
        .map(|i| NodeIdx(i as u32))
        .filter(|n| !nodes.contains_key(n))
        .map(|n| cap.free_of(n));
    let mut roles: Vec<usize> = ctx.pending().map(|s| s.role).collect();
    roles.sort_unstable();
    roles.dedup();
    // A role asking for what no node has places no task: it adds nothing.
    let shapes = roles
        .iter()
        .filter_map(|&r| ctx.shapes.get(r))
        .filter(|s| s.missing.is_none())
        .map(|s| s.req.clone())
        .collect();
    let tasks = u64::from(ctx.gang_min.saturating_sub(ctx.placed()).max(1));
    victims::Room::new(free, others, on, shapes, tasks)
}

/// A live job as [`plan`] reads it.
type Live<'a> = (Entity, &'a Job, &'a JobState, &'a JobQueue);

/// Every running job that could be a victim, with what its tasks hold (from the
/// ledger) and the work it would lose, by name.
fn running_jobs(
    world: &World,
    live: &[Live<'_>],
    holdings: &Holdings,
    config: &PlannerConfig,
    table: &QueueTable,
    now: u64,
) -> Vec<Running> {
    let mut out = Vec::new();
    for &(e, job, st, jq) in live {
        if st.phase != JobPhase::Running || st.verdict.is_some() {
            continue;
        }
        let standing = Standing::of(config, table, jq.queue, job.spec.priority_class.as_deref());
        if !standing.preemptible {
            continue;
        }
        let mut held = Vec::new();
        let mut work = 0u64;
        for &t in &job.tasks {
            let Some(h) = holdings.get(t) else { continue };
            if let (Some(task), Some(ts)) = (world.get::<Task>(t), world.get::<TaskState>(t)) {
                let ran = now.saturating_sub(ts.start_time.unwrap_or(now));
                let cpu = task.request.get(hyperplan_shared::CPU).div_ceil(1000).max(1);
                work = work.saturating_add(ran.saturating_mul(cpu));
            }
            held.push(h.clone());
        }
        if !held.is_empty() {
            out.push(Running {
                entity: e,
                name: job.spec.name.clone(),
                standing,
                held,
                work,
            });
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The caches as a preemption sees them: what ending jobs hold given back (it is going),
/// and the nodes held for other preemptions taken.
fn base(
    live: &[Live<'_>],
    holdings: &Holdings,
    index: &TopologyIndex,
    cap: &Capacity,
    numa: &NumaState,
) -> (Capacity, NumaState) {
    let (mut c, mut n) = (cap.clone(), numa.clone());
    let mut s = Scratch::new(index, &mut c, &mut n);
    for &(_, job, st, _) in live {
        if st.phase == JobPhase::Ending {
            for h in job.tasks.iter().filter_map(|&t| holdings.get(t)) {
                s.give_held(h);
            }
        }
    }
    for &(_, _, st, _) in live {
        if st.phase != JobPhase::Pending {
            continue;
        }
        if let Some(nom) = &st.nomination {
            for node in nom.nodes.iter().filter_map(|x| index.node_by_name.get(x)) {
                s.mask(*node);
            }
        }
    }
    (c, n)
}

/// The job's whole request over the queue table's dimensions.
fn table_request(table: &QueueTable, job: &Job) -> Vec<u64> {
    let mut req = vec![0u64; table.dims.len()];
    for t in &job.spec.tasks {
        for (r, v) in req.iter_mut().zip(table.vector(&t.resources)) {
            *r = r.saturating_add(v.saturating_mul(u64::from(t.replicas)));
        }
    }
    req
}
