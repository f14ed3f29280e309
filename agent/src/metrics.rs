//! The agent's own Prometheus endpoint (`[metrics] listen` in agent.toml, or
//! `--metrics-listen`; off by default): `GET /metrics` over plain HTTP, so a node can be
//! watched where it runs, whether or not its planner is there: is it linked to a planner,
//! how many tasks run and what each uses, how long its topology probes take, how many task
//! ends the planner has not acknowledged yet (a planner that stopped taking them shows
//! here first), how much memory the jobs' PMI key-value spaces hold.
//!
//! The link owns these facts and publishes them as they change: the link state and the
//! probe time into atomics, the tasks as one snapshot swapped in after each scan (every
//! 100 ms) and each usage sample ([`Metrics::set_tasks`]). A scrape encodes what was last
//! published with prometheus-client's text encoder; the per-task series are rebuilt from
//! the snapshot at each scrape, so a task's series go when it ends. Labels are job ids and
//! task indexes, never names: at most one series per task on the node.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyperplan_net::http::{self, Body, Peer};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::{Registry, Unit};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Where the metrics are served.
pub const PATH: &str = "/metrics";
/// What prometheus-client's text encoder writes.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Every metric's name starts with this (and `_`).
const PREFIX: &str = "hyperplan_agent";

/// One running task's use, as the last sample found it (0 before the first).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TaskUse {
    pub job_id: hyperplan_shared::ids::JobId,
    /// The task's place in its job (`TaskRef::index`).
    pub index: u32,
    /// CPU use in cores (1.0: one PU busy).
    pub cpu_cores: f64,
    /// Resident memory of its processes.
    pub memory_bytes: u64,
}

/// The node's tasks as `/metrics` shows them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TasksNow {
    /// The tasks running (or starting) here.
    pub running: Vec<TaskUse>,
    /// Task ends reported (or to be reported at the next registration) that the planner
    /// has not acknowledged.
    pub unacknowledged_ends: u64,
}

/// The agent's metrics: cheap to clone, updated by the link, read by scrapes.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Arc<Registry>,
    link_up: Gauge,
    probe_seconds: Gauge<f64, AtomicU64>,
    pmi_bytes: Gauge,
    tasks: Arc<TasksCollector>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix(PREFIX);
        let link_up = Gauge::default();
        let probe_seconds = Gauge::<f64, AtomicU64>::default();
        let pmi_bytes = Gauge::default();
        let tasks = Arc::new(TasksCollector::default());
        registry.register(
            "link_up",
            "1 while this agent is registered with a planner, else 0",
            link_up.clone(),
        );
        registry.register_with_unit(
            "probe_duration",
            "How long the last topology probe took",
            Unit::Seconds,
            probe_seconds.clone(),
        );
        registry.register_with_unit(
            "pmi",
            "What the PMI key-value spaces of this node's jobs hold (keys, values and their overhead)",
            Unit::Bytes,
            pmi_bytes.clone(),
        );
        registry.register_collector(Box::new(tasks.clone()));
        Self {
            registry: Arc::new(registry),
            link_up,
            probe_seconds,
            pmi_bytes,
            tasks,
        }
    }

    pub fn set_link_up(&self, up: bool) {
        self.link_up.set(i64::from(up));
    }

    pub fn set_probe_duration(&self, took: Duration) {
        self.probe_seconds.set(took.as_secs_f64());
    }

    pub fn set_pmi_bytes(&self, bytes: usize) {
        self.pmi_bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Replaces the tasks shown. Two running tasks of the same job id and index (only a
    /// confused state directory has them) are shown as one, their use added up: a label
    /// set appears once.
    pub fn set_tasks(&self, mut now: TasksNow) {
        now.running.sort_by_key(|t| (t.job_id, t.index));
        now.running.dedup_by(|later, kept| {
            let same = (later.job_id, later.index) == (kept.job_id, kept.index);
            if same {
                kept.cpu_cores += later.cpu_cores;
                kept.memory_bytes = kept.memory_bytes.saturating_add(later.memory_bytes);
            }
            same
        });
        let now = Arc::new(now);
        // The old snapshot is dropped after the lock is let go.
        let _old = std::mem::replace(&mut *self.tasks.now.lock().unwrap_or_else(PoisonError::into_inner), now);
    }

    /// The exposition, as a scrape gets it.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::with_capacity(2048);
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }

    /// The answer to one request: the metrics for `GET /metrics`, 404 elsewhere, 405 for
    /// other methods.
    pub fn answer<B>(&self, request: &Request<B>) -> Response<Body> {
        if request.uri().path() != PATH {
            return http::text(
                StatusCode::NOT_FOUND,
                "not found: the agent's metrics are at /metrics\n",
            );
        }
        if request.method() != Method::GET {
            let mut r = http::text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
            r.headers_mut()
                .insert(hyper::header::ALLOW, hyper::header::HeaderValue::from_static("GET"));
            return r;
        }
        match self.encode() {
            Ok(text) => http::full(StatusCode::OK, CONTENT_TYPE, text),
            Err(_) => http::text(StatusCode::INTERNAL_SERVER_ERROR, "cannot encode the metrics\n"),
        }
    }
}

