//! Small sysfs helpers the InfiniBand and NUMA readers share: one attribute read (values
//! cleaned of trailing NULs and blank lines), one directory listed, one link followed —
//! including saved trees where a "link" is a small file holding its relative target.

use std::fs;
use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use super::ProbeError;

/// The root must exist: a mistyped `--sysfs-root` should say so, not look like a machine
/// without InfiniBand or NUMA.
pub(crate) fn check_root(root: &Path) -> Result<(), ProbeError> {
    match fs::metadata(root) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(ProbeError::Read {
            path: root.to_path_buf(),
            source: std::io::Error::new(ErrorKind::NotADirectory, "not a directory"),
        }),
        Err(source) => Err(ProbeError::Read {
            path: root.to_path_buf(),
            source,
        }),
    }
}

/// Entry names of a directory, sorted; `None` when it does not exist; an error when it
/// exists and cannot be listed. Names that are not UTF-8 cannot be sysfs names we use.
pub(crate) fn list_dir(dir: &Path) -> Result<Option<Vec<String>>, ProbeError> {
    let read_err = |source| ProbeError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read_err(e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        if let Ok(name) = entry.map_err(read_err)?.file_name().into_string() {
            names.push(name);
        }
    }
    names.sort();
    Ok(Some(names))
}

/// Reads one sysfs attribute, trimmed. `Ok(None)`: the file is not there (attributes vary
/// by driver and kernel, that is no news). `Err`: there but unreadable or not text.
pub(crate) fn read_attr_raw(path: &Path) -> Result<Option<String>, AttrError> {
    match fs::read(path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => Ok(Some(clean(&text).to_owned())),
            Err(e) => Err(AttrError::NotText(e)),
        },
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(AttrError::Read(e)),
    }
}

/// Why an attribute that is there could not be had ([`read_attr_raw`]); the caller
/// names the file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AttrError {
    #[error("not text ({0})")]
    NotText(std::string::FromUtf8Error),
    #[error("cannot read: {0}")]
    Read(std::io::Error),
}

/// An attribute parsed by `parse`; `what` says what was expected. Missing file: `None`.
/// Unreadable, `N/A` or not parsing: a warning naming the file and the value, and `None`.
pub(crate) fn read_parsed<T>(
    path: &Path,
    what: &str,
    warnings: &mut Vec<String>,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Option<T> {
    match read_attr_raw(path) {
        Ok(Some(text)) => {
            let parsed = if text == "N/A" { None } else { parse(&text) };
            if parsed.is_none() {
                warnings.push(format!("{}: {text:?} is not {what}", path.display()));
            }
            parsed
        }
        Ok(None) => None,
        Err(e) => {
            warnings.push(format!("{}: {e}", path.display()));
            None
        }
    }
}

/// Sysfs values end in a newline; some saved ones carry a blank line or a NUL as well.
pub(crate) fn clean(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace() || c == '\0')
}

pub(crate) fn parse_decimal(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

pub(crate) fn parse_decimal_u64(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The target of a sysfs symlink. Saved trees whose links were flattened into plain files
/// holding the relative target (as in some copied `hwloc-gather-topology` dumps) read the
/// same way; a regular file counts only when its whole content is one `../` path.
pub(crate) fn link_target(path: &Path) -> Option<PathBuf> {
    let meta = fs::symlink_metadata(path).ok()?;
    if meta.file_type().is_symlink() {
        return fs::read_link(path).ok();
    }
    if !meta.is_file() || meta.len() > 4096 {
        return None;
    }
    let text = fs::read_to_string(path).ok()?;
    let target = clean(&text);
    (target.starts_with("../") && !target.contains('\n')).then(|| PathBuf::from(target))
}

/// The directory a sysfs entry stands for: itself when it is a directory (real symlinks
/// are followed by the OS), else the target of a flattened link, else itself.
pub(crate) fn follow(path: &Path) -> PathBuf {
    if path.is_dir() {
        return path.to_path_buf();
    }
    match (link_target(path), path.parent()) {
        (Some(target), Some(parent)) => {
            // Lexical `..` is only right from a physical path: canonicalize the parent.
            let base = fs::canonicalize(parent).unwrap_or_else(|_| parent.to_path_buf());
            normalize(&base.join(target))
        }
        _ => path.to_path_buf(),
    }
}

fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push(c);
                }
            }
            other => out.push(other),
        }
    }
    out
}
