//! The node list (`hyperplan nodes`): state, free and total CPUs, GPUs and memory, NUMA
//! nodes, InfiniBand ports, labels, running tasks, and how long ago the daemon's nodes
//! were last heard from (as of the last tick; `None` for nodes without a link), and why
//! a node whose agent was refused is NotReady, and admins' drains.

use std::collections::HashMap;

use bevy_ecs::prelude::*;
use hyperplan_shared::gpufabric::NodeDomain;
use hyperplan_shared::health::CheckState;
use hyperplan_shared::status::{DrainState, DrainStatus, FreeTotal, NodeState, NodeStatus, NvlinkState, NvlinkStatus};

use crate::cache::capacity::Capacity;
use crate::discovery::nvlink::{DOMAIN_TIER, PARTITION_TIER};
use crate::model::checks::NodeChecks;
use crate::model::components::{Node, NodeNvlink, NodeSlot, TaskState};
use crate::model::drain::{Drain, Drains};
use crate::model::ids::NodeIdx;
use crate::model::strained::Strained;
use crate::model::strays::Strays;
use crate::nodes::health::heard_secs_ago;
use crate::nodes::refusals::Refusals;
use crate::numa::node::{NodeHardware, is_gpu_resource};
use crate::topology::TopologyIndex;

/// Every node, by name.
pub fn node_statuses(world: &World) -> Vec<NodeStatus> {
    let mut running: HashMap<Entity, u32> = HashMap::new();
    if let Some(mut tq) = super::read::<&TaskState>(world) {
        for ts in tq.iter(world) {
            if let (true, Some(n)) = (ts.is_running(), ts.node) {
                *running.entry(n).or_default() += 1;
            }
        }
    }
    let Some(mut nq) = super::read::<(Entity, &Node, Option<&NodeSlot>, Option<&NodeHardware>)>(world) else {
        return Vec::new();
    };
    let cap = world.resource::<Capacity>();
    let index = world.resource::<TopologyIndex>();
    let sum = |slot: Option<&NodeSlot>, pick: &dyn Fn(&str) -> bool| -> FreeTotal {
        let Some(slot) = slot else {
            return FreeTotal::default();
        };
        let (mut free, mut total) = (0u64, 0u64);
        for (k, name) in cap.dims.iter().enumerate() {
            if pick(name) {
                let i = slot.0.ix() * cap.d + k;
                free += cap.free.get(i).copied().unwrap_or(0);
                total += cap.alloc.get(i).copied().unwrap_or(0);
            }
        }
        FreeTotal { free, total }
    };
    let mut out: Vec<NodeStatus> = nq
        .iter(world)
        .map(|(e, node, slot, hw)| {
            let cpu = sum(slot, &|n| n == hyperplan_shared::CPU);
            NodeStatus {
                name: node.name.to_string(),
                state: if node.ready {
                    NodeState::Ready
                } else {
                    NodeState::NotReady
                },
                labels: node.labels.clone(),
                cpus: FreeTotal {
                    free: cpu.free / 1000,
                    total: cpu.total / 1000,
                },
                gpus: sum(slot, &is_gpu_resource),
                memory: sum(slot, &|n| n == hyperplan_shared::MEMORY),
                numa_nodes: hw.map_or(1, |h| h.0.machine.numa_count() as u32),
                ib_ports: FreeTotal {
                    free: u64::from(node.ib_ports.0),
                    total: u64::from(node.ib_ports.1),
                },
                last_heartbeat_secs: heard_secs_ago(world, e),
                running_tasks: running.get(&e).copied().unwrap_or(0),
                confinement: None, // the agent's word, filled by the planner's driver
                // Its CPUs are not free while a task the planner no longer counts runs.
                reason: world
                    .get::<Strays>(e)
                    .map(|s| {
                        format!(
                            "takes no new task until {} task{} the planner no longer counts {} ended ({})",
                            s.count,
                            if s.count == 1 { "" } else { "s" },
                            if s.count == 1 { "has" } else { "have" },
                            s.first
                        )
                    })
                    // Its agent cannot start tasks now.
                    .or_else(|| {
                        world
                            .get::<Strained>(e)
                            .map(|s| format!("takes no new task until its agent can start them again: {}", s.0))
                    }),
                drain: None,
                nvlink: node.nvlink.as_ref().map(|v| nvlink_status(v, slot.map(|s| s.0), index)),
                health: world.get::<NodeChecks>(e).map_or_else(Vec::new, |c| {
                    c.0.iter().filter(|r| r.state != CheckState::Ok).cloned().collect()
                }),
            }
        })
        .collect();
    // Refused agents: the reason on a NotReady node, and a row for a node this planner
    // has not met (its agent was refused at its first registration).
    let refusals = world.resource::<Refusals>();
    for n in &mut out {
        if n.state == NodeState::NotReady {
            n.reason = refusals.get(&n.name).map(|r| format!("refused: {}", r.reason));
        }
    }
    let known: std::collections::HashSet<String> = out.iter().map(|n| n.name.clone()).collect();
    for (name, r) in &refusals.0 {
        if !known.contains(name) {
            out.push(absent(name, format!("refused: {}", r.reason)));
        }
    }
    // Drains: on the nodes present (draining while tasks run), and a row for a node
    // drained while away (after a restart, before its agent registered).
    let drains = world.resource::<Drains>();
    for n in &mut out {
        n.drain = drains.nodes.get(&n.name).map(|d| status_of(d, n.running_tasks));
    }
    let known: std::collections::HashSet<String> = out.iter().map(|n| n.name.clone()).collect();
    for (name, d) in &drains.nodes {
        if !known.contains(name) {
            out.push(NodeStatus {
                drain: Some(status_of(d, 0)),
                ..absent(name, "drained while its agent is away".into())
            });
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// A node's NVLink report as `hyperplan nodes` shows it, with the lowest NVLink
/// HyperNode holding it (a partition, a domain, or a part of a split domain).
fn nvlink_status(v: &NodeNvlink, slot: Option<NodeIdx>, index: &TopologyIndex) -> NvlinkStatus {
    let hyper_node = slot.and_then(|n| {
        index.groups[index.node_group[n.ix()].ix()]
            .hyper_nodes
            .iter()
            .map(|h| &index.hns[h.ix()])
            .filter(|h| matches!(h.tier_name.as_deref(), Some(PARTITION_TIER | DOMAIN_TIER)))
            .min_by_key(|h| h.tier)
            .map(|h| h.name.clone())
    });
    let (state, detail) = match &v.domain {
        NodeDomain::Domain { degraded: true, .. } => (NvlinkState::Degraded, Some(v.problems.join("; "))),
        NodeDomain::Domain { .. } => (NvlinkState::Ok, None),
        NodeDomain::None { why } => (NvlinkState::None, Some(why.clone())),
        NodeDomain::Pending { why } => (NvlinkState::Registering, Some(why.clone())),
        NodeDomain::Failed { why } => (NvlinkState::Failed, Some(why.clone())),
        NodeDomain::Disagree { gpus } => {
            let mut seen: Vec<String> = gpus
                .iter()
                .map(|g| {
                    if g.cluster_uuid.is_empty() {
                        format!("no domain (state {})", g.state)
                    } else {
                        format!("{} clique {}", g.cluster_uuid, g.clique_id)
                    }
                })
                .collect();
            seen.sort();
            seen.dedup();
            (
                NvlinkState::Disagree,
                Some(format!("its GPUs report {}", seen.join(", "))),
            )
        }
    };
    NvlinkStatus {
        state,
        hyper_node,
        detail: detail.filter(|d| !d.is_empty()),
    }
}

/// A drain as `hyperplan nodes` shows it: draining while `running` tasks remain.
fn status_of(d: &Drain, running: u32) -> DrainStatus {
    DrainStatus {
        state: if running > 0 {
            DrainState::Draining
        } else {
            DrainState::Drained
        },
        reason: d.reason.clone(),
        by: d.by.clone(),
        since: d.since,
    }
}

/// A row for a node the planner has no entity for: NotReady, nothing known but `reason`.
fn absent(name: &str, reason: String) -> NodeStatus {
    NodeStatus {
        name: name.to_string(),
        state: NodeState::NotReady,
        labels: Default::default(),
        cpus: FreeTotal::default(),
        gpus: FreeTotal::default(),
        memory: FreeTotal::default(),
        numa_nodes: 0,
        ib_ports: FreeTotal::default(),
        last_heartbeat_secs: None,
        running_tasks: 0,
        confinement: None,
        reason: Some(reason),
        drain: None,
        nvlink: None,
        health: Vec::new(),
    }
}
