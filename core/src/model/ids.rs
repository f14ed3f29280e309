//! Typed dense indices for the hot paths. They are rebuilt with the topology index, so
//! they never outlive a tick's snapshot; entities and names are the stable handles.

/// A node's dense index; nodes are numbered in name order, so comparing indices
/// compares names (ties break by name for free).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeIdx(pub u32);

/// A HyperNode's dense index in the topology index (the virtual root included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HnIdx(pub u32);

/// A group of nodes that sit in exactly the same HyperNodes; they score alike.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupIdx(pub u32);

/// A queue's dense index in the queue table (`default` is 0); renumbered when the queues
/// are reloaded, so held only with the table they came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueIdx(pub u32);

/// A user's dense index: users are numbered as they first submit (never reused).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UserIdx(pub u32);

impl QueueIdx {
    /// As a `usize`, to index the dense arrays.
    pub fn ix(self) -> usize {
        self.0 as usize
    }
}
impl UserIdx {
    /// As a `usize`, to index the dense arrays.
    pub fn ix(self) -> usize {
        self.0 as usize
    }
}
impl NodeIdx {
    /// As a `usize`, to index the dense arrays.
    pub fn ix(self) -> usize {
        self.0 as usize
    }
}
impl HnIdx {
    /// As a `usize`, to index the dense arrays.
    pub fn ix(self) -> usize {
        self.0 as usize
    }
}
impl GroupIdx {
    /// As a `usize`, to index the dense arrays.
    pub fn ix(self) -> usize {
        self.0 as usize
    }
}
