//! `[fairshare]` and `[priority]`: how usage is counted and how a pending job's place in
//! the walk is worked out (the multifactor formula of the README, after Slurm's).
//!
//! ```toml
//! [fairshare]
//! halfLife = "7d"                                # usage halves every 7 days
//! weights = { cpu = 1, "nvidia.com/gpu" = 100 }  # per core-second, GPU-second, GiB-second of memory
//! tree = "queues"                                # or "accounts": Slurm's Fair Tree over [[account]]
//!
//! [priority]
//! weightPriority = 1       # points per unit of the job's own `priority`
//! weightFairshare = 10000  # points for a fair-share factor of 1
//! weightAge = 10000        # points for waiting maxAge or longer
//! weightSize = 0           # points for asking the whole cluster (negative favours small jobs)
//! maxAge = "2d"
//! recalcInterval = "1m"    # how often every pending job's factors are worked out again
//! ```

use std::collections::BTreeMap;

use hyperplan_shared::timelimit::parse_time_limit;
use serde::Deserialize;
use toml::Spanned;

use super::{Accounts, ConfigError};

/// Which tree the fair-share factor of a user is worked out over (`[fairshare] tree`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FairshareTree {
    /// Slurm's classic factor per (queue, user): `2^(-usage/share)` among the queue's
    /// users (`tree = "queues"`, the default).
    #[default]
    Queues,
    /// Slurm's Fair Tree over the `[[account]]` tree: every (account, user) association
    /// ranked by level fair share (`tree = "accounts"`; see `fairshare::tree`).
    Accounts,
}

/// How usage is counted and decays.
#[derive(Clone, Debug, PartialEq)]
pub struct FairshareConfig {
    /// Seconds for usage to halve.
    pub half_life: u64,
    /// Usage per second per unit of each resource (a core, a GiB of memory, one of any
    /// other); resources not named count nothing.
    pub weights: BTreeMap<String, f64>,
    /// Which tree a user's factor comes from.
    pub tree: FairshareTree,
}

impl Default for FairshareConfig {
    fn default() -> Self {
        Self {
            half_life: 7 * 86_400,
            weights: [
                (hyperplan_shared::CPU.to_string(), 1.0),
                ("nvidia.com/gpu".to_string(), 100.0),
            ]
            .into_iter()
            .collect(),
            tree: FairshareTree::Queues,
        }
    }
}

/// The multifactor weights. By default fair share and age weigh the same, and age is
/// full after two days: a light user goes ahead of a heavy one, but not for ever (on the
/// KTH SP2 log a week-long age let heavy users' wide jobs wait four days; see
/// `benches/README.md`).
#[derive(Clone, Debug, PartialEq)]
pub struct PriorityConfig {
    /// Points per unit of the job's `priority`.
    pub weight_priority: f64,
    /// Points for a fair-share factor of 1.
    pub weight_fairshare: f64,
    /// Points for an age of `max_age` or more.
    pub weight_age: f64,
    /// Points for asking the whole cluster's CPUs (negative: small jobs first).
    pub weight_size: f64,
    /// Seconds of waiting after which age counts fully.
    pub max_age: u64,
    /// Seconds between two recalculations of every pending job's factors.
    pub recalc_interval: u64,
}

impl Default for PriorityConfig {
    fn default() -> Self {
        Self {
            weight_priority: 1.0,
            weight_fairshare: 10_000.0,
            weight_age: 10_000.0,
            weight_size: 0.0,
            max_age: 2 * 86_400,
            recalc_interval: 60,
        }
    }
}

/// `[fairshare]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FairshareSection {
    half_life: Option<Spanned<toml::Value>>,
    weights: Option<BTreeMap<String, Spanned<f64>>>,
    tree: Option<Spanned<String>>,
}

/// `[priority]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PrioritySection {
    weight_priority: Option<Spanned<f64>>,
    weight_fairshare: Option<Spanned<f64>>,
    weight_age: Option<Spanned<f64>>,
    weight_size: Option<Spanned<f64>>,
    max_age: Option<Spanned<toml::Value>>,
    recalc_interval: Option<Spanned<toml::Value>>,
}

/// A duration key (`"7d"`, `3600`) in seconds.
pub(crate) fn duration(
    v: &Spanned<toml::Value>,
    key: &str,
    at: &dyn Fn(usize, String) -> ConfigError,
) -> Result<u64, ConfigError> {
    let text = match v.get_ref() {
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::String(s) => s.clone(),
        other => other.type_str().to_string(),
    };
    parse_time_limit(&text).map_err(|e| at(v.span().start, format!("{key}: {e}")))
}

