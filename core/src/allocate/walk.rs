//! The walk: one job at a time, in the agenda's order, on one [`Scratch`] of the live
//! caches. For each job it answers an [`Outcome`] — placed (its tasks taken on the
//! scratch), waiting with a reason (and, for the first blocked jobs, a reservation:
//! backfill), rejected, or nothing new — and `commit` applies it to the job. While a job
//! is tried, the nodes held for other jobs' preemptions ([`Holds`]) and every reservation
//! its time limit would overlap ([`ActiveSet`]) are taken, so it starts only where it
//! delays none of them.

use bevy_ecs::prelude::*;

use crate::cache::capacity::Capacity;
use crate::cache::holdings::Holdings;
use crate::cache::numa::NumaState;
use crate::cache::scratch::Scratch;
use crate::config::PlannerConfig;
use crate::model::awaiting::Incomplete;
use crate::model::components::{Job, JobPhase, JobState};
use crate::model::jobstate::RoomNeed;
use crate::model::reason::Reason;
use crate::model::tick::Outbox;
use crate::order::OrderKey;
use crate::topology::TopologyIndex;

use super::agenda::Agenda;
use super::backfill::active::{ActiveSet, Window};
use super::backfill::estimate;
use super::backfill::reserve::Sweep;
use super::backfill::timeline::Timeline;
use super::backfill::{self, Reservation, Reservations};
use super::hold::Holds;
use super::horizon::Horizon;
use super::search::{Decision, Search};
use super::world::{Jobs, Policy};
use super::{JobCtx, build_ctx, reason};
use crate::model::runtimes::Overruns;

/// What trying a job answered (see the module).
#[derive(Debug)]
pub enum Outcome {
    /// Its pending tasks are placed, on the scratch: `ctx` says where, `decision` under
    /// which HyperNodes.
    Placed {
        /// The job's worksheet with its new placements.
        ctx: Box<JobCtx>,
        /// The HyperNodes it was placed under.
        decision: Decision,
    },
    /// Not placed, and nothing new to say: no more room than when it last failed, or a
    /// running job found no room for more of its tasks.
    Unchanged,
    /// Waits: why, and whether the look on the emptied cluster was made for this
    /// topology (it need not be made again). `reserved`: the start of the reservation
    /// it got, if it got one.
    Waiting {
        /// Why it waits.
        reason: Reason,
        /// Whether it was checked against the emptied cluster of this topology.
        checked: bool,
        /// It could not run on the topology before, and can now.
        reopened: bool,
        /// When its reservation starts, if it got one.
        reserved: Option<u64>,
    },
    /// It can never run on this topology.
    Rejected {
        /// Why.
        reason: Reason,
    },
    /// Nothing left to place.
    Done,
}

/// A job that had tasks left after a commit (minAvailable < replicas) is tried again in
/// the same walk, from its allocated HyperNode; this bounds the passes.
pub const PASSES_PER_JOB: usize = 2;

/// One walk's working state (see the module).
pub struct Walk<'a> {
    /// The topology.
    pub index: &'a TopologyIndex,
    config: &'a PlannerConfig,
    /// Now, in seconds.
    pub now_s: u64,
    /// The caches every take and give of the walk goes through.
    pub s: Scratch<'a>,
    /// The ledger: who holds what (commits record into it).
    pub holdings: &'a mut Holdings,
    /// The reservations: maintenance windows, then the jobs', worked out in this walk
    /// when the agenda says so.
    pub reservations: &'a mut Reservations,
    /// Running jobs that will pass their runtime estimate (commits add the jobs started).
    pub overruns: &'a mut Overruns,
    holds: Holds,
    active: ActiveSet,
    /// When running tasks end (built at the first sweep; commits add to it).
    pub timeline: Timeline,
    /// When each HyperNode is busy until (`[scoring] alignEnds`; built at the first
    /// search that wants it; commits add to it).
    pub horizon: Horizon,
    /// The last walk's reservations (see [`Agenda::previous`]).
    previous: Vec<Reservation>,
    sticky: bool,
    whole: bool,
    incomplete: Option<Incomplete>,
    /// A job failed at this value fails again (see [`Agenda::room_epoch`]).
    pub room_epoch: u64,
    /// How many job reservations a walk makes.
    want: usize,
    /// Whether running tasks' ends are known (a ledger of this topology).
    can_reserve: bool,
    /// Sweeps this walk may still run: a job that finds no reservation (no time limit
    /// near it) uses one up too, so a walk past thousands of such jobs does not sweep
    /// for each.
    sweeps_left: usize,
    /// The cluster's free room with no reservation taken, per dimension: what it is now,
    /// less what the walk places (a placement fits, so it takes exactly its request).
    pub free_room: Vec<u64>,
    /// Jobs whose stored reservation may be out of date after this walk.
    pub looked_at: Vec<Entity>,
    /// The emptied cluster (every task gone) that `explain` asks whether a job could ever
    /// run on: made once per walk, not once per job (after a topology change every
    /// waiting job is asked, and a copy of 10,000 nodes' caches each cost a third of a
    /// millisecond). Each question is a trial, so it stays empty.
    empty: Option<Box<(Capacity, NumaState)>>,
}

