//! Reservations that hold whole nodes: maintenance windows (`[[reservation]]`), from
//! `start` to `end`, and a job's reservation as the store kept it, while the agents a
//! restarted planner awaits come back. The walk and the sweep treat them as any other, so
//! a job uses those nodes only if its time limit ends it before they are needed.

use std::sync::Arc;

use bevy_ecs::prelude::Entity;

use super::Reservation;
use crate::cache::capacity::{Capacity, Shape};
use crate::cache::holdings::Held;
use crate::config::MaintenanceWindow;
use crate::model::ids::NodeIdx;
use crate::order::OrderKey;
use crate::topology::TopologyIndex;
use hyperplan_shared::report::ReservationReport;

/// Every resource of each node, as a reservation holds it.
fn whole_nodes(nodes: Vec<NodeIdx>, cap: &Capacity) -> Vec<Held> {
    nodes
        .into_iter()
        .map(|n| Held {
            node: n,
            shape: Arc::new(Shape {
                req: cap.alloc[n.ix() * cap.d..(n.ix() + 1) * cap.d].to_vec(),
                missing: None,
            }),
            numa: None,
        })
        .collect()
}

/// Job `job`'s reservation as the store kept it (`r`), on the nodes of it the topology
/// knows, whole, from its start for its time limit.
pub fn stored(
    job: Entity,
    key: OrderKey,
    r: &ReservationReport,
    limit: Option<u64>,
    index: &TopologyIndex,
    cap: &Capacity,
) -> Reservation {
    let nodes: Vec<NodeIdx> = r
        .nodes
        .iter()
        .filter_map(|n| index.node_by_name.get(n).copied())
        .collect();
    Reservation {
        job,
        key,
        start: r.start,
        end: limit.map(|l| r.start.saturating_add(l)),
        hyper_node: r.hyper_node.as_ref().and_then(|h| index.hn_by_name.get(h).copied()),
        held: whole_nodes(nodes, cap),
        window: None,
        strict: false,
    }
}

/// What the windows name that the topology does not know, one line each (`window: node
/// n07`), to warn about: a typo must not leave a node in service during its maintenance.
pub fn unknown_names(windows: &[MaintenanceWindow], index: &TopologyIndex) -> Vec<String> {
    let mut out = Vec::new();
    for w in windows {
        for n in w.nodes.iter().filter(|n| !index.node_by_name.contains_key(*n)) {
            out.push(format!(
                "maintenance window {}: node {n:?} is not a node the planner knows",
                w.name
            ));
        }
        for h in w.hyper_nodes.iter().filter(|h| !index.hn_by_name.contains_key(*h)) {
            out.push(format!(
                "maintenance window {}: HyperNode {h:?} is not a HyperNode the planner knows",
                w.name
            ));
        }
    }
    out
}

/// The windows not yet closed at `now`, as reservations over the nodes they name (and
/// those of the HyperNodes they name) that the topology knows.
pub fn windows(windows: &[MaintenanceWindow], now: u64, index: &TopologyIndex, cap: &Capacity) -> Vec<Reservation> {
    windows
        .iter()
        .filter(|w| w.end > now)
        .map(|w| {
            let mut nodes: Vec<NodeIdx> = w
                .nodes
                .iter()
                .filter_map(|n| index.node_by_name.get(n).copied())
                .collect();
            for h in &w.hyper_nodes {
                if let Some(&hi) = index.hn_by_name.get(h) {
                    nodes.extend(index.hns[hi.ix()].nodes.ones().map(|n| NodeIdx(n as u32)));
                }
            }
            nodes.sort_unstable();
            nodes.dedup();
            let held = whole_nodes(nodes, cap);
            Reservation {
                job: Entity::PLACEHOLDER,
                key: (
                    std::cmp::Reverse(i32::MAX),
                    std::cmp::Reverse(i32::MAX),
                    std::cmp::Reverse(i64::MAX),
                    0,
                    0,
                ),
                start: w.start,
                end: Some(w.end),
                hyper_node: None,
                held,
                window: Some(w.name.clone()),
                strict: true,
            }
        })
        .collect()
}
