//! hyperplan-planner: the planner core (a bevy_ecs World and Schedule with no I/O and no
//! clock), the simulator that drives it with virtual time, and builders for tests.
//!
//! Where things live: `core/topology` (HyperNode tree, LCA, label discovery),
//! `core/capacity.rs` (resource cache), `core/allocate` (gradient search, bin-pack and
//! node scores, gang rules, ranks), `core/recover.rs`, `sim/` (the simulator).

pub mod config;
pub mod core;
pub mod server;
pub mod sim;
pub mod testing;

pub use config::PlannerConfig;
pub use core::{Command, Event, Planner};
