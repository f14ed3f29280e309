//! One connection to the planner: QUIC handshake, one bidirectional stream, hellos,
//! Register / Registered, then heartbeats (with the running tasks, and the health check
//! results when they changed), topology changes and task reports out, while a reader
//! task passes on what the planner sends (task frames go to
//! [`Tasks`](crate::tasks::Tasks)), until either side ends it.
//!
//! Failures come back as a [`LinkDown`], one sentence for the log and systemd's STATUS. When the
//! planner closed the connection its own reason wins (e.g. "closed by peer: hello
//! names n2 but the certificate names n1 (code 3)"), as it says more than the stream
//! error it caused.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hyperplan_net::frame::{DEFAULT_MAX_FRAME, read_frame, write_frame};
use hyperplan_net::messages::{AgentMessage, Hello, LogChunk, PROTOCOL_VERSION, PlannerToAgent, Role};
use hyperplan_net::tls;
use hyperplan_shared::topology::NodeTopology;
use tokio::sync::mpsc;

use crate::tasks::logs;

use super::down::LinkDown;
use super::{Link, maybe_tick, tell_systemd, ticker};

/// A QUIC handshake that takes longer than this is a planner that is not there (a
/// QUIC client hears nothing back from a closed UDP port).
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Hellos and registration; a planner busy with many re-registering agents gets time.
pub(super) const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);
/// Heartbeats never come faster than this, whatever the planner asks.
const MIN_HEARTBEAT: Duration = Duration::from_millis(50);
/// Close code for a planner that broke the protocol.
const PROTOCOL_CODE: u32 = 1;
/// Planner frames read ahead of the session loop.
const FRAME_QUEUE: usize = 256;
/// `ReadLog`s read at once; more are answered "busy".
const MAX_LOG_READS: usize = 4;

/// How a connection attempt or session ended.
pub(super) enum Outcome {
    /// SIGTERM / SIGINT: stop the agent.
    Stop,
    /// The link is gone, with why; reconnect after a backoff.
    Lost(LinkDown),
}

/// What a successful registration leaves.
pub(super) struct Registered {
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    pub(super) heartbeat: Duration,
    /// The planner's epoch (see `tasks::epoch`).
    pub(super) epoch: u64,
    /// When the registration the planner answered was sent (ms since boot), and its
    /// node-lost fence (see [`crate::deadman`]).
    pub(super) register_sent_ms: Option<u64>,
    pub(super) fence_after_ms: Option<u64>,
}

/// The QUIC + TLS handshake, bounded by [`CONNECT_TIMEOUT`].
pub(super) async fn connect(endpoint: quinn::Endpoint, addr: SocketAddr) -> Result<quinn::Connection, LinkDown> {
    match tokio::time::timeout(CONNECT_TIMEOUT, tls::connect(&endpoint, addr)).await {
        Ok(Ok(connection)) => Ok(connection),
        Ok(Err(e)) => Err(LinkDown::Connect(e)),
        Err(_) => Err(LinkDown::ConnectTimeout {
            addr,
            secs: CONNECT_TIMEOUT.as_secs(),
        }),
    }
}

pub(super) fn register_message(
    node: &str,
    topology: &NodeTopology,
    hash: u64,
    confinement: hyperplan_net::messages::Confinement,
    advertise_address: Option<String>,
    epoch: u64,
) -> AgentMessage {
    AgentMessage::Register {
        version: PROTOCOL_VERSION,
        node: node.to_string(),
        labels: topology.labels.clone(),
        topology: topology.clone(),
        topology_hash: hash,
        confinement: Some(confinement),
        advertise_address,
        epoch,
    }
}

