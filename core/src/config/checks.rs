//! `[health]`: what the planner does with the results of the agents' health checks. A
//! failed check drains its node ("drained by health"); such a node returns by itself
//! once every check has passed for `returnAfter`. An admin's drain is never undone by
//! health.
//!
//! A failed check whose code is in `endTasksOn` (a GPU that fell off the bus) also ends
//! the node's running tasks at once, as a lost node's: each job's `onNodeLost` decides
//! (replaced inside its HyperNode, requeued, or failed). Other failures let them run on.
//!
//! ```toml
//! [health]
//! returnAfter = "10m"          # every check passing this long: a node drained by health returns
//! endTasksOn = ["gpu-lost"]    # failed checks with these codes end the node's tasks now
//! ```

use serde::Deserialize;

use super::ConfigError;

/// The planner's health-check settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChecksConfig {
    /// Seconds every check of a node drained by health must pass before it takes work
    /// again (a flapping port must stay up this long).
    pub return_after: u64,
    /// Codes of failed checks that end the node's running tasks at once (sorted).
    pub end_tasks_on: Vec<String>,
}

impl ChecksConfig {
    /// `returnAfter` when `[health]` does not set it: ten minutes, longer than a port's
    /// usual flap and shorter than an admin's patience.
    pub const DEFAULT_RETURN_AFTER: u64 = 600;
    /// `endTasksOn` when `[health]` does not set it: a GPU gone from the bus, whose tasks
    /// cannot go on (their CUDA contexts are dead).
    pub const DEFAULT_END_TASKS_ON: &[&str] = &["gpu-lost"];

    /// Whether a failed check with `code` ends the node's running tasks.
    pub fn ends_tasks(&self, code: &str) -> bool {
        self.end_tasks_on.binary_search_by(|c| c.as_str().cmp(code)).is_ok()
    }
}

impl Default for ChecksConfig {
    fn default() -> Self {
        Self {
            return_after: Self::DEFAULT_RETURN_AFTER,
            end_tasks_on: Self::DEFAULT_END_TASKS_ON.iter().map(|c| c.to_string()).collect(),
        }
    }
}

/// `[health]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChecksSection {
    /// `returnAfter` (`"10m"`, seconds; 0: at once); None: the default.
    pub return_after: Option<toml::Spanned<toml::Value>>,
    /// `endTasksOn` (check codes); None: the default.
    pub end_tasks_on: Option<toml::Spanned<Vec<String>>>,
}

impl ChecksConfig {
    /// Checks `[health]`; `at` turns an offset and a message into an error naming the line.
    pub fn from_section(
        section: Option<&ChecksSection>,
        at: &dyn Fn(usize, String) -> ConfigError,
    ) -> Result<Self, ConfigError> {
        let mut config = Self::default();
        if let Some(v) = section.and_then(|s| s.return_after.as_ref()) {
            config.return_after = super::fairshare::duration_or_zero(v, "health.returnAfter", at)?;
        }
        if let Some(v) = section.and_then(|s| s.end_tasks_on.as_ref()) {
            let bad = v
                .get_ref()
                .iter()
                .find(|c| c.is_empty() || c.len() > 64 || !c.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '-'));
            if let Some(c) = bad {
                return Err(at(
                    v.span().start,
                    format!(
                        "health.endTasksOn: expected check codes such as \"gpu-lost\" (letters, digits and '-', at most 64), got {c:?}"
                    ),
                ));
            }
            let mut codes = v.get_ref().clone();
            codes.sort();
            codes.dedup();
            config.end_tasks_on = codes;
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use crate::config::PlannerConfig;

    #[test]
    fn return_after_is_a_duration_ten_minutes_by_default() {
        let c = PlannerConfig::parse("", "p.toml").unwrap();
        assert_eq!(c.checks.return_after, 600);
        let c = PlannerConfig::parse("[health]\nreturnAfter = \"1h\"\n", "p.toml").unwrap();
        assert_eq!(c.checks.return_after, 3600);
        let c = PlannerConfig::parse("[health]\nreturnAfter = 0\n", "p.toml").unwrap();
        assert_eq!(c.checks.return_after, 0);
        let e = PlannerConfig::parse("[health]\nreturnAfter = \"later\"\n", "p.toml").unwrap_err();
        assert!(e.to_string().starts_with("p.toml:2:15: health.returnAfter: "), "{e}");
        let e = PlannerConfig::parse("[health]\nretrunAfter = 5\n", "p.toml").unwrap_err();
        assert!(e.to_string().contains("retrunAfter"), "{e}");
    }

    #[test]
    fn end_tasks_on_is_a_list_of_codes_a_lost_gpu_by_default() {
        let c = PlannerConfig::parse("", "p.toml").unwrap();
        assert!(c.checks.ends_tasks("gpu-lost") && !c.checks.ends_tasks("ib-width"));
        let c = PlannerConfig::parse(
            "[health]\nendTasksOn = [\"script\", \"ib-down\", \"script\"]\n",
            "p.toml",
        )
        .unwrap();
        assert_eq!(c.checks.end_tasks_on, ["ib-down", "script"]);
        assert!(!c.checks.ends_tasks("gpu-lost"));
        let c = PlannerConfig::parse("[health]\nendTasksOn = []\n", "p.toml").unwrap();
        assert!(c.checks.end_tasks_on.is_empty());
        let e = PlannerConfig::parse("[health]\nendTasksOn = [\"gpu lost\"]\n", "p.toml").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("p.toml:2:14: health.endTasksOn: expected check codes"),
            "{e}"
        );
    }
}
