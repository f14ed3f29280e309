//! Kubernetes-style quantities (`500m`, `1.5`, `128Gi`, `1.5G`) to and from base units.
//!
//! Parsing is exact: the number is read as a decimal (never through a float) and
//! scaled with integer arithmetic, so `0.1` CPU is exactly 100 millicores and a
//! quantity that is not a whole number of base units is an error rather than rounded.
//!
//! [`Resources`] is written and read here too (`Display`, serde, `cpu=16,memory=1Ti`
//! lists): this module builds on `resources`, which knows nothing of text.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use crate::resources::{CPU, MEMORY, Resources};
use crate::yaml::{Located, LocatedSeed};

/// A quantity or resource list that could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("expected {expected}, got {got:?}")]
    Invalid { expected: String, got: String },
    #[error("{got:?} is too large for {resource}")]
    TooLarge { resource: String, got: String },
    #[error("expected a resource list such as cpu=128,memory=1Ti,nvidia.com/gpu=8: {problem}")]
    List { problem: String },
}

/// What a valid quantity of `resource` looks like, for error messages.
fn expected_form(resource: &str) -> String {
    match resource {
        CPU => "a CPU quantity such as 16, 1.5 or 500m".to_string(),
        MEMORY => "a memory quantity such as 128Gi, 512Mi, 1.5G or 1073741824".to_string(),
        other => format!("a whole count of {other} such as 8"),
    }
}

/// Suffix → (numerator, denominator) multiplier.
fn suffix_factor(suffix: &str) -> Option<(u128, u128)> {
    let binary = |k: u32| Some((1u128 << (10 * k), 1));
    let decimal = |k: u32| Some((10u128.pow(3 * k), 1));
    match suffix {
        "" => Some((1, 1)),
        "m" => Some((1, 1000)),
        "Ki" => binary(1),
        "Mi" => binary(2),
        "Gi" => binary(3),
        "Ti" => binary(4),
        "Pi" => binary(5),
        "Ei" => binary(6),
        "k" | "K" => decimal(1),
        "M" => decimal(2),
        "G" => decimal(3),
        "T" => decimal(4),
        "P" => decimal(5),
        "E" => decimal(6),
        _ => None,
    }
}

/// Parses `text` as a quantity of `resource` and returns it in base units: millicores
/// for `cpu`, bytes for `memory`, whole units for anything else.
pub fn parse_quantity(resource: &str, text: &str) -> Result<u64, QuantityError> {
    let invalid = |expected: String| QuantityError::Invalid {
        expected,
        got: text.to_string(),
    };
    let s = text.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    let number_end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && frac.is_empty() || frac.contains('.') {
        return Err(invalid(expected_form(resource)));
    }
    let Some((num, den)) = suffix_factor(suffix) else {
        return Err(invalid(expected_form(resource)));
    };
    let too_large = || QuantityError::TooLarge {
        resource: resource.to_string(),
        got: text.to_string(),
    };
    // Trailing zeros of the fraction change nothing; dropping them keeps 10^len small.
    let frac = frac.trim_end_matches('0');
    let digits = format!("{whole}{frac}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 || frac.len() > 30 {
        return Err(too_large());
    }
    let mantissa: u128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| too_large())?
    };
    let unit: u128 = if resource == CPU { 1000 } else { 1 };
    let pow10 = |n: usize| u32::try_from(n).ok().and_then(|n| 10u128.checked_pow(n));
    let denominator = pow10(frac.len())
        .and_then(|p| p.checked_mul(den))
        .ok_or_else(too_large)?;
    let numerator = mantissa
        .checked_mul(num)
        .and_then(|v| v.checked_mul(unit))
        .ok_or_else(too_large)?;
    if numerator % denominator != 0 {
        return Err(invalid(match resource {
            CPU => "a CPU quantity in whole millicores (1m at the finest), such as 1.5 or 500m".to_string(),
            MEMORY => "a memory quantity of whole bytes, such as 1.5Gi or 512Mi".to_string(),
            other => format!("a whole count of {other} such as 8"),
        }));
    }
    u64::try_from(numerator / denominator).map_err(|_| too_large())
}

/// Formats a base-unit amount the way people write it: `16` or `500m` CPUs, memory
/// with the largest exact binary suffix (`128Gi`, else bytes), anything else plainly.
pub fn format_quantity(resource: &str, base: u64) -> String {
    match resource {
        CPU if base.is_multiple_of(1000) => (base / 1000).to_string(),
        CPU => format!("{base}m"),
        MEMORY if base > 0 => {
            for (k, suffix) in [(6u32, "Ei"), (5, "Pi"), (4, "Ti"), (3, "Gi"), (2, "Mi"), (1, "Ki")] {
                let unit = 1u64 << (10 * k);
                if base.is_multiple_of(unit) {
                    return format!("{}{suffix}", base / unit);
                }
            }
            base.to_string()
        }
        _ => base.to_string(),
    }
}

