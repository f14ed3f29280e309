//! The resource cache: allocatable and free capacity per node and per HyperNode as dense
//! vectors over resource dimensions. The allocator takes from it as it places tasks and
//! gives back on discard, so every decision within a tick sees live values.

use bevy_ecs::prelude::Resource;
use hyperplan_shared::Resources;

use super::ids::{HnIdx, NodeIdx};
use super::topology::TopologyIndex;

/// A task's request over the cache's dimensions.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    pub req: Vec<u64>,
    /// A requested resource no node offers (the task can never run).
    pub missing: Option<String>,
}

impl Shape {
    pub fn is_zero(&self) -> bool {
        self.missing.is_none() && self.req.iter().all(|v| *v == 0)
    }
}

#[derive(Clone, Debug, Default, Resource)]
pub struct Capacity {
    /// Resource names, sorted; position = dimension.
    pub dims: Vec<String>,
    pub d: usize,
    pub alloc: Vec<u64>,
    pub free: Vec<u64>,
    pub hn_alloc: Vec<u64>,
    pub hn_used: Vec<u64>,
    /// Per task shape (request vector): how many fit in each HyperNode, kept current by
    /// `take`/`give`, so each job does not rescan every node. Only a few shapes are kept.
    counted: Vec<(Vec<u64>, Vec<u64>)>,
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
        let mut free = vec![0u64; n * d];
        for (i, (a, used)) in per_node.iter().enumerate() {
            for (k, name) in dims.iter().enumerate() {
                let av = a.get(name);
                alloc[i * d + k] = av;
                free[i * d + k] = av.saturating_sub(used.get(name));
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
            dims,
            d,
            alloc,
            free,
            hn_alloc,
            hn_used,
            counted: Vec::new(),
        }
    }

    /// The same cluster with nothing running: for "could this ever run?" checks.
    pub fn emptied(&self) -> Self {
        let mut c = self.clone();
        c.free.clone_from(&c.alloc);
        c.hn_used.iter_mut().for_each(|v| *v = 0);
        c.counted.clear();
        c
    }

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
    pub fn take(&mut self, index: &TopologyIndex, n: NodeIdx, s: &Shape) {
        self.apply(index, n, s, true);
    }

    /// Gives back what `take` took.
    pub fn give(&mut self, index: &TopologyIndex, n: NodeIdx, s: &Shape) {
        self.apply(index, n, s, false);
    }

    fn apply(&mut self, index: &TopologyIndex, n: NodeIdx, s: &Shape, take: bool) {
        let d = self.d;
        let before: Vec<u64> = self.counted.iter().map(|(req, _)| self.fit_count_req(n, req)).collect();
        for k in 0..d {
            let f = &mut self.free[n.ix() * d + k];
            // Saturating: a node shrunk under running tasks must not wrap around.
            *f = if take {
                f.saturating_sub(s.req[k])
            } else {
                f.saturating_add(s.req[k])
            };
        }
        let hns = &index.groups[index.node_group[n.ix()].ix()].hyper_nodes;
        for &h in hns {
            for k in 0..d {
                let u = &mut self.hn_used[h.ix() * d + k];
                *u = if take {
                    u.saturating_add(s.req[k])
                } else {
                    u.saturating_sub(s.req[k])
                };
            }
        }
        for (i, old) in before.into_iter().enumerate() {
            let new = self.fit_count_req(n, &self.counted[i].0);
            if new != old {
                let per_hn = &mut self.counted[i].1;
                for &h in hns {
                    per_hn[h.ix()] = per_hn[h.ix()].saturating_sub(old).saturating_add(new);
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
        if let Some((_, per_hn)) = self.counted.iter().find(|(req, _)| *req == s.req) {
            return per_hn.clone();
        }
        let per_hn = self.fit_counts_per_hn(index, s);
        if self.counted.len() < MAX_COUNTED_SHAPES {
            self.counted.push((s.req.clone(), per_hn.clone()));
        }
        per_hn
    }

    pub fn hn_used(&self, h: HnIdx) -> &[u64] {
        &self.hn_used[h.ix() * self.d..(h.ix() + 1) * self.d]
    }

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

/// The resource-cache system: free capacity per node and HyperNode from the nodes and
/// the tasks that hold resources now, so no value is stale from an earlier tick. The
/// part that comes from the nodes alone is kept until the topology changes.
pub fn refresh_capacity(
    index: bevy_ecs::prelude::Res<TopologyIndex>,
    mut cap: bevy_ecs::prelude::ResMut<Capacity>,
    mut base: bevy_ecs::prelude::Local<Option<(u64, Capacity)>>,
    nodes: bevy_ecs::prelude::Query<&super::components::Node>,
    tasks: bevy_ecs::prelude::Query<(&super::components::Task, &super::components::TaskState)>,
    slots: bevy_ecs::prelude::Query<&super::components::NodeSlot>,
) {
    let _span = tracing::info_span!("resource_cache").entered();
    if base
        .as_ref()
        .is_none_or(|(generation, _)| *generation != index.generation)
    {
        let per_node: Vec<(&Resources, &Resources)> = index
            .node_entities
            .iter()
            .map(|&e| match nodes.get(e) {
                // A node that is not ready offers nothing: all of it counts as used.
                Ok(n) if !n.ready => (&n.allocatable, &n.allocatable),
                Ok(n) => (&n.allocatable, &n.external_used),
                Err(_) => (&EMPTY, &EMPTY),
            })
            .collect();
        *base = Some((index.generation, Capacity::build(&index, &per_node)));
    }
    let Some((_, fresh)) = base.as_ref() else { return };
    let mut c = fresh.clone();
    for (task, ts) in &tasks {
        if !ts.is_running() {
            continue;
        }
        if let Some(slot) = ts.node.and_then(|n| slots.get(n).ok()) {
            let shape = c.shape(&task.request);
            c.take(&index, slot.0, &shape);
        }
    }
    *cap = c;
}

static EMPTY: Resources = Resources(std::collections::BTreeMap::new());

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{ClusterBuilder, res};

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
