//! What the driver answers a scrape with (`ToCore::Metrics`): the cluster's gauges read
//! from the core then and there. Its own module so the driver's inbox can name it without
//! importing the HTTP endpoint that asks for it (`serve`).

use hyperplan_core::view::gauges::Gauges;
use hyperplan_shared::status::SourceStatus;

/// What the driver answers a scrape with.
#[derive(Debug)]
pub struct Snapshot {
    pub gauges: Gauges,
    pub sources: Vec<SourceStatus>,
    /// Agents with an open link.
    pub agents: usize,
}
