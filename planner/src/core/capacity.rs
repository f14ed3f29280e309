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
}

impl Capacity {
    /// `per_node[i]` = (allocatable, used) of node `NodeIdx(i)`.
    pub fn build(index: &TopologyIndex, per_node: &[(&Resources, Resources)]) -> Self {
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
        }
    }

    /// The same cluster with nothing running: for "could this ever run?" checks.
    pub fn emptied(&self) -> Self {
        let mut c = self.clone();
        c.free.clone_from(&c.alloc);
        c.hn_used.iter_mut().for_each(|v| *v = 0);
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
        let f = &self.free[n.ix() * self.d..(n.ix() + 1) * self.d];
        f.iter()
            .zip(&s.req)
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

    pub fn take(&mut self, index: &TopologyIndex, n: NodeIdx, s: &Shape) {
        let d = self.d;
        for k in 0..d {
            self.free[n.ix() * d + k] -= s.req[k];
        }
        for &h in &index.groups[index.node_group[n.ix()].ix()].hyper_nodes {
            for k in 0..d {
                self.hn_used[h.ix() * d + k] += s.req[k];
            }
        }
    }

    pub fn give(&mut self, index: &TopologyIndex, n: NodeIdx, s: &Shape) {
        let d = self.d;
        for k in 0..d {
            self.free[n.ix() * d + k] += s.req[k];
        }
        for &h in &index.groups[index.node_group[n.ix()].ix()].hyper_nodes {
            for k in 0..d {
                self.hn_used[h.ix() * d + k] -= s.req[k];
            }
        }
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
/// the tasks that hold resources now, so no value is stale from an earlier tick.
pub fn refresh_capacity(
    index: bevy_ecs::prelude::Res<TopologyIndex>,
    mut cap: bevy_ecs::prelude::ResMut<Capacity>,
    nodes: bevy_ecs::prelude::Query<&super::components::Node>,
    tasks: bevy_ecs::prelude::Query<(&super::components::Task, &super::components::TaskState)>,
    slots: bevy_ecs::prelude::Query<&super::components::NodeSlot>,
) {
    let _span = tracing::info_span!("resource_cache").entered();
    let mut per_node: Vec<(&Resources, Resources)> = Vec::with_capacity(index.node_count());
    for &e in &index.node_entities {
        match nodes.get(e) {
            Ok(n) => per_node.push((&n.allocatable, n.external_used.clone())),
            Err(_) => per_node.push((&EMPTY, Resources::new())),
        }
    }
    for (task, ts) in &tasks {
        if !ts.is_running() {
            continue;
        }
        if let Some(slot) = ts.node.and_then(|n| slots.get(n).ok()) {
            per_node[slot.0.ix()].1.add(&task.request);
        }
    }
    *cap = Capacity::build(&index, &per_node);
}

static EMPTY: Resources = Resources(std::collections::BTreeMap::new());
