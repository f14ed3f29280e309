//! `[scheduler]`: how the allocate walk orders and backfills. Without reservations the
//! walk is greedy (any job that fits starts, and wide jobs can starve behind narrow ones);
//! with them the first blocked jobs in order each hold the earliest room one HyperNode of
//! their tier will have, and later jobs start only where they cannot delay it.
//!
//! A job that has waited longer than `starvation`, or whose expansion factor, (wait +
//! time limit) ÷ time limit, has reached `starvationFactor`, starves: it goes first,
//! whatever its priority, oldest first, so the reservations go to the starving jobs first
//! (Maui's reservation depth by wait; the factor is the selective reservation of
//! Srinivasan, Kettimuthu, Subramani and Sadayappan, JSSPP 2002: a short job earns its
//! reservation after a short wait, a long one after a long wait, and `starvation` bounds
//! them all). Fair share and priorities reorder the queue, but never starve a job.
//!
//! Backfill plans with each job's time limit, or with `estimates = "history"` with the
//! mean of its owner's last two runtimes capped by the limit (never to end a job; see
//! `allocate::backfill::estimate`).
//!
//! With `keepReservations` (on by default), a job given a reservation keeps it until it
//! starts: it goes first among the jobs of its queue priority and class, so a job with a
//! better score (fair share, age, size) that comes later waits for the next reservation
//! instead of taking this one (Maui's `RESERVATIONPOLICY HIGHEST`). A job of a higher
//! queue or class still goes first. Off (Maui's `CURRENTHIGHEST`): the reservation goes
//! to whichever blocked job is first now, and may pass from job to job as fair share
//! moves.
//!
//! Once the reservations are made, the jobs after them are tried in `backfillOrder`:
//! the walk's order (`"priority"`), shortest expected run first (`"shortest"`, SJBF), or
//! largest expansion factor first (`"xfactor"`, the default: (wait + expected run) ÷
//! expected run, so a short job that waited goes early and a long one catches up as it
//! waits). Jobs waiting past `starvation` stay first in every order. Fair share decides
//! who gets the reservations; who fills the holes around them goes by the wait and the
//! run.
//!
//! ```toml
//! [scheduler]
//! reservations = 1    # blocked jobs, in order, that get a reservation (0 = greedy)
//! starvation = "6h"   # after this long waiting a job goes first, oldest first (0 = never)
//! starvationFactor = 3  # or once (wait + limit) ÷ limit reaches this (0 = never)
//! estimates = "limit" # how long backfill takes a job to run: "limit" or "history"
//! backfillOrder = "xfactor"   # after the reservations: "xfactor", "shortest" or "priority"
//! keepReservations = true     # a job keeps its reservation until it starts
//! ```

use serde::Deserialize;

use super::ConfigError;

/// The scheduler's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// How many blocked jobs, first in order, get a reservation (Slurm's `bf_max_job_test`
    /// idea, Volcano has none); 0 turns backfill off: the walk is greedy.
    pub reservations: u32,
    /// Seconds a job may wait (since it was submitted, or its begin time) before it goes
    /// first in the walk, whatever its priority; 0: never.
    pub starvation: u64,
    /// Hundredths: a job whose (wait + time limit) ÷ time limit reaches this starves too
    /// (300 = 3.0); 0: never. Kept whole so that every comparison is exact.
    pub starvation_factor: u32,
    /// How long backfill takes a job to run.
    pub estimates: Estimates,
    /// In which order the jobs after the reservations are tried.
    pub backfill_order: BackfillOrder,
    /// Whether a job given a reservation keeps it (and its place) until it starts.
    pub keep_reservations: bool,
}

/// In which order the walk tries the jobs after the reservations are made
/// (`[scheduler] backfillOrder`; see `allocate::backfill::order`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackfillOrder {
    /// The walk's order: queue priority, fair share, age (`"priority"`).
    Priority,
    /// Shortest expected run first (`"shortest"`, SJBF).
    Shortest,
    /// Largest expansion factor first: (wait + expected run) ÷ expected run (`"xfactor"`,
    /// the default: chosen on the policy table of five logs, `benches/README.md`).
    #[default]
    Xfactor,
}

