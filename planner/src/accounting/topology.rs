//! The node sizes and HyperNodes `report utilisation` divides by, taken from the core's
//! views (`hyperplan nodes`, `hyperplan hypernodes`) by the driver, now and then.

use std::collections::BTreeMap;

use hyperplan_accounting::Topology;
use hyperplan_accounting::topology::NodeCapacity;
use hyperplan_core::Planner;

/// The cluster as the core sees it now.
pub fn of(planner: &Planner) -> Topology {
    let tree = planner.hyper_nodes();
    let tiers: BTreeMap<&str, u32> = tree.hyper_nodes.iter().map(|h| (h.name.as_str(), h.tier)).collect();
    let nodes = planner
        .nodes()
        .into_iter()
        .map(|n| {
            let hypernodes = planner
                .hyper_nodes_of(&n.name)
                .into_iter()
                .filter_map(|h| tiers.get(h.as_str()).map(|&t| (h, t)))
                .collect();
            NodeCapacity {
                cpus: n.cpus.total as f64,
                gpus: n.gpus.total,
                memory: n.memory.total,
                name: n.name,
                hypernodes,
            }
        })
        .collect();
    Topology { nodes }
}
