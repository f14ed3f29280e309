//! The link to the planner (`hyperplan-agent run`): probe, connect (QUIC, mutual TLS),
//! register, heartbeat, and re-probe periodically and on SIGHUP, sending
//! `TopologyChanged` only when the topology hash moves. It owns the node's
//! [`Tasks`](crate::tasks::Tasks), which outlive connections: the planner's `Job`,
//! `Launch`, `Kill`, `Ack` and `ReadLog` go to it, its reports go out at once, again at
//! each registration and every few seconds until acknowledged, and its state directory
//! is scanned every 100 ms whether the planner is there or not.
//!
//! The run loop never gives up on the planner: a lost or refused connection is logged
//! once with its reason and retried after a jittered exponential [`Backoff`], on the next
//! planner of the list (`--planner a:7400,b:7400`: a leader and its standbys); a standby's
//! `NotLeader` sends it to the leader it names within [`NOT_LEADER_RETRY`] (see
//! [`planners`]). Only SIGTERM/SIGINT end it (closing the connection with code 0, "agent
//! stopping"). It also talks to systemd: `READY=1` after the first registration,
//! `STATUS=` (naming the planner tried), `WATCHDOG=1` from this loop (so a wedged loop
//! gets the agent restarted) and `STOPPING=1`.
//!
//! - [`backoff`]: reconnect delays.
//! - [`planners`]: the planner list and which one to try next.
//! - [`down`]: why the link went down.
//! - [`session`]: one connection, from handshake to its end.
//! - [`figures`]: the live figures a heartbeat carries.
//!
//! Heartbeats also carry the node's health check results ([`crate::health`]): all of
//! them on a session's first heartbeat, then only when one changed state or code.
//!
//! With `[metrics] listen` it serves its own `/metrics` ([`crate::metrics`]) and
//! publishes there what it knows: the link's state, each probe's duration, its tasks and
//! their use (sampled at each heartbeat, and every [`METRICS_SAMPLE_INTERVAL`] while the
//! planner is away).

pub mod backoff;
mod down;
mod figures;
pub mod planners;
mod session;

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyperplan_net::certs::{self, CertError, CertPaths};
use hyperplan_net::messages::topology_hash;
use hyperplan_net::notify;
use hyperplan_net::tls::{self, TlsError, TlsMaterial};
use hyperplan_shared::topology::NodeTopology;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::time::{Interval, MissedTickBehavior};
use tracing::Instrument;

use crate::metrics::Metrics;
use crate::probe::{self, ProbeError, ProbeOptions, Source};
use crate::tasks::usage::{Sampler, Use};
use crate::tasks::{TaskOptions, Tasks, TasksError};

pub use backoff::Backoff;
use down::LinkDown;
use figures::Figures;
use planners::{Retry, Rotation};
use session::Outcome;

/// Periodic re-probe when neither flag nor config names one.
pub const DEFAULT_REPROBE_INTERVAL: Duration = Duration::from_secs(60);
/// Certificates when neither flag, config nor `$HYPERPLAN_CERT_DIR` names a directory.
pub const DEFAULT_CERT_DIR: &str = "/etc/hyperplan/certs";
/// Environment variable naming the certificate directory (shared with the CLI).
pub const CERT_DIR_ENV: &str = "HYPERPLAN_CERT_DIR";

/// QUIC close code and reason on a clean stop.
const STOP_CODE: u32 = 0;
const STOP_REASON: &[u8] = b"agent stopping";
/// How long a stopping agent waits for its close to reach the planner.
const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// The wait before going where a standby's `NotLeader` points (the growing backoff
/// instead once a whole round of the list said `NotLeader`).
pub const NOT_LEADER_RETRY: Duration = Duration::from_millis(200);

/// Everything `run` needs, resolved from flags, agent.toml and defaults.
#[derive(Clone, Debug)]
pub struct LinkOptions {
    /// `HOST:PORT`s, at least one ([`planners::parse_list`]): the leader and its standbys,
    /// tried in this order, each resolved again on every attempt (a planner may move).
    pub planners: Vec<String>,
    pub cert_dir: PathBuf,
    pub node: String,
    /// `None`: re-probe only on SIGHUP.
    pub reprobe_interval: Option<Duration>,
    pub probe: ProbeOptions,
    /// `advertiseAddress`: sent at registration (MASTER_ADDR); `None`: the planner uses
    /// the address the connection comes from.
    pub advertise_address: Option<String>,
    /// How tasks run here: state directory, pinning, root.
    pub tasks: TaskOptions,
    /// Where to serve `/metrics` (`[metrics] listen`); `None`: nowhere.
    pub metrics: Option<crate::metrics::Listen>,
    /// The node's health checks (`[health]`); `None`: none, and heartbeats carry none.
    pub health: Option<crate::health::HealthOptions>,
}

