//! Table cells for the commands: [`columns`] is the simulator's table style (one function,
//! in hyperplan-shared, for both), [`ratio`] the `free/total` cells of nodes and HyperNodes.

pub use hyperplan_shared::columns::columns;

/// `free/total`.
pub fn ratio(free: impl std::fmt::Display, total: impl std::fmt::Display) -> String {
    format!("{free}/{total}")
}
