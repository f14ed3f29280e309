//! Processes of tasks the planner no longer counts (orphans): a task its planner declared
//! lost (its node came back, or was drained `--now`), or one a restarted planner never
//! knew, still runs on its node until the Kill its agent gets ends it. Its CPUs, memory
//! and GPUs are not free while it lives, so a node whose agent lists one carries
//! [`Strays`] and offers nothing new (as a drained node), until its agent lists none.

use bevy_ecs::prelude::*;

/// On a node entity whose agent runs tasks the planner does not have running there:
/// how many, and the first by name (`job/task`), for `hyperplan nodes` and the log.
#[derive(Component, Clone, Debug, PartialEq, Eq)]
pub struct Strays {
    /// Orphan tasks its agent listed last.
    pub count: u32,
    /// The first of them, `job.id/task`.
    pub first: String,
}
