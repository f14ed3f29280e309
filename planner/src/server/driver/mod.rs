//! The one task that owns the `Planner`: it turns what connections say into core events
//! and calls, ticks (on the timer and as soon as something arrives), commits what the
//! core asks to keep, then sends what the core decided (`Launch`, `Kill`, replies). It
//! decides nothing itself: node readiness (`core::health`), which link holds a node
//! (`core::claim`), job ids and admission, owners, limits and who may cancel or read a
//! job (`core::requests`, `core::ownership`), which tasks to launch again on a node
//! that registers again (`Command::Relaunch`) are the core's.
//!
//! - [`links`]: agents' links (behind `server::inbox::LinkControl`, so tests use a fake
//!   one), their registrations, heartbeats and task reports;
//! - [`requests`]: people's requests, answered from the core's answers;
//! - [`clock`]: the one clock the core and the pollers read.
//!
//! What it receives, and answers with, is the server's inbox (`server::inbox`: `ToCore`
//! and its messages), below every part of the server. Everything here runs on plain
//! values and channels: `tests` drives a `Driver` in process with fake links and a
//! virtual clock.

mod clock;
mod exec;
mod links;
mod requests;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use hyperplan_net::messages::{PlannerToAgent, TaskRef};
use hyperplan_shared::ids::TaskId;
use tokio::sync::{mpsc, watch};

pub use self::clock::Clock;
use super::inbox::ToCore;
use crate::config::DaemonConfig;
use crate::discovery::Polled;
use crate::store::writer::{After, Work, Writer};
use crate::store::{Loaded, Store};
use hyperplan_core::{Command, Event, Planner};
use links::Link;

/// What the daemon starts from: the store, what it held, and its writer.
pub struct Start {
    pub store: Store,
    pub loaded: Loaded,
    pub writer: Writer,
    pub advertise: String,
    pub describe: String,
    pub metrics: crate::metrics::Metrics,
    /// `None`: `[accounting] enabled = false`.
    pub accounting: Option<Accounting>,
}

/// The driver's part in accounting: its clock and the topology out, `history` and
/// `report` to the reader, and how far the store may purge in.
pub struct Accounting {
    pub status: std::sync::Arc<crate::accounting::Status>,
    pub topology: watch::Sender<Option<std::sync::Arc<hyperplan_accounting::Topology>>>,
    pub reader: crate::accounting::Reader,
}

struct Driver {
    planner: Planner,
    links: HashMap<String, Link>,
    clock: Clock,
    /// What agents are told to heartbeat at (`[server] heartbeatInterval`).
    heartbeat_interval_ms: u64,
    /// The silence that makes a node NotReady plus `[server] nodeLostAfter`: what agents
    /// are told to fence restartable tasks after (see `PlannerToAgent::Registered`).
    fence_after_ms: u64,
    dirty: bool,
    /// `hyperplan logs` requests waiting for their agents.
    logs: super::logs::LogRelay,
    /// PMI fences being gathered from jobs' nodes.
    fences: super::fence::FenceRelay,
    /// The store, for reading ended jobs (`status --all`); writes go through `writer`.
    store: Store,
    writer: Writer,
    /// This planner's address as standbys name it, and where its state is
    /// (`hyperplan planners`).
    advertise: String,
    describe: String,
    /// What the next commit writes and what waits for it (see `store::writer`).
    work: Work,
    /// Acknowledgements of task starts and ends, sent once the tick that applies them
    /// is committed.
    acks: Vec<After>,
    /// This run's epoch, on every `Registered`, `Launch` and `Kill`.
    epoch: u64,
    /// The next job id the store has.
    stored_next_id: u64,
    /// `[server] privateData`: plain users see only their own jobs.
    private_data: bool,
    /// The most bytes of job reports one status reply holds: the largest frame, less
    /// room for the envelope (see [`reply_budget`]).
    reply_budget: usize,
    /// Ticks run so far (the loop asks for the next deadline after each).
    ticks: u64,
    metrics: crate::metrics::Metrics,
    /// When each placed task's `Launch` went out (job id, task index), until its start is
    /// reported: `hyperplan_launch_latency_seconds`. A task that never starts (its job
    /// ended first) stays until the map holds [`MAX_LAUNCHES_TIMED`], then goes with every
    /// entry older than 10 minutes.
    launched: HashMap<TaskId, Instant>,
    /// `[store] keepFinished`: ended jobs older than this by the driver's clock are
    /// deleted, at the first commit and then every [`PURGE_EVERY_MS`] of that clock.
    keep_finished_ms: u64,
    /// When (driver's clock, Unix ms) the next purge is due.
    next_purge_ms: u64,
    /// The store's own time at the start (the newest ended job's end, or live job's
    /// submit, Unix ms) and the driver's clock then: purges count from it, so that a
    /// clock set ahead deletes no history (see `purge_now_ms`).
    store_time: Option<(u64, u64)>,
    accounting: Option<Accounting>,
    /// When (driver's clock, Unix ms) the topology is next handed to accounting.
    next_topology_ms: u64,
}

