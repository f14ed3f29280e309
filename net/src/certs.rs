//! The cluster CA and the certificates it issues, as files in one directory:
//!
//! ```text
//! D/ca.pem  D/ca.key              the cluster CA (the key never leaves this machine)
//! D/planner.pem  D/planner.key    the planner's server certificate
//! D/nodes/<node>.pem  .key        one agent certificate per node
//! D/users/<user>.pem  .key        one client certificate per person
//! ```
//!
//! Identity lives in the subject: CN = node or user name, OU = role (see
//! `identity`). Keys are written 0600 and directories 0700; files are written to a
//! temporary name and renamed, so a reader never sees half a key.

use std::fs;
use std::net::IpAddr;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

use crate::identity::CertRole;

/// The TLS server name in the planner's certificate; clients always connect with it, so
/// the planner's real host names do not matter to them.
pub const PLANNER_SERVER_NAME: &str = "hyperplan-planner";

/// Longest node or user name (a DNS name's limit).
pub const MAX_NAME_LEN: usize = 253;

const CA_COMMON_NAME: &str = "hyperplan cluster CA";
const ORGANIZATION: &str = "hyperplan";
const CA_YEARS: i64 = 10;
const LEAF_YEARS: i64 = 5;

/// Where one party's certificate material lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertPaths {
    /// The cluster CA certificate, to check the other side against.
    pub ca: PathBuf,
    /// This party's certificate.
    pub cert: PathBuf,
    /// This party's private key.
    pub key: PathBuf,
}

impl CertPaths {
    /// The CA's own certificate and key (`cert` and `ca` are the same file).
    pub fn ca(dir: &Path) -> Self {
        Self {
            ca: dir.join("ca.pem"),
            cert: dir.join("ca.pem"),
            key: dir.join("ca.key"),
        }
    }

    pub fn planner(dir: &Path) -> Self {
        Self {
            ca: dir.join("ca.pem"),
            cert: dir.join("planner.pem"),
            key: dir.join("planner.key"),
        }
    }

    pub fn node(dir: &Path, node: &str) -> Self {
        let nodes = dir.join("nodes");
        Self {
            ca: dir.join("ca.pem"),
            cert: nodes.join(format!("{node}.pem")),
            key: nodes.join(format!("{node}.key")),
        }
    }

    pub fn user(dir: &Path, user: &str) -> Self {
        let users = dir.join("users");
        Self {
            ca: dir.join("ca.pem"),
            cert: users.join(format!("{user}.pem")),
            key: users.join(format!("{user}.key")),
        }
    }
}

/// The role of a person's certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserRole {
    Admin,
    User,
}

impl From<UserRole> for CertRole {
    fn from(role: UserRole) -> Self {
        match role {
            UserRole::Admin => CertRole::Admin,
            UserRole::User => CertRole::User,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("invalid {kind} name {name:?}: {reason}")]
    InvalidName {
        kind: &'static str,
        name: String,
        reason: String,
    },
    #[error(
        "a cluster CA already exists at {}; pass --force to replace it (every certificate it issued stops working)",
        .0.display()
    )]
    CaExists(PathBuf),
    #[error("cannot read the cluster CA {}: {source}; run `hyperplan certs init --dir {}` first", .path.display(), .dir.display())]
    NoCa {
        dir: PathBuf,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the cluster CA in {} is unusable: {reason}", .path.display())]
    BadCa { path: PathBuf, reason: String },
    #[error("cannot write {}: {source}", .path.display())]
    Write { path: PathBuf, source: std::io::Error },
    #[error("cannot make a certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

/// Checks a node or user name: `[A-Za-z0-9._-]+`, at most 253 characters, not `.`/`..`.
/// These names become file names and certificate subjects.
pub fn validate_name(kind: &'static str, name: &str) -> Result<(), CertError> {
    let invalid = |reason: String| CertError::InvalidName {
        kind,
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("it is empty".into()));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(invalid(format!(
            "it is {} characters long, the maximum is {MAX_NAME_LEN}",
            name.len()
        )));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(invalid(format!(
            "{c:?} is not allowed (use letters, digits, '.', '_' and '-')"
        )));
    }
    if name == "." || name == ".." {
        return Err(invalid("it is a path component".into()));
    }
    Ok(())
}

/// Makes the cluster CA: `ca.pem` and `ca.key` (0600) in `dir`. Refuses to replace an
/// existing CA unless `force`.
pub fn init_ca(dir: &Path, force: bool) -> Result<CertPaths, CertError> {
    let paths = CertPaths::ca(dir);
    if !force {
        for existing in [&paths.cert, &paths.key] {
            if existing.exists() {
                return Err(CertError::CaExists(existing.clone()));
            }
        }
    }
    let mut params = CertificateParams::default();
    params.distinguished_name = subject(CA_COMMON_NAME, None);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(&mut params, CA_YEARS);
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    make_dir(dir)?;
    write_file(&paths.key, key.serialize_pem().as_bytes(), 0o600)?;
    write_file(&paths.cert, cert.pem().as_bytes(), 0o644)?;
    Ok(paths)
}

/// Issues an agent certificate for `node`: `nodes/<node>.pem` and `.key`.
pub fn issue_node(dir: &Path, node: &str) -> Result<CertPaths, CertError> {
    validate_name("node", node)?;
    issue(dir, CertPaths::node(dir, node), node, CertRole::Agent, Vec::new())
}

