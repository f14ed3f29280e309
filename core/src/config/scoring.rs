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
//! ```
//!
//! `span` is ours, not Volcano's: with `"minimal"` (the default) a topology job gets, in
//! the lowest tier that can hold it, the HyperNode whose placement spans the fewest
//! leaves; `"volcano"` keeps Volcano's choice (best bin-pack score) exactly.
//!
//! Invalid values fall back to Volcano's defaults, as the plugin does (a negative
//! weight becomes 1, a negative fading 0.8, a non-bool `enable` is ignored).

use std::collections::BTreeMap;

use toml::Spanned;

use super::ConfigError;

/// `[scoring]` as written: Volcano's argument names are quoted keys, so a map.
pub type ScoringSection = BTreeMap<String, Spanned<toml::Value>>;

/// Volcano's network-topology-aware plugin arguments, resolved (§5.1 defaults).
#[derive(Clone, Debug, PartialEq)]
pub struct ScoringConfig {
    pub weight: f64,
    /// Bin-pack weight per resource name; only these resources ever score.
    pub binpack_weights: BTreeMap<String, f64>,
    pub normal_pod_enable: bool,
    pub normal_pod_fading: f64,
    /// How a topology job picks among the HyperNodes of its lowest feasible tier.
    pub span: SpanMode,
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

impl std::str::FromStr for SpanMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "minimal" => Ok(Self::Minimal),
            "volcano" => Ok(Self::Volcano),
            other => Err(format!("expected \"minimal\" or \"volcano\", got {other:?}")),
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
        }
    }
}

fn number(v: &toml::Value) -> Option<f64> {
    match v {
        toml::Value::Integer(i) => Some(*i as f64),
        toml::Value::Float(f) => Some(*f),
        toml::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A weight argument: missing or negative → `default`, as the plugin does.
fn weight_arg(args: &BTreeMap<String, toml::Value>, key: &str, default: f64) -> f64 {
    match args.get(key).and_then(number) {
        Some(w) if w >= 0.0 => w,
        _ => default,
    }
}

impl ScoringConfig {
    /// Resolves Volcano plugin arguments (string keys as in the plugin's `arguments`).
    pub fn from_args(args: &BTreeMap<String, toml::Value>) -> Self {
        let mut binpack_weights = BTreeMap::new();
        binpack_weights.insert(
            hyperplan_shared::CPU.to_string(),
            weight_arg(args, "hypernode.binpack.cpu", 1.0),
        );
        binpack_weights.insert(
            hyperplan_shared::MEMORY.to_string(),
            weight_arg(args, "hypernode.binpack.memory", 1.0),
        );
        if let Some(toml::Value::String(list)) = args.get("hypernode.binpack.resources") {
            for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                let key = format!("hypernode.binpack.resources.{name}");
                binpack_weights.insert(name.to_string(), weight_arg(args, &key, 1.0));
            }
        }
        let normal_pod_enable = match args.get("hypernode.binpack.normal-pod.enable") {
            Some(toml::Value::Boolean(b)) => *b,
            Some(toml::Value::String(s)) => s.parse().unwrap_or(true),
            _ => true,
        };
        let normal_pod_fading = match args.get("hypernode.binpack.normal-pod.fading").and_then(number) {
            Some(f) if f >= 0.0 => f,
            _ => 0.8,
        };
        Self {
            weight: weight_arg(args, "weight", 1.0),
            binpack_weights,
            normal_pod_enable,
            normal_pod_fading,
            span: SpanMode::default(),
        }
    }
}

impl ScoringConfig {
    /// Checks `[scoring]`; `at` turns an offset and a message into an error naming the line.
    pub fn from_section(
        section: &ScoringSection,
        at: &dyn Fn(usize, String) -> ConfigError,
    ) -> Result<Self, ConfigError> {
        let args: BTreeMap<String, toml::Value> =
            section.iter().map(|(k, v)| (k.clone(), v.get_ref().clone())).collect();
        let mut scoring = ScoringConfig::from_args(&args);
        if let Some(v) = section.get("span") {
            let mode = match v.get_ref() {
                toml::Value::String(s) => s.parse(),
                other => Err(format!("expected \"minimal\" or \"volcano\", got {}", other.type_str())),
            };
            scoring.span = mode.map_err(|e| at(v.span().start, format!("scoring.span: {e}")))?;
        }
        Ok(scoring)
    }
}
