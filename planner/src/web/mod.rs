//! The read-only web view (`[web] listen`, off by default): one page served from the
//! binary (`index.html`: the HyperNode tree as nested boxes on a canvas, every node a
//! cell coloured by its free GPUs or CPUs, drained and NotReady nodes marked, a picked
//! job's nodes lit with their ranks, tables of jobs, queues and nodes), its state as JSON
//! (`/api/state`, see [`state`]) and the same state live as server-sent events
//! (`/api/events`, at most once a second, only when it changed).
//!
//! Over TLS with the planner's certificate. Who may read it: the holder of a user's or
//! an admin's certificate of the cluster CA (a browser with it imported), or whoever
//! shows the token of `[web] tokenFile` (a reverse proxy's `Authorization: Bearer`, or a
//! browser's `?token=` once, kept as an HttpOnly cookie). Nothing here changes anything.
//! What of other people's jobs each sees follows `[server] privateData` (see [`state`]).
//!
//! Live streams hold a connection each for as long as they are open: one certificate may
//! hold [`STREAMS_PER_CERT`] at once and the token [`STREAMS_BY_TOKEN`], so that no one
//! takes all of the server's connections from everyone else; one more is refused with
//! 429 (the page then reads `/api/state` every few seconds instead).

pub mod state;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use hyperplan_net::CertRole;
use hyperplan_net::http::{self, Body, Peer};
use hyperplan_net::tls::TlsMaterial;
use tokio::sync::{mpsc, oneshot, watch};

use self::state::{Snapshot, Viewer};
use crate::metrics::serve::Leading;
use crate::server::inbox::ToCore;

/// The page, built into the binary.
pub const PAGE: &str = include_str!("index.html");

/// The page's own script and style are inline; nothing else is loaded.
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// How often live viewers get the state when it changed.
const EVENT_EVERY: Duration = Duration::from_secs(1);

/// A comment line to keep proxies from closing an idle stream.
const PING_EVERY: Duration = Duration::from_secs(20);

/// The cookie that carries the token after `?token=`.
const COOKIE: &str = "hyperplan_token";

/// Live streams (`/api/events`) one certificate may hold at once: a few browsers' tabs
/// (counted by its user and role: several certificates of one user count together).
pub const STREAMS_PER_CERT: usize = 8;

/// Live streams the token's holders may hold at once together (a reverse proxy in front
/// of many people): half the server's connections, the rest left to certificates.
pub const STREAMS_BY_TOKEN: usize = http::MAX_CONNECTIONS / 2;

// Certificates keep connections whatever the token's holders hold.
const _: () = assert!(STREAMS_BY_TOKEN + STREAMS_PER_CERT <= http::MAX_CONNECTIONS);

struct Ctx {
    token: Option<String>,
    leading: Leading,
    /// The latest state for live viewers (`None` until one connects).
    latest: watch::Sender<Option<Arc<Snapshot>>>,
    streams: Arc<Streams>,
}

/// The live streams open, per viewer (a certificate's user and role, or the token).
#[derive(Debug, Default)]
struct Streams(Mutex<HashMap<Viewer, usize>>);

/// One open stream, counted until it is dropped (the stream ended or was refused).
#[derive(Debug)]
struct StreamSlot {
    streams: Arc<Streams>,
    viewer: Viewer,
}

impl Streams {
    /// The most streams `viewer` may hold at once.
    fn limit(viewer: &Viewer) -> usize {
        match viewer {
            Viewer::Cert { .. } => STREAMS_PER_CERT,
            Viewer::Token => STREAMS_BY_TOKEN,
        }
    }

    /// A slot for one more stream of `viewer`; `None` when they hold their limit.
    fn open(self: &Arc<Self>, viewer: &Viewer) -> Option<StreamSlot> {
        let mut open = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let n = open.entry(viewer.clone()).or_insert(0);
        if *n >= Self::limit(viewer) {
            return None;
        }
        *n += 1;
        Some(StreamSlot {
            streams: self.clone(),
            viewer: viewer.clone(),
        })
    }

