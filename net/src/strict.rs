//! Strict modes for a party's own certificate files, as ssh has them: its private key is
//! readable by its owner only, no directory holding its material is writable by others,
//! and its certificate carries the role (subject OU) and usage (extended key usage) it
//! is loaded for. The planner, the agent and the CLI refuse to start otherwise, with an
//! error naming the file and what is wrong.
//!
//! Owners are not compared: under systemd's `PrivateUsers=` root's files show as
//! `nobody`, and a key the process can read at all is its own or root's.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rustls_pki_types::CertificateDer;
use x509_parser::extensions::ParsedExtension;

use crate::certs::CertPaths;
use crate::identity::{CertRole, identity_from_der};

/// Why a party's certificate files are refused.
#[derive(Debug, thiserror::Error)]
pub enum StrictError {
    #[error(
        "{}: permissions {mode:04o} are too open: a private key must be readable by its owner only (chmod 600 it)",
        .path.display()
    )]
    KeyTooOpen { path: PathBuf, mode: u32 },
    #[error(
        "{}: directory writable by others (mode {mode:04o}): anyone could swap the certificates in it (chmod o-w it)",
        .path.display()
    )]
    WritableDir { path: PathBuf, mode: u32 },
    #[error("{}: cannot check its permissions: {source}", .path.display())]
    Stat { path: PathBuf, source: std::io::Error },
    #[error("{}: a certificate with role {found}, expected {expected} (is it another party's certificate?)", .path.display())]
    WrongRole {
        path: PathBuf,
        found: String,
        expected: String,
    },
    #[error("{}: its extended key usage lacks {expected}, which a {role} certificate needs", .path.display())]
    WrongUsage {
        path: PathBuf,
        role: CertRole,
        expected: &'static str,
    },
    #[error("{}: the certificate cannot be read: {message}", .path.display())]
    Unreadable { path: PathBuf, message: String },
}

/// Checks the modes of `paths`' key and of the directories holding its files.
///
/// A file or directory that does not exist is left to the load after this check, whose
/// error says which certificate file is missing.
pub fn check_modes(paths: &CertPaths) -> Result<(), StrictError> {
    if let Some(mode) = mode_of(&paths.key)?
        && mode & 0o077 != 0
    {
        return Err(StrictError::KeyTooOpen {
            path: paths.key.clone(),
            mode,
        });
    }
    let dirs: BTreeSet<&Path> = [&paths.ca, &paths.cert, &paths.key]
        .iter()
        .filter_map(|p| p.parent())
        .map(|d| if d.as_os_str().is_empty() { Path::new(".") } else { d })
        .collect();
    for dir in dirs {
        if let Some(mode) = mode_of(dir)?
            && mode & 0o002 != 0
        {
            return Err(StrictError::WritableDir {
                path: dir.to_path_buf(),
                mode,
            });
        }
    }
    Ok(())
}

/// Checks that the leaf certificate (first in `path`) has one of `roles` and the
/// extended key usage that role is issued with.
pub fn check_role(path: &Path, leaf: &CertificateDer<'_>, roles: &[CertRole]) -> Result<(), StrictError> {
    let unreadable = |message: String| StrictError::Unreadable {
        path: path.to_path_buf(),
        message,
    };
    let identity = identity_from_der(leaf).map_err(|e| unreadable(e.to_string()))?;
    if !roles.contains(&identity.role) {
        return Err(StrictError::WrongRole {
            path: path.to_path_buf(),
            found: identity.role.to_string(),
            expected: roles.iter().map(ToString::to_string).collect::<Vec<_>>().join(" or "),
        });
    }
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf.as_ref()).map_err(|e| unreadable(e.to_string()))?;
    let (server, client) = parsed
        .extensions()
        .iter()
        .find_map(|ext| match ext.parsed_extension() {
            ParsedExtension::ExtendedKeyUsage(eku) => Some((eku.server_auth, eku.client_auth)),
            _ => None,
        })
        .unwrap_or((false, false));
    let (has, expected) = match identity.role {
        CertRole::Planner => (server, "TLS server authentication"),
        CertRole::Agent | CertRole::Admin | CertRole::User => (client, "TLS client authentication"),
    };
    if !has {
        return Err(StrictError::WrongUsage {
            path: path.to_path_buf(),
            role: identity.role,
            expected,
        });
    }
    Ok(())
}

/// The permission bits of `path`; `None` when it does not exist.
fn mode_of(path: &Path) -> Result<Option<u32>, StrictError> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some(m.permissions().mode() & 0o7777)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(StrictError::Stat {
            path: path.to_path_buf(),
            source,
        }),
    }
}
