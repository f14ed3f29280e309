//! The nodes a preemption freed, held for its job (Kueue lost freed domains to other
//! workloads between cycles; here they cannot be taken). While a job waits for its
//! victims to end, the nodes of its nomination (`StateRecord::nomination`, see `preempt`)
//! are taken whole from the caches for the whole walk, and given back only while that
//! job itself is tried. A nomination goes when its job is placed or cancelled.

use std::sync::Arc;

use bevy_ecs::prelude::Entity;

use crate::cache::capacity::{Capacity, Shape};
use crate::model::ids::NodeIdx;
use crate::topology::TopologyIndex;

/// A held node and what was taken on it (all of it).
type HeldNode = (NodeIdx, Arc<Shape>);

/// Nodes held whole for nominated jobs during one walk.
#[derive(Debug, Default)]
pub struct Holds {
    /// Per nominated job: its held nodes.
    list: Vec<(Entity, Vec<HeldNode>)>,
    /// The job whose nodes are given back while it is tried (index into `list`).
    released: Option<usize>,
}

impl Holds {
    /// Takes the nodes of every nomination (`(job, node names)`) from `cap`; names the
    /// topology does not know (any more) are skipped.
    pub fn take<'a>(
        nominations: impl Iterator<Item = (Entity, &'a [String])>,
        index: &TopologyIndex,
        cap: &mut Capacity,
    ) -> Self {
        let mut list = Vec::new();
        for (job, names) in nominations {
            let mut nodes = Vec::new();
            for n in names.iter().filter_map(|n| index.node_by_name.get(n).copied()) {
                let shape = Arc::new(Shape {
                    req: cap.alloc[n.ix() * cap.d..(n.ix() + 1) * cap.d].to_vec(),
                    missing: None,
                });
                cap.take(index, n, &shape);
                nodes.push((n, shape));
            }
            list.push((job, nodes));
        }
        list.sort_by_key(|(e, _)| *e);
        Self { list, released: None }
    }

    /// Whether any node is held.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Gives `job`'s own nodes back while it is tried (and takes the last job's again).
    pub fn trying(&mut self, job: Entity, index: &TopologyIndex, cap: &mut Capacity) {
        let want = self.list.binary_search_by_key(&job, |(e, _)| *e).ok();
        if want == self.released {
            return;
        }
        if let Some(i) = self.released.take() {
            for (n, s) in &self.list[i].1 {
                cap.take(index, *n, s);
            }
        }
        if let Some(i) = want {
            for (n, s) in &self.list[i].1 {
                cap.give(index, *n, s);
            }
        }
        self.released = want;
    }

    /// Gives everything back: the caches hold only what runs.
    pub fn clear(&mut self, index: &TopologyIndex, cap: &mut Capacity) {
        for (i, (_, nodes)) in self.list.iter().enumerate() {
            if Some(i) == self.released {
                continue;
            }
            for (n, s) in nodes {
                cap.give(index, *n, s);
            }
        }
        self.list.clear();
        self.released = None;
    }
}