/// Issues a client certificate for a person: `users/<user>.pem` and `.key`.
pub fn issue_user(dir: &Path, user: &str, role: UserRole) -> Result<CertPaths, CertError> {
    validate_name("user", user)?;
    issue(dir, CertPaths::user(dir, user), user, role.into(), Vec::new())
}

/// Issues the planner's server certificate: `planner.pem` and `.key`, valid for
/// [`PLANNER_SERVER_NAME`], `localhost`, `127.0.0.1`, `::1` and each of `hosts` (DNS
/// names or IP addresses).
pub fn issue_planner(dir: &Path, hosts: &[String]) -> Result<CertPaths, CertError> {
    let mut names: Vec<String> = vec![
        PLANNER_SERVER_NAME.into(),
        "localhost".into(),
        "127.0.0.1".into(),
        "::1".into(),
    ];
    for host in hosts {
        validate_host(host)?;
        if !names.contains(host) {
            names.push(host.clone());
        }
    }
    let sans = names
        .into_iter()
        .map(|n| match n.parse::<IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => Ok(SanType::DnsName(n.try_into()?)),
        })
        .collect::<Result<Vec<_>, rcgen::Error>>()?;
    issue(
        dir,
        CertPaths::planner(dir),
        PLANNER_SERVER_NAME,
        CertRole::Planner,
        sans,
    )
}

fn issue(dir: &Path, paths: CertPaths, name: &str, role: CertRole, sans: Vec<SanType>) -> Result<CertPaths, CertError> {
    let ca_paths = CertPaths::ca(dir);
    let read_ca = |path: &Path| {
        fs::read_to_string(path).map_err(|source| CertError::NoCa {
            dir: dir.to_owned(),
            path: path.to_owned(),
            source,
        })
    };
    let ca_key_pem = read_ca(&ca_paths.key)?;
    let ca_cert_pem = read_ca(&ca_paths.cert)?;
    let ca_key = KeyPair::from_pem(&ca_key_pem).map_err(|e| CertError::BadCa {
        path: ca_paths.key.clone(),
        reason: format!("not a private key: {e}"),
    })?;
    let issuer = Issuer::from_ca_cert_pem(&ca_cert_pem, ca_key).map_err(|e| CertError::BadCa {
        path: ca_paths.cert.clone(),
        reason: format!("not a certificate: {e}"),
    })?;

    let mut params = CertificateParams::default();
    params.distinguished_name = subject(name, Some(role));
    params.subject_alt_names = sans;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![match role {
        CertRole::Planner => ExtendedKeyUsagePurpose::ServerAuth,
        CertRole::Agent | CertRole::Admin | CertRole::User => ExtendedKeyUsagePurpose::ClientAuth,
    }];
    params.use_authority_key_identifier_extension = true;
    set_validity(&mut params, LEAF_YEARS);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;

    if let Some(parent) = paths.cert.parent() {
        make_dir(parent)?;
    }
    write_file(&paths.key, key.serialize_pem().as_bytes(), 0o600)?;
    write_file(&paths.cert, cert.pem().as_bytes(), 0o644)?;
    Ok(paths)
}

fn subject(common_name: &str, role: Option<CertRole>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, ORGANIZATION);
    if let Some(role) = role {
        dn.push(DnType::OrganizationalUnitName, role.as_str());
    }
    dn.push(DnType::CommonName, common_name);
    dn
}

fn set_validity(params: &mut CertificateParams, years: i64) {
    let now = OffsetDateTime::now_utc();
    // An hour back tolerates clocks a little behind the CA's machine.
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(365 * years);
}

/// Checks a planner host for its certificate: an IP address or a DNS name.
pub fn validate_host(host: &str) -> Result<(), CertError> {
    if host.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    let invalid = |reason: &str| CertError::InvalidName {
        kind: "planner host",
        name: host.to_owned(),
        reason: reason.into(),
    };
    if host.is_empty() || host.len() > MAX_NAME_LEN {
        return Err(invalid("a DNS name has 1 to 253 characters"));
    }
    if !host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'))
    {
        return Err(invalid(
            "not an IP address, and a DNS name has only letters, digits, '.' and '-'",
        ));
    }
    if host.starts_with(['.', '-']) || host.ends_with(['.', '-']) || host.contains("..") {
        return Err(invalid(
            "a DNS name neither starts nor ends with '.' or '-' and has no empty label",
        ));
    }
    Ok(())
}

fn make_dir(dir: &Path) -> Result<(), CertError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| CertError::Write {
            path: dir.to_owned(),
            source,
        })
}

/// Writes `contents` whole with `mode` (see [`crate::atomic`]).
fn write_file(path: &Path, contents: &[u8], mode: u32) -> Result<(), CertError> {
    crate::atomic::write_atomic(path, contents, mode).map_err(|source| CertError::Write {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn names() {
        for ok in ["n001", "gpu-node.rack1", "a_b", "A.B-C_d9", &"x".repeat(253)] {
            validate_name("node", ok).unwrap();
        }
        for bad in ["", ".", "..", "a/b", "a b", "é", "n\n", &"x".repeat(254)] {
            let err = validate_name("node", bad).unwrap_err();
            assert!(err.to_string().starts_with("invalid node name"), "{err}");
        }
    }

    #[test]
    fn hosts() {
        for ok in ["10.0.0.1", "::1", "head", "head.cluster.example"] {
            validate_host(ok).unwrap();
        }
        for bad in ["", "a_b", ".x", "x.", "a..b", "-a", "a b"] {
            assert!(validate_host(bad).is_err(), "{bad}");
        }
    }
}
