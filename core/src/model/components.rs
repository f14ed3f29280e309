//! ECS components: nodes, HyperNodes, jobs, sub-jobs and tasks. Relationships are
//! explicit entity references, never names looked up in maps.

use std::collections::BTreeMap;

use bevy_ecs::prelude::*;
use hyperplan_shared::{HyperNodeSpec, JobSpec, NetworkTopology, Resources};

use crate::model::ids::NodeIdx;
pub use crate::model::jobstate::{JobPhase, JobState, Verdict};

/// A machine the planner may place tasks on.
#[derive(Component, Clone, Debug)]
pub struct Node {
    /// Shared with the `Place` commands of the tasks placed on it.
    pub name: std::sync::Arc<str>,
    /// Its labels (key → value): label discovery and HyperNode member selectors read them.
    pub labels: BTreeMap<String, String>,
    /// What it offers in all, per resource, in base units (`cpu` in millicores, `memory` in
    /// bytes).
    pub allocatable: Resources,
    /// Taken by work hyperplan does not manage.
    pub external_used: Resources,
    /// Heartbeating (daemon) or simply present (simulator). A node that is not ready
    /// keeps its tasks but offers nothing new. Changed only through `set_node_ready`:
    /// what must be rebuilt is decided from inserts of `Node`, not from writes to it.
    pub ready: bool,
    /// InfiniBand ports ACTIVE, and all of them, from the probe.
    pub ib_ports: (u32, u32),
    /// Node and port GUIDs of its HCAs, from the probe: fabric discovery names a dump's
    /// CAs after the node that reports their GUIDs before it trusts anything else.
    pub ib_guids: Vec<u64>,
    /// What its GPUs say of their NVLink fabric (`None`: no GPU reported any): the
    /// `nvlink` source makes HyperNodes of the domains, `hyperplan nodes` shows the rest.
    pub nvlink: Option<NodeNvlink>,
}

/// What a node's GPUs say of their NVLink fabric, as ingest read it from the probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeNvlink {
    /// The domain they agree on, or why there is none.
    pub domain: hyperplan_shared::gpufabric::NodeDomain,
    /// Per GPU reporting fabric trouble: `GPU 2: bandwidth degraded, route unhealthy`.
    pub problems: Vec<String>,
}

impl NodeNvlink {
    /// Reads the probe's per-GPU reports (`None`: none reported).
    pub fn from_gpus(gpus: &[hyperplan_shared::gpufabric::GpuFabric]) -> Option<Self> {
        if gpus.is_empty() {
            return None;
        }
        let problems = gpus
            .iter()
            .enumerate()
            .filter(|(_, g)| g.health.degraded())
            .map(|(k, g)| {
                let who = match (g.index, g.pci_bus_id.is_empty()) {
                    (Some(i), _) => format!("GPU {i}"),
                    (None, false) => format!("GPU {}", g.pci_bus_id),
                    (None, true) => format!("GPU #{}", k + 1),
                };
                format!("{who}: {}", g.health.problems().join(", "))
            })
            .collect();
        Some(Self {
            domain: hyperplan_shared::gpufabric::node_domain(gpus),
            problems,
        })
    }

    /// In a domain, with a GPU reporting fabric trouble: it scores lower.
    pub fn degraded(&self) -> bool {
        matches!(
            self.domain,
            hyperplan_shared::gpufabric::NodeDomain::Domain { degraded: true, .. }
        )
    }
}

/// Sets node `e` ready or not by inserting its [`Node`] again, so that
/// `topology::invalidate`, which hears inserts (hooks) rather than writes, rebuilds what
/// depends on readiness; `true` when it changed.
pub(crate) fn set_node_ready(world: &mut World, e: Entity, ready: bool) -> bool {
    let Some(node) = world.get::<Node>(e).filter(|n| n.ready != ready) else {
        return false;
    };
    let mut node = node.clone();
    node.ready = ready;
    world.entity_mut(e).insert(node);
    true
}

/// The node's dense index in the current topology index.
#[derive(Component, Clone, Copy, Debug)]
pub struct NodeSlot(pub NodeIdx);

/// The kinds of HyperNode source, in the order that wins when two define one name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SourceKind {
    /// Volcano HyperNode manifests (the cluster file's, or planner.toml `files`).
    Static,
    /// Label discovery (Volcano's `networkTopologyTypes`).
    Label,
    /// An `ibnetdiscover` dump: every tier from the switch graph.
    Ibnetdiscover,
    /// UFM's REST port list.
    Ufm,
    /// A Slurm `topology.conf`.
    Slurm,
    /// NVLink domains and partitions the agents report: the lowest tiers, grafted under
    /// the lowest HyperNode of the other sources that holds each.
    Nvlink,
}

