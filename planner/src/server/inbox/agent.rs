//! What an agent's link tells the driver: its registration, heartbeats, task reports,
//! fences and its end (the agent's session, `server::agent`, reads the frames).

use std::collections::BTreeMap;

use hyperplan_net::messages::{AgentMessage, Confinement, PmiFence, RunningTask};
use hyperplan_shared::topology::NodeTopology;

use super::link::AgentLink;

/// What an agent's link tells the driver; `link` numbers the connection, so a message
/// of a link that no longer holds its node is ignored.
#[derive(Debug)]
pub enum FromAgent {
    Register {
        node: String,
        link_id: u64,
        labels: BTreeMap<String, String>,
        topology: Box<NodeTopology>,
        /// How the node confines tasks, as its agent said (display only).
        confinement: Option<Confinement>,
        /// Its `advertiseAddress` (checked): `MASTER_ADDR` when it holds rank 0.
        advertise: Option<String>,
        /// The newest planner epoch the agent has obeyed (0: none or not said).
        epoch: u64,
        link: AgentLink,
    },
    Heartbeat {
        node: String,
        link_id: u64,
        seq: u64,
        /// The tasks the node's shepherds run.
        running: Vec<RunningTask>,
        /// The ports of the `MASTER_PORT` range bound on the node.
        ports_in_use: Vec<u16>,
        /// Why the node cannot start tasks now (`None`: it can).
        strained: Option<String>,
        /// Every health check's result, when one changed or the link is new.
        health: Option<Vec<hyperplan_shared::health::CheckResult>>,
    },
    /// `TaskStarted`, `TaskFinished` or `Log` from a registered agent.
    Tasks {
        node: String,
        link_id: u64,
        /// Boxed: a Register-sized message would make every `ToCore` that large.
        message: Box<AgentMessage>,
    },
    TopologyChanged {
        node: String,
        link_id: u64,
        topology: Box<NodeTopology>,
    },
    /// A node's part of a PMI fence (see `server::fence`).
    Fence {
        node: String,
        link_id: u64,
        fence: PmiFence,
    },
    /// The link ended (closed, lost, refused after registering).
    Gone { node: String, link_id: u64 },
}
