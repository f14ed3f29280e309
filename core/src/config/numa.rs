//! `[numa]`: the numa-aware plugin's settings (kubelet topology-manager policies).
//!
//! ```toml
//! [numa]
//! defaultPolicy = "none"   # none | best-effort | restricted | single-numa-node
//! weight = 1               # numa-aware node score weight (Volcano's plugin weight)
//! ```

use serde::Deserialize;

use super::ConfigError;
use crate::numa::hints::Policy;

/// The numa-aware plugin's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct NumaConfig {
    /// For tasks that name no `topologyPolicy`.
    pub default_policy: Policy,
    /// Weight of the numa-aware node score (fewer NUMA nodes spanned scores higher).
    pub weight: f64,
}

impl Default for NumaConfig {
    fn default() -> Self {
        Self {
            default_policy: Policy::None,
            weight: 1.0,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
/// `[numa]` as written, with where each value starts.
pub struct NumaSection {
    /// `defaultPolicy`, a kubelet policy name; None: `none`.
    pub default_policy: Option<toml::Spanned<String>>,
    /// `weight`; None: 1.
    pub weight: Option<toml::Spanned<f64>>,
}

impl NumaConfig {
    /// Checks `[numa]`; `at` turns an offset and a message into an error naming the line.
    pub fn from_section(
        section: Option<&NumaSection>,
        at: &dyn Fn(usize, String) -> ConfigError,
    ) -> Result<Self, ConfigError> {
        let mut numa = NumaConfig::default();
        if let Some(n) = section {
            if let Some(p) = &n.default_policy {
                numa.default_policy = p.get_ref().parse().map_err(|e: crate::numa::hints::UnknownPolicy| {
                    at(p.span().start, format!("numa.defaultPolicy: {e}"))
                })?;
            }
            if let Some(w) = &n.weight {
                if w.get_ref().is_nan() || *w.get_ref() < 0.0 {
                    return Err(at(
                        w.span().start,
                        format!("numa.weight: expected a number ≥ 0, got {}", w.get_ref()),
                    ));
                }
                numa.weight = *w.get_ref();
            }
        }
        Ok(numa)
    }
}
