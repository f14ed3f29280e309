//! hyperplan-agent: the node agent. `probe` turns the machine it runs on (or a saved
//! description of one) into the [`NodeTopology`](hyperplan_shared::topology::NodeTopology)
//! the whole system shares; `link` streams it to the planner (`hyperplan-agent run`);
//! `shepherd` runs one task as its parent (`hyperplan-agent shepherd`); `launcher`
//! starts shepherds outside the agent's unit (`hyperplan-agent launcher`); `metrics` is
//! its own Prometheus endpoint (`[metrics] listen`); `health` checks the node (`[health]`)
//! and the link sends what it finds in its heartbeats.

pub mod bounded;
pub mod config;
pub mod deadman;
pub mod exec;
pub mod health;
pub mod launch;
pub mod launcher;
pub mod link;
pub mod metrics;
pub mod oom;
pub mod pmi;
pub mod ports;
pub mod probe;
pub mod shepherd;
pub mod tasks;
