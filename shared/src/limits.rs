//! How big the files hyperplan reads may be, and the one bounded reader that enforces it.
//!
//! Untrusted input never grows memory without bound: a 200 MB job file or
//! `submit - < /dev/zero` gets an error that says the limit, not gigabytes of RSS.

use std::io::Read;

/// Largest job file, in bytes (8 MiB, some 100,000 tasks written out one by one); also
/// the largest text `submit` sends, so a submission always fits a frame of the planner's
/// default `maxFrameBytes` (16 MiB).
pub const MAX_JOB_FILE: u64 = 8 << 20;

/// Largest cluster file or HyperNode manifest file, in bytes (64 MiB; a generated
/// 50,000-node cluster file is under 10 MiB).
pub const MAX_CLUSTER_FILE: u64 = 64 << 20;

/// Largest fabric dump (ibnetdiscover output, a UFM export, a Slurm topology.conf), in
/// bytes: a 4,000-host fabric dump is a few MiB; this only stops a path such as
/// `/dev/zero` from eating memory.
pub const MAX_FABRIC_FILE: u64 = 512 << 20;

/// Why a bounded read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{what} is larger than the limit of {}", human(*limit))]
    TooLarge { what: String, limit: u64 },
    #[error("{what} is not UTF-8 text")]
    NotUtf8 { what: String },
    #[error("cannot read {what}: {error}")]
    /// The cause is in the message, not chained: `{:#}` would print it twice.
    Io { what: String, error: std::io::Error },
}

/// Reads all of `reader` as text, refusing more than `limit` bytes (never buffering more
/// than `limit` + 1). `what` names the input in errors (`the file`, `standard input`).
pub fn read_text(reader: impl Read, limit: u64, what: &str) -> Result<String, ReadError> {
    let mut bytes = Vec::new();
    reader
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|error| ReadError::Io {
            what: what.to_string(),
            error,
        })?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge {
            what: what.to_string(),
            limit,
        });
    }
    String::from_utf8(bytes).map_err(|_| ReadError::NotUtf8 { what: what.to_string() })
}

/// Reads the file at `path` with [`read_text`].
pub fn read_file_text(path: &std::path::Path, limit: u64, what: &str) -> Result<String, ReadError> {
    let file = std::fs::File::open(path).map_err(|error| ReadError::Io {
        what: what.to_string(),
        error,
    })?;
    read_text(file, limit, what)
}

/// `8 MiB`, `512 KiB`, `100 bytes`.
pub fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b.is_multiple_of(1 << 20) => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b.is_multiple_of(1 << 10) => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn reads_up_to_the_limit_and_no_further() {
        assert_eq!(read_text(&b"abcd"[..], 4, "x").unwrap(), "abcd");
        let e = read_text(std::io::repeat(b'a'), 4, "standard input").unwrap_err();
        assert_eq!(e.to_string(), "standard input is larger than the limit of 4 bytes");
        assert_eq!(human(MAX_JOB_FILE), "8 MiB");
        assert!(matches!(
            read_text(&[0xffu8][..], 4, "x"),
            Err(ReadError::NotUtf8 { .. })
        ));
    }
}
