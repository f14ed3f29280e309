//! The network topology as the allocator sees it: HyperNodes validated into trees
//! (each with its own tier numbers and names, NVLink domains grafted at the bottom) under
//! a virtual root, dense node indices, node bitsets, node groups, health marks and LCA; the
//! system that rebuilds it (`reindex`) and the one that decides when (`invalidate`).

mod graft;
mod index;
pub(crate) mod invalidate;
mod lca;
mod marks;
pub(crate) mod reindex;
mod tree;

pub use index::{Group, HnInfo, TopologyIndex, VIRTUAL_ROOT};
pub use marks::NodeMarks;
pub use tree::{TierCap, Tree};