/// The task-derived metrics, built from the last snapshot at each scrape.
#[derive(Debug, Default)]
struct TasksCollector {
    now: Mutex<Arc<TasksNow>>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    job_id: u64,
    index: u32,
}

/// One gauge without labels.
fn gauge<N: prometheus_client::encoding::EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: N,
) -> Result<(), std::fmt::Error> {
    ConstGauge::new(value).encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

impl Collector for TasksCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let now = self.now.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let mut info = encoder.encode_descriptor(
            "info",
            "This agent's version (the value is always 1).",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(1i64).encode(info.encode_family(&[("version", env!("CARGO_PKG_VERSION"))])?)?;
        gauge(
            &mut encoder,
            "tasks_running",
            "Tasks running on this node now (started, or starting).",
            now.running.len(),
        )?;
        let mut cpu = encoder.encode_descriptor(
            "task_cpu_cores",
            "CPU use of each running task's processes at the last sample, in cores (1 is one PU busy).",
            None,
            MetricType::Gauge,
        )?;
        for t in &now.running {
            let labels = TaskLabels {
                job_id: t.job_id.0,
                index: t.index,
            };
            ConstGauge::new(t.cpu_cores).encode(cpu.encode_family(&labels)?)?;
        }
        let mut memory = encoder.encode_descriptor(
            "task_memory",
            "Resident memory of each running task's processes at the last sample.",
            Some(&Unit::Bytes),
            MetricType::Gauge,
        )?;
        for t in &now.running {
            let labels = TaskLabels {
                job_id: t.job_id.0,
                index: t.index,
            };
            ConstGauge::new(t.memory_bytes).encode(memory.encode_family(&labels)?)?;
        }
        gauge(
            &mut encoder,
            "unacknowledged_task_ends",
            "Task ends reported to the planner that it has not acknowledged yet.",
            now.unacknowledged_ends,
        )
    }
}

/// Where to serve, and what set it (for the log: the flag, or the key and its file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listen {
    /// `HOST:PORT` (`config::parse_listen` checked it).
    pub addr: String,
    /// E.g. "--metrics-listen", or "[metrics] listen in /etc/hyperplan/agent.toml".
    pub origin: String,
}

/// A metrics endpoint being served; it stops when this is dropped.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    metrics: Metrics,
    _stop: watch::Sender<bool>,
}

