//! `[preemption]` and `[[priorityClass]]`: who may preempt whom, and how victims go.
//!
//! ```toml
//! [preemption]
//! enabled = true        # pending jobs may preempt (victims only in preemptible queues)
//! grace = "30s"         # SIGTERM (or the job's preemptSignal) to SIGKILL, for jobs that give no preemptGrace
//! maxGrace = "10m"      # the longest preemptGrace a job may ask for (and `grace` may be)
//! maxPerTick = 4        # waiting jobs, first in order, that look for victims each tick
//!
//! [[priorityClass]]
//! name = "urgent"
//! value = 1000          # higher goes first, and may preempt lower (after queue priority)
//! preemptible = false   # its jobs are never victims
//! queues = ["gpu"]      # only jobs of these queues may name it (none: any queue)
//! ```
//!
//! A job names its class with `priorityClassName`; one that names none has value 0 and is
//! preemptible. A job may preempt another when the victim's queue is `preemptible`, its
//! class is too, and the victim's (queue priority, class value) is strictly lower; or,
//! reclaiming, when the victim's queue uses more than its quota and the job's queue would
//! stay within its own (see `preempt::eligible`).

use std::collections::BTreeMap;

use hyperplan_shared::names::{NameKind, check_name};
use serde::Deserialize;
use toml::Spanned;

use super::ConfigError;

/// One priority class, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PriorityClass {
    /// Its name (`priorityClassName` in a job).
    pub name: String,
    /// Higher goes first and may preempt lower.
    pub value: i32,
    /// Its jobs may be preempted (when their queue allows it too).
    pub preemptible: bool,
    /// Queues whose jobs may name it; empty: any.
    pub queues: Vec<String>,
}

/// `[preemption]`, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreemptionConfig {
    /// Waiting jobs look for victims.
    pub enabled: bool,
    /// Seconds from the warning signal to SIGKILL, for a job that gives no `preemptGrace`.
    pub grace: u64,
    /// The longest `preemptGrace` a job may ask for: a task that traps its warning may
    /// hold its nodes from the job it was preempted for this long, no longer.
    pub max_grace: u64,
    /// Waiting jobs, first in order, that look for victims in one tick.
    pub max_per_tick: u32,
    /// `[[priorityClass]]`, by name.
    pub classes: Vec<PriorityClass>,
}

impl PreemptionConfig {
    /// `grace` when `[preemption]` does not set it.
    pub const DEFAULT_GRACE: u64 = 30;
    /// `maxGrace` when not set: ten minutes, time for a large checkpoint.
    pub const DEFAULT_MAX_GRACE: u64 = 600;
    /// `maxPerTick` when not set.
    pub const DEFAULT_MAX_PER_TICK: u32 = 4;
    /// Most classes a planner keeps.
    pub const MAX_CLASSES: usize = 256;

    /// The class called `name`.
    pub fn class(&self, name: &str) -> Option<&PriorityClass> {
        self.classes
            .binary_search_by(|c| c.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.classes[i])
    }

    /// A job's (class value, preemptible) from its `priorityClassName`: (0, true) for
    /// none or a class no longer defined (a reload removed it).
    pub fn of(&self, name: Option<&str>) -> (i32, bool) {
        name.and_then(|n| self.class(n))
            .map_or((0, true), |c| (c.value, c.preemptible))
    }

    /// Why a job of `queue` may not name class `name`, or `None` when it may.
    pub fn refusal(&self, name: &str, queue: &str) -> Option<String> {
        match self.class(name) {
            None => Some(format!(
                "priorityClassName: no priority class {name:?} (known: {})",
                if self.classes.is_empty() {
                    "none; planner.toml defines them as [[priorityClass]]".to_string()
                } else {
                    self.classes
                        .iter()
                        .map(|c| c.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            )),
            Some(c) if !c.queues.is_empty() && !c.queues.iter().any(|q| q == queue) => Some(format!(
                "priorityClassName: class {name:?} is for jobs of queue{} {} only, not of {queue:?}",
                if c.queues.len() == 1 { "" } else { "s" },
                c.queues.join(", ")
            )),
            Some(_) => None,
        }
    }
}

impl Default for PreemptionConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            grace: Self::DEFAULT_GRACE,
            max_grace: Self::DEFAULT_MAX_GRACE,
            max_per_tick: Self::DEFAULT_MAX_PER_TICK,
            classes: Vec::new(),
        }
    }
}

/// `[preemption]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PreemptionSection {
    enabled: Option<bool>,
    grace: Option<Spanned<toml::Value>>,
    max_grace: Option<Spanned<toml::Value>>,
    max_per_tick: Option<Spanned<i64>>,
}

/// `[[priorityClass]]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PriorityClassSection {
    name: Spanned<String>,
    value: Spanned<i64>,
    #[serde(default = "yes")]
    preemptible: bool,
    #[serde(default)]
    queues: Vec<Spanned<String>>,
}

fn yes() -> bool {
    true
}

