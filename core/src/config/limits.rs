//! `[limits]`: how much one submission and one user may ask of the planner. Every task
//! is an entity and a row in every status reply, so an unbounded `replicas` or an
//! endless stream of jobs from one user would grow the planner's memory (and its replies)
//! without bound; these caps refuse such a submission with an error that names the key.
//!
//! ```toml
//! [limits]
//! maxTasksPerJob = 100000   # tasks (replicas summed over a job's tasks) in one job
//! maxJobsPerUser = 10000    # jobs one user may have that have not ended
//! ```

use serde::Deserialize;

use super::ConfigError;

/// The caps the core checks at submit (`ownership::check_submission`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitsConfig {
    /// Largest number of tasks in one job.
    pub max_tasks_per_job: u64,
    /// Most jobs one user may have that have not ended (pending or running).
    pub max_jobs_per_user: u64,
}

impl LimitsConfig {
    /// `maxTasksPerJob` when `[limits]` does not set it.
    pub const DEFAULT_MAX_TASKS_PER_JOB: u64 = 100_000;
    /// `maxJobsPerUser` when `[limits]` does not set it.
    pub const DEFAULT_MAX_JOBS_PER_USER: u64 = 10_000;
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_tasks_per_job: Self::DEFAULT_MAX_TASKS_PER_JOB,
            max_jobs_per_user: Self::DEFAULT_MAX_JOBS_PER_USER,
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
        let c = PlannerConfig::parse("[limits]\nmaxTasksPerJob = 10\nmaxJobsPerUser = 2\n", "p.toml").unwrap();
        assert_eq!(
            c.limits,
            LimitsConfig {
                max_tasks_per_job: 10,
                max_jobs_per_user: 2
            }
        );
        let e = PlannerConfig::parse("[limits]\nmaxJobsPerUser = 0\n", "p.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "p.toml:2:18: limits.maxJobsPerUser: expected a whole number ≥ 1, got 0"
        );
        assert!(PlannerConfig::parse("[limits]\nmaxTasks = 1\n", "p.toml").is_err());
    }
}
