//! The network topology as the allocator sees it: HyperNodes validated into one tree
//! under a virtual root, dense node indices, node bitsets, node groups, and LCA; the
//! system that rebuilds it (`reindex`) and the one that decides when (`invalidate`).

mod index;
pub(crate) mod invalidate;
mod lca;
pub(crate) mod reindex;

pub use index::{Group, HnInfo, TopologyIndex, VIRTUAL_ROOT};
