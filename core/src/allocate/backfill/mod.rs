//! Backfill with topology-aware reservations (EASY backfill, Lifka 1995, made to respect
//! the fabric). The allocate walk goes through jobs in order; the first
//! `[scheduler] reservations` jobs that cannot start each get a [`Reservation`]: the
//! earliest time at which the real placement search finds room for the whole gang, inside
//! ONE HyperNode of a tier its topology allows, counting running tasks as ending at
//! start + time limit ([`timeline`]). A later job may start now only where it cannot
//! delay any of them: every reservation that begins before the job's time limit would end
//! holds its resources while the job is tried ([`active`]). A job whose reservation is due
//! and finds no room that way is looked at more closely: its room is counted at the time
//! each of those reservations begins, tasks ending before then gone
//! ([`reserve::start_in_time`]).
//!
//! The jobs after the reservations are tried in `[scheduler] backfillOrder` ([`order`]).
//!
//! Reservations are recomputed only when room may have grown (a task ended, nodes
//! changed), a holder left the pending jobs, or a job arrived ahead of a reserved one;
//! otherwise they stand, so a submit behind them costs one search. A recomputed
//! reservation keeps its nodes when they still hold it at the same time ([`reserve`]), so
//! one job moving does not push another back.

pub mod active;
pub mod estimate;
pub mod maintenance;
pub mod order;
pub mod reserve;
pub mod timeline;

use bevy_ecs::prelude::*;

use crate::cache::holdings::Held;
use crate::model::ids::HnIdx;
use crate::order::OrderKey;

/// Room held for a blocked job from `start` until `end`.
#[derive(Clone, Debug)]
pub struct Reservation {
    /// The job it is for; `Entity::PLACEHOLDER` for a maintenance window.
    pub job: Entity,
    /// The job's place in the walk's order (its order key), to tell whether a job that
    /// arrives later goes ahead of it.
    pub key: OrderKey,
    /// When the job is expected to start (Unix seconds).
    pub start: u64,
    /// When it would end at the latest (start + time limit); `None` without a limit.
    pub end: Option<u64>,
    /// The lowest HyperNode holding every reserved node (`None`: the whole cluster).
    pub hyper_node: Option<HnIdx>,
    /// What each of its pending tasks would hold, in task order.
    pub held: Vec<Held>,
    /// The maintenance window's name, for one (`job` is then a placeholder).
    pub window: Option<String>,
    /// A job may use its room before it begins only if the job's time limit (not its
    /// runtime estimate) ends it first: maintenance windows, and the reservations of
    /// jobs waiting past `[scheduler] starvation`, which estimates that run over must
    /// not push back again and again.
    pub strict: bool,
}

/// The reservations of the last walk, in job order.
#[derive(Debug, Default, Resource)]
pub struct Reservations {
    /// The maintenance windows (`windows` of them, first), then the jobs' reservations
    /// in the order of their jobs.
    pub list: Vec<Reservation>,
    /// How many of `list` are maintenance windows.
    pub windows: usize,
    /// The topology generation the windows' names were last checked against.
    pub checked_windows: Option<u64>,
    /// Bumped every time the list is recomputed: a job that failed against the old list
    /// is tried again (see `allocate`'s room epoch).
    pub generation: u64,
    /// The capacity epoch, topology generation, order generation and maintenance
    /// windows closed that the list was computed against.
    pub basis: Option<crate::model::since::Since>,
}

impl Reservations {
    /// The reservation of `job`, if it has one.
    pub fn of(&self, job: Entity) -> Option<&Reservation> {
        self.list[self.windows.min(self.list.len())..]
            .iter()
            .find(|r| r.job == job)
    }
}
