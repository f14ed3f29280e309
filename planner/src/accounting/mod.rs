//! The planner's side of accounting: `[accounting]` ([`config`]), the thread that
//! copies ended jobs from the committed state into the accounting database
//! ([`exporter`]), the thread that answers `history` and `report` from it ([`reader`]),
//! where the copying stands ([`status`]: `hyperplan planners`, `/metrics`, and how far
//! the store may purge), and the node sizes `report utilisation` divides by
//! ([`topology`]).
//!
//! Nothing here runs in the tick: the exporter reads ended jobs from the store after
//! they are committed, so a database that is slow or down delays only itself.

pub mod config;
pub mod exporter;
pub mod reader;
pub mod status;
pub mod topology;

pub use config::AccountingConfig;
pub use exporter::Exporter;
pub use reader::Reader;
pub use status::Status;
