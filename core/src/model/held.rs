//! [`Held`]: who holds a job (`hyperplan hold`, `submit --hold`), kept in its
//! [`StateRecord`](super::jobstate::StateRecord) so a hold survives a restart and an
//! admin's hold stays one its owner cannot release (see `jobs::holds`).

use bevy_ecs::prelude::Resource;
use serde::{Deserialize, Serialize};

/// What the walk knows of the jobs that wait (held, or before their begin time).
#[derive(Resource, Debug, Default)]
pub struct Waiting {
    /// Counts up each time a waiting job may be tried again (released, or its begin
    /// time came): preemption, which looks again only when something changed, looks then.
    pub unheld: u64,
    /// The earliest begin time (Unix seconds) a pending job not held waits for: a tick
    /// is due then (`Planner::next_deadline`), with no event to prompt it.
    pub next_begin: Option<u64>,
    /// The earliest time (Unix seconds) an `after:JOB+MINUTES` dependency will hold, or
    /// a hard topology turns soft (`softAfter`): a tick is due then too (see
    /// `jobs::gates`).
    pub next_dependency: Option<u64>,
}

/// Who holds a job: an admin's hold only an admin may release.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Held {
    /// The user who held it (its owner when submitted held).
    pub by: String,
    /// They held it as an admin.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub admin: bool,
}
