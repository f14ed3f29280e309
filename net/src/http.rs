//! A small HTTP/1.1 server (hyper) for what people and Prometheus read over HTTP: the
//! planner's and the agent's `/metrics`, and the planner's web view (over TLS, with a
//! client certificate optional: see [`web_tls_config`]). A handler is a plain async
//! function of the request and who sent it; the server bounds what a peer may cost:
//! at most [`MAX_CONNECTIONS`] at once, headers read within [`HEADER_TIMEOUT`], request
//! bodies never read. It stops accepting when `stopping` turns true.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::server::WebPkiClientVerifier;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, watch};

use crate::identity::{Identity, identity_from_der};
use crate::tls::{TlsError, TlsMaterial};

/// A response body: whole, or a stream (server-sent events).
pub type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// Connections served at once; more wait in the kernel's backlog.
pub const MAX_CONNECTIONS: usize = 256;

/// A peer must send its request headers within this.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Who sent a request: the address, and over TLS the client certificate's identity
/// (`None`: plain HTTP, or no certificate shown).
#[derive(Clone, Debug)]
pub struct Peer {
    pub addr: SocketAddr,
    pub identity: Option<Identity>,
}

/// A whole response.
pub fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(http_body_util::Full::new(body.into()).boxed());
    *r.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r.headers_mut().insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-store"),
    );
    r
}

/// A plain-text answer (errors, 404s).
pub fn text(status: StatusCode, body: impl Into<String>) -> Response<Body> {
    full(status, "text/plain; charset=utf-8", body.into())
}

/// A body fed by `rx`: each message is sent as it comes; the body ends when every
/// sender is gone.
pub fn stream(rx: mpsc::Receiver<Bytes>) -> Body {
    Body::new(Channel(rx))
}

struct Channel(mpsc::Receiver<Bytes>);

impl hyper::body::Body for Channel {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|m| m.map(|b| Ok(Frame::data(b))))
    }
}

/// Serves `handler` on `listener` (TLS when `tls` is given) until `stopping` is true.
pub async fn serve<H, F>(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    handler: H,
    mut stopping: watch::Receiver<bool>,
) where
    H: Fn(Request<Incoming>, Peer) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (tcp, addr) = tokio::select! {
            _ = async { let _ = stopping.wait_for(|s| *s).await; } => return,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors and the like: said, and tried again shortly.
                    tracing::warn!("http: accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let handler = handler.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let _permit = permit;
            match acceptor {
                None => {
                    let peer = Peer { addr, identity: None };
                    connection(TokioIo::new(tcp), peer, handler).await;
                }
                Some(acceptor) => {
                    let Ok(Ok(tls)) = tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(tcp)).await else {
                        return; // a failed or slow handshake: nothing to answer
                    };
                    let identity = tls
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .and_then(|c| identity_from_der(c).ok());
                    connection(TokioIo::new(tls), Peer { addr, identity }, handler).await;
                }
            }
        });
    }
}

async fn connection<I, H, F>(io: I, peer: Peer, handler: H)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    H: Fn(Request<Incoming>, Peer) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let (handler, peer) = (handler.clone(), peer.clone());
        async move { Ok::<_, Infallible>(handler(req, peer).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(64 * 1024)
        .serve_connection(io, service)
        .await;
}

/// The web view's TLS: the planner's certificate; a client certificate from the cluster
/// CA is asked for but not required (a reverse proxy holds a token instead). HTTP/1.1,
/// TLS 1.2 and 1.3 (browsers).
pub fn web_tls_config(material: &TlsMaterial) -> Result<rustls::ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in &material.ca {
        roots.add(cert.clone())?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(material.chain.clone(), material.key.clone_key())?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn answers_and_streams_and_stops() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopping) = watch::channel(false);
        let server = tokio::spawn(serve(
            listener,
            None,
            |req: Request<Incoming>, peer: Peer| async move {
                match req.uri().path() {
                    "/stream" => {
                        let (tx, rx) = mpsc::channel(4);
                        tx.send(Bytes::from_static(b"one\n")).await.unwrap();
                        tx.send(Bytes::from_static(b"two\n")).await.unwrap();
                        full_stream(rx)
                    }
                    p => text(StatusCode::OK, format!("{p} from {}", peer.addr.ip())),
                }
            },
            stopping,
        ));
        let get = |path: &'static str| async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            s.write_all(req.as_bytes()).await.unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        };
        let a = get("/metrics").await;
        assert!(a.starts_with("HTTP/1.1 200 OK"), "{a}");
        assert!(a.ends_with("/metrics from 127.0.0.1"), "{a}");
        assert!(a.to_ascii_lowercase().contains("cache-control: no-store"), "{a}");
        let b = get("/stream").await;
        assert!(b.contains("one\n") && b.contains("two\n"), "{b}");
        stop.send(true).unwrap();
        server.await.unwrap();
    }

    fn full_stream(rx: mpsc::Receiver<Bytes>) -> Response<Body> {
        Response::new(stream(rx))
    }
}