impl PreemptionConfig {
    /// Checks `[preemption]` and `[[priorityClass]]`; `at` turns an offset and a message
    /// into an error naming the line.
    pub fn from_sections(
        section: Option<&PreemptionSection>,
        classes: &[PriorityClassSection],
        at: &dyn Fn(usize, String) -> ConfigError,
    ) -> Result<Self, ConfigError> {
        let mut config = Self::default();
        if let Some(s) = section {
            if let Some(e) = s.enabled {
                config.enabled = e;
            }
            if let Some(g) = &s.max_grace {
                config.max_grace = super::fairshare::duration_or_zero(g, "preemption.maxGrace", at)?;
            }
            if let Some(g) = &s.grace {
                config.grace = super::fairshare::duration_or_zero(g, "preemption.grace", at)?;
                if config.grace > config.max_grace {
                    return Err(at(
                        g.span().start,
                        format!(
                            "preemption.grace: {} s is longer than preemption.maxGrace ({} s); raise maxGrace or shorten grace",
                            config.grace, config.max_grace
                        ),
                    ));
                }
            }
            config.grace = config.grace.min(config.max_grace);
            if let Some(m) = &s.max_per_tick {
                config.max_per_tick = u32::try_from(*m.get_ref())
                    .ok()
                    .filter(|n| (1..=1024).contains(n))
                    .ok_or_else(|| {
                        at(
                            m.span().start,
                            format!(
                                "preemption.maxPerTick: expected a whole number from 1 to 1024, got {}",
                                m.get_ref()
                            ),
                        )
                    })?;
            }
        }
        if classes.len() > Self::MAX_CLASSES {
            return Err(at(
                classes[Self::MAX_CLASSES].name.span().start,
                format!(
                    "priorityClass: expected at most {} [[priorityClass]] sections, got {}",
                    Self::MAX_CLASSES,
                    classes.len()
                ),
            ));
        }
        let mut by_name: BTreeMap<String, PriorityClass> = BTreeMap::new();
        for c in classes {
            let name = c.name.get_ref();
            check_name(NameKind::PriorityClass, name)
                .map_err(|e| at(c.name.span().start, format!("priorityClass.name: {e}")))?;
            if by_name.contains_key(name) {
                return Err(at(
                    c.name.span().start,
                    format!("priorityClass.name: {name:?} is defined twice; class names must be unique"),
                ));
            }
            let value = i32::try_from(*c.value.get_ref()).map_err(|_| {
                at(
                    c.value.span().start,
                    format!(
                        "priorityClass {name:?}: value: expected a whole number from {} to {}, got {}",
                        i32::MIN,
                        i32::MAX,
                        c.value.get_ref()
                    ),
                )
            })?;
            let mut queues = Vec::new();
            for q in &c.queues {
                check_name(NameKind::Queue, q.get_ref())
                    .map_err(|e| at(q.span().start, format!("priorityClass {name:?}: queues: {e}")))?;
                queues.push(q.get_ref().clone());
            }
            queues.sort();
            queues.dedup();
            by_name.insert(
                name.clone(),
                PriorityClass {
                    name: name.clone(),
                    value,
                    preemptible: c.preemptible,
                    queues,
                },
            );
        }
        config.classes = by_name.into_values().collect();
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use crate::config::PlannerConfig;

    #[test]
    fn classes_and_defaults() {
        let c = PlannerConfig::parse(
            "[preemption]\ngrace = \"2m\"\n[[priorityClass]]\nname = \"urgent\"\nvalue = 1000\npreemptible = false\nqueues = [\"gpu\"]\n[[priorityClass]]\nname = \"low\"\nvalue = -10\n",
            "planner.toml",
        )
        .unwrap();
        let p = &c.preemption;
        assert!(p.enabled);
        assert_eq!(p.grace, 120);
        assert_eq!(p.of(Some("urgent")), (1000, false));
        assert_eq!(p.of(Some("low")), (-10, true));
        assert_eq!(p.of(None), (0, true));
        assert_eq!(p.refusal("urgent", "gpu"), None);
        assert!(p.refusal("urgent", "cpu").unwrap().contains("queue gpu only"));
        assert!(p.refusal("nope", "cpu").unwrap().contains("known: low, urgent"));
        assert_eq!(PlannerConfig::default().preemption.grace, 30);
        assert_eq!(PlannerConfig::default().preemption.max_grace, 600);
        let short = PlannerConfig::parse("[preemption]\nmaxGrace = \"20s\"\n", "planner.toml").unwrap();
        assert_eq!((short.preemption.grace, short.preemption.max_grace), (20, 20));
    }

    #[test]
    fn bad_values_name_the_line() {
        let bad = [
            (
                "[[priorityClass]]\nname = \"a\"\nvalue = 1\n[[priorityClass]]\nname = \"a\"\nvalue = 2\n",
                "planner.toml:5:8: priorityClass.name: \"a\" is defined twice",
            ),
            (
                "[[priorityClass]]\nname = \"a\"\nvalue = 99999999999\n",
                "planner.toml:3:9: priorityClass \"a\": value: expected a whole number",
            ),
            (
                "[preemption]\nmaxPerTick = 0\n",
                "planner.toml:2:14: preemption.maxPerTick: expected a whole number from 1 to 1024, got 0",
            ),
            ("[preemption]\ngrace = \"soon\"\n", "planner.toml:2:9: preemption.grace"),
            (
                "[preemption]\nmaxGrace = \"1m\"\ngrace = \"2m\"\n",
                "planner.toml:3:9: preemption.grace: 120 s is longer than preemption.maxGrace (60 s)",
            ),
            ("[[priorityClass]]\nname = \"a\"\n", "missing field `value`"),
        ];
        for (text, want) in bad {
            let e = PlannerConfig::parse(text, "planner.toml").unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}
