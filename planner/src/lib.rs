//! hyperplan-planner: the daemon around the planner core (`hyperplan-core`): the QUIC/mTLS
//! server and its driver (`server/`), planner.toml (`config/`), the discovery pollers
//! (`discovery.rs`) and the durable store (`store/`). The core decides; this crate
//! translates what connections say into the core's events and calls and carries out the
//! commands it returns.

pub mod config;
pub mod discovery;
pub mod server;
pub mod store;

pub use config::DaemonConfig;
