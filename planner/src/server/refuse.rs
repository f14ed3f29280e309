//! Turning a peer away: the one way every part of the server ends a connection it will
//! not serve. Its own module so the handshake and the agent and client sessions it hands
//! connections to can all use it without importing each other.

/// Refuses the connection: a log line with the peer address and why, and a close frame
/// carrying the reason.
pub fn refuse(conn: &quinn::Connection, code: u32, reason: &str) {
    tracing::warn!(peer = %conn.remote_address(), "refused: {reason}");
    conn.close(quinn::VarInt::from_u32(code), reason.as_bytes());
}
