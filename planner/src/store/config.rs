//! `[store]` in planner.toml: where the state lives (a redb file, or etcd for planners
//! that share it) and how long ended jobs are kept; `[ha]`: the leader's lease and the
//! address it advertises to agents and people that ask a standby.

use std::path::{Path, PathBuf};
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
    /// `--init` (a flag only, never in the file): begin an empty embedded store where
    /// the file is missing (its marker says one existed), empty or unreadable (moved
    /// aside); see `embedded::Create::Init`.
    pub init: bool,
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
    /// `endpoints`: `http://HOST:PORT` of the etcd members, or all `https://` with `tls`.
    pub endpoints: Vec<String>,
    /// `prefix`: every key starts with it; ends with `/`.
    pub prefix: String,
    /// `caFile` (and `certFile`, `keyFile`): TLS to etcd, for `https://` endpoints.
    pub tls: Option<EtcdTls>,
}

/// TLS to etcd: the CA that signed the members' certificates and, where etcd checks
/// its clients (`--client-cert-auth`), this planner's certificate and key. PEM files,
/// read when the planner connects (relative paths: to the config file's directory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdTls {
    pub ca_file: PathBuf,
    /// `certFile` and `keyFile`, given together.
    pub identity: Option<(PathBuf, PathBuf)>,
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
            init: false,
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
    ca_file: Option<toml::Spanned<String>>,
    cert_file: Option<toml::Spanned<String>>,
    key_file: Option<toml::Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawHa {
    lease_ttl: Option<toml::Spanned<f64>>,
    advertise: Option<toml::Spanned<String>>,
}

