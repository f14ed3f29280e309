//! Frames over async readers: oversized lengths refused before any allocation, garbage
//! and truncation reported, clean end of stream seen as `None`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::pin::Pin;
use std::task::{Context, Poll};

use hyperplan_net::frame::{self, DEFAULT_MAX_FRAME, FrameError, read_frame, write_frame};
use hyperplan_net::messages::{Hello, Role};
use tokio::io::{AsyncRead, ReadBuf};

/// Yields a fixed prefix, then fails the test if asked for more.
struct PrefixOnly {
    bytes: [u8; 4],
    sent: usize,
}

impl AsyncRead for PrefixOnly {
    fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        assert!(self.sent < 4, "read past the length prefix of an oversized frame");
        let n = buf.remaining().min(4 - self.sent);
        let start = self.sent;
        buf.put_slice(&self.bytes[start..start + n]);
        self.sent += n;
        Poll::Ready(Ok(()))
    }
}

#[tokio::test]
async fn oversized_declared_length_is_refused_before_reading_the_body() {
    let mut reader = PrefixOnly {
        bytes: u32::MAX.to_be_bytes(),
        sent: 0,
    };
    let err = read_frame::<Hello, _>(&mut reader, DEFAULT_MAX_FRAME)
        .await
        .unwrap_err();
    assert!(matches!(err, FrameError::Oversized { len, max } if len == u32::MAX as usize && max == DEFAULT_MAX_FRAME));

    let mut reader = PrefixOnly {
        bytes: 1025u32.to_be_bytes(),
        sent: 0,
    };
    let err = read_frame::<Hello, _>(&mut reader, 1024).await.unwrap_err();
    assert!(matches!(err, FrameError::Oversized { len: 1025, max: 1024 }), "{err}");
    assert!(err.to_string().contains("1025"), "{err}");
}

#[tokio::test]
async fn a_lying_length_does_not_allocate_it_up_front() {
    // A 4 GiB declared length with an unlimited max: the body buffer grows only with
    // the 3 bytes that arrive, then the stream ends mid-frame.
    let mut bytes = u32::MAX.to_be_bytes().to_vec();
    bytes.extend_from_slice(b"abc");
    let err = read_frame::<Hello, _>(&mut bytes.as_slice(), usize::MAX)
        .await
        .unwrap_err();
    assert!(matches!(err, FrameError::Truncated), "{err}");
}

#[tokio::test]
async fn garbage_is_malformed() {
    for body in [
        &b"\xc1"[..],
        b"\xff\xfe\xfd\xfc",
        b"not messagepack at all",
        b"\x81\xa1x\x01",
    ] {
        let mut bytes = (body.len() as u32).to_be_bytes().to_vec();
        bytes.extend_from_slice(body);
        let err = read_frame::<Hello, _>(&mut bytes.as_slice(), DEFAULT_MAX_FRAME)
            .await
            .unwrap_err();
        assert!(matches!(err, FrameError::Malformed(_)), "{body:?}: {err}");
    }
    // An empty body is no message either.
    let err = read_frame::<Hello, _>(&mut &[0u8, 0, 0, 0][..], DEFAULT_MAX_FRAME)
        .await
        .unwrap_err();
    assert!(matches!(err, FrameError::Malformed(_)), "{err}");
}

#[tokio::test]
async fn truncation_is_reported() {
    let frame = frame::encode(&Hello::new(Role::Agent, "n001"), DEFAULT_MAX_FRAME).unwrap();
    for cut in [1, 3, 4, 5, frame.len() - 1] {
        let err = read_frame::<Hello, _>(&mut &frame[..cut], DEFAULT_MAX_FRAME)
            .await
            .unwrap_err();
        assert!(matches!(err, FrameError::Truncated), "cut at {cut}: {err}");
    }
}

#[tokio::test]
async fn clean_end_of_stream_is_none() {
    assert!(
        read_frame::<Hello, _>(&mut &[][..], DEFAULT_MAX_FRAME)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn frames_back_to_back() {
    let (mut a, mut b) = tokio::io::duplex(64);
    let hellos: Vec<Hello> = (0..50).map(|i| Hello::new(Role::Client, format!("user{i}"))).collect();
    let writer = {
        let hellos = hellos.clone();
        tokio::spawn(async move {
            for h in &hellos {
                write_frame(&mut a, h, DEFAULT_MAX_FRAME).await.unwrap();
            }
        })
    };
    for h in &hellos {
        assert_eq!(
            read_frame::<Hello, _>(&mut b, DEFAULT_MAX_FRAME)
                .await
                .unwrap()
                .as_ref(),
            Some(h)
        );
    }
    writer.await.unwrap();
    assert!(
        read_frame::<Hello, _>(&mut b, DEFAULT_MAX_FRAME)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn write_refuses_oversized() {
    let mut sink = Vec::new();
    let big = Hello::new(Role::Client, "x".repeat(2000));
    let err = write_frame(&mut sink, &big, 1000).await.unwrap_err();
    assert!(matches!(err, FrameError::Oversized { max: 1000, .. }), "{err}");
    assert!(sink.is_empty());
}
