//! hyperplan-planner: the daemon around the planner core (`hyperplan-core`): the QUIC/mTLS
//! server and its driver (`server/`), planner.toml (`config/`) and the discovery pollers
//! (`server/discovery.rs`). The core decides; this crate translates events into the core
//! and carries out the commands it returns.

pub mod config;
pub mod server;
pub mod store;

pub use config::DaemonConfig;
