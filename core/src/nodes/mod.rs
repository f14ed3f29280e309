//! Nodes and their agents: which link holds a node ([`claim`]), whether it is Ready
//! ([`health`]), what happens to its tasks when it is lost ([`lost`]), and agents turned
//! away for a reason their retries cannot fix ([`refusals`]).

pub mod claim;
mod deadline;
pub mod health;
pub mod lost;
pub mod refusals;
