//! Commands the core returns from a tick; the drivers carry them out.

use std::sync::Arc;

use hyperplan_shared::JobSpec;

use crate::model::kill::KillReason;
use crate::numa::assign::Assignment;
use crate::numa::hints::Policy;
use crate::numa::node::NodeNuma;

/// One placed task. Everything in it is shared with the planner's state (reference
/// counts, no copies), so a tick placing a 512-task job builds 512 small structs; what
/// the agent is sent is rendered by the driver (see [`Pinning`]).
#[derive(Clone, Debug)]
pub struct Placement {
    /// The job as submitted: its name, and per role (`role`) the command, environment
    /// and output files; its limits.
    pub spec: Arc<JobSpec>,
    /// The number the planner gave the job at submit.
    pub job_id: hyperplan_shared::ids::JobId,
    /// Who submitted it (the CN of their certificate): the task runs as that user.
    pub owner: Arc<str>,
    /// Index of the task's spec in `spec.tasks`.
    pub role: usize,
    /// `<task name>-<replica>`.
    pub task: Arc<str>,
    /// Its place in the job (see `Task::index`).
    pub index: u32,
    /// The node it is placed on.
    pub node: Arc<str>,
    /// Its rank in the job: from 0, given in topology order as the job's tasks are placed.
    pub rank: u32,
    /// Where a task with a NUMA request is pinned (what the agent enforces).
    pub pinning: Option<Pinning>,
    /// Which placement of the task this is: its job's requeues plus its restarts (see
    /// `StateRecord`); an agent that ran an earlier one starts this one.
    pub run: u32,
    /// The job's `MASTER_PORT` (see `StateRecord::master_port`).
    pub master_port: u16,
}

impl Placement {
    /// The job's name.
    pub fn job(&self) -> &str {
        &self.spec.name
    }

    /// What to run (the task spec's `command`).
    pub fn command(&self) -> &[String] {
        self.spec.tasks.get(self.role).map_or(&[], |t| t.command.as_slice())
    }
}

/// Two placements are equal when they place the same task the same way (the job spec is
/// compared by value, the pinning by what it renders to).
impl PartialEq for Placement {
    fn eq(&self, other: &Self) -> bool {
        self.task == other.task
            && self.node == other.node
            && self.rank == other.rank
            && self.run == other.run
            && self.master_port == other.master_port
            && self.role == other.role
            && self.job_id == other.job_id
            && self.owner == other.owner
            && (Arc::ptr_eq(&self.spec, &other.spec) || self.spec == other.spec)
            && self.pinning == other.pinning
    }
}

impl Eq for Placement {}

/// A task's NUMA pinning: the assignment the allocator made on the node's hardware. The
/// agent's terms (OS indexes, device names) are rendered on demand by the methods, by the
/// driver that needs them, not in the tick.
#[derive(Clone, Debug)]
pub struct Pinning {
    /// The node's NUMA hardware, which `assignment` indexes into.
    pub hardware: Arc<NodeNuma>,
    /// The PUs, memory and GPUs the allocator picked (dense indices into `hardware`).
    pub assignment: Arc<Assignment>,
    /// The task's NUMA policy: anything but `none` binds its memory to its NUMA nodes.
    pub policy: Policy,
}

impl Pinning {
    /// PU OS indexes in list form (`0-3,8-11`).
    pub fn cpus(&self) -> String {
        self.hardware.cpu_list(&self.assignment)
    }

    /// OS indexes of the NUMA nodes it uses.
    pub fn numa_nodes(&self) -> Vec<u32> {
        self.hardware.numa_nodes(&self.assignment)
    }

    /// (NUMA OS index, bytes), ascending by NUMA node.
    pub fn memory(&self) -> Vec<(u32, u64)> {
        self.hardware.memory(&self.assignment)
    }

    /// GPU PCI bus ids.
    pub fn gpus(&self) -> Vec<Arc<str>> {
        self.hardware.gpus(&self.assignment)
    }

    /// The rails (HCA names) local to its GPUs, or to its CPUs' NUMA nodes.
    pub fn nics(&self) -> Vec<Arc<str>> {
        self.hardware.nics(&self.assignment)
    }
}

