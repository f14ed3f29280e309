//! `[scoring]`: the placement scores. It takes Volcano's
//! network-topology-aware plugin arguments under their own names, as quoted TOML keys:
//!
//! ```toml
//! [scoring]
//! weight = 1
//! "hypernode.binpack.cpu" = 5
//! "hypernode.binpack.memory" = 1
//! "hypernode.binpack.resources" = "nvidia.com/gpu"
//! "hypernode.binpack.resources.nvidia.com/gpu" = 2
//! "hypernode.binpack.normal-pod.enable" = true
//! "hypernode.binpack.normal-pod.fading" = 0.8
//! span = "minimal"   # or "volcano": see below
//! alignEnds = true
//! ```
//!
//! `span` is ours, not Volcano's: with `"minimal"` (the default) a topology job gets, in
//! the lowest tier that can hold it, the HyperNode whose placement spans the fewest
//! leaves; `"volcano"` keeps Volcano's choice (best bin-pack score) exactly. So is
//! `alignEnds` (default true): among those, before the bin-pack score, the one whose
//! running tasks' expected end the job pushes out least (`allocate::horizon`); chosen on
//! the policy table of five real logs (`benches/README.md`, issue 42).
//!
//! Where Volcano's plugin quietly falls back to a default (a negative weight becomes 1, a
//! negative fading 0.8, a non-bool `enable` is ignored), a planner.toml value out of range
//! is an error naming the key and line: a typo must not silently change placement.
//! Weights are numbers from 0 to 1,000 (a weight beyond that drowns every other score);
//! `fading` is from 0 to 1 (it discounts higher tiers); unknown keys are errors.

use std::collections::BTreeMap;

use toml::Spanned;

use super::ConfigError;

/// `[scoring]` as written: Volcano's argument names are quoted keys, so a map.
pub type ScoringSection = BTreeMap<String, Spanned<toml::Value>>;

/// Volcano's network-topology-aware plugin arguments, resolved (§5.1 defaults).
#[derive(Clone, Debug, PartialEq)]
pub struct ScoringConfig {
    /// The plugin's weight: how much its score counts against other scores (0 to 1,000).
    pub weight: f64,
    /// Bin-pack weight per resource name; only these resources ever score.
    pub binpack_weights: BTreeMap<String, f64>,
    /// Whether tasks of jobs without a network topology get the tier-fading score
    /// (`hypernode.binpack.normal-pod.enable`).
    pub normal_pod_enable: bool,
    /// Factor from 0 to 1 by which each tier up weighs less in that score
    /// (`hypernode.binpack.normal-pod.fading`).
    pub normal_pod_fading: f64,
    /// How a topology job picks among the HyperNodes of its lowest feasible tier.
    pub span: SpanMode,
    /// `alignEnds`: among the HyperNodes of a tier, a job goes where it pushes the end of
    /// the tasks running there out least (see `allocate::horizon`), before bin-pack.
    pub align_ends: bool,
}

/// `[scoring] span`: which HyperNode of the lowest tier that can hold a gang it gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SpanMode {
    /// The one whose placement spans the fewest leaves, then the tightest fit, then
    /// Volcano's bin-pack score, then name; tasks fill those leaves, most room first.
    #[default]
    Minimal,
    /// Volcano's order: best bin-pack score first, tasks by LCA score then node name.
    Volcano,
}

/// A `span` that is neither mode; `found` is what came, as the message shows it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("expected \"minimal\" or \"volcano\", got {found}")]
pub struct SpanModeError {
    /// The value given, quoted, or its TOML type when it is not a string.
    pub found: String,
}

impl std::str::FromStr for SpanMode {
    type Err = SpanModeError;
    fn from_str(s: &str) -> Result<Self, SpanModeError> {
        match s {
            "minimal" => Ok(Self::Minimal),
            "volcano" => Ok(Self::Volcano),
            other => Err(SpanModeError {
                found: format!("{other:?}"),
            }),
        }
    }
}

impl Default for ScoringConfig {
    fn default() -> Self {
        let mut binpack_weights = BTreeMap::new();
        binpack_weights.insert(hyperplan_shared::CPU.to_string(), 1.0);
        binpack_weights.insert(hyperplan_shared::MEMORY.to_string(), 1.0);
        Self {
            weight: 1.0,
            binpack_weights,
            normal_pod_enable: true,
            normal_pod_fading: 0.8,
            span: SpanMode::default(),
            align_ends: true,
        }
    }
}

