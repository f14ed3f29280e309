//! The earliest time a blocked job fits, and where: a sweep forward in time over the live
//! caches. At each time a running task is expected to end, its resources are given back
//! (in the caches themselves, a trial of the scratch: undone at the end), the reservations
//! overlapping the job's window from then on are taken, and, when the room of some
//! HyperNode the job may use has grown enough, the real placement search runs on that
//! future state. The first success is the reservation: one HyperNode of an allowed tier
//! (the search's own rule), fewest leaves, best packed, as a placement now would be.
//!
//! The search looks first in the room that frees between now and then, leaving the room
//! free now to backfill (EASY's "extra nodes"), and when it must use some of that, moves
//! its tasks within the HyperNode its tier allows onto nodes that free later.

use std::sync::Arc;

use crate::cache::capacity::Shape;
use crate::cache::holdings::Held;
use crate::cache::scratch::Scratch;
use crate::config::PlannerConfig;
use crate::model::ids::{HnIdx, NodeIdx};
use crate::topology::TopologyIndex;

use super::super::gang::JobCtx;
use super::super::search::Search;
use super::Reservation;
use super::active::{ActiveSet, Window};
use super::timeline::Release;

/// Full searches one reservation may cost; the cheap room check before each keeps most
/// sweeps far below it. A job that still does not fit gets no reservation this walk.
const MAX_SEARCHES: usize = 64;

/// Where and when a blocked job will fit.
#[derive(Debug)]
pub struct Found {
    /// When (Unix seconds).
    pub start: u64,
    /// What each of its pending tasks would hold there.
    pub held: Vec<Held>,
    /// The lowest HyperNode holding every reserved node (`None`: the whole cluster).
    pub hyper_node: Option<HnIdx>,
}

/// The caches and settings a sweep works on.
pub struct Sweep<'a, 's> {
    /// The topology.
    pub index: &'a TopologyIndex,
    /// The live caches (left as they were found).
    pub s: &'a mut Scratch<'s>,
    /// Scoring, as for a placement now.
    pub config: &'a PlannerConfig,
}

impl Sweep<'_, '_> {
    /// The earliest time after `now` at which `ctx`'s pending tasks fit for `limit`
    /// seconds, given `releases` (sorted by end) and the reservations already made
    /// (`list`, held per `active`). `previous`: the job's reservation from the last walk,
    /// kept when it still holds at its time (so it does not wander and push others back),
    /// and whether it was the last one made (it may then move off room free now).
    /// The caches and `active` are left as they were found: the sweep is a trial.
    #[allow(clippy::too_many_arguments)]
    pub fn earliest(
        &mut self,
        ctx: &JobCtx,
        limit: Option<u64>,
        bound: Option<u64>,
        now: u64,
        releases: &[Release],
        list: &[Reservation],
        active: &mut ActiveSet,
        previous: Option<(&Reservation, bool)>,
    ) -> Option<Found> {
        let saved = active.clone();
        let mark = self.s.begin();
        let found = self.sweep(ctx, limit, bound, now, releases, list, active, previous);
        self.s.end(mark, false);
        *active = saved;
        found
    }

