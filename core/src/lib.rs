//! hyperplan-core, the planner core: a bevy_ecs `World` and one ordered `Schedule`. No
//! I/O and no clock: drivers call the [`Planner`]'s methods (`submit`, `cancel`,
//! `status`, the views), push [`Event`](enum@Event)s, call [`Planner::tick_millis`] with `now`, and
//! carry out the [`Command`]s it returns. The daemon and the simulator drive the very
//! same Schedule, and whatever decides anything lives here, not in a driver.
//!
//! The rooms, bottom up (a room imports only from rooms below it or beside it; no two
//! root modules import each other, directly or around a circle: `tests/layers.rs`):
//!
//! | room | what it holds |
//! |---|---|
//! | `numa`, `checksum`, `names`, `caller`, `preempt_reason`, `ratelimit` | plain libraries, no ECS system |
//! | `model/` | the vocabulary: ids, components, a job's state and its stored record, events, commands, the tick's inbox, outbox, time and invalidation flags, what node health keeps, nodes awaiting their agents; imports no system |
//! | `config/` | what planner.toml's `[scoring]`, `[numa]`, `[limits]`, health keys, `[scheduler]`, `[[queue]]`, `[fairshare]`, `[priority]` and `[[reservation]]` say |
//! | `topology/` | the HyperNode index, its rebuild (`reindex`) and what decides it (`invalidate`) |
//! | `cache/` | capacity, NUMA state and the ledger of what each task holds, and their refresh; `scratch`: the one door to take and give room, with undo |
//! | `queues/` | the queue table, each queue's and user's use (`account`), the checks at submit and the limits of the walk, reloads |
//! | `fairshare/` | usage per queue and user and per (account, user), decayed exactly (`accrue`), and the fair-share factor: classic, or Fair Tree over the accounts (`tree`) |
//! | `order/` | the multifactor rank that orders the walk |
//! | `jobs/` | admission, ownership and limits, the task lifecycle, `recover`, `replace`, `retire` |
//! | `nodes/` | link claims, health, lost nodes, refused agents, admins' drains and removals |
//! | `discovery/` | HyperNodes from sources and labels, reconciled with the nodes |
//! | `allocate/` | the system (an adapter) over `agenda` (what to try), `walk` (one job at a time, answering an outcome) and `commit` (applying it); gradient search, scoring, NUMA assignment; `backfill/`: reservations and what a job is tried around; `hold`: nodes held for a preemption |
//! | `preempt/` | who may preempt whom (`eligible`), the fewest victims in one HyperNode (`victims`, `trial`), the preemption carried out |
//! | `dispatch/` | `Place` and `Relaunch` commands |
//! | `persist/` | the `persist` system and start-up from the store (`restore`, `adopt`) |
//! | `ingest` | events into the world |
//! | `requests/`, `view/` | the planner's answers: submit, cancel, logs, status; reports, nodes, HyperNodes, explain |
//! | `sim`, `testing` | the simulator; builders and the test rig |
//!
//! The Schedule, in order (this list is the whole truth: no system calls another):
//!
//! | # | system | does |
//! |---|---|---|
//! | 1 | `ingest::ingest` | applies events: nodes, links and heartbeats (`nodes::health`), drains (`nodes::drain`), health checks' results (`nodes::checks`), sources, jobs, task starts, ends and cancels (`jobs::lifecycle`) |
//! | 2 | `persist::restore::adopt` | nodes from the store whose agent registered take their tasks' NUMA assignments again |
//! | 3 | `nodes::health::check_silence` | silent nodes turn NotReady |
//! | 3a | `nodes::checks::return_healthy` | nodes drained by health whose checks have all passed for `[health] returnAfter` take work again |
//! | 4 | `nodes::lost::lost` | tasks of nodes NotReady too long, and tasks their agent stopped listing, are lost |
//! | 5 | `topology::invalidate::invalidate` | from what changed: the node set's generation, whether the index must be rebuilt |
//! | 6 | `discovery::discovery` | HyperNodes from labels and polled sources, reconciled |
//! | 7 | `topology::reindex::reindex` | the topology index, rebuilt when invalidated |
//! | 8 | `cache::refresh::refresh_capacity` | capacity follows what tasks hold; says when room may have grown (`CapacityEpoch`) |
//! | 9 | `cache::refresh::refresh_numa` | NUMA state follows the same ledger |
//! | 10 | `jobs::recover::recover` | AllocatedHyperNodes cleared or recovered |
//! | 11 | `queues::account::account` | each queue's and user's use follows tasks that stopped or started outside the walk |
//! | 12 | `order::rank` | the multifactor rank of new jobs, and of every waiting job each `recalcInterval` |
//! | 13a | `jobs::shed::revive` | rejected jobs looked at again on a new topology get their sub-jobs and tasks back |
//! | 13 | `allocate::allocate` | in rank order: queue limits, gradient search, scoring, NUMA assignment, reservations and backfill; each placement recorded in the ledger and charged to its queue |
//! | 14 | `preempt::preempt` | waiting jobs the walk could not place free ONE HyperNode: the fewest victims (then least work lost, fewest queues) are preempted, the nodes held for the job |
//! | 15 | `jobs::replace::settle` | tasks lost with their node (`onNodeLost: replace`) started again inside the job's HyperNode, or the job requeued or failed, saying why |
//! | 15a | `jobs::shed::shed` | a job rejected in this tick lets go of its sub-jobs and tasks (an entity per replica) |
//! | 16 | `fairshare::accrue::accrue` | fair-share usage brought up to now where use changed; written to the store each `recalcInterval` |
//! | 17 | `dispatch::dispatch` | a `Place` per new placement |
//! | 18 | `dispatch::relaunch` | a `Relaunch` per node registered again with unstarted tasks |
//! | 19 | `jobs::ownership::count_live` | each owner's live jobs, for `maxJobsPerUser` (the changed jobs only) |
//! | 20 | `jobs::retire::retire` | jobs that ended leave the per-tick scans |
//! | 21 | `persist::persist` | a `Persist` per changed job record (the daemon only) |
//! | 22 | `jobs::forget::forget` | ended jobs past `[limits]`' bounds leave memory, oldest first (the daemon only: the store keeps them) |
//!
//! Between topology changes every system after the index works on what changed (see
//! `cache::holdings`) and on live jobs (see `jobs::retire`), not on the whole cluster or
//! its history.

