//! The ledger of what every running task holds in the resource caches (`Capacity` and
//! `NumaState`): its node, its request and its NUMA assignment, as they were taken. With
//! it the caches live across ticks: a tick gives back exactly what the tasks that stopped
//! running held and takes for the tasks that started, so its cost follows the tick's
//! events (placements, finished and cancelled tasks), not the cluster's size. The caches
//! and the ledger are built afresh only when the topology index is (node changes,
//! readiness, HyperNodes).

use std::sync::Arc;

use bevy_ecs::prelude::*;
use hyperplan_shared::Resources;

use crate::cache::capacity::{Capacity, Shape};
use crate::model::components::{NodeSlot, Task, TaskState};
use crate::model::ids::NodeIdx;
use crate::numa::assign::Assignment;
use crate::topology::TopologyIndex;

/// What one running task holds.
#[derive(Clone, Debug)]
pub struct Held {
    /// The node it runs on, in the current topology generation.
    pub node: NodeIdx,
    /// Shared by the tasks of a role placed together (see `ShapeMemo`).
    pub shape: Arc<Shape>,
    /// Its pinned PUs, memory and GPUs; `None` when it has no NUMA assignment.
    pub numa: Option<Arc<Assignment>>,
}

/// A take or give of the NUMA cache, done by `refresh_capacity` for `refresh_numa` to
/// follow in the same tick.
#[derive(Clone, Debug)]
pub enum NumaChange {
    /// Take the assignment from the node's free state.
    Take(NodeIdx, Arc<Assignment>),
    /// Give the assignment back to the node's free state.
    Give(NodeIdx, Arc<Assignment>),
}

/// The ledger: what each running task holds, and the NUMA changes not yet applied.
#[derive(Debug, Default, Resource)]
pub struct Holdings {
    /// The topology generation the node indices belong to; `None` before the first build.
    pub generation: Option<u64>,
    /// By task entity. Iterated only to rebuild the caches, where the order of takes
    /// does not matter, so hashing decides nothing.
    held: bevy_ecs::entity::EntityHashMap<Held>,
    numa_changes: Vec<NumaChange>,
    /// Closed nodes (not ready, drained, running strays, or strained) and the room their
    /// closing holds: all they offer beyond work outside hyperplan. Given back when one
    /// opens without a rebuild (`cache::refresh`).
    pub closed: std::collections::BTreeMap<NodeIdx, Shape>,
}

impl Holdings {
    /// What `task` holds; `None` when it holds nothing.
    pub fn get(&self, task: Entity) -> Option<&Held> {
        self.held.get(&task)
    }

    /// Number of tasks holding resources.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// No task holds anything.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Every task and what it holds, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (Entity, &Held)> {
        self.held.iter().map(|(e, h)| (*e, h))
    }

    /// Starts over for a new topology generation: nothing held.
    pub fn reset(&mut self, generation: u64) {
        self.generation = Some(generation);
        self.held.clear();
        self.numa_changes.clear();
        self.closed.clear();
    }

    /// Records a task whose resources are already taken from both caches (the allocator
    /// took them as it placed the task).
    pub fn record(&mut self, task: Entity, held: Held) {
        self.held.insert(task, held);
    }

    /// Takes `held` from the capacity cache (and, through `refresh_numa`, the NUMA cache)
    /// and records it.
    pub fn take(&mut self, cap: &mut Capacity, index: &TopologyIndex, task: Entity, held: Held) {
        cap.take(index, held.node, &held.shape);
        if let Some(a) = &held.numa {
            self.numa_changes.push(NumaChange::Take(held.node, a.clone()));
        }
        self.held.insert(task, held);
    }

    /// Gives back what `task` held, if anything; whether it held something.
    pub fn give(&mut self, cap: &mut Capacity, index: &TopologyIndex, task: Entity) -> bool {
        let Some(held) = self.held.remove(&task) else {
            return false;
        };
        cap.give(index, held.node, &held.shape);
        if let Some(a) = held.numa {
            self.numa_changes.push(NumaChange::Give(held.node, a));
        }
        true
    }

    /// The NUMA takes and gives since the last call.
    pub fn drain_numa_changes(&mut self) -> std::vec::Drain<'_, NumaChange> {
        self.numa_changes.drain(..)
    }
}

/// The node a task holds resources on now: running, on a node of the current index.
pub fn running_on(ts: &TaskState, slots: &Query<&NodeSlot>) -> Option<NodeIdx> {
    if !ts.is_running() {
        return None;
    }
    ts.node.and_then(|n| slots.get(n).ok()).map(|s| s.0)
}

/// The last request's shape. A role's replicas share one request (`Task::request`), so a
/// burst of placements of one job turns each role's resource names into dimensions once.
#[derive(Default)]
pub struct ShapeMemo(Option<(Arc<Resources>, Arc<Shape>)>);

impl ShapeMemo {
    /// The shape of `r`: the memoized one when `r` is the same `Arc` as last time.
    pub fn shape(&mut self, cap: &Capacity, r: &Arc<Resources>) -> Arc<Shape> {
        match &self.0 {
            Some((last, s)) if Arc::ptr_eq(last, r) => s.clone(),
            _ => {
                let s = Arc::new(cap.shape(r));
                self.0 = Some((r.clone(), s.clone()));
                s
            }
        }
    }
}

/// What a task on `node` holds, in the cache's dimensions.
pub fn held_by(cap: &Capacity, memo: &mut ShapeMemo, node: NodeIdx, task: &Task, ts: &TaskState) -> Held {
    Held {
        node,
        shape: memo.shape(cap, &task.request),
        numa: ts.numa.clone(),
    }
}
