//! What the allocate system reads and writes of the world, in bundles: the setting (the
//! topology, configuration, time), the caches, the jobs with their sub-jobs, tasks and
//! nodes, what arrived since the last tick, the policy (queues, users, order) and the
//! walk's memory between ticks. The walk, its agenda and its commits take these, so the
//! system itself stays an adapter.

use std::collections::BTreeSet;

use bevy_ecs::prelude::*;
use bevy_ecs::system::SystemParam;

use crate::cache::capacity::Capacity;
use crate::cache::holdings::Holdings;
use crate::cache::numa::NumaState;
use crate::config::PlannerConfig;
use crate::jobs::holds;
use crate::model::awaiting::{Awaiting, Incomplete, Rejoining};
use crate::model::components::Requeued;
use crate::model::components::{
    Job, JobId, JobQueue, JobState, NodeSlot, Retired, SubJob, SubJobState, Task, TaskState,
};
use crate::model::gate::Revisit;
use crate::model::ids::NodeIdx;
use crate::model::tick::{CapacityEpoch, Nominated, Now, Outbox, Replacements};
use crate::order::{OrderState, Rank};
use crate::queues::{QueueTable, QueueUse, Users};
use crate::topology::TopologyIndex;

use super::Parts;
use super::backfill::Reservations;
use crate::model::runtimes::{Overruns, RuntimeHistory};

/// The topology, the configuration and the time the walk works at.
#[derive(SystemParam)]
pub struct Setting<'w> {
    /// The topology index.
    pub index: Res<'w, TopologyIndex>,
    /// The planner's configuration.
    pub config: Res<'w, PlannerConfig>,
    /// Now.
    pub now: Res<'w, Now>,
    /// Counts up whenever room may have grown.
    pub epoch: Res<'w, CapacityEpoch>,
}

/// The capacity and NUMA caches and the ledger of who holds what.
#[derive(SystemParam)]
pub struct Caches<'w> {
    /// Free and allocatable room per node and HyperNode.
    pub cap: ResMut<'w, Capacity>,
    /// Free NUMA state per node.
    pub numa: ResMut<'w, NumaState>,
    /// What each running task holds.
    pub holdings: ResMut<'w, Holdings>,
}

/// The live jobs and their sub-jobs, tasks and nodes.
#[derive(SystemParam)]
pub struct Jobs<'w, 's> {
    /// Every job not retired.
    pub jobs: Query<'w, 's, (Entity, &'static Job, &'static mut JobState), Without<Retired>>,
    /// Sub-jobs and what the allocator decided for them.
    pub sub_jobs: Query<'w, 's, (&'static SubJob, &'static mut SubJobState)>,
    /// Tasks and where they are.
    pub tasks: Query<'w, 's, (&'static Task, &'static mut TaskState)>,
    /// Nodes' dense indices.
    pub nodes: Query<'w, 's, &'static NodeSlot>,
}

impl Parts for Jobs<'_, '_> {
    fn sub_job(&self, e: Entity) -> Option<(&SubJob, &SubJobState)> {
        self.sub_jobs.get(e).ok()
    }
    fn task(&self, e: Entity) -> Option<(&Task, &TaskState)> {
        self.tasks.get(e).ok()
    }
    fn slot(&self, e: Entity) -> Option<NodeIdx> {
        self.nodes.get(e).ok().map(|s| s.0)
    }
}

/// Live jobs that arrived in the walk's view since the last tick by filter `F`
/// (submitted, requeued).
type Arrived<'w, 's, F> = Query<'w, 's, Entity, (F, Without<Retired>)>;

/// What came since the last tick: jobs submitted or requeued, lost tasks to start again,
/// jobs a gate let go, and whether agents are still expected back.
#[derive(SystemParam)]
pub struct Arrivals<'w, 's> {
    /// Jobs submitted since.
    pub submitted: Arrived<'w, 's, Added<Job>>,
    /// Jobs requeued since.
    pub requeued: Arrived<'w, 's, Changed<Requeued>>,
    /// Jobs with lost tasks to start again (`onNodeLost: replace`).
    pub replacements: Res<'w, Replacements>,
    /// Jobs a gate let go (see `jobs::gates`).
    pub revisit: ResMut<'w, Revisit>,
    /// Nodes known from the store that have not registered yet.
    pub awaiting: Option<Res<'w, Awaiting>>,
    /// Agents the store does not name that may still come back.
    pub rejoining: Option<Res<'w, Rejoining>>,
    /// Nodes closed in place this tick (drained), sorted.
    pub closed: Res<'w, crate::model::drain::Closed>,
}

/// What the walk reads of queues and order: the queue table and use (charged as it
/// commits), users, the order's generation, and each job's queue, rank and id.
#[derive(SystemParam)]
pub struct Policy<'w, 's> {
    /// The queues, their limits and the accounts.
    pub queue_table: Res<'w, QueueTable>,
    /// What each queue, user and account uses now.
    pub queue_use: ResMut<'w, QueueUse>,
    /// Users' names.
    pub users: Res<'w, Users>,
    /// Counts up when the order changes.
    pub order_state: Res<'w, OrderState>,
    /// Each job's queue, rank and id.
    pub meta: Query<'w, 's, (&'static JobQueue, &'static Rank, &'static JobId)>,
    /// Users' last runtimes (`[scheduler] estimates = "history"`).
    pub history: Res<'w, RuntimeHistory>,
}

/// What the walk leaves behind for the next one and the rest of the tick: its reservations,
/// the nominated jobs, the waiting jobs' next begin, and its memory between ticks.
#[derive(SystemParam)]
pub struct Memory<'w, 's> {
    /// The reservations of the last walk.
    pub reservations: ResMut<'w, Reservations>,
    /// Running jobs that will pass their runtime estimate.
    pub overruns: ResMut<'w, Overruns>,
    /// Jobs whose preemption's nodes are held.
    pub nominated: ResMut<'w, Nominated>,
    /// Held jobs and the next begin time.
    pub waiting: ResMut<'w, holds::Waiting>,
    /// Commands and messages out of the tick.
    pub out: ResMut<'w, Outbox>,
    /// The jobs that may have something to try.
    pub unsettled: Local<'s, Unsettled>,
    /// The jobs held for their preemptions in the last walk.
    pub last_held: Local<'s, Vec<Entity>>,
    /// What the cluster lacked in the last walk.
    pub last_incomplete: Local<'s, Option<Incomplete>>,
}

/// The jobs that may have something to try: submitted since, pending, or running with
/// tasks left to place. A running job with every task placed leaves it, so the many
/// running jobs of a busy cluster cost nothing per tick (a tick used to look at each).
#[derive(Debug, Default)]
pub struct Unsettled {
    pub(super) jobs: BTreeSet<Entity>,
    /// The topology generation the set was last filled from every job for.
    pub(super) generation: Option<u64>,
}