    /// How many streams `viewer` holds now.
    #[cfg(test)]
    fn held(&self, viewer: &Viewer) -> usize {
        let open = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(viewer).copied().unwrap_or(0)
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.streams.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.viewer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.viewer);
            }
        }
    }
}

/// Binds `listen` and serves the view over TLS until `stopping`; the bound address, or
/// `None` when it could not start (said in the log).
pub async fn spawn(
    listen: SocketAddr,
    material: &TlsMaterial,
    token_file: Option<&Path>,
    leading: Leading,
    stopping: watch::Receiver<bool>,
) -> Option<SocketAddr> {
    let tls = match http::web_tls_config(material) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            tracing::error!("web: cannot make its TLS configuration: {e}; no web view");
            return None;
        }
    };
    let token = token_file.and_then(read_token);
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("web: cannot listen on {listen} ([web] listen): {e}; no web view");
            return None;
        }
    };
    let addr = listener.local_addr().ok()?;
    tracing::info!("serving the web view on https://{addr}/");
    let ctx = Arc::new(Ctx {
        token,
        leading,
        latest: watch::Sender::new(None),
        streams: Arc::default(),
    });
    tokio::spawn(refresh(ctx.clone(), stopping.clone()));
    let handler = move |req: Request<hyper::body::Incoming>, peer: Peer| {
        let ctx = ctx.clone();
        async move { answer(&req, &peer, &ctx).await }
    };
    tokio::spawn(http::serve(listener, Some(tls), handler, stopping));
    Some(addr)
}

/// The token: the file's first line, trimmed; a file others may read is refused (the
/// token would be theirs too), as is one shorter than 16 bytes.
fn read_token(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let refuse = |why: String| {
        tracing::error!("web: {}: {why}; only certificates are accepted", path.display());
        None
    };
    match std::fs::metadata(path) {
        Ok(m) if m.mode() & 0o077 != 0 => {
            return refuse(format!(
                "[web] tokenFile is readable by others (mode {:o}); chmod 600 it",
                m.mode() & 0o777
            ));
        }
        Ok(_) => {}
        Err(e) => return refuse(format!("[web] tokenFile cannot be read: {e}")),
    }
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => return refuse(format!("[web] tokenFile cannot be read: {e}")),
    };
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.len() < 16 {
        return refuse("[web] tokenFile holds a token shorter than 16 bytes".into());
    }
    Some(token)
}

