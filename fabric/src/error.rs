//! `FabricError`: what can go wrong reading a fabric dump, a GUID map or a `topology.conf`.
//!
//! Every file problem names the file and the 1-based line, and says what was expected, so a
//! person can open the file at that line and fix it.

use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FabricError {
    /// A line that does not read as its format says (also duplicates, truncation, bad values).
    #[error("{}:{line}: {message}", path.display())]
    Parse { path: PathBuf, line: u64, message: String },
    /// The dump holds no switch at all (e.g. ibnetdiscover run on an unconnected host): there
    /// is no tree to build, and an empty result would wipe the HyperNodes a source already has.
    #[error(
        "{}: no switches in this dump ({cas} CA(s), 0 switches): nothing to build HyperNodes from; \
         run ibnetdiscover from a host whose HCA is linked to the fabric",
        path.display()
    )]
    NoSwitches { path: PathBuf, cas: usize },
    /// HyperNodes that cannot be written in the asked format.
    #[error("{0}")]
    Export(String),
}

impl FabricError {
    pub(crate) fn parse(path: &std::path::Path, line: u64, message: impl Into<String>) -> Self {
        FabricError::Parse {
            path: path.to_path_buf(),
            line,
            message: message.into(),
        }
    }
}
