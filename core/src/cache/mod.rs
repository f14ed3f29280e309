//! What the allocator reads instead of the whole cluster, kept in step with it: free and
//! allocatable resources per node and HyperNode in dense arrays (`capacity`), each
//! node's NUMA state (`numa`), the ledger of who holds what (`holdings`), and the system
//! that brings both up to date before the allocator runs (`refresh`), and the one door
//! through which everything else takes and gives room, with undo (`scratch`).

pub mod capacity;
pub mod holdings;
pub mod numa;
pub mod refresh;
pub mod scratch;
