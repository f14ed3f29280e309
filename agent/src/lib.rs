//! hyperplan-agent: the node agent. `probe` turns the machine it runs on (or a saved
//! description of one) into the [`NodeTopology`](hyperplan_shared::topology::NodeTopology)
//! the whole system shares; `link` streams it to the planner (`hyperplan-agent run`);
//! `shepherd` runs one task as its parent (`hyperplan-agent shepherd`).

pub mod config;
pub mod exec;
pub mod launch;
pub mod link;
pub mod oom;
pub mod pmi;
pub mod probe;
pub mod shepherd;
pub mod tasks;
