//! The resource cache: allocatable and free capacity per node and per HyperNode as dense
//! vectors over resource dimensions. The allocator takes from it as it places tasks and
//! gives back on discard, so every decision within a tick sees live values; between
//! ticks it follows the tasks that started and stopped (see `holdings`).

use bevy_ecs::prelude::*;
use hyperplan_shared::{JobSpec, Resources};

use crate::model::ids::{HnIdx, NodeIdx};
use crate::topology::TopologyIndex;

/// A task's request over the cache's dimensions.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Amount per dimension, in base units (millicores, bytes, counts).
    pub req: Vec<u64>,
    /// A requested resource no node offers (the task can never run).
    pub missing: Option<String>,
}

impl Shape {
    /// Asks for nothing, and nothing it asks for is missing.
    pub fn is_zero(&self) -> bool {
        self.missing.is_none() && self.req.iter().all(|v| *v == 0)
    }
}

/// Allocatable, used and free resources per node and per HyperNode, each a flat vector of
/// `d` values per entry (entry `i`, dimension `k` at `i * d + k`), in base units.
#[derive(Clone, Debug, Default, Resource)]
pub struct Capacity {
    /// Resource names, sorted; position = dimension.
    pub dims: std::sync::Arc<[String]>,
    /// Number of dimensions: the stride of every per-node and per-HyperNode vector.
    pub d: usize,
    /// Per node: allocatable.
    pub alloc: Vec<u64>,
    /// Per node: what is in use, as an exact sum (external use — all of the node while
    /// it is not ready — plus the tasks taken), so `give` undoes `take` exactly even on
    /// a node shrunk under its running tasks.
    pub used: Vec<u64>,
    /// Per node: `alloc − used`, floored at zero.
    pub free: Vec<u64>,
    /// Per HyperNode: Σ of its nodes' allocatable.
    pub hn_alloc: Vec<u64>,
    /// Per HyperNode: Σ over its nodes of `alloc − free` (a node counts at most whole).
    pub hn_used: Vec<u64>,
    /// Per task shape (request vector): how many fit in each HyperNode, kept current by
    /// `take`/`give`, so each job does not rescan every node. Only a few shapes are kept,
    /// the least recently asked for makes room for a new one.
    counted: Vec<Counted>,
    /// Stamps `Counted::last_use`.
    uses: u64,
}

#[derive(Clone, Debug)]
struct Counted {
    req: Vec<u64>,
    per_hn: Vec<u64>,
    /// By `NodeIdx`: how many fit on the node now (a take works out only the new count).
    per_node: Vec<u64>,
    last_use: u64,
}

/// More shapes would make every `take` pay for shapes no job asks for again.
const MAX_COUNTED_SHAPES: usize = 16;

impl Capacity {
    /// `per_node[i]` = (allocatable, used) of node `NodeIdx(i)`.
    pub fn build(index: &TopologyIndex, per_node: &[(&Resources, &Resources)]) -> Self {
        let mut dims: Vec<String> = per_node.iter().flat_map(|(a, _)| a.0.keys().cloned()).collect();
        dims.push(hyperplan_shared::CPU.into());
        dims.push(hyperplan_shared::MEMORY.into());
        dims.sort();
        dims.dedup();
        let d = dims.len();
        let n = per_node.len();
        let mut alloc = vec![0u64; n * d];
        let mut used = vec![0u64; n * d];
        let mut free = vec![0u64; n * d];
        for (i, (a, u)) in per_node.iter().enumerate() {
            for (k, name) in dims.iter().enumerate() {
                let av = a.get(name);
                alloc[i * d + k] = av;
                used[i * d + k] = u.get(name);
                free[i * d + k] = av.saturating_sub(u.get(name));
            }
        }
        let h = index.hns.len();
        let mut hn_alloc = vec![0u64; h * d];
        let mut hn_used = vec![0u64; h * d];
        for group in &index.groups {
            for &node in &group.nodes {
                for &hn in &group.hyper_nodes {
                    for k in 0..d {
                        let a = alloc[node.ix() * d + k];
                        hn_alloc[hn.ix() * d + k] += a;
                        hn_used[hn.ix() * d + k] += a - free[node.ix() * d + k];
                    }
                }
            }
        }
        Self {
            dims: dims.into(),
            d,
            alloc,
            used,
            free,
            hn_alloc,
            hn_used,
            counted: Vec::new(),
            uses: 0,
        }
    }

