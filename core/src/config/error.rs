//! Configuration errors that name the file, line and column, and the offset → line and
//! column arithmetic every section's checks share.

/// Why a configuration file is not taken; the text names the file (and line and column).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read (missing, unreadable, not UTF-8).
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The file, as given.
        path: String,
        /// What reading it failed with.
        source: std::io::Error,
    },
    /// The file was read but a value in it is malformed, out of range or unknown.
    #[error("{path}:{line}:{column}: {message}")]
    Parse {
        /// The file, as given.
        path: String,
        /// 1-based line of the offending value.
        line: usize,
        /// 1-based column, in characters.
        column: usize,
        /// What is wrong, naming the key.
        message: String,
    },
}

/// `FILE:LINE:COLUMN: message` for a byte offset into the text (past the end: the end).
pub fn parse_error(text: &str, origin: &str, offset: usize, message: String) -> ConfigError {
    let (line, column) = line_col(text, offset);
    ConfigError::Parse {
        path: origin.to_string(),
        line,
        column,
        message,
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}
