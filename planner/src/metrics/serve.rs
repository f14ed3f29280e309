//! `GET /metrics` over plain HTTP (`[metrics] listen`). A scrape asks the driver for the
//! cluster's gauges (`snapshot::Snapshot`, read from the core then and there) while this planner
//! leads; a standby answers with `hyperplan_leader 0` and no cluster gauges. A port that
//! cannot be bound is logged and the planner runs on without metrics.
//!
//! The answer's format follows the request's `Accept` header ([`Format::negotiate`], as
//! Go's `promhttp` and Python's `prometheus_client` do): OpenMetrics when asked for it (a
//! Prometheus server asks for it first), else the classic text format 0.0.4 (no `Accept`,
//! `*/*`, `text/plain`: curl, browsers, what `promtool check metrics` is fed).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::{Method, Request, Response, StatusCode};
use hyperplan_core::view::gauges::Gauges;
use hyperplan_net::http::{self, Body, Peer};
use tokio::sync::{mpsc, oneshot, watch};

use super::Metrics;
use crate::server::inbox::ToCore;

/// The driver's channel while this planner leads (`None`: standing by).
pub type Leading = watch::Receiver<Option<mpsc::UnboundedSender<ToCore>>>;

/// The media type of the OpenMetrics exposition.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The media type of the classic text exposition.
pub const CLASSIC_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The text formats `/metrics` answers in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics text 1.0.0 (`# EOF`, `# UNIT`, counters' metadata named without `_total`).
    OpenMetrics,
    /// The classic Prometheus text format 0.0.4 ([`super::classic`]).
    Classic,
}