    /// The same cluster with nothing running: for "could this ever run?" checks.
    pub fn emptied(&self) -> Self {
        Self {
            dims: self.dims.clone(),
            d: self.d,
            alloc: self.alloc.clone(),
            used: vec![0; self.used.len()],
            free: self.alloc.clone(),
            hn_alloc: self.hn_alloc.clone(),
            hn_used: vec![0; self.hn_used.len()],
            counted: Vec::new(),
            uses: 0,
        }
    }

    /// What a gang of `job` needs of the whole cluster per dimension, at least: the sum
    /// of its tasks when the gang is every task, else `gang_min` of its smallest task.
    /// `None`: a task asks for a resource no node has.
    pub fn gang_need(&self, job: &JobSpec, gang_min: u32) -> Option<Box<[u64]>> {
        let whole_gang = gang_min >= job.replicas();
        let mut sum = vec![0u64; self.d];
        let mut smallest: Vec<Option<u64>> = vec![None; self.d];
        for t in &job.tasks {
            let shape = self.shape(&t.resources);
            if shape.missing.is_some() {
                return None;
            }
            for (k, &r) in shape.req.iter().enumerate() {
                sum[k] = sum[k].saturating_add(r.saturating_mul(u64::from(t.replicas)));
                smallest[k] = Some(smallest[k].map_or(r, |m| m.min(r)));
            }
        }
        if !whole_gang {
            for (s, m) in sum.iter_mut().zip(smallest) {
                *s = m.unwrap_or(0).saturating_mul(u64::from(gang_min));
            }
        }
        Some(sum.into())
    }

    /// A request over the cache's dimensions.
    pub fn shape(&self, r: &Resources) -> Shape {
        let mut req = vec![0u64; self.d];
        let mut missing = None;
        for (name, v) in r.iter() {
            match self.dims.binary_search_by(|d| d.as_str().cmp(name)) {
                Ok(k) => req[k] = v,
                Err(_) if v > 0 => missing = Some(name.to_string()),
                Err(_) => {}
            }
        }
        Shape { req, missing }
    }

    /// Node `n`'s free resources, per dimension.
    #[inline]
    pub fn free_of(&self, n: NodeIdx) -> &[u64] {
        &self.free[n.ix() * self.d..(n.ix() + 1) * self.d]
    }

    /// Whether one task of shape `s` fits in node `n`'s free resources now.
    #[inline]
    pub fn fits(&self, n: NodeIdx, s: &Shape) -> bool {
        if s.missing.is_some() {
            return false;
        }
        let f = &self.free[n.ix() * self.d..(n.ix() + 1) * self.d];
        f.iter().zip(&s.req).all(|(f, r)| r <= f)
    }

    /// How many tasks of shape `s` fit on node `n` right now (capped for empty shapes).
    #[inline]
    pub fn fit_count(&self, n: NodeIdx, s: &Shape) -> u64 {
        if s.missing.is_some() {
            return 0;
        }
        self.fit_count_req(n, &s.req)
    }

    #[inline]
    fn fit_count_req(&self, n: NodeIdx, req: &[u64]) -> u64 {
        let f = &self.free[n.ix() * self.d..(n.ix() + 1) * self.d];
        f.iter()
            .zip(req)
            .filter(|(_, r)| **r > 0)
            .map(|(f, r)| f / r)
            .min()
            .unwrap_or(u32::MAX as u64)
    }

    /// Would this shape fit on the empty node (is the node big enough at all)?
    pub fn fits_empty(&self, n: NodeIdx, s: &Shape) -> bool {
        s.missing.is_none()
            && self.alloc[n.ix() * self.d..(n.ix() + 1) * self.d]
                .iter()
                .zip(&s.req)
                .all(|(a, r)| r <= a)
    }

