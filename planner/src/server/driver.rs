//! The one task that owns the `Planner`: it turns what connections say into core events,
//! ticks (on the timer and as soon as something arrives), sends `Launch` for placed tasks,
//! logs what the core decided, and answers people's requests from the world. It decides
//! nothing itself: node readiness (`core::health`), which link holds a node
//! (`core::claim`), job owners, ids, limits, the priority cap and name clashes
//! (`core::ownership`), and who may see which job (`core::caller`, `[server] privateData`)
//! are the core's. Time for the core is [`Clock`].

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use hyperplan_net::messages::{
    AgentMessage, Confinement, PlannerToAgent, RequestCommand, ResponseError, RunningTask, TaskRef,
};
use hyperplan_shared::NodeSpec;
use hyperplan_shared::status::{Cancelled, JobList, Manifests, NodeList, Submitted};
use hyperplan_shared::topology::{NodeTopology, SharedTopology};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::close;
use crate::config::{DaemonConfig, SourceKind};
use crate::store::writer::{After, Work, Writer};
use crate::store::{Loaded, Store};
use hyperplan_core::caller::Caller;
use hyperplan_core::discovery::{Found, SourceError};
use hyperplan_core::model::commands::HealthChange;
use hyperplan_core::model::events::TaskOnNode;
use hyperplan_core::model::record::JobRecord;
use hyperplan_core::numa::node::hardware_resources;
use hyperplan_core::ownership::{CancelError, SubmitError};
use hyperplan_core::{Command, Event, Planner, view};

/// What connections tell the driver.
#[derive(Debug)]
pub enum ToCore {
    Register {
        node: String,
        conn_id: u64,
        labels: BTreeMap<String, String>,
        topology: Box<NodeTopology>,
        /// How the node confines tasks, as its agent said (display only).
        confinement: Option<Confinement>,
        /// Its `advertiseAddress` (checked): `MASTER_ADDR` when it holds rank 0.
        advertise: Option<String>,
        /// The newest planner epoch the agent has obeyed (0: none or not said).
        epoch: u64,
        link: mpsc::UnboundedSender<PlannerToAgent>,
        conn: quinn::Connection,
    },
    Heartbeat {
        node: String,
        conn_id: u64,
        seq: u64,
        /// The tasks the node's shepherds run.
        running: Vec<RunningTask>,
    },
    /// `TaskStarted`, `TaskFinished` or `Log` from a registered agent.
    Tasks {
        node: String,
        conn_id: u64,
        /// Boxed: a Register-sized message would make every `ToCore` that large.
        message: Box<AgentMessage>,
    },
    TopologyChanged {
        node: String,
        conn_id: u64,
        topology: Box<NodeTopology>,
    },
    /// The link ended (closed, lost, refused after registering).
    Gone { node: String, conn_id: u64 },
    /// A discovery source was read (see `super::discovery`).
    Discovered {
        source: String,
        kind: SourceKind,
        at: u64,
        result: Result<Found, SourceError>,
    },
    Request {
        user: String,
        admin: bool,
        peer: SocketAddr,
        command: RequestCommand,
        reply: oneshot::Sender<Result<Value, ResponseError>>,
    },
}

/// A registered agent's link: where to send, and what its agent said that the core
/// does not keep.
struct Link {
    conn_id: u64,
    tx: mpsc::UnboundedSender<PlannerToAgent>,
    conn: quinn::Connection,
    labels: BTreeMap<String, String>,
    /// How the node confines tasks (`hyperplan nodes`), as its agent said at Register.
    confinement: Option<Confinement>,
    /// What the agent advertises as its address (`MASTER_ADDR`).
    advertise: Option<String>,
    /// The last heartbeat's sequence number, for the log.
    last_seq: u64,
}

/// The core's time: Unix milliseconds when the driver started plus monotonic time since.
/// Monotonic, so a wall-clock step can neither make every node look silent nor keep a
/// dead one Ready; Unix-based, so job times read as dates. Milliseconds, because agents
/// may heartbeat more than once a second.
struct Clock {
    start: Instant,
    start_unix_ms: u64,
}

