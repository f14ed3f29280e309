//! The nodes a preemption freed, held for its job (Kueue lost freed domains to other
//! workloads between cycles; here they cannot be taken). While a job waits for its
//! victims to end, the nodes of its nomination (`StateRecord::nomination`, see `preempt`)
//! are taken whole from the caches for the whole walk, and given back only while that
//! job itself is tried. A nomination goes when its job is placed or cancelled.

use std::sync::Arc;

use bevy_ecs::prelude::Entity;

use crate::cache::capacity::Shape;
use crate::cache::scratch::Scratch;
use crate::model::ids::NodeIdx;

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
    pub fn take<'a>(nominations: impl Iterator<Item = (Entity, &'a [String])>, s: &mut Scratch<'_>) -> Self {
        let index = s.index();
        let mut list = Vec::new();
        for (job, names) in nominations {
            let mut nodes = Vec::new();
            for n in names.iter().filter_map(|n| index.node_by_name.get(n).copied()) {
                let d = s.cap().d;
                let shape = Arc::new(Shape {
                    req: s.cap().alloc[n.ix() * d..(n.ix() + 1) * d].to_vec(),
                    missing: None,
                });
                s.take(n, &shape, None);
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
    pub fn trying(&mut self, job: Entity, s: &mut Scratch<'_>) {
        let want = self.list.binary_search_by_key(&job, |(e, _)| *e).ok();
        if want == self.released {
            return;
        }
        if let Some(i) = self.released.take() {
            for (n, shape) in &self.list[i].1 {
                s.take(*n, shape, None);
            }
        }
        if let Some(i) = want {
            for (n, shape) in &self.list[i].1 {
                s.give(*n, shape, None);
            }
        }
        self.released = want;
    }

    /// Gives everything back: the caches hold only what runs.
    pub fn clear(&mut self, s: &mut Scratch<'_>) {
        for (i, (_, nodes)) in self.list.iter().enumerate() {
            if Some(i) == self.released {
                continue;
            }
            for (n, shape) in nodes {
                s.give(*n, shape, None);
            }
        }
        self.list.clear();
        self.released = None;
    }
}