    /// Takes a task of shape `s` on node `n`: node free capacity, HyperNode use and the
    /// counted shapes all follow.
    pub(in crate::cache) fn take(&mut self, index: &TopologyIndex, n: NodeIdx, s: &Shape) {
        self.apply(index, n, &s.req, true);
    }

    /// Gives back what `take` took.
    pub(in crate::cache) fn give(&mut self, index: &TopologyIndex, n: NodeIdx, s: &Shape) {
        self.apply(index, n, &s.req, false);
    }

    fn apply(&mut self, index: &TopologyIndex, n: NodeIdx, req: &[u64], take: bool) {
        let d = self.d;
        let hns = &index.groups[index.node_group[n.ix()].ix()].hyper_nodes;
        for (k, &r) in req.iter().enumerate().take(d) {
            let i = n.ix() * d + k;
            let old_free = self.free[i];
            // Saturating only against a give that was never taken (a bug the tests'
            // cache check would report), never against a node's own shrinking.
            self.used[i] = if take {
                self.used[i].saturating_add(r)
            } else {
                self.used[i].saturating_sub(r)
            };
            let new_free = self.alloc[i].saturating_sub(self.used[i]);
            self.free[i] = new_free;
            // The node's share of its HyperNodes' use moves by what its free room moved.
            for &h in hns {
                let u = &mut self.hn_used[h.ix() * d + k];
                *u = if take {
                    u.saturating_add(old_free - new_free)
                } else {
                    u.saturating_sub(new_free - old_free)
                };
            }
        }
        let mut after = [0u64; MAX_COUNTED_SHAPES];
        for (a, c) in after.iter_mut().zip(&self.counted) {
            *a = self.fit_count_req(n, &c.req);
        }
        for (c, &new) in self.counted.iter_mut().zip(&after) {
            let Some(slot) = c.per_node.get_mut(n.ix()) else {
                continue;
            };
            let old = std::mem::replace(slot, new);
            if new != old {
                for &h in hns {
                    c.per_hn[h.ix()] = c.per_hn[h.ix()].saturating_sub(old).saturating_add(new);
                }
            }
        }
    }

    /// Per HyperNode: how many tasks of `s` fit in it right now, from the counted
    /// shapes when this one is counted (it is counted from its first use on).
    pub fn room_per_hn(&mut self, index: &TopologyIndex, s: &Shape) -> Vec<u64> {
        if s.missing.is_some() {
            return vec![0; index.hns.len()];
        }
        self.uses += 1;
        let stamp = self.uses;
        if let Some(c) = self.counted.iter_mut().find(|c| c.req == s.req) {
            c.last_use = stamp;
            return c.per_hn.clone();
        }
        let per_node: Vec<u64> = (0..self.free.len() / self.d.max(1))
            .map(|n| self.fit_count(NodeIdx(n as u32), s))
            .collect();
        let per_hn = self.fit_counts_per_hn(index, s);
        let counted = Counted {
            req: s.req.clone(),
            per_hn: per_hn.clone(),
            per_node,
            last_use: stamp,
        };
        if self.counted.len() < MAX_COUNTED_SHAPES {
            self.counted.push(counted);
        } else if let Some(oldest) = self.counted.iter_mut().min_by_key(|c| c.last_use) {
            // The cache lives as long as the topology: shapes of jobs long gone make
            // room for the ones asked for now.
            *oldest = counted;
        }
        per_hn
    }

    /// How many tasks of `s` fit in HyperNode `h` right now, when `s` is counted (after
    /// [`room_per_hn`](Self::room_per_hn) asked for it): one read, no copy, for checks
    /// repeated as the room of a few nodes changes.
    pub fn counted_room(&self, h: HnIdx, s: &Shape) -> Option<u64> {
        if s.missing.is_some() {
            return Some(0);
        }
        self.counted
            .iter()
            .find(|c| c.req == s.req)
            .and_then(|c| c.per_hn.get(h.ix()).copied())
    }

