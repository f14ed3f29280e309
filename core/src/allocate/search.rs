//! The two-level search (Volcano allocateForJob / allocateForSubJob /
//! allocateResourcesForTasks, §4) over live capacity, on a [`Scratch`] instead of
//! statement copies: a trial places tasks for real and rolls back what it does not keep.
//! A task with a NUMA request is also admitted per node by the topology manager (a node
//! that fails its policy is no candidate) and gets its PUs, memory and GPUs as it lands;
//! the numa-aware score (fewer NUMA nodes spanned) joins the topology score.

use std::sync::Arc;

use crate::cache::capacity::Shape;
use crate::cache::numa::IdealSpans;
use crate::cache::scratch::{Mark, Scratch};
use crate::config::{PlannerConfig, ScoringConfig, SpanMode};
use crate::model::ids::{HnIdx, NodeIdx};
use crate::numa::assign::{Assignment, TaskNuma};
use crate::topology::TopologyIndex;

use super::binpack::{dim_weights, fill_ratio};
use super::fading::fading_score;
use super::gang::JobCtx;
use super::gradient::gradients;
use super::horizon::Horizon;
use super::lca_score::{degraded_penalty, lca_score};
use super::span::{self, Slot, SpanKey};

/// A sub-job's candidate HyperNode as it is ranked: fabric degraded, its minimal-span
/// key, how far the job pushes its end out (`alignEnds`), bin-pack score, tie bonus,
/// the HyperNode, its position in the gradient.
type Ranked<'a> = (bool, Option<&'a SpanKey>, u64, f64, f64, HnIdx, usize);

/// A node a task would get, with its NUMA assignment there.
type Candidate = (NodeIdx, Arc<Assignment>);
/// What a committed attempt decided, for the AllocatedHyperNode bookkeeping (§4.2.5).
#[derive(Debug, Default)]
pub struct Decision {
    /// The job-level gradient HyperNode (`None` on the flat path).
    pub job_hn: Option<HnIdx>,
    /// Per sub-job index: the HyperNode its tasks were placed under.
    pub sub_job_hn: Vec<(usize, HnIdx)>,
}

/// How far past a group's first fit to look for a node where a task spans fewer NUMA
/// nodes (bounds the cost of a fragmented group).
const NARROWER_LOOKAHEAD: usize = 32;

/// One job's allocation attempt over the live caches, with its undo log.
pub struct Search<'a, 's> {
    /// The topology the attempt places on.
    pub index: &'a TopologyIndex,
    /// The caches, taken from as tasks are placed and pinned.
    s: &'a mut Scratch<'s>,
    /// Scoring settings (weights, span mode).
    pub cfg: &'a ScoringConfig,
    /// numa-aware plugin weight.
    numa_weight: f64,
    weights: Vec<f64>,
    /// Undo log: task index placed in this attempt, and where the scratch's log stood
    /// before it.
    log: Vec<(usize, Mark)>,
    sub_job_hn: Vec<(usize, HnIdx)>,
    /// The leaf-minimal plan for the HyperNode being filled: where its tasks look for
    /// nodes, planned units first in fill order ([`Slot`]).
    plan: Option<(HnIdx, Vec<Slot>)>,
    /// `[scoring] alignEnds`: when each HyperNode is busy until, and when this job is
    /// expected to end. Among the HyperNodes of a tier it goes where it pushes that end
    /// out least.
    align: Option<(&'a Horizon, u64)>,
}

impl<'a, 's> Search<'a, 's> {
    /// A search over the scratch's caches, with `cfg`'s scoring and numa-aware weight.
    pub fn new(s: &'a mut Scratch<'s>, cfg: &'a PlannerConfig) -> Self {
        let weights = dim_weights(s.cap(), &cfg.scoring);
        Self {
            index: s.index(),
            s,
            cfg: &cfg.scoring,
            numa_weight: cfg.numa.weight,
            weights,
            log: Vec::new(),
            sub_job_hn: Vec::new(),
            align: None,
            plan: None,
        }
    }