/// How long backfill takes a job to run (`[scheduler] estimates`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Estimates {
    /// Its time limit: an upper bound (`"limit"`).
    #[default]
    Limit,
    /// The mean of its owner's last two runtimes, capped by the limit (`"history"`).
    History,
}

impl SchedulerConfig {
    /// `reservations` when `[scheduler]` does not set it.
    pub const DEFAULT_RESERVATIONS: u32 = 1;
    /// `starvation` when `[scheduler]` does not set it: six hours, chosen on the policy
    /// table of five logs (`benches/README.md`): the longest waits nearest EASY's.
    pub const DEFAULT_STARVATION: u64 = 6 * 3_600;
    /// `starvationFactor` (hundredths) when `[scheduler]` does not set it: 3, chosen on
    /// the same table (`benches/README.md`, issue 42's seventh step).
    pub const DEFAULT_STARVATION_FACTOR: u32 = 300;
    /// The largest `starvationFactor` taken (hundredths).
    pub const MAX_STARVATION_FACTOR: u32 = 100_000;
    /// `keepReservations` when `[scheduler]` does not set it.
    pub const DEFAULT_KEEP_RESERVATIONS: bool = true;
    /// More would make a tick's reservations cost more than the jobs they protect gain.
    pub const MAX_RESERVATIONS: u32 = 1024;
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            reservations: Self::DEFAULT_RESERVATIONS,
            starvation: Self::DEFAULT_STARVATION,
            starvation_factor: Self::DEFAULT_STARVATION_FACTOR,
            estimates: Estimates::default(),
            backfill_order: BackfillOrder::default(),
            keep_reservations: Self::DEFAULT_KEEP_RESERVATIONS,
        }
    }
}

/// `[scheduler]` as written, with where each value starts.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SchedulerSection {
    /// `reservations`; None: the default.
    pub reservations: Option<toml::Spanned<i64>>,
    /// `starvation` (`"1d"`, `"12h"`, seconds; 0: never); None: the default.
    pub starvation: Option<toml::Spanned<toml::Value>>,
    /// `starvationFactor` (a number above 1, or 0: never); None: the default.
    pub starvation_factor: Option<toml::Spanned<toml::Value>>,
    /// `estimates` (`"limit"` or `"history"`); None: the default.
    pub estimates: Option<toml::Spanned<String>>,
    /// `backfillOrder` (`"priority"`, `"shortest"` or `"xfactor"`); None: the default.
    pub backfill_order: Option<toml::Spanned<String>>,
    /// `keepReservations`; None: the default.
    pub keep_reservations: Option<toml::Spanned<toml::Value>>,
}

