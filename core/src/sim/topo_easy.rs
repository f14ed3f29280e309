//! A topology-aware EASY backfill baseline on a regular fat tree: what a site gets by
//! adding "one leaf (or one spine) per job" to the EASY of [`super::easy`] and nothing
//! more. The first waiting job that cannot start gets the earliest domain of its tier
//! (leaf, spine or the whole tree) whose nodes suffice at some running job's estimated
//! end (start + time limit), and later jobs start around it when they end by then or
//! leave it enough nodes. A job asks for the lowest tier one of whose domains holds it,
//! as `hyperplan simulate --swf` asks with hard topology, so the two can be compared on
//! the same jobs: the planner's search must beat this to be worth its keep.
//!
//! Plain Rust over counts of free nodes per leaf, like `easy`: small enough to trust.

use std::cmp::Reverse;
use std::collections::BTreeSet;

use super::events::Events;
use super::trace_job::TraceJob;

/// A regular fat tree: `leaf` nodes per leaf, `per_spine` leaves per spine, `spines`
/// spines under the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeShape {
    /// Nodes per leaf.
    pub leaf: u32,
    /// Leaves per spine.
    pub per_spine: u32,
    /// Spines.
    pub spines: u32,
}

impl TreeShape {
    /// Nodes in all.
    pub fn nodes(&self) -> u32 {
        self.leaf * self.per_spine * self.spines
    }

    fn leaves(&self) -> usize {
        (self.per_spine * self.spines) as usize
    }

    /// The leaves of each domain a job of `width` nodes may have.
    fn domains(&self, width: u32, wide: Wide) -> Vec<std::ops::Range<usize>> {
        let span = if width <= self.leaf {
            1
        } else if wide == Wide::OneDomain && width <= self.leaf * self.per_spine {
            self.per_spine as usize
        } else {
            self.leaves()
        };
        (0..self.leaves()).step_by(span).map(|a| a..a + span).collect()
    }
}

/// Where a job wider than a leaf may go (a job that fits a leaf always gets one leaf).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wide {
    /// One domain of the lowest tier that holds it: one spine, or the whole tree
    /// (`hyperplan simulate --swf --topology hard`).
    OneDomain,
    /// Anywhere in the tree, in as few leaves as the free nodes allow
    /// (`--topology leaf`).
    Anywhere,
}

/// One job's start and the leaves it ran in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopoStart {
    /// When it started.
    pub start: u64,
    /// How many distinct leaves its nodes are in.
    pub leaves: u32,
}

/// Start per job (same order as `jobs`); `None` for a job wider than the tree.
pub fn topo_easy_backfill(shape: TreeShape, wide: Wide, jobs: &[TraceJob]) -> Vec<Option<TopoStart>> {
    let mut sim = Sim::new(shape, wide, jobs);
    sim.run();
    sim.start
}

struct Sim<'a> {
    shape: TreeShape,
    wide: Wide,
    jobs: &'a [TraceJob],
    start: Vec<Option<TopoStart>>,
    /// Submissions and real ends still to come.
    events: Events,
    /// Waiting jobs, in queue order.
    queue: Vec<usize>,
    /// Running jobs by estimated end (start + limit).
    estimates: BTreeSet<(u64, usize)>,
    /// Free nodes per leaf.
    free: Vec<u32>,
    /// Per running job: (leaf, nodes) it holds.
    held: Vec<Vec<(usize, u32)>>,
}

impl<'a> Sim<'a> {
    fn new(shape: TreeShape, wide: Wide, jobs: &'a [TraceJob]) -> Self {
        Self {
            shape,
            wide,
            jobs,
            start: vec![None; jobs.len()],
            events: Events::new(jobs, |j| j.width() <= shape.nodes()),
            queue: Vec::new(),
            estimates: BTreeSet::new(),
            free: vec![shape.leaf; shape.leaves()],
            held: vec![Vec::new(); jobs.len()],
        }
    }

    /// From event to event until every job that fits has started and ended.
    fn run(&mut self) {
        let mut ended = Vec::new();
        while let Some(now) = self.events.advance(self.jobs, &mut ended, &mut self.queue) {
            for i in ended.drain(..) {
                for (leaf, n) in std::mem::take(&mut self.held[i]) {
                    self.free[leaf] += n;
                }
                let est = self.estimate(i);
                self.estimates.remove(&(est, i));
            }
            self.schedule(now);
        }
    }

    fn estimate(&self, i: usize) -> u64 {
        self.start[i]
            .as_ref()
            .map_or(0, |s| s.start)
            .saturating_add(self.jobs[i].limit())
    }