/// As [`duration`], where 0 (`0` or `"0"`) is allowed too.
pub(crate) fn duration_or_zero(
    v: &Spanned<toml::Value>,
    key: &str,
    at: &dyn Fn(usize, String) -> ConfigError,
) -> Result<u64, ConfigError> {
    match v.get_ref() {
        toml::Value::Integer(0) => Ok(0),
        toml::Value::String(s) if s.trim() == "0" => Ok(0),
        _ => duration(v, key, at),
    }
}

/// A weight: a finite number within ±1e9.
fn weight(
    v: &Spanned<f64>,
    key: &str,
    signed: bool,
    at: &dyn Fn(usize, String) -> ConfigError,
) -> Result<f64, ConfigError> {
    let w = *v.get_ref();
    let lo = if signed { -1e9 } else { 0.0 };
    if w.is_finite() && (lo..=1e9).contains(&w) {
        Ok(w)
    } else {
        Err(at(
            v.span().start,
            format!("{key}: expected a number from {lo} to 1000000000, got {w}"),
        ))
    }
}

impl FairshareConfig {
    /// Checks `[fairshare]`; `accounts` are the `[[account]]` sections, checked (`tree =
    /// "accounts"` needs some).
    pub fn from_section(
        s: Option<&FairshareSection>,
        accounts: &Accounts,
        at: &dyn Fn(usize, String) -> ConfigError,
    ) -> Result<Self, ConfigError> {
        let mut c = Self::default();
        let Some(s) = s else { return Ok(c) };
        if let Some(v) = &s.half_life {
            c.half_life = duration(v, "fairshare.halfLife", at)?;
        }
        if let Some(w) = &s.weights {
            c.weights = w
                .iter()
                .map(|(k, v)| Ok((k.clone(), weight(v, &format!("fairshare.weights.{k}"), false, at)?)))
                .collect::<Result<_, ConfigError>>()?;
        }
        if let Some(t) = &s.tree {
            c.tree = match t.get_ref().as_str() {
                "queues" => FairshareTree::Queues,
                "accounts" if accounts.is_empty() => {
                    return Err(at(
                        t.span().start,
                        "fairshare.tree: \"accounts\" ranks users over the [[account]] tree, and there is no [[account]]; add [[account]] sections or use tree = \"queues\"".to_string(),
                    ));
                }
                "accounts" => FairshareTree::Accounts,
                other => {
                    return Err(at(
                        t.span().start,
                        format!("fairshare.tree: expected \"queues\" or \"accounts\", got {other:?}"),
                    ));
                }
            };
        }
        Ok(c)
    }
}

impl PriorityConfig {
    /// Checks `[priority]`.
    pub fn from_section(
        s: Option<&PrioritySection>,
        at: &dyn Fn(usize, String) -> ConfigError,
    ) -> Result<Self, ConfigError> {
        let mut c = Self::default();
        let Some(s) = s else { return Ok(c) };
        if let Some(v) = &s.weight_priority {
            c.weight_priority = weight(v, "priority.weightPriority", false, at)?;
        }
        if let Some(v) = &s.weight_fairshare {
            c.weight_fairshare = weight(v, "priority.weightFairshare", false, at)?;
        }
        if let Some(v) = &s.weight_age {
            c.weight_age = weight(v, "priority.weightAge", false, at)?;
        }
        if let Some(v) = &s.weight_size {
            c.weight_size = weight(v, "priority.weightSize", true, at)?;
        }
        if let Some(v) = &s.max_age {
            c.max_age = duration(v, "priority.maxAge", at)?;
        }
        if let Some(v) = &s.recalc_interval {
            c.recalc_interval = duration(v, "priority.recalcInterval", at)?;
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::FairshareTree;
    use crate::config::PlannerConfig;

    fn error(text: &str) -> String {
        PlannerConfig::parse(text, "planner.toml").unwrap_err().to_string()
    }

    #[test]
    fn the_tree_is_queues_unless_accounts_is_asked_with_accounts() {
        let tree = |text: &str| PlannerConfig::parse(text, "planner.toml").unwrap().fairshare.tree;
        assert_eq!(tree(""), FairshareTree::Queues);
        assert_eq!(tree("[fairshare]\ntree = \"queues\"\n"), FairshareTree::Queues);
        assert_eq!(
            tree("[[account]]\nname = \"a\"\n[fairshare]\ntree = \"accounts\"\n"),
            FairshareTree::Accounts
        );
    }

    #[test]
    fn an_unknown_tree_or_accounts_without_any_is_refused() {
        insta::assert_snapshot!(error("[fairshare]\ntree = \"users\"\n"), @r#"planner.toml:2:8: fairshare.tree: expected "queues" or "accounts", got "users""#);
        insta::assert_snapshot!(error("[fairshare]\nhalfLife = \"1d\"\ntree = \"accounts\"\n"), @r#"planner.toml:3:8: fairshare.tree: "accounts" ranks users over the [[account]] tree, and there is no [[account]]; add [[account]] sections or use tree = "queues""#);
    }
}
