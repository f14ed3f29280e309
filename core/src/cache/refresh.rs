//! The resource-cache systems: the capacity cache and the NUMA state follow the ledger of
//! what each running task holds (`holdings`), and are built afresh only with the topology
//! index. Here, apart from both caches and the ledger, so that neither cache module needs
//! the ledger (which needs both caches' types).

use bevy_ecs::prelude::*;
use hyperplan_shared::Resources;

use crate::cache::capacity::Capacity;
use crate::cache::holdings::{Holdings, NumaChange, ShapeMemo, held_by, running_on};
use crate::cache::numa::NumaState;
use crate::model::components::{LiveChanged, Node, NodeSlot, Task, TaskState};
use crate::model::drain::{Closed, DrainChanges, Drained};
use crate::model::ids::NodeIdx;
use crate::model::strained::Strained;
use crate::model::strays::Strays;
use crate::model::tick::CapacityEpoch;
use crate::numa::node::NodeHardware;
use crate::topology::TopologyIndex;

/// A node, and whether it is drained, runs tasks the planner no longer counts, or cannot
/// start tasks now: each closes it to new tasks.
type NodeClosed = (&'static Node, Has<Drained>, Has<Strays>, Has<Strained>);

/// The resource-cache system. The cache lives across ticks: it is built afresh (nodes,
/// then every running task) only when the topology index was rebuilt, which every node
/// change (appearing, going, new allocatable or external use, readiness) and every
/// HyperNode change causes. Otherwise it follows the tasks whose state changed since the
/// last tick, through the ledger of what each task holds: gives back what stopped
/// running, takes what started outside the allocator; and the nodes drained or resumed
/// ([`DrainChanges`]), each closed or opened in place by the room its closing holds
/// (`Holdings::closed`); the nodes closed are listed for the walk ([`Closed`]). The
/// allocator takes as it places (and records each placement in the ledger as it
/// commits).
#[allow(clippy::too_many_arguments)]
pub fn refresh_capacity(
    index: Res<TopologyIndex>,
    mut cap: ResMut<Capacity>,
    mut holdings: ResMut<Holdings>,
    nodes: Query<NodeClosed>,
    tasks: Query<(Entity, &Task, &TaskState)>,
    changed: Query<(Entity, &Task, &TaskState), LiveChanged<TaskState>>,
    mut removed: RemovedComponents<TaskState>,
    slots: Query<&NodeSlot>,
    mut epoch: ResMut<CapacityEpoch>,
    mut drains: ResMut<DrainChanges>,
    mut closed_now: ResMut<Closed>,
) {
    let _span = tracing::info_span!("resource_cache").entered();
    closed_now.0.clear();
    let closed_node = |e: Entity| nodes.get(e).ok().map(|(n, d, s, st)| (n, !n.ready || d || s || st));
    if holdings.generation != Some(index.generation) {
        removed.clear();
        drains.0.clear();
        let per_node = node_inputs(&index, |e| nodes.get(e).ok().map(|(n, d, s, st)| (n, d || s || st)));
        *cap = Capacity::build(&index, &per_node);
        holdings.reset(index.generation);
        // What each closed node's closing holds, to give back if it opens in place.
        for (i, &e) in index.node_entities.iter().enumerate() {
            if let Some((n, true)) = closed_node(e) {
                holdings.closed.insert(NodeIdx(i as u32), closing(&cap, n));
            }
        }
        let mut memo = ShapeMemo::default();
        for (e, task, ts) in &tasks {
            if let Some(n) = running_on(ts, &slots) {
                let held = held_by(&cap, &mut memo, n, task, ts);
                holdings.take(&mut cap, &index, e, held);
            }
        }
        tracing::debug!(running = holdings.len(), "resource cache rebuilt");
        // New nodes, HyperNodes or readiness: any job may fit now.
        epoch.0 += 1;
        return;
    }
    let mut gave = false;
    for e in removed.read() {
        gave |= holdings.give(&mut cap, &index, e);
    }
    // Nodes drained or resumed: closed or opened in place. Opening gives room (the epoch
    // counts up); closing takes it, and the walk looks at its reservations (`Closed`).
    let mut flipped: Vec<Entity> = std::mem::take(&mut drains.0);
    flipped.sort_unstable();
    flipped.dedup();
    for e in flipped {
        let (Ok(slot), Some((n, closed))) = (slots.get(e), closed_node(e)) else {
            continue;
        };
        let was = holdings.closed.contains_key(&slot.0);
        if closed && !was {
            let shape = closing(&cap, n);
            cap.take(&index, slot.0, &shape);
            holdings.closed.insert(slot.0, shape);
            closed_now.0.push(slot.0);
        } else if !closed && let Some(shape) = holdings.closed.remove(&slot.0) {
            cap.give(&index, slot.0, &shape);
            gave = true;
        }
    }
    closed_now.0.sort_unstable();
    // One pass over the changed tasks (a scan of every live task's change tick), then
    // gives before takes: a NUMA PU given back must not free one just taken.
    let mut takes = Vec::new();
    let mut memo = ShapeMemo::default();
    for (e, task, ts) in &changed {
        let now_on = running_on(ts, &slots);
        let held = holdings.get(e).map(|h| h.node);
        if held.is_some() && held != now_on {
            gave |= holdings.give(&mut cap, &index, e);
        }
        if let Some(n) = now_on
            && held != now_on
        {
            takes.push((e, held_by(&cap, &mut memo, n, task, ts)));
        }
    }
    for (e, held) in takes {
        holdings.take(&mut cap, &index, e, held);
    }
    // Room given back: jobs that found none may find some now.
    if gave {
        epoch.0 += 1;
    }
}

/// What closing node `n` takes from the cache: all it offers beyond work outside
/// hyperplan, so that it is used up whatever its tasks give back (as a fresh build counts
/// a closed node: all of it used).
fn closing(cap: &Capacity, n: &Node) -> crate::cache::capacity::Shape {
    let mut room = Resources::new();
    for (k, v) in &n.allocatable.0 {
        room.0.insert(k.clone(), v.saturating_sub(n.external_used.get(k)));
    }
    cap.shape(&room)
}

/// Per node of the index: (allocatable, in use outside hyperplan's tasks). A node that
/// is not ready, is drained, runs tasks the planner no longer counts ([`Strays`]) or
/// cannot start tasks now ([`Strained`]) offers nothing: all of it counts as used.
fn node_inputs<'a>(
    index: &TopologyIndex,
    node: impl Fn(bevy_ecs::entity::Entity) -> Option<(&'a Node, bool)>,
) -> Vec<(&'a Resources, &'a Resources)> {
    index
        .node_entities
        .iter()
        .map(|&e| match node(e) {
            Some((n, closed)) if !n.ready || closed => (&n.allocatable, &n.allocatable),
            Some((n, _)) => (&n.allocatable, &n.external_used),
            None => (&EMPTY, &EMPTY),
        })
        .collect()
}

/// The cache built from scratch from `world` (nodes and running tasks), for tests to
/// compare the incrementally kept one against.
pub fn fresh_capacity(world: &mut World) -> Capacity {
    let mut tq = world.query::<(&Task, &TaskState)>();
    let world = &*world;
    let index = world.resource::<TopologyIndex>();
    let per_node = node_inputs(index, |e| {
        world.get::<Node>(e).map(|n| {
            let closed = world.get::<Drained>(e).is_some()
                || world.get::<Strays>(e).is_some()
                || world.get::<Strained>(e).is_some();
            (n, closed)
        })
    });
    let mut cap = Capacity::build(index, &per_node);
    for (task, ts) in tq.iter(world) {
        if let Some(n) = ts
            .node
            .filter(|_| ts.is_running())
            .and_then(|e| world.get::<NodeSlot>(e))
        {
            let shape = cap.shape(&task.request);
            cap.take(index, n.0, &shape);
        }
    }
    cap
}

static EMPTY: Resources = Resources(std::collections::BTreeMap::new());

/// The NUMA resource-cache system: node hardware by dense index when the topology index
/// changed, with every assignment the ledger holds taken; otherwise the takes and gives
/// `refresh_capacity` made this tick (cost follows the tasks that started and stopped).
pub fn refresh_numa(
    index: Res<TopologyIndex>,
    mut state: ResMut<NumaState>,
    mut holdings: ResMut<Holdings>,
    hardware: Query<&NodeHardware>,
) {
    let _span = tracing::info_span!("numa_cache").entered();
    if state.generation() != Some(index.generation) {
        *state = NumaState::build(&index, |e| hardware.get(e).ok().map(|h| h.0.clone()));
        holdings.drain_numa_changes();
        for (_, held) in holdings.iter() {
            if let Some(a) = &held.numa {
                state.take(held.node, a);
            }
        }
        return;
    }
    for change in holdings.drain_numa_changes() {
        match change {
            NumaChange::Take(n, a) => state.take(n, &a),
            NumaChange::Give(n, a) => state.give(n, &a),
        }
    }
}

/// The NUMA state built from scratch from `world`, for tests to compare against.
pub fn fresh_numa(world: &mut World) -> NumaState {
    let mut tq = world.query::<&TaskState>();
    let world = &*world;
    let index = world.resource::<TopologyIndex>();
    let mut state = NumaState::build(index, |e| world.get::<NodeHardware>(e).map(|h| h.0.clone()));
    for ts in tq.iter(world) {
        let (true, Some(a), Some(node)) = (ts.is_running(), ts.numa.as_ref(), ts.node) else {
            continue;
        };
        if let Some(slot) = world.get::<NodeSlot>(node) {
            state.take(slot.0, a);
        }
    }
    state
}