/// Parses a command-line resource list: `cpu=128,memory=1Ti,nvidia.com/gpu=8`.
pub fn parse_resource_list(s: &str) -> Result<Resources, QuantityError> {
    let mut out = Resources::new();
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((name, value)) = entry.split_once('=') else {
            return Err(QuantityError::List {
                problem: format!("{entry:?} has no `=`"),
            });
        };
        let name = name.trim();
        if name.is_empty() {
            return Err(QuantityError::List {
                problem: format!("{entry:?} has no resource name"),
            });
        }
        if out.0.contains_key(name) {
            return Err(QuantityError::List {
                problem: format!("{name:?} is given twice"),
            });
        }
        out.0.insert(name.to_string(), parse_quantity(name, value)?);
    }
    Ok(out)
}

/// Reads one quantity of a known resource from a YAML/JSON string or number.
pub(crate) struct QuantitySeed<'a>(pub &'a str);

impl<'de> DeserializeSeed<'de> for QuantitySeed<'_> {
    type Value = u64;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<u64, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for QuantitySeed<'_> {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&expected_form(self.0))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        parse_quantity(self.0, v).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        self.visit_str(&v.to_string())
    }

    /// Rust prints the shortest text that reads back as the same float, which for any
    /// quantity a person writes is the text they wrote.
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_unit<E: de::Error>(self) -> Result<u64, E> {
        self.visit_str("")
    }
}

/// Visits a resource map; `seed` turns (resource name) into the per-value seed.
struct ResourcesVisitor;

impl<'de> Visitor<'de> for ResourcesVisitor {
    type Value = Resources;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a mapping of resource names to quantities, such as {cpu: 16, memory: 128Gi}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Resources, A::Error> {
        let mut out = Resources::new();
        while let Some(name) = map.next_key::<String>()? {
            if name.trim().is_empty() {
                return Err(de::Error::custom(EMPTY_NAME));
            }
            let value = map.next_value_seed(QuantitySeed(&name))?;
            out.0.insert(name, value);
        }
        Ok(out)
    }

    /// `resources:` with nothing after it is an empty list.
    fn visit_unit<E: de::Error>(self) -> Result<Resources, E> {
        Ok(Resources::new())
    }
}

/// A resource map whose amounts remember where they were written, for checks that
/// point at one amount (`used` exceeding `resources`).
#[derive(Default)]
pub(crate) struct LocatedResources(pub std::collections::BTreeMap<String, Located<u64>>);

impl LocatedResources {
    pub(crate) fn to_resources(&self) -> Resources {
        Resources(self.0.iter().map(|(k, v)| (k.clone(), v.value)).collect())
    }
}

impl<'de> Deserialize<'de> for LocatedResources {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LocatedResources;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                ResourcesVisitor.expecting(f)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LocatedResources, A::Error> {
                let mut out = LocatedResources::default();
                while let Some(name) = map.next_key::<String>()? {
                    if name.trim().is_empty() {
                        return Err(de::Error::custom(EMPTY_NAME));
                    }
                    let value = map.next_value_seed(LocatedSeed(QuantitySeed(&name)))?;
                    out.0.insert(name, value);
                }
                Ok(out)
            }
            fn visit_unit<E: de::Error>(self) -> Result<LocatedResources, E> {
                Ok(LocatedResources::default())
            }
        }
        deserializer.deserialize_any(V)
    }
}

const EMPTY_NAME: &str = "expected a resource name such as cpu, got an empty key";

impl<'de> Deserialize<'de> for Resources {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ResourcesVisitor)
    }
}

impl fmt::Display for Resources {
    /// `cpu=16, memory=128Gi, nvidia.com/gpu=8`: the form people write.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (k, v) in &self.0 {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{k}={}", format_quantity(k, *v))?;
        }
        Ok(())
    }
}

