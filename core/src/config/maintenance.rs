//! `[[reservation]]`: planned maintenance (Slurm's maintenance reservations). While a
//! window is open its nodes run nothing, and before it opens a job may use them only if
//! its time limit ends it first; a job without a time limit never starts on them.
//!
//! ```toml
//! [[reservation]]
//! name = "rack3-firmware"
//! nodes = ["gpu-b01", "gpu-b02"]      # and/or
//! hyperNodes = ["leaf-3"]             # every node under these
//! start = "2026-12-01T08:00:00Z"      # RFC 3339 (Z or ±HH:MM), or Unix seconds
//! end = "2026-12-01T12:00:00Z"
//! ```

use serde::Deserialize;
use toml::Spanned;

use super::ConfigError;

/// One maintenance window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaintenanceWindow {
    /// Its name, for messages.
    pub name: String,
    /// Nodes it takes, by name.
    pub nodes: Vec<String>,
    /// HyperNodes whose nodes it takes.
    pub hyper_nodes: Vec<String>,
    /// When it opens (Unix seconds).
    pub start: u64,
    /// When it closes (Unix seconds), after `start`.
    pub end: u64,
}

/// `[[reservation]]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MaintenanceSection {
    name: Spanned<String>,
    #[serde(default)]
    nodes: Vec<String>,
    #[serde(default)]
    hyper_nodes: Vec<String>,
    start: Spanned<toml::Value>,
    end: Spanned<toml::Value>,
}

/// Checks the `[[reservation]]` sections.
pub fn windows_from_sections(
    sections: &[MaintenanceSection],
    at: &dyn Fn(usize, String) -> ConfigError,
) -> Result<Vec<MaintenanceWindow>, ConfigError> {
    let mut out: Vec<MaintenanceWindow> = Vec::new();
    for s in sections {
        let name = s.name.get_ref().clone();
        if out.iter().any(|w| w.name == name) {
            return Err(at(
                s.name.span().start,
                format!("reservation.name: {name:?} is defined twice"),
            ));
        }
        if s.nodes.is_empty() && s.hyper_nodes.is_empty() {
            return Err(at(
                s.name.span().start,
                format!("reservation {name:?}: expected nodes or hyperNodes (what it takes), got neither"),
            ));
        }
        let instant = |v: &Spanned<toml::Value>, key: &str| {
            let text = match v.get_ref() {
                toml::Value::Integer(i) if *i >= 0 => return Ok(*i as u64),
                toml::Value::String(s) => s.clone(),
                toml::Value::Datetime(d) => d.to_string(),
                other => other.type_str().to_string(),
            };
            parse_instant(&text).map_err(|why| at(v.span().start, format!("reservation {name:?}: {key}: {why}")))
        };
        let start = instant(&s.start, "start")?;
        let end = instant(&s.end, "end")?;
        if end <= start {
            return Err(at(
                s.end.span().start,
                format!("reservation {name:?}: end: expected a time after start"),
            ));
        }
        out.push(MaintenanceWindow {
            name,
            nodes: s.nodes.clone(),
            hyper_nodes: s.hyper_nodes.clone(),
            start,
            end,
        });
    }
    Ok(out)
}

/// `2026-12-01T08:00:00Z`, `2026-12-01T09:00:00+01:00` (or a space for `T`) as Unix
/// seconds; or whole seconds as digits.
pub fn parse_instant(text: &str) -> Result<u64, InstantError> {
    let expected = || InstantError::NotATime(text.to_string());
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse().map_err(|_| expected());
    }
    let b = t.as_bytes();
    if b.len() < 20 || !matches!(b[10], b'T' | b't' | b' ') {
        return Err(expected());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, InstantError> {
        t.get(r)
            .filter(|s| s.bytes().all(|c| c.is_ascii_digit()))
            .and_then(|s| s.parse().ok())
            .ok_or_else(expected)
    };
    if b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return Err(expected());
    }
    let (y, mo, d, h, mi, s) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return Err(expected());
    }
    // Fractions of a second are dropped.
    let mut rest = &t[19..];
    if let Some(f) = rest.strip_prefix('.') {
        rest = f.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    let offset = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) && o.get(3..4) == Some(":") => {
            let part = |r: std::ops::Range<usize>| -> Result<i64, InstantError> {
                o.get(r)
                    .filter(|p| p.bytes().all(|c| c.is_ascii_digit()))
                    .and_then(|p| p.parse().ok())
                    .ok_or_else(expected)
            };
            let (hh, mm) = (part(1..3)?, part(4..6)?);
            let sign = if o.starts_with('-') { -1 } else { 1 };
            sign * (hh * 3600 + mm * 60)
        }
        _ => return Err(expected()),
    };
    let secs = hyperplan_shared::civil::days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s - offset;
    u64::try_from(secs).map_err(|_| InstantError::Before1970(text.to_string()))
}

/// Why a text is not an instant [`parse_instant`] takes (the text, as given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstantError {
    /// Neither an RFC 3339 time nor whole seconds.
    #[error("expected an RFC 3339 time like 2026-12-01T08:00:00Z, or Unix seconds, got {0:?}")]
    NotATime(String),
    /// A time, but before the Unix epoch.
    #[error("{0:?} is before 1970")]
    Before1970(String),
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::config::PlannerConfig;

    #[test]
    fn instants_read_as_unix_seconds() {
        assert_eq!(parse_instant("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse_instant("2026-12-01T08:00:00Z"), Ok(1_796_112_000));
        assert_eq!(parse_instant("2026-12-01T09:00:00+01:00"), Ok(1_796_112_000));
        assert_eq!(parse_instant("2026-12-01 08:00:00.250Z"), Ok(1_796_112_000));
        assert_eq!(parse_instant("3600"), Ok(3600));
        assert!(parse_instant("tomorrow").is_err());
        assert!(parse_instant("2026-13-01T08:00:00Z").is_err());
        // Not ASCII where the offset goes: an error, never a panic.
        assert!(parse_instant("2026-12-01T08:00:00+\u{e9}\u{e9}x").is_err());
        assert!(parse_instant("2026-12-01T08:00:00\u{e9}\u{e9}\u{e9}").is_err());
        assert!(parse_instant("\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}").is_err());
    }

    #[test]
    fn windows_need_nodes_and_an_end_after_the_start() {
        let c = PlannerConfig::parse(
            "[[reservation]]\nname = \"fw\"\nnodes = [\"n01\"]\nstart = 100\nend = \"1970-01-01T00:10:00Z\"\n",
            "p.toml",
        )
        .unwrap();
        assert_eq!(c.maintenance[0].start, 100);
        assert_eq!(c.maintenance[0].end, 600);
        let e = PlannerConfig::parse("[[reservation]]\nname = \"fw\"\nstart = 1\nend = 2\n", "p.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "p.toml:2:8: reservation \"fw\": expected nodes or hyperNodes (what it takes), got neither"
        );
        let e = PlannerConfig::parse(
            "[[reservation]]\nname = \"fw\"\nnodes = [\"a\"]\nstart = 5\nend = 5\n",
            "p.toml",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "p.toml:5:7: reservation \"fw\": end: expected a time after start"
        );
    }
}
