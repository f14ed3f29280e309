//! Configuration errors that name the file, line and column, and the offset → line and
//! column arithmetic every section's checks share.

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}:{line}:{column}: {message}")]
    Parse {
        path: String,
        line: usize,
        column: usize,
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
