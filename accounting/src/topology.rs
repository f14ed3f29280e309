//! What `report utilisation` divides by: each node's size and the HyperNodes it is in
//! (every tier), as the planner last saw them. The planner hands a new one over when
//! its nodes or HyperNodes change; written as rows of `nodes` and `node_hypernodes`.

use std::collections::BTreeMap;

use crate::sql::{Sql, Value, upsert};

/// HyperNode name → tier.
pub type Tiers = BTreeMap<String, u32>;

/// One node's size and HyperNodes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeCapacity {
    pub name: String,
    pub cpus: f64,
    pub gpus: u64,
    pub memory: u64,
    /// (HyperNode, tier), lowest tier first.
    pub hypernodes: Vec<(String, u32)>,
}

/// The cluster's nodes and HyperNodes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Topology {
    /// By name.
    pub nodes: Vec<NodeCapacity>,
}

impl Topology {
    /// Each HyperNode's tier (made once per page of jobs, not per job).
    pub fn tiers(&self) -> Tiers {
        self.nodes
            .iter()
            .flat_map(|n| n.hypernodes.iter().map(|(h, t)| (h.clone(), *t)))
            .collect()
    }

    /// The statements that make the database's copy this one: the cluster's rows
    /// deleted, then written.
    pub fn statements(&self, cluster: &str) -> Vec<Sql> {
        let mut out = Vec::new();
        for table in ["nodes", "node_hypernodes"] {
            let mut s = Sql::new(&format!("DELETE FROM {table} WHERE cluster = "));
            s.bind(Value::text(cluster));
            out.push(s);
        }
        for n in &self.nodes {
            out.push(upsert(
                "nodes",
                &["cluster", "name", "cpus", "gpus", "memory"],
                &["cluster", "name"],
                vec![
                    Value::text(cluster),
                    Value::text(&n.name),
                    Value::Real(Some(n.cpus)),
                    Value::int(n.gpus),
                    Value::int(n.memory),
                ],
            ));
            for (h, t) in &n.hypernodes {
                out.push(upsert(
                    "node_hypernodes",
                    &["cluster", "node", "hypernode", "tier"],
                    &["cluster", "node", "hypernode"],
                    vec![
                        Value::text(cluster),
                        Value::text(&n.name),
                        Value::text(h),
                        Value::int(*t),
                    ],
                ));
            }
        }
        out
    }
}
