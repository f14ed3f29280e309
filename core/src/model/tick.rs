//! Small ECS resources that connect a tick to its driver: events in, commands out, `now`.

use bevy_ecs::prelude::Resource;

use crate::model::commands::Command;
use crate::model::events::Event;

/// Events queued since the last tick, applied by `ingest`.
#[derive(Debug, Default, Resource)]
pub struct Inbox(pub Vec<Event>);

/// Commands produced by this tick, drained by the driver.
#[derive(Debug, Default, Resource)]
pub struct Outbox(pub Vec<Command>);

/// The tick's time: Unix milliseconds, given by the driver (the core never reads a
/// clock). The core's one time type: node health needs sub-second time (agents may
/// heartbeat every 0.3 s, and on a whole-second clock a node heard 10 ms ago would look
/// a second silent when the second rolls over); job times are shown in whole seconds,
/// [`Now::secs`].
#[derive(Debug, Default, Clone, Copy, Resource)]
pub struct Now {
    /// Unix milliseconds.
    pub ms: u64,
}

impl Now {
    /// Whole Unix seconds (job and task times in reports and records).
    pub fn secs(self) -> u64 {
        self.ms / 1000
    }
}

/// Set when nodes or HyperNodes change: the topology index must be rebuilt.
#[derive(Debug, Default, Resource)]
pub struct TopologyDirty(pub bool);

/// Bumped whenever a node appears, changes its hardware or goes: discovery sources
/// filter their hosts and map HCA GUIDs against the node set of one generation.
#[derive(Debug, Default, Clone, Copy, Resource)]
pub struct NodeSetGeneration(pub u64);

/// Label discovery configuration (type → label keys, top first).
#[derive(Debug, Default, Resource)]
pub struct LabelTypes(pub std::collections::BTreeMap<String, Vec<String>>);

/// Whether the `nvlink` source makes HyperNodes of the NVLink domains agents report (on
/// unless planner.toml turns it off: nodes without a multi-node domain make none).
#[derive(Resource, Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvlinkDiscovery(pub bool);

impl Default for NvlinkDiscovery {
    fn default() -> Self {
        Self(true)
    }
}

/// Bumped whenever capacity may have grown (a task finished, a job was cancelled, a node
/// or HyperNode changed). Within one epoch free capacity only shrinks, so a job that
/// could not be placed need not be searched again until the epoch moves.
#[derive(Debug, Default, Clone, Copy, Resource)]
pub struct CapacityEpoch(pub u64);

/// Nodes whose agent registered this tick: `dispatch::relaunch` sends the `Launch` of
/// their unstarted tasks again at the end of it.
#[derive(Debug, Default, Resource)]
pub struct Reregistered(pub Vec<String>);

/// Waiting jobs with a nomination (`StateRecord::nomination`): the nodes a preemption
/// freed, held for them by the walk. Kept by `preempt` (and filled by `restore`, so a
/// restarted planner holds what the store kept), read by `allocate`; a job that no longer
/// waits, or whose nomination went, drops out when they next look.
#[derive(Debug, Default, Resource)]
pub struct Nominated {
    /// The jobs.
    pub jobs: std::collections::BTreeSet<bevy_ecs::entity::Entity>,
}

/// Running jobs with lost tasks waiting to start again (`onNodeLost: replace`): added by
/// the lifecycle when a task is lost, tried by `allocate` in the same tick, and settled by
/// `jobs::replace` (started again, or the job requeued or failed) right after it.
#[derive(Debug, Default, Resource)]
pub struct Replacements {
    /// The jobs.
    pub jobs: std::collections::BTreeSet<bevy_ecs::entity::Entity>,
}
