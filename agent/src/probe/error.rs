//! Probe errors: each names the file (or source) it came from and what was expected.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// A file that should be there cannot be read.
    #[error("{}: cannot read: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    /// hwloc refused an XML export (missing, truncated, not XML, or a version it cannot read).
    #[error("{}: hwloc cannot load this XML topology: {message}", path.display())]
    Xml { path: PathBuf, message: String },
    /// An hwloc synthetic description that does not parse.
    #[error(
        "synthetic topology {description:?} does not parse: {message} (expected e.g. \"pack:2 numa:2 core:8 pu:2\")"
    )]
    Synthetic { description: String, message: String },
    /// A machine with more PUs than hyperplan describes (checked before hwloc builds a
    /// synthetic one, which would take minutes and gigabytes).
    #[error("{origin}: too large: {message}")]
    TooLarge { origin: String, message: String },
    /// hwloc could not build a topology from the machine or a sysfs tree.
    #[error("{origin}: hwloc cannot build the topology: {message}")]
    Hwloc { origin: String, message: String },
    /// A value in a file that must parse for the probe to make sense.
    #[error("{}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
}
