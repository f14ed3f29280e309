//! hyperplan-core, the planner core: a bevy_ecs `World` and one ordered `Schedule`. No I/O and no clock:
//! drivers push [`Event`]s, call [`Planner::tick`] with `now`, and carry out the
//! [`Command`]s it returns. The daemon and the simulator drive the very same Schedule.
//! What decides anything lives here, not in a driver: node health (`health`), job
//! owners, job-name uniqueness and the priority cap (`ownership`), who sees which job
//! (`caller`), the job and task lifecycle the agents report (`lifecycle`: verdicts,
//! kills, orphans; `model::taskrun`: each task's run), lost nodes (`lost`), agents
//! turned away (`refusals`).
//!
//! The rooms, bottom up (a file imports only from rooms below it or beside it):
//!
//! - `numa`, `checksum`, `names`, `caller`, `ratelimit`: plain libraries, no ECS system;
//! - `model`: the vocabulary: ids, components, events, commands, the tick's inbox,
//!   outbox and invalidation flags, what node health keeps (`health`), nodes awaiting
//!   their agents after a restart (`awaiting`), the stored record; imports no system;
//! - `config`, `topology` (the HyperNode index), `cache` (capacity, NUMA state,
//!   holdings, refresh): what the allocator reads;
//! - `lifecycle` (task starts and ends, verdicts, kills; a task lost) and `admit` (a
//!   job's entities from its spec): what several systems do to jobs;
//! - the systems: `ingest`, `health`, `lost`, `restore`, `discovery`, `allocate`,
//!   `dispatch`, `recover`, `retire`, `persist`, `ownership`, `claim`, `refusals`;
//!   `view` reads the world for people; `sim` and `testing` drive it.
//!
//! No two root modules import each other, directly or around a circle.
//!
//! A tick: ingest (task starts, ends and cancels through `lifecycle`) → node health →
//! lost nodes and tasks → discovery → topology index → resource cache (capacity, then NUMA)
//! → recover → allocate (gradient search, scoring, NUMA assignment; each placement
//! recorded in the caches' ledger) → dispatch → retire the jobs that ended. Between
//! topology changes every system after the index works on what changed (see
//! `cache::holdings`) and on live jobs (see `retire`), not on the whole cluster or its history.

pub mod config;
pub mod sim;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub mod admit;
pub mod allocate;
pub mod cache;
pub mod caller;
pub mod checksum;
pub mod claim;
pub mod discovery;
pub mod health;
pub(crate) mod ingest;
mod invalidate;
pub mod invariants;
pub mod lifecycle;
pub mod lost;
pub mod model;
pub mod names;
pub mod numa;
pub mod ownership;
pub mod persist;
pub mod ratelimit;
mod recover;
pub mod refusals;
mod reindex;
pub mod requests;
pub mod restore;
mod retire;
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
    pub fn new(config: PlannerConfig) -> Self {
        let mut world = World::new();
        world.insert_resource(config);
        world.insert_resource(Inbox::default());
        world.insert_resource(Outbox::default());
        world.insert_resource(Now::default());
        world.insert_resource(model::tick::Reregistered::default());
        world.insert_resource(CapacityEpoch::default());
        world.insert_resource(TopologyDirty(true));
        world.insert_resource(LabelTypes::default());
        world.insert_resource(names::JobNames::default());
        world.insert_resource(ownership::NextJobId::default());
        world.insert_resource(ownership::LiveByOwner::default());
        world.insert_resource(names::NodeNames::default());
        world.insert_resource(model::health::Away::default());
        world.insert_resource(refusals::Refusals::default());
        world.insert_resource(NodeSetGeneration::default());
        world.insert_resource(discovery::Sources::default());
        world.insert_resource(discovery::ReportedGuids::default());
        world.insert_resource(TopologyIndex::default());
        world.insert_resource(Capacity::default());
        world.insert_resource(cache::holdings::Holdings::default());
        world.insert_resource(cache::numa::NumaState::default());
        world.insert_resource(numa::node::HardwareCache::default());
        let mut schedule = Schedule::default();
        schedule.set_executor(SingleThreadedExecutor::new());
        schedule.add_systems(
            (
                ingest::ingest,
                restore::adopt,
                health::check_silence,
                lost::lost,
                invalidate::invalidate,
                discovery::discovery,
                reindex::reindex,
                cache::refresh::refresh_capacity,
                cache::refresh::refresh_numa,
                recover::recover,
                allocate::allocate,
                dispatch::dispatch,
                dispatch::relaunch,
                retire::retire,
                ownership::count_live,
                persist::persist.run_if(resource_exists::<persist::Persisting>),
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

    pub fn index(&self) -> &TopologyIndex {
        self.world.resource::<TopologyIndex>()
    }
}

mod dispatch;
