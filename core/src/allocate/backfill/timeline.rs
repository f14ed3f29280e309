//! When running tasks will have given their resources back: each at its start plus its
//! job's time limit (a task past it is ended `timeout`, so that is an upper bound), or
//! plus its runtime estimate (`estimate`) until it runs past it. Tasks without a time limit never release in it, and a
//! task already past its limit is counted as releasing a second from now.

use bevy_ecs::prelude::*;

use crate::cache::holdings::{Held, Holdings};
use crate::model::components::{Job, JobState, Retired, Task, TaskState};

/// One running task's expected release.
#[derive(Clone, Debug)]
pub struct Release {
    /// When (Unix seconds).
    pub end: u64,
    /// What it holds.
    pub held: Held,
}

/// Running tasks' releases, built when the walk first needs a reservation and extended
/// by the tasks it starts after that.
#[derive(Debug, Default)]
pub struct Timeline {
    releases: Vec<Release>,
    sorted: bool,
    built: bool,
}

impl Timeline {
    /// Whether it was built in this walk.
    pub fn is_built(&self) -> bool {
        self.built
    }

    /// Fills it from every running task: `end` and what it holds.
    pub fn build(&mut self, releases: impl Iterator<Item = Release>) {
        self.releases.clear();
        self.releases.extend(releases);
        self.sorted = false;
        self.built = true;
    }

    /// A task started by the walk after the timeline was built.
    pub fn push(&mut self, release: Release) {
        if self.built {
            self.releases.push(release);
            self.sorted = false;
        }
    }

    /// The releases by end time (ties by node, so the sweep is the same on every run).
    pub fn sorted(&mut self) -> &[Release] {
        if !self.sorted {
            self.releases.sort_by_key(|r| (r.end, r.held.node));
            self.sorted = true;
        }
        &self.releases
    }
}

/// Every running task's release, from the ledger: at its start plus how long its job is
/// expected to run (`JobState::expected_run`: its time limit, or a runtime estimate; once
/// `now` is past the estimate, the limit again). A task without either never releases.
pub fn releases<'a>(
    holdings: &'a Holdings,
    tasks: &'a Query<(&'static Task, &'static mut TaskState)>,
    jobs: &'a Query<(Entity, &Job, &mut JobState), Without<Retired>>,
    now: u64,
) -> impl Iterator<Item = Release> + 'a {
    holdings.iter().filter_map(move |(e, held)| {
        let (task, ts) = tasks.get(e).ok()?;
        let (_, job, st) = jobs.get(task.job).ok()?;
        Some(Release {
            end: end_of(job, st, ts.start_time?, now)?,
            held: held.clone(),
        })
    })
}

/// When a task of `job` started at `start` is expected to end (see [`releases`]); `None`
/// without a time limit.
fn end_of(job: &Job, st: &JobState, start: u64, now: u64) -> Option<u64> {
    let limit = job.spec.run.time_limit?;
    let expected = st.expected_run.map_or(limit, |r| r.min(limit));
    Some(match start.saturating_add(expected) {
        end if end > now => end,
        _ => start.saturating_add(limit),
    })
}

/// Every running task's node and expected end, as [`releases`] has them, a task
/// without a time limit at `u64::MAX` (for `allocate::horizon`).
pub fn ends<'a>(
    holdings: &'a Holdings,
    tasks: &'a Query<(&'static Task, &'static mut TaskState)>,
    jobs: &'a Query<(Entity, &Job, &mut JobState), Without<Retired>>,
    now: u64,
) -> impl Iterator<Item = (crate::model::ids::NodeIdx, u64)> + 'a {
    holdings.iter().filter_map(move |(e, held)| {
        let (task, ts) = tasks.get(e).ok()?;
        let (_, job, st) = jobs.get(task.job).ok()?;
        let start = ts.start_time?;
        Some((held.node, end_of(job, st, start, now).unwrap_or(u64::MAX)))
    })
}