    /// HyperNode `h`'s used resources, one value per dimension.
    pub fn hn_used(&self, h: HnIdx) -> &[u64] {
        &self.hn_used[h.ix() * self.d..(h.ix() + 1) * self.d]
    }

    /// HyperNode `h`'s allocatable resources, one value per dimension.
    pub fn hn_alloc(&self, h: HnIdx) -> &[u64] {
        &self.hn_alloc[h.ix() * self.d..(h.ix() + 1) * self.d]
    }

    /// Per HyperNode: how many tasks of `s` fit in it right now (Σ over its nodes).
    /// This is the exact, live pruning bound of §11.2.
    pub fn fit_counts_per_hn(&self, index: &TopologyIndex, s: &Shape) -> Vec<u64> {
        let mut per_group = vec![0u64; index.groups.len()];
        for (g, group) in index.groups.iter().enumerate() {
            per_group[g] = group
                .nodes
                .iter()
                .map(|&n| self.fit_count(n, s))
                .fold(0u64, u64::saturating_add);
        }
        let mut per_hn = vec![0u64; index.hns.len()];
        for (g, group) in index.groups.iter().enumerate() {
            for &h in &group.hyper_nodes {
                per_hn[h.ix()] = per_hn[h.ix()].saturating_add(per_group[g]);
            }
        }
        per_hn
    }

    /// Where this cache differs from `fresh`, one that was just built from the nodes and
    /// the running tasks (empty when they agree); the counted shapes are checked against
    /// a recount.
    pub fn diff(&self, fresh: &Capacity, index: &TopologyIndex) -> Vec<String> {
        let mut bad = Vec::new();
        if self.dims != fresh.dims {
            bad.push(format!("dimensions {:?}, fresh {:?}", self.dims, fresh.dims));
            return bad;
        }
        let d = self.d.max(1);
        let mut per_entry = |what: &str, mine: &[u64], theirs: &[u64], name: &dyn Fn(usize) -> String| {
            if mine.len() != theirs.len() {
                bad.push(format!("{what}: {} entries, fresh {}", mine.len(), theirs.len()));
                return;
            }
            if let Some(i) = (0..mine.len()).find(|&i| mine[i] != theirs[i]) {
                bad.push(format!(
                    "{what} of {} ({}): {}, fresh {}",
                    name(i / d),
                    self.dims[i % d],
                    mine[i],
                    theirs[i]
                ));
            }
        };
        let node = |i: usize| index.node_names.get(i).cloned().unwrap_or_default();
        let hn = |i: usize| index.hns.get(i).map(|h| h.name.clone()).unwrap_or_default();
        per_entry("allocatable", &self.alloc, &fresh.alloc, &node);
        per_entry("used", &self.used, &fresh.used, &node);
        per_entry("free", &self.free, &fresh.free, &node);
        per_entry("HyperNode allocatable", &self.hn_alloc, &fresh.hn_alloc, &hn);
        per_entry("HyperNode used", &self.hn_used, &fresh.hn_used, &hn);
        for c in &self.counted {
            let shape = Shape {
                req: c.req.clone(),
                missing: None,
            };
            let per_node: Vec<u64> = (0..fresh.free.len() / fresh.d.max(1))
                .map(|n| fresh.fit_count(NodeIdx(n as u32), &shape))
                .collect();
            if c.per_hn != fresh.fit_counts_per_hn(index, &shape) || c.per_node != per_node {
                bad.push(format!("counted room of {} is stale", self.describe(&shape)));
            }
        }
        bad
    }

