//! Why a discovery source failed. The daemon's pollers say which kind of failure it was;
//! the core keeps the source's last good HyperNodes, shows the text, and reports a failure
//! that repeats with the same text once.

use hyperplan_fabric::FabricError;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// Nothing could be read: a missing or unreadable file, a command that failed or timed
    /// out, UFM unreachable or refusing the credentials. The text names what and why.
    #[error("{0}")]
    Unreadable(String),
    /// What was read is not what the source takes: a truncated dump, a dump without
    /// switches, a bad manifest or topology.conf. The text names the file and line.
    #[error("{0}")]
    Invalid(String),
    /// The dump parsed but could not be tiered into HyperNodes.
    #[error(transparent)]
    Tiering(#[from] FabricError),
}