impl<'a> Walk<'a> {
    /// A walk over `s` for `agenda`, with the nodes of its held jobs taken.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        index: &'a TopologyIndex,
        config: &'a PlannerConfig,
        now_s: u64,
        mut s: Scratch<'a>,
        holdings: &'a mut Holdings,
        reservations: &'a mut Reservations,
        overruns: &'a mut Overruns,
        agenda: &mut Agenda,
        w: &Jobs<'_, '_>,
    ) -> Self {
        let want = config.scheduler.reservations as usize;
        // The nodes preemptions freed are held for their jobs (see `hold`).
        let holds = Holds::take(
            agenda.held.iter().filter_map(|&e| {
                let (_, _, st) = w.jobs.get(e).ok()?;
                Some((e, st.nomination.as_ref()?.nodes.as_slice()))
            }),
            &mut s,
        );
        let free_room = {
            let (alloc, used) = (s.cap().hn_alloc(index.root), s.cap().hn_used(index.root));
            alloc.iter().zip(used).map(|(a, u)| a.saturating_sub(*u)).collect()
        };
        let previous = std::mem::take(&mut agenda.previous);
        Self {
            index,
            config,
            now_s,
            s,
            can_reserve: want > 0 && holdings.generation == Some(index.generation),
            holdings,
            reservations,
            overruns,
            holds,
            active: ActiveSet::default(),
            timeline: Timeline::default(),
            horizon: Horizon::default(),
            looked_at: previous.iter().map(|r| r.job).collect(),
            previous,
            sticky: agenda.sticky,
            whole: agenda.whole,
            incomplete: agenda.incomplete,
            room_epoch: agenda.room_epoch,
            want,
            sweeps_left: want.saturating_mul(2),
            free_room,
            empty: None,
        }
    }

    /// How long backfill expects `job` to run: its time limit, or its owner's estimate
    /// (see `backfill::estimate`).
    pub fn expected_run(&self, entity: Entity, job: &Job, policy: &Policy<'_, '_>) -> Option<u64> {
        let user = policy.meta.get(entity).ok().map(|(jq, _, _)| jq.user);
        estimate::expected_run(
            self.config.scheduler.estimates,
            &policy.history,
            user,
            job.spec.run.time_limit,
        )
    }

    /// Whether a reservation could still be made in this walk: until it cannot, the
    /// walk goes in its own order; after, in `[scheduler] backfillOrder`.
    pub fn may_reserve(&self) -> bool {
        self.can_reserve && self.sweeps_left > 0 && self.reservations.list.len() - self.reservations.windows < self.want
    }

    /// Whether `job` waits past `[scheduler] starvation` now.
    fn starves(&self, job: &Job) -> bool {
        super::agenda::starves(job, &self.config.scheduler, self.now_s)
    }

    /// Sets the caches up for trying `entity`: its own held nodes given back, the
    /// reservations its window overlaps taken. `Some(Unchanged)` when it need not be
    /// tried: it was looked at on this topology, wants no reservation now and cannot fit
    /// in all the free room there is (on a busy cluster a freed node fits only a few of
    /// thousands of waiting jobs, and the walk must not pay a search and a reason for each
    /// of the others; its reason stays the one it had).
    pub fn enter(&mut self, entity: Entity, w: &mut Jobs<'_, '_>, policy: &Policy<'_, '_>) -> Option<Outcome> {
        self.looked_at.push(entity);
        if !self.holds.is_empty() {
            self.holds.trying(entity, &mut self.s);
        }
        let (_, job, mut state) = w.jobs.get_mut(entity).ok()?;
        let skippable = state.phase == JobPhase::Pending
            && state.checked_generation == Some(self.index.feasibility)
            && state.next_rank == 0
            && !(self.whole && self.may_reserve());
        if skippable && !could_fit(job, &mut state, self.s.cap(), &self.free_room) {
            return Some(Outcome::Unchanged);
        }
        if !self.reservations.list.is_empty() {
            let window = Window {
                from: self.now_s,
                limit: self.expected_run(entity, job, policy),
                bound: job.spec.run.time_limit,
            };
            self.active.set(&self.reservations.list, window, &mut self.s, None);
            // The same with the reservations its window overlaps taken: a freed node a
            // reservation holds fits many waiting jobs, none of which may use it.
            if skippable {
                let cap = self.s.cap();
                let root = self.index.root;
                let free: Vec<u64> = cap
                    .hn_alloc(root)
                    .iter()
                    .zip(cap.hn_used(root))
                    .map(|(a, u)| a.saturating_sub(*u))
                    .collect();
                if !could_fit(job, &mut state, cap, &free) {
                    return Some(Outcome::Unchanged);
                }
            }
        }
        None
    }

    /// Tries `entity` once (pass `pass` of at most [`PASSES_PER_JOB`]); `was_rejected`:
    /// the reason it was rejected with before this walk, if it was.
    #[allow(clippy::too_many_arguments)]
    pub fn try_job(
        &mut self,
        key: OrderKey,
        entity: Entity,
        pass: usize,
        w: &Jobs<'_, '_>,
        policy: &Policy<'_, '_>,
        out: &mut Outbox,
        was_rejected: Option<&Reason>,
    ) -> Outcome {
        let Ok((_, job, state)) = w.jobs.get(entity) else {
            return Outcome::Done;
        };
        if state.failed_epoch == Some(self.room_epoch) {
            return Outcome::Done; // nothing freed since it last failed: it would fail again
        }
        let mut ctx = build_ctx(entity, job, state, self.index, self.s.cap(), w, out);
        if ctx.pending().next().is_none() {
            return Outcome::Done;
        }
        let pending = state.phase == JobPhase::Pending;
        if policy.meta.get(entity).is_err() {
            return Outcome::Done;
        }
        if let Some(why) = limits(job, entity, &ctx, policy) {
            return match pending {
                true => Outcome::Waiting {
                    reason: why,
                    checked: false,
                    reopened: false,
                    reserved: None,
                },
                false => Outcome::Unchanged,
            };
        }
        // A job whose reservation is due starts on the nodes kept for it when they are
        // all free, or free in time (see `backfill::reserve::start_in_time`): another
        // search could pick other nodes, ones reserved for the jobs behind it, and push
        // them back.
        let now_s = self.now_s;
        let is_due = move |r: &Reservation| r.job == entity && r.start <= now_s;
        let due_now = self.sticky && pass == 0 && pending && self.previous.iter().any(is_due);
        if due_now && self.can_reserve {
            self.build_timeline(w);
        }
        let due = self.previous.iter().filter(|_| due_now).find(|r| is_due(r));
        let window = Window {
            from: self.now_s,
            limit: self.expected_run(entity, job, policy),
            bound: job.spec.run.time_limit,
        };
        let decision = due
            .and_then(|r| {
                backfill::reserve::start_as_reserved(&mut self.s, &mut ctx, r).or_else(|| {
                    let releases = self.timeline.is_built().then(|| self.timeline.sorted())?;
                    let list = &self.reservations.list;
                    backfill::reserve::start_in_time(&mut self.s, &mut ctx, r, window, releases, list, &mut self.active)
                })
            })
            .or_else(|| {
                let align = self.config.scoring.align_ends.then(|| {
                    if !self.horizon.is_built() {
                        let ends = backfill::timeline::ends(self.holdings, &w.tasks, &w.jobs, now_s);
                        self.horizon.build(self.index, ends);
                    }
                    let end = window.limit.map_or(u64::MAX, |l| now_s.saturating_add(l));
                    (&self.horizon, end)
                });
                Search::new(&mut self.s, self.config)
                    .aligned(align)
                    .allocate_job(&mut ctx)
            });
        if let Some(decision) = decision {
            return Outcome::Placed {
                ctx: Box::new(ctx),
                decision,
            };
        }
        if pass > 0 || !pending {
            return Outcome::Unchanged;
        }
        if let Some(known @ Incomplete::Known(_)) = self.incomplete {
            return Outcome::Waiting {
                reason: known.reason(None),
                checked: false,
                reopened: false,
                reserved: None,
            };
        }
        match self.explain(&mut ctx, state, was_rejected) {
            Outcome::Waiting {
                reason,
                checked,
                reopened,
                reserved: _,
            } => {
                let run = self.expected_run(entity, job, policy);
                let strict = self.starves(job);
                let reserved = self.reserve(key, entity, (run, job.spec.run.time_limit, strict), &ctx, w);
                Outcome::Waiting {
                    reason,
                    checked,
                    reopened,
                    reserved,
                }
            }
            other => other,
        }
    }

    /// The job's pending reason, or its rejection when it could not run even on the
    /// emptied cluster (checked once per topology generation: it costs a whole search).
    /// While agents may still register after a restart, a job the nodes so far could
    /// never hold waits for them, and is checked again once they had their time.
    fn explain(&mut self, ctx: &mut JobCtx, state: &JobState, was_rejected: Option<&Reason>) -> Outcome {
        let (index, config, incomplete) = (self.index, self.config, self.incomplete);
        let mut rejected = None;
        let mut checked = false;
        if state.checked_generation != Some(index.feasibility) {
            checked = incomplete.is_none();
            rejected = reason::impossible(ctx, index, self.s.cap());
            if rejected.is_none() {
                let s = &self.s;
                let empty = self
                    .empty
                    .get_or_insert_with(|| Box::new((s.cap().emptied(), s.numa().emptied())));
                let (empty, empty_numa) = &mut **empty;
                let mut on_empty = Scratch::new(index, empty, empty_numa);
                let mut trial = ctx.clone();
                let fits = on_empty.trial(|e| Search::new(e, config).allocate_job(&mut trial).is_some());
                if !fits {
                    let (index, empty, empty_numa) = on_empty.counting();
                    let (fit, detail) = reason::pending(ctx, index, empty, empty_numa);
                    rejected = Some(Reason::NoFitEver { fit, detail });
                }
            }
        }
        match (rejected, incomplete) {
            (Some(why), Some(lacks)) => Outcome::Waiting {
                reason: lacks.reason(Some(why)),
                checked,
                reopened: false,
                reserved: None,
            },
            (Some(why), None) => Outcome::Rejected { reason: why },
            (None, _) => {
                let (index, cap, numa) = self.s.counting();
                let (fit, detail) = reason::pending(ctx, index, cap, numa);
                Outcome::Waiting {
                    reason: Reason::NoFit { fit, detail },
                    checked,
                    reopened: was_rejected.is_some(),
                    reserved: None,
                }
            }
        }
    }

    /// When running tasks end, from the ledger (once per walk; commits add to it).
    fn build_timeline(&mut self, w: &Jobs<'_, '_>) {
        if !self.timeline.is_built() {
            self.timeline.build(backfill::timeline::releases(
                self.holdings,
                &w.tasks,
                &w.jobs,
                self.now_s,
            ));
        }
    }

    /// A reservation for a blocked job, while the walk may make more: the earliest time
    /// and place its gang fits (see `backfill::reserve`). Returns its start. `run`: how
    /// long it is expected to run, its time limit, and whether it starves (its
    /// reservation is then strict: see [`Reservation::strict`]).
    fn reserve(
        &mut self,
        key: OrderKey,
        entity: Entity,
        run: (Option<u64>, Option<u64>, bool),
        ctx: &JobCtx,
        w: &Jobs<'_, '_>,
    ) -> Option<u64> {
        let (limit, bound, strict) = run;
        // Jobs waiting past `starvation` go first in the walk, so they get these first;
        // none gets one beyond them. Measured on the policy table: a reservation for every
        // starving job narrows the backfill so much that mean waits rise by 5–10 % and
        // the longest fall by none (see `benches/README.md`).
        if !self.may_reserve() {
            return None;
        }
        self.sweeps_left -= 1;
        self.build_timeline(w);
        let at = self.previous.iter().position(|r| self.sticky && r.job == entity);
        // The last job reservation of the last walk may move (see `Sweep::earliest`).
        let last = at.is_some() && at == self.previous.iter().rposition(|r| r.window.is_none());
        let prev = at.map(|i| (&self.previous[i], last));
        let found = Sweep {
            index: self.index,
            s: &mut self.s,
            config: self.config,
        }
        .earliest(
            ctx,
            limit,
            bound,
            self.now_s,
            self.timeline.sorted(),
            &self.reservations.list,
            &mut self.active,
            prev,
        )?;
        self.reservations.list.push(Reservation {
            job: entity,
            key,
            start: found.start,
            end: limit.map(|l| found.start.saturating_add(l)),
            hyper_node: found.hyper_node,
            held: found.held,
            window: None,
            strict,
        });
        Some(found.start)
    }

    /// Ends the walk: every node held and every reservation taken is given back (the
    /// caches hold only what runs), and the jobs looked at are returned, with whether
    /// the cluster is whole.
    pub fn finish(mut self) -> (Vec<Entity>, bool) {
        self.holds.clear(&mut self.s);
        self.active.clear(&self.reservations.list, &mut self.s);
        (self.looked_at, self.whole)
    }
}

