//! One job of a replayed trace as the baselines see it: a count of interchangeable nodes,
//! a run time and the time limit backfilling trusts. Vocabulary shared by `easy`,
//! `topo_easy` and their clock (`events`).

/// One job of a trace, in whole nodes and seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceJob {
    /// When the job enters the queue.
    pub submit: u64,
    /// Nodes it needs for its whole run (0 counts as 1).
    pub nodes: u32,
    /// How long it really runs, if its limit lets it.
    pub runtime: u64,
    /// The time limit the user gave: the job is killed at it, and backfilling trusts it as
    /// the estimate (below 1 counts as 1).
    pub limit: u64,
}

impl TraceJob {
    /// Nodes, at least 1.
    pub(crate) fn width(&self) -> u32 {
        self.nodes.max(1)
    }

    /// The time limit, at least 1 s.
    pub(crate) fn limit(&self) -> u64 {
        self.limit.max(1)
    }

    /// How long it runs: its run time, cut at its limit.
    pub(crate) fn runs(&self) -> u64 {
        self.runtime.min(self.limit())
    }
}