/// Checks `[store]` and `[ha]`; `at` turns an offset and a message into an error naming
/// the line; `base`: the config file's directory (for relative TLS file paths).
pub fn store_config(
    raw: Option<RawStore>,
    ha: Option<RawHa>,
    base: &Path,
    at: &dyn Fn(usize, String) -> ConfigError,
) -> Result<StoreConfig, ConfigError> {
    let mut store = StoreConfig::default();
    // Where `[ha]` is (its first key), for the error when the store cannot share.
    let ha_at = ha.as_ref().map(|h| {
        [
            h.lease_ttl.as_ref().map(|t| t.span().start),
            h.advertise.as_ref().map(|a| a.span().start),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(0)
    });
    /// Below this, an etcd leader election can cost the planner its lead.
    const MIN_SAFE_LEASE_TTL: f64 = 5.0;
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
            if v < MIN_SAFE_LEASE_TTL {
                tracing::warn!(
                    "ha.leaseTtl = {v}: a change of etcd's own leader (its election timeout, 1 s by default, \
                     and a round or two) can outlast two thirds of it, and the leader then gives its lead up; \
                     {MIN_SAFE_LEASE_TTL} s or more rides it out"
                );
            }
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
    let embedded = raw
        .as_ref()
        .and_then(|s| s.backend.as_ref())
        .is_none_or(|b| b.get_ref() == "embedded");
    if let (Some(at_ha), true) = (ha_at, embedded) {
        // Standbys share the state through etcd: with one planner's file there is no HA,
        // and a site that wrote [ha] believes it has it.
        return Err(at(
            at_ha,
            "[ha] is for backend = \"etcd\" (planners that share their state in etcd, one leading); the embedded store is one planner's file: remove [ha], or set [store] backend = \"etcd\" and endpoints".into(),
        ));
    }
    let Some(s) = raw else { return Ok(store) };
    let backend = s.backend.as_ref().map_or("embedded", |b| b.get_ref().as_str());
    let backend_at = s.backend.as_ref().map_or(0, |b| b.span().start);
    match backend {
        "embedded" => {
            let etcd_only = [&s.prefix, &s.ca_file, &s.cert_file, &s.key_file]
                .into_iter()
                .flatten()
                .map(|v| v.span().start);
            if let Some(e) = s
                .endpoints
                .as_ref()
                .map(|e| e.span().start)
                .into_iter()
                .chain(etcd_only)
                .min()
            {
                return Err(at(
                    e,
                    "store.endpoints, prefix, caFile, certFile and keyFile are for backend = \"etcd\"; the embedded store has path".into(),
                ));
            }
        }
        "etcd" => {
            let tls = etcd_tls(&s, base, at)?;
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
            // All plain or all TLS: etcd-client dials every member the same way.
            let scheme = if s.ca_file.is_some() { "https://" } else { "http://" };
            if let Some(bad) = endpoints.iter().find(|e| !is_endpoint(e, scheme)) {
                let why = if s.ca_file.is_some() {
                    "with caFile (TLS), every endpoint is https://HOST:PORT"
                } else if bad.starts_with("https://") {
                    "https:// endpoints need caFile, the PEM file of the CA that signed etcd's certificates"
                } else {
                    "expected http://HOST:PORT, or https://HOST:PORT with caFile"
                };
                return Err(at(span, format!("store.endpoints: {why}; got {bad:?}")));
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
            store.backend = Backend::Etcd(EtcdConfig { endpoints, prefix, tls });
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
        if p.contains('\0') {
            return Err(at(
                0,
                format!("store.path: a file path cannot hold a NUL byte, got {p:?}"),
            ));
        }
        store.path = p.into();
    }
    if let Some(k) = s.keep_finished {
        let v = *k.get_ref();
        // `config::server`'s, not `config`'s: planner.toml's reader uses this module.
        store.keep_finished = crate::config::server::seconds(v).ok_or_else(|| {
            at(
                k.span().start,
                format!("store.keepFinished: expected seconds > 0 and below 1000000000 (604800 is 7 days), got {v}"),
            )
        })?;
    }
    Ok(store)
}

/// `SCHEME` + `HOST:PORT`.
fn is_endpoint(e: &str, scheme: &str) -> bool {
    e.strip_prefix(scheme).is_some_and(is_host_port)
}

/// `caFile`, `certFile`, `keyFile`: none (plain), `caFile` alone (etcd does not check
/// clients), or all three.
fn etcd_tls(
    s: &RawStore,
    base: &Path,
    at: &dyn Fn(usize, String) -> ConfigError,
) -> Result<Option<EtcdTls>, ConfigError> {
    let file = |v: &toml::Spanned<String>, key: &str| {
        if v.get_ref().is_empty() {
            Err(at(
                v.span().start,
                format!("store.{key}: expected a PEM file's path, got an empty string"),
            ))
        } else {
            Ok(base.join(v.get_ref()))
        }
    };
    let identity = match (&s.cert_file, &s.key_file) {
        (None, None) => None,
        (Some(c), Some(k)) => Some((file(c, "certFile")?, file(k, "keyFile")?)),
        (Some(v), None) | (None, Some(v)) => {
            return Err(at(
                v.span().start,
                "store.certFile and store.keyFile: expected both (this planner's certificate for etcd, and its key), or neither".into(),
            ));
        }
    };
    match &s.ca_file {
        Some(ca) => Ok(Some(EtcdTls {
            ca_file: file(ca, "caFile")?,
            identity,
        })),
        None => match s.cert_file.as_ref().or(s.key_file.as_ref()) {
            Some(v) => Err(at(
                v.span().start,
                "store.certFile and store.keyFile: expected with caFile (TLS to etcd)".into(),
            )),
            None => Ok(None),
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// `[store]` and `[ha]` as `DaemonConfig::parse` reads them.
    fn parse(text: &str) -> Result<StoreConfig, ConfigError> {
        #[derive(Deserialize)]
        struct Both {
            store: Option<RawStore>,
            ha: Option<RawHa>,
        }
        let at = |o: usize, m: String| hyperplan_core::config::parse_error(text, "planner.toml", o, m);
        let raw: Both =
            toml::from_str(text).map_err(|e| at(e.span().map_or(usize::MAX, |s| s.start), e.message().to_string()))?;
        store_config(raw.store, raw.ha, Path::new("/etc/hyperplan"), &at)
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
                prefix: "/site-a/".into(),
                tls: None,
            })
        );
        assert_eq!(c.ha.lease_ttl, Duration::from_secs(4));
        assert_eq!(c.ha.advertise.as_deref(), Some("head-1:7400"));
        assert_eq!(parse("").unwrap(), StoreConfig::default());
    }

    #[test]
    fn tls_to_etcd_takes_a_ca_and_a_client_certificate_relative_to_the_config() {
        let c = parse(
            "[store]\nbackend = \"etcd\"\nendpoints = [\"https://10.0.0.1:2379\"]\ncaFile = \"etcd/ca.pem\"\ncertFile = \"/etc/pki/head-1.pem\"\nkeyFile = \"etcd/head-1.key\"\n",
        )
        .unwrap();
        let Backend::Etcd(e) = c.backend else { panic!("etcd") };
        assert_eq!(
            e.tls,
            Some(EtcdTls {
                ca_file: "/etc/hyperplan/etcd/ca.pem".into(),
                identity: Some(("/etc/pki/head-1.pem".into(), "/etc/hyperplan/etcd/head-1.key".into())),
            })
        );
        // A CA alone: etcd does not ask for client certificates.
        let c = parse("[store]\nbackend = \"etcd\"\nendpoints = [\"https://e:2379\"]\ncaFile = \"ca.pem\"\n").unwrap();
        let Backend::Etcd(e) = c.backend else { panic!("etcd") };
        assert_eq!(e.tls.unwrap().identity, None);
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
                "https:// endpoints need caFile",
            ),
            (
                "[store]\nbackend = \"etcd\"\nendpoints = [\"https://e:2379\", \"http://f:2379\"]\ncaFile = \"ca.pem\"\n",
                "every endpoint is https://HOST:PORT; got \"http://f:2379\"",
            ),
            (
                "[store]\nbackend = \"etcd\"\nendpoints = [\"e:2379\"]\n",
                "expected http://HOST:PORT, or https://HOST:PORT with caFile",
            ),
            (
                "[store]\nbackend = \"etcd\"\nendpoints = [\"https://e:2379\"]\ncaFile = \"ca.pem\"\ncertFile = \"c.pem\"\n",
                "expected both",
            ),
            (
                "[store]\nbackend = \"etcd\"\nendpoints = [\"http://e:2379\"]\ncertFile = \"c.pem\"\nkeyFile = \"k.pem\"\n",
                "expected with caFile",
            ),
            (
                "[store]\nbackend = \"etcd\"\nendpoints = [\"https://e:2379\"]\ncaFile = \"\"\n",
                "store.caFile: expected a PEM file's path",
            ),
            ("[store]\ncaFile = \"ca.pem\"\n", "are for backend = \"etcd\""),
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
            ("[ha]\nleaseTtl = 4\n", "[ha] is for backend = \"etcd\""),
            (
                "[store]\npath = \"/var/x\"\n[ha]\nadvertise = \"head-1:7400\"\n",
                "the embedded store is one planner's file",
            ),
            ("[store]\npath = \"/var/x\\u0000y\"\n", "cannot hold a NUL byte"),
            ("[ha]\nleaseTtl = 2.5\n", "whole seconds"),
            ("[ha]\nadvertise = \"head-1\"\n", "ha.advertise: expected HOST:PORT"),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(expected), "{text:?}: {e}");
        }
    }
}
