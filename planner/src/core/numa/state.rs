//! The NUMA half of the resource cache: per node (dense index) its hardware and what is
//! free on each NUMA node — PUs, memory, GPUs — after the running tasks' assignments. The
//! allocator takes from it as it places tasks and gives back on rollback, exactly like
//! `Capacity`, so nothing is handed out twice within a tick or across ticks.

use std::sync::Arc;

use bevy_ecs::prelude::*;

use super::NumaFree;
use super::assign::{self, Assignment, TaskNuma};
use super::node::{NodeHardware, NodeNuma};
use crate::core::components::{NodeSlot, TaskState};
use crate::core::ids::NodeIdx;
use crate::core::topology::TopologyIndex;

#[derive(Clone, Debug, Default, Resource)]
pub struct NumaState {
    /// By `NodeIdx`.
    nodes: Vec<Option<Arc<NodeNuma>>>,
    /// By `NodeIdx`; `None` = everything free (most nodes, most of the time).
    free: Vec<Option<NumaFree>>,
    /// Nodes whose `free` is `Some`, to reset them cheaply.
    touched: Vec<NodeIdx>,
    generation: Option<u64>,
}

impl NumaState {
    pub fn node(&self, n: NodeIdx) -> Option<&Arc<NodeNuma>> {
        self.nodes.get(n.ix()).and_then(Option::as_ref)
    }

    /// What is free on node `n` now.
    pub fn free(&self, n: NodeIdx) -> Option<&NumaFree> {
        let hw = self.node(n)?;
        Some(self.free.get(n.ix()).and_then(Option::as_ref).unwrap_or(&hw.all_free))
    }

    /// Admits `task` on node `n` and picks its PUs, memory and GPUs (nothing is taken).
    pub fn assign(&self, n: NodeIdx, task: &TaskNuma) -> Result<Assignment, String> {
        let (Some(hw), Some(free)) = (self.node(n), self.free(n)) else {
            return Err("no hardware description".into());
        };
        assign::assign(&hw.machine, free, task)
    }

    /// NUMA nodes `task` spans on node `n` when it is empty: the best any node of that
    /// hardware can do. Cached per (role, hardware) in `cache`.
    pub fn ideal_span(
        &self,
        n: NodeIdx,
        task: &TaskNuma,
        role: usize,
        cache: &mut std::collections::HashMap<(usize, usize), u32>,
    ) -> u32 {
        let Some(hw) = self.node(n) else { return 0 };
        *cache
            .entry((role, Arc::as_ptr(hw) as usize))
            .or_insert_with(|| assign::assign(&hw.machine, &hw.all_free, task).map_or(u32::MAX, |a| a.numa.count()))
    }

    pub fn take(&mut self, n: NodeIdx, a: &Assignment) {
        if let Some(free) = self.free_mut(n) {
            assign::apply(free, a);
        }
    }

    pub fn give(&mut self, n: NodeIdx, a: &Assignment) {
        if let Some(free) = self.free_mut(n) {
            assign::release(free, a);
        }
    }

    fn free_mut(&mut self, n: NodeIdx) -> Option<&mut NumaFree> {
        let hw = self.nodes.get(n.ix())?.as_ref()?;
        let slot = self.free.get_mut(n.ix())?;
        if slot.is_none() {
            *slot = Some(hw.all_free.clone());
            self.touched.push(n);
        }
        slot.as_mut()
    }

    /// The same nodes with nothing assigned: for "could this ever run?" checks.
    pub fn emptied(&self) -> Self {
        Self {
            nodes: self.nodes.clone(),
            free: vec![None; self.nodes.len()],
            touched: Vec::new(),
            generation: self.generation,
        }
    }

    fn reset(&mut self) {
        for n in std::mem::take(&mut self.touched) {
            if let Some(f) = self.free.get_mut(n.ix()) {
                *f = None;
            }
        }
    }
}

/// The NUMA resource-cache system: node hardware by dense index when the topology index
/// changed, then free state = all free minus the assignments of the running tasks (so no
/// value is stale from an earlier tick; cost follows the pinned tasks, not the nodes).
pub fn refresh_numa(
    index: Res<TopologyIndex>,
    mut state: ResMut<NumaState>,
    hardware: Query<&NodeHardware>,
    tasks: Query<&TaskState>,
    slots: Query<&NodeSlot>,
) {
    let _span = tracing::info_span!("numa_cache").entered();
    if state.generation != Some(index.generation) {
        state.nodes = index
            .node_entities
            .iter()
            .map(|&e| hardware.get(e).ok().map(|h| h.0.clone()))
            .collect();
        state.free = vec![None; state.nodes.len()];
        state.touched.clear();
        state.generation = Some(index.generation);
    } else {
        state.reset();
    }
    for ts in &tasks {
        let (true, Some(a), Some(node)) = (ts.is_running(), ts.numa.as_ref(), ts.node) else {
            continue;
        };
        if let Ok(slot) = slots.get(node) {
            state.take(slot.0, a);
        }
    }
}