/// How often accounting gets the nodes and HyperNodes (when they changed).
const TOPOLOGY_EVERY_MS: u64 = 60_000;

/// How often ended jobs older than `keepFinished` are deleted.
const PURGE_EVERY_MS: u64 = 3_600_000;

/// Bytes of job reports a status reply of a frame of `max_frame` bytes holds: an eighth
/// is left for the envelope and for what the reply's JSON value encodes differently
/// (maps with integer keys become string keys).
fn reply_budget(max_frame: usize) -> usize {
    max_frame - max_frame / 8
}

/// Launches timed at once at most (see `Driver::launched`).
const MAX_LAUNCHES_TIMED: usize = 100_000;

pub async fn run(
    config: DaemonConfig,
    mut rx: mpsc::UnboundedReceiver<ToCore>,
    start: Start,
    mut stopping: watch::Receiver<bool>,
) {
    let period = config.server.tick_interval.min(config.server.heartbeat_interval);
    let mut d = Driver::new(config, start, Clock::real());
    // Ticks at least as often as heartbeats are due, so silence is noticed in time.
    let mut timer = tokio::time::interval(period);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let watchdog = hyperplan_net::notify::watchdog_interval();
    let mut last_watchdog = Instant::now();
    // A burst (a thousand agents registering after a restart) is one tick, not one per
    // message: ticks caused by arrivals are at least this far apart.
    let min_gap = MIN_TICK_GAP.min(period);
    let mut last_tick = Instant::now();
    let mut due: Option<Instant> = None;
    // When the core next decides by time alone (a node falling silent, a lost node's
    // tasks): ticked for then, not only at the timer's next tick.
    let mut deadline: Option<Instant> = None;
    let mut seen_ticks = u64::MAX;
    loop {
        if seen_ticks != d.ticks {
            seen_ticks = d.ticks;
            deadline = d
                .planner
                .next_deadline()
                .map(|at| Instant::now() + std::time::Duration::from_millis(at.saturating_sub(d.clock.now_ms())));
        }
        let wait = async {
            match due {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        let at_deadline = async {
            match deadline {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            // A stopping planner decides nothing more: the links its stop closes must not
            // turn nodes NotReady and move jobs onto the others (what was acknowledged
            // is committed already).
            _ = stopping.wait_for(|s| *s) => break,
            msg = rx.recv() => {
                let Some(msg) = msg else { break };
                d.handle(msg);
                // Take whatever else is queued, then tick once for all of it.
                while let Ok(msg) = rx.try_recv() {
                    d.handle(msg);
                }
            }
            _ = timer.tick() => d.dirty = true,
            () = wait => {}
            () = at_deadline => {
                deadline = None;
                d.dirty = true;
            }
        }
        d.logs.expire(Instant::now());
        if d.dirty {
            let next = last_tick + min_gap;
            if Instant::now() >= next {
                d.tick();
                last_tick = Instant::now();
                due = None;
            } else {
                due = Some(next);
            }
        }
        d.flush();
        if let Some(w) = watchdog
            && last_watchdog.elapsed() >= w
        {
            super::sd_notify("WATCHDOG=1");
            last_watchdog = Instant::now();
        }
    }
}

/// See `run`: the shortest time between two ticks that arrivals cause.
const MIN_TICK_GAP: std::time::Duration = std::time::Duration::from_millis(100);

impl Driver {
    /// The driver of a planner configured by `config`, with the jobs `start` loaded back
    /// in the core and one tick run (counts and records settle before any request).
    fn new(mut config: DaemonConfig, start: Start, clock: Clock) -> Self {
        // The core decides node health from [server]'s heartbeat keys (flags included),
        // and keeps ended jobs in memory no longer than the store keeps them.
        config.planner.health = config.server.health();
        config.planner.limits.keep_ended_secs = Some(config.store.keep_finished.as_secs());
        let mut planner = Planner::new(config.planner.clone());
        planner.push(Event::LabelDiscovery(config.discovery.label.clone()));
        planner.push(Event::NvlinkDiscovery(!config.discovery.nvlink_off));
        // The pollers (`crate::discovery`) send the sources' contents; declared here so
        // people see every source from the start.
        for s in &config.discovery.sources {
            planner.push(Event::DeclareSource {
                source: s.name.clone(),
                kind: s.spec.kind(),
                target: s.spec.target(),
            });
        }
        let mut d = Driver {
            planner,
            links: HashMap::new(),
            clock,
            heartbeat_interval_ms: u64::try_from(config.server.heartbeat_interval.as_millis()).unwrap_or(u64::MAX),
            fence_after_ms: u64::try_from(config.planner.health.fence_after().as_millis()).unwrap_or(u64::MAX),
            dirty: true,
            logs: super::logs::LogRelay::default(),
            fences: super::fence::FenceRelay::default(),
            store: start.store,
            writer: start.writer,
            advertise: start.advertise,
            describe: start.describe,
            work: Work::default(),
            acks: Vec::new(),
            epoch: start.loaded.epoch,
            stored_next_id: start.loaded.next_job_id,
            private_data: config.server.private_data,
            reply_budget: reply_budget(config.server.max_frame_bytes),
            ticks: 0,
            metrics: start.metrics,
            launched: HashMap::new(),
            keep_finished_ms: u64::try_from(config.store.keep_finished.as_millis()).unwrap_or(u64::MAX),
            next_purge_ms: 0,
            store_time: None,
            accounting: start.accounting,
            next_topology_ms: 0,
        };
        d.store_time = d.store_time_at_start(&start.loaded);
        d.restore(start.loaded);
        d.tick();
        d
    }

    /// The newest time the store holds, with the clock now, said in the log when the
    /// clock reads more than `keepFinished` past it.
    fn store_time_at_start(&self, loaded: &Loaded) -> Option<(u64, u64)> {
        let submits = loaded.live.iter().map(|j| j.spec.submit_time);
        let newest_secs = loaded.newest_end_secs.into_iter().chain(submits).max()?;
        let (newest, now) = (newest_secs.saturating_mul(1000), self.clock.now_ms());
        let ahead = now.saturating_sub(newest);
        if ahead > self.keep_finished_ms {
            tracing::warn!(
                at = %self.store.at().display(),
                days_ahead = format_args!("{:.1}", ahead as f64 / 86_400_000.0),
                "the clock reads more than keepFinished past the newest job in the store: ended jobs are \
                 deleted keepFinished after their end by the store's time (its newest job plus the time this \
                 planner has run), not by the clock, so a clock set ahead deletes no history; if the cluster \
                 was only idle, their deletion waits for the next restart"
            );
        }
        Some((newest, now))
    }

    /// The time purges count from: the clock, but never further past the store's newest
    /// job than the time this planner has run since its start.
    fn purge_now_ms(&self, now: u64) -> u64 {
        match self.store_time {
            Some((newest, at_start)) => now.min(newest.saturating_add(now.saturating_sub(at_start))),
            None => now,
        }
    }

    /// Fair share's usage and the jobs that had not ended, back in the core (before the
    /// first tick).
    fn restore(&mut self, loaded: Loaded) {
        self.planner.enable_persist();
        // Before the jobs: what the restored running tasks accrue joins it. A record that
        // cannot be read is no reason to refuse a start: fair share begins again.
        if let Some(bytes) = &loaded.usage
            && let Err(e) = self.planner.restore_usage(bytes)
        {
            tracing::warn!(
                at = %self.store.at().display(),
                "store: the fair-share usage record cannot be read ({e}); starting with no usage"
            );
        }
        let jobs = loaded.live.len();
        let running: usize = loaded
            .live
            .iter()
            .map(|j| j.tasks.iter().filter(|t| t.node.is_some() && t.end.is_none()).count())
            .sum();
        for w in self
            .planner
            .restore(loaded.live, loaded.next_job_id, self.clock.now_ms())
        {
            tracing::warn!("store: {w}");
        }
        // After the jobs, so that the nodes they name are marked at once. An unreadable
        // record would resume every drained node: said loudly, the start goes on.
        if let Some(bytes) = &loaded.drains
            && let Err(e) = self.planner.restore_drains(bytes)
        {
            tracing::error!(
                at = %self.store.at().display(),
                "store: the nodes' drains cannot be read ({e}); every node starts undrained: drain them again"
            );
        }
        tracing::info!(
            at = %self.store.at().display(),
            epoch = self.epoch,
            jobs,
            placed_tasks = running,
            "loaded the planner's state"
        );
    }

    /// Hands what waits to the writer: one commit, then the replies and frames.
    fn flush(&mut self) {
        let next = self.planner.next_job_id();
        if next != self.stored_next_id {
            self.work.batch.next_job_id = Some(next);
            self.stored_next_id = next;
        }
        let now = self.clock.now_ms();
        if now >= self.next_purge_ms {
            self.next_purge_ms = now.saturating_add(PURGE_EVERY_MS);
            let before = self.purge_now_ms(now).saturating_sub(self.keep_finished_ms) / 1000;
            // Never an ended job accounting does not have yet: the store is its backlog.
            self.work.purge_before = match &self.accounting {
                Some(a) => a.status.purge_limit().map(|written| before.min(written)),
                None => Some(before),
            };
        }
        if let Some(a) = &self.accounting {
            a.status.set_now(now / 1000);
            let info = a.status.info();
            self.metrics
                .accounting_behind
                .set(i64::try_from(info.behind_secs).unwrap_or(i64::MAX));
            self.metrics.accounting_up.set(i64::from(info.error.is_none()));
            if now >= self.next_topology_ms {
                self.next_topology_ms = now.saturating_add(TOPOLOGY_EVERY_MS);
                let topology = crate::accounting::topology::of(&self.planner);
                a.topology.send_if_modified(|t| {
                    let changed = t.as_deref() != Some(&topology);
                    if changed {
                        *t = Some(std::sync::Arc::new(topology));
                    }
                    changed
                });
            }
        }
        self.writer.send(std::mem::take(&mut self.work));
    }

    fn handle(&mut self, msg: ToCore) {
        match msg {
            ToCore::Agent(m) => self.agent_said(m),
            ToCore::Policy(config) => match self.planner.reload_policy(&config) {
                Ok(()) => {
                    let names: Vec<&str> = config.queues.iter().map(|q| q.name.as_str()).collect();
                    tracing::info!(queues = ?names, windows = config.maintenance.len(), "policy reloaded");
                    self.dirty = true;
                }
                Err(e) => tracing::error!("policy not reloaded: {e}"),
            },
            ToCore::Discovered(Polled { source, kind, result }) => {
                self.planner.push(Event::Discovered {
                    source,
                    kind,
                    at: self.clock.now_secs(),
                    result,
                });
                self.dirty = true;
            }
            ToCore::Request(r) => self.request(r),
            ToCore::Exec(ask) => self.exec(ask),
            ToCore::StepEnded(ended) => self.step_ended(ended),
            ToCore::WebState(reply) => {
                if self.dirty {
                    self.tick();
                }
                let now = self.clock.now_secs();
                let _ = reply.send(crate::web::state::snapshot(
                    &self.planner,
                    &self.advertise,
                    now,
                    self.private_data,
                ));
            }
            ToCore::Metrics(reply) => {
                let _ = reply.send(crate::metrics::snapshot::Snapshot {
                    gauges: self.planner.gauges(),
                    sources: self.planner.hyper_nodes().sources,
                    agents: self.links.len(),
                });
            }
        }
    }

    fn tick(&mut self) {
        self.dirty = false;
        self.ticks += 1;
        super::quiet::flush();
        let commands = self.planner.tick_millis(self.clock.now_ms());
        let mut placements = Vec::new();
        for c in commands {
            match c {
                Command::Persist(p) => self.work.batch.jobs.push(p),
                Command::PersistUsage(bytes) => self.work.batch.usage = Some(bytes),
                Command::PersistDrains(bytes) => self.work.batch.drains = Some(bytes),
                Command::Place(p) => {
                    tracing::info!(job = p.job(), task = &*p.task, node = &*p.node, rank = p.rank, "placed");
                    self.metrics.placements.inc();
                    if p.rank == 0 {
                        let waited = self.clock.now_secs().saturating_sub(p.spec.submit_time);
                        let queue = p.spec.queue.clone().unwrap_or_else(|| "default".into());
                        self.metrics
                            .job_wait
                            .get_or_create(&vec![("queue", queue)])
                            .observe(waited as f64);
                    }
                    placements.push(p);
                }
                Command::Relaunch {
                    node,
                    placements: again,
                } => {
                    tracing::info!(
                        node,
                        tasks = again.len(),
                        "sending the Launch of its unstarted tasks again"
                    );
                    placements.extend(again);
                }
                Command::Reject { job, reason } => tracing::warn!(job, "rejected: {reason}"),
                Command::Warn(w) => super::quiet::warn_limited!(w, "{w}"),
                Command::Info(i) => tracing::info!("{i}"),
                Command::NodeHealth { node, why, .. } => self.log_health(&node, why),
                Command::Preempted {
                    victim,
                    by,
                    hyper_node,
                    lost_cpu_seconds,
                    requeued,
                    why,
                } => {
                    self.metrics.preemptions.inc();
                    tracing::warn!(
                        job = victim,
                        by,
                        hyper_node = hyper_node.as_deref().unwrap_or("(cluster)"),
                        lost_cpu_seconds,
                        requeued,
                        "preempted: {why}"
                    );
                }
                Command::Kill {
                    node,
                    job,
                    job_id,
                    task,
                    index,
                    grace_secs,
                    why,
                    signal,
                } => {
                    tracing::info!(
                        job = &*job,
                        task = &*task,
                        node = &*node,
                        grace_secs,
                        "kill: {}",
                        why.as_str()
                    );
                    if why == hyperplan_core::model::kill::KillReason::Preempted {
                        self.metrics.victims.inc();
                    }
                    if let Some(l) = self.links.get(&*node) {
                        let task = TaskRef {
                            job: job.to_string(),
                            job_id,
                            task: task.to_string(),
                            index,
                        };
                        let kill = PlannerToAgent::Kill {
                            task,
                            grace_secs,
                            epoch: self.epoch,
                            signal,
                        };
                        self.work.after.push(After::Frame(l.frames.clone(), kill));
                    }
                }
            }
        }
        // Acknowledged once what they changed is committed (this tick's records).
        self.work.after.append(&mut self.acks);
        // The fences of jobs that ended go (with the last answer each kept).
        if !self.fences.is_empty() {
            let planner = &self.planner;
            self.fences.retain(|job, id| planner.job_nodes(job, id).is_some());
        }
        if placements.is_empty() {
            return;
        }
        let links = &self.links;
        let address_of = |node: &str| links.get(node).map(Link::address);
        for (node, mut frame) in super::launch::frames(&self.planner, placements, address_of) {
            if let PlannerToAgent::Launch(l) = &mut frame {
                l.epoch = self.epoch;
                self.metrics.launches.inc();
                if self.launched.len() >= MAX_LAUNCHES_TIMED {
                    // Starts never reported (their jobs ended first): forgotten.
                    self.launched.retain(|_, t| t.elapsed() < Duration::from_secs(600));
                }
                self.launched.insert(
                    TaskId {
                        job: l.job_id,
                        index: l.index,
                    },
                    Instant::now(),
                );
            }
            if let Some(l) = self.links.get(&*node) {
                self.work.after.push(After::Frame(l.frames.clone(), frame));
            }
        }
    }
}