    /// Human form of a shape: `cpu=16, memory=128Gi, nvidia.com/gpu=8`.
    pub fn describe(&self, s: &Shape) -> String {
        let mut r = Resources::new();
        for (k, v) in s.req.iter().enumerate() {
            if *v > 0 {
                r.0.insert(self.dims[k].clone(), *v);
            }
        }
        if let Some(m) = &s.missing {
            r.0.insert(m.clone(), 1);
        }
        r.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{ClusterBuilder, JobBuilder, res};

    /// A whole gang needs the sum of its tasks; a smaller one that many of its smallest
    /// task; a resource no node has, nothing fits.
    #[test]
    #[allow(clippy::unwrap_used)]
    fn gang_need_sums_a_whole_gang_and_counts_the_smallest_task_of_a_partial_one() {
        let (_, cap) = ClusterBuilder::fat_tree(&[2], 2)
            .node_resources("cpu=8,nvidia.com/gpu=4")
            .build_index();
        let gpu = cap.dims.iter().position(|d| d == "nvidia.com/gpu").unwrap();
        let cpu = cap.dims.iter().position(|d| d == "cpu").unwrap();
        let job = JobBuilder::gang("j", 2, "cpu=2,nvidia.com/gpu=1")
            .task("ps", 1, "cpu=3")
            .build();
        let whole = cap.gang_need(&job, 3).unwrap();
        assert_eq!((whole[cpu], whole[gpu]), (7000, 2), "cpu in millicores");
        let partial = cap.gang_need(&job, 2).unwrap();
        assert_eq!((partial[cpu], partial[gpu]), (4000, 0));
        let odd = JobBuilder::gang("k", 1, "cpu=1,example.com/fpga=1").build();
        assert_eq!(cap.gang_need(&odd, 1), None);
    }

    /// The counted shapes, kept by take/give, always equal a fresh count.
    #[test]
    fn counted_shapes_follow_take_and_give() {
        let (index, mut cap) = ClusterBuilder::fat_tree(&[3, 2], 2)
            .node_resources("cpu=8,nvidia.com/gpu=4")
            .build_index();
        let shapes = [
            cap.shape(&res("cpu=2,nvidia.com/gpu=1")),
            cap.shape(&res("cpu=3")),
            cap.shape(&res("cpu=1")),
        ];
        for s in &shapes[..2] {
            cap.room_per_hn(&index, s);
        }
        let mut taken: Vec<(NodeIdx, usize)> = Vec::new();
        let mut rng = fastrand_like(7);
        for step in 0..400 {
            if step % 3 == 2 && !taken.is_empty() {
                let (n, s) = taken.swap_remove(rng() as usize % taken.len());
                cap.give(&index, n, &shapes[s]);
            } else {
                let n = NodeIdx((rng() % index.node_count() as u64) as u32);
                let s = (rng() % 3) as usize;
                if cap.fits(n, &shapes[s]) {
                    cap.take(&index, n, &shapes[s]);
                    taken.push((n, s));
                }
            }
            for s in &shapes {
                assert_eq!(
                    cap.room_per_hn(&index, s),
                    cap.fit_counts_per_hn(&index, s),
                    "step {step}"
                );
            }
        }
    }

    /// More shapes than are kept: the least recently asked for make room, and every
    /// answer, counted or not, equals a fresh count while tasks are taken.
    #[test]
    fn counted_shapes_beyond_the_limit_stay_exact() {
        let (index, mut cap) = ClusterBuilder::fat_tree(&[3, 2], 2)
            .node_resources("cpu=64")
            .build_index();
        let shapes: Vec<Shape> = (1..=40).map(|c| cap.shape(&res(&format!("cpu={c}")))).collect();
        for round in 0..3 {
            for (i, s) in shapes.iter().enumerate() {
                let n = NodeIdx(((i + round) % index.node_count()) as u32);
                if cap.fits(n, s) {
                    cap.take(&index, n, s);
                }
                for t in std::iter::once(s).chain(&shapes[..i.min(4)]) {
                    assert_eq!(cap.room_per_hn(&index, t), cap.fit_counts_per_hn(&index, t));
                }
                assert!(cap.counted.len() <= MAX_COUNTED_SHAPES);
            }
        }
    }

    /// A tiny deterministic generator (xorshift) so the test needs no extra crate.
    fn fastrand_like(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }
}
