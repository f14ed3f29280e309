//! Invariants the planner keeps after every tick; tests call [`check`] after each tick.
//!
//! - no resource is given twice: on every node, running tasks plus external use stay
//!   within what the node has;
//! - a gang is placed whole or not at all: a job with placed tasks has its gang minimum
//!   and minPartitions whole partitions, and no partition is placed in part;
//! - a hard tier limit is never crossed: the placed tasks of a hard (sub-)job all sit
//!   under one HyperNode of an allowed tier;
//! - NUMA: no PU, GPU or byte of a NUMA node's memory is assigned twice; a task's CPUs
//!   and GPUs belong to its node; a task with a NUMA request holds exactly what it asked
//!   for; under single-numa-node all of a task's resources sit on one NUMA node;
//! - the resource caches, kept incrementally across ticks, equal caches built afresh
//!   from the nodes and the running tasks.

use std::collections::HashMap;

use bevy_ecs::prelude::*;
use hyperplan_shared::{NetworkTopology, Resources, TopologyMode};

use super::numa::hints::Policy;
use super::numa::node::NodeHardware;
use super::topology::TopologyIndex;
use crate::cache::capacity::Capacity;
use crate::cache::holdings::Holdings;
use crate::cache::numa::NumaState;
use crate::model::awaiting::AwaitingAgent;
use crate::model::checks::HealthMarks;
use crate::model::components::{Job, Node, NodeSlot, SubJob, Task, TaskPhase, TaskState};
use crate::model::ids::NodeIdx;

/// Returns every violation found (empty when all hold).
pub fn check(world: &mut World) -> Vec<String> {
    let mut bad = Vec::new();
    let mut used: HashMap<Entity, Resources> = HashMap::new();
    let mut tq = world.query::<(&Task, &TaskState)>();
    for (task, ts) in tq.iter(world) {
        if ts.phase == TaskPhase::Running {
            match ts.node {
                Some(n) => used.entry(n).or_default().add(&task.request),
                None => bad.push(format!("task {} runs on no node", task.name)),
            }
        }
    }
    let mut nq = world.query::<(Entity, &Node)>();
    for (e, node) in nq.iter(world) {
        // A node known only from the store offers nothing and holds its restored tasks
        // until its agent says what it has (see `restore`).
        if world.get::<AwaitingAgent>(e).is_some() {
            continue;
        }
        let mut total = node.external_used.clone();
        if let Some(u) = used.get(&e) {
            total.add(u);
        }
        for (name, v) in total.iter() {
            if v > node.allocatable.get(name) && used.contains_key(&e) {
                bad.push(format!(
                    "node {}: {name} given twice: {v} used of {}",
                    node.name,
                    node.allocatable.get(name)
                ));
            }
        }
    }

    check_numa(world, &mut bad);
    check_caches(world, &mut bad);
    check_marks(world, &mut bad);

    let mut jq = world.query::<(&Job, Option<&crate::model::components::JobState>)>();
    let index = world.resource::<TopologyIndex>();
    for (job, st) in jq.iter(world) {
        let placed = |ts: &[Entity]| -> Vec<Option<NodeIdx>> {
            ts.iter()
                .filter_map(|t| world.get::<TaskState>(*t))
                .filter(|s| s.phase != TaskPhase::Pending)
                .map(|s| s.node.and_then(|n| world.get::<NodeSlot>(n)).map(|s| s.0))
                .collect()
        };
        let all = placed(&job.tasks);
        if all.is_empty() {
            continue;
        }
        let name = &job.spec.name;
        // Tasks lost with their node wait to start again (`onNodeLost: replace`): the
        // gang is whole again, or the job ends, within the tick that knows it can.
        let replacing = st.map_or(0, |s| s.replacing.len()) as u32;
        if (all.len() as u32) + replacing < job.gang_min {
            bad.push(format!(
                "job {name}: {} tasks placed, gang minimum {}",
                all.len(),
                job.gang_min
            ));
        }
        let running = running_nodes(world, &job.tasks);
        check_tier(index, name, job.spec.network_topology.as_ref(), &running, &mut bad);
        if !job.trees.is_empty() {
            check_trees(index, name, &job.trees, &running, &mut bad);
        }
        let mut whole = vec![0u32; job.partition_groups.len()];
        for &se in &job.sub_jobs {
            let Some(sj) = world.get::<SubJob>(se) else { continue };
            let Some(g) = sj.group else { continue };
            let n = placed(&sj.tasks).len() as u32;
            if n > 0 && n < sj.min_available {
                bad.push(format!("sub-job {}: {n} of {} tasks placed", sj.id, sj.min_available));
            }
            if n >= sj.min_available {
                whole[g] += 1;
            }
            let sj_running = running_nodes(world, &sj.tasks);
            check_tier(index, &sj.id, sj.network_topology.as_ref(), &sj_running, &mut bad);
            if sj.block.is_some() {
                check_consecutive(world, sj, &mut bad);
            }
        }
        for (g, &(_, min)) in job.partition_groups.iter().enumerate() {
            if whole[g] < min {
                bad.push(format!(
                    "job {name}: {} whole partitions, minPartitions {min}",
                    whole[g]
                ));
            }
        }
    }
    bad
}

