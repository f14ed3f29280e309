//! `[accounting]` in planner.toml:
//!
//! ```toml
//! [accounting]
//! # url = "postgres://hyperplan@db1:5432/hyperplan?sslmode=require"   # default: SQLite
//! # passwordFile = "/etc/hyperplan/accounting.password"
//! # caFile = "/etc/hyperplan/accounting-ca.pem"
//! path = "/var/lib/hyperplan/accounting.db"    # SQLite's file (default: beside the state)
//! cluster = "default"                          # this cluster's name in shared databases
//! keep = { jobs = "2y", tasks = "180d", steps = "180d" }   # or keep = "1y"; default: for ever
//! # enabled = false                            # no accounting at all
//! ```

use std::path::{Path, PathBuf};

use hyperplan_accounting::target::PostgresTarget;
use hyperplan_accounting::{Keep, Target};
use hyperplan_core::config::ConfigError;
use serde::Deserialize;

/// The file name of the SQLite database beside the state store.
pub const DEFAULT_FILE: &str = "accounting.db";
/// The cluster's name in the database by default.
pub const DEFAULT_CLUSTER: &str = "default";

/// `[accounting]`, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct AccountingConfig {
    /// `enabled = false`: no database, `history` and `report` say so.
    pub enabled: bool,
    /// `path` or `url` (`None`: SQLite beside the state store, decided with `[store]`).
    pub target: Option<Target>,
    pub cluster: String,
    pub keep: Keep,
}

impl Default for AccountingConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            target: None,
            cluster: DEFAULT_CLUSTER.into(),
            keep: Keep::default(),
        }
    }
}