/// How often task directories are looked at.
const SCAN_INTERVAL: Duration = Duration::from_millis(100);
/// How often unacknowledged task reports are sent again.
const RESEND_INTERVAL: Duration = Duration::from_secs(3);
/// How often tasks' use is sampled for `/metrics` while no planner is linked (with one,
/// each heartbeat samples it).
pub const METRICS_SAMPLE_INTERVAL: Duration = Duration::from_secs(5);

/// Why `run` could not start. Messages carry their cause inline (no error source), so
/// `{:#}` prints each cause once.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error(transparent)]
    Node(#[from] CertError),
    #[error("certificates for node {node}: {error}")]
    Tls { node: String, error: TlsError },
    #[error("probing this machine: {0}")]
    Probe(ProbeError),
    #[error("the probe panicked or was cancelled: {0}")]
    ProbeTask(tokio::task::JoinError),
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    #[error(transparent)]
    Tasks(#[from] TasksError),
}

/// This machine's host name (`/proc/sys/kernel/hostname`, else `/etc/hostname`): the
/// node name when none is configured.
pub fn hostname() -> Option<String> {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_string())
        .find(|s| !s.is_empty())
}

/// Runs the agent's link until SIGTERM or SIGINT. Errors only for what retrying cannot
/// fix: a bad node name, unreadable certificates, a first probe that fails.
pub async fn run(opts: LinkOptions) -> Result<(), LinkError> {
    certs::validate_name("node", &opts.node)?;
    let paths = CertPaths::node(&opts.cert_dir, &opts.node);
    // ssh-like: a key others may read or a certificate of another role stops the start.
    let tls = TlsMaterial::load_for(&paths, &[hyperplan_net::CertRole::Agent]).map_err(|error| LinkError::Tls {
        node: opts.node.clone(),
        error,
    })?;
    let signals = Signals::install().map_err(LinkError::Signals)?;
    let tasks = Tasks::new(opts.tasks.clone())?;
    // On threads of their own from the start (before any task can use up the node's
    // processes); they run whether the planner is there or not.
    let health = opts.health.as_ref().map(crate::health::Health::start);
    // Pinned: `Confinement::detect` said how (cgroup or affinity), and why not by cgroup.
    if !opts.tasks.pin {
        if opts.probe.source == Source::Local && opts.probe.sysfs_root.is_none() {
            tracing::info!("tasks are not pinned (--pin off): they run where the kernel puts them");
        } else {
            tracing::info!(
                "tasks are not pinned: the topology is a description (--synthetic, --hwloc-xml or --sysfs-root), \
                 not this machine's PUs; their HYPERPLAN_CPUS still say what the planner gave them"
            );
        }
    }
    // Served before the first probe, whose duration it shows; a failure to bind is
    // logged and the agent runs on without.
    let metrics_server = match &opts.metrics {
        Some(listen) => crate::metrics::serve(listen, Metrics::new()).await,
        None => None,
    };
    let metrics = metrics_server.as_ref().map(|s| s.metrics().clone());
    let topology = probe_now(&opts, metrics.clone())
        .await
        .map_err(LinkError::ProbeTask)?
        .map_err(LinkError::Probe)?;
    let hash = topology_hash(&topology);
    tracing::info!(
        node = %opts.node,
        planner = %opts.planners.join(","),
        numa_nodes = topology.numa_nodes.len(),
        pus = topology.numa_nodes.iter().map(|n| n.cpus.len()).sum::<usize>(),
        hash = format_args!("{hash:016x}"),
        "probed; connecting to the planner"
    );
    let opts_state_dir = opts.tasks.state_dir.clone();
    let mut link = Link {
        figures: Figures::for_source(&opts.probe),
        reprobe_timer: opts.reprobe_interval.map(ticker),
        watchdog: notify::watchdog_interval().map(ticker),
        planners: Rotation::new(opts.planners.clone()),
        opts,
        tls,
        topology,
        hash,
        signals,
        ready_sent: false,
        tasks,
        scan_timer: ticker(SCAN_INTERVAL),
        sampler: Arc::new(Mutex::new(Sampler::default())),
        usage: HashMap::new(),
        metrics_sample: metrics.as_ref().map(|_| ticker(METRICS_SAMPLE_INTERVAL)),
        metrics,
        log_reads: Arc::new(AtomicUsize::new(0)),
        pmi: crate::pmi::Hub::default(),
        current: Default::default(),
        deadman: crate::deadman::Deadman::new(&opts_state_dir),
        health,
    };
    let span = tracing::info_span!("link", node = %link.opts.node);
    link.publish_tasks();
    link.run().instrument(span).await;
    // A running site script is killed and reaped; a check stuck in the kernel is left
    // to end with the process (the wait for it is bounded).
    if let Some(health) = link.health.take() {
        let _ = tokio::task::spawn_blocking(move || health.stop()).await;
    }
    drop(metrics_server);
    Ok(())
}