    /// Where `width` nodes go in one domain of their tier, given each leaf's usable nodes:
    /// the domain with the least room that holds them (best fit, ties by position), its
    /// fullest leaves first (fewest leaves). `None`: no domain holds them.
    fn place(&self, width: u32, usable: &[u32]) -> Option<Vec<(usize, u32)>> {
        let domain = self
            .shape
            .domains(width, self.wide)
            .into_iter()
            .map(|d| (usable[d.clone()].iter().sum::<u32>(), d))
            .filter(|(room, _)| *room >= width)
            .min_by_key(|(room, d)| (*room, d.start))?
            .1;
        let mut leaves: Vec<usize> = domain.filter(|&l| usable[l] > 0).collect();
        leaves.sort_by_key(|&l| (Reverse(usable[l]), l));
        let mut left = width;
        let mut out = Vec::new();
        for l in leaves {
            if left == 0 {
                break;
            }
            let n = usable[l].min(left);
            out.push((l, n));
            left -= n;
        }
        Some(out)
    }

    fn launch(&mut self, i: usize, now: u64, nodes: Vec<(usize, u32)>) {
        for &(leaf, n) in &nodes {
            self.free[leaf] -= n;
        }
        self.start[i] = Some(TopoStart {
            start: now,
            leaves: nodes.len() as u32,
        });
        self.held[i] = nodes;
        let job = &self.jobs[i];
        self.events.ends_at(now.saturating_add(job.runs()), i);
        self.estimates.insert((now.saturating_add(job.limit()), i));
    }

    /// Starts jobs from the head of the queue while the head fits; then later jobs that
    /// do not delay the head's reservation.
    fn schedule(&mut self, now: u64) {
        let mut k = 0;
        while let Some(&i) = self.queue.get(k) {
            let Some(nodes) = self.place(self.jobs[i].width(), &self.free) else {
                break;
            };
            self.launch(i, now, nodes);
            k += 1;
        }
        if k < self.queue.len() && self.free.iter().any(|&f| f > 0) {
            let (shadow, reserved, mut extra) = self.reservation(self.jobs[self.queue[k]].width());
            for at in k + 1..self.queue.len() {
                let i = self.queue[at];
                let w = self.jobs[i].width();
                if now.saturating_add(self.jobs[i].limit()) <= shadow {
                    if let Some(nodes) = self.place(w, &self.free) {
                        self.launch(i, now, nodes);
                    }
                    continue;
                }
                // Outside the reserved domain first; inside it only with its extra nodes.
                let mut outside = self.free.clone();
                for l in reserved.clone() {
                    outside[l] = 0;
                }
                let nodes = self.place(w, &outside).or_else(|| {
                    let nodes = self.place(w, &self.free)?;
                    let inside: u32 = nodes.iter().filter(|(l, _)| reserved.contains(l)).map(|p| p.1).sum();
                    (inside <= extra).then_some(nodes)
                });
                if let Some(nodes) = nodes {
                    let inside: u32 = nodes.iter().filter(|(l, _)| reserved.contains(l)).map(|p| p.1).sum();
                    extra -= inside;
                    self.launch(i, now, nodes);
                }
            }
        }
        let start = &self.start;
        self.queue.retain(|&i| start[i].is_none());
    }

    /// The head's reservation: the first estimated end at which one domain of its tier
    /// has `need` nodes free, that domain's leaves, and its nodes free then beyond `need`.
    fn reservation(&self, need: u32) -> (u64, std::ops::Range<usize>, u32) {
        let domains = self.shape.domains(need, self.wide);
        let span = domains.first().map_or(1, |d| d.len());
        let mut room: Vec<u32> = domains.iter().map(|d| self.free[d.clone()].iter().sum()).collect();
        let mut ends = self.estimates.iter().peekable();
        while let Some(&(end, i)) = ends.next() {
            for &(leaf, n) in &self.held[i] {
                room[leaf / span] += n;
            }
            while let Some(&&(same, j)) = ends.peek()
                && same == end
            {
                for &(leaf, n) in &self.held[j] {
                    room[leaf / span] += n;
                }
                ends.next();
            }
            if let Some((d, r)) = room
                .iter()
                .enumerate()
                .filter(|(_, r)| **r >= need)
                .min_by_key(|(d, r)| (**r, *d))
            {
                return (end, domains[d].clone(), r - need);
            }
        }
        // Not reached while the head fits the tree: once everything ends, a domain holds it.
        (u64::MAX, 0..0, 0)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// On random jobs: every job that fits the tree starts, none before it is
        /// submitted, a leaf-sized one in one leaf, and at no time are more nodes busy
        /// than the tree has.
        #[test]
        fn random_jobs_start_and_never_overfill_the_tree(
            raw in proptest::collection::vec((0u64..500, 1u32..20, 1u64..200, 0u64..200), 1..40),
            anywhere in any::<bool>(),
        ) {
            let jobs: Vec<TraceJob> = raw.iter().map(|&(s, n, r, extra)| job(s, n, r, r + extra)).collect();
            let wide = if anywhere { Wide::Anywhere } else { Wide::OneDomain };
            let starts = topo_easy_backfill(TREE, wide, &jobs);
            let mut edges = Vec::new();
            for (j, s) in jobs.iter().zip(&starts) {
                if j.nodes > TREE.nodes() {
                    prop_assert!(s.is_none());
                    continue;
                }
                let s = s.as_ref().unwrap();
                prop_assert!(s.start >= j.submit);
                if j.nodes <= TREE.leaf {
                    prop_assert_eq!(s.leaves, 1);
                }
                edges.push((s.start, 1i64, i64::from(j.nodes)));
                edges.push((s.start + j.runtime.min(j.limit), 0i64, -i64::from(j.nodes)));
            }
            // Ends before starts at the same second.
            edges.sort();
            let mut busy = 0i64;
            for (_, _, d) in edges {
                busy += d;
                prop_assert!(busy <= i64::from(TREE.nodes()));
            }
        }
    }

