//! hyperplan-core, the planner core: a bevy_ecs `World` and one ordered `Schedule`. No I/O and no clock:
//! drivers push [`Event`]s, call [`Planner::tick`] with `now`, and carry out the
//! [`Command`]s it returns. The daemon and the simulator drive the very same Schedule.
//! What decides anything lives here, not in a driver: node health (`health`), job
//! owners, job-name uniqueness and the priority cap (`ownership`), who sees which job
//! (`caller`), the job and task lifecycle the agents report (`lifecycle`: verdicts,
//! kills, orphans; `taskrun`: each task's run), lost nodes (`lost`).
//!
//! A tick: ingest (task starts, ends and cancels through `lifecycle`) → node health
//! (then lost nodes) → discovery → topology index → resource cache (capacity, then NUMA)
//! → recover → allocate (gradient search, scoring, NUMA assignment; each placement
//! recorded in the caches' ledger) → dispatch → retire the jobs that ended. Between
//! topology changes every system after the index works on what changed (see
//! `holdings`) and on live jobs (see `retire`), not on the whole cluster or its history.

pub mod config;
pub mod sim;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub mod allocate;
pub mod caller;
pub mod capacity;
pub mod checksum;
pub mod claim;
pub mod commands;
pub mod components;
pub mod discovery;
pub mod events;
pub mod health;
pub mod holdings;
pub mod ids;
pub(crate) mod ingest;
pub mod invariants;
pub mod journal;
pub mod lifecycle;
pub mod lost;
pub mod names;
pub mod numa;
pub mod ownership;
pub mod queues;
pub mod ratelimit;
mod recover;
pub mod refresh;
pub mod refusals;
mod reindex;
pub mod restore;
mod retire;
pub mod taskrun;
pub mod topology;
pub mod view;

use bevy_ecs::prelude::*;
use bevy_ecs::schedule::SingleThreadedExecutor;

pub use commands::{Command, Pinning, Placement};
pub use events::Event;

use capacity::Capacity;
pub use config::PlannerConfig;
use queues::{CapacityEpoch, Inbox, LabelTypes, NodeSetGeneration, Now, NowMillis, Outbox, TopologyDirty};
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
        world.insert_resource(NowMillis::default());
        world.insert_resource(CapacityEpoch::default());
        world.insert_resource(TopologyDirty(true));
        world.insert_resource(LabelTypes::default());
        world.insert_resource(names::JobNames::default());
        world.insert_resource(ownership::NextJobId::default());
        world.insert_resource(ownership::LiveByOwner::default());
        world.insert_resource(names::NodeNames::default());
        world.insert_resource(health::Away::default());
        world.insert_resource(refusals::Refusals::default());
        world.insert_resource(NodeSetGeneration::default());
        world.insert_resource(discovery::Sources::default());
        world.insert_resource(discovery::ReportedGuids::default());
        world.insert_resource(TopologyIndex::default());
        world.insert_resource(Capacity::default());
        world.insert_resource(holdings::Holdings::default());
        world.insert_resource(numa::state::NumaState::default());
        world.insert_resource(numa::node::HardwareCache::default());
        let mut schedule = Schedule::default();
        schedule.set_executor(SingleThreadedExecutor::new());
        schedule.add_systems(
            (
                ingest::ingest,
                health::check_silence,
                discovery::discovery,
                reindex::reindex,
                refresh::refresh_capacity,
                refresh::refresh_numa,
                recover::recover,
                allocate::allocate,
                dispatch::dispatch,
                retire::retire,
                ownership::count_live,
                journal::journal.run_if(resource_exists::<journal::Journal>),
            )
                .chain(),
        );
        Self { world, schedule }
    }

    /// Queues an event for the next tick.
    pub fn push(&mut self, event: Event) {
        self.world.resource_mut::<Inbox>().0.push(event);
    }

    /// Runs one tick at time `now` (seconds) and returns what the driver must do.
    pub fn tick(&mut self, now: u64) -> Vec<Command> {
        self.run(now, now.saturating_mul(1000))
    }

    /// As [`Planner::tick`], at `now_ms` milliseconds: for drivers whose nodes
    /// heartbeat, since node health needs sub-second time (see [`queues::NowMillis`]).
    pub fn tick_millis(&mut self, now_ms: u64) -> Vec<Command> {
        self.run(now_ms / 1000, now_ms)
    }

    fn run(&mut self, now: u64, now_ms: u64) -> Vec<Command> {
        let _span = tracing::info_span!("tick", now).entered();
        self.world.resource_mut::<Now>().0 = now;
        self.world.resource_mut::<NowMillis>().0 = now_ms;
        self.schedule.run(&mut self.world);
        std::mem::take(&mut self.world.resource_mut::<Outbox>().0)
    }

    pub fn world(&self) -> &World {
        &self.world
    }

    pub fn world_mut(&mut self) -> &mut World {
        &mut self.world
    }

    pub fn index(&self) -> &TopologyIndex {
        self.world.resource::<TopologyIndex>()
    }
}

mod dispatch;
