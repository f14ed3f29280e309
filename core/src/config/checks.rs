//! `[health]`: what the planner does with the results of the agents' health checks. A
//! failed check drains its node ("drained by health"); such a node returns by itself
//! once every check has passed for `returnAfter`. An admin's drain is never undone by
//! health.
//!
//! ```toml
//! [health]
//! returnAfter = "10m"  # every check passing this long: a node drained by health returns
//! ```

use serde::Deserialize;

use super::ConfigError;

/// The planner's health-check settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChecksConfig {
    /// Seconds every check of a node drained by health must pass before it takes work
    /// again (a flapping port must stay up this long).
    pub return_after: u64,
}

impl ChecksConfig {
    /// `returnAfter` when `[health]` does not set it: ten minutes, longer than a port's
    /// usual flap and shorter than an admin's patience.
    pub const DEFAULT_RETURN_AFTER: u64 = 600;
}

impl Default for ChecksConfig {
    fn default() -> Self {
        Self {
            return_after: Self::DEFAULT_RETURN_AFTER,
        }
    }
}

/// `[health]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChecksSection {
    /// `returnAfter` (`"10m"`, seconds; 0: at once); None: the default.
    pub return_after: Option<toml::Spanned<toml::Value>>,
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
}
