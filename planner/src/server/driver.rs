//! The one task that owns the `Planner`: it turns what connections say into core events,
//! ticks (on the timer and as soon as something arrives), marks nodes NotReady when they
//! miss heartbeats or drop their link, sends `Launch` for placed tasks, and answers
//! people's requests from the world. Time for the core is Unix seconds.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use hyperplan_net::messages::{PlannerToAgent, RequestCommand, ResponseError};
use hyperplan_shared::NodeSpec;
use hyperplan_shared::status::{Cancelled, JobList, Manifests, NodeList, NodeState, Submitted};
use hyperplan_shared::topology::{NodeTopology, SharedTopology};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::close;
use crate::config::{PlannerConfig, SourceKind};
use crate::core::discovery::Found;
use crate::core::numa::node::hardware_resources;
use crate::core::{Command, Event, Planner, view};

/// What connections tell the driver.
#[derive(Debug)]
pub enum ToCore {
    Register {
        node: String,
        conn_id: u64,
        labels: BTreeMap<String, String>,
        topology: Box<NodeTopology>,
        link: mpsc::UnboundedSender<PlannerToAgent>,
        conn: quinn::Connection,
    },
    Heartbeat {
        node: String,
        conn_id: u64,
        seq: u64,
    },
    TopologyChanged {
        node: String,
        conn_id: u64,
        topology: Box<NodeTopology>,
    },
    /// The link ended (closed, lost, refused after registering).
    Gone {
        node: String,
        conn_id: u64,
    },
    /// A discovery source was read (see `super::discovery`).
    Discovered {
        source: String,
        kind: SourceKind,
        at: u64,
        result: Result<Found, String>,
    },
    Request {
        user: String,
        admin: bool,
        peer: SocketAddr,
        command: RequestCommand,
        reply: oneshot::Sender<Result<Value, ResponseError>>,
    },
}

/// A registered agent's link.
struct Link {
    conn_id: u64,
    tx: mpsc::UnboundedSender<PlannerToAgent>,
    conn: quinn::Connection,
    last_heartbeat: Instant,
    ready: bool,
    labels: BTreeMap<String, String>,
}

struct Driver {
    planner: Planner,
    config: PlannerConfig,
    links: HashMap<String, Link>,
    /// Nodes known to the core whose agent is away (NotReady), with when it was last heard.
    away: HashMap<String, Instant>,
    owners: HashMap<String, String>,
    dirty: bool,
}

pub async fn run(config: PlannerConfig, mut rx: mpsc::UnboundedReceiver<ToCore>) {
    let mut planner = Planner::new(config.clone());
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
        config: config.clone(),
        links: HashMap::new(),
        away: HashMap::new(),
        owners: HashMap::new(),
        dirty: true,
    };
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

