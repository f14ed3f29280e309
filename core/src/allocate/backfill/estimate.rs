//! How long backfill takes a job to run. By default its time limit, an upper bound: a
//! task past it is ended `timeout`. With `[scheduler] estimates = "history"`, the mean
//! of its owner's last two runtimes, capped by the limit (Tsafrir, Etsion and Feitelson,
//! "Backfilling using system-generated predictions rather than user runtime estimates",
//! IEEE TPDS 18(6), 2007): users ask for far more time than they use, and a backfill
//! that trusts the requests keeps holes open it could fill.
//!
//! An estimate is for planning only (when reservations start, which jobs fit in front of
//! them); it never ends a job. A running job past its estimate is counted at its time
//! limit again from then on (`model::runtimes::Overruns` tells the walk, whose reservations are then
//! worked out again): its reservations move later, the jobs started in front of them stay.

use crate::config::scheduler::Estimates;
use crate::model::ids::UserIdx;
use crate::model::runtimes::RuntimeHistory;

/// How long backfill expects a job of `user` with time limit `limit` to run: the limit,
/// or under [`Estimates::History`] the prediction capped by it (at least a second). A
/// job without a limit has no end to plan with, whatever its owner's history.
pub fn expected_run(
    mode: Estimates,
    history: &RuntimeHistory,
    user: Option<UserIdx>,
    limit: Option<u64>,
) -> Option<u64> {
    let limit = limit?;
    match mode {
        Estimates::Limit => Some(limit),
        Estimates::History => Some(
            user.and_then(|u| history.predict(u))
                .map_or(limit, |p| p.clamp(1, limit)),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_capped_by_the_limit_or_the_limit() {
        let mut h = RuntimeHistory::default();
        let u = UserIdx(3);
        assert_eq!(
            expected_run(Estimates::History, &h, Some(u), Some(100)),
            Some(100),
            "no history: the limit"
        );
        h.record(u, 10);
        assert_eq!(expected_run(Estimates::History, &h, Some(u), Some(100)), Some(10));
        assert_eq!(expected_run(Estimates::Limit, &h, Some(u), Some(100)), Some(100));
        assert_eq!(expected_run(Estimates::History, &h, Some(u), None), None);
        h.record(u, 500);
        assert_eq!(
            expected_run(Estimates::History, &h, Some(u), Some(100)),
            Some(100),
            "capped"
        );
        h.record(u, 0);
        h.record(u, 0);
        assert_eq!(
            expected_run(Estimates::History, &h, Some(u), Some(100)),
            Some(1),
            "at least a second"
        );
    }
}
