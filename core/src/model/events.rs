//! Events the drivers (daemon, simulator) feed into the core; applied by `ingest`.

use std::collections::BTreeMap;

use hyperplan_shared::taskend::TaskEnd;
use hyperplan_shared::{HyperNodeSpec, NodeSpec};

use crate::model::components::SourceKind;
pub use crate::model::discovered::Found;
use crate::model::discovered::SourceError;

/// Something that happened, for the next tick to apply (see
/// [`Planner::push`](crate::Planner::push)).
#[derive(Clone, Debug)]
pub enum Event {
    /// A node appears (or its spec changes: same name replaces).
    NodeUp(NodeSpec),
    /// A node leaves the cluster.
    NodeGone {
        /// The node's name.
        name: String,
    },
    /// Sets a node's readiness outright: while not ready it keeps its running tasks but
    /// is no candidate for new ones. The daemon does not use it: its nodes' readiness
    /// follows their links and heartbeats (`LinkUp`, `Heartbeat`, `LinkDown`).
    NodeReady {
        /// The node's name.
        name: String,
        /// Ready, or NotReady.
        ready: bool,
    },
    /// The node's agent registered at `at_ms` (the driver's clock, milliseconds): Ready,
    /// and from now on NotReady whenever it is silent for longer than
    /// `[server] heartbeatInterval × missedHeartbeats` (see `core::health`).
    LinkUp {
        /// The node's name.
        node: String,
        /// Which link (the driver's connection id): only this link's `LinkDown` ends it.
        link: u64,
        /// When it registered (the driver's clock, ms).
        at_ms: u64,
    },
    /// The node's agent was turned away at `at_ms` for `reason`, one its retries cannot
    /// change (see `core::refusals`): the node stays NotReady and `hyperplan nodes` says
    /// why, until its agent registers.
    NodeRefused {
        /// The node's name.
        node: String,
        /// Why, for people (`hyperplan nodes` shows it).
        reason: String,
        /// When it was turned away (the driver's clock, ms).
        at_ms: u64,
    },
    /// A heartbeat from the node's current link, received at `at_ms`.
    Heartbeat {
        /// The node's name.
        node: String,
        /// When it was received (the driver's clock, ms).
        at_ms: u64,
    },
    /// The node's agent link closed (or was lost) at `at_ms`: NotReady until it
    /// registers again.
    LinkDown {
        /// The node's name.
        node: String,
        /// Which link closed (see `LinkUp`): the close of a link that no longer holds the node
        /// changes nothing.
        link: u64,
        /// When it closed (the driver's clock, ms).
        at_ms: u64,
    },
    /// The static HyperNodes (inline + manifest files) as a whole; replaces the previous set.
    StaticHyperNodes(Vec<HyperNodeSpec>),
    /// Label discovery configuration (Volcano `networkTopologyTypes`); replaces the previous.
    LabelDiscovery(BTreeMap<String, Vec<String>>),
    /// Whether the `nvlink` source makes HyperNodes of the NVLink domains agents report
    /// (on by default; planner.toml's `[[discovery]] source = "nvlink"`, `enabled`).
    NvlinkDiscovery(bool),
    /// A polled discovery source exists (people see it before its first poll). `target`
    /// says what it reads (files, a command, a URL).
    DeclareSource {
        /// The source's name (its `[[discovery]]` entry's).
        source: String,
        /// What kind of source it is.
        kind: SourceKind,
        /// What it reads, for people.
        target: String,
    },
    /// What one poll of a source gave, at `at` (Unix seconds, the driver's clock). An
    /// `Err` keeps the source's last good HyperNodes and is reported; an `Ok` replaces
    /// them (only this source's).
    Discovered {
        /// The source's name (its `[[discovery]]` entry's).
        source: String,
        /// What kind of source it is.
        kind: SourceKind,
        /// When it was polled (Unix seconds, the driver's clock).
        at: u64,
        /// What it found, or why the poll failed.
        result: Result<Found, SourceError>,
    },
    /// Cancel a job: its tasks that run on agents' nodes are killed (SIGTERM, SIGKILL
    /// `grace_secs` later) and hold their resources until their ends are reported; the
    /// others (the simulator's) end at once.
    /// A cancel of a job already being stopped shortens its grace when its own is shorter;
    /// an admin's kills it at once.
    Cancel {
        /// The job's name.
        job: String,
        /// Seconds from SIGTERM to SIGKILL.
        grace_secs: u64,
        /// An admin asked: a job whose tasks are already being stopped gets SIGKILL now.
        by_admin: bool,
    },
    /// Hold a pending job (`hyperplan hold`, checked by
    /// [`Planner::hold`](crate::Planner::hold)): it is not tried until released.
    Hold {
        /// The job's name.
        job: String,
        /// Who holds it.
        by: String,
        /// They are an admin: only an admin may release it.
        admin: bool,
    },
    /// Release a held job (`hyperplan release`): it is tried again.
    Release {
        /// The job's name.
        job: String,
    },
    /// An admin drains nodes (`hyperplan nodes drain`): they take no new task; with
    /// `now` their running tasks end as a lost node's do (see `nodes::drain`). Checked by
    /// [`Planner::drain_nodes`](crate::Planner::drain_nodes) before it is queued.
    Drain {
        /// The nodes, by name.
        nodes: Vec<String>,
        /// What was said, by whom and when.
        drain: crate::model::drain::Drain,
        /// `--now`: their tasks end at once.
        now: bool,
    },
    /// An admin resumes drained nodes: they take tasks again.
    Resume {
        /// The nodes, by name.
        nodes: Vec<String>,
    },
    /// An admin removes nodes for good (drained and idle, or whose agent is gone): they
    /// leave the planner with their HyperNode memberships, and their drains go.
    Remove {
        /// The nodes, by name.
        nodes: Vec<String>,
    },
    /// The simulator's end of a task: exited 0 now.
    TaskFinished {
        /// The job's name.
        job: String,
        /// `<task name>-<replica>`.
        task: String,
        /// Its place in the job (`Placement::index`).
        index: u32,
    },
    /// A node's agent started a task (`pid` on that node) at `at_ms`. Applies to the
    /// job of that name and id only; a repeat changes nothing.
    TaskStarted {
        /// The node whose agent started it.
        node: String,
        /// The job's name.
        job: String,
        /// The job's id.
        job_id: hyperplan_shared::ids::JobId,
        /// `<task name>-<replica>`.
        task: String,
        /// Its place in the job: with `job_id`, what finds it (`task` is checked).
        index: u32,
        /// Its process id on that node.
        pid: u32,
        /// When it started (Unix ms), as its agent reports.
        at_ms: u64,
    },
    /// A node's agent reports a task's end: its resources are free from now. A repeat,
    /// or the end of a task the planner no longer has on that node, changes nothing.
    TaskEnded {
        /// The node whose agent reports it.
        node: String,
        /// The job's name.
        job: String,
        /// The job's id.
        job_id: hyperplan_shared::ids::JobId,
        /// `<task name>-<replica>`.
        task: String,
        /// Its place in the job (see `TaskStarted`).
        index: u32,
        /// How it ended, with its figures (exit code or signal, times, CPU and memory use).
        end: TaskEnd,
    },
    /// What a node's agent runs now (each heartbeat): a task the planner does not have
    /// running there (unknown, ended, lost, another job of that name) is killed.
    TasksOnNode {
        /// The node's name.
        node: String,
        /// Every task its agent runs now.
        tasks: Vec<TaskOnNode>,
    },
    /// The ports of the `MASTER_PORT` range bound on a node now (each heartbeat): a job's
    /// `MASTER_PORT` is chosen among the others.
    PortsInUse {
        /// The node's name.
        node: String,
        /// The ports, in any order.
        ports: Vec<u16>,
    },
    /// Whether a node's agent can start tasks now (each heartbeat): `Some(why)` while its
    /// shepherds' forks fail (out of processes or memory), when the node takes no new task.
    NodeStrained {
        /// The node's name.
        node: String,
        /// Why it cannot, in its agent's words; `None`: it can.
        reason: Option<String>,
    },
    /// Every health check's result on a node, as its agent last sent them (on a new link,
    /// and when one changed): a failed check drains the node (see `nodes::checks`).
    NodeChecks {
        /// The node's name.
        node: String,
        /// The results, as sent (bounded again on arrival).
        checks: Vec<hyperplan_shared::health::CheckResult>,
    },
}

/// One task a node's agent runs, with its use (sampled by the agent).
#[derive(Clone, Debug, PartialEq)]
pub struct TaskOnNode {
    /// The job's name.
    pub job: String,
    /// The job's id.
    pub job_id: hyperplan_shared::ids::JobId,
    /// `<task name>-<replica>`.
    pub task: String,
    /// Its place in the job (see `Event::TaskStarted`).
    pub index: u32,
    /// Its process id on the node; 0 while its agent is still starting it.
    pub pid: u32,
    /// CPU use now, in cores.
    pub cpu_cores: f32,
    /// Resident memory now, in bytes.
    pub rss_bytes: u64,
}