#![warn(unreachable_pub, missing_docs)]

pub mod config;
pub mod sim;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub mod accounts;
pub mod allocate;
pub mod cache;
pub mod caller;
pub mod checksum;
pub mod discovery;
mod dispatch;
pub mod fairshare;
pub(crate) mod ingest;
pub mod invariants;
pub mod jobs;
pub mod model;
pub mod names;
pub mod nodes;
pub mod numa;
pub mod order;
pub mod persist;
pub mod preempt;
pub mod preempt_reason;
pub mod queues;
pub mod ratelimit;
pub mod requests;
pub mod topology;
pub mod view;

use bevy_ecs::prelude::*;
use bevy_ecs::schedule::SingleThreadedExecutor;

pub use model::commands::{Command, Pinning, Placement};
pub use model::events::Event;

use cache::capacity::Capacity;
pub use config::PlannerConfig;
use model::tick::{CapacityEpoch, Inbox, LabelTypes, NodeSetGeneration, Now, Outbox, TopologyDirty};
use topology::TopologyIndex;

/// The planner: the world and the one Schedule that ticks it. Drivers hold one and reach
/// the world only through its methods (events in, commands and answers out).
pub struct Planner {
    world: World,
    schedule: Schedule,
}

impl std::fmt::Debug for Planner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Planner").finish_non_exhaustive()
    }
}

impl Planner {
    /// A planner with `config` and nothing in it: no nodes, no HyperNodes, no jobs.
    pub fn new(config: PlannerConfig) -> Self {
        let mut world = World::new();
        world.insert_resource(queues::QueueTable::new(&config, 0));
        world.insert_resource(queues::Users::default());
        world.insert_resource(queues::QueueUse::default());
        world.insert_resource(fairshare::Usage::default());
        world.insert_resource(fairshare::tree::FairTree::default());
        world.insert_resource(order::OrderState::default());
        world.insert_resource(config);
        world.insert_resource(Inbox::default());
        world.insert_resource(Outbox::default());
        world.insert_resource(Now::default());
        world.insert_resource(model::tick::Reregistered::default());
        world.insert_resource(CapacityEpoch::default());
        world.insert_resource(model::held::Waiting::default());
        world.insert_resource(allocate::backfill::Reservations::default());
        world.insert_resource(model::runtimes::RuntimeHistory::default());
        world.insert_resource(model::runtimes::Overruns::default());
        world.insert_resource(model::tick::Nominated::default());
        world.insert_resource(model::tick::Replacements::default());
        world.insert_resource(TopologyDirty(true));
        world.insert_resource(LabelTypes::default());
        world.insert_resource(model::tick::NvlinkDiscovery::default());
        world.insert_resource(names::JobNames::default());
        world.insert_resource(names::JobIds::default());
        world.insert_resource(model::arrays::Arrays::default());
        world.insert_resource(model::gate::Revisit::default());
        world.insert_resource(jobs::ownership::NextJobId::default());
        world.insert_resource(jobs::ownership::LiveByOwner::default());
        world.insert_resource(jobs::forget::Kept::default());
        world.insert_resource(names::NodeNames::default());
        world.insert_resource(model::health::Away::default());
        world.insert_resource(nodes::refusals::Refusals::default());
        world.insert_resource(model::drain::Drains::default());
        world.insert_resource(model::checks::DrainsTouched::default());
        world.insert_resource(NodeSetGeneration::default());
        world.insert_resource(discovery::Sources::default());
        world.insert_resource(discovery::ReportedGuids::default());
        world.insert_resource(TopologyIndex::default());
        world.insert_resource(Capacity::default());
        world.insert_resource(cache::holdings::Holdings::default());
        world.insert_resource(cache::numa::NumaState::default());
        world.insert_resource(numa::node::HardwareCache::default());
        topology::invalidate::watch(&mut world);
        register_components(&mut world);
        let mut schedule = Schedule::default();
        schedule.set_executor(SingleThreadedExecutor::new());
        schedule.add_systems(
            (
                ingest::ingest,
                persist::restore::adopt,
                (nodes::health::check_silence, nodes::checks::return_healthy).chain(),
                nodes::lost::lost,
                topology::invalidate::invalidate,
                discovery::discovery,
                topology::reindex::reindex,
                cache::refresh::refresh_capacity,
                cache::refresh::refresh_numa,
                jobs::recover::recover,
                queues::account::account,
                order::rank,
                // The walk, the rejected jobs it looks at again given their tasks first,
                // then what it could not place (tuples of their own: the chain has as many
                // members as a tuple may).
                (jobs::gates::gates, jobs::shed::revive, allocate::allocate).chain(),
                (preempt::preempt, jobs::replace::settle, jobs::shed::shed).chain(),
                fairshare::accrue::accrue,
                dispatch::dispatch,
                dispatch::relaunch,
                jobs::ownership::count_live,
                jobs::retire::retire,
                (
                    persist::persist.run_if(resource_exists::<persist::Persisting>),
                    jobs::forget::forget.run_if(resource_exists::<persist::Persisting>),
                )
                    .chain(),
            )
                .chain(),
        );
        Self { world, schedule }
    }

