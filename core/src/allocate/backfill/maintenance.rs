//! Maintenance windows (`[[reservation]]`) as reservations that hold all of their nodes
//! from `start` to `end`: the walk and the sweep treat them as any other, so a job uses
//! those nodes only if its time limit ends it before the window opens.

use std::sync::Arc;

use bevy_ecs::prelude::Entity;

use super::Reservation;
use crate::cache::capacity::{Capacity, Shape};
use crate::cache::holdings::Held;
use crate::config::MaintenanceWindow;
use crate::model::ids::NodeIdx;
use crate::topology::TopologyIndex;

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
            let held = nodes
                .into_iter()
                .map(|n| Held {
                    node: n,
                    shape: Arc::new(Shape {
                        req: cap.alloc[n.ix() * cap.d..(n.ix() + 1) * cap.d].to_vec(),
                        missing: None,
                    }),
                    numa: None,
                })
                .collect();
            Reservation {
                job: Entity::PLACEHOLDER,
                key: (std::cmp::Reverse(i32::MAX), std::cmp::Reverse(i64::MAX), 0, 0),
                start: w.start,
                end: Some(w.end),
                hyper_node: None,
                held,
                window: Some(w.name.clone()),
            }
        })
        .collect()
}
