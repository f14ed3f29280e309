//! `Resources`: a named list of quantities (`cpu`, `memory`, `nvidia.com/gpu`, ...).
//!
//! Every quantity is an integer in the resource's base unit: `cpu` in millicores
//! (`500m` = 500, `16` = 16000), `memory` in bytes, anything else in whole units.
//! Integers keep sums exact, so nothing is handed out twice through rounding.
//!
//! Only the numbers live here; how people write them (`Display`, serde, parsing) is in
//! [`crate::quantity`], which builds on this module and never the other way round.

use std::collections::BTreeMap;

/// The CPU resource; stored in millicores.
pub const CPU: &str = "cpu";
/// The memory resource; stored in bytes.
pub const MEMORY: &str = "memory";

/// A set of named quantities in base units (see the module docs). Sorted by name so
/// iteration and output are deterministic.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Resources(pub BTreeMap<String, u64>);

impl Resources {
    pub fn new() -> Self {
        Self::default()
    }

    /// Builder-style insert of a base-unit amount.
    pub fn with(mut self, name: &str, amount: u64) -> Self {
        self.0.insert(name.to_string(), amount);
        self
    }

    pub fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.0.values().all(|v| *v == 0)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// Adds `other` to `self`, saturating.
    pub fn add(&mut self, other: &Resources) {
        for (k, v) in &other.0 {
            let e = self.0.entry(k.clone()).or_insert(0);
            *e = e.saturating_add(*v);
        }
    }

    /// `self × n`, saturating.
    pub fn times(&self, n: u64) -> Resources {
        Resources(self.0.iter().map(|(k, v)| (k.clone(), v.saturating_mul(n))).collect())
    }
}
