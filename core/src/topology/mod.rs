//! The network topology as the allocator sees it: HyperNodes validated into one tree
//! under a virtual root, dense node indices, node bitsets, node groups, and LCA.

mod index;
mod lca;

pub use index::{Group, HnInfo, TopologyIndex, VIRTUAL_ROOT};