/// The largest weight accepted: more than this drowns every other score.
pub const MAX_WEIGHT: f64 = 1000.0;

const WEIGHT_KEYS: [&str; 3] = ["weight", "hypernode.binpack.cpu", "hypernode.binpack.memory"];
const RESOURCES: &str = "hypernode.binpack.resources";
const ENABLE: &str = "hypernode.binpack.normal-pod.enable";
const FADING: &str = "hypernode.binpack.normal-pod.fading";
const SPAN: &str = "span";
const ALIGN_ENDS: &str = "alignEnds";

/// A number as TOML writes it, or as Volcano's string arguments do (`"0.8"`).
fn number(v: &toml::Value) -> Option<f64> {
    match v {
        toml::Value::Integer(i) => Some(*i as f64),
        toml::Value::Float(f) => Some(*f),
        toml::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A value outside `lo..=hi`, or no number at all; `found` as the message shows it.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("expected a number from {lo} to {hi}, got {found}")]
struct RangeError {
    lo: f64,
    hi: f64,
    found: String,
}

/// `v` as a number in `lo..=hi`, or what was expected.
fn ranged(v: &toml::Value, lo: f64, hi: f64) -> Result<f64, RangeError> {
    let found = match number(v) {
        Some(x) if x.is_finite() && (lo..=hi).contains(&x) => return Ok(x),
        Some(x) => compact(x),
        None => shown(v),
    };
    Err(RangeError { lo, hi, found })
}

/// Kubernetes-style resource names: `cpu`, `nvidia.com/gpu`, `example.org/fpga-x2`.
fn resource_name(name: &str) -> bool {
    name.len() <= 253
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '/'))
}

/// `1e308`, not three hundred digits.
fn compact(x: f64) -> String {
    if x == 0.0 || !x.is_finite() || (1e-3..1e15).contains(&x.abs()) {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}

/// A value as an error message shows it: a string quoted, anything else by its type.
pub(super) fn shown(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => format!("{s:?}"),
        other => other.type_str().to_string(),
    }
}

impl ScoringConfig {
    /// Checks `[scoring]`; `at` turns an offset and a message into an error naming the line.
    pub fn from_section(
        section: &ScoringSection,
        at: &dyn Fn(usize, String) -> ConfigError,
    ) -> Result<Self, ConfigError> {
        let err =
            |v: &Spanned<toml::Value>, key: &str, why: String| at(v.span().start, format!("scoring.{key:?}: {why}"));
        let mut scoring = ScoringConfig::default();
        // The extra resources first: their weight keys are only known from this list.
        let mut extra: Vec<String> = Vec::new();
        if let Some(v) = section.get(RESOURCES) {
            let toml::Value::String(list) = v.get_ref() else {
                return Err(err(
                    v,
                    RESOURCES,
                    format!(
                        "expected a comma-separated list of resource names, got {}",
                        shown(v.get_ref())
                    ),
                ));
            };
            for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                if !resource_name(name) {
                    return Err(err(
                        v,
                        RESOURCES,
                        format!("{name:?} is not a resource name (e.g. \"nvidia.com/gpu\")"),
                    ));
                }
                extra.push(name.to_string());
                scoring.binpack_weights.insert(name.to_string(), 1.0);
            }
        }
        for (key, v) in section {
            let key = key.as_str();
            if WEIGHT_KEYS.contains(&key) {
                let w = ranged(v.get_ref(), 0.0, MAX_WEIGHT).map_err(|e| err(v, key, e.to_string()))?;
                match key {
                    "weight" => scoring.weight = w,
                    "hypernode.binpack.cpu" => {
                        scoring.binpack_weights.insert(hyperplan_shared::CPU.to_string(), w);
                    }
                    _ => {
                        scoring.binpack_weights.insert(hyperplan_shared::MEMORY.to_string(), w);
                    }
                }
            } else if let Some(name) = key.strip_prefix("hypernode.binpack.resources.") {
                if !extra.iter().any(|e| e == name) {
                    return Err(err(
                        v,
                        key,
                        format!("{name:?} is not listed in {RESOURCES:?}; list it there to give it a weight"),
                    ));
                }
                let w = ranged(v.get_ref(), 0.0, MAX_WEIGHT).map_err(|e| err(v, key, e.to_string()))?;
                scoring.binpack_weights.insert(name.to_string(), w);
            } else if key == ENABLE {
                scoring.normal_pod_enable = match v.get_ref() {
                    toml::Value::Boolean(b) => *b,
                    toml::Value::String(s) if s == "true" || s == "false" => s == "true",
                    other => return Err(err(v, key, format!("expected true or false, got {}", shown(other)))),
                };
            } else if key == FADING {
                scoring.normal_pod_fading = ranged(v.get_ref(), 0.0, 1.0).map_err(|e| err(v, key, e.to_string()))?;
            } else if key == SPAN {
                let mode = match v.get_ref() {
                    toml::Value::String(s) => s.parse(),
                    other => Err(SpanModeError {
                        found: other.type_str().to_string(),
                    }),
                };
                scoring.span = mode.map_err(|e| at(v.span().start, format!("scoring.span: {e}")))?;
            } else if key == ALIGN_ENDS {
                scoring.align_ends = match v.get_ref() {
                    toml::Value::Boolean(b) => *b,
                    other => return Err(err(v, key, format!("expected true or false, got {}", shown(other)))),
                };
            } else if key != RESOURCES {
                return Err(err(
                    v,
                    key,
                    format!(
                        "unknown key; expected one of weight, hypernode.binpack.cpu, hypernode.binpack.memory, \
                         {RESOURCES}, {RESOURCES}.<name>, {ENABLE}, {FADING}, span, {ALIGN_ENDS}"
                    ),
                ));
            }
        }
        Ok(scoring)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::PlannerConfig;

