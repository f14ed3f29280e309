//! `[limits]`: how much one submission and one user may ask of the planner, and how much of
//! the jobs that ended it keeps in memory. Every task is an entity and a row in every status
//! reply, so an unbounded `replicas`, an endless stream of jobs from one user, or a history
//! never let go of would grow the planner's memory (and its replies) without bound; these
//! caps refuse such a submission with an error that names the key, and let the oldest
//! ended jobs go (they stay in the store, for `status --all`, until `[store] keepFinished`).
//!
//! ```toml
//! [limits]
//! maxTasksPerJob = 100000       # tasks (replicas summed over a job's tasks) in one job
//! maxJobsPerUser = 10000        # jobs one user may have that have not ended
//! maxEndedJobsPerUser = 1000    # ended jobs of one user kept in memory, the newest
//! maxEndedTasks = 1000000       # tasks of the ended jobs kept in memory, all users together
//! ```

use serde::Deserialize;

use super::ConfigError;

/// The caps the core checks at submit (`ownership::check_submission`), and those on the
/// ended jobs it keeps in memory (`jobs::forget`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitsConfig {
    /// Largest number of tasks in one job.
    pub max_tasks_per_job: u64,
    /// Most jobs one user may have that have not ended (pending, running, ending, or
    /// rejected for the cluster of now and looked at again when it changes).
    pub max_jobs_per_user: u64,
    /// Most ended jobs (finished, failed, cancelled, rejected for good) of one user kept in
    /// memory, where `status` and `logs` find them: the newest. One user's history cannot
    /// push everyone else's out.
    pub max_ended_jobs_per_user: u64,
    /// Most tasks of the ended jobs kept in memory, all users together (a job with no
    /// task counts one): what bounds the memory history takes, whatever the jobs' sizes.
    pub max_ended_tasks: u64,
    /// Seconds after its end an ended job leaves memory: the daemon's `[store]
    /// keepFinished` (not a `[limits]` key), so memory keeps no job the store let go;
    /// `None` (the simulator, tests): no time limit.
    pub keep_ended_secs: Option<u64>,
    /// The longest grace a cancel may give a job's tasks (seconds): a task that traps
    /// SIGTERM holds its nodes this long after a cancel, no longer.
    pub max_cancel_grace: u64,
}

impl LimitsConfig {
    /// `maxTasksPerJob` when `[limits]` does not set it.
    pub const DEFAULT_MAX_TASKS_PER_JOB: u64 = 100_000;
    /// `maxJobsPerUser` when `[limits]` does not set it.
    pub const DEFAULT_MAX_JOBS_PER_USER: u64 = 10_000;
    /// `maxEndedJobsPerUser` when `[limits]` does not set it: a day of a busy user's jobs.
    pub const DEFAULT_MAX_ENDED_JOBS_PER_USER: u64 = 1_000;
    /// `maxEndedTasks` when `[limits]` does not set it: some hundreds of MB of tasks.
    pub const DEFAULT_MAX_ENDED_TASKS: u64 = 1_000_000;
    /// `maxCancelGrace` when not set: ten minutes.
    pub const DEFAULT_MAX_CANCEL_GRACE: u64 = 600;
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_tasks_per_job: Self::DEFAULT_MAX_TASKS_PER_JOB,
            max_jobs_per_user: Self::DEFAULT_MAX_JOBS_PER_USER,
            max_ended_jobs_per_user: Self::DEFAULT_MAX_ENDED_JOBS_PER_USER,
            max_ended_tasks: Self::DEFAULT_MAX_ENDED_TASKS,
            keep_ended_secs: None,
            max_cancel_grace: Self::DEFAULT_MAX_CANCEL_GRACE,
        }
    }
}

/// `[limits]` as written, with where each value starts.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LimitsSection {
    /// `maxTasksPerJob`; None: the default.
    pub max_tasks_per_job: Option<toml::Spanned<i64>>,
    /// `maxJobsPerUser`; None: the default.
    pub max_jobs_per_user: Option<toml::Spanned<i64>>,
    /// `maxEndedJobsPerUser`; None: the default.
    pub max_ended_jobs_per_user: Option<toml::Spanned<i64>>,
    /// `maxEndedTasks`; None: the default.
    pub max_ended_tasks: Option<toml::Spanned<i64>>,
    /// `maxCancelGrace`; None: the default.
    pub max_cancel_grace: Option<toml::Spanned<toml::Value>>,
}

impl LimitsConfig {
    /// Checks `[limits]`; `at` turns an offset and a message into an error naming the line.
    pub fn from_section(
        section: Option<&LimitsSection>,
        at: &dyn Fn(usize, String) -> ConfigError,
    ) -> Result<Self, ConfigError> {
        let mut limits = Self::default();
        let Some(s) = section else { return Ok(limits) };
        let positive = |v: &toml::Spanned<i64>, key: &str| {
            u64::try_from(*v.get_ref()).ok().filter(|&n| n > 0).ok_or_else(|| {
                at(
                    v.span().start,
                    format!("limits.{key}: expected a whole number ≥ 1, got {}", v.get_ref()),
                )
            })
        };
        if let Some(v) = &s.max_tasks_per_job {
            limits.max_tasks_per_job = positive(v, "maxTasksPerJob")?;
        }
        if let Some(v) = &s.max_jobs_per_user {
            limits.max_jobs_per_user = positive(v, "maxJobsPerUser")?;
        }
        if let Some(v) = &s.max_ended_jobs_per_user {
            limits.max_ended_jobs_per_user = positive(v, "maxEndedJobsPerUser")?;
        }
        if let Some(v) = &s.max_ended_tasks {
            limits.max_ended_tasks = positive(v, "maxEndedTasks")?;
        }
        if let Some(v) = &s.max_cancel_grace {
            limits.max_cancel_grace = super::fairshare::duration_or_zero(v, "limits.maxCancelGrace", at)?;
        }
        Ok(limits)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use crate::config::PlannerConfig;

    use super::*;

    #[test]
    fn defaults_keys_and_bad_values() {
        assert_eq!(
            PlannerConfig::parse("", "p.toml").unwrap().limits,
            LimitsConfig::default()
        );
        let c = PlannerConfig::parse(
            "[limits]\nmaxTasksPerJob = 10\nmaxJobsPerUser = 2\nmaxCancelGrace = \"1m\"\n",
            "p.toml",
        )
        .unwrap();
        assert_eq!(
            c.limits,
            LimitsConfig {
                max_tasks_per_job: 10,
                max_jobs_per_user: 2,
                max_cancel_grace: 60,
                ..LimitsConfig::default()
            }
        );
        let e = PlannerConfig::parse("[limits]\nmaxJobsPerUser = 0\n", "p.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "p.toml:2:18: limits.maxJobsPerUser: expected a whole number ≥ 1, got 0"
        );
        assert!(PlannerConfig::parse("[limits]\nmaxTasks = 1\n", "p.toml").is_err());
    }

    #[test]
    fn ended_jobs_kept_in_memory_have_their_keys() {
        let c = PlannerConfig::parse("[limits]\nmaxEndedJobsPerUser = 3\nmaxEndedTasks = 40\n", "p.toml").unwrap();
        assert_eq!(
            (
                c.limits.max_ended_jobs_per_user,
                c.limits.max_ended_tasks,
                c.limits.keep_ended_secs
            ),
            (3, 40, None)
        );
        let e = PlannerConfig::parse("[limits]\nmaxEndedTasks = -1\n", "p.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "p.toml:2:17: limits.maxEndedTasks: expected a whole number ≥ 1, got -1"
        );
    }
}