/// Why the job's queue or account does not let it have more now: the queue's limits
/// first, then its account's quotas and those of the accounts above it. A job over them
/// waits without a reservation.
fn limits(job: &Job, entity: Entity, ctx: &JobCtx, policy: &Policy<'_, '_>) -> Option<Reason> {
    let (jq, _, _) = policy.meta.get(entity).ok()?;
    let table = &*policy.queue_table;
    let mut req = vec![0u64; table.dims.len()];
    for slot in ctx.pending() {
        for (r, v) in req.iter_mut().zip(table.vector(&job.spec.tasks[slot.role].resources)) {
            *r = r.saturating_add(v);
        }
    }
    let running = policy.queue_use.is_running(entity);
    if let Some(why) = crate::queues::limits::blocked(
        table,
        &policy.queue_use,
        jq.queue,
        jq.user,
        policy.users.name(jq.user),
        &req,
        running,
    ) {
        return Some(why);
    }
    let account = table.account_of(job.spec.account.as_deref());
    if account.is_some_and(|a| table.accounts.chain(a).any(|a| table.accounts.get(a).has_quota())) {
        let mut ask = crate::accounts::usage::AccountCharge {
            account,
            ..Default::default()
        };
        for slot in ctx.pending() {
            let r = &job.spec.tasks[slot.role].resources;
            ask.cpu = ask.cpu.saturating_add(r.get(hyperplan_shared::CPU));
            ask.gpu = ask.gpu.saturating_add(crate::accounts::gpus(r));
        }
        return crate::accounts::quota::blocked(&table.accounts, &policy.queue_use.accounts, &ask, running);
    }
    None
}

/// Whether the job's gang could fit in `free` (the cluster's free room with no
/// reservation taken, per dimension) at all: a necessary condition, in sums over the whole
/// cluster (a gang of every task needs their sum; one of fewer needs at least that many of
/// its smallest task).
fn could_fit(job: &Job, state: &mut JobState, cap: &Capacity, free: &[u64]) -> bool {
    let fresh = state
        .room_need
        .as_ref()
        .is_some_and(|m| std::sync::Arc::ptr_eq(&m.dims, &cap.dims));
    if !fresh {
        state.room_need = Some(RoomNeed {
            dims: cap.dims.clone(),
            need: cap.gang_need(&job.spec, job.gang_min),
        });
    }
    let need = state.room_need.as_ref().and_then(|m| m.need.as_deref());
    need.is_some_and(|need| need.iter().zip(free).all(|(n, f)| n <= f) && need.len() <= free.len())
}