impl SourceKind {
    /// Its name in planner.toml and in reports (`static`, `label`, `ibnetdiscover`, …); also
    /// the name of a source of this kind that is not named.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Static => "static",
            SourceKind::Label => "label",
            SourceKind::Ibnetdiscover => "ibnetdiscover",
            SourceKind::Ufm => "ufm",
            SourceKind::Slurm => "slurm",
            SourceKind::Nvlink => "nvlink",
        }
    }

    /// Discovered from a fabric or a scheduler's file rather than written for hyperplan:
    /// hosts that are no planner node (storage, login nodes, nodes whose agent has not
    /// registered yet) are left out of these HyperNodes instead of breaking them.
    pub fn names_foreign_hosts(self) -> bool {
        matches!(self, SourceKind::Ibnetdiscover | SourceKind::Ufm | SourceKind::Slurm)
    }
}

/// Who owns a HyperNode: a source reconciles (creates, updates, deletes) only its own.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Source {
    /// What kind of source it is.
    pub kind: SourceKind,
    /// The `[[discovery]]` entry's name (its kind unless named).
    pub name: String,
}

impl Source {
    /// The source `name`, of kind `kind`.
    pub fn new(kind: SourceKind, name: impl Into<String>) -> Self {
        Self {
            kind,
            name: name.into(),
        }
    }

    /// The cluster file's HyperNodes, and label discovery: one of each.
    pub fn of_kind(kind: SourceKind) -> Self {
        Self::new(kind, kind.as_str())
    }
}

/// A HyperNode (a network tier's group of nodes or HyperNodes) and the source that owns it.
#[derive(Component, Clone, Debug)]
pub struct HyperNode {
    /// Its name, tier and members, as its source gave them.
    pub spec: HyperNodeSpec,
    /// The source that defined it: only that source updates or deletes it.
    pub source: Source,
    /// Links between its members and its switches that trained narrower or slower than
    /// their neighbours, as its source saw them (an `ibnetdiscover` dump's rates:
    /// `gpu017 mlx5_0 port 1 – sw95 port 23: 1xHDR (expected 4xHDR), line 812`). Hard-
    /// topology jobs take a HyperNode of the same tier without any first.
    pub degraded_links: Vec<String>,
}

/// A submitted job: its spec, gang minimum, sub-jobs and tasks (see `jobs::admit`).
#[derive(Component, Clone, Debug)]
pub struct Job {
    /// Shared with the `Place` commands of its tasks (the drivers read the task's command,
    /// environment and limits from it).
    pub spec: std::sync::Arc<JobSpec>,
    /// The gang minimum: how many tasks must be placed before any is (`minAvailable`; by
    /// default every task, a partitioned role counting `minPartitions` partitions).
    pub gang_min: u32,
    /// The CPUs its tasks ask for in all (the priority's size factor reads it for every
    /// job at each recalculation: summed once here, not looked up in the spec each time).
    pub cpus: u64,
    /// Its sub-jobs, in the order made: one per partition of a partitioned role, and one
    /// default sub-job for the tasks outside partitions.
    pub sub_jobs: Vec<Entity>,
    /// In task order: spec order, then replica index.
    pub tasks: Vec<Entity>,
    /// Sub-job groups from partition policies: (task spec index, minPartitions).
    pub partition_groups: Vec<(usize, u32)>,
    /// Per role (task spec): what it asks of the NUMA allocator (`None` = nothing to pin).
    pub numa: Vec<Option<crate::numa::assign::TaskNuma>>,
    /// Its queue's `trees` when it was admitted: it is placed inside one of these
    /// top-level HyperNodes; empty: anywhere.
    pub trees: Vec<String>,
}

/// A gang within a job (Volcano's sub-job): one partition of a role, or the job's tasks
/// outside partitions. Its network topology bounds where its tasks go.
#[derive(Component, Clone, Debug)]
pub struct SubJob {
    /// The job it belongs to.
    pub job: Entity,
    /// `<job>/<task>-<partition>` or `<job>`.
    pub id: String,
    /// Tasks to place together: the partition's `partitionSize`; for the default sub-job the
    /// job's gang minimum (the number of unpartitioned tasks when the job has partitions).
    pub min_available: u32,
    /// Index into `Job::partition_groups`; `None` for the job's default sub-job.
    pub group: Option<usize>,
    /// The partition's number within its role (0 for the default sub-job); orders the sub-jobs
    /// when the allocator picks which ones are required.
    pub match_index: u32,
    /// Where its tasks may go (the partition's constraint, or the job's); `None` = anywhere.
    pub network_topology: Option<NetworkTopology>,
    /// Its tasks, in the job's task order.
    pub tasks: Vec<Entity>,
    /// The segment it sits in (`segments` layers nest); `None` for the outermost layer,
    /// partitions and the default sub-job.
    pub parent: Option<Entity>,
    /// An innermost segment's number across the job: ranks follow these in order, so
    /// each segment holds consecutive ranks. `None` for other sub-jobs.
    pub block: Option<u32>,
}

