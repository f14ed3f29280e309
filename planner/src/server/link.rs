//! A connection as the server ends it: [`LinkControl`] closes it and names its peer (a
//! QUIC connection in the daemon, a fake in the driver's tests), and [`refuse`] is the one
//! way every part of the server turns a peer away. Its own module so the handshake, the
//! agent and client sessions and the driver can all use it without importing each other.

use std::net::SocketAddr;

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

/// Refuses the connection: a log line with the peer address and why (the same reason
/// from many peers: one line a minute and a count, see `quiet`), and a close frame
/// carrying the reason.
pub fn refuse(conn: &dyn LinkControl, code: u32, reason: &str) {
    crate::metrics::refused(match code {
        super::close::PROTOCOL => "protocol",
        super::close::VERSION => "version",
        super::close::REFUSED => "refused",
        super::close::STALE_EPOCH => "stale_epoch",
        _ => "other",
    });
    super::quiet::warn_limited!(format!("refused: {reason}"), peer = %conn.peer(), "refused: {reason}");
    conn.close(code, reason);
}
