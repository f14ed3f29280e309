//! "Nothing changed since": the one key every memo of the tick compares (the walk's
//! reservations, preemption's looks, the fair tree's ranking). Each names the counters
//! its answer depends on and leaves the others at zero; while the key is equal, the
//! answer stands.

/// The counters an answer was worked out against (see the module).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Since {
    /// `CapacityEpoch`: counts up whenever room may have grown.
    pub capacity: u64,
    /// The topology index's generation.
    pub topology: u64,
    /// The order's generation (queues, priorities), or the queue table's.
    pub order: u64,
    /// The next job id: counts up when a job arrives.
    pub jobs: u64,
    /// Tasks that hold room now.
    pub held: u64,
    /// Jobs let go by a hold or a begin time so far.
    pub unheld: u64,
    /// Maintenance windows closed so far.
    pub windows_closed: u64,
    /// The usage's epoch (fair share).
    pub usage: u64,
    /// Jobs waiting past `[scheduler] starvation` (they go first).
    pub starving: u64,
    /// Running jobs that passed their runtime estimate (counted at their limit since).
    pub overran: u64,
}