async fn answer<B>(req: &Request<B>, peer: &Peer, ctx: &Ctx) -> Response<Body> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return http::text(StatusCode::METHOD_NOT_ALLOWED, "the web view only reads: GET\n");
    }
    let query_token = query_param(req.uri().query().unwrap_or(""), "token");
    let by_cert = peer
        .identity
        .as_ref()
        .is_some_and(|i| matches!(i.role, CertRole::User | CertRole::Admin));
    let by_token = ctx.token.as_deref().is_some_and(|t| {
        [query_token.as_deref(), bearer(req), cookie(req)]
            .into_iter()
            .flatten()
            .any(|shown| same(shown.as_bytes(), t.as_bytes()))
    });
    if !by_cert && !by_token {
        tracing::debug!(peer = %peer.addr, "web: refused a request without certificate or token");
        return http::text(
            StatusCode::UNAUTHORIZED,
            "the web view needs a client certificate of this cluster (a user's or an admin's, from `hyperplan certs issue`) or the token of [web] tokenFile\n",
        );
    }
    // A certificate names its holder; the token (when shown alone) names no one.
    let viewer = match &peer.identity {
        Some(i) if by_cert => Viewer::Cert {
            user: i.name.clone(),
            admin: i.role == CertRole::Admin,
        },
        _ => Viewer::Token,
    };
    match req.uri().path() {
        "/" | "/index.html" => {
            let mut r = http::full(StatusCode::OK, "text/html; charset=utf-8", PAGE);
            let h = r.headers_mut();
            for (k, v) in [
                ("content-security-policy", CSP),
                ("x-content-type-options", "nosniff"),
                ("referrer-policy", "no-referrer"),
            ] {
                h.insert(k, hyper::header::HeaderValue::from_static(v));
            }
            if by_token && let Some(t) = query_token {
                let c = format!("{COOKIE}={t}; HttpOnly; Secure; SameSite=Strict; Path=/");
                if let Ok(v) = hyper::header::HeaderValue::from_str(&c) {
                    h.insert(hyper::header::SET_COOKIE, v);
                }
            }
            r
        }
        "/api/state" => match state(&ctx.leading).await {
            Ok(snapshot) => http::full(StatusCode::OK, "application/json", snapshot.json_for(&viewer)),
            Err(r) => r,
        },
        "/api/events" => events(ctx, viewer, peer).await,
        _ => http::text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// The state from the driver, or the answer to give instead.
async fn state(leading: &Leading) -> Result<Snapshot, Response<Body>> {
    let driver = leading.borrow().clone();
    let Some(tx) = driver else {
        return Err(http::text(
            StatusCode::SERVICE_UNAVAILABLE,
            "this planner stands by: the leader serves the view (`hyperplan planners` names it)\n",
        ));
    };
    let (reply, rx) = oneshot::channel();
    if tx.send(ToCore::WebState(reply)).is_err() {
        return Err(http::text(StatusCode::SERVICE_UNAVAILABLE, "the planner is stopping\n"));
    }
    match tokio::time::timeout(Duration::from_secs(10), rx).await {
        Ok(Ok(snapshot)) => Ok(snapshot),
        _ => Err(http::text(
            StatusCode::SERVICE_UNAVAILABLE,
            "the planner did not answer in time\n",
        )),
    }
}

/// Server-sent events: the state now, then each time it changes, as `viewer` may read
/// it; refused (429) when they hold [`Streams::limit`] streams already.
async fn events(ctx: &Ctx, viewer: Viewer, peer: &Peer) -> Response<Body> {
    let Some(slot) = ctx.streams.open(&viewer) else {
        return too_many_streams(&viewer, peer);
    };
    let first = match state(&ctx.leading).await {
        Ok(s) => s.json_for(&viewer),
        Err(r) => return r,
    };
    let mut latest = ctx.latest.subscribe();
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    tokio::spawn(async move {
        let _slot = slot; // counted while this stream lives
        if tx.send(event(&first)).await.is_err() {
            return;
        }
        let mut last = first;
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.tick().await;
        loop {
            tokio::select! {
                changed = latest.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let now = latest.borrow_and_update().clone();
                    if let Some(s) = now.map(|s| s.json_for(&viewer)).filter(|s| *s != last) {
                        if tx.send(event(&s)).await.is_err() {
                            return;
                        }
                        last = s;
                    }
                }
                _ = ping.tick() => {
                    if tx.send(Bytes::from_static(b": ping\n\n")).await.is_err() {
                        return;
                    }
                }
                () = tx.closed() => return,
            }
        }
    });
    let mut r = Response::new(http::stream(rx));
    let h = r.headers_mut();
    for (k, v) in [
        ("content-type", "text/event-stream"),
        ("cache-control", "no-store"),
        ("x-accel-buffering", "no"),
    ] {
        h.insert(k, hyper::header::HeaderValue::from_static(v));
    }
    r
}

/// The answer to one stream too many: who holds how many, and what to do.
fn too_many_streams(viewer: &Viewer, peer: &Peer) -> Response<Body> {
    let limit = Streams::limit(viewer);
    let who = match viewer {
        Viewer::Cert { user, .. } => {
            tracing::warn!(peer = %peer.addr, user, limit, "web: refused a live view: the certificate holds its limit");
            format!(
                "the certificate of {user} holds {limit} live views (api/events) already, the most one certificate may"
            )
        }
        Viewer::Token => {
            tracing::warn!(peer = %peer.addr, limit, "web: refused a live view: the token holds its limit");
            format!("the [web] token holds {limit} live views (api/events) already, the most it may")
        }
    };
    let mut r = http::text(
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "{who}: close one (another tab or window of this view); the page reads api/state every few seconds meanwhile\n"
        ),
    );
    r.headers_mut().insert(
        hyper::header::RETRY_AFTER,
        hyper::header::HeaderValue::from_static("30"),
    );
    r
}