    #[allow(clippy::too_many_arguments)]
    fn sweep(
        &mut self,
        ctx: &JobCtx,
        limit: Option<u64>,
        bound: Option<u64>,
        now: u64,
        releases: &[Release],
        list: &[Reservation],
        active: &mut ActiveSet,
        previous: Option<(&Reservation, bool)>,
    ) -> Option<Found> {
        let mut pending = vec![0u64; ctx.shapes.len()];
        ctx.pending().for_each(|t| pending[t.role] += 1);
        let pending_total: u64 = pending.iter().sum();
        if pending_total == 0 {
            return None;
        }
        let need = u64::from(ctx.gang_min.saturating_sub(ctx.placed()).max(1));
        // Count the job's shapes from here on, so each room check is a read.
        for (r, shape) in ctx.shapes.iter().enumerate() {
            if pending[r] > 0 {
                self.s.room_per_hn(shape);
            }
        }
        let (previous, movable) = match previous {
            Some((p, movable)) => (Some(p), movable),
            None => (None, false),
        };
        let previous =
            previous.filter(|p| p.held.len() as u64 == pending_total && p.held.iter().all(|h| h.numa.is_none()));
        let free_now = self.free_now(ctx, &pending);
        let mut applied = 0usize;
        let mut searches = 0usize;
        let mut sticky_tried = false;
        let mut found = None;
        let mut freed: Vec<NodeIdx> = Vec::new();
        let at = |r: &Release| r.end.max(now + 1);
        // Times room can grow: a running task's end, or a reservation's.
        let mut ends: Vec<u64> = list.iter().filter_map(|r| r.end).filter(|&e| e > now).collect();
        ends.sort_unstable();
        ends.dedup();
        let mut next_end = 0usize;
        loop {
            let c = match (releases.get(applied).map(at), ends.get(next_end)) {
                (Some(a), Some(&b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(&b)) => b,
                (None, None) => break,
            };
            while ends.get(next_end).is_some_and(|&e| e <= c) {
                next_end += 1;
            }
            freed.clear();
            while applied < releases.len() && at(&releases[applied]) <= c {
                let h = &releases[applied].held;
                self.s.give_held(h);
                freed.push(h.node);
                applied += 1;
            }
            let window = Window { from: c, limit, bound };
            active.set(list, window, self.s, Some(&mut freed));
            if let Some(p) = previous
                && !sticky_tried
                && c >= p.start
            {
                sticky_tried = true;
                if self.holds(&p.held) {
                    // Kept as it was, unless it is the last and holds room free now that
                    // room freed by then could replace. One made after it in the last walk
                    // stays put: moved, it would free room that a job after it could
                    // reserve sooner, taking the room of a reservation made after that
                    // one, and push it back.
                    let moved = if movable {
                        self.relocate(ctx, p, c, &free_now)
                    } else {
                        None
                    };
                    found = moved.or_else(|| {
                        Some(Found {
                            start: c,
                            held: p.held.clone(),
                            hyper_node: p.hyper_node,
                        })
                    });
                    break;
                }
            }
            if !self.room_grew_enough(ctx, &pending, need, &freed) {
                continue;
            }
            searches += 1;
            if let Some(f) = self.search_at(ctx, c, &free_now) {
                found = Some(f);
                break;
            }
            if searches >= MAX_SEARCHES {
                break;
            }
        }
        found
    }

    /// Whether some HyperNode the job may use, holding a node whose room just grew, now
    /// has room for the job's gang (a necessary condition, cheap: a few reads per node).
    fn room_grew_enough(&self, ctx: &JobCtx, pending: &[u64], need: u64, freed: &[NodeIdx]) -> bool {
        let allowed = |h: HnIdx| ctx.tier.is_none_or(|t| self.index.allows(t, h)) && ctx.in_trees(self.index, h);
        let room = |h: HnIdx| -> u64 {
            ctx.shapes
                .iter()
                .zip(pending)
                .filter(|(_, p)| **p > 0)
                .map(|(s, p)| self.s.cap().counted_room(h, s).unwrap_or(u64::MAX).min(*p))
                .sum()
        };
        let mut seen_groups: Vec<u32> = Vec::new();
        for &n in freed {
            let g = self.index.node_group[n.ix()];
            if seen_groups.contains(&g.0) {
                continue;
            }
            seen_groups.push(g.0);
            if self.index.groups[g.ix()]
                .hyper_nodes
                .iter()
                .any(|&h| allowed(h) && room(h) >= need)
            {
                return true;
            }
        }
        false
    }

    /// Whether every task of a reservation still fits where it was reserved.
    fn holds(&mut self, held: &[Held]) -> bool {
        self.s.trial(|s| {
            held.iter().all(|h| {
                let fits = s.cap().fits(h.node, &h.shape);
                if fits {
                    s.take(h.node, &h.shape, None);
                }
                fits
            })
        })
    }

    /// Reservation `p` of the last walk, still holding at `c`, moved off the room free
    /// now where room freed by then will do (see [`Sweep::search_at`]); `None`: where it
    /// is serves as well.
    fn relocate(&mut self, ctx: &JobCtx, p: &Reservation, c: u64, free_now: &[(NodeIdx, Arc<Shape>)]) -> Option<Found> {
        if !p
            .held
            .iter()
            .any(|h| free_now.binary_search_by_key(&h.node, |f| f.0).is_ok())
        {
            return None;
        }
        self.search_later(ctx, c, free_now).or_else(|| {
            let mut held = p.held.clone();
            let within = self.scope(ctx, p.hyper_node);
            self.prefer_later(&mut held, within, free_now).then(|| Found {
                start: c,
                hyper_node: self.lowest(&held),
                held,
            })
        })
    }

    /// What each node with room for one of `ctx`'s pending tasks has free now.
    fn free_now(&self, ctx: &JobCtx, pending: &[u64]) -> Vec<(NodeIdx, Arc<Shape>)> {
        let cap = self.s.cap();
        let d = cap.d.max(1);
        let shapes: Vec<&Shape> = ctx
            .shapes
            .iter()
            .zip(pending)
            .filter(|(_, p)| **p > 0)
            .map(|(s, _)| &**s)
            .collect();
        cap.free
            .chunks(d)
            .enumerate()
            .filter(|(n, _)| shapes.iter().any(|s| cap.fits(NodeIdx(*n as u32), s)))
            .map(|(n, f)| {
                let shape = Shape {
                    req: f.to_vec(),
                    missing: None,
                };
                (NodeIdx(n as u32), Arc::new(shape))
            })
            .collect()
    }

    /// The placement search on the caches as they stand at time `c`; its placements are
    /// undone at once and returned. It looks first in the room that frees between now and
    /// `c` only, leaving `free_now` out: the room free now is what later jobs backfill
    /// into (EASY's "extra nodes"), so a reservation that can do without it leaves it
    /// to them. Only when that finds nothing does it search everything.
    fn search_at(&mut self, ctx: &JobCtx, c: u64, free_now: &[(NodeIdx, Arc<Shape>)]) -> Option<Found> {
        if let Some(f) = self.search_later(ctx, c, free_now) {
            return Some(f);
        }
        let config = self.config;
        let mut trial = ctx.clone();
        self.s.trial(|s| Search::new(s, config).allocate_job(&mut trial))?;
        let mut found = self.found(trial, c);
        let within = self.scope(ctx, found.hyper_node);
        if self.prefer_later(&mut found.held, within, free_now) {
            found.hyper_node = self.lowest(&found.held);
        }
        Some(found)
    }

    /// The highest HyperNode above `h` (the lowest holding a placement) that the job's
    /// tier limit allows: where its tasks may move without breaking it (`None`: the
    /// whole cluster).
    fn scope(&self, ctx: &JobCtx, h: Option<HnIdx>) -> Option<HnIdx> {
        let index = self.index;
        let mut h = h?;
        while let Some(up) = index.hns[h.ix()].parent {
            if !(ctx.tier.is_none_or(|t| index.allows(t, up)) && ctx.in_trees(index, up)) {
                return Some(h);
            }
            h = up;
        }
        None
    }

    /// Moves reserved tasks off nodes with room free now onto nodes within HyperNode
    /// `within` (so the tier the job allows still holds) whose room only frees later,
    /// nodes of the groups it already uses first (no leaf added): the room free now stays
    /// for backfill, as EASY's "extra nodes" do. Returns whether any task moved.
    fn prefer_later(&mut self, held: &mut [Held], within: Option<HnIdx>, free_now: &[(NodeIdx, Arc<Shape>)]) -> bool {
        let free = |n: NodeIdx| free_now.binary_search_by_key(&n, |f| f.0).is_ok();
        if free_now.is_empty() || !held.iter().any(|h| free(h.node)) || held.iter().any(|h| h.numa.is_some()) {
            return false;
        }
        let index = self.index;
        let used: std::collections::BTreeSet<u32> = held.iter().map(|h| index.node_group[h.node.ix()].0).collect();
        let mut targets: Vec<NodeIdx> = index.hns[within.unwrap_or(index.root).ix()]
            .nodes
            .ones()
            .map(|n| NodeIdx(n as u32))
            .filter(|&n| !free(n))
            .collect();
        targets.sort_by_key(|n| (!used.contains(&index.node_group[n.ix()].0), *n));
        self.s.trial(|s| {
            let mut moved = false;
            for h in held.iter() {
                s.take_held(h);
            }
            // A node without room for one task has none for the next of the same shape
            // (the trial only takes); for another shape, a node passed over is only a
            // move not made.
            let mut at = 0;
            for h in held.iter_mut().filter(|h| free(h.node)) {
                while let Some(&m) = targets.get(at) {
                    if s.cap().fits(m, &h.shape) {
                        s.give(h.node, &h.shape, None);
                        s.take(m, &h.shape, None);
                        h.node = m;
                        moved = true;
                        break;
                    }
                    at += 1;
                }
            }
            moved
        })
    }

    /// The lowest HyperNode holding every node of `held` (`None`: the whole cluster).
    fn lowest(&self, held: &[Held]) -> Option<HnIdx> {
        let mut hyper_node: Option<HnIdx> = None;
        for h in held {
            let lowest = self.index.lowest_of(h.node).unwrap_or(self.index.root);
            hyper_node = Some(self.index.lca_opt(hyper_node, Some(lowest)).unwrap_or(lowest));
        }
        hyper_node.filter(|h| *h != self.index.root)
    }

    /// The search in the room freed between now and `c` only (`free_now` left out).
    fn search_later(&mut self, ctx: &JobCtx, c: u64, free_now: &[(NodeIdx, Arc<Shape>)]) -> Option<Found> {
        if free_now.is_empty() {
            return None;
        }
        let config = self.config;
        let mut trial = ctx.clone();
        let later = self.s.trial(|s| {
            for (n, f) in free_now {
                let req: Vec<u64> = f
                    .req
                    .iter()
                    .zip(s.cap().free_of(*n))
                    .map(|(&was, &is)| was.min(is))
                    .collect();
                // Mostly the node still has what it had free now: that shape, no new one.
                if req == f.req {
                    s.take(*n, f, None);
                } else if req.iter().any(|&x| x > 0) {
                    s.take(*n, &Arc::new(Shape { req, missing: None }), None);
                }
            }
            Search::new(s, config).allocate_job(&mut trial).is_some()
        });
        later.then(|| self.found(trial, c))
    }

    /// A search's trial placement as a reservation at `c`.
    fn found(&self, mut trial: JobCtx, c: u64) -> Found {
        let mut held = Vec::new();
        for slot in trial.tasks.iter_mut().filter(|s| s.new) {
            let Some(node) = slot.node else { continue };
            let shape = trial.shapes[slot.role].clone();
            let numa = slot.assignment.take();
            held.push(Held { node, shape, numa });
        }
        Found {
            start: c,
            hyper_node: self.lowest(&held),
            held,
        }
    }
}

/// Places `ctx`'s pending tasks on the nodes `r` kept for them, in task order, when the
/// job is a plain gang (one sub-job, nothing pinned) and every one of them fits now; the
/// caches take them as a search would. `None` (and nothing taken) otherwise.
pub fn start_as_reserved(
    s: &mut Scratch<'_>,
    ctx: &mut JobCtx,
    r: &Reservation,
) -> Option<super::super::search::Decision> {
    let index = s.index();
    let pending: Vec<usize> = (0..ctx.tasks.len()).filter(|&t| ctx.tasks[t].node.is_none()).collect();
    if ctx.has_partitions()
        || ctx.sub_jobs.len() != 1
        || ctx.numa.iter().any(Option::is_some)
        || pending.len() != r.held.len()
        || r.held.iter().any(|h| h.numa.is_some())
    {
        return None;
    }
    s.attempt(|s| {
        pending
            .iter()
            .zip(&r.held)
            .all(|(&t, h)| {
                let shape = &ctx.shapes[ctx.tasks[t].role];
                let fits = **shape == *h.shape && s.cap().fits(h.node, shape);
                if fits {
                    s.take(h.node, shape, None);
                }
                fits
            })
            .then_some(())
    })?;
    for (&t, h) in pending.iter().zip(&r.held) {
        ctx.tasks[t].node = Some(h.node);
        ctx.tasks[t].new = true;
    }
    let h = if ctx.with_topology || ctx.tier.is_some() {
        Some(r.hyper_node.unwrap_or(index.root))
    } else {
        None
    };
    Some(super::super::search::Decision {
        job_hn: h,
        sub_job_hn: h.map(|h| vec![(0, h)]).unwrap_or_default(),
    })
}

/// As [`start_as_reserved`], for a job whose reservation is due but whose nodes the
/// reservations overlapping its window (all taken from the caches now, per `active`)
/// leave no room on: it starts there when, at each time within its window that one of
/// them begins, the tasks still running then (`releases`: each at its expected end), it
/// and every reservation under way then fit on its nodes. Taken now, a reservation also
/// counts the room that tasks ending before it begins still hold: a job backfilled
/// before a later reservation (it ends first, so it delays none) would keep this job,
/// reserved around both, from its own time. `active` is left as it was found.
pub fn start_in_time(
    s: &mut Scratch<'_>,
    ctx: &mut JobCtx,
    r: &Reservation,
    window: Window,
    releases: &[Release],
    list: &[Reservation],
    active: &mut ActiveSet,
) -> Option<super::super::search::Decision> {
    let now = window.from;
    // The times to look at: now, and each start within the window.
    let mut times: Vec<u64> = list
        .iter()
        .filter(|x| window.overlaps(x))
        .map(|x| x.start.max(now))
        .chain([now])
        .collect();
    times.sort_unstable();
    times.dedup();
    let mine: Vec<NodeIdx> = r.held.iter().map(|h| h.node).collect();
    let pending: Vec<usize> = (0..ctx.tasks.len()).filter(|&t| ctx.tasks[t].node.is_none()).collect();
    active.clear(list, s);
    let decision = s.attempt(|s| {
        let decision = start_as_reserved(s, ctx, r)?;
        // A question: releases given back and reservations taken are undone on return.
        let fits = s.trial(|s| {
            let at = |x: &Release| x.end.max(now + 1);
            let mut applied = 0;
            times.iter().all(|&t| {
                while applied < releases.len() && at(&releases[applied]) <= t {
                    let h = &releases[applied].held;
                    s.give(h.node, &h.shape, None);
                    applied += 1;
                }
                // Every reservation under way at `t`, on this job's nodes.
                s.trial(|s| {
                    list.iter()
                        .filter(|x| x.start <= t && x.end.is_none_or(|e| t < e))
                        .flat_map(|x| &x.held)
                        .filter(|h| mine.contains(&h.node))
                        .all(|h| {
                            let fits = s.cap().fits(h.node, &h.shape);
                            if fits {
                                s.take(h.node, &h.shape, None);
                            }
                            fits
                        })
                })
            })
        });
        fits.then_some(decision)
    });
    if decision.is_none() {
        // Nothing of it kept: the tasks it was given are pending again.
        for t in pending {
            ctx.tasks[t].node = None;
            ctx.tasks[t].new = false;
        }
    }
    active.set(list, window, s, None);
    decision
}
