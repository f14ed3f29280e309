//! An agent's link as the driver holds it: a channel of frames to the agent and a
//! [`LinkControl`] to close the link and name its peer (a QUIC connection in the daemon,
//! a fake in the driver's tests).

use std::net::SocketAddr;
use std::sync::Arc;

use hyperplan_net::messages::PlannerToAgent;
use tokio::sync::mpsc;

/// How the server ends a connection and says whose it is.
pub trait LinkControl: Send + Sync + std::fmt::Debug {
    /// Closes the connection with an application close code and a reason the peer reads.
    fn close(&self, code: u32, reason: &str);
    /// Where the peer connects from.
    fn peer(&self) -> SocketAddr;
    /// The QUIC connection, to open streams on (`hyperplan exec`); a test's fake has none.
    fn quic(&self) -> Option<quinn::Connection> {
        None
    }
}

impl LinkControl for quinn::Connection {
    fn close(&self, code: u32, reason: &str) {
        quinn::Connection::close(self, quinn::VarInt::from_u32(code), reason.as_bytes());
    }

    fn peer(&self) -> SocketAddr {
        self.remote_address()
    }

    fn quic(&self) -> Option<quinn::Connection> {
        Some(self.clone())
    }
}

/// One agent link: frames go out on `frames` (the link's writer sends them in order).
#[derive(Debug, Clone)]
pub struct AgentLink {
    pub frames: mpsc::UnboundedSender<PlannerToAgent>,
    pub control: Arc<dyn LinkControl>,
}