fn event(state: &Bytes) -> Bytes {
    let mut out = Vec::with_capacity(state.len() + 32);
    out.extend_from_slice(b"event: state\ndata: ");
    out.extend_from_slice(state);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// While anyone watches, the state each [`EVENT_EVERY`], for their streams to compare.
async fn refresh(ctx: Arc<Ctx>, mut stopping: watch::Receiver<bool>) {
    let mut every = tokio::time::interval(EVENT_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
        if ctx.latest.receiver_count() == 0 {
            continue;
        }
        if let Ok(s) = state(&ctx.leading).await {
            ctx.latest.send_replace(Some(Arc::new(s)));
        }
    }
}

fn header<'a, B>(req: &'a Request<B>, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

fn bearer<B>(req: &Request<B>) -> Option<&str> {
    header(req, "authorization").and_then(|v| v.strip_prefix("Bearer "))
}

fn cookie<B>(req: &Request<B>) -> Option<&str> {
    header(req, "cookie")?
        .split(';')
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v)
}

/// `name`'s value in a query string (percent-escapes are not decoded: tokens are plain).
fn query_param(query: &str, name: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// Equal, in time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_from_query_header_and_cookie() {
        assert_eq!(query_param("a=1&token=abc", "token").as_deref(), Some("abc"));
        assert_eq!(query_param("", "token"), None);
        let req = Request::builder()
            .header("authorization", "Bearer t0k")
            .header("cookie", "x=1; hyperplan_token=c00k")
            .body(())
            .unwrap_or_default();
        assert_eq!(bearer(&req), Some("t0k"));
        assert_eq!(cookie(&req), Some("c00k"));
        assert!(same(b"abc", b"abc") && !same(b"abc", b"abd") && !same(b"abc", b"ab"));
    }

    /// Issue 38: one certificate holds at most [`STREAMS_PER_CERT`] streams; another
    /// certificate, and the same one once a stream ended, are not held back.
    #[test]
    fn streams_are_bounded_per_certificate() {
        let streams = Arc::new(Streams::default());
        let alice = Viewer::Cert {
            user: "alice".into(),
            admin: false,
        };
        let bob = Viewer::Cert {
            user: "bob".into(),
            admin: false,
        };
        let mut held: Vec<StreamSlot> = (0..STREAMS_PER_CERT).filter_map(|_| streams.open(&alice)).collect();
        assert_eq!(held.len(), STREAMS_PER_CERT);
        assert!(streams.open(&alice).is_none(), "one more of alice's is refused");
        let bobs = streams.open(&bob);
        assert!(bobs.is_some(), "bob's is not held back by alice's");
        held.pop();
        assert_eq!(streams.held(&alice), STREAMS_PER_CERT - 1);
        assert!(streams.open(&alice).is_some(), "a stream that ended frees its slot");
        drop(held);
        drop(bobs);
        assert_eq!(streams.held(&alice) + streams.held(&bob), 0);
        let tokens: Vec<StreamSlot> = (0..=STREAMS_BY_TOKEN)
            .filter_map(|_| streams.open(&Viewer::Token))
            .collect();
        assert_eq!(tokens.len(), STREAMS_BY_TOKEN, "the token's holders share theirs");
    }

    #[test]
    fn the_page_is_whole_and_says_what_the_test_reads() {
        assert!(PAGE.contains("id=\"summary\""));
        assert!(PAGE.contains("api/events") && PAGE.contains("api/state"));
        assert!(
            !PAGE.contains("http://") && !PAGE.contains("https://"),
            "no external resource"
        );
    }
}