/// What the allocator decided for a sub-job.
#[derive(Component, Clone, Debug, Default)]
pub struct SubJobState {
    /// Its AllocatedHyperNode (Volcano's), by name: where its tasks were placed; `None`
    /// until placed (or once cleared).
    pub allocated_hyper_node: Option<String>,
}

/// One replica of one role (task spec) of a job.
#[derive(Component, Clone, Debug)]
pub struct Task {
    /// The job it belongs to.
    pub job: Entity,
    /// The sub-job it is placed with.
    pub sub_job: Entity,
    /// `<task name>-<replica>`, for people; shared with its `Place` command.
    pub name: std::sync::Arc<str>,
    /// Its place in `Job::tasks` (spec order, then replica): with the job's id, what
    /// agents' reports name it by (never parsed from `name`).
    pub index: u32,
    /// Index of the task spec in the job (the "role").
    pub role: usize,
    /// Shared by the replicas of a role.
    pub request: std::sync::Arc<Resources>,
    /// Seconds it runs for in the simulator (the spec's `runtime`); `None` = until cancelled.
    pub runtime: Option<u64>,
}

/// Where a task is as the planner keeps it (people see a finer [`task_status`]).
///
/// [`task_status`]: crate::model::taskrun::task_status
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TaskPhase {
    /// Not placed.
    Pending,
    /// Placed: it holds resources on its node, started or not.
    Running,
    /// Ended: it holds nothing any more.
    Finished,
}

/// Where a task is placed and how far it has got.
#[derive(Component, Clone, Debug)]
pub struct TaskState {
    /// How far it has got (see [`TaskPhase`]).
    pub phase: TaskPhase,
    /// The node it is placed on; `None` while pending.
    pub node: Option<Entity>,
    /// Its rank in the job; `None` while pending.
    pub rank: Option<u32>,
    /// When it was placed (Unix seconds); `None` while pending.
    pub start_time: Option<u64>,
    /// The placement has been handed to the driver (a `Place` command).
    pub dispatched: bool,
    /// PUs, memory and GPUs it holds on its node (indices into the node's hardware).
    /// Shared with the holdings ledger (one allocation per placement).
    pub numa: Option<std::sync::Arc<crate::numa::assign::Assignment>>,
}

impl TaskState {
    /// A task not placed yet.
    pub fn pending() -> Self {
        Self {
            phase: TaskPhase::Pending,
            node: None,
            rank: None,
            start_time: None,
            dispatched: false,
            numa: None,
        }
    }
    /// Holds resources on its node.
    pub fn is_running(&self) -> bool {
        self.phase == TaskPhase::Running
    }
}

/// On a job that is over (finished or cancelled), its sub-jobs and its tasks, from the
/// end of the tick in which it ended (see `retire`). The per-tick scans skip it.
#[derive(Component, Clone, Copy, Debug, Default)]
pub struct Retired;

/// Query filter: `T` changed since the system last ran, on an entity not retired.
pub type LiveChanged<T> = (Changed<T>, Without<Retired>);

/// The user who submitted a job: they (and admins) may cancel it.
#[derive(Component, Clone, Debug, PartialEq, Eq)]
pub struct JobOwner(pub std::sync::Arc<str>);

/// The queue a job waits and runs in, and its owner as a dense index (see `queues`).
#[derive(Component, Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobQueue {
    /// Its queue.
    pub queue: crate::model::ids::QueueIdx,
    /// Its owner.
    pub user: crate::model::ids::UserIdx,
}

/// A job's number, given at submit ([`Planner::submit`](crate::Planner::submit)): 1, 2,
/// 3, … in the order submissions reach the core; a refused one uses none. A component of
/// the job's entity, and the same typed id the events, commands and the wire carry.
pub use hyperplan_shared::ids::JobId;

/// On a job sent back to pending (how many times): the allocator only looks at jobs
/// submitted since or left unplaced, so it picks this one up when it changes.
#[derive(Component, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Requeued(pub u32);