/// Opens the stream, exchanges hellos and registers, bounded by [`REGISTER_TIMEOUT`].
/// A standby answers `NotLeader` instead of `Registered`: [`LinkDown::NotLeader`], naming
/// `planner` (the address tried) and the leader it knows.
pub(super) async fn handshake(
    connection: quinn::Connection,
    planner: String,
    node: String,
    register: AgentMessage,
) -> Result<Registered, LinkDown> {
    tokio::time::timeout(REGISTER_TIMEOUT, handshake_inner(connection, planner, node, register))
        .await
        .unwrap_or(Err(LinkDown::RegisterTimeout {
            secs: REGISTER_TIMEOUT.as_secs(),
        }))
}

async fn handshake_inner(
    connection: quinn::Connection,
    planner: String,
    node: String,
    register: AgentMessage,
) -> Result<Registered, LinkDown> {
    let (mut send, mut recv) = connection.open_bi().await.map_err(LinkDown::OpenStream)?;
    let hello = Hello::new(Role::Agent, node.clone());
    write_frame(&mut send, &hello, DEFAULT_MAX_FRAME)
        .await
        .map_err(LinkDown::SendHello)?;
    let theirs: Hello = read_frame(&mut recv, DEFAULT_MAX_FRAME)
        .await
        .map_err(LinkDown::ReadHello)?
        .ok_or(LinkDown::NoHello)?;
    if theirs.role != Role::Planner {
        return Err(LinkDown::NotPlanner(theirs.role));
    }
    if theirs.version != PROTOCOL_VERSION {
        return Err(LinkDown::Version { theirs: theirs.version });
    }
    let register_sent_ms = crate::deadman::uptime_ms();
    write_frame(&mut send, &register, DEFAULT_MAX_FRAME)
        .await
        .map_err(LinkDown::SendRegister)?;
    let reply: PlannerToAgent = read_frame(&mut recv, DEFAULT_MAX_FRAME)
        .await
        .map_err(LinkDown::ReadRegistered)?
        .ok_or(LinkDown::NoRegistered)?;
    let (registered_as, heartbeat_interval_ms, epoch, fence_after_ms) = match reply {
        PlannerToAgent::Registered {
            node,
            heartbeat_interval_ms,
            epoch,
            fence_after_ms,
        } => (node, heartbeat_interval_ms, epoch, fence_after_ms),
        PlannerToAgent::NotLeader { leader } => return Err(LinkDown::NotLeader { planner, leader }),
        other => return Err(LinkDown::NotRegistered(kind(&other))),
    };
    if registered_as != node {
        tracing::warn!(%node, %registered_as, "the planner registered us under another name");
    }
    Ok(Registered {
        send,
        recv,
        heartbeat: Duration::from_millis(heartbeat_interval_ms).max(MIN_HEARTBEAT),
        epoch,
        register_sent_ms,
        fence_after_ms,
    })
}

/// Why the link failed, preferring the connection's close reason; the connection is
/// closed (a no-op when the planner already did). A standby's `NotLeader` stays the reason
/// (it says where to go) and closes with code 0: no one broke anything.
pub(super) fn fail(connection: &quinn::Connection, reason: LinkDown) -> LinkDown {
    if matches!(reason, LinkDown::NotLeader { .. }) {
        connection.close(quinn::VarInt::from_u32(super::STOP_CODE), reason.to_string().as_bytes());
        return reason;
    }
    let reason = match connection.close_reason() {
        Some(quinn::ConnectionError::LocallyClosed) | None => reason,
        Some(closed) => LinkDown::Closed(closed),
    };
    connection.close(quinn::VarInt::from_u32(PROTOCOL_CODE), reason.to_string().as_bytes());
    reason
}

fn kind(message: &PlannerToAgent) -> &'static str {
    match message {
        PlannerToAgent::Registered { .. } => "Registered",
        PlannerToAgent::Job(_) => "Job",
        PlannerToAgent::Launch(_) => "Launch",
        PlannerToAgent::Kill { .. } => "Kill",
        PlannerToAgent::Ack { .. } => "Ack",
        PlannerToAgent::HeartbeatAck { .. } => "HeartbeatAck",
        PlannerToAgent::NotLeader { .. } => "NotLeader",
        PlannerToAgent::ReadLog { .. } => "ReadLog",
        PlannerToAgent::FenceDone(_) => "FenceDone",
        PlannerToAgent::FenceFailed { .. } => "FenceFailed",
    }
}

