//! `FileError`: a user-file problem that names the file, line, column and field.

use std::path::PathBuf;

/// A file that could not be read as its format says. Displays as
/// `FILE:LINE:COLUMN: FIELD: what was expected` (line and column 1-based; 0 when unknown).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}:{line}:{column}: {field}: {message}", path.display())]
pub struct FileError {
    pub path: PathBuf,
    pub line: u64,
    pub column: u64,
    /// Dotted path of the field, e.g. `nodes[3].resources.cpu`; `-` for the whole file.
    pub field: String,
    pub message: String,
}
