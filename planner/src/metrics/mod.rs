//! The planner's Prometheus metrics (`[metrics] listen`, default `127.0.0.1:9400`, path
//! `/metrics`), from `prometheus-client`. Counters and histograms are updated where things
//! happen (the driver, the store writer, the handshake, the tick's spans: [`spans`]); the
//! cluster's gauges (jobs, nodes, HyperNodes, discovery sources) are read from the core
//! when Prometheus scrapes ([`serve`]), not every tick. Label values come from bounded
//! sets: systems, queues, statuses, reason kinds, node states, HyperNodes, sources.
//! `/metrics` answers in OpenMetrics when asked for it (Prometheus asks), else in the
//! classic text format ([`classic`]), as the official clients do.

pub mod classic;
pub mod serve;
pub mod snapshot;
pub mod spans;

use std::sync::LazyLock;
use std::sync::atomic::AtomicU64;

use hyperplan_core::view::gauges::Gauges;
use hyperplan_shared::status::SourceStatus;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

/// A label set: (name, value) pairs.
pub type Labels = Vec<(&'static str, String)>;
type FloatGauge = Gauge<f64, AtomicU64>;
type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

fn tick_buckets() -> Histogram {
    // 20 µs to about 0.7 s.
    Histogram::new(exponential_buckets(0.000_02, 2.0, 16))
}

fn wait_buckets() -> Histogram {
    // 1 s to about 9 h.
    Histogram::new(exponential_buckets(1.0, 2.0, 16))
}

/// Connections refused, by kind; counted by `server::link::refuse` and the handshake,
/// which have no handle on [`Metrics`] (a process-wide family, registered by it).
pub static REFUSED: LazyLock<Family<Labels, Counter>> = LazyLock::new(Family::default);

/// Counts a refused connection of kind `reason` (`tls`, `protocol`, `version`,
/// `refused`, `stale_epoch`, `other`).
pub fn refused(reason: &'static str) {
    REFUSED.get_or_create(&vec![("reason", reason.to_string())]).inc();
}

/// Every metric the planner exports; cheap to clone (the metrics are shared handles).
#[derive(Clone, Debug)]
pub struct Metrics {
    /// Each system's time per tick, and the whole tick's (`system="tick"`).
    pub tick: Histograms,
    pub placements: Counter,
    pub launches: Counter,
    /// From a task's `Launch` sent to its start reported.
    pub launch_latency: Histogram,
    /// From submit to the first placement, per queue.
    pub job_wait: Histograms,
    pub preemptions: Counter,
    pub victims: Counter,
    pub commit_duration: Histogram,
    pub commit_batch: Histogram,
    pub agents: Gauge,
    pub leader: Gauge,
    /// Seconds since the oldest ended job accounting has not written ended (0: up to date).
    pub accounting_behind: Gauge,
    /// 1 while the accounting database takes what is written, 0 while it fails.
    pub accounting_up: Gauge,
    jobs: Family<Labels, Gauge>,
    pending: Family<Labels, Gauge>,
    nodes: Family<Labels, Gauge>,
    hn_cpus: Family<Labels, FloatGauge>,
    hn_cpus_allocated: Family<Labels, FloatGauge>,
    hn_gpus: Family<Labels, FloatGauge>,
    hn_gpus_allocated: Family<Labels, FloatGauge>,
    hn_memory: Family<Labels, FloatGauge>,
    hn_memory_allocated: Family<Labels, FloatGauge>,
    reservations: Gauge,
    checks: Family<Labels, Gauge>,
    drained_by_health: Gauge,
    source_up: Family<Labels, Gauge>,
    source_last_success: Family<Labels, Gauge>,
    registry: std::sync::Arc<Registry>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// The metrics, registered.
    pub fn new() -> Self {
        let mut r = Registry::default();
        let m = Self {
            tick: Histograms::new_with_constructor(tick_buckets),
            placements: Counter::default(),
            launches: Counter::default(),
            launch_latency: Histogram::new(exponential_buckets(0.002, 2.0, 16)),
            job_wait: Histograms::new_with_constructor(wait_buckets),
            preemptions: Counter::default(),
            victims: Counter::default(),
            commit_duration: Histogram::new(exponential_buckets(0.000_1, 2.0, 16)),
            commit_batch: Histogram::new(exponential_buckets(1.0, 2.0, 14)),
            agents: Gauge::default(),
            leader: Gauge::default(),
            accounting_behind: Gauge::default(),
            accounting_up: Gauge::default(),
            jobs: Family::default(),
            pending: Family::default(),
            nodes: Family::default(),
            hn_cpus: Family::default(),
            hn_cpus_allocated: Family::default(),
            hn_gpus: Family::default(),
            hn_gpus_allocated: Family::default(),
            hn_memory: Family::default(),
            hn_memory_allocated: Family::default(),
            reservations: Gauge::default(),
            checks: Family::default(),
            drained_by_health: Gauge::default(),
            source_up: Family::default(),
            source_last_success: Family::default(),
            registry: std::sync::Arc::new(Registry::default()),
        };
        let s = Unit::Seconds;
        let b = Unit::Bytes;
        r.register_with_unit(
            "hyperplan_tick_duration",
            "Time of each system of the planner's tick (system=\"tick\": the whole tick)",
            s.clone(),
            m.tick.clone(),
        );
        r.register("hyperplan_placements", "Tasks placed on nodes", m.placements.clone());
        r.register(
            "hyperplan_launches",
            "Tasks sent to their agents to start",
            m.launches.clone(),
        );
        r.register_with_unit(
            "hyperplan_launch_latency",
            "From a task's Launch sent to its agent reporting it started",
            s.clone(),
            m.launch_latency.clone(),
        );
        r.register_with_unit(
            "hyperplan_job_wait",
            "From a job's submission to its first placement, by queue",
            s.clone(),
            m.job_wait.clone(),
        );
        r.register("hyperplan_preemptions", "Jobs preempted", m.preemptions.clone());
        r.register(
            "hyperplan_preemption_victims",
            "Tasks killed by preemptions",
            m.victims.clone(),
        );
        r.register_with_unit(
            "hyperplan_store_commit_duration",
            "Time of one commit to the planner's store",
            s.clone(),
            m.commit_duration.clone(),
        );
        r.register(
            "hyperplan_store_commit_batch_size",
            "Job records written by one commit",
            m.commit_batch.clone(),
        );
        r.register(
            "hyperplan_agents_connected",
            "Agents with an open link to this planner",
            m.agents.clone(),
        );
        r.register(
            "hyperplan_refused_connections",
            "Connections refused, by reason",
            REFUSED.clone(),
        );
        r.register(
            "hyperplan_leader",
            "1 on the planner that leads (a lone planner leads), 0 on a standby",
            m.leader.clone(),
        );
        r.register_with_unit(
            "hyperplan_accounting_behind",
            "Since when the oldest ended job not yet in the accounting database ended (0: up to date)",
            s.clone(),
            m.accounting_behind.clone(),
        );
        r.register(
            "hyperplan_accounting_up",
            "1 while the accounting database takes what the leader writes, 0 while it fails",
            m.accounting_up.clone(),
        );
        r.register("hyperplan_jobs", "Live jobs by queue and status", m.jobs.clone());
        r.register(
            "hyperplan_pending_jobs",
            "Pending jobs by the kind of their reason",
            m.pending.clone(),
        );
        r.register(
            "hyperplan_nodes",
            "Nodes by state (ready, not_ready, draining, drained)",
            m.nodes.clone(),
        );
        r.register(
            "hyperplan_hypernode_cpus",
            "CPUs of a HyperNode's nodes",
            m.hn_cpus.clone(),
        );
        r.register(
            "hyperplan_hypernode_cpus_allocated",
            "CPUs of a HyperNode in use (tasks, outside work, nodes NotReady or drained)",
            m.hn_cpus_allocated.clone(),
        );
        r.register(
            "hyperplan_hypernode_gpus",
            "GPUs of a HyperNode's nodes",
            m.hn_gpus.clone(),
        );
        r.register(
            "hyperplan_hypernode_gpus_allocated",
            "GPUs of a HyperNode in use",
            m.hn_gpus_allocated.clone(),
        );
        r.register_with_unit(
            "hyperplan_hypernode_memory",
            "Memory of a HyperNode's nodes",
            b.clone(),
            m.hn_memory.clone(),
        );
        r.register_with_unit(
            "hyperplan_hypernode_memory_allocated",
            "Memory of a HyperNode in use",
            b,
            m.hn_memory_allocated.clone(),
        );
        r.register(
            "hyperplan_backfill_reservations",
            "Jobs holding a backfill reservation",
            m.reservations.clone(),
        );
        r.register(
            "hyperplan_health_checks",
            "Nodes' health checks by state (ok, degraded, failed), as their agents last said",
            m.checks.clone(),
        );
        r.register(
            "hyperplan_nodes_drained_by_health",
            "Nodes drained by a failed health check (they return by themselves once healthy)",
            m.drained_by_health.clone(),
        );
        r.register(
            "hyperplan_discovery_source_up",
            "1 when a discovery source's last read worked",
            m.source_up.clone(),
        );
        r.register_with_unit(
            "hyperplan_discovery_source_last_success_timestamp",
            "Unix time of a discovery source's last good read",
            s,
            m.source_last_success.clone(),
        );
        Self {
            registry: std::sync::Arc::new(r),
            ..m
        }
    }

    /// Sets the cluster's gauges from the core's `gauges` and `sources`.
    pub fn set_cluster(&self, g: &Gauges, sources: &[SourceStatus]) {
        self.jobs.clear();
        for ((queue, status), n) in &g.jobs {
            let labels = vec![("queue", queue.clone()), ("status", (*status).to_string())];
            self.jobs.get_or_create(&labels).set(gauge(*n));
        }
        self.pending.clear();
        for (kind, n) in &g.pending {
            self.pending
                .get_or_create(&vec![("reason", (*kind).to_string())])
                .set(gauge(*n));
        }
        self.nodes.clear();
        for state in ["ready", "not_ready", "draining", "drained"] {
            let n = g.nodes.get(state).copied().unwrap_or(0);
            self.nodes
                .get_or_create(&vec![("state", state.to_string())])
                .set(gauge(n));
        }
        for f in [
            &self.hn_cpus,
            &self.hn_cpus_allocated,
            &self.hn_gpus,
            &self.hn_gpus_allocated,
            &self.hn_memory,
            &self.hn_memory_allocated,
        ] {
            f.clear();
        }
        for h in &g.hyper_nodes {
            let labels = vec![("hypernode", h.name.clone()), ("tier", h.tier.to_string())];
            self.hn_cpus.get_or_create(&labels).set(h.cpus.1);
            self.hn_cpus_allocated.get_or_create(&labels).set(h.cpus.0);
            self.hn_gpus.get_or_create(&labels).set(h.gpus.1);
            self.hn_gpus_allocated.get_or_create(&labels).set(h.gpus.0);
            self.hn_memory.get_or_create(&labels).set(h.memory.1);
            self.hn_memory_allocated.get_or_create(&labels).set(h.memory.0);
        }
        self.reservations.set(gauge(g.reservations));
        self.checks.clear();
        for state in ["ok", "degraded", "failed"] {
            let n = g.checks.get(state).copied().unwrap_or(0);
            self.checks
                .get_or_create(&vec![("state", state.to_string())])
                .set(gauge(n));
        }
        self.drained_by_health.set(gauge(g.drained_by_health));
        self.source_up.clear();
        self.source_last_success.clear();
        for s in sources {
            let labels = vec![("source", s.name.clone()), ("kind", s.kind.clone())];
            self.source_up
                .get_or_create(&labels)
                .set(i64::from(s.error.is_none() && s.last_success.is_some()));
            if let Some(at) = s.last_success {
                self.source_last_success.get_or_create(&labels).set(gauge(at));
            }
        }
    }

    /// The exposition, in the OpenMetrics text format Prometheus reads.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!("metrics: cannot encode: {e}");
        }
        out
    }

    /// The exposition in the classic Prometheus text format (0.0.4), which `promtool check
    /// metrics` and other tools of that format read.
    pub fn encode_classic(&self) -> String {
        classic::from_openmetrics(&self.encode())
    }
}

