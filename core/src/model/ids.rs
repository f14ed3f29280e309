//! Typed dense indices for the hot paths. They are rebuilt with the topology index, so
//! they never outlive a tick's snapshot; entities and names are the stable handles.
//! Declared with the one id macro (`hyperplan_shared::typed_id!`) the wire's ids use.

use hyperplan_shared::typed_id;

typed_id!(dense
    /// A node's dense index; nodes are numbered in name order, so comparing indices
    /// compares names (ties break by name for free).
    NodeIdx(u32)
);

typed_id!(dense
    /// A HyperNode's dense index in the topology index (the virtual root included).
    HnIdx(u32)
);

typed_id!(dense
    /// A group of nodes that sit in exactly the same HyperNodes; they score alike.
    GroupIdx(u32)
);

typed_id!(dense
    /// A queue's dense index in the queue table (`default` is 0); renumbered when the
    /// queues are reloaded, so held only with the table they came from.
    QueueIdx(u32)
);

typed_id!(dense
    /// A user's dense index: users are numbered as they first submit (never reused).
    UserIdx(u32)
);