    fn error(scoring: &str) -> String {
        PlannerConfig::parse(&format!("[scoring]\n{scoring}\n"), "planner.toml")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    /// Issue 12 item 9: what Volcano's plugin turns into a default silently is an error
    /// naming the key and line here.
    #[test]
    fn out_of_range_values_are_errors_naming_the_key() {
        let cases = [
            (
                "weight = -1e308",
                "planner.toml:2:10: scoring.\"weight\": expected a number from 0 to 1000, got -1e308",
            ),
            (
                "weight = nan",
                "scoring.\"weight\": expected a number from 0 to 1000, got NaN",
            ),
            (
                "weight = 1e9",
                "scoring.\"weight\": expected a number from 0 to 1000, got 1000000000",
            ),
            (
                "weight = \"heavy\"",
                "scoring.\"weight\": expected a number from 0 to 1000, got \"heavy\"",
            ),
            (
                "\"hypernode.binpack.cpu\" = -1",
                "scoring.\"hypernode.binpack.cpu\": expected a number from 0",
            ),
            (
                "\"hypernode.binpack.normal-pod.fading\" = 7",
                "scoring.\"hypernode.binpack.normal-pod.fading\": expected a number from 0 to 1, got 7",
            ),
            (
                "\"hypernode.binpack.normal-pod.fading\" = -0.5",
                "expected a number from 0 to 1, got -0.5",
            ),
            (
                "\"hypernode.binpack.normal-pod.enable\" = 7",
                "scoring.\"hypernode.binpack.normal-pod.enable\": expected true or false, got integer",
            ),
            (
                "\"hypernode.binpack.resources.nvidia.com/gpu\" = 2",
                "\"nvidia.com/gpu\" is not listed in \"hypernode.binpack.resources\"",
            ),
            (
                "\"hypernode.binpack.resources\" = \"gpu\\u001b[31m\"",
                "is not a resource name",
            ),
            (
                "\"hypernode.binpack.resources\" = 3",
                "expected a comma-separated list of resource names, got integer",
            ),
            ("weigth = 2", "scoring.\"weigth\": unknown key; expected one of weight,"),
        ];
        for (text, want) in cases {
            let got = error(text);
            assert!(got.contains(want), "{text}: {got}");
        }
    }

    #[test]
    fn the_edges_of_each_range_are_accepted() {
        let cfg = PlannerConfig::parse(
            "[scoring]\nweight = 1000\n\"hypernode.binpack.cpu\" = 0\n\"hypernode.binpack.normal-pod.fading\" = 1\n",
            "planner.toml",
        );
        let s = cfg.map(|c| c.scoring).map_err(|e| e.to_string());
        assert_eq!(
            s.as_ref()
                .map(|s| (s.weight, s.binpack_weights["cpu"], s.normal_pod_fading)),
            Ok((1000.0, 0.0, 1.0))
        );
    }
}