impl Server {
    /// The address bound (the port chosen, for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// Binds `listen` and serves `metrics` there (on this runtime) until the [`Server`] is
/// dropped, saying where at info level. A failure to bind is logged as an error and
/// gives `None`: the agent runs on without metrics.
pub async fn serve(listen: &Listen, metrics: Metrics) -> Option<Server> {
    let bound = match TcpListener::bind(listen.addr.as_str()).await {
        Ok(listener) => listener.local_addr().map(|addr| (listener, addr)),
        Err(e) => Err(e),
    };
    let (listener, addr) = match bound {
        Ok(b) => b,
        Err(e) => {
            tracing::error!(
                "cannot serve metrics on {} ({}): {e}; running without metrics",
                listen.addr,
                listen.origin
            );
            return None;
        }
    };
    let (stop, stopping) = watch::channel(false);
    let served = metrics.clone();
    let handler = move |request: Request<Incoming>, _peer: Peer| {
        let response = served.answer(&request);
        async move { response }
    };
    tokio::spawn(http::serve(listener, None, handler, stopping));
    tracing::info!("serving metrics on http://{addr}{PATH}");
    Some(Server {
        addr,
        metrics,
        _stop: stop,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// `# TYPE` lines, name to type.
    fn types(text: &str) -> Vec<(String, String)> {
        text.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_once(' '))
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect()
    }

    #[test]
    fn names_types_and_labels() {
        let m = Metrics::new();
        m.set_link_up(true);
        m.set_probe_duration(Duration::from_millis(250));
        m.set_pmi_bytes(1 << 20);
        m.set_tasks(TasksNow {
            running: vec![
                TaskUse {
                    job_id: 12.into(),
                    index: 3,
                    cpu_cores: 1.5,
                    memory_bytes: 4096,
                },
                TaskUse {
                    job_id: 7.into(),
                    index: 0,
                    cpu_cores: 0.0,
                    memory_bytes: 0,
                },
            ],
            unacknowledged_ends: 2,
        });
        let text = m.encode().unwrap();
        let mut got = types(&text);
        got.sort();
        let want: Vec<(String, String)> = [
            "info",
            "link_up",
            "pmi_bytes",
            "probe_duration_seconds",
            "task_cpu_cores",
            "task_memory_bytes",
            "tasks_running",
            "unacknowledged_task_ends",
        ]
        .iter()
        .map(|n| (format!("hyperplan_agent_{n}"), "gauge".to_string()))
        .collect();
        assert_eq!(got, want, "{text}");
        let lines: Vec<&str> = text.lines().collect();
        for line in [
            "hyperplan_agent_link_up 1",
            "hyperplan_agent_probe_duration_seconds 0.25",
            "hyperplan_agent_pmi_bytes 1048576",
            "hyperplan_agent_tasks_running 2",
            "hyperplan_agent_task_cpu_cores{job_id=\"7\",index=\"0\"} 0.0",
            "hyperplan_agent_task_cpu_cores{job_id=\"12\",index=\"3\"} 1.5",
            "hyperplan_agent_task_memory_bytes{job_id=\"12\",index=\"3\"} 4096",
            "hyperplan_agent_unacknowledged_task_ends 2",
            "# UNIT hyperplan_agent_task_memory_bytes bytes",
            "# UNIT hyperplan_agent_probe_duration_seconds seconds",
            "# EOF",
        ] {
            assert!(lines.contains(&line), "no {line:?} in\n{text}");
        }
        let version = format!("hyperplan_agent_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION"));
        assert!(lines.contains(&version.as_str()), "{text}");
        assert_eq!(lines.last(), Some(&"# EOF"));
        // Every sample's labels are job ids and indexes only.
        for sample in lines.iter().filter(|l| !l.starts_with('#')) {
            if let Some((_, labels)) = sample.split_once('{') {
                let keys: Vec<&str> = labels
                    .split('}')
                    .next()
                    .unwrap()
                    .split(',')
                    .map(|kv| kv.split('=').next().unwrap())
                    .collect();
                assert!(keys == ["job_id", "index"] || keys == ["version"], "{sample}");
            }
        }
    }

    #[test]
    fn ended_tasks_lose_their_series_and_duplicates_are_one() {
        let m = Metrics::new();
        let task = |job_id, cpu_cores| TaskUse {
            job_id,
            index: 1,
            cpu_cores,
            memory_bytes: 10,
        };
        m.set_tasks(TasksNow {
            running: vec![task(5.into(), 1.0), task(6.into(), 0.5), task(5.into(), 0.25)],
            unacknowledged_ends: 0,
        });
        let text = m.encode().unwrap();
        assert!(
            text.contains("hyperplan_agent_task_cpu_cores{job_id=\"5\",index=\"1\"} 1.25\n"),
            "{text}"
        );
        assert!(
            text.contains("hyperplan_agent_task_memory_bytes{job_id=\"5\",index=\"1\"} 20\n"),
            "{text}"
        );
        assert!(text.contains("hyperplan_agent_tasks_running 2\n"), "{text}");
        m.set_tasks(TasksNow {
            running: vec![task(6.into(), 0.5)],
            unacknowledged_ends: 1,
        });
        let text = m.encode().unwrap();
        assert!(!text.contains("job_id=\"5\""), "{text}");
        assert!(text.contains("job_id=\"6\""), "{text}");
        m.set_tasks(TasksNow::default());
        let text = m.encode().unwrap();
        assert!(!text.contains("job_id="), "{text}");
        assert!(text.contains("hyperplan_agent_tasks_running 0\n"), "{text}");
        assert!(text.contains("hyperplan_agent_link_up 0\n"), "{text}");
    }

    #[test]
    fn only_get_of_the_metrics_path() {
        let m = Metrics::new();
        let request = |method: Method, path: &str| Request::builder().method(method).uri(path).body(()).unwrap();
        let ok = m.answer(&request(Method::GET, "/metrics"));
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(
            ok.headers()
                .get(hyper::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
            Some(CONTENT_TYPE)
        );
        assert_eq!(m.answer(&request(Method::GET, "/")).status(), StatusCode::NOT_FOUND);
        assert_eq!(
            m.answer(&request(Method::GET, "/metrics/x")).status(),
            StatusCode::NOT_FOUND
        );
        let post = m.answer(&request(Method::POST, "/metrics"));
        assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(
            post.headers().get(hyper::header::ALLOW).map(|v| v.as_bytes()),
            Some(&b"GET"[..])
        );
    }
}
