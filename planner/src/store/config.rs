//! `[store]` in planner.toml: where the state lives (a redb file, or etcd for planners
//! that share it) and how long ended jobs are kept; `[ha]`: the leader's lease and the
//! address it advertises to agents and people that ask a standby.

use std::path::PathBuf;
use std::time::Duration;

use hyperplan_core::config::ConfigError;
use hyperplan_shared::names::is_host_port;
use serde::Deserialize;

/// The default store file (the unit's `StateDirectory=hyperplan`).
pub const DEFAULT_PATH: &str = "/var/lib/hyperplan/state.redb";

/// How long ended jobs are kept by default: 7 days.
pub const DEFAULT_KEEP_FINISHED: Duration = Duration::from_secs(7 * 24 * 3600);

/// Where the keys live in etcd by default (several clusters may share one etcd).
pub const DEFAULT_PREFIX: &str = "/hyperplan/";

/// The leader's lease by default: a killed leader is replaced within about this long.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);

#[derive(Clone, Debug, PartialEq)]
pub struct StoreConfig {
    pub backend: Backend,
    /// `path`: the embedded store's file (redb).
    pub path: PathBuf,
    /// `keepFinished` (seconds): ended jobs older than this are deleted.
    pub keep_finished: Duration,
    /// `[ha]`: used with the etcd backend only.
    pub ha: HaConfig,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// One redb file, one planner.
    Embedded,
    /// etcd: several planners, one leads (elected with a lease), the others stand by.
    Etcd(EtcdConfig),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdConfig {
    /// `endpoints`: `http://HOST:PORT` of the etcd members.
    pub endpoints: Vec<String>,
    /// `prefix`: every key starts with it; ends with `/`.
    pub prefix: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HaConfig {
    /// `leaseTtl` (seconds, whole): the leader renews its lease every third of it; a
    /// leader that cannot renew in time stops acting, and a standby takes over once the
    /// lease has expired.
    pub lease_ttl: Duration,
    /// `advertise`: the `HOST:PORT` agents and the CLI reach this planner at, which
    /// standbys name as the leader; default: the listen address (with the host name
    /// when it listens on every address).
    pub advertise: Option<String>,
}

impl Default for HaConfig {
    fn default() -> Self {
        Self {
            lease_ttl: DEFAULT_LEASE_TTL,
            advertise: None,
        }
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            backend: Backend::Embedded,
            path: PathBuf::from(DEFAULT_PATH),
            keep_finished: DEFAULT_KEEP_FINISHED,
            ha: HaConfig::default(),
        }
    }
}

impl StoreConfig {
    /// Where the state is, for logs and `hyperplan planners`.
    pub fn describe(&self) -> String {
        match &self.backend {
            Backend::Embedded => format!("embedded {}", self.path.display()),
            Backend::Etcd(e) => format!("etcd {} {}", e.endpoints.join(","), e.prefix),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawStore {
    backend: Option<toml::Spanned<String>>,
    path: Option<String>,
    keep_finished: Option<toml::Spanned<f64>>,
    endpoints: Option<toml::Spanned<Vec<String>>>,
    prefix: Option<toml::Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawHa {
    lease_ttl: Option<toml::Spanned<f64>>,
    advertise: Option<toml::Spanned<String>>,
}

/// Checks `[store]` and `[ha]`; `at` turns an offset and a message into an error naming
/// the line.
pub fn store_config(
    raw: Option<RawStore>,
    ha: Option<RawHa>,
    at: &dyn Fn(usize, String) -> ConfigError,
) -> Result<StoreConfig, ConfigError> {
    let mut store = StoreConfig::default();
    if let Some(h) = ha {
        if let Some(t) = h.lease_ttl {
            let v = *t.get_ref();
            if !(v.is_finite() && v.fract() == 0.0 && (2.0..=3600.0).contains(&v)) {
                return Err(at(
                    t.span().start,
                    format!(
                        "ha.leaseTtl: expected whole seconds from 2 to 3600 (etcd's leases are whole seconds), got {v}"
                    ),
                ));
            }
            store.ha.lease_ttl = Duration::from_secs(v as u64);
        }
        if let Some(a) = h.advertise {
            if !is_host_port(a.get_ref()) {
                return Err(at(
                    a.span().start,
                    format!("ha.advertise: expected HOST:PORT (head-1:7400), got {:?}", a.get_ref()),
                ));
            }
            store.ha.advertise = Some(a.into_inner());
        }
    }
    let Some(s) = raw else { return Ok(store) };
    let backend = s.backend.as_ref().map_or("embedded", |b| b.get_ref().as_str());
    let backend_at = s.backend.as_ref().map_or(0, |b| b.span().start);
    match backend {
        "embedded" => {
            if let Some(e) = s
                .endpoints
                .as_ref()
                .map(|e| e.span().start)
                .or(s.prefix.as_ref().map(|p| p.span().start))
            {
                return Err(at(
                    e,
                    "store.endpoints and store.prefix are for backend = \"etcd\"; the embedded store has path".into(),
                ));
            }
        }
        "etcd" => {
            let Some(endpoints) = s.endpoints else {
                return Err(at(
                    backend_at,
                    "store.endpoints: expected with backend = \"etcd\", e.g. [\"http://10.0.0.1:2379\", \"http://10.0.0.2:2379\"]"
                        .into(),
                ));
            };
            let span = endpoints.span().start;
            let endpoints = endpoints.into_inner();
            if endpoints.is_empty() {
                return Err(at(
                    span,
                    "store.endpoints: expected at least one http://HOST:PORT".into(),
                ));
            }
            if let Some(bad) = endpoints.iter().find(|e| !is_endpoint(e)) {
                return Err(at(
                    span,
                    format!(
                        "store.endpoints: expected http://HOST:PORT (TLS to etcd is not supported yet), got {bad:?}"
                    ),
                ));
            }
            let prefix = match s.prefix {
                None => DEFAULT_PREFIX.to_string(),
                Some(p) => {
                    let v = p.get_ref();
                    if !(v.starts_with('/')
                        && v.ends_with('/')
                        && v.len() <= 200
                        && v.bytes().all(|b| b.is_ascii_graphic()))
                    {
                        return Err(at(
                            p.span().start,
                            format!(
                                "store.prefix: expected a key prefix like \"/hyperplan/\" (starting and ending with /, printable ASCII), got {v:?}"
                            ),
                        ));
                    }
                    p.into_inner()
                }
            };
            store.backend = Backend::Etcd(EtcdConfig { endpoints, prefix });
        }
        other => {
            return Err(at(
                backend_at,
                format!("store.backend: expected \"embedded\" or \"etcd\", got {other:?}"),
            ));
        }
    }
    if let Some(p) = s.path {
        if p.is_empty() {
            return Err(at(0, "store.path: expected a file path, got an empty string".into()));
        }
        store.path = p.into();
    }
    if let Some(k) = s.keep_finished {
        let v = *k.get_ref();
        store.keep_finished = crate::config::seconds(v).ok_or_else(|| {
            at(
                k.span().start,
                format!("store.keepFinished: expected seconds > 0 (604800 is 7 days), got {v}"),
            )
        })?;
    }
    Ok(store)
}

/// `http://HOST:PORT` (what etcd-client dials without TLS).
fn is_endpoint(e: &str) -> bool {
    e.strip_prefix("http://").is_some_and(is_host_port)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn parse(text: &str) -> Result<StoreConfig, String> {
        #[derive(Deserialize)]
        struct Both {
            store: Option<RawStore>,
            ha: Option<RawHa>,
        }
        let raw: Both = toml::from_str(text).map_err(|e| e.to_string())?;
        let at = |o: usize, m: String| hyperplan_core::config::parse_error(text, "planner.toml", o, m);
        store_config(raw.store, raw.ha, &at).map_err(|e| e.to_string())
    }

    #[test]
    fn the_etcd_backend_takes_endpoints_a_prefix_and_a_lease() {
        let c = parse(
            "[store]\nbackend = \"etcd\"\nendpoints = [\"http://10.0.0.1:2379\", \"http://etcd-2:2379\"]\nprefix = \"/site-a/\"\n[ha]\nleaseTtl = 4\nadvertise = \"head-1:7400\"\n",
        )
        .unwrap();
        assert_eq!(
            c.backend,
            Backend::Etcd(EtcdConfig {
                endpoints: vec!["http://10.0.0.1:2379".into(), "http://etcd-2:2379".into()],
                prefix: "/site-a/".into()
            })
        );
        assert_eq!(c.ha.lease_ttl, Duration::from_secs(4));
        assert_eq!(c.ha.advertise.as_deref(), Some("head-1:7400"));
        assert_eq!(parse("").unwrap(), StoreConfig::default());
    }

    #[test]
    fn bad_etcd_settings_say_what_was_expected() {
        for (text, expected) in [
            (
                "[store]\nbackend = \"etcd\"\n",
                "store.endpoints: expected with backend",
            ),
            ("[store]\nbackend = \"etcd\"\nendpoints = []\n", "at least one"),
            (
                "[store]\nbackend = \"etcd\"\nendpoints = [\"https://e:2379\"]\n",
                "TLS to etcd",
            ),
            (
                "[store]\nbackend = \"etcd\"\nendpoints = [\"http://e:2379\"]\nprefix = \"x\"\n",
                "store.prefix",
            ),
            ("[store]\nbackend = \"zk\"\n", "\"embedded\" or \"etcd\""),
            (
                "[store]\nendpoints = [\"http://e:2379\"]\n",
                "are for backend = \"etcd\"",
            ),
            ("[ha]\nleaseTtl = 1\n", "from 2 to 3600"),
            ("[ha]\nleaseTtl = 2.5\n", "whole seconds"),
            ("[ha]\nadvertise = \"head-1\"\n", "ha.advertise: expected HOST:PORT"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(expected), "{text:?}: {e}");
        }
    }
}