    /// With `[scoring] alignEnds`: the HyperNodes' ends, and the job's.
    pub fn aligned(mut self, align: Option<(&'a Horizon, u64)>) -> Self {
        self.align = align;
        self
    }

    /// How far this job would push `h`'s end out (0 without `alignEnds`).
    fn extends(&self, h: HnIdx) -> u64 {
        self.align.map_or(0, |(horizon, end)| horizon.extends(h, end))
    }

    fn place(&mut self, job: &mut JobCtx, t: usize, n: NodeIdx, assignment: Option<Arc<Assignment>>) {
        let role = job.tasks[t].role;
        self.log.push((t, self.s.mark()));
        self.s.take(n, &job.shapes[role], assignment.as_ref());
        job.tasks[t].node = Some(n);
        job.tasks[t].new = true;
        job.tasks[t].assignment = assignment;
    }

    fn rollback(&mut self, job: &mut JobCtx, mark: usize, sj_mark: usize) {
        if let Some(&(_, to)) = self.log.get(mark) {
            self.s.undo_to(to);
        }
        for (t, _) in self.log.drain(mark..) {
            job.tasks[t].node = None;
            job.tasks[t].assignment = None;
            job.tasks[t].new = false;
        }
        self.sub_job_hn.truncate(sj_mark);
    }

    /// One allocation attempt for a job. On success the placements stay applied (to
    /// `job` and the caches: kept by the scratch) and the decision is returned;
    /// otherwise nothing changed.
    pub fn allocate_job(&mut self, job: &mut JobCtx) -> Option<Decision> {
        let mark = self.s.begin();
        let decision = self.attempt(job);
        if decision.is_none() {
            self.rollback(job, 0, 0);
        }
        self.s.end(mark, decision.is_some());
        decision
    }

    fn attempt(&mut self, job: &mut JobCtx) -> Option<Decision> {
        self.log.clear();
        self.sub_job_hn.clear();
        if job.tier.is_none() && !job.has_partitions() {
            return self.allocate_flat(job);
        }
        let need = job.gang_min.saturating_sub(job.placed()).max(1) as u64;
        let counts = self.role_counts(job);
        let pending = role_pending(job, None);
        let grads = gradients(self.index, self.index.root, job.tier, job.allocated, |h| {
            job.in_trees(self.index, h) && room(&counts, &pending, h) >= need
        });
        let single = job.sub_jobs.len() == 1
            && !job.has_partitions()
            && job.allocated.is_none()
            && job.sub_jobs[0].allocated.is_none();
        let minimal = self.cfg.span == SpanMode::Minimal;
        for mut tier in grads {
            if single {
                // The only sub-job scores H itself (every lower HyperNode already failed
                // in an earlier gradient), so try in order and keep the first fit: those
                // whose fabric is healthy first, then fewest leaves (minimal span), then
                // bin-pack score, then name.
                let request = self.sub_job_request(job, 0);
                let mut keyed: Vec<(bool, SpanKey, u64, f64, HnIdx)> = tier
                    .iter()
                    .map(|&h| {
                        let key = if minimal {
                            span::plan(self.index, self.s.cap(), h, &job.shapes, &counts, &pending).key
                        } else {
                            SpanKey::default()
                        };
                        let sick = self.index.hns[h.ix()].fabric_sick();
                        let ratio = fill_ratio(self.s.cap(), &self.weights, h, &request);
                        (sick, key, self.extends(h), ratio, h)
                    })
                    .collect();
                keyed.sort_by(|a, b| {
                    a.0.cmp(&b.0)
                        .then(a.1.cmp(&b.1))
                        .then(a.2.cmp(&b.2))
                        .then(b.3.total_cmp(&a.3))
                        .then(a.4.cmp(&b.4))
                });
                for (_, _, _, _, h) in keyed {
                    if self.try_job_in(job, h).is_some() {
                        return Some(self.decision(Some(h)));
                    }
                }
                continue;
            }
            tier.sort();
            // Volcano keeps the best summed sub-job score; minimal span first keeps the
            // trial that spans the fewest leaves; a HyperNode whose fabric is healthy
            // before either.
            let mut best: Option<((bool, u32), f64, HnIdx)> = None;
            for &h in &tier {
                if let Some(score) = self.try_job_in(job, h) {
                    let leaves = if minimal { self.leaves_spanned(job) } else { 0 };
                    let rank = (self.index.hns[h.ix()].fabric_sick(), leaves);
                    if best.is_none_or(|(r, s, _)| rank < r || (rank == r && score > s)) {
                        best = Some((rank, score, h));
                    }
                    self.rollback(job, 0, 0);
                }
            }
            if let Some((_, _, h)) = best {
                // Replay the winner; the search is deterministic, so it lands the same way.
                if self.try_job_in(job, h).is_some() {
                    return Some(self.decision(Some(h)));
                }
            }
        }
        None
    }

    /// Distinct leaves (lowest-tier HyperNodes, or nodes without one: each is a group of
    /// its own) the job's placed tasks occupy.
    fn leaves_spanned(&self, job: &JobCtx) -> u32 {
        let mut units: Vec<(u32, u32)> = job
            .tasks
            .iter()
            .filter_map(|t| t.node)
            .map(|n| {
                let g = self.index.node_group[n.ix()];
                match self.index.groups[g.ix()].leaf {
                    Some(l) => (0, l.0),
                    None => (1, n.0),
                }
            })
            .collect();
        units.sort_unstable();
        units.dedup();
        units.len() as u32
    }

    fn decision(&self, job_hn: Option<HnIdx>) -> Decision {
        Decision {
            job_hn,
            sub_job_hn: self.sub_job_hn.clone(),
        }
    }

    /// Jobs without a hard topology and without partitions: all nodes, one pass.
    fn allocate_flat(&mut self, job: &mut JobCtx) -> Option<Decision> {
        let placed = self.place_tasks(job, 0, self.index.root);
        if placed > 0 && job.job_ready() {
            Some(self.decision(None))
        } else {
            self.rollback(job, 0, 0);
            None
        }
    }

    /// Trial of job-level HyperNode `h`: sub-jobs in order until the job is ready.
    /// Returns the summed sub-job scores, leaving the placements applied; rolls back
    /// and returns `None` when the job cannot become ready under `h`.
    fn try_job_in(&mut self, job: &mut JobCtx, h: HnIdx) -> Option<f64> {
        let (mark, sj_mark) = (self.log.len(), self.sub_job_hn.len());
        let mut score = 0.0;
        for sj in job.sub_job_order() {
            if job.job_ready() {
                break;
            }
            // Inner segments are placed by the segment outside them.
            if job.sub_jobs[sj].parent.is_some() {
                continue;
            }
            if let Some(s) = self.allocate_sub_job(job, sj, h) {
                score += s;
            }
        }
        if self.log.len() > mark && job.job_ready() {
            Some(score)
        } else {
            self.rollback(job, mark, sj_mark);
            None
        }
    }

    /// Volcano allocateForSubJob: the sub-job's own gradients inside the job's `h_job`;
    /// in each gradient the HyperNodes are tried best bin-pack score first.
    fn allocate_sub_job(&mut self, job: &mut JobCtx, sj: usize, h_job: HnIdx) -> Option<f64> {
        let s = &job.sub_jobs[sj];
        let need = s.min_available.saturating_sub(job.sj_placed(sj)).max(1) as u64;
        let pending = role_pending(job, Some(sj));
        // Per role, how many of its tasks fit in each HyperNode: kept by the capacity
        // cache as tasks come and go, so the gradient filter reads a count per candidate
        // instead of walking its nodes.
        let rooms: Vec<Option<Vec<u64>>> = job
            .shapes
            .iter()
            .enumerate()
            .map(|(r, shape)| (pending[r] > 0).then(|| self.s.room_per_hn(shape)))
            .collect();
        let grads = gradients(self.index, h_job, s.tier, s.allocated, |h| {
            room(&rooms, &pending, h) >= need
        });
        let request = self.sub_job_request(job, sj);
        let total_tasks = job.sub_jobs[sj].tasks.len().max(1) as f64;
        let minimal = self.cfg.span == SpanMode::Minimal;
        for tier in grads {
            // Minimal span: per candidate its plan (fewest leaves, then tightest), ahead of
            // Volcano's bin-pack score and the tie bonus.
            let plans: Vec<Option<span::SpanPlan>> = tier
                .iter()
                .map(|&h| minimal.then(|| span::plan(self.index, self.s.cap(), h, &job.shapes, &rooms, &pending)))
                .collect();
            let mut keyed: Vec<Ranked<'_>> = tier
                .iter()
                .enumerate()
                .map(|(i, &h)| {
                    let on_h = job.sub_jobs[sj]
                        .tasks
                        .iter()
                        .filter(|&&t| {
                            job.tasks[t]
                                .node
                                .is_some_and(|n| self.index.hns[h.ix()].nodes.contains(n.ix()))
                        })
                        .count() as f64;
                    (
                        self.index.hns[h.ix()].fabric_sick(),
                        plans[i].as_ref().map(|p| &p.key),
                        self.extends(h),
                        fill_ratio(self.s.cap(), &self.weights, h, &request),
                        on_h / total_tasks,
                        h,
                        i,
                    )
                })
                .collect();
            // A HyperNode whose fabric is healthy first (see `HnInfo::fabric_sick`).
            keyed.sort_by(|a, b| {
                a.0.cmp(&b.0)
                    .then(a.1.cmp(&b.1))
                    .then(a.2.cmp(&b.2))
                    .then(b.3.total_cmp(&a.3))
                    .then(b.4.total_cmp(&a.4))
                    .then(a.5.cmp(&b.5))
            });
            let max = keyed.iter().map(|k| k.3).max_by(f64::total_cmp);
            let order: Vec<(f64, f64, HnIdx, usize)> = keyed.iter().map(|k| (k.3, k.4, k.5, k.6)).collect();
            for (ratio, bonus, h, i) in order {
                let (mark, sj_mark) = (self.log.len(), self.sub_job_hn.len());
                let placed = if job.has_children(sj) {
                    self.place_segments_in(job, sj, h)
                } else {
                    self.plan = plans[i].as_ref().map(|p| (h, p.slots(self.index, h)));
                    let placed = self.place_tasks(job, sj, h);
                    self.plan = None;
                    placed
                };
                if placed > 0 && job.sj_ready(sj) {
                    self.sub_job_hn.push((sj, h));
                    let tie = if Some(ratio) == max { bonus } else { 0.0 };
                    return Some(100.0 * self.cfg.weight * (ratio + tie));
                }
                self.rollback(job, mark, sj_mark);
            }
        }
        None
    }

    /// An outer segment in `h`: each segment inside it in turn, inside `h`, until one does
    /// not fit (every segment is needed). Returns the tasks placed.
    fn place_segments_in(&mut self, job: &mut JobCtx, sj: usize, h: HnIdx) -> u32 {
        let before = job.sj_placed(sj);
        for inner in job.sub_job_order() {
            if job.sub_jobs[inner].parent != Some(sj) {
                continue;
            }
            if self.allocate_sub_job(job, inner, h).is_none() {
                break;
            }
        }
        job.sj_placed(sj) - before
    }

    /// Σ of the requests of every task of the sub-job (Volcano counts running ones too).
    fn sub_job_request(&self, job: &JobCtx, sj: usize) -> Vec<u64> {
        let mut r = vec![0u64; self.s.cap().d];
        for &t in &job.sub_jobs[sj].tasks {
            for (k, v) in job.shapes[job.tasks[t].role].req.iter().enumerate() {
                r[k] = r[k].saturating_add(*v);
            }
        }
        r
    }

    /// Per role with pending tasks: how many of its tasks fit in each HyperNode now.
    fn role_counts(&mut self, job: &JobCtx) -> Vec<Option<Vec<u64>>> {
        let pending = role_pending(job, None);
        job.shapes
            .iter()
            .enumerate()
            .map(|(r, s)| (pending[r] > 0).then(|| self.s.room_per_hn(s)))
            .collect()
    }

    /// A node after `pos` in the group (at most [`NARROWER_LOOKAHEAD`] on) where the task
    /// spans only `want` NUMA nodes: nodes of a group score alike on topology, so without
    /// this the numa-aware score could never prefer one of them to the first fit. A
    /// degraded node never stands in for a healthy one (they come last in the group).
    fn narrower_after(
        &mut self,
        nodes: &[NodeIdx],
        pos: usize,
        shape: &Shape,
        req: &TaskNuma,
        want: u32,
    ) -> Option<Candidate> {
        let healthy = nodes.get(pos).is_some_and(|&n| !self.index.degraded(n));
        for &n in nodes.iter().skip(pos + 1).take(NARROWER_LOOKAHEAD) {
            if !self.s.cap().fits(n, shape) || (healthy && self.index.degraded(n)) {
                continue;
            }
            match self.s.numa_mut().assign_shared(n, req) {
                Ok(a) if a.numa.count() <= want => return Some((n, a)),
                _ => {}
            }
        }
        None
    }

    /// Volcano allocateResourcesForTasks: each pending task of the sub-job to the best
    /// node under `h`. Returns how many were placed.
    fn place_tasks(&mut self, job: &mut JobCtx, sj: usize, h: HnIdx) -> u32 {
        let index = self.index;
        let groups = &index.hns[h.ix()].groups;
        // Where to look, in order: a plan's units by fill rank, then the rest; without a
        // plan every group of `h`, in order. The best candidate has the lowest rank, so the
        // scan stops after the first rank that has one; a task looks at a few planned
        // slots, not every group of `h`.
        let slots: Vec<Slot> = self
            .plan
            .take()
            .filter(|(p, _)| *p == h)
            .map_or_else(|| Slot::unplanned(index, h), |(_, s)| s);
        let with_topology = job.sub_jobs[sj].with_topology;
        let mut allocated = job.sub_jobs[sj].allocated;
        let total_tasks = job.sub_jobs[sj].tasks.len().max(1) as f64;
        // Tasks of this sub-job per leaf HyperNode (the LCA tie-break), by HyperNode index.
        let mut on_leaf: Vec<u32> = Vec::new();
        let count_on = |on_leaf: &mut Vec<u32>, leaf: HnIdx| {
            if on_leaf.is_empty() {
                on_leaf.resize(index.hns.len(), 0);
            }
            if let Some(c) = on_leaf.get_mut(leaf.ix()) {
                *c += 1;
            }
        };
        for &t in &job.sub_jobs[sj].tasks {
            if let Some(leaf) = job.tasks[t].node.and_then(|n| index.leaf_of(n)) {
                count_on(&mut on_leaf, leaf);
            }
        }
        // Per slot: its group's LCA score for the `allocated` it was worked out with
        // (`allocated` changes only when a task lands outside it).
        let mut lca_memo: Vec<Option<(Option<HnIdx>, f64)>> = vec![None; slots.len()];
        // Per role, per slot: position of the first node that may still fit, and for a
        // role with a NUMA request the node and assignment it would get (the first fit,
        // or a node a little further on where it spans fewer NUMA nodes). Capacity only
        // shrinks while placing, so cursors only move forward; an assignment stays valid
        // until something lands in its slot (slots share no node).
        let mut cursors: Vec<Option<Vec<u32>>> = vec![None; job.shapes.len()];
        let mut cands: Vec<Vec<Option<Candidate>>> = vec![Vec::new(); job.shapes.len()];
        // Per (role, hardware): NUMA nodes the task spans on the empty machine.
        let mut ideal = IdealSpans::default();
        let mut failed = vec![false; job.shapes.len()];
        let pending: Vec<usize> = job.sj_pending(sj).collect();
        let mut placed = 0;
        // (slot, node, topology score, tie bonus, NUMA nodes spanned)
        let mut found: Vec<(usize, NodeIdx, f64, f64, u32)> = Vec::new();
        // Per role: planned slots before this one have no node left that fits (cursors
        // only move forward, so they never will again).
        let mut skip = vec![0usize; job.shapes.len()];
        for t in pending {
            let role = job.tasks[t].role;
            if failed[role] {
                continue;
            }
            let shape = &job.shapes[role];
            let numa_req = job.numa[role];
            let cursor = cursors[role].get_or_insert_with(|| vec![0; slots.len()]);
            let cand = &mut cands[role];
            if cand.len() != slots.len() {
                *cand = vec![None; slots.len()];
            }
            found.clear();
            for (si, slot) in slots.iter().enumerate().skip(skip[role]) {
                if let Some(f) = found.first()
                    && slot.rank != slots[f.0].rank
                {
                    break;
                }
                let g = groups[slot.gi];
                let nodes: &[NodeIdx] = slot.nodes.as_deref().unwrap_or(&index.groups[g.ix()].nodes);
                let mut pos = cursor[si] as usize;
                loop {
                    while pos < nodes.len() && !self.s.cap().fits(nodes[pos], shape) {
                        pos += 1;
                        cand[si] = None;
                    }
                    let (Some(&n), Some(req)) = (nodes.get(pos), numa_req.as_ref()) else {
                        break;
                    };
                    if cand[si].is_some() {
                        break;
                    }
                    match self.s.numa_mut().assign_shared(n, req) {
                        Ok(a) => {
                            let want = self.s.numa().group_ideal_span(g, req, role, &mut ideal);
                            let better = if a.numa.count() > want {
                                self.narrower_after(nodes, pos, shape, req, want)
                            } else {
                                None
                            };
                            cand[si] = Some(better.unwrap_or((n, a)));
                            break;
                        }
                        // Free state only shrinks while placing: it fails here for good.
                        Err(_) => pos += 1,
                    }
                }
                cursor[si] = pos as u32;
                let Some(&first) = nodes.get(pos) else {
                    if si == skip[role] && slot.rank != u32::MAX {
                        skip[role] += 1;
                    }
                    continue;
                };
                let n = cand[si].as_ref().map_or(first, |c| c.0);
                let (score, bonus) = if with_topology {
                    let leaf = index.groups[g.ix()].leaf;
                    let bonus = leaf
                        .and_then(|l| on_leaf.get(l.ix()))
                        .map_or(0.0, |c| f64::from(*c) / total_tasks);
                    let score = match lca_memo[si] {
                        Some((a, s)) if a == allocated => s,
                        _ => {
                            let s = lca_score(index, g, allocated);
                            lca_memo[si] = Some((allocated, s));
                            s
                        }
                    };
                    (score, bonus)
                } else {
                    (
                        fading_score(index, self.s.cap(), self.cfg, &self.weights, g, &shape.req),
                        0.0,
                    )
                };
                let score = if index.degraded(n) {
                    score - degraded_penalty(index)
                } else {
                    score
                };
                let span = cand[si].as_ref().map_or(0, |c| c.1.numa.count());
                found.push((si, n, score, bonus, span));
            }
            // The numa-aware score: 100 − ⌊100·spanned/max spanned⌋ over the candidates.
            // A leaf-minimal plan ranks first: its leaves in fill order, the rest after.
            let max_span = found.iter().map(|f| f.4).max().unwrap_or(0);
            let mut best: Option<(u32, f64, f64, NodeIdx, usize)> = None;
            for &(si, n, score, bonus, span) in &found {
                let score = if numa_req.is_some() && max_span > 0 {
                    score + self.numa_weight * f64::from(100 - 100 * span / max_span)
                } else {
                    score
                };
                let rank = slots[si].rank;
                let better = match best {
                    None => true,
                    Some((rk, s, b, m, _)) => {
                        rank < rk || (rank == rk && (score > s || (score == s && (bonus > b || (bonus == b && n < m)))))
                    }
                };
                if better {
                    best = Some((rank, score, bonus, n, si));
                }
            }
            match best {
                Some((_, _, _, n, si)) => {
                    let assignment = cands[role].get_mut(si).and_then(Option::take).map(|c| c.1);
                    self.place(job, t, n, assignment);
                    // Whatever other roles had picked on this node is stale now.
                    for c in cands.iter_mut() {
                        if let Some(slot) = c.get_mut(si) {
                            *slot = None;
                        }
                    }
                    placed += 1;
                    if let Some(leaf) = index.leaf_of(n) {
                        count_on(&mut on_leaf, leaf);
                        if with_topology {
                            allocated = index.lca_opt(Some(leaf), allocated);
                        }
                    }
                }
                None => {
                    failed[role] = true;
                    if !job.need_continue(sj) {
                        break;
                    }
                }
            }
        }
        placed
    }
}

/// Pending tasks per role, of the whole job or of one sub-job.
pub(super) fn role_pending(job: &JobCtx, sj: Option<usize>) -> Vec<u64> {
    let mut p = vec![0u64; job.shapes.len()];
    match sj {
        Some(s) => job.sj_pending(s).for_each(|t| p[job.tasks[t].role] += 1),
        None => job.pending().for_each(|t| p[t.role] += 1),
    }
    p
}

/// How many of the pending tasks fit in `h` (per role, capped at what is pending).
pub(super) fn room(counts: &[Option<Vec<u64>>], pending: &[u64], h: HnIdx) -> u64 {
    counts
        .iter()
        .zip(pending)
        .map(|(c, p)| c.as_ref().map_or(0, |c| c[h.ix()].min(*p)))
        .sum()
}