/// The probe off the async thread (hwloc reads many files). The node name stands in
/// for the host name of a described machine (XML, synthetic): it is not this host. Its
/// duration, failed or not, goes to `metrics`.
fn probe_now(
    opts: &LinkOptions,
    metrics: Option<Metrics>,
) -> impl Future<Output = Result<Result<NodeTopology, ProbeError>, tokio::task::JoinError>> {
    let probe_opts = opts.probe.clone();
    let node = opts.node.clone();
    tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        let probed = probe::probe(&probe_opts);
        if let Some(m) = &metrics {
            m.set_probe_duration(started.elapsed());
        }
        let mut topology = probed?;
        if probe_opts.source != Source::Local {
            topology.hostname = node;
        }
        Ok(topology)
    })
}

/// An interval whose first tick is one period away; a late tick delays the next one
/// rather than bunching up.
fn ticker(period: Duration) -> Interval {
    let period = period.max(Duration::from_millis(10));
    let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    interval
}

/// Ticks of an optional interval; never, when there is none.
async fn maybe_tick(interval: &mut Option<Interval>) {
    match interval {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending().await,
    }
}

struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }
}

/// Sends one notification to systemd; a failure is worth a log line, not a stop.
fn tell_systemd(state: &str) {
    if let Err(e) = notify::notify(state) {
        tracing::warn!(state, "cannot notify systemd: {e}");
    }
}

struct Link {
    opts: LinkOptions,
    /// The planner this attempt or session is with, and the next one.
    planners: Rotation,
    tls: TlsMaterial,
    /// The last good probe and its hash: what Register and TopologyChanged carry.
    topology: NodeTopology,
    hash: u64,
    figures: Figures,
    signals: Signals,
    reprobe_timer: Option<Interval>,
    watchdog: Option<Interval>,
    ready_sent: bool,
    /// The node's tasks; they outlive connections.
    tasks: Tasks,
    scan_timer: Interval,
    /// Task CPU and memory use between heartbeats (its own thread: it reads /proc).
    sampler: Arc<Mutex<Sampler>>,
    /// The last sample, by shepherd pid.
    usage: HashMap<u32, Use>,
    /// `/metrics`, when served.
    metrics: Option<Metrics>,
    /// Samples for `/metrics` while no planner is linked (`None` without metrics).
    metrics_sample: Option<Interval>,
    /// `ReadLog`s being read now.
    log_reads: Arc<AtomicUsize>,
    /// The PMI servers of this node's tasks; they outlive connections.
    pmi: crate::pmi::Hub,
    /// The planner link now, for the tasks' `hyperplan exec` (`exec::local`).
    current: crate::exec::local::Current,
    /// When the planner last heard the node: the deadline fenced tasks stop at.
    deadman: crate::deadman::Deadman,
    /// The node's health checks, on their own threads; `None`: `[health] enabled = false`.
    health: Option<crate::health::Health>,
}

