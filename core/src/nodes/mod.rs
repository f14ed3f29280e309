//! Nodes and their agents: which link holds a node ([`claim`]), whether it is Ready
//! ([`health`]), what happens to its tasks when it is lost ([`lost`]), agents turned
//! away for a reason their retries cannot fix ([`refusals`]), and admins' drains and
//! removals ([`drain`]), the ports bound in the `MASTER_PORT` range (`ports`).

pub mod checks;
pub mod claim;
mod deadline;
pub mod drain;
pub mod health;
pub mod lost;
pub(crate) mod ports;
pub mod refusals;
pub(crate) mod strained;