/// Takes what the planner sends until the stream ends and passes it on; returns why it
/// ended.
async fn read_planner(mut recv: quinn::RecvStream, frames: mpsc::Sender<PlannerToAgent>) -> LinkDown {
    loop {
        match read_frame::<PlannerToAgent, _>(&mut recv, DEFAULT_MAX_FRAME).await {
            Ok(Some(frame)) => {
                if frames.send(frame).await.is_err() {
                    return LinkDown::StreamEnded; // the session is over
                }
            }
            Ok(None) => return LinkDown::StreamEnded,
            Err(e) => return LinkDown::Read(e),
        }
    }
}

impl Link {
    /// A registered connection until it ends: every unacknowledged task report first,
    /// heartbeats every `registered.heartbeat` (with the running tasks), planner frames
    /// to the tasks, new task reports as scans find them and all unacknowledged ones every
    /// few seconds, `TopologyChanged` after a re-probe that moved the hash, watchdog pings.
    pub(super) async fn session(&mut self, connection: quinn::Connection, registered: Registered) -> Outcome {
        let Registered {
            mut send,
            recv,
            heartbeat,
            epoch,
            register_sent_ms,
            fence_after_ms,
        } = registered;
        let ours = self.tasks.highest_epoch();
        if !self.tasks.admit_epoch(epoch) {
            return Outcome::Lost(fail(&connection, LinkDown::StaleEpoch { theirs: epoch, ours }));
        }
        // Heard by a planner we obey: the fence counts from the registration's sending.
        self.deadman.registered(register_sent_ms, fence_after_ms);
        // Frames are not cancel-safe to read inside select!: the reader owns the stream.
        let (frames_tx, mut frames) = mpsc::channel(FRAME_QUEUE);
        let mut reader = tokio::spawn(read_planner(recv, frames_tx));
        // Answers made off this task (log pieces) come back here, for this connection only.
        let (answers_tx, mut answers) = mpsc::unbounded_channel::<LogChunk>();
        let mut beat = ticker(heartbeat);
        let mut resend = ticker(super::RESEND_INTERVAL);
        let mut seq = 0u64;
        let mut announced = self.hash;
        // What this connection's planner was last told of the node's health: all of it
        // on the first heartbeat, then changes.
        let mut health_sent = crate::health::Sent::default();
        if let Ok(mut current) = self.current.lock() {
            *current = Some(connection.clone());
        }
        // Everything not yet acknowledged, first thing on a new connection (PMI fences
        // whose answer the last link did not bring too).
        let mut outgoing: Vec<AgentMessage> = self.tasks.unacked();
        outgoing.extend(self.pmi.unanswered().into_iter().map(AgentMessage::Fence));
        let outcome = 'session: loop {
            for message in outgoing.drain(..) {
                if let Err(e) = write_frame(&mut send, &message, DEFAULT_MAX_FRAME).await {
                    break 'session Outcome::Lost(fail(&connection, LinkDown::SendReport(e)));
                }
            }
            tokio::select! {
                _ = beat.tick() => {
                    seq += 1;
                    let (load, free_memory) = self.figures.now(&self.topology);
                    let running_tasks = self.running_tasks().await;
                    let ports_in_use = crate::ports::in_use(std::path::Path::new("/proc/net"));
                    let strained = self.tasks.strained();
                    let health = self.health.as_ref().and_then(|h| h.for_heartbeat(&mut health_sent));
                    let message = AgentMessage::Heartbeat { seq, load, free_memory, running_tasks, ports_in_use, strained, health };
                    self.deadman.sending(seq);
                    if let Err(e) = write_frame(&mut send, &message, DEFAULT_MAX_FRAME).await {
                        break Outcome::Lost(fail(&connection, LinkDown::SendHeartbeat { seq, error: e }));
                    }
                    tracing::trace!(seq, "heartbeat");
                }
                frame = frames.recv() => match frame {
                    // A leader that lost its lease may say so: go and find the new one.
                    Some(PlannerToAgent::NotLeader { leader }) => {
                        let planner = self.planners.current().to_string();
                        break Outcome::Lost(fail(&connection, LinkDown::NotLeader { planner, leader }));
                    }
                    Some(frame) => {
                        outgoing = self.on_frame(frame, &answers_tx);
                        self.publish_tasks();
                    }
                    None => {
                        let reason = (&mut reader).await.unwrap_or_else(LinkDown::ReaderTask);
                        break Outcome::Lost(fail(&connection, reason));
                    }
                },
                Some(chunk) = answers.recv() => outgoing.push(AgentMessage::Log(chunk)),
                // Streams the planner opens: `hyperplan exec` commands to run here.
                incoming = connection.accept_bi() => match incoming {
                    Ok((send, recv)) => {
                        let state_dir = self.opts.tasks.state_dir.clone();
                        let allow_root = self.opts.tasks.allow_root;
                        let launcher = self.opts.tasks.launcher.clone();
                        tokio::spawn(crate::exec::step::serve(send, recv, state_dir, allow_root, launcher));
                    }
                    // The connection is gone: its reader says why.
                    Err(_) => {
                        let reason = (&mut reader).await.unwrap_or_else(LinkDown::ReaderTask);
                        break Outcome::Lost(fail(&connection, reason));
                    }
                },
                () = self.pmi.wake.notified() => {
                    outgoing.extend(self.pmi.take_outbox().into_iter().map(AgentMessage::Fence));
                }
                _ = self.scan_timer.tick() => {
                    outgoing = self.tasks.scan();
                    self.publish_tasks();
                }
                _ = resend.tick() => outgoing = self.tasks.unacked(),
                ended = &mut reader => {
                    let reason = ended.unwrap_or_else(LinkDown::ReaderTask);
                    break Outcome::Lost(fail(&connection, reason));
                }
                _ = maybe_tick(&mut self.watchdog) => tell_systemd("WATCHDOG=1"),
                _ = maybe_tick(&mut self.reprobe_timer) => self.reprobe("periodic").await,
                _ = self.signals.hup.recv() => self.reprobe("SIGHUP").await,
                _ = self.signals.term.recv() => break Outcome::Stop,
                _ = self.signals.int.recv() => break Outcome::Stop,
            }
            if self.hash != announced {
                let message = AgentMessage::TopologyChanged {
                    topology: self.topology.clone(),
                    topology_hash: self.hash,
                };
                if let Err(e) = write_frame(&mut send, &message, DEFAULT_MAX_FRAME).await {
                    break Outcome::Lost(fail(&connection, LinkDown::SendTopology(e)));
                }
                tracing::info!(hash = format_args!("{:016x}", self.hash), "sent TopologyChanged");
                announced = self.hash;
            }
        };
        reader.abort();
        if let Ok(mut current) = self.current.lock() {
            *current = None;
        }
        // Reports made but not sent stay unacknowledged and go out at the next registration.
        if matches!(outcome, Outcome::Stop) {
            connection.close(quinn::VarInt::from_u32(super::STOP_CODE), super::STOP_REASON);
        }
        outcome
    }
}