impl AccountingConfig {
    /// The database: the one configured, or SQLite beside `state` (the store's file).
    pub fn target_beside(&self, state: &Path) -> Target {
        self.target.clone().unwrap_or_else(|| Target::Sqlite {
            path: state.parent().unwrap_or(Path::new(".")).join(DEFAULT_FILE),
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawAccounting {
    enabled: Option<bool>,
    path: Option<toml::Spanned<String>>,
    url: Option<toml::Spanned<String>>,
    password_file: Option<toml::Spanned<String>>,
    ca_file: Option<toml::Spanned<String>>,
    cluster: Option<toml::Spanned<String>>,
    keep: Option<toml::Spanned<toml::Value>>,
}

/// Checks `[accounting]`; relative paths are taken from `base` (the file's directory).
pub fn accounting_config(
    raw: Option<RawAccounting>,
    base: &Path,
    at: &dyn Fn(usize, String) -> ConfigError,
) -> Result<AccountingConfig, ConfigError> {
    let mut out = AccountingConfig::default();
    let Some(r) = raw else { return Ok(out) };
    out.enabled = r.enabled.unwrap_or(true);
    let path_of = |s: &toml::Spanned<String>| {
        let p = PathBuf::from(s.get_ref());
        if p.is_absolute() { p } else { base.join(p) }
    };
    match (&r.path, &r.url) {
        (Some(p), Some(_)) => {
            return Err(at(
                p.span().start,
                "accounting: path (a SQLite file) and url (a PostgreSQL server) exclude each other: keep one".into(),
            ));
        }
        (Some(p), None) => {
            if p.get_ref().is_empty() {
                return Err(at(
                    p.span().start,
                    "accounting.path: expected a file name, got \"\"".into(),
                ));
            }
            for (key, v) in [("passwordFile", &r.password_file), ("caFile", &r.ca_file)] {
                if let Some(v) = v {
                    return Err(at(
                        v.span().start,
                        format!("accounting.{key} is for a PostgreSQL url; a SQLite path takes none"),
                    ));
                }
            }
            out.target = Some(Target::Sqlite { path: path_of(p) });
        }
        (None, Some(u)) => {
            let url = u.get_ref();
            if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                return Err(at(
                    u.span().start,
                    format!(
                        "accounting.url: expected postgres://USER@HOST:PORT/DATABASE (PostgreSQL; SQLite takes `path`), got {url:?}"
                    ),
                ));
            }
            if let Err(e) = PostgresTarget::check_url(url) {
                return Err(at(u.span().start, format!("accounting.url: {e}")));
            }
            if url
                .split('@')
                .next()
                .is_some_and(|user| user.contains(':') && user.matches(':').count() > 1)
            {
                return Err(at(
                    u.span().start,
                    "accounting.url: a password in the url is refused (it would show in logs): put it in passwordFile"
                        .into(),
                ));
            }
            out.target = Some(Target::Postgres(PostgresTarget {
                url: url.clone(),
                password_file: r.password_file.as_ref().map(path_of),
                ca_file: r.ca_file.as_ref().map(path_of),
            }));
        }
        (None, None) => {
            for (key, v) in [("passwordFile", &r.password_file), ("caFile", &r.ca_file)] {
                if let Some(v) = v {
                    return Err(at(
                        v.span().start,
                        format!("accounting.{key} needs url (a PostgreSQL server)"),
                    ));
                }
            }
        }
    }
    if let Some(c) = r.cluster {
        if hyperplan_shared::names::check_name(hyperplan_shared::names::NameKind::Queue, c.get_ref()).is_err() {
            return Err(at(
                c.span().start,
                format!(
                    "accounting.cluster: expected a name of letters, digits, `.`, `_` or `-` starting with a letter or digit, got {:?}",
                    c.get_ref()
                ),
            ));
        }
        out.cluster = c.into_inner();
    }
    if let Some(k) = r.keep {
        let start = k.span().start;
        out.keep = match k.into_inner() {
            toml::Value::Table(t) => {
                let mut keep = Keep::default();
                for (name, v) in t {
                    let secs =
                        duration(&v).ok_or_else(|| at(start, format!("accounting.keep.{name}: {}", expected(&v))))?;
                    match name.as_str() {
                        "jobs" => keep.jobs = Some(secs),
                        "tasks" => keep.tasks = Some(secs),
                        "steps" => keep.steps = Some(secs),
                        other => {
                            return Err(at(
                                start,
                                format!("accounting.keep: unknown table {other:?}: expected jobs, tasks or steps"),
                            ));
                        }
                    }
                }
                keep
            }
            v => {
                let secs = duration(&v).ok_or_else(|| at(start, format!("accounting.keep: {}", expected(&v))))?;
                Keep {
                    jobs: Some(secs),
                    tasks: Some(secs),
                    steps: Some(secs),
                }
            }
        };
    }
    Ok(out)
}

/// `"2y"`, `"26w"`, `"180d"`, `"12h"`, or a number of days; an hour to a century.
fn duration(v: &toml::Value) -> Option<u64> {
    const DAY: u64 = 86_400;
    let secs = match v {
        toml::Value::Integer(d) if *d > 0 => u64::try_from(*d).ok().and_then(|d| d.checked_mul(DAY)),
        toml::Value::String(s) => {
            let s = s.trim();
            let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
            let per = match unit {
                "y" => Some(365 * DAY),
                "w" => Some(7 * DAY),
                "d" => Some(DAY),
                "h" => Some(3600),
                _ => None,
            };
            n.parse::<u64>().ok().zip(per).and_then(|(n, per)| n.checked_mul(per))
        }
        _ => None,
    };
    secs.filter(|s| (3600..=100 * 365 * DAY).contains(s))
}

/// What a `keep` value should have been, and what it was.
fn expected(v: &toml::Value) -> String {
    let expected = "expected a duration such as \"2y\", \"26w\", \"180d\" or \"12h\" (an hour to a century)";
    match v {
        toml::Value::String(s) => format!("{expected}, got {s:?}"),
        toml::Value::Integer(i) => format!("{expected}, got {i}"),
        other => format!("{expected}, got a {}", other.type_str()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<AccountingConfig, String> {
        let at =
            |offset: usize, message: String| hyperplan_core::config::parse_error(text, "planner.toml", offset, message);
        #[derive(Deserialize)]
        struct File {
            accounting: Option<RawAccounting>,
        }
        let raw: File = toml::from_str(text).map_err(|e| e.to_string())?;
        accounting_config(raw.accounting, Path::new("/etc/hyperplan"), &at).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_to_sqlite_beside_the_state() {
        let c = parse("").unwrap();
        assert!(c.enabled);
        assert_eq!(
            c.target_beside(Path::new("/var/lib/hyperplan/state.redb")),
            Target::Sqlite {
                path: "/var/lib/hyperplan/accounting.db".into()
            }
        );
    }

    #[test]
    fn keep_per_table_or_for_all() {
        let c = parse("[accounting]\nkeep = { jobs = \"2y\", tasks = \"180d\" }\n").unwrap();
        assert_eq!(c.keep.jobs, Some(2 * 365 * 86_400));
        assert_eq!(c.keep.tasks, Some(180 * 86_400));
        assert_eq!(c.keep.steps, None);
        let c = parse("[accounting]\nkeep = 30\n").unwrap();
        assert_eq!(c.keep.steps, Some(30 * 86_400));
        let e = parse("[accounting]\nkeep = \"5 minutes\"\n").unwrap_err();
        assert!(e.starts_with("planner.toml:2:") && e.contains("accounting.keep"), "{e}");
    }

    #[test]
    fn postgres_needs_its_own_keys() {
        let c = parse(
            "[accounting]\nurl = \"postgres://hp@db1:5432/acct\"\npasswordFile = \"pw\"\ncaFile = \"/etc/ca.pem\"\n",
        )
        .unwrap();
        let Some(Target::Postgres(p)) = c.target else { panic!() };
        assert_eq!(p.password_file.as_deref(), Some(Path::new("/etc/hyperplan/pw")));
        let e = parse("[accounting]\npath = \"a.db\"\ncaFile = \"x\"\n").unwrap_err();
        assert!(e.starts_with("planner.toml:3:") && e.contains("caFile"), "{e}");
        let e = parse("[accounting]\nurl = \"mysql://x\"\n").unwrap_err();
        assert!(e.contains("postgres://"), "{e}");
        let e = parse("[accounting]\nurl = \"postgres://hp:secret@db1/acct\"\n").unwrap_err();
        assert!(e.contains("passwordFile"), "{e}");
    }
}