impl Link {
    /// Attempts, backoffs and sessions until a stop signal.
    async fn run(&mut self) {
        let socket = crate::exec::socket_path(&self.opts.tasks.state_dir);
        if let Err(e) = crate::exec::local::listen(&socket, &self.opts.tasks.state_dir, self.current.clone()) {
            tracing::warn!(socket = %socket.display(), "tasks cannot use `hyperplan exec` on this node: {e}");
        }
        let mut backoff = Backoff::default();
        let mut endpoint: Option<quinn::Endpoint> = None;
        // The epoch refusal last logged: the same one again is logged at debug only.
        let mut said_stale: Option<String> = None;
        loop {
            let tried = self.planners.current().to_string();
            let outcome = self.attempt(&mut endpoint, &mut backoff).await;
            let reason = match outcome {
                Outcome::Stop => break,
                Outcome::Lost(reason) => reason,
            };
            let retry = match &reason {
                LinkDown::NotLeader { leader, .. } => self.planners.not_leader(leader.as_deref()),
                // The planner is away (a session that ended: likely dead): the next one.
                _ => self.planners.failed(),
            };
            let delay = match retry {
                Retry::Soon => NOT_LEADER_RETRY,
                Retry::Backoff => backoff.next_delay(),
            };
            let (next, attempt, retry_in_ms) = (self.planners.current(), backoff.attempts(), delay.as_millis() as u64);
            if let LinkDown::NotLeader { leader: Some(_), .. } = &reason {
                // Sent to the leader: how a standby works, nothing is wrong.
                tracing::info!(planner = %tried, %next, attempt, retry_in_ms, "planner link down: {reason}");
            } else if reason.is_stale_epoch() {
                let text = reason.to_string();
                if said_stale.as_deref() == Some(text.as_str()) {
                    tracing::debug!(planner = %tried, %next, attempt, retry_in_ms, "planner link down again: {reason}");
                } else {
                    tracing::warn!(planner = %tried, %next, attempt, retry_in_ms, "planner link down: {reason}");
                    said_stale = Some(text);
                }
            } else {
                tracing::warn!(planner = %tried, %next, attempt, retry_in_ms, "planner link down: {reason}");
            }
            if !reason.is_stale_epoch() {
                said_stale = None; // a change: the next epoch refusal is news again
            }
            match &reason {
                LinkDown::NotLeader { .. } => tell_systemd(&format!("STATUS=looking for the leader: {reason}")),
                _ => tell_systemd(&format!("STATUS=planner {tried} unreachable: {reason}")),
            }
            if self.guard(tokio::time::sleep(delay)).await.is_none() {
                break;
            }
        }
        tell_systemd("STOPPING=1");
        tracing::info!("stopping");
        if let Some(endpoint) = endpoint {
            endpoint.close(quinn::VarInt::from_u32(STOP_CODE), STOP_REASON);
            // Long enough for the close to go out; a gone planner does not hold us up.
            let _ = tokio::time::timeout(CLOSE_GRACE, endpoint.wait_idle()).await;
        }
    }

    /// Resolves the current planner, connects, registers, then runs the session to its
    /// end.
    async fn attempt(&mut self, endpoint: &mut Option<quinn::Endpoint>, backoff: &mut Backoff) -> Outcome {
        let planner = self.planners.current().to_string();
        let addr = match self.guard(resolve(planner.clone())).await {
            None => return Outcome::Stop,
            Some(Err(reason)) => return Outcome::Lost(reason),
            Some(Ok(addr)) => addr,
        };
        let ep = match endpoint_for(endpoint, addr, &self.tls) {
            Ok(ep) => ep,
            Err(e) => return Outcome::Lost(LinkDown::Endpoint(e)),
        };
        let connection = match self.guard(session::connect(ep, addr)).await {
            None => return Outcome::Stop,
            Some(Err(reason)) => return Outcome::Lost(reason),
            Some(Ok(c)) => c,
        };
        let register = session::register_message(
            &self.opts.node,
            &self.topology,
            self.hash,
            self.opts.tasks.confinement.kind(),
            self.opts.advertise_address.clone(),
            self.tasks.highest_epoch(),
        );
        let handshake = session::handshake(connection.clone(), planner.clone(), self.opts.node.clone(), register);
        let registered = match self.guard(handshake).await {
            None => return Outcome::Stop,
            Some(Err(reason)) => return Outcome::Lost(session::fail(&connection, reason)),
            Some(Ok(r)) => r,
        };
        // A planner older than one this node has seen is refused before the backoff is
        // reset: its refusals are retried ever more slowly, not every half second.
        let ours = self.tasks.highest_epoch();
        if !self.tasks.admit_epoch(registered.epoch) {
            let stale = LinkDown::StaleEpoch {
                theirs: registered.epoch,
                ours,
            };
            return Outcome::Lost(session::fail(&connection, stale));
        }
        backoff.reset();
        self.planners.registered();
        tracing::info!(
            %planner,
            %addr,
            heartbeat_ms = registered.heartbeat.as_millis() as u64,
            "registered"
        );
        tell_systemd(&format!("STATUS=registered with {planner}"));
        if !self.ready_sent {
            tell_systemd("READY=1");
            self.ready_sent = true;
        }
        self.set_link_up(true);
        let outcome = self.session(connection, registered).await;
        self.set_link_up(false);
        outcome
    }

