//! Agents' links as the driver sees them: a channel of frames to the agent and a
//! [`LinkControl`] to close the link and name its peer (a QUIC connection in the daemon,
//! a fake in tests). What agents say ([`FromAgent`]) becomes core events here; whether a node is taken
//! (`core::claim`), its health and the tasks its reports start or end are the core's.

use std::collections::BTreeMap;
use std::sync::Arc;

use hyperplan_core::Event;
use hyperplan_core::model::commands::HealthChange;
use hyperplan_core::model::events::TaskOnNode;
use hyperplan_core::numa::node::hardware_resources;
use hyperplan_net::messages::{AgentMessage, Confinement, PlannerToAgent};
use hyperplan_shared::NodeSpec;
use hyperplan_shared::ids::TaskId;
use hyperplan_shared::topology::{NodeTopology, SharedTopology};
use tokio::sync::mpsc;

use super::Driver;
use crate::server::close;
use crate::server::inbox::{AgentLink, FromAgent, LinkControl};
use crate::server::link::refuse;
use crate::store::writer::After;

/// A registered agent's link: where to send, and what its agent said that the core
/// does not keep.
pub(super) struct Link {
    pub(super) link_id: u64,
    pub(super) frames: mpsc::UnboundedSender<PlannerToAgent>,
    control: Arc<dyn LinkControl>,
    labels: BTreeMap<String, String>,
    /// How the node confines tasks (`hyperplan nodes`), as its agent said at Register.
    pub(super) confinement: Option<Confinement>,
    /// What the agent advertises as its address (`MASTER_ADDR`).
    advertise: Option<String>,
    /// The last heartbeat's sequence number, for the log.
    last_seq: u64,
}

impl Link {
    /// The address other nodes reach it at: what it advertises, or where it connects from.
    pub(super) fn address(&self) -> String {
        self.advertise
            .clone()
            .unwrap_or_else(|| self.control.peer().ip().to_string())
    }
}

impl Link {
    /// The agent's QUIC connection, for the streams of `hyperplan exec`.
    pub(super) fn quic(&self) -> Option<quinn::Connection> {
        self.control.quic()
    }
}

