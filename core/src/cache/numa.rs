//! The NUMA half of the resource cache: per node (dense index) its hardware and what is
//! free on each NUMA node — PUs, memory, GPUs — after the running tasks' assignments. The
//! allocator takes from it as it places tasks and gives back on rollback, exactly like
//! `Capacity`, so nothing is handed out twice within a tick or across ticks. Like
//! `Capacity` it lives across ticks and follows the ledger of `holdings`.

use std::sync::Arc;

use bevy_ecs::prelude::*;
use fixedbitset::FixedBitSet;

use crate::model::ids::{GroupIdx, NodeIdx};
use crate::numa::NumaFree;
use crate::numa::assign::{self, AssignError, Assignment, TaskNuma};
use crate::numa::node::NodeNuma;
use crate::topology::TopologyIndex;

/// Per node (by `NodeIdx`): its hardware and what is free on it now.
#[derive(Clone, Debug, Default, Resource)]
pub struct NumaState {
    /// By `NodeIdx`.
    nodes: Vec<Option<Arc<NodeNuma>>>,
    /// By `NodeIdx`; `None` = never taken from. A node's buffer stays once made, so
    /// a node that runs task after task does not allocate for each.
    free: Vec<Option<NumaFree>>,
    /// By `NodeIdx`: everything is free (most nodes, most of the time); its buffer, if
    /// any, equals the hardware's `all_free`.
    idle: FixedBitSet,
    /// By group (`TopologyIndex::groups`): one node of each hardware kind in it, so the
    /// narrowest span a group can offer is known without scanning its nodes.
    kinds: Vec<Vec<NodeIdx>>,
    generation: Option<u64>,
    /// Assignments on empty nodes by (hardware, request): every empty node of one kind
    /// gives the same answer, so a job of many whole-node tasks computes it once and its
    /// tasks share it. At most `EMPTY_MEMO` entries (the hardware is held, so its address
    /// stays its own).
    empty: Vec<(Arc<NodeNuma>, TaskNuma, Arc<Assignment>)>,
    empty_next: usize,
}

const EMPTY_MEMO: usize = 16;

/// `NumaState::ideal_span`'s memo: ((role, hardware), span).
#[derive(Debug, Default)]
pub struct IdealSpans(Vec<((usize, usize), u32)>);

impl NumaState {
    /// The topology index generation the state was built for.
    pub fn generation(&self) -> Option<u64> {
        self.generation
    }

    /// Node `n`'s hardware; `None` when it has no `NodeHardware` or `n` is out of range.
    pub fn node(&self, n: NodeIdx) -> Option<&Arc<NodeNuma>> {
        self.nodes.get(n.ix()).and_then(Option::as_ref)
    }

    /// What is free on node `n` now.
    pub fn free(&self, n: NodeIdx) -> Option<&NumaFree> {
        let hw = self.node(n)?;
        if self.idle.contains(n.ix()) {
            return Some(&hw.all_free);
        }
        Some(self.free.get(n.ix()).and_then(Option::as_ref).unwrap_or(&hw.all_free))
    }

    /// Admits `task` on node `n` and picks its PUs, memory and GPUs (nothing is taken).
    pub fn assign(&self, n: NodeIdx, task: &TaskNuma) -> Result<Assignment, AssignError> {
        let (Some(hw), Some(free)) = (self.node(n), self.free(n)) else {
            return Err(AssignError::NoHardware);
        };
        assign::assign(&hw.machine, free, task)
    }

    /// As [`NumaState::assign`], shared: on an empty node the answer for its kind of
    /// hardware and this request is worked out once (see `empty`).
    pub fn assign_shared(&mut self, n: NodeIdx, task: &TaskNuma) -> Result<Arc<Assignment>, AssignError> {
        let Some(hw) = self.node(n).filter(|_| self.idle.contains(n.ix())).cloned() else {
            return self.assign(n, task).map(Arc::new);
        };
        if let Some((_, _, a)) = self.empty.iter().find(|(h, t, _)| Arc::ptr_eq(h, &hw) && t == task) {
            return Ok(a.clone());
        }
        let a = Arc::new(assign::assign(&hw.machine, &hw.all_free, task)?);
        let entry = (hw, *task, a.clone());
        if self.empty.len() < EMPTY_MEMO {
            self.empty.push(entry);
        } else {
            self.empty[self.empty_next % EMPTY_MEMO] = entry;
            self.empty_next = self.empty_next.wrapping_add(1);
        }
        Ok(a)
    }

    /// The fewest NUMA nodes `task` spans on an empty node of group `g`, over the
    /// group's hardware kinds: with mixed machines in a group, the first fit may be a
    /// kind where the task spans more than on another.
    pub fn group_ideal_span(&self, g: GroupIdx, task: &TaskNuma, role: usize, cache: &mut IdealSpans) -> u32 {
        self.kinds
            .get(g.ix())
            .into_iter()
            .flatten()
            .map(|&n| self.ideal_span(n, task, role, cache))
            .min()
            .unwrap_or(0)
    }

    /// NUMA nodes `task` spans on node `n` when it is empty: the best any node of that
    /// hardware can do (`u32::MAX` if it never fits, 0 without hardware). Cached per
    /// (role, hardware) in `cache`: a list, since a cluster has a handful of machine kinds
    /// and a search asks per task.
    pub fn ideal_span(&self, n: NodeIdx, task: &TaskNuma, role: usize, cache: &mut IdealSpans) -> u32 {
        let Some(hw) = self.node(n) else { return 0 };
        let key = (role, Arc::as_ptr(hw) as usize);
        if let Some(&(_, span)) = cache.0.iter().find(|(k, _)| *k == key) {
            return span;
        }
        let span = assign::assign(&hw.machine, &hw.all_free, task).map_or(u32::MAX, |a| a.numa.count());
        cache.0.push((key, span));
        span
    }

