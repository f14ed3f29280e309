//! Checking a peer's [`Hello`] against its certificate, and the QUIC close codes a
//! refusal uses: the rules every daemon applies to a connection's first frame.

use crate::identity::{CertRole, Identity};
use crate::messages::{Hello, PROTOCOL_VERSION};

/// QUIC application close codes: why a connection was closed (the reason text says more).
pub mod close {
    /// Done, nothing wrong.
    pub const NORMAL: u32 = 0;
    /// A malformed, oversized or unexpected frame.
    pub const PROTOCOL: u32 = 1;
    /// A protocol version this side does not speak.
    pub const VERSION: u32 = 2;
    /// The peer claimed something its certificate does not grant.
    pub const REFUSED: u32 = 3;
    /// This side is shutting down.
    pub const SHUTDOWN: u32 = 4;
    /// The agent has obeyed a newer planner epoch than this planner's: retrying will not
    /// help until one of them changes (the agent backs off and says so once).
    pub const STALE_EPOCH: u32 = 5;
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HelloError {
    #[error("protocol version {theirs} is not spoken here (this side speaks {ours})")]
    Version { theirs: u32, ours: u32 },
    #[error("hello says role {claimed:?} but the certificate grants {granted}")]
    Role {
        claimed: crate::messages::Role,
        granted: CertRole,
    },
    #[error("hello says name {claimed:?} but the certificate names {certified:?}")]
    Name { claimed: String, certified: String },
    /// An agent's name is a node name everywhere after this: it must follow the rule.
    #[error("bad node name in the hello: {0}")]
    BadNodeName(#[from] hyperplan_shared::names::NameError),
}

impl HelloError {
    /// The close code for this refusal.
    pub fn close_code(&self) -> u32 {
        match self {
            Self::Version { .. } => close::VERSION,
            Self::Role { .. } | Self::Name { .. } | Self::BadNodeName(_) => close::REFUSED,
        }
    }
}

/// Accepts `hello` from the peer whose certificate says `identity`: same protocol
/// version, the role the certificate grants, the certificate's name, and for an agent a
/// node name that follows the rule of `hyperplan_shared::names`.
pub fn check_hello(hello: &Hello, identity: &Identity) -> Result<(), HelloError> {
    if hello.version != PROTOCOL_VERSION {
        return Err(HelloError::Version {
            theirs: hello.version,
            ours: PROTOCOL_VERSION,
        });
    }
    if hello.role != identity.role.wire_role() {
        return Err(HelloError::Role {
            claimed: hello.role,
            granted: identity.role,
        });
    }
    if hello.role == crate::messages::Role::Agent {
        hyperplan_shared::names::check_name(hyperplan_shared::names::NameKind::Node, &hello.name)?;
    }
    if hello.name != identity.name {
        return Err(HelloError::Name {
            claimed: hello.name.clone(),
            certified: identity.name.clone(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::messages::Role;

    fn agent(name: &str) -> Identity {
        Identity {
            name: name.into(),
            role: CertRole::Agent,
        }
    }

    #[test]
    fn matching_hello_is_accepted() {
        check_hello(&Hello::new(Role::Agent, "n1"), &agent("n1")).unwrap();
        let bob = Identity {
            name: "bob".into(),
            role: CertRole::User,
        };
        check_hello(&Hello::new(Role::Client, "bob"), &bob).unwrap();
    }

    #[test]
    fn mismatches_are_refused_with_their_code() {
        let other_node = check_hello(&Hello::new(Role::Agent, "n2"), &agent("n1")).unwrap_err();
        assert_eq!(other_node.close_code(), close::REFUSED);
        assert!(other_node.to_string().contains("n2") && other_node.to_string().contains("n1"));
        let as_client = check_hello(&Hello::new(Role::Client, "n1"), &agent("n1")).unwrap_err();
        assert!(matches!(as_client, HelloError::Role { .. }));
        let future = Hello {
            version: PROTOCOL_VERSION + 1,
            ..Hello::new(Role::Agent, "n1")
        };
        let err = check_hello(&future, &agent("n1")).unwrap_err();
        assert_eq!(err.close_code(), close::VERSION);
    }

    /// Issue 12 item 8: an agent's node name follows the name rule even when its
    /// certificate carries the bad name (certificates made elsewhere, or before the rule).
    #[test]
    fn an_agent_with_a_bad_node_name_is_refused() {
        for name in ["n1\u{1b}[2J", "../../etc/passwd", "", "evil\u{202e}1"] {
            let err = check_hello(&Hello::new(Role::Agent, name), &agent(name)).unwrap_err();
            assert_eq!(err.close_code(), close::REFUSED, "{name:?}");
            assert!(
                err.to_string()
                    .starts_with("bad node name in the hello: expected a node name"),
                "{err}"
            );
            assert!(!err.to_string().contains('\u{1b}'), "{err}");
        }
    }
}