impl Serialize for Resources {
    /// The human form (`128Gi`, `500m`), which reads back to the same amounts.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, &format_quantity(k, *v))?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(resource: &str, text: &str) -> u64 {
        match parse_quantity(resource, text) {
            Ok(v) => v,
            Err(e) => panic!("{resource}={text}: {e}"),
        }
    }

    fn err(resource: &str, text: &str) -> String {
        match parse_quantity(resource, text) {
            Ok(v) => panic!("{resource}={text} parsed as {v}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn cpu_forms() {
        assert_eq!(ok("cpu", "500m"), 500);
        assert_eq!(ok("cpu", "16"), 16_000);
        assert_eq!(ok("cpu", "1.5"), 1500);
        assert_eq!(ok("cpu", "0.25"), 250);
        assert_eq!(ok("cpu", ".5"), 500);
        assert_eq!(ok("cpu", "2."), 2000);
        assert_eq!(ok("cpu", "0.001"), 1);
        assert_eq!(ok("cpu", "1.500"), 1500);
        assert_eq!(ok("cpu", "0"), 0);
        assert_eq!(ok("cpu", " 4 "), 4000);
        assert_eq!(ok("cpu", "1k"), 1_000_000);
    }

    #[test]
    fn memory_forms() {
        assert_eq!(ok("memory", "1Ki"), 1024);
        assert_eq!(ok("memory", "128Gi"), 128 << 30);
        assert_eq!(ok("memory", "1Ti"), 1 << 40);
        assert_eq!(ok("memory", "1Pi"), 1 << 50);
        assert_eq!(ok("memory", "1Ei"), 1 << 60);
        assert_eq!(ok("memory", "1.5Gi"), 3 << 29);
        assert_eq!(ok("memory", "1.5G"), 1_500_000_000);
        assert_eq!(ok("memory", "1k"), 1000);
        assert_eq!(ok("memory", "1K"), 1000);
        assert_eq!(ok("memory", "2M"), 2_000_000);
        assert_eq!(ok("memory", "1T"), 1_000_000_000_000);
        assert_eq!(ok("memory", "1P"), 10u64.pow(15));
        assert_eq!(ok("memory", "1E"), 10u64.pow(18));
        assert_eq!(ok("memory", "1073741824"), 1 << 30);
        assert_eq!(ok("memory", "1000m"), 1);
    }

    #[test]
    fn other_resources() {
        assert_eq!(ok("nvidia.com/gpu", "8"), 8);
        assert_eq!(ok("nvidia.com/gpu", "2k"), 2000);
        assert_eq!(ok("nvidia.com/gpu", "1.0"), 1);
        assert!(err("nvidia.com/gpu", "1.5").contains("whole count of nvidia.com/gpu"));
    }

    #[test]
    fn errors() {
        assert_eq!(
            err("cpu", "-2"),
            r#"expected a CPU quantity such as 16, 1.5 or 500m, got "-2""#
        );
        assert!(err("cpu", "0.0001").contains("whole millicores"));
        assert!(err("cpu", "").starts_with("expected a CPU quantity"));
        assert!(err("cpu", "abc").starts_with("expected a CPU quantity"));
        assert!(err("cpu", "1.2.3").starts_with("expected a CPU quantity"));
        assert!(err("cpu", ".").starts_with("expected a CPU quantity"));
        assert!(err("memory", "1Gb").starts_with("expected a memory quantity"));
        assert!(err("memory", "1.5").contains("whole bytes"));
        assert!(err("memory", "1m").contains("whole bytes"));
        assert!(err("memory", "-1Gi").starts_with("expected a memory quantity"));
        assert!(err("memory", "99999999999999999999999Ei").contains("too large"));
        assert!(err("memory", "16Ei").contains("too large"));
        assert!(err("cpu", "18446744073709552").contains("too large"));
        assert!(err("gpu", "1e3").starts_with("expected a whole count of gpu"));
    }

    #[test]
    fn formatting() {
        assert_eq!(format_quantity("cpu", 16_000), "16");
        assert_eq!(format_quantity("cpu", 500), "500m");
        assert_eq!(format_quantity("cpu", 1500), "1500m");
        assert_eq!(format_quantity("memory", 128 << 30), "128Gi");
        assert_eq!(format_quantity("memory", 1 << 40), "1Ti");
        assert_eq!(format_quantity("memory", 1536), "1536");
        assert_eq!(format_quantity("memory", 3072), "3Ki");
        assert_eq!(format_quantity("memory", 1_500_000_000), "1500000000");
        assert_eq!(format_quantity("memory", 0), "0");
        assert_eq!(format_quantity("nvidia.com/gpu", 8), "8");
        for (r, v) in [("cpu", 1500u64), ("memory", 3 << 29), ("memory", 12345), ("gpu", 3)] {
            assert_eq!(ok(r, &format_quantity(r, v)), v);
        }
    }

    #[test]
    fn resource_lists() -> Result<(), QuantityError> {
        let r = parse_resource_list("cpu=128,memory=1Ti, nvidia.com/gpu=8")?;
        assert_eq!(r.get("cpu"), 128_000);
        assert_eq!(r.get("memory"), 1 << 40);
        assert_eq!(r.get("nvidia.com/gpu"), 8);
        assert!(parse_resource_list("cpu").is_err());
        assert!(parse_resource_list("=4").is_err());
        assert!(parse_resource_list("cpu=1,cpu=2").is_err());
        assert!(parse_resource_list("cpu=-1").is_err());
        Ok(())
    }

    #[test]
    fn json_numbers_and_strings() -> Result<(), serde_json::Error> {
        let r: Resources = serde_json::from_str(r#"{"cpu": 1.5, "memory": "2Gi", "gpu": 4}"#)?;
        assert_eq!(r.get("cpu"), 1500);
        assert_eq!(r.get("memory"), 2 << 30);
        assert_eq!(r.get("gpu"), 4);
        assert!(serde_json::from_str::<Resources>(r#"{"cpu": -1}"#).is_err());
        assert_eq!(
            serde_json::to_string(&r)?,
            r#"{"cpu":"1500m","gpu":"4","memory":"2Gi"}"#
        );
        Ok(())
    }
}