/// A job of a queue with `trees` runs only on nodes of those trees.
fn check_trees(index: &TopologyIndex, who: &str, trees: &[String], nodes: &[NodeIdx], bad: &mut Vec<String>) {
    for n in nodes {
        let tree = index.groups[index.node_group[n.ix()].ix()]
            .hyper_nodes
            .iter()
            .find_map(|h| index.hns[h.ix()].tree);
        let top = tree.map(|t| index.hns[index.trees[t as usize].top.ix()].name.as_str());
        if !top.is_some_and(|top| trees.iter().any(|t| t == top)) {
            bad.push(format!(
                "{who}: runs on {} in tree {}, its queue's trees are {}",
                index.node_names[n.ix()],
                top.unwrap_or("(none)"),
                trees.join(", ")
            ));
        }
    }
}

/// An innermost segment's ranks, once all given, are consecutive.
fn check_consecutive(world: &World, sj: &SubJob, bad: &mut Vec<String>) {
    let ranks: Vec<u32> = sj
        .tasks
        .iter()
        .filter_map(|t| world.get::<TaskState>(*t).and_then(|s| s.rank))
        .collect();
    if ranks.len() < sj.tasks.len() {
        return;
    }
    let (lo, hi) = (ranks.iter().min(), ranks.iter().max());
    if let (Some(&lo), Some(&hi)) = (lo, hi)
        && (hi - lo) as usize + 1 != ranks.len()
    {
        bad.push(format!(
            "segment {}: ranks {lo}-{hi} for {} tasks, not consecutive",
            sj.id,
            ranks.len()
        ));
    }
}

/// Nodes of the tasks among `tasks` that hold resources now.
fn running_nodes(world: &World, tasks: &[Entity]) -> Vec<NodeIdx> {
    tasks
        .iter()
        .filter_map(|t| world.get::<TaskState>(*t))
        .filter(|s| s.phase == TaskPhase::Running)
        // Restored tasks on a node whose agent has not registered: placed on an earlier
        // topology, checked once it is back.
        .filter(|s| s.node.is_some_and(|n| world.get::<AwaitingAgent>(n).is_none()))
        .filter_map(|s| s.node.and_then(|n| world.get::<NodeSlot>(n)).map(|s| s.0))
        .collect()
}

fn check_tier(
    index: &TopologyIndex,
    who: &str,
    nt: Option<&NetworkTopology>,
    nodes: &[NodeIdx],
    bad: &mut Vec<String>,
) {
    let Some(nt) = nt.filter(|n| n.mode == TopologyMode::Hard) else {
        return;
    };
    let limit = match (&nt.highest_tier_allowed, &nt.highest_tier_name) {
        (Some(t), _) => crate::topology::TierCap::Tier(*t),
        (None, Some(n)) => match index.tier_name(n) {
            Some(cap) => cap,
            None => return,
        },
        (None, None) => return,
    };
    let Some(first) = nodes.first() else { return };
    let lowest = index.groups[index.node_group[first.ix()].ix()]
        .hyper_nodes
        .iter()
        .copied()
        .filter(|h| nodes.iter().all(|n| index.hns[h.ix()].nodes.contains(n.ix())))
        .min_by_key(|h| index.hns[h.ix()].tier);
    match lowest {
        Some(h) if index.allows(limit, h) => {}
        Some(h) => bad.push(format!(
            "{who}: placed across tier {} ({}), hard limit {}",
            index.hns[h.ix()].tier,
            index.hns[h.ix()].name,
            index.cap_label(limit)
        )),
        None => bad.push(format!("{who}: placed on nodes no HyperNode holds together")),
    }
}

/// The capacity and NUMA caches equal fresh ones (once the planner has ticked).
fn check_caches(world: &mut World, bad: &mut Vec<String>) {
    let generation = world.resource::<TopologyIndex>().generation;
    if world.resource::<Holdings>().generation != Some(generation) {
        return;
    }
    let cap = crate::cache::refresh::fresh_capacity(world);
    let numa = crate::cache::refresh::fresh_numa(world);
    let index = world.resource::<TopologyIndex>();
    for d in world.resource::<Capacity>().diff(&cap, index) {
        bad.push(format!("resource cache: {d}"));
    }
    for d in world.resource::<NumaState>().diff(&numa, index) {
        bad.push(format!("resource cache: {d}"));
    }
}