impl PartialEq for Pinning {
    fn eq(&self, other: &Self) -> bool {
        self.policy == other.policy
            && ((Arc::ptr_eq(&self.hardware, &other.hardware) && self.assignment == other.assignment)
                || (self.cpus() == other.cpus()
                    && self.numa_nodes() == other.numa_nodes()
                    && self.memory() == other.memory()
                    && self.gpus() == other.gpus()
                    && self.nics() == other.nics()))
    }
}

impl Eq for Pinning {}

/// What the driver must do, in order: [`Planner::tick_millis`](crate::Planner::tick_millis)
/// returns them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// A task is placed: launch it (the simulator schedules its completion).
    Place(Placement),
    /// A job can never run; `reason` says why.
    Reject {
        /// The job's name.
        job: String,
        /// Why, for people.
        reason: String,
    },
    /// Something a working planner survives (a broken HyperNode, an unknown tier name, a
    /// discovery source that failed).
    Warn(String),
    /// Worth a log line, nothing to do (a discovery source that works again).
    Info(String),
    /// Stop a task on its node: SIGTERM to its process group, SIGKILL `grace_secs`
    /// later. Its resources stay held until its end is reported (or the node is lost).
    Kill {
        /// The node it runs on.
        node: Arc<str>,
        /// The job's name.
        job: Arc<str>,
        /// The job's id.
        job_id: hyperplan_shared::ids::JobId,
        /// `<task name>-<replica>`.
        task: Arc<str>,
        /// Its place in the job (see `Task::index`).
        index: u32,
        /// Seconds from SIGTERM to SIGKILL.
        grace_secs: u64,
        /// Why it is killed.
        why: KillReason,
        /// The signal sent first instead of SIGTERM (a preempted job's `preemptSignal`,
        /// its checkpoint hook); `None`: SIGTERM.
        signal: Option<i32>,
    },
    /// A job is preempted (its tasks get their `Kill`s): for the log, and the
    /// simulator's count of preemptions and work lost.
    Preempted {
        /// The victim's name.
        victim: String,
        /// The job it is preempted for.
        by: String,
        /// The HyperNode freed (`None`: the whole cluster).
        hyper_node: Option<String>,
        /// The work it loses: seconds run × CPUs held (millicores / 1000), summed over its
        /// tasks.
        lost_cpu_seconds: u64,
        /// It goes back to pending (`requeue: true`) rather than ending `preempted`.
        requeued: bool,
        /// Why it may be preempted (priority, or a reclaim).
        why: String,
    },
    /// Write this job's record (see `persist`) before carrying out anything else of the
    /// tick: the daemon's store commits it first.
    Persist(crate::model::record::Persist),
    /// Write fair share's usage (a [`UsageRecord`](crate::model::usage::UsageRecord),
    /// encoded), replacing the one stored; with the tick's job records.
    PersistUsage(std::sync::Arc<[u8]>),
    /// Write the nodes' drains (a [`DrainsRecord`](crate::model::drain::DrainsRecord),
    /// encoded), replacing the one stored; with the tick's job records.
    PersistDrains(std::sync::Arc<[u8]>),
    /// A node turned Ready or NotReady, and why (the daemon logs it; the simulator's
    /// nodes have no link and never change).
    NodeHealth {
        /// The node's name.
        node: String,
        /// Ready now, or NotReady.
        ready: bool,
        /// What changed it.
        why: HealthChange,
    },
    /// A node's agent registered again: the `Launch` of its placed tasks whose start it
    /// never reported, to send again (one sent on a link that then dropped is otherwise
    /// lost; the agent starts nothing twice). After this tick's `Place`s; in job name,
    /// then rank order.
    Relaunch {
        /// The node whose agent registered again.
        node: String,
        /// Its placed tasks not reported started.
        placements: Vec<Placement>,
    },
}

/// Why a node's readiness changed (see `core::health`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealthChange {
    /// Its agent registered: Ready.
    Registered,
    /// A heartbeat after the node was NotReady: Ready.
    HeartbeatAgain,
    /// Nothing heard for `silent_ms`, more than `missed` heartbeat intervals: NotReady.
    Silent {
        /// How long it has been silent (ms).
        silent_ms: u64,
        /// Heartbeat intervals allowed to pass (`missedHeartbeats`).
        missed: u32,
    },
    /// Its agent's link closed: NotReady.
    LinkClosed,
}
