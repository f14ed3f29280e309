//! hyperplan-planner: the daemon around the planner core (`hyperplan-core`): the QUIC/mTLS
//! server and its driver (`server/`), planner.toml (`config/`), the discovery pollers
//! (`discovery.rs`), the durable store (`store/`), Prometheus metrics (`metrics/`) and the web view (`web/`). The core decides; this crate
//! translates what connections say into the core's events and calls and carries out the
//! commands it returns.

pub mod accounting;
pub mod config;
pub mod discovery;
pub mod metrics;
pub mod server;
pub mod store;
pub mod web;

pub use config::DaemonConfig;
