//! Length-prefixed frames: a 4-byte big-endian body length, then a MessagePack body
//! (rmp-serde, named fields). One message per frame.
//!
//! The declared length is checked against the maximum before any buffer is sized, and
//! the body buffer grows only as bytes actually arrive: a peer cannot make us allocate
//! by lying about a length. Bad bytes are errors, never panics.

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Default largest body accepted or sent: 16 MiB (a full topology is a few hundred KiB).
pub const DEFAULT_MAX_FRAME: usize = 16 * 1024 * 1024;

/// Bytes of the length prefix.
pub const PREFIX_LEN: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {len} bytes is larger than the maximum of {max} bytes")]
    Oversized { len: usize, max: usize },
    #[error("connection ended in the middle of a frame")]
    Truncated,
    #[error("malformed frame: {0}")]
    Malformed(String),
    #[error("frame i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// One frame (prefix and body) for `value`; `Oversized` if the body exceeds `max`.
pub fn encode<T: Serialize + ?Sized>(value: &T, max: usize) -> Result<Vec<u8>, FrameError> {
    let body = rmp_serde::to_vec_named(value).map_err(|e| FrameError::Malformed(e.to_string()))?;
    let len = body.len();
    let declared = u32::try_from(len).map_err(|_| FrameError::Oversized { len, max })?;
    if len > max {
        return Err(FrameError::Oversized { len, max });
    }
    let mut frame = Vec::with_capacity(PREFIX_LEN + len);
    frame.extend_from_slice(&declared.to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// The message in one complete frame (prefix and body), as [`encode`] makes it. A
/// length running past the bytes is `Truncated`; bytes after the body are `Malformed`.
pub fn decode<T: DeserializeOwned>(frame: &[u8]) -> Result<T, FrameError> {
    let Some((prefix, rest)) = frame.split_first_chunk::<PREFIX_LEN>() else {
        return Err(FrameError::Truncated);
    };
    let len = declared_len(*prefix);
    match rest.len().cmp(&len) {
        std::cmp::Ordering::Less => Err(FrameError::Truncated),
        std::cmp::Ordering::Greater => Err(FrameError::Malformed(format!(
            "{} bytes after a {len}-byte frame",
            rest.len() - len
        ))),
        std::cmp::Ordering::Equal => decode_body(rest),
    }
}

/// The message in a frame body (no prefix); the whole body must be one message.
pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, FrameError> {
    let mut de = rmp_serde::Deserializer::new(body);
    let value = T::deserialize(&mut de).map_err(|e| FrameError::Malformed(e.to_string()))?;
    let trailing = de.get_ref().len();
    if trailing != 0 {
        return Err(FrameError::Malformed(format!(
            "{trailing} bytes left after the message"
        )));
    }
    Ok(value)
}

/// Reads one frame. `Ok(None)` on a clean end of stream before a frame starts.
pub async fn read_frame<T, R>(reader: &mut R, max: usize) -> Result<Option<T>, FrameError>
where
    T: DeserializeOwned,
    R: AsyncRead + Unpin + ?Sized,
{
    let mut prefix = [0u8; PREFIX_LEN];
    let mut filled = 0;
    while filled < PREFIX_LEN {
        let n = reader.read(&mut prefix[filled..]).await?;
        if n == 0 {
            return if filled == 0 {
                Ok(None)
            } else {
                Err(FrameError::Truncated)
            };
        }
        filled += n;
    }
    let len = declared_len(prefix);
    if len > max {
        return Err(FrameError::Oversized { len, max });
    }
    // Grows with the bytes that arrive, never to the declared length up front.
    let mut body = Vec::with_capacity(len.min(64 * 1024));
    let read = reader.take(len as u64).read_to_end(&mut body).await?;
    if read < len {
        return Err(FrameError::Truncated);
    }
    decode_body(&body).map(Some)
}

/// Writes one frame and flushes it.
pub async fn write_frame<T, W>(writer: &mut W, value: &T, max: usize) -> Result<(), FrameError>
where
    T: Serialize + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
{
    let frame = encode(value, max)?;
    writer.write_all(&frame).await?;
    writer.flush().await?;
    Ok(())
}

fn declared_len(prefix: [u8; PREFIX_LEN]) -> usize {
    // u32 always fits usize on the 32- and 64-bit targets hyperplan runs on.
    usize::try_from(u32::from_be_bytes(prefix)).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::messages::{Hello, Role};

    #[test]
    fn encode_then_decode() {
        let hello = Hello::new(Role::Client, "alice");
        let frame = encode(&hello, DEFAULT_MAX_FRAME).unwrap();
        assert_eq!(declared_len(frame[..4].try_into().unwrap()), frame.len() - 4);
        assert_eq!(decode::<Hello>(&frame).unwrap(), hello);
    }

    #[test]
    fn encode_refuses_a_body_over_max() {
        let err = encode(&"x".repeat(100), 10).unwrap_err();
        assert!(matches!(err, FrameError::Oversized { max: 10, .. }), "{err}");
    }

    #[test]
    fn decode_short_or_long_input() {
        let frame = encode(&Hello::new(Role::Agent, "n1"), DEFAULT_MAX_FRAME).unwrap();
        assert!(matches!(decode::<Hello>(&frame[..2]), Err(FrameError::Truncated)));
        assert!(matches!(
            decode::<Hello>(&frame[..frame.len() - 1]),
            Err(FrameError::Truncated)
        ));
        let mut long = frame.clone();
        long.push(0);
        assert!(matches!(decode::<Hello>(&long), Err(FrameError::Malformed(_))));
    }

    #[test]
    fn garbage_body_is_malformed() {
        for body in [&[0xc1u8][..], &[0xff, 0xff, 0xff], b"hello world", &[0x92, 0x01]] {
            let mut frame = (body.len() as u32).to_be_bytes().to_vec();
            frame.extend_from_slice(body);
            assert!(
                matches!(decode::<Hello>(&frame), Err(FrameError::Malformed(_))),
                "{body:?}"
            );
        }
    }

    #[test]
    fn wrong_message_type_is_malformed() {
        let frame = encode(
            &crate::messages::PlannerToAgent::Kill {
                task: crate::messages::TaskRef {
                    job: "j".into(),
                    job_id: 1.into(),
                    task: "t".into(),
                    index: 0,
                },
                grace_secs: 10,
                epoch: 1,
                signal: None,
            },
            1024,
        )
        .unwrap();
        assert!(matches!(decode::<Hello>(&frame), Err(FrameError::Malformed(_))));
    }
}
