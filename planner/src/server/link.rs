//! A connection as the server ends it: [`refuse`] is the one way every part of the
//! server turns a peer away, through its [`LinkControl`] (a QUIC connection in the
//! daemon, a fake in the driver's tests; see `inbox::link`). Its own module so the
//! handshake, the agent and client sessions and the driver can all use it without
//! importing each other.

use super::inbox::LinkControl;

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