/// The topology index's health marks, kept in place, against the nodes' components and
/// against themselves (group orders, HyperNode counts).
fn check_marks(world: &World, bad: &mut Vec<String>) {
    let index = world.resource::<TopologyIndex>();
    bad.extend(
        index
            .marks_problems()
            .into_iter()
            .map(|p| format!("topology index: {p}")),
    );
    for (i, &e) in index.node_entities.iter().enumerate() {
        let want = world.get::<HealthMarks>(e).copied().unwrap_or_default();
        let Some(m) = index.marks.get(i) else { continue };
        if (m.health, m.fabric) != (want.degraded, want.fabric) {
            bad.push(format!(
                "topology index: node {} marked {m:?}, its checks say {want:?}",
                index.node_names[i]
            ));
        }
    }
}

/// Per node: who holds each PU and GPU (by task name), and memory used per NUMA node.
type Holders = (HashMap<usize, String>, HashMap<usize, String>, Vec<u64>);

fn check_numa(world: &mut World, bad: &mut Vec<String>) {
    let mut per_node: HashMap<Entity, Holders> = HashMap::new();
    let mut tq = world.query::<(&Task, &TaskState)>();
    for (task, ts) in tq.iter(world) {
        if ts.phase != TaskPhase::Running {
            continue;
        }
        let Some(node) = ts.node else { continue };
        // Restored, its assignment taken again once its agent reports the hardware.
        if world.get::<AwaitingAgent>(node).is_some() {
            continue;
        }
        let who = world
            .get::<Job>(task.job)
            .map_or_else(|| task.name.to_string(), |j| format!("{}/{}", j.spec.name, task.name));
        let request = world
            .get::<Job>(task.job)
            .and_then(|j| j.numa.get(task.role).copied().flatten());
        let (Some(a), Some(hw)) = (ts.numa.as_ref(), world.get::<NodeHardware>(node)) else {
            if request.is_some() {
                bad.push(format!("{who}: has a NUMA request but runs without an assignment"));
            }
            continue;
        };
        let m = &hw.0.machine;
        if let Some(req) = request {
            if a.pus.len() != req.cpus || a.gpus.len() != req.gpus {
                bad.push(format!(
                    "{who}: holds {} PUs and {} GPUs, asked for {} and {}",
                    a.pus.len(),
                    a.gpus.len(),
                    req.cpus,
                    req.gpus
                ));
            }
            let bytes: u64 = a.memory.iter().map(|(_, b)| b).sum();
            if bytes != req.memory {
                bad.push(format!("{who}: holds {bytes} bytes, asked for {}", req.memory));
            }
            if req.policy == Policy::SingleNumaNode && a.numa.count() > 1 {
                bad.push(format!(
                    "{who}: single-numa-node task spans {} NUMA nodes",
                    a.numa.count()
                ));
            }
        }
        let entry = per_node
            .entry(node)
            .or_insert_with(|| (HashMap::new(), HashMap::new(), vec![0; m.numa_memory.len()]));
        for p in a.pus.iter() {
            if p >= m.pus.len() {
                bad.push(format!("{who}: PU index {p} is not on its node"));
            } else if let Some(other) = entry.0.insert(p, who.clone()) {
                bad.push(format!("PU {} given twice: {other} and {who}", m.pus[p].os));
            }
        }
        for &g in &a.gpus {
            if g >= m.gpus.len() {
                bad.push(format!("{who}: GPU index {g} is not on its node"));
            } else if let Some(other) = entry.1.insert(g, who.clone()) {
                bad.push(format!("GPU {} given twice: {other} and {who}", m.gpus[g].pci_bus_id));
            }
        }
        for &(i, b) in &a.memory {
            match entry.2.get_mut(i) {
                Some(used) => *used += b,
                None => bad.push(format!("{who}: memory on NUMA index {i}, not on its node")),
            }
        }
    }
    let mut nq = world.query::<(Entity, &Node, &NodeHardware)>();
    for (e, node, hw) in nq.iter(world) {
        let Some((_, _, used)) = per_node.get(&e) else { continue };
        for (i, (&u, &have)) in used.iter().zip(&hw.0.machine.numa_memory).enumerate() {
            if u > have {
                bad.push(format!(
                    "node {}: NUMA node {} memory given twice: {u} bytes of {have}",
                    node.name, hw.0.machine.numa_os[i]
                ));
            }
        }
    }
}