    /// Takes assignment `a` out of node `n`'s free state.
    pub(in crate::cache) fn take(&mut self, n: NodeIdx, a: &Assignment) {
        if let Some(free) = self.free_mut(n) {
            assign::apply(free, a);
        }
        self.idle.set(n.ix(), false);
    }

    /// Gives assignment `a` back to node `n`'s free state.
    pub(in crate::cache) fn give(&mut self, n: NodeIdx, a: &Assignment) {
        if let Some(free) = self.free_mut(n) {
            assign::release(free, a);
        }
        // Empty again: idle (the shared answers of `assign_shared`).
        if let (Some(Some(hw)), Some(Some(f))) = (self.nodes.get(n.ix()), self.free.get(n.ix())) {
            let idle = *f == hw.all_free;
            self.idle.set(n.ix(), idle);
        }
    }

    fn free_mut(&mut self, n: NodeIdx) -> Option<&mut NumaFree> {
        let hw = self.nodes.get(n.ix())?.as_ref()?;
        let slot = self.free.get_mut(n.ix())?;
        Some(slot.get_or_insert_with(|| hw.all_free.clone()))
    }

    /// The same nodes with nothing assigned: for "could this ever run?" checks.
    pub fn emptied(&self) -> Self {
        Self {
            nodes: self.nodes.clone(),
            free: vec![None; self.nodes.len()],
            idle: all_idle(self.nodes.len()),
            kinds: self.kinds.clone(),
            generation: self.generation,
            empty: self.empty.clone(),
            empty_next: self.empty_next,
        }
    }

    /// Node hardware by dense index for `index`, everything free.
    pub fn build(index: &TopologyIndex, hardware: impl Fn(Entity) -> Option<Arc<NodeNuma>>) -> Self {
        let nodes: Vec<Option<Arc<NodeNuma>>> = index.node_entities.iter().map(|&e| hardware(e)).collect();
        let kinds = index
            .groups
            .iter()
            .map(|g| {
                let mut seen: Vec<(usize, NodeIdx)> = Vec::new();
                for &n in &g.nodes {
                    if let Some(hw) = nodes.get(n.ix()).and_then(Option::as_ref) {
                        let key = Arc::as_ptr(hw) as usize;
                        if !seen.iter().any(|(k, _)| *k == key) {
                            seen.push((key, n));
                        }
                    }
                }
                seen.into_iter().map(|(_, n)| n).collect()
            })
            .collect();
        Self {
            free: vec![None; nodes.len()],
            idle: all_idle(nodes.len()),
            nodes,
            kinds,
            generation: Some(index.generation),
            empty: Vec::new(),
            empty_next: 0,
        }
    }

    /// Where this state differs from `fresh`, one just built from the running tasks'
    /// assignments (empty when they agree).
    pub fn diff(&self, fresh: &NumaState, index: &TopologyIndex) -> Vec<String> {
        if self.nodes.len() != fresh.nodes.len() {
            return vec![format!(
                "NUMA state of {} nodes, fresh {}",
                self.nodes.len(),
                fresh.nodes.len()
            )];
        }
        (0..self.nodes.len())
            .map(|i| NodeIdx(i as u32))
            .filter(|&n| self.free(n) != fresh.free(n))
            .map(|n| {
                let name = index.node_names.get(n.ix()).map_or("?", String::as_str);
                format!(
                    "NUMA free state of {name}: {:?}, fresh {:?}",
                    self.free(n),
                    fresh.free(n)
                )
            })
            .collect()
    }
}

fn all_idle(nodes: usize) -> FixedBitSet {
    let mut idle = FixedBitSet::with_capacity(nodes);
    idle.insert_range(..);
    idle
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::numa::cpus::CpuPlacement;
    use crate::numa::hints::Policy;
    use crate::testing::{ClusterBuilder, MachineBuilder};

    fn task(cpus: usize) -> TaskNuma {
        TaskNuma {
            policy: Policy::BestEffort,
            cpus,
            memory: 1 << 30,
            gpus: 0,
            placement: CpuPlacement::Packed,
            full_cores: false,
        }
    }

    #[test]
    fn empty_nodes_share_one_answer_and_a_used_node_gets_its_own() {
        let (index, _) = ClusterBuilder::flat(3).build_index();
        let hw = Arc::new(NodeNuma::from_topology(&MachineBuilder::new(2, 1, 8, 1).build()));
        let mut state = NumaState::build(&index, |_| Some(hw.clone()));
        let (n0, n1) = (NodeIdx(0), NodeIdx(1));
        let a = state.assign_shared(n0, &task(4)).unwrap();
        let b = state.assign_shared(n1, &task(4)).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "two empty nodes of one kind: one answer");
        assert_eq!(*a, state.assign(n0, &task(4)).unwrap());

        // Once n0 holds a task, its next answer is worked out from what is left.
        state.take(n0, &a);
        let c = state.assign_shared(n0, &task(4)).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        assert!(a.pus.iter().all(|p| !c.pus.contains(p)), "{a:?} and {c:?} share PUs");
        // Given back, it is idle again and served from the shared answer.
        state.give(n0, &a);
        assert_eq!(state.free(n0), Some(&hw.all_free));
        assert!(Arc::ptr_eq(&state.assign_shared(n0, &task(4)).unwrap(), &a));
        // Another request is another answer.
        assert_eq!(state.assign_shared(n1, &task(6)).unwrap().pus.len(), 6);
    }
}
