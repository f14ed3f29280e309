//! `[metrics]` and `[web]`: the planner's HTTP endpoints. Prometheus metrics are on by
//! default on the loopback (`127.0.0.1:9400`, path `/metrics`; `listen = ""` turns them
//! off); the web view is off unless `[web] listen` is set, and always speaks TLS with the
//! planner's certificate.
//!
//! ```toml
//! [metrics]
//! listen = "0.0.0.0:9400"          # "" = off
//!
//! [web]
//! listen = "0.0.0.0:9443"          # default: off
//! tokenFile = "/etc/hyperplan/web.token"   # optional: a reverse proxy's bearer token
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;

use hyperplan_core::config::ConfigError;
use serde::Deserialize;

/// The default of `[metrics] listen`.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9400";

/// `[metrics]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsConfig {
    /// Where `/metrics` is served (`None`: off).
    pub listen: Option<SocketAddr>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            listen: DEFAULT_METRICS_LISTEN.parse().ok(),
        }
    }
}

/// `[web]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WebConfig {
    /// Where the web view is served over HTTPS (`None`: off, the default).
    pub listen: Option<SocketAddr>,
    /// A file holding a token (one line) a reverse proxy sends as `Authorization: Bearer
    /// TOKEN` (or a browser once as `?token=`), for those without a client certificate.
    pub token_file: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawMetrics {
    listen: Option<toml::Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawWeb {
    listen: Option<toml::Spanned<String>>,
    token_file: Option<String>,
}

/// An `IP:PORT`, or `""` for off.
pub fn listen_address(text: &str) -> Result<Option<SocketAddr>, BadListen> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    text.trim().parse().map(Some).map_err(|_| BadListen(text.to_string()))
}

/// A listen address that is not `IP:PORT` (the text, as given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected IP:PORT (e.g. 127.0.0.1:9400) or \"\" for off, got {0:?}")]
pub struct BadListen(pub String);

/// Checks `[metrics]` and `[web]`; `at` names the line; relative paths are taken from
/// `base` (planner.toml's directory).
pub fn http_config(
    metrics: Option<RawMetrics>,
    web: Option<RawWeb>,
    base: &std::path::Path,
    at: &dyn Fn(usize, String) -> ConfigError,
) -> Result<(MetricsConfig, WebConfig), ConfigError> {
    let mut m = MetricsConfig::default();
    if let Some(l) = metrics.and_then(|r| r.listen) {
        m.listen = listen_address(l.get_ref()).map_err(|e| at(l.span().start, format!("metrics.listen: {e}")))?;
    }
    let mut w = WebConfig::default();
    if let Some(r) = web {
        if let Some(l) = r.listen {
            w.listen = listen_address(l.get_ref()).map_err(|e| at(l.span().start, format!("web.listen: {e}")))?;
        }
        w.token_file = r.token_file.map(|p| base.join(p));
    }
    Ok((m, w))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn addresses_and_off() {
        assert_eq!(listen_address(""), Ok(None));
        assert_eq!(listen_address("0.0.0.0:9400"), Ok("0.0.0.0:9400".parse().ok()));
        assert!(
            listen_address("localhost:9400")
                .unwrap_err()
                .to_string()
                .contains("expected IP:PORT")
        );
        assert_eq!(MetricsConfig::default().listen, "127.0.0.1:9400".parse().ok());
        assert_eq!(WebConfig::default().listen, None);
    }
}
