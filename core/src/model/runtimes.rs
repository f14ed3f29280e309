//! What the core remembers of how long jobs ran, for backfill's runtime estimates
//! (`[scheduler] estimates = "history"`, see `allocate::backfill::estimate`): each user's
//! last two runtimes, and the running jobs that will pass their estimate before their
//! time limit.

use std::collections::BTreeSet;

use bevy_ecs::prelude::*;

use crate::model::ids::UserIdx;

/// Each user's last two runtimes (seconds), by dense user index.
#[derive(Debug, Default, Resource)]
pub struct RuntimeHistory {
    by_user: Vec<Recent>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Recent {
    last: Option<u64>,
    before: Option<u64>,
}

impl RuntimeHistory {
    /// A job of `user` ran for `secs`.
    pub fn record(&mut self, user: UserIdx, secs: u64) {
        let i = user.ix();
        if self.by_user.len() <= i {
            self.by_user.resize(i + 1, Recent::default());
        }
        let r = &mut self.by_user[i];
        r.before = r.last;
        r.last = Some(secs);
    }

    /// `user`'s last runtime and the one before, for the store; `None` before any.
    pub fn recent(&self, user: UserIdx) -> Option<(u64, Option<u64>)> {
        let r = self.by_user.get(user.ix())?;
        r.last.map(|last| (last, r.before))
    }

    /// Runtimes read back from the store (`last`, then `before`: older than anything
    /// recorded since the start). They fill in behind what this run recorded: a user with
    /// two runs since keeps them, one with one gets the stored last as the one before.
    pub fn restore(&mut self, user: UserIdx, last: u64, before: Option<u64>) {
        let i = user.ix();
        if self.by_user.len() <= i {
            self.by_user.resize(i + 1, Recent::default());
        }
        let r = &mut self.by_user[i];
        match (r.last, r.before) {
            (None, _) => {
                r.last = Some(last);
                r.before = before;
            }
            (Some(_), None) => r.before = Some(last),
            (Some(_), Some(_)) => {}
        }
    }

    /// The mean of `user`'s last two runtimes (rounded up; the last alone when there is
    /// one); `None` before any.
    pub fn predict(&self, user: UserIdx) -> Option<u64> {
        let r = self.by_user.get(user.ix())?;
        match (r.last, r.before) {
            (Some(a), Some(b)) => Some((a / 2 + b / 2) + (a % 2 + b % 2).div_ceil(2)),
            (Some(a), None) => Some(a),
            _ => None,
        }
    }
}

/// Running jobs that will pass their estimate before their limit, by when, and how many
/// have passed it so far (a counter in the walk's "nothing changed since" key).
#[derive(Debug, Default, Resource)]
pub struct Overruns {
    due: BTreeSet<(u64, Entity)>,
    /// Estimates passed so far.
    pub passed: u64,
}

impl Overruns {
    /// `job` started at `start`, expected to run `expected` of its `limit` seconds.
    pub fn started(&mut self, job: Entity, start: u64, expected: Option<u64>, limit: Option<u64>) {
        if let (Some(e), Some(l)) = (expected, limit)
            && e < l
        {
            self.due.insert((start.saturating_add(e), job));
        }
    }

    /// Counts the estimates passed by `now` of jobs `still_running` says run.
    pub fn settle(&mut self, now: u64, still_running: impl Fn(Entity) -> bool) {
        while let Some(&(at, job)) = self.due.first()
            && at <= now
        {
            self.due.pop_first();
            if still_running(job) {
                self.passed += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mean_of_the_last_two() {
        let mut h = RuntimeHistory::default();
        let u = UserIdx(3);
        assert_eq!(h.predict(u), None);
        h.record(u, 10);
        assert_eq!(h.predict(u), Some(10));
        h.record(u, 21);
        assert_eq!(h.predict(u), Some(16), "(10 + 21) / 2, rounded up");
        h.record(u, 500);
        assert_eq!(h.predict(u), Some(261), "the last two only");
        assert_eq!(h.predict(UserIdx(0)), None, "another user's history is not used");
    }

    #[test]
    fn restored_runtimes_fill_in_behind_what_ran_since() {
        let (a, b, c) = (UserIdx(0), UserIdx(1), UserIdx(2));
        let mut h = RuntimeHistory::default();
        h.record(b, 7);
        h.record(c, 8);
        h.record(c, 9);
        for u in [a, b, c] {
            h.restore(u, 100, Some(200));
        }
        assert_eq!(h.recent(a), Some((100, Some(200))), "nothing since: as stored");
        assert_eq!(
            h.recent(b),
            Some((7, Some(100))),
            "one since: the stored last before it"
        );
        assert_eq!(h.recent(c), Some((9, Some(8))), "two since: the store is older");
        assert_eq!(h.recent(UserIdx(5)), None);
    }

    #[test]
    fn overruns_count_jobs_still_running_past_their_estimate() {
        let mut o = Overruns::default();
        let mut world = World::new();
        let [a, b, c] = [(); 3].map(|_| world.spawn_empty().id());
        o.started(a, 100, Some(10), Some(50));
        o.started(b, 100, Some(20), Some(50));
        o.started(c, 100, Some(50), Some(50)); // at its limit: nothing to pass
        o.settle(115, |_| true);
        assert_eq!(o.passed, 1);
        o.settle(200, |e| e != b); // b ended in time
        assert_eq!(o.passed, 1);
    }
}