impl Format {
    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Format::Classic => CLASSIC_CONTENT_TYPE,
        }
    }

    /// The format the `Accept` header values `accept` ask for, chosen as Go's
    /// `expfmt.NegotiateIncludingOpenMetrics` chooses: the media ranges by quality, the
    /// highest first (in their order where equal); the first that is
    /// `application/openmetrics-text` (no version, 0.0.1 or 1.0.0) answers OpenMetrics,
    /// the first that is `text/plain` (no version, 0.0.4 or 1.0.0) the classic format; a
    /// range of neither (`*/*`, protobuf, an unknown version) is passed over, and with none
    /// left the classic format answers. A range with `q=0` is refused, not chosen.
    pub fn negotiate<'a>(accept: impl IntoIterator<Item = &'a str>) -> Format {
        let mut ranges: Vec<(f32, Format)> = Vec::new();
        for range in accept.into_iter().flat_map(|v| v.split(',')) {
            let mut params = range.split(';');
            let media = params.next().unwrap_or_default().trim();
            let (mut q, mut version) = (1.0_f32, None);
            for param in params {
                let Some((key, value)) = param.split_once('=') else {
                    continue;
                };
                let value = value.trim().trim_matches('"');
                match key.trim().to_ascii_lowercase().as_str() {
                    "q" => q = value.parse::<f32>().unwrap_or(0.0).clamp(0.0, 1.0),
                    "version" => version = Some(value),
                    _ => {}
                }
            }
            let format = if media.eq_ignore_ascii_case("application/openmetrics-text")
                && matches!(version, None | Some("0.0.1" | "1.0.0"))
            {
                Format::OpenMetrics
            } else if media.eq_ignore_ascii_case("text/plain") && matches!(version, None | Some("0.0.4" | "1.0.0")) {
                Format::Classic
            } else {
                continue;
            };
            if q > 0.0 {
                ranges.push((q, format));
            }
        }
        // Stable: among equal qualities the first named wins.
        ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
        ranges.first().map_or(Format::Classic, |r| r.1)
    }
}

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
    let accept = req.headers().get_all(hyper::header::ACCEPT);
    let format = Format::negotiate(accept.iter().filter_map(|v| v.to_str().ok()));
    let body = match format {
        Format::OpenMetrics => metrics.encode(),
        Format::Classic => metrics.encode_classic(),
    };
    let mut r = http::full(StatusCode::OK, format.content_type(), body);
    // The answer depends on `Accept`: a cache in between must not mix the formats up.
    r.headers_mut()
        .insert(hyper::header::VARY, hyper::header::HeaderValue::from_static("accept"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::snapshot::Snapshot;

    fn get(path: &str) -> Request<()> {
        let mut r = Request::new(());
        *r.uri_mut() = path.parse().unwrap_or_default();
        r
    }

    /// `GET /metrics` with these `Accept` headers.
    fn get_accepting(accept: &[&'static str]) -> Request<()> {
        let mut r = get("/metrics");
        for a in accept {
            r.headers_mut()
                .append(hyper::header::ACCEPT, hyper::header::HeaderValue::from_static(a));
        }
        r
    }

    /// What Prometheus 3 sends by default (`scrape/scrape.go` `acceptHeader` of
    /// `config.DefaultScrapeProtocols`, names escaped as `allow-utf-8`).
    const PROMETHEUS_3: &str = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,\
                                application/openmetrics-text;version=0.0.1;q=0.5,\
                                text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,\
                                text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
    /// Prometheus 3 scraping native histograms (`DefaultProtoFirstScrapeProtocols`).
    const PROMETHEUS_3_PROTO_FIRST: &str = "application/vnd.google.protobuf;\
        proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.6,\
        application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,\
        application/openmetrics-text;version=0.0.1;q=0.4,\
        text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1";
    /// Prometheus 2's default (also the Datadog agent's, since 7.46).
    const PROMETHEUS_2: &str = "application/openmetrics-text;version=1.0.0,\
        application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    /// Prometheus 2 scraping native histograms.
    const PROMETHEUS_2_PROTO_FIRST: &str = "application/vnd.google.protobuf;\
        proto=io.prometheus.client.MetricFamily;encoding=delimited,\
        application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,\
        text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    /// Early Prometheus 2 releases (OpenMetrics 0.0.1 only).
    const PROMETHEUS_2_EARLY: &str =
        "application/openmetrics-text; version=0.0.1,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    const PROMETHEUS: [&str; 5] = [
        PROMETHEUS_3,
        PROMETHEUS_3_PROTO_FIRST,
        PROMETHEUS_2,
        PROMETHEUS_2_PROTO_FIRST,
        PROMETHEUS_2_EARLY,
    ];

    #[test]
    fn negotiation_gives_prometheus_openmetrics_and_everyone_else_the_classic_format() {
        use Format::{Classic, OpenMetrics};
        for (accept, want) in [
            (&[][..], Classic),
            (&[""], Classic),
            (&["*/*"], Classic), // curl, wget
            (&["text/plain"], Classic),
            (&["text/plain; version=0.0.4"], Classic),
            // A browser.
            (
                &["text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"],
                Classic,
            ),
            (&PROMETHEUS[0..1], OpenMetrics),
            (&PROMETHEUS[1..2], OpenMetrics),
            (&PROMETHEUS[2..3], OpenMetrics),
            (&PROMETHEUS[3..4], OpenMetrics),
            (&PROMETHEUS[4..5], OpenMetrics),
            (&["application/openmetrics-text"], OpenMetrics),
            (&["application/openmetrics-text; version=1.0.0"], OpenMetrics),
            (&["Application/OpenMetrics-Text; Version=\"1.0.0\""], OpenMetrics),
            // `scrape_protocols: [PrometheusText0.0.4, OpenMetricsText1.0.0]`: text first.
            (
                &["text/plain;version=0.0.4;q=0.6,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.4"],
                Classic,
            ),
            // The quality decides, not the order.
            (&["text/plain;q=0.2,application/openmetrics-text;q=0.9"], OpenMetrics),
            // Equal qualities: the first named.
            (&["text/plain,application/openmetrics-text"], Classic),
            // Several Accept headers count as one list.
            (&["text/plain;q=0.1", "application/openmetrics-text"], OpenMetrics),
            // Refused, an unknown version, protobuf only: the classic format.
            (&["application/openmetrics-text;q=0"], Classic),
            (&["application/openmetrics-text;version=2.0.0"], Classic),
            (
                &["application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"],
                Classic,
            ),
            (&["application/openmetrics-text;q=bogus"], Classic),
        ] {
            assert_eq!(Format::negotiate(accept.iter().copied()), want, "{accept:?}");
        }
    }

    #[tokio::test]
    async fn the_answer_says_its_format_and_varies_on_accept() {
        let metrics = Metrics::new();
        metrics.placements.inc();
        let lock = tokio::sync::Mutex::new(());
        let (_leading, rx) = watch::channel(None);
        let header = |r: &Response<Body>, name| {
            r.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        for accept in PROMETHEUS {
            let r = answer(&get_accepting(&[accept]), &metrics, &rx, &lock).await;
            assert_eq!(header(&r, hyper::header::CONTENT_TYPE), OPENMETRICS_CONTENT_TYPE);
            assert_eq!(header(&r, hyper::header::VARY), "accept");
            let text = body(r).await;
            assert!(text.ends_with("# EOF\n"), "{accept}: {text}");
            assert!(text.contains("# TYPE hyperplan_placements counter\n"), "{text}");
            assert!(text.contains("hyperplan_placements_total 1\n"), "{text}");
        }
        for accept in [&[][..], &["*/*"], &["text/plain"]] {
            let r = answer(&get_accepting(accept), &metrics, &rx, &lock).await;
            assert_eq!(header(&r, hyper::header::CONTENT_TYPE), CLASSIC_CONTENT_TYPE);
            assert_eq!(header(&r, hyper::header::VARY), "accept");
            let text = body(r).await;
            assert!(
                !text.contains("# EOF") && !text.contains("# UNIT"),
                "{accept:?}: {text}"
            );
            assert!(
                text.contains("# HELP hyperplan_placements_total Tasks placed on nodes.\n"),
                "{text}"
            );
            assert!(text.contains("# TYPE hyperplan_placements_total counter\n"), "{text}");
            assert!(text.contains("hyperplan_placements_total 1\n"), "{text}");
            assert!(
                text.contains("# TYPE hyperplan_launch_latency_seconds histogram\n"),
                "{text}"
            );
        }
    }

    /// `program args…` with `input` on its stdin: (exit code, stdout and stderr); `None`
    /// when it cannot be run.
    fn pipe(program: &str, args: &[&str], input: &str) -> Option<(i32, String)> {
        use std::io::Write;
        use std::process::{Command, Stdio};
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        child.stdin.take()?.write_all(input.as_bytes()).ok()?;
        let out = child.wait_with_output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        Some((out.status.code().unwrap_or(-1), text))
    }

    /// `promtool check metrics` (Debian's `prometheus` package, which `make deps`
    /// installs) on `text`: its exit code and what it said; `None` without promtool.
    fn promtool(text: &str) -> Option<(i32, String)> {
        let version = std::process::Command::new("promtool").arg("--version").output().ok()?;
        version.status.success().then_some(())?;
        pipe("promtool", &["check", "metrics"], text)
    }

    #[tokio::test]
    async fn the_classic_answer_passes_promtool_check_metrics() {
        let Some(_) = promtool("") else {
            println!("skipped: promtool (apt prometheus) is not on PATH");
            return;
        };
        // Every family with samples, and a standby's answer (the cluster's families empty).
        let full = super::super::every_family().encode_classic();
        let metrics = Metrics::new();
        let lock = tokio::sync::Mutex::new(());
        let (_leading, rx) = watch::channel(None);
        let standby = body(answer(&get_accepting(&["*/*"]), &metrics, &rx, &lock).await).await;
        for text in [full, standby] {
            let (code, said) = promtool(&text).unwrap_or((-1, "promtool did not run".into()));
            println!("promtool check metrics: exit {code}, said {said:?}");
            assert_eq!((code, said.trim()), (0, ""), "promtool check metrics on\n{text}");
        }
    }

    /// Python's `prometheus_client` parsers (Debian's python3-prometheus-client): the
    /// classic text's and the OpenMetrics text's samples as JSON, `[name, labels, value]`
    /// sorted, `_created` left out, and each family's name and type.
    const PARSE_BOTH: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families as classic
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
texts = sys.stdin.read().split("\0")
def dump(families):
    fs = list(families)
    samples = sorted(json.dumps([s.name, s.labels, float(s.value)], sort_keys=True)
                     for f in fs for s in f.samples if not s.name.endswith("_created"))
    return {"samples": samples, "types": sorted([f.name, f.type] for f in fs)}
print(json.dumps([dump(classic(texts[0])), dump(om(texts[1]))], sort_keys=True))
"#;

    fn python() -> Option<&'static str> {
        ["/usr/bin/python3", "python3"].into_iter().find(|py| {
            std::process::Command::new(py)
                .args([
                    "-c",
                    "import prometheus_client.parser, prometheus_client.openmetrics.parser",
                ])
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
    }

    #[test]
    fn pythons_classic_parser_reads_the_same_samples_as_its_openmetrics_parser() {
        let Some(py) = python() else {
            println!("skipped: python3 with prometheus_client (apt python3-prometheus-client) is not installed");
            return;
        };
        let m = super::super::every_family();
        let (classic, om) = (m.encode_classic(), m.encode());
        let (code, out) = pipe(py, &["-c", PARSE_BOTH], &format!("{classic}\0{om}")).unwrap_or((-1, String::new()));
        assert_eq!(code, 0, "the parsers refused the exposition: {out}\n{classic}");
        let parsed: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        let (from_classic, from_om) = (&parsed[0], &parsed[1]);
        assert!(from_om["samples"].as_array().is_some_and(|s| s.len() > 50), "{out}");
        assert_eq!(from_classic["samples"], from_om["samples"], "{classic}\n{om}");
        assert_eq!(from_classic["types"], from_om["types"], "{classic}\n{om}");
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