    /// Queues an event for the next tick.
    pub fn push(&mut self, event: Event) {
        self.world.resource_mut::<Inbox>().0.push(event);
    }

    /// Runs one tick at `now_ms` (Unix milliseconds, the driver's clock) and returns
    /// what the driver must do.
    pub fn tick_millis(&mut self, now_ms: u64) -> Vec<Command> {
        let _span = tracing::info_span!("tick", now_ms).entered();
        self.world.resource_mut::<Now>().ms = now_ms;
        self.schedule.run(&mut self.world);
        std::mem::take(&mut self.world.resource_mut::<Outbox>().0)
    }

    /// As [`Planner::tick_millis`], at `now` whole seconds: for the simulator's traces
    /// and tests, whose times are seconds.
    pub fn tick(&mut self, now: u64) -> Vec<Command> {
        self.tick_millis(now.saturating_mul(1000))
    }

    /// The world, to read: the core's own; drivers ask the planner's answers (`view`,
    /// `requests`).
    pub(crate) fn world(&self) -> &World {
        &self.world
    }

    /// The world, for tests that inspect what no answer shows.
    #[cfg(any(test, feature = "testing"))]
    pub fn world_for_tests(&self) -> &World {
        &self.world
    }

    /// The world to change: the core's own, never a driver's (drivers push events).
    pub(crate) fn world_mut(&mut self) -> &mut World {
        &mut self.world
    }

    /// The world to change, for tests that set up or inspect what no event reaches.
    #[cfg(any(test, feature = "testing"))]
    pub fn world_mut_for_tests(&mut self) -> &mut World {
        &mut self.world
    }

    /// The current topology index: the HyperNodes and nodes in dense indices.
    pub fn index(&self) -> &TopologyIndex {
        self.world.resource::<TopologyIndex>()
    }
}

/// Every component, registered before any entity exists, so that the views can read the
/// world without `&mut` (a query state over `&World` needs its components known).
fn register_components(world: &mut World) {
    use model::components as c;
    world.register_component::<c::Node>();
    world.register_component::<c::NodeSlot>();
    world.register_component::<model::drain::Drained>();
    world.register_component::<model::strays::Strays>();
    world.register_component::<model::strained::Strained>();
    world.register_component::<model::checks::NodeChecks>();
    world.register_component::<model::checks::Returning>();
    world.register_component::<model::ports::PortsInUse>();
    world.register_component::<c::HyperNode>();
    world.register_component::<c::Job>();
    world.register_component::<c::JobState>();
    world.register_component::<c::JobOwner>();
    world.register_component::<c::JobId>();
    world.register_component::<c::JobQueue>();
    world.register_component::<order::Rank>();
    world.register_component::<c::Requeued>();
    world.register_component::<c::SubJob>();
    world.register_component::<c::SubJobState>();
    world.register_component::<c::Task>();
    world.register_component::<c::TaskState>();
    world.register_component::<c::Retired>();
    world.register_component::<jobs::shed::Shed>();
    world.register_component::<model::taskrun::TaskRun>();
    world.register_component::<model::health::Heartbeats>();
    world.register_component::<model::awaiting::AwaitingAgent>();
    world.register_component::<model::awaiting::StandIn>();
    world.register_component::<numa::node::NodeHardware>();
    world.register_component::<persist::Persisted>();
    world.register_component::<jobs::ownership::CountedLive>();
}