fn gauge(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Metrics with a sample in every family the planner exports (tests of the formats).
#[cfg(test)]
pub(crate) fn every_family() -> Metrics {
    use hyperplan_core::view::gauges::HyperNodeUse;
    let m = Metrics::new();
    m.placements.inc();
    m.launches.inc_by(2);
    m.launch_latency.observe(0.01);
    m.preemptions.inc();
    m.victims.inc_by(3);
    m.commit_duration.observe(0.000_5);
    m.commit_batch.observe(4.0);
    for system in ["allocate", "tick"] {
        m.tick.get_or_create(&vec![("system", system.into())]).observe(0.001);
    }
    m.job_wait
        .get_or_create(&vec![("queue", "default".into())])
        .observe(30.0);
    m.agents.set(3);
    m.leader.set(1);
    refused("tls");
    let mut g = Gauges::default();
    g.jobs.insert(("default".into(), "running"), 2);
    g.jobs.insert(("gpu".into(), "pending"), 1);
    g.pending.insert("resources", 1);
    g.nodes.insert("ready", 3);
    g.nodes.insert("drained", 1);
    g.reservations = 1;
    g.hyper_nodes.push(HyperNodeUse {
        name: "leaf-1".into(),
        tier: 1,
        cpus: (4.0, 8.0),
        gpus: (1.0, 2.0),
        memory: (1e9, 2e9),
    });
    let source = |name: &str, ok: bool| SourceStatus {
        name: name.into(),
        kind: "slurm".into(),
        last_success: ok.then_some(1_700_000_000),
        error: (!ok).then(|| "cannot read topology.conf".into()),
        ..SourceStatus::default()
    };
    m.set_cluster(&g, &[source("slurm", true), source("broken", false)]);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_prometheus_conventions() {
        let m = Metrics::new();
        m.placements.inc();
        m.tick
            .get_or_create(&vec![("system", "allocate".into())])
            .observe(0.001);
        let mut g = Gauges::default();
        g.jobs.insert(("default".into(), "running"), 2);
        g.nodes.insert("ready", 3);
        g.hyper_nodes.push(hyperplan_core::view::gauges::HyperNodeUse {
            name: "leaf-1".into(),
            tier: 1,
            cpus: (4.0, 8.0),
            gpus: (0.0, 0.0),
            memory: (1e9, 2e9),
        });
        m.set_cluster(&g, &[]);
        let text = m.encode();
        for line in [
            "# TYPE hyperplan_placements counter",
            "hyperplan_placements_total 1",
            "# TYPE hyperplan_tick_duration_seconds histogram",
            "hyperplan_tick_duration_seconds_count{system=\"allocate\"} 1",
            "hyperplan_jobs{queue=\"default\",status=\"running\"} 2",
            "hyperplan_nodes{state=\"ready\"} 3",
            "hyperplan_nodes{state=\"drained\"} 0",
            "hyperplan_health_checks{state=\"failed\"} 0",
            "hyperplan_nodes_drained_by_health 0",
            "# UNIT hyperplan_hypernode_memory_bytes bytes",
            "hyperplan_hypernode_cpus_allocated{hypernode=\"leaf-1\",tier=\"1\"} 4.0",
            "# EOF",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
    }
}
