//! [`LinkDown`]: why one attempt or session with the planner ended. The run loop logs it,
//! shows it in systemd's STATUS, sends it as the QUIC close reason, and tries again (the
//! leader next, after [`LinkDown::NotLeader`]; else the next planner on the list).

use std::net::SocketAddr;

use hyperplan_net::frame::FrameError;
use hyperplan_net::messages::{PROTOCOL_VERSION, Role};
use hyperplan_net::tls::TlsError;

/// Why the link to the planner is down, as one sentence for the log. Messages carry their
/// cause inline (no error source), as the log line and the close reason are all a person
/// sees; none of these stops the agent, they only make it reconnect.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LinkDown {
    #[error("cannot resolve {planner}: {error}")]
    Resolve { planner: String, error: std::io::Error },
    #[error("{planner} resolves to no address")]
    NoAddress { planner: String },
    /// No UDP socket or TLS client config for the planner's address family.
    #[error("{0}")]
    Endpoint(TlsError),
    /// The QUIC + TLS handshake failed.
    #[error("{0}")]
    Connect(TlsError),
    /// A QUIC client hears nothing back from a closed UDP port: the planner is not there.
    #[error("no answer from {addr} within {secs} s")]
    ConnectTimeout { addr: SocketAddr, secs: u64 },
    #[error("the planner did not register us within {secs} s")]
    RegisterTimeout { secs: u64 },
    #[error("cannot open a stream: {0}")]
    OpenStream(quinn::ConnectionError),
    #[error("sending hello: {0}")]
    SendHello(FrameError),
    #[error("reading the planner's hello: {0}")]
    ReadHello(FrameError),
    #[error("the planner ended the stream before its hello")]
    NoHello,
    #[error("the peer says it is a {0:?}, not the planner")]
    NotPlanner(Role),
    #[error("the planner speaks protocol version {theirs}, this agent {}", PROTOCOL_VERSION)]
    Version { theirs: u32 },
    #[error("sending Register: {0}")]
    SendRegister(FrameError),
    #[error("waiting for Registered: {0}")]
    ReadRegistered(FrameError),
    #[error("the planner ended the stream instead of answering Register")]
    NoRegistered,
    /// The planner answered Register with another message (its kind).
    #[error("expected Registered, the planner sent {0}")]
    NotRegistered(&'static str),
    /// A standby answered Register: the leader is elsewhere (`leader`, when one leads).
    #[error("{planner} is a standby; {}", match leader {
        Some(leader) => format!("the leader is {leader}"),
        None => "no leader yet (an election is under way)".to_string(),
    })]
    NotLeader { planner: String, leader: Option<String> },
    /// A planner older than one this node has seen (a deposed leader, an old process).
    #[error(
        "the planner's epoch {theirs} is older than epoch {ours} this node has seen: a newer planner leads, or this planner's store was replaced by an older one; not taking its orders (restore the newest store with `hyperplan-planner state import`, or if the old state is gone for good remove `epoch` in this agent's state directory)"
    )]
    StaleEpoch { theirs: u64, ours: u64 },
    #[error("sending heartbeat {seq}: {error}")]
    SendHeartbeat { seq: u64, error: FrameError },
    #[error("sending TopologyChanged: {0}")]
    SendTopology(FrameError),
    #[error("sending a task report: {0}")]
    SendReport(FrameError),
    #[error("the planner ended the stream")]
    StreamEnded,
    #[error("reading from the planner: {0}")]
    Read(FrameError),
    #[error("the reader task failed: {0}")]
    ReaderTask(tokio::task::JoinError),
    /// The connection was closed, by the planner (with its reason) or the network: this
    /// says more than the stream error it caused, so it replaces it.
    #[error("{0}")]
    Closed(quinn::ConnectionError),
}

impl LinkDown {
    /// This agent and the planner disagree on epochs (this agent saw it, or the planner
    /// refused it for that): retrying changes nothing until one of them changes, so the
    /// run loop backs off and says it once per change, not once per retry.
    pub(crate) fn is_stale_epoch(&self) -> bool {
        match self {
            Self::StaleEpoch { .. } => true,
            Self::Closed(quinn::ConnectionError::ApplicationClosed(close)) => {
                close.error_code == quinn::VarInt::from_u32(hyperplan_net::hello::close::STALE_EPOCH)
            }
            _ => false,
        }
    }
}
