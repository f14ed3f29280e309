//! hyperplan's transport: what the agent, the planner and the CLI send each other and
//! how. QUIC (quinn) with mutual TLS against a cluster CA, one MessagePack message per
//! length-prefixed frame.
//!
//! - [`messages`]: the wire messages and the topology hash.
//! - [`frame`]: length-prefixed frames with a maximum size.
//! - [`certs`]: the cluster CA and the certificates it issues (`hyperplan certs`).
//! - [`atomic`]: writing a file whole or not at all, with its mode.
//! - [`tls`]: rustls configs and quinn endpoints.
//! - [`identity`]: a peer's name and role, from its certificate.
//! - [`revocation`]: `revoked.txt`, the certificates the planner refuses.
//! - [`strict`]: ssh-like checks of a party's own key, directories and certificate role.
//! - [`hello`]: checking a peer's first frame against its certificate; close codes.
//! - [`http`]: the HTTP/1.1 server of `/metrics` and the web view.

pub mod atomic;
pub mod certs;
pub mod frame;
pub mod hello;
pub mod http;
pub mod identity;
pub mod messages;
pub mod notify;
pub mod revocation;
pub mod strict;
pub mod tls;

pub use frame::{DEFAULT_MAX_FRAME, FrameError, read_frame, write_frame};
pub use hello::{HelloError, check_hello};
pub use identity::{CertRole, Identity, IdentityError, peer_identity};
pub use messages::{PROTOCOL_VERSION, Role, topology_hash};
pub use tls::{ALPN, TlsError, TlsMaterial, client_endpoint, connect, server_endpoint};