    fn set_link_up(&self, up: bool) {
        if let Some(m) = &self.metrics {
            m.set_link_up(up);
        }
    }

    /// The tasks as they are now, with the last sample's use, to `/metrics` (when served).
    fn publish_tasks(&self) {
        if let Some(m) = &self.metrics {
            m.set_tasks(self.tasks.metrics_now(&self.usage));
            m.set_pmi_bytes(self.pmi.bytes());
        }
    }

    /// Samples the running tasks' use off the async thread (nothing to read: none).
    async fn sample_usage(&mut self) {
        let shepherds = self.tasks.shepherds();
        self.usage = if shepherds.is_empty() {
            HashMap::new()
        } else {
            let sampler = self.sampler.clone();
            tokio::task::spawn_blocking(move || match sampler.lock() {
                Ok(mut s) => s.sample(&shepherds),
                Err(_) => Default::default(),
            })
            .await
            .unwrap_or_default()
        };
    }

    /// Drives `fut` while serving what must not wait on it: the watchdog, task scans,
    /// `/metrics` samples, re-probes (periodic and SIGHUP) and stop signals. `None`: stop
    /// requested (`fut` dropped).
    async fn guard<F: Future>(&mut self, fut: F) -> Option<F::Output> {
        let mut fut = std::pin::pin!(fut);
        loop {
            tokio::select! {
                out = &mut fut => return Some(out),
                _ = maybe_tick(&mut self.watchdog) => tell_systemd("WATCHDOG=1"),
                // Reports made while the planner is away go out at the next registration.
                _ = self.scan_timer.tick() => {
                    drop(self.tasks.scan());
                    self.publish_tasks();
                }
                _ = maybe_tick(&mut self.metrics_sample) => {
                    self.sample_usage().await;
                    self.publish_tasks();
                }
                _ = maybe_tick(&mut self.reprobe_timer) => self.reprobe("periodic").await,
                _ = self.signals.hup.recv() => self.reprobe("SIGHUP").await,
                _ = self.signals.term.recv() => return None,
                _ = self.signals.int.recv() => return None,
            }
        }
    }

    /// Probes again; keeps the new topology when its hash differs. A failed re-probe
    /// keeps the last good topology (the machine did not vanish).
    async fn reprobe(&mut self, why: &str) {
        match probe_now(&self.opts, self.metrics.clone()).await {
            Ok(Ok(topology)) => {
                let hash = topology_hash(&topology);
                if hash == self.hash {
                    tracing::info!(why, "re-probed: topology unchanged");
                } else {
                    tracing::info!(
                        why,
                        old = format_args!("{:016x}", self.hash),
                        new = format_args!("{hash:016x}"),
                        "re-probed: topology changed"
                    );
                    self.topology = topology;
                    self.hash = hash;
                }
            }
            Ok(Err(e)) => tracing::warn!(why, "re-probe failed, keeping the last topology: {e}"),
            Err(e) => tracing::warn!(why, "re-probe did not finish, keeping the last topology: {e}"),
        }
    }
}

/// The planner's first address.
async fn resolve(planner: String) -> Result<SocketAddr, LinkDown> {
    let mut addrs = match tokio::net::lookup_host(planner.clone()).await {
        Ok(addrs) => addrs,
        Err(error) => return Err(LinkDown::Resolve { planner, error }),
    };
    addrs.next().ok_or(LinkDown::NoAddress { planner })
}

/// The client endpoint for `addr`'s address family, made once and kept (one UDP socket
/// for all attempts), made again if the planner moves to the other family.
fn endpoint_for(
    slot: &mut Option<quinn::Endpoint>,
    addr: SocketAddr,
    material: &TlsMaterial,
) -> Result<quinn::Endpoint, TlsError> {
    if let Some(ep) = slot
        && ep.local_addr().is_ok_and(|local| local.is_ipv4() == addr.is_ipv4())
    {
        return Ok(ep.clone());
    }
    let ep = tls::client_endpoint(tls::any_addr_for(addr), material)?;
    *slot = Some(ep.clone());
    Ok(ep)
}
