//! `GET /metrics` over plain HTTP (`[metrics] listen`). A scrape asks the driver for the
//! cluster's gauges ([`Snapshot`], read from the core then and there) while this planner
//! leads; a standby answers with `hyperplan_leader 0` and no cluster gauges. A port that
//! cannot be bound is logged and the planner runs on without metrics.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::{Method, Request, Response, StatusCode};
use hyperplan_core::view::gauges::Gauges;
use hyperplan_net::http::{self, Body, Peer};
use hyperplan_shared::status::SourceStatus;
use tokio::sync::{mpsc, oneshot, watch};

use super::Metrics;
use crate::server::ToCore;

/// The driver's channel while this planner leads (`None`: standing by).
pub type Leading = watch::Receiver<Option<mpsc::UnboundedSender<ToCore>>>;

/// What the driver answers a scrape with.
#[derive(Debug)]
pub struct Snapshot {
    pub gauges: Gauges,
    pub sources: Vec<SourceStatus>,
    /// Agents with an open link.
    pub agents: usize,
}

/// The media type of the exposition (OpenMetrics text, which Prometheus reads).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How long a scrape waits for the driver before it answers with what it had.
const DRIVER_PATIENCE: Duration = Duration::from_secs(5);

/// Binds `listen` and serves `/metrics` until `stopping`; the bound address, or `None`
/// when it could not be bound (said in the log).
pub async fn spawn(
    listen: SocketAddr,
    metrics: Metrics,
    leading: Leading,
    stopping: watch::Receiver<bool>,
) -> Option<SocketAddr> {
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("metrics: cannot listen on {listen} ([metrics] listen): {e}; serving no metrics");
            return None;
        }
    };
    let addr = listener.local_addr().ok()?;
    tracing::info!("serving metrics on http://{addr}/metrics");
    let scrape = Arc::new(tokio::sync::Mutex::new(()));
    let handler = move |req: Request<hyper::body::Incoming>, _peer: Peer| {
        let (metrics, leading, scrape) = (metrics.clone(), leading.clone(), scrape.clone());
        async move { answer(&req, &metrics, &leading, &scrape).await }
    };
    tokio::spawn(http::serve(listener, None, handler, stopping));
    Some(addr)
}

async fn answer<B>(
    req: &Request<B>,
    metrics: &Metrics,
    leading: &Leading,
    scrape: &tokio::sync::Mutex<()>,
) -> Response<Body> {
    if req.uri().path() != "/metrics" {
        return http::text(StatusCode::NOT_FOUND, "not found: the metrics are at /metrics\n");
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return http::text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
    }
    // One scrape at a time: the gauges are cleared and set again for each.
    let _one = scrape.lock().await;
    let driver = leading.borrow().clone();
    match driver {
        Some(tx) => {
            let (reply, rx) = oneshot::channel();
            if tx.send(ToCore::Metrics(reply)).is_ok()
                && let Ok(Ok(s)) = tokio::time::timeout(DRIVER_PATIENCE, rx).await
            {
                metrics.leader.set(1);
                metrics.agents.set(i64::try_from(s.agents).unwrap_or(i64::MAX));
                metrics.set_cluster(&s.gauges, &s.sources);
            }
        }
        None => {
            metrics.leader.set(0);
            metrics.agents.set(0);
            metrics.set_cluster(&Gauges::default(), &[]);
        }
    }
    http::full(StatusCode::OK, CONTENT_TYPE, metrics.encode())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str) -> Request<()> {
        let mut r = Request::new(());
        *r.uri_mut() = path.parse().unwrap_or_default();
        r
    }

    async fn body(r: Response<Body>) -> String {
        use http_body_util::BodyExt;
        let bytes = r.into_body().collect().await.map(|c| c.to_bytes()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[tokio::test]
    async fn a_standby_says_so_and_a_leader_asks_its_driver() {
        let metrics = Metrics::new();
        let lock = tokio::sync::Mutex::new(());
        let (leading, rx) = watch::channel(None);
        let text = body(answer(&get("/metrics"), &metrics, &rx, &lock).await).await;
        assert!(text.contains("hyperplan_leader 0"), "{text}");
        assert!(text.contains("hyperplan_agents_connected 0"), "{text}");
        // Leading: the driver answers with 4 agents and 2 ready nodes.
        let (tx, mut driver) = mpsc::unbounded_channel();
        leading.send_replace(Some(tx));
        let answering = tokio::spawn(async move {
            if let Some(ToCore::Metrics(reply)) = driver.recv().await {
                let mut gauges = Gauges::default();
                gauges.nodes.insert("ready", 2);
                let _ = reply.send(Snapshot {
                    gauges,
                    sources: Vec::new(),
                    agents: 4,
                });
            }
        });
        let text = body(answer(&get("/metrics"), &metrics, &rx, &lock).await).await;
        assert!(text.contains("hyperplan_leader 1"), "{text}");
        assert!(text.contains("hyperplan_agents_connected 4"), "{text}");
        assert!(text.contains("hyperplan_nodes{state=\"ready\"} 2"), "{text}");
        let _ = answering.await;
        let r = answer(&get("/other"), &metrics, &rx, &lock).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
    }
}