impl SchedulerConfig {
    /// Checks `[scheduler]`; `at` turns an offset and a message into an error naming the line.
    pub fn from_section(
        section: Option<&SchedulerSection>,
        at: &dyn Fn(usize, String) -> ConfigError,
    ) -> Result<Self, ConfigError> {
        let mut config = Self::default();
        let Some(s) = section else { return Ok(config) };
        if let Some(v) = &s.reservations {
            config.reservations = u32::try_from(*v.get_ref())
                .ok()
                .filter(|&n| n <= Self::MAX_RESERVATIONS)
                .ok_or_else(|| {
                    at(
                        v.span().start,
                        format!(
                            "scheduler.reservations: expected a whole number from 0 (greedy, no backfill) to {}, got {}",
                            Self::MAX_RESERVATIONS,
                            v.get_ref()
                        ),
                    )
                })?;
        }
        if let Some(v) = &s.starvation {
            config.starvation = super::fairshare::duration_or_zero(v, "scheduler.starvation", at)?;
        }
        if let Some(v) = &s.starvation_factor {
            let n = match v.get_ref() {
                toml::Value::Integer(i) => Some(*i as f64),
                toml::Value::Float(f) => Some(*f),
                _ => None,
            };
            let max = f64::from(Self::MAX_STARVATION_FACTOR) / 100.0;
            config.starvation_factor = n
                .filter(|n| *n == 0.0 || (*n > 1.0 && *n <= max))
                .map(|n| (n * 100.0).round() as u32)
                .ok_or_else(|| {
                    at(
                        v.span().start,
                        format!(
                            "scheduler.starvationFactor: expected 0 (never) or a number above 1 and at most {max} ((wait + time limit) ÷ time limit), got {}",
                            match v.get_ref() {
                                toml::Value::Integer(i) => i.to_string(),
                                toml::Value::Float(f) => f.to_string(),
                                other => super::scoring::shown(other),
                            }
                        ),
                    )
                })?;
        }
        if let Some(v) = &s.estimates {
            config.estimates = match v.get_ref().as_str() {
                "limit" => Estimates::Limit,
                "history" => Estimates::History,
                other => {
                    return Err(at(
                        v.span().start,
                        format!(
                            "scheduler.estimates: expected \"limit\" (each job's time limit) or \"history\" (its owner's last two runtimes, capped by the limit), got {other:?}"
                        ),
                    ));
                }
            };
        }
        if let Some(v) = &s.keep_reservations {
            config.keep_reservations = match v.get_ref() {
                toml::Value::Boolean(b) => *b,
                other => {
                    return Err(at(
                        v.span().start,
                        format!(
                            "scheduler.keepReservations: expected true or false, got {}",
                            super::scoring::shown(other)
                        ),
                    ));
                }
            };
        }
        if let Some(v) = &s.backfill_order {
            config.backfill_order = match v.get_ref().as_str() {
                "priority" => BackfillOrder::Priority,
                "shortest" => BackfillOrder::Shortest,
                "xfactor" => BackfillOrder::Xfactor,
                other => {
                    return Err(at(
                        v.span().start,
                        format!(
                            "scheduler.backfillOrder: expected \"priority\" (the queue's order), \"shortest\" (shortest expected run first) or \"xfactor\" (largest (wait + run) ÷ run first), got {other:?}"
                        ),
                    ));
                }
            };
        }
        Ok(config)
    }