    fn job(submit: u64, nodes: u32, runtime: u64, limit: u64) -> TraceJob {
        TraceJob {
            submit,
            nodes,
            runtime,
            limit,
        }
    }

    const TREE: TreeShape = TreeShape {
        leaf: 4,
        per_spine: 2,
        spines: 2,
    };

    /// A leaf-sized job waits for one leaf to empty even when the tree has room in two.
    #[test]
    fn a_leaf_sized_job_waits_for_one_whole_leaf() {
        let jobs = [
            job(0, 2, 100, 100),
            job(0, 2, 100, 100),
            job(0, 2, 100, 100),
            job(0, 2, 100, 100),
            job(0, 4, 50, 50),
            job(0, 4, 50, 50),
            job(0, 4, 50, 50),
        ];
        let s = topo_easy_backfill(TREE, Wide::OneDomain, &jobs);
        // Four 2-node jobs fill two leaves (best fit packs them), then two 4-node jobs
        // take the other two leaves; the third waits for a leaf at 50.
        assert_eq!(s[6].as_ref().unwrap().start, 50);
        assert!(s.iter().all(|s| s.as_ref().unwrap().leaves == 1));
    }

    /// A later job that would take the reserved leaf past the head's start waits; one
    /// that ends in time starts.
    #[test]
    fn backfill_keeps_the_reserved_leaf() {
        let tree = TreeShape {
            leaf: 4,
            per_spine: 1,
            spines: 2,
        };
        let jobs = [
            job(0, 4, 100, 100), // leaf 0 until 100
            job(0, 2, 50, 50),   // leaf 1, 2 nodes, until 50
            job(1, 4, 10, 10),   // head: a whole leaf; leaf 1 frees at 50
            job(2, 2, 100, 100), // would hold leaf 1 past 50: waits
            job(3, 2, 40, 40),   // ends by 50: starts now in leaf 1
        ];
        let s = topo_easy_backfill(tree, Wide::OneDomain, &jobs);
        assert_eq!(s[2].as_ref().unwrap().start, 50);
        assert_eq!(s[4].as_ref().unwrap().start, 3);
        assert!(s[3].as_ref().unwrap().start >= 60);
    }

    /// Two spines of two leaves of 4, with 1, 1, 2 and 1 nodes free until 100: a 5-node
    /// job waits for a spine with `OneDomain`, and starts at once in four leaves with
    /// `Anywhere`.
    #[test]
    fn a_wide_job_spans_spines_only_when_asked_for_leaves_only() {
        let tree = TreeShape {
            leaf: 4,
            per_spine: 2,
            spines: 2,
        };
        let jobs = [
            job(0, 3, 100, 100),
            job(0, 3, 100, 100),
            job(0, 2, 100, 100),
            job(0, 3, 100, 100),
            job(1, 5, 10, 10),
        ];
        let s = topo_easy_backfill(tree, Wide::OneDomain, &jobs);
        assert_eq!(s[4].as_ref().unwrap().start, 100);
        let s = topo_easy_backfill(tree, Wide::Anywhere, &jobs);
        assert_eq!(s[4], Some(TopoStart { start: 1, leaves: 4 }));
    }

    /// A spine-sized job goes under one spine; a job wider than the tree never starts.
    #[test]
    fn tiers_above_the_leaf() {
        let jobs = [job(0, 6, 10, 10), job(0, 16, 10, 10), job(0, 17, 10, 10)];
        let s = topo_easy_backfill(TREE, Wide::OneDomain, &jobs);
        assert_eq!(s[0].as_ref().unwrap().leaves, 2);
        assert_eq!(s[1].as_ref().unwrap().start, 10);
        assert_eq!(s[1].as_ref().unwrap().leaves, 4);
        assert!(s[2].is_none());
    }
}