impl Driver {
    pub(super) fn agent_said(&mut self, msg: FromAgent) {
        match msg {
            FromAgent::Register {
                node,
                link_id,
                labels,
                topology,
                confinement,
                advertise,
                epoch,
                link,
            } => self.register(node, link_id, labels, *topology, confinement, advertise, epoch, link),
            FromAgent::Heartbeat {
                node,
                link_id,
                seq,
                running,
                ports_in_use,
                strained,
                health,
            } => {
                let Some(l) = self.links.get_mut(&node).filter(|l| l.link_id == link_id) else {
                    return;
                };
                l.last_seq = seq;
                // Heard: the agent's node-lost fence counts from this heartbeat's sending.
                let _ = l.frames.send(PlannerToAgent::HeartbeatAck { seq });
                // Every heartbeat, even an empty list: a task its agent stops listing
                // is lost after nodeLostAfter (see `core::lost`).
                let tasks = running
                    .into_iter()
                    .map(|r| TaskOnNode {
                        job: r.task.job,
                        job_id: r.task.job_id,
                        task: r.task.task,
                        index: r.task.index,
                        pid: r.pid,
                        cpu_cores: r.cpu_cores,
                        rss_bytes: r.rss_bytes,
                    })
                    .collect();
                self.planner.push(Event::TasksOnNode {
                    node: node.clone(),
                    tasks,
                });
                self.planner.push(Event::PortsInUse {
                    node: node.clone(),
                    ports: ports_in_use,
                });
                self.planner.push(Event::NodeStrained {
                    node: node.clone(),
                    reason: strained,
                });
                if let Some(checks) = health {
                    self.planner.push(Event::NodeChecks {
                        node: node.clone(),
                        checks,
                    });
                }
                // No tick for it: the core reads the time it arrived, and the timer ticks
                // at least once per heartbeat interval.
                self.planner.push(Event::Heartbeat {
                    node,
                    at_ms: self.clock.now_ms(),
                });
            }
            FromAgent::Tasks { node, link_id, message } => self.task_report(node, link_id, *message),
            FromAgent::TopologyChanged {
                node,
                link_id,
                topology,
            } => {
                let Some(l) = self.links.get(&node).filter(|l| l.link_id == link_id) else {
                    return;
                };
                tracing::info!(node, "topology changed");
                self.planner.push(Event::NodeUp(node_spec(&node, &l.labels, *topology)));
                self.dirty = true;
            }
            FromAgent::Fence { node, link_id, fence } => {
                if self.links.get(&node).is_none_or(|l| l.link_id != link_id) {
                    return;
                }
                let nodes = self.planner.job_nodes(&fence.job, fence.job_id);
                let frames = self.fences.on_fence(&node, fence, nodes.as_deref());
                // Not persisted: sent at once, not after the next commit.
                for (to, frame) in frames {
                    if let Some(l) = self.links.get(&*to) {
                        let _ = l.frames.send(frame);
                    }
                }
            }
            FromAgent::Gone { node, link_id } => {
                if self.links.get(&node).is_some_and(|l| l.link_id == link_id) {
                    self.links.remove(&node);
                    self.logs.node_gone(&node);
                    self.planner.push(Event::LinkDown {
                        node,
                        link: link_id,
                        at_ms: self.clock.now_ms(),
                    });
                    self.dirty = true;
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn register(
        &mut self,
        node: String,
        link_id: u64,
        labels: BTreeMap<String, String>,
        topology: NodeTopology,
        confinement: Option<Confinement>,
        advertise: Option<String>,
        epoch: u64,
        link: AgentLink,
    ) {
        if let Some(why) = topology.unsupported() {
            tracing::warn!(node, "refused an agent: {why}");
            refuse(&*link.control, close::REFUSED, &format!("node {node:?}: {why}"));
            return;
        }
        let now_ms = self.clock.now_ms();
        if epoch > self.epoch {
            // The agent would refuse this planner's orders: the node is not taken (it
            // stays NotReady, its tasks are lost in time), and people see why.
            let reason = format!(
                "its agent has obeyed planner epoch {epoch}; this planner is at epoch {}: a newer planner leads elsewhere, or this planner's store is older than one the cluster used (restore the newest store with `hyperplan-planner state import`; if it is gone for good, remove `epoch` in the agent's state directory)",
                self.epoch
            );
            self.planner.push(Event::NodeRefused {
                node: node.clone(),
                reason: reason.clone(),
                at_ms: now_ms,
            });
            link.control.close(close::STALE_EPOCH, &reason);
            return;
        }
        if let Err(e) = self.planner.claim_node(&node, link_id, now_ms) {
            // The first agent keeps the node; this one hears why and backs off.
            refuse(&*link.control, close::REFUSED, &e.to_string());
            return;
        }
        // Free, or held by a link silent too long (a restarted agent's old run).
        if let Some(old) = self.links.remove(&node) {
            tracing::info!(node, "replacing the node's silent link with a new one");
            old.control.close(
                close::NORMAL,
                "replaced by a newer connection of this node (this one was silent)",
            );
        }
        self.planner.push(Event::NodeUp(node_spec(&node, &labels, topology)));
        self.planner.push(Event::LinkUp {
            node: node.clone(),
            link: link_id,
            at_ms: now_ms,
        });
        let _ = link.frames.send(PlannerToAgent::Registered {
            node: node.clone(),
            heartbeat_interval_ms: self.heartbeat_interval_ms,
            epoch: self.epoch,
            fence_after_ms: Some(self.fence_after_ms),
        });
        self.links.insert(
            node,
            Link {
                link_id,
                frames: link.frames,
                control: link.control,
                labels,
                confinement,
                advertise,
                last_seq: 0,
            },
        );
        self.dirty = true;
    }

    /// A task's start or end from its node's agent: to the core, acknowledged once the
    /// tick that applies it is committed (the agent keeps sending it until then); or a
    /// piece of output for `logs`.
    fn task_report(&mut self, node: String, link_id: u64, message: AgentMessage) {
        let Some(link) = self.links.get(&node).filter(|l| l.link_id == link_id) else {
            return; // a link that no longer holds the node: its agent sends again
        };
        match message {
            AgentMessage::TaskStarted(s) => {
                tracing::info!(job = s.task.job, task = s.task.task, node, pid = s.pid, "task started");
                if let Some(sent) = self.launched.remove(&TaskId {
                    job: s.task.job_id,
                    index: s.task.index,
                }) {
                    self.metrics.launch_latency.observe(sent.elapsed().as_secs_f64());
                }
                let ack = PlannerToAgent::Ack {
                    task: s.task.clone(),
                    finished: false,
                };
                self.acks.push(After::Frame(link.frames.clone(), ack));
                self.planner.push(Event::TaskStarted {
                    node,
                    job: s.task.job,
                    job_id: s.task.job_id,
                    task: s.task.task,
                    index: s.task.index,
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
                self.acks.push(After::Frame(link.frames.clone(), ack));
                self.planner.push(Event::TaskEnded {
                    node,
                    job: f.task.job,
                    job_id: f.task.job_id,
                    task: f.task.task,
                    index: f.task.index,
                    end: f.end,
                });
                self.dirty = true;
            }
            AgentMessage::Log(chunk) => self.logs.answer(&node, chunk),
            AgentMessage::Register { .. }
            | AgentMessage::Heartbeat { .. }
            | AgentMessage::TopologyChanged { .. }
            | AgentMessage::Fence(_) => {}
        }
    }

    /// The core's health decisions, in the words the planner's log has always used
    /// (operators and tests grep them).
    pub(super) fn log_health(&self, node: &str, why: HealthChange) {
        let link = self.links.get(node);
        match why {
            HealthChange::Registered => match link {
                Some(l) => tracing::info!(node, peer = %l.control.peer(), "node registered: Ready"),
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