impl Link {
    /// An order from an older planner epoch: refused, said in the log.
    fn stale(&self, what: &str, job: &str, task: &str, epoch: u64) {
        tracing::warn!(
            job,
            task,
            epoch,
            newest = self.tasks.highest_epoch(),
            "refused a {what} from an older planner epoch"
        );
    }

    /// One planner frame; returns the reports to send now.
    fn on_frame(&mut self, frame: PlannerToAgent, answers: &mpsc::UnboundedSender<LogChunk>) -> Vec<AgentMessage> {
        match frame {
            PlannerToAgent::Job(world) => {
                tracing::debug!(
                    job = %world.job, job_id = %world.job_id, ntasks = world.node_of_rank.len(),
                    nnodes = world.nodes.len(), master = %world.master_addr, "the job's ranks and nodes"
                );
                self.tasks.on_job(*world);
                Vec::new()
            }
            PlannerToAgent::Launch(launch) if !self.tasks.admit_epoch(launch.epoch) => {
                self.stale("Launch", &launch.job, &launch.task, launch.epoch);
                Vec::new()
            }
            PlannerToAgent::Kill { task, epoch, .. } if !self.tasks.admit_epoch(epoch) => {
                self.stale("Kill", &task.job, &task.task, epoch);
                Vec::new()
            }
            PlannerToAgent::Launch(launch) => {
                let gpus: Vec<String> = self.topology.gpus.iter().map(|g| g.pci_bus_id.clone()).collect();
                let reports = self.tasks.on_launch(&self.opts.node, &gpus, &launch);
                for task in self.tasks.take_pmi() {
                    self.pmi.attach(task);
                }
                reports
            }
            PlannerToAgent::FenceDone(fence) => {
                tracing::debug!(job = %fence.job, job_id = %fence.job_id, seq = fence.seq, pairs = fence.pairs.len(), "PMI fence done");
                self.pmi.done(fence);
                Vec::new()
            }
            PlannerToAgent::FenceFailed { job_id, seq, reason } => {
                self.pmi.failed(job_id, seq, &reason);
                Vec::new()
            }
            PlannerToAgent::Kill {
                task,
                grace_secs,
                signal,
                ..
            } => {
                self.tasks.on_kill(&task, grace_secs, signal);
                Vec::new()
            }
            PlannerToAgent::HeartbeatAck { seq } => {
                self.deadman.acknowledged(seq);
                Vec::new()
            }
            PlannerToAgent::Ack { task, finished } => {
                self.tasks.on_ack(&task, finished);
                Vec::new()
            }
            PlannerToAgent::ReadLog {
                request,
                task,
                stderr,
                offset,
                max_bytes,
                step,
            } => {
                let refuse = |error: String| {
                    vec![AgentMessage::Log(LogChunk {
                        request,
                        offset,
                        data: Vec::new(),
                        size: 0,
                        error: Some(error),
                    })]
                };
                let step_source = step.map(|step| {
                    let path = crate::exec::step::output_path(&self.opts.tasks.state_dir, &task.job, task.job_id, step);
                    logs::Source::Step(path)
                });
                let Some(source) = step_source.or_else(|| self.tasks.log_source(&task)) else {
                    return refuse(format!("no task {}/{} on this node", task.job, task.task));
                };
                let reads = self.log_reads.clone();
                if reads.fetch_add(1, Ordering::SeqCst) >= MAX_LOG_READS {
                    reads.fetch_sub(1, Ordering::SeqCst);
                    return refuse("this node is reading other logs now; ask again".into());
                }
                let answers = answers.clone();
                tokio::task::spawn_blocking(move || {
                    let chunk = logs::read_chunk(request, &source, stderr, offset, max_bytes);
                    reads.fetch_sub(1, Ordering::SeqCst);
                    // The connection may be gone: its answers go with it.
                    let _ = answers.send(chunk);
                });
                Vec::new()
            }
            PlannerToAgent::Registered {
                heartbeat_interval_ms, ..
            } => {
                tracing::debug!(heartbeat_interval_ms, "Registered again; ignored");
                Vec::new()
            }
            // The session loop ends the session on it before it gets here.
            PlannerToAgent::NotLeader { .. } => Vec::new(),
        }
    }

    /// The running tasks with their use, sampled off the async thread (and published to
    /// `/metrics`).
    async fn running_tasks(&mut self) -> Vec<hyperplan_net::messages::RunningTask> {
        self.sample_usage().await;
        self.publish_tasks();
        self.tasks.running(&self.usage)
    }
}