    /// Whether a job eligible since `eligible` (Unix seconds), with time limit `limit`,
    /// starves at `now`: it waited `starvation`, or its expansion factor reached
    /// `starvationFactor` (a job without a limit has none).
    pub fn starves(&self, eligible: u64, limit: Option<u64>, now: u64) -> bool {
        let waited = now.saturating_sub(eligible);
        if self.starvation > 0 && waited >= self.starvation {
            return true;
        }
        let factor = u128::from(self.starvation_factor);
        factor > 0
            && limit.is_some_and(|l| {
                let l = u128::from(l.max(1));
                (u128::from(waited) + l) * 100 >= factor * l
            })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::BackfillOrder;
    use crate::config::PlannerConfig;

    #[test]
    fn estimates_are_the_limit_by_default_or_history() {
        use crate::config::scheduler::Estimates;
        let s = PlannerConfig::parse("", "p.toml").unwrap().scheduler;
        assert_eq!(s.estimates, Estimates::Limit);
        let s = PlannerConfig::parse("[scheduler]\nestimates = \"history\"\n", "p.toml")
            .unwrap()
            .scheduler;
        assert_eq!(s.estimates, Estimates::History);
        let e = PlannerConfig::parse("[scheduler]\nestimates = \"guess\"\n", "p.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "p.toml:2:13: scheduler.estimates: expected \"limit\" (each job's time limit) or \"history\" (its owner's last two runtimes, capped by the limit), got \"guess\""
        );
    }

    #[test]
    fn default_value_and_bad_values() {
        assert_eq!(PlannerConfig::parse("", "p.toml").unwrap().scheduler.reservations, 1);
        let c = PlannerConfig::parse("[scheduler]\nreservations = 0\n", "p.toml").unwrap();
        assert_eq!(c.scheduler.reservations, 0);
        let e = PlannerConfig::parse("[scheduler]\nreservations = -1\n", "p.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "p.toml:2:16: scheduler.reservations: expected a whole number from 0 (greedy, no backfill) to 1024, got -1"
        );
        assert!(PlannerConfig::parse("[scheduler]\nreserve = 1\n", "p.toml").is_err());
    }

    #[test]
    fn starvation_is_a_duration_six_hours_by_default_and_0_turns_it_off() {
        let s = PlannerConfig::parse("", "p.toml").unwrap().scheduler;
        assert_eq!(s.starvation, 21_600);
        assert!(s.starves(100, None, 100 + 21_600) && !s.starves(100, None, 100 + 21_599));
        let s = PlannerConfig::parse("[scheduler]\nstarvation = \"12h\"\n", "p.toml")
            .unwrap()
            .scheduler;
        assert_eq!(s.starvation, 12 * 3600);
        let s = PlannerConfig::parse("[scheduler]\nstarvation = 0\n", "p.toml")
            .unwrap()
            .scheduler;
        assert!(!s.starves(0, None, u64::MAX), "0: never");
        let e = PlannerConfig::parse("[scheduler]\nstarvation = \"soon\"\n", "p.toml").unwrap_err();
        assert!(e.to_string().starts_with("p.toml:2:14: scheduler.starvation: "), "{e}");
    }

    #[test]
    fn the_starvation_factor_is_3_by_default_0_turns_it_off() {
        let s = PlannerConfig::parse("", "p.toml").unwrap().scheduler;
        assert_eq!(s.starvation_factor, 300);
        // A 100 s job starves once it waited 200 s: (200 + 100) ÷ 100 = 3.
        assert!(s.starves(0, Some(100), 200) && !s.starves(0, Some(100), 199));
        // A 10 h job would at 20 h; six hours come first.
        assert!(s.starves(0, Some(36_000), 21_600) && !s.starves(0, Some(36_000), 21_599));
        assert!(!s.starves(0, None, 21_599), "no limit, no factor");
        let s = PlannerConfig::parse("[scheduler]\nstarvationFactor = 1.5\nstarvation = 0\n", "p.toml")
            .unwrap()
            .scheduler;
        assert_eq!(s.starvation_factor, 150);
        assert!(s.starves(0, Some(100), 50) && !s.starves(0, Some(100), 49));
        let s = PlannerConfig::parse("[scheduler]\nstarvationFactor = 0\nstarvation = 0\n", "p.toml")
            .unwrap()
            .scheduler;
        assert!(!s.starves(0, Some(1), u64::MAX), "0 and 0: never");
        for (bad, shown) in [
            ("1", "1"),
            ("0.5", "0.5"),
            ("-2", "-2"),
            ("1e9", "1000000000"),
            ("\"3\"", "\"3\""),
        ] {
            let e = PlannerConfig::parse(&format!("[scheduler]\nstarvationFactor = {bad}\n"), "p.toml").unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "p.toml:2:20: scheduler.starvationFactor: expected 0 (never) or a number above 1 and at most 1000 ((wait + time limit) ÷ time limit), got {shown}"
                ),
            );
        }
    }

    #[test]
    fn backfill_order_xfactor_by_default_and_bad_values_named() {
        let s = PlannerConfig::parse("", "p.toml").unwrap().scheduler;
        assert_eq!(s.backfill_order, BackfillOrder::Xfactor);
        for (text, want) in [
            ("shortest", BackfillOrder::Shortest),
            ("xfactor", BackfillOrder::Xfactor),
            ("priority", BackfillOrder::Priority),
        ] {
            let c = PlannerConfig::parse(&format!("[scheduler]\nbackfillOrder = \"{text}\"\n"), "p.toml").unwrap();
            assert_eq!(c.scheduler.backfill_order, want);
        }
        let e = PlannerConfig::parse("[scheduler]\nbackfillOrder = \"sjbf\"\n", "p.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "p.toml:2:17: scheduler.backfillOrder: expected \"priority\" (the queue's order), \"shortest\" (shortest expected run first) or \"xfactor\" (largest (wait + run) ÷ run first), got \"sjbf\""
        );
    }
}