pub(super) fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Driver {
    fn handle(&mut self, msg: ToCore) {
        match msg {
            ToCore::Register {
                node,
                conn_id,
                labels,
                topology,
                link,
                conn,
            } => {
                let heartbeat_interval_ms = self.config.server.heartbeat_interval.as_millis() as u64;
                if let Some(old) = self.links.remove(&node) {
                    old.conn.close(
                        quinn::VarInt::from_u32(close::NORMAL),
                        b"replaced by a newer connection of this node",
                    );
                }
                self.planner.push(Event::NodeUp(node_spec(&node, &labels, *topology)));
                self.planner.push(Event::NodeReady {
                    name: node.clone(),
                    ready: true,
                });
                let _ = link.send(PlannerToAgent::Registered {
                    node: node.clone(),
                    heartbeat_interval_ms,
                });
                tracing::info!(node, peer = %conn.remote_address(), "node registered: Ready");
                self.away.remove(&node);
                self.links.insert(
                    node,
                    Link {
                        conn_id,
                        tx: link,
                        conn,
                        last_heartbeat: Instant::now(),
                        ready: true,
                        labels,
                    },
                );
                self.dirty = true;
            }
            ToCore::Heartbeat { node, conn_id, seq } => {
                let Some(l) = self.links.get_mut(&node).filter(|l| l.conn_id == conn_id) else {
                    return;
                };
                l.last_heartbeat = Instant::now();
                if !l.ready {
                    l.ready = true;
                    tracing::info!(node, seq, "heartbeat again: Ready");
                    self.planner.push(Event::NodeReady {
                        name: node,
                        ready: true,
                    });
                    self.dirty = true;
                }
            }
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
                if !l.ready {
                    self.planner.push(Event::NodeReady {
                        name: node,
                        ready: false,
                    });
                }
                self.dirty = true;
            }
            ToCore::Gone { node, conn_id } => {
                if self.links.get(&node).is_some_and(|l| l.conn_id == conn_id) {
                    self.links.remove(&node);
                    self.away.insert(node.clone(), Instant::now());
                    tracing::warn!(node, "agent link closed: NotReady");
                    self.planner.push(Event::NodeReady {
                        name: node,
                        ready: false,
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
                let answer = self.answer(&user, admin, peer, command);
                let _ = reply.send(answer);
            }
        }
    }

    fn tick(&mut self) {
        self.dirty = false;
        let silent_for = self.config.server.heartbeat_interval * self.config.server.missed_heartbeats;
        for (node, l) in &mut self.links {
            if l.ready && l.last_heartbeat.elapsed() > silent_for {
                l.ready = false;
                tracing::warn!(
                    node,
                    missed = self.config.server.missed_heartbeats,
                    "no heartbeat for {:.1} s: NotReady",
                    l.last_heartbeat.elapsed().as_secs_f64()
                );
                self.planner.push(Event::NodeReady {
                    name: node.clone(),
                    ready: false,
                });
            }
        }
        let commands = self.planner.tick(unix_now());
        for c in commands {
            match c {
                Command::Place(p) => {
                    tracing::info!(job = p.job, task = p.task, node = p.node, rank = p.rank, "placed");
                    if let Some(l) = self.links.get(&p.node) {
                        let pin = p.pinning.unwrap_or_default();
                        let _ = l.tx.send(PlannerToAgent::Launch {
                            job: p.job,
                            task: p.task,
                            command: p.command,
                            cpus: pin.cpus,
                            numa_nodes: pin.numa_nodes,
                            gpus: pin.gpus,
                            nics: pin.nics,
                        });
                    }
                }
                Command::Reject { job, reason } => tracing::warn!(job, "rejected: {reason}"),
                Command::Warn(w) => tracing::warn!("{w}"),
                Command::Info(i) => tracing::info!("{i}"),
            }
        }
    }

    fn answer(
        &mut self,
        user: &str,
        admin: bool,
        peer: SocketAddr,
        command: RequestCommand,
    ) -> Result<Value, ResponseError> {
        let world = self.planner.world_mut();
        match command {
            RequestCommand::Submit { file_name, text } => {
                let jobs = hyperplan_shared::parse_jobs(&text, Path::new(&file_name)).map_err(|e| e.to_string())?;
                let known = world.resource::<crate::core::ingest::JobNames>();
                if let Some(j) = jobs.iter().find(|j| known.0.contains_key(&j.name)) {
                    let owner = self.owners.get(&j.name).map_or("someone", String::as_str);
                    return Err(format!(
                        "{file_name}: job {:?} exists (submitted by {owner}); job names must be unique",
                        j.name
                    )
                    .into());
                }
                let now = unix_now();
                let mut names = Vec::new();
                for mut j in jobs {
                    j.submit_time = now;
                    names.push(j.name.clone());
                    self.owners.insert(j.name.clone(), user.to_string());
                    self.planner.push(Event::Submit(j));
                }
                tracing::info!(user, jobs = ?names, "submitted");
                self.dirty = true;
                to_value(&Submitted { submitted: names })
            }
            RequestCommand::Cancel { job } => {
                if !world.resource::<crate::core::ingest::JobNames>().0.contains_key(&job) {
                    return Err(format!("no job named {job:?}").into());
                }
                let owner = self.owners.get(&job).cloned().unwrap_or_default();
                if owner != user && !admin {
                    tracing::warn!(%peer, user, job, owner, "refused: cancel of another user's job");
                    return Err(format!("job {job} belongs to {owner}; only {owner} or an admin may cancel it").into());
                }
                tracing::info!(user, job, "cancelled");
                self.planner.push(Event::Cancel { job: job.clone() });
                self.tick();
                to_value(&Cancelled { cancelled: job })
            }
            RequestCommand::Status { job } => {
                let mut jobs = view::job_reports(world);
                if let Some(name) = job {
                    jobs.retain(|j| j.name == name);
                    if jobs.is_empty() {
                        return Err(format!("no job named {name:?}").into());
                    }
                }
                to_value(&JobList { jobs })
            }
            RequestCommand::Nodes => {
                let mut nodes = view::node_statuses(world);
                for n in &mut nodes {
                    let heard = self
                        .links
                        .get(&n.name)
                        .map(|l| l.last_heartbeat)
                        .or(self.away.get(&n.name).copied());
                    n.last_heartbeat_secs = heard.map(|t| t.elapsed().as_secs());
                    if !self.links.contains_key(&n.name) {
                        n.state = NodeState::NotReady;
                    }
                }
                to_value(&NodeList { nodes })
            }
            RequestCommand::HyperNodes => to_value(&view::hyper_node_tree(world)),
            RequestCommand::Manifests => {
                let specs = view::resolved_specs(world.resource::<crate::core::topology::TopologyIndex>());
                to_value(&Manifests {
                    manifests: hyperplan_shared::hypernode::to_hypernode_manifests(&specs),
                })
            }
            RequestCommand::Explain { job } => match view::explain(world, &job) {
                Some(e) => to_value(&e),
                None => Err(format!("no job named {job:?}").into()),
            },
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
