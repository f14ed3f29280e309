//! `FileError`: a user-file problem that names the file, line, column and field.

use std::path::PathBuf;

/// A file that could not be read as its format says. Displays as
/// `FILE:LINE:COLUMN: FIELD: what was expected` (line and column 1-based); what is not
/// known is left out rather than shown as `0:0` or `-` (`FILE: cannot read …` for a file
/// that cannot be opened, `FILE:4:15: unclosed bracket` for a syntax error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    pub path: PathBuf,
    pub line: u64,
    pub column: u64,
    /// Dotted path of the field, e.g. `nodes[3].resources.cpu`; `-` for the whole file.
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.path.display())?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        if self.field != "-" && !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for FileError {}

/// What a non-regular file is (`a FIFO`, `a device`, …), for errors that refuse one.
pub fn file_kind(m: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "not a file"
    }
}

/// An error and its causes as one line, `outer: cause: …`, each said once: a cause whose
/// text the line already holds (a message that carries its cause inline, as most of this
/// project's do, while also naming it as its source) is left out. What the binaries print.
pub fn chain_line<'a>(chain: impl IntoIterator<Item = &'a (dyn std::error::Error + 'static)>) -> String {
    let mut line = String::new();
    for error in chain {
        let text = error.to_string();
        if text.is_empty() || line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod chain_tests {
    use super::chain_line;

    #[derive(Debug, thiserror::Error)]
    #[error("/etc/x.toml: cannot read: {source}")]
    struct Inline {
        source: std::io::Error,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("starting")]
    struct Outer(#[source] Inline);

    #[test]
    fn a_cause_said_inline_is_not_said_again() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = Outer(Inline { source: io });
        let mut chain: Vec<&(dyn std::error::Error + 'static)> = vec![&e];
        while let Some(next) = chain.last().and_then(|e| e.source()) {
            chain.push(next);
        }
        assert_eq!(chain_line(chain), "starting: /etc/x.toml: cannot read: no such file");
    }
}
