//! hyperplan-agent: the node agent. `probe` turns the machine it runs on (or a saved
//! description of one) into the [`NodeTopology`](hyperplan_shared::topology::NodeTopology)
//! the whole system shares.

pub mod config;
pub mod probe;
