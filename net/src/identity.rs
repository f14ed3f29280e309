//! Who a peer is, read from its certificate subject: CN = node or user name,
//! OU = role (`agent`, `admin`, `user`, `planner`).
//!
//! The TLS layer has already checked the certificate chains to the cluster CA; this
//! only reads the names. The daemons then check the identity against what the peer
//! claims (its `Hello`, an agent's `Register`).

use std::fmt;
use std::str::FromStr;

use rustls_pki_types::CertificateDer;

use crate::messages::Role;

/// The role a certificate grants, from its subject OU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CertRole {
    /// A node's agent.
    Agent,
    /// A person who may act on every job.
    Admin,
    /// A person who may act on their own jobs.
    User,
    Planner,
}

impl CertRole {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::Admin => "admin",
            Self::User => "user",
            Self::Planner => "planner",
        }
    }

    /// The role the peer must announce in its `Hello`.
    pub fn wire_role(self) -> Role {
        match self {
            Self::Agent => Role::Agent,
            Self::Admin | Self::User => Role::Client,
            Self::Planner => Role::Planner,
        }
    }
}

impl fmt::Display for CertRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CertRole {
    type Err = IdentityError;
    fn from_str(s: &str) -> Result<Self, IdentityError> {
        match s {
            "agent" => Ok(Self::Agent),
            "admin" => Ok(Self::Admin),
            "user" => Ok(Self::User),
            "planner" => Ok(Self::Planner),
            other => Err(IdentityError::UnknownRole(other.to_owned())),
        }
    }
}

/// A peer's name and role, as its certificate states them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    pub name: String,
    pub role: CertRole,
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.role)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("the peer presented no certificate")]
    NoCertificate,
    #[error("the peer's certificate cannot be parsed: {0}")]
    Parse(String),
    #[error("the peer's certificate subject has no {0}")]
    Missing(&'static str),
    #[error("the peer's certificate subject has more than one {0}")]
    Ambiguous(&'static str),
    #[error("unknown role {0:?} in the certificate subject OU (expected agent, admin, user or planner)")]
    UnknownRole(String),
}

/// The identity in a DER certificate's subject.
pub fn identity_from_der(cert: &CertificateDer<'_>) -> Result<Identity, IdentityError> {
    let (_, parsed) =
        x509_parser::parse_x509_certificate(cert.as_ref()).map_err(|e| IdentityError::Parse(e.to_string()))?;
    let subject = parsed.subject();
    let name = single(subject.iter_common_name(), "CN")?;
    let role = single(subject.iter_organizational_unit(), "OU")?.parse()?;
    Ok(Identity { name, role })
}

/// The identity of the other end of a QUIC connection (its first certificate).
pub fn peer_identity(connection: &quinn::Connection) -> Result<Identity, IdentityError> {
    let any = connection.peer_identity().ok_or(IdentityError::NoCertificate)?;
    let chain = any
        .downcast::<Vec<CertificateDer<'static>>>()
        .map_err(|_| IdentityError::NoCertificate)?;
    let leaf = chain.first().ok_or(IdentityError::NoCertificate)?;
    identity_from_der(leaf)
}

fn single<'a, 'b: 'a>(
    mut values: impl Iterator<Item = &'a x509_parser::x509::AttributeTypeAndValue<'b>>,
    what: &'static str,
) -> Result<String, IdentityError> {
    let first = values.next().ok_or(IdentityError::Missing(what))?;
    if values.next().is_some() {
        return Err(IdentityError::Ambiguous(what));
    }
    first
        .as_str()
        .map(str::to_owned)
        .map_err(|e| IdentityError::Parse(format!("{what}: {e}")))
}