impl Clock {
    fn new() -> Self {
        let unix = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        Self {
            start: Instant::now(),
            start_unix_ms: u64::try_from(unix.as_millis()).unwrap_or(u64::MAX),
        }
    }

    fn now_ms(&self) -> u64 {
        let since = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.start_unix_ms.saturating_add(since)
    }
}

struct Driver {
    planner: Planner,
    links: HashMap<String, Link>,
    clock: Clock,
    /// What agents are told to heartbeat at (`[server] heartbeatInterval`).
    heartbeat_interval_ms: u64,
    dirty: bool,
    /// `hyperplan logs` requests waiting for their agents.
    logs: super::logs::LogRelay,
    /// Nodes whose agent registered since the last tick: their unstarted tasks are
    /// launched again after it (a `Launch` may have gone down with the old link).
    relaunch: Vec<String>,
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
}

/// What the daemon starts from: the store, what it held, and its writer.
pub struct Start {
    pub store: Store,
    pub loaded: Loaded,
    pub writer: Writer,
    pub advertise: String,
    pub describe: String,
}

pub async fn run(mut config: DaemonConfig, mut rx: mpsc::UnboundedReceiver<ToCore>, start: Start) {
    // The core decides node health from [server]'s heartbeat keys (flags included).
    config.planner.health = config.server.health();
    let mut planner = Planner::new(config.planner.clone());
    planner.push(Event::LabelDiscovery(config.discovery.label.clone()));
    // The pollers (`super::discovery`) send the sources' contents; declared here so
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
        clock: Clock::new(),
        heartbeat_interval_ms: u64::try_from(config.server.heartbeat_interval.as_millis()).unwrap_or(u64::MAX),
        dirty: true,
        logs: super::logs::LogRelay::default(),
        relaunch: Vec::new(),
        store: start.store,
        writer: start.writer,
        advertise: start.advertise,
        describe: start.describe,
        work: Work::default(),
        acks: Vec::new(),
        epoch: start.loaded.epoch,
        stored_next_id: start.loaded.next_job_id,
        private_data: config.server.private_data,
    };
    d.restore(start.loaded);
    // Counts (jobs per owner for maxJobsPerUser) and records settle before any request.
    d.tick();
    // Ticks at least as often as heartbeats are due, so silence is noticed in time.
    let period = config.server.tick_interval.min(config.server.heartbeat_interval);
    let mut timer = tokio::time::interval(period);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let watchdog = hyperplan_net::notify::watchdog_interval();
    let mut last_watchdog = Instant::now();
    // A burst (a thousand agents registering after a restart) is one tick, not one per
    // message: ticks caused by arrivals are at least this far apart.
    let min_gap = MIN_TICK_GAP.min(period);
    let mut last_tick = Instant::now();
    let mut due: Option<Instant> = None;
    loop {
        let wait = async {
            match due {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
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

/// Wall-clock Unix seconds, for what the pollers read (`super::discovery`).
pub(crate) fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Driver {
    /// The jobs that had not ended, back in the core (before the first tick).
    fn restore(&mut self, loaded: Loaded) {
        self.planner.enable_persist();
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
        self.writer.send(std::mem::take(&mut self.work));
    }

    fn handle(&mut self, msg: ToCore) {
        match msg {
            ToCore::Register {
                node,
                conn_id,
                labels,
                topology,
                confinement,
                advertise,
                epoch,
                link,
                conn,
            } => {
                if let Some(why) = topology.unsupported() {
                    tracing::warn!(node, "refused an agent: {why}");
                    super::refuse::refuse(&conn, close::REFUSED, &format!("node {node:?}: {why}"));
                    return;
                }
                let now_ms = self.clock.now_ms();
                if epoch > self.epoch {
                    // The agent would refuse this planner's orders: the node is not taken
                    // (it stays NotReady, its tasks are lost in time), and people see why.
                    let reason = format!(
                        "its agent has obeyed planner epoch {epoch}; this planner is at epoch {}: a newer planner leads elsewhere, or this planner's store is older than one the cluster used (restore the newest store with `hyperplan-planner state import`; if it is gone for good, remove `epoch` in the agent's state directory)",
                        self.epoch
                    );
                    self.planner.push(Event::NodeRefused {
                        node: node.clone(),
                        reason: reason.clone(),
                        at_ms: now_ms,
                    });
                    conn.close(quinn::VarInt::from_u32(close::STALE_EPOCH), reason.as_bytes());
                    return;
                }
                if let Err(e) = self.planner.claim_node(&node, conn_id, now_ms) {
                    // The first agent keeps the node; this one hears why and backs off.
                    super::refuse::refuse(&conn, close::REFUSED, &e.to_string());
                    return;
                }
                // Free, or held by a link silent too long (a restarted agent's old run).
                if let Some(old) = self.links.remove(&node) {
                    tracing::info!(node, "replacing the node's silent link with a new one");
                    old.conn.close(
                        quinn::VarInt::from_u32(close::NORMAL),
                        b"replaced by a newer connection of this node (this one was silent)",
                    );
                }
                self.planner.push(Event::NodeUp(node_spec(&node, &labels, *topology)));
                self.planner.push(Event::LinkUp {
                    node: node.clone(),
                    link: conn_id,
                    at_ms: now_ms,
                });
                let _ = link.send(PlannerToAgent::Registered {
                    node: node.clone(),
                    heartbeat_interval_ms: self.heartbeat_interval_ms,
                    epoch: self.epoch,
                });
                self.relaunch.push(node.clone());
                self.links.insert(
                    node,
                    Link {
                        conn_id,
                        tx: link,
                        conn,
                        labels,
                        confinement,
                        advertise,
                        last_seq: 0,
                    },
                );
                self.dirty = true;
            }
            ToCore::Heartbeat {
                node,
                conn_id,
                seq,
                running,
            } => {
                let Some(l) = self.links.get_mut(&node).filter(|l| l.conn_id == conn_id) else {
                    return;
                };
                l.last_seq = seq;
                // Every heartbeat, even an empty list: a task its agent stops listing
                // is lost after nodeLostAfter (see `core::lost`).
                let tasks = running
                    .into_iter()
                    .map(|r| TaskOnNode {
                        job: r.task.job,
                        job_id: r.task.job_id,
                        task: r.task.task,
                        pid: r.pid,
                        cpu_cores: r.cpu_cores,
                        rss_bytes: r.rss_bytes,
                    })
                    .collect();
                self.planner.push(Event::TasksOnNode {
                    node: node.clone(),
                    tasks,
                });
                // No tick for it: the core reads the time it arrived, and the timer ticks
                // at least once per heartbeat interval.
                self.planner.push(Event::Heartbeat {
                    node,
                    at_ms: self.clock.now_ms(),
                });
            }
            ToCore::Tasks { node, conn_id, message } => self.task_report(node, conn_id, *message),
            ToCore::TopologyChanged {
                node,
                conn_id,
                topology,
            } => {
                let Some(l) = self.links.get(&node).filter(|l| l.conn_id == conn_id) else {
                    return;
                };
                tracing::info!(node, "topology changed");
                self.planner.push(Event::NodeUp(node_spec(&node, &l.labels, *topology)));
                self.dirty = true;
            }
            ToCore::Gone { node, conn_id } => {
                if self.links.get(&node).is_some_and(|l| l.conn_id == conn_id) {
                    self.links.remove(&node);
                    self.logs.node_gone(&node);
                    self.planner.push(Event::LinkDown {
                        node,
                        link: conn_id,
                        at_ms: self.clock.now_ms(),
                    });
                    self.dirty = true;
                }
            }
            ToCore::Discovered {
                source,
                kind,
                at,
                result,
            } => {
                self.planner.push(Event::Discovered {
                    source,
                    kind,
                    at,
                    result,
                });
                self.dirty = true;
            }
            ToCore::Request {
                user,
                admin,
                peer,
                command,
                reply,
            } => {
                if self.dirty && !matches!(command, RequestCommand::Submit { .. }) {
                    self.tick(); // answer from a world that has seen everything received
                }
                // What changes state is answered once it is on disk.
                let durable = matches!(command, RequestCommand::Submit { .. } | RequestCommand::Cancel { .. });
                if let RequestCommand::Logs {
                    job,
                    task,
                    stderr,
                    offset,
                    max_bytes,
                } = command
                {
                    let caller = self.caller(&user, admin);
                    return self.relay_logs(caller, &job, task.as_deref(), stderr, offset, max_bytes, reply);
                }
                let answer = self.answer(self.caller(&user, admin), peer, command);
                if durable {
                    self.work.after.push(After::Reply(reply, answer));
                } else {
                    let _ = reply.send(answer);
                }
            }
        }
    }

    fn tick(&mut self) {
        self.dirty = false;
        super::quiet::flush();
        let commands = self.planner.tick_millis(self.clock.now_ms());
        let mut placements = Vec::new();
        for c in commands {
            match c {
                Command::Persist(p) => self.work.batch.jobs.push(p),
                Command::Place(p) => {
                    tracing::info!(job = p.job(), task = &*p.task, node = &*p.node, rank = p.rank, "placed");
                    placements.push(p);
                }
                Command::Reject { job, reason } => tracing::warn!(job, "rejected: {reason}"),
                Command::Warn(w) => super::quiet::warn_limited!(w, "{w}"),
                Command::Info(i) => tracing::info!("{i}"),
                Command::NodeHealth { node, why, .. } => self.log_health(&node, why),
                Command::Kill {
                    node,
                    job,
                    job_id,
                    task,
                    grace_secs,
                    why,
                } => {
                    tracing::info!(
                        job = &*job,
                        task = &*task,
                        node = &*node,
                        grace_secs,
                        "kill: {}",
                        why.as_str()
                    );
                    if let Some(l) = self.links.get(&*node) {
                        let task = TaskRef {
                            job: job.to_string(),
                            job_id,
                            task: task.to_string(),
                        };
                        let kill = PlannerToAgent::Kill {
                            task,
                            grace_secs,
                            epoch: self.epoch,
                        };
                        self.work.after.push(After::Frame(l.tx.clone(), kill));
                    }
                }
            }
        }
        // The registered nodes' tasks whose start was never reported, after this tick's
        // own placements (the agent starts nothing twice: a repeat is harmless).
        for node in std::mem::take(&mut self.relaunch) {
            let again = self.planner.unstarted_on(&node);
            if !again.is_empty() {
                tracing::info!(
                    node,
                    tasks = again.len(),
                    "sending the Launch of its unstarted tasks again"
                );
            }
            placements.extend(again);
        }
        // Acknowledged once what they changed is committed (this tick's records).
        self.work.after.append(&mut self.acks);
        if placements.is_empty() {
            return;
        }
        let links = &self.links;
        let address_of = |node: &str| {
            links.get(node).map(|l| {
                l.advertise
                    .clone()
                    .unwrap_or_else(|| l.conn.remote_address().ip().to_string())
            })
        };
        for (node, mut frame) in super::launch::frames(self.planner.world(), placements, address_of) {
            if let PlannerToAgent::Launch(l) = &mut frame {
                l.epoch = self.epoch;
            }
            if let Some(l) = self.links.get(&*node) {
                self.work.after.push(After::Frame(l.tx.clone(), frame));
            }
        }
    }

    /// A task's start or end from its node's agent: to the core, acknowledged once the
    /// tick that applies it is committed (the agent keeps sending it until then); or a
    /// piece of output for `logs`.
    fn task_report(&mut self, node: String, conn_id: u64, message: AgentMessage) {
        let Some(link) = self.links.get(&node).filter(|l| l.conn_id == conn_id) else {
            return; // a link that no longer holds the node: its agent sends again
        };
        match message {
            AgentMessage::TaskStarted(s) => {
                tracing::info!(job = s.task.job, task = s.task.task, node, pid = s.pid, "task started");
                let ack = PlannerToAgent::Ack {
                    task: s.task.clone(),
                    finished: false,
                };
                self.acks.push(After::Frame(link.tx.clone(), ack));
                self.planner.push(Event::TaskStarted {
                    node,
                    job: s.task.job,
                    job_id: s.task.job_id,
                    task: s.task.task,
                    pid: s.pid,
                    at_ms: s.start_time_ms,
                });
                self.dirty = true;
            }
            AgentMessage::TaskFinished(f) => {
                let f = *f;
                let end = &f.end;
                tracing::info!(
                    job = f.task.job,
                    task = f.task.task,
                    node,
                    outcome = end.outcome.as_str(),
                    exit_code = end.exit_code,
                    signal = end.signal,
                    reason = end.reason.as_deref(),
                    "task ended"
                );
                let ack = PlannerToAgent::Ack {
                    task: f.task.clone(),
                    finished: true,
                };
                self.acks.push(After::Frame(link.tx.clone(), ack));
                self.planner.push(Event::TaskEnded {
                    node,
                    job: f.task.job,
                    job_id: f.task.job_id,
                    task: f.task.task,
                    end: f.end,
                });
                self.dirty = true;
            }
            AgentMessage::Log(chunk) => self.logs.answer(&node, chunk),
            AgentMessage::Register { .. } | AgentMessage::Heartbeat { .. } | AgentMessage::TopologyChanged { .. } => {}
        }
    }

    /// Who sent a request, as the core's checks take it.
    fn caller<'a>(&self, user: &'a str, admin: bool) -> Caller<'a> {
        Caller {
            user,
            admin,
            private_data: self.private_data,
        }
    }

    /// `hyperplan logs`: finds the task and its node, checks the person may read it, and
    /// asks the node's agent (the answer comes with its `Log`).
    #[allow(clippy::too_many_arguments)]
    fn relay_logs(
        &mut self,
        caller: Caller<'_>,
        job: &str,
        task: Option<&str>,
        stderr: bool,
        offset: u64,
        max_bytes: u32,
        reply: oneshot::Sender<Result<Value, ResponseError>>,
    ) {
        let found = (|| {
            let missing = || ResponseError::new(format!("no job named {job:?}"));
            // Under privateData another user's job is answered as a missing one.
            if !self.planner.sees_job(job, caller) {
                return Err(missing());
            }
            let owner = self.planner.owner_of(job).map(str::to_string);
            let report = self.planner.job(job).ok_or_else(missing)?;
            if !caller.admin && owner.as_deref() != Some(caller.user) {
                return Err(ResponseError::new(format!(
                    "job {job} belongs to {}; only its owner or an admin may read its output",
                    owner.as_deref().unwrap_or("nobody")
                )));
            }
            let t = match task {
                Some(name) => report.tasks.iter().find(|t| t.name == name).ok_or_else(|| {
                    ResponseError::new(format!("job {job} has no task {name:?} (see `hyperplan status {job}`)"))
                })?,
                None => report
                    .tasks
                    .iter()
                    .filter(|t| t.rank.is_some())
                    .min_by_key(|t| t.rank)
                    .ok_or_else(|| ResponseError::new(format!("job {job} has no task placed yet: no output")))?,
            };
            let node = t
                .node
                .clone()
                .ok_or_else(|| ResponseError::new(format!("task {job}/{} is not placed yet: no output", t.name)))?;
            let piece = hyperplan_shared::status::LogPiece {
                job: job.to_string(),
                task: t.name.clone(),
                node,
                offset,
                ended: t.state.is_some_and(|s| {
                    use hyperplan_shared::report::TaskStatus as S;
                    matches!(s, S::Exited | S::Killed | S::Lost)
                }),
                ..Default::default()
            };
            let task = TaskRef {
                job: job.to_string(),
                job_id: report.id,
                task: t.name.clone(),
            };
            Ok((task, piece))
        })();
        match found {
            Ok((task, piece)) => {
                let link = self.links.get(&piece.node).map(|l| &l.tx);
                self.logs.ask(link, task, stderr, max_bytes, piece, reply);
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }

    /// The core's health decisions, in the words the planner's log has always used
    /// (operators and tests grep them).
    fn log_health(&self, node: &str, why: HealthChange) {
        let link = self.links.get(node);
        match why {
            HealthChange::Registered => match link {
                Some(l) => tracing::info!(node, peer = %l.conn.remote_address(), "node registered: Ready"),
                None => tracing::info!(node, "node registered: Ready"),
            },
            HealthChange::HeartbeatAgain => {
                let seq = link.map_or(0, |l| l.last_seq);
                tracing::info!(node, seq, "heartbeat again: Ready");
            }
            HealthChange::Silent { silent_ms, missed } => {
                tracing::warn!(
                    node,
                    missed,
                    "no heartbeat for {:.1} s: NotReady",
                    std::time::Duration::from_millis(silent_ms).as_secs_f64()
                );
            }
            HealthChange::LinkClosed => tracing::warn!(node, "agent link closed: NotReady"),
        }
    }

    fn answer(
        &mut self,
        caller: Caller<'_>,
        peer: SocketAddr,
        command: RequestCommand,
    ) -> Result<Value, ResponseError> {
        let user = caller.user;
        match command {
            RequestCommand::Submit {
                file_name,
                text,
                submit_dir,
            } => {
                let submit_dir = submit_dir.map(checked_submit_dir).transpose()?;
                let jobs = hyperplan_shared::parse_jobs(&text, Path::new(&file_name)).map_err(|e| e.to_string())?;
                if let Err(e) = self.planner.check_submission(&jobs, caller) {
                    if !matches!(e, SubmitError::Name(_)) {
                        tracing::warn!(user, "refused a submission: {e}");
                    }
                    return Err(format!("{file_name}: {e}").into());
                }
                let now = self.clock.now_ms() / 1000;
                let mut names = Vec::new();
                let mut ids = Vec::new();
                // Every record first (nothing is pushed if one cannot be encoded), then
                // the jobs: the records are written before the answer (see `flush`), the
                // core makes the jobs at its next tick.
                let first = self.planner.next_job_id();
                let mut admitted = Vec::with_capacity(jobs.len());
                for (id, mut j) in (first..).zip(jobs) {
                    j.submit_time = now;
                    j.submit_dir.clone_from(&submit_dir);
                    let record = JobRecord::submitted(id, user, j.clone())
                        .persist()
                        .map_err(|e| ResponseError::new(format!("encoding job {}: {e}", j.name)))?;
                    admitted.push((id, j, record));
                }
                for (id, j, record) in admitted {
                    self.work.batch.jobs.push(record);
                    names.push(j.name.clone());
                    ids.push(id);
                    self.planner.push(Event::SubmitBy {
                        spec: j,
                        owner: user.to_string(),
                    });
                }
                tracing::info!(user, jobs = ?names, ids = ?ids, "submitted");
                self.dirty = true;
                to_value(&Submitted { submitted: names, ids })
            }
            RequestCommand::Cancel { job, grace_secs } => {
                if let Err(e) = self.planner.authorize_cancel(&job, caller) {
                    if let CancelError::NotOwner { owner, .. } | CancelError::Hidden { owner, .. } = &e {
                        tracing::warn!(%peer, user, job, owner, "refused: cancel of another user's job");
                    }
                    return Err(e.to_string().into());
                }
                tracing::info!(user, job, "cancelled");
                self.planner.push(Event::Cancel {
                    job: job.clone(),
                    grace_secs,
                });
                self.tick();
                to_value(&Cancelled { cancelled: job })
            }
            RequestCommand::Status { job, all, since_secs } => {
                let mut jobs = self.planner.jobs();
                // Under privateData a plain user's answer is built from their jobs alone, so
                // it reads as if no one else's existed (names, owners, directories, pids).
                caller.keep_visible(&mut jobs);
                // One name the world has (`submit --wait` asks every second): no disk read.
                let in_world = job.as_ref().is_some_and(|n| jobs.iter().any(|j| &j.name == n));
                // A name the world does not have may be a job that ended before this start.
                if ((all || job.is_some()) && !in_world) || since_secs.is_some() {
                    // Ended jobs from before this start are on disk only.
                    let cutoff = since_secs.map_or(0, |s| (self.clock.now_ms() / 1000).saturating_sub(s));
                    let have: std::collections::HashSet<u64> = jobs.iter().map(|j| j.id).collect();
                    let stored = self.store.finished(cutoff).map_err(|e| e.to_string())?;
                    let wanted = |r: &&JobRecord| {
                        !have.contains(&r.id)
                            && job.as_ref().is_none_or(|n| &r.spec.name == n)
                            && caller.sees(Some(&r.owner))
                    };
                    jobs.extend(stored.iter().filter(wanted).map(view::stored_report));
                    if since_secs.is_some() {
                        jobs.retain(|j| j.end_time.is_none_or(|end| end >= cutoff));
                    }
                    jobs.sort_by_key(|j| j.id);
                    if !all && since_secs.is_none() {
                        jobs = view::newest_of_each_name(jobs);
                    }
                } else if !all {
                    jobs = view::newest_of_each_name(jobs);
                }
                if let Some(name) = job {
                    jobs.retain(|j| j.name == name);
                    if jobs.is_empty() {
                        return Err(format!("no job named {name:?}").into());
                    }
                }
                to_value(&JobList { jobs })
            }
            RequestCommand::Nodes => {
                let mut nodes = self.planner.nodes();
                // Display only: what each node's current link said at Register.
                for n in &mut nodes {
                    n.confinement = self
                        .links
                        .get(&n.name)
                        .and_then(|l| l.confinement)
                        .map(|c| c.as_str().to_string());
                }
                to_value(&NodeList { nodes })
            }
            RequestCommand::HyperNodes => to_value(&self.planner.hyper_nodes()),
            RequestCommand::Manifests => {
                let specs = view::resolved_specs(self.planner.index());
                to_value(&Manifests {
                    manifests: hyperplan_shared::hypernode::to_hypernode_manifests(&specs),
                })
            }
            RequestCommand::Logs { .. } => Err("logs: answered by the relay".into()),
            RequestCommand::Planners => to_value(&hyperplan_shared::status::PlannerInfo {
                role: "leader".into(),
                epoch: self.epoch,
                leader: Some(self.advertise.clone()),
                store: self.describe.clone(),
            }),
            RequestCommand::Explain { job } => {
                // Under privateData another user's job is answered as a missing one.
                let seen = self.planner.sees_job(&job, caller);
                match seen.then(|| self.planner.explain(&job)).flatten() {
                    Some(e) => to_value(&e),
                    None => Err(format!("no job named {job:?}").into()),
                }
            }
        }
    }
}

fn to_value<T: serde::Serialize>(v: &T) -> Result<Value, ResponseError> {
    serde_json::to_value(v).map_err(|e| ResponseError::new(format!("encoding the reply: {e}")))
}

/// What the core knows of a registered node: its labels (label discovery reads them) and
/// its hardware, with resources derived from it.
fn node_spec(name: &str, labels: &BTreeMap<String, String>, topology: NodeTopology) -> NodeSpec {
    let mut labels = labels.clone();
    for (k, v) in &topology.labels {
        labels.entry(k.clone()).or_insert_with(|| v.clone());
    }
    NodeSpec {
        name: name.to_string(),
        labels,
        resources: hardware_resources(&topology),
        used: Default::default(),
        topology: None,
        hardware: Some(SharedTopology::new(topology)),
    }
}

/// The submit directory a client sent: an absolute path of at most `PATH_MAX` bytes,
/// without NUL or control characters (it becomes tasks' working directories).
fn checked_submit_dir(dir: String) -> Result<String, ResponseError> {
    const PATH_MAX: usize = 4096;
    if !dir.starts_with('/') || dir.len() > PATH_MAX || dir.chars().any(char::is_control) {
        // (`escape` shows the control characters; `shorten` keeps the message short.)
        return Err(format!(
            "the submit directory must be an absolute path of at most {PATH_MAX} bytes without control characters, got \"{}\"",
            hyperplan_shared::names::escape(&hyperplan_shared::names::shorten(&dir, 200))
        )
        .into());
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::checked_submit_dir;

    #[test]
    fn a_submit_directory_is_absolute_short_and_printable() {
        assert_eq!(
            checked_submit_dir("/home/alice/runs".into()).ok().as_deref(),
            Some("/home/alice/runs")
        );
        for bad in [
            "runs/a".to_string(),
            String::new(),
            "/tmp/\u{1b}[31mx".into(),
            format!("/{}", "a".repeat(5000)),
        ] {
            let e = checked_submit_dir(bad.clone())
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains("must be an absolute path"), "{bad:?}: {e}");
            assert!(!e.contains('\u{1b}') && e.len() < 400, "{e}");
        }
    }
}
