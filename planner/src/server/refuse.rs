//! Turning a peer away: the one way every part of the server ends a connection it will
//! not serve. Its own module so the handshake and the agent and client sessions it hands
//! connections to can all use it without importing each other.

/// Refuses the connection: a log line with the peer address and why (the same reason
/// from many peers: one line a minute and a count, see `quiet`), and a close frame
/// carrying the reason.
pub fn refuse(conn: &quinn::Connection, code: u32, reason: &str) {
    super::quiet::warn_limited!(format!("refused: {reason}"), peer = %conn.remote_address(), "refused: {reason}");
    conn.close(quinn::VarInt::from_u32(code), reason.as_bytes());
}
