//! Reading a small file a person names (a limits file, a saved fabric report) without
//! trusting what is there: opened non-blocking, so a FIFO in its place is refused rather
//! than waited on, only a regular file accepted, and at most a given number of bytes read.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Why a named file was not read.
#[derive(Debug, thiserror::Error)]
pub enum BoundedReadError {
    /// It could not be opened or read (missing included: see [`BoundedReadError::is_missing`]).
    #[error("cannot read: {0}")]
    Read(#[from] std::io::Error),
    /// A directory, FIFO, socket or device in its place.
    #[error("not a regular file")]
    NotAFile,
    /// More than the limit.
    #[error("larger than {0} bytes")]
    TooLarge(u64),
}

impl BoundedReadError {
    /// The file does not exist (for callers to whom that is not an error).
    pub fn is_missing(&self) -> bool {
        matches!(self, Self::Read(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

/// The bytes of the regular file `path`, of at most `limit` bytes.
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, BoundedReadError> {
    read_with(path, limit, libc::O_NONBLOCK)
}

/// [`read_regular`], refusing a symbolic link as the file itself (`ELOOP`): for the
/// attributes of a tree (sysfs, a saved copy of one) that must not lead out of it.
pub fn read_regular_no_link(path: &Path, limit: u64) -> Result<Vec<u8>, BoundedReadError> {
    read_with(path, limit, libc::O_NONBLOCK | libc::O_NOFOLLOW)
}

fn read_with(path: &Path, limit: u64, flags: i32) -> Result<Vec<u8>, BoundedReadError> {
    let file = std::fs::OpenOptions::new().read(true).custom_flags(flags).open(path)?;
    if !file.metadata()?.is_file() {
        return Err(BoundedReadError::NotAFile);
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(BoundedReadError::TooLarge(limit));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn regular_files_are_read_up_to_the_limit_and_nothing_else_is() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"12345").unwrap();
        assert_eq!(read_regular(&file, 5).unwrap(), b"12345");
        assert!(matches!(read_regular(&file, 4), Err(BoundedReadError::TooLarge(4))));
        assert!(matches!(read_regular(dir.path(), 5), Err(BoundedReadError::NotAFile)));
        assert!(read_regular(&dir.path().join("none"), 5).unwrap_err().is_missing());
        // A FIFO with no writer: refused at once, not waited on.
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        assert!(matches!(read_regular(&fifo, 5), Err(BoundedReadError::NotAFile)));
        // A link as the file itself: followed by one, refused by the other.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_regular(&link, 5).unwrap(), b"12345");
        assert!(matches!(read_regular_no_link(&link, 5), Err(BoundedReadError::Read(_))));
        assert_eq!(read_regular_no_link(&file, 5).unwrap(), b"12345");
    }
}
