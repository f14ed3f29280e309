//! UFM discovery source: HyperNodes from NVIDIA UFM's REST port list
//! (`GET {endpoint}/ufmRest/resources/ports`), with Volcano's leaf grouping.
//!
//! - [`grouping`]: the pure part, port records → HyperNodes (tier 1 as Volcano does;
//!   upper tiers from switch-to-switch records, else Volcano's single `spine-hn`).
//! - `client`: `UfmSource`, the blocking HTTPS client (ureq, rustls on ring), behind the
//!   default feature `ufm-client` so that the planner core can use the rest without TLS.
//! - [`config`]: [`UfmConfig`] as written in `planner.toml`, and the duration syntax.
//! - [`credentials`]: the `username:password` file, refused unless private (0600).
//!
//! The planner's discovery poller builds one `UfmSource` per `[[discovery]] source =
//! "ufm"` entry, calls `UfmSource::fetch` at start and every `interval`, reconciles the
//! returned HyperNodes as the UFM source's own, and on error keeps the last good ones.

#[cfg(feature = "ufm-client")]
pub mod client;
pub mod config;
pub mod credentials;
pub mod grouping;

use std::path::PathBuf;

#[cfg(feature = "ufm-client")]
pub use client::{MAX_BODY_BYTES, UfmSource};
pub use config::{DurationError, UfmConfig};
pub use credentials::Credentials;
pub use grouping::{UfmTopology, Warning, group_ports};

/// Why a UFM poll failed. Each message names the URL or file and what was expected.
#[derive(Debug, thiserror::Error)]
pub enum UfmError {
    #[error(
        "UFM at {url} refused the credentials in {} (HTTP 401); expected a valid UFM `username:password` there",
        credentials_file.display()
    )]
    Unauthorized { url: String, credentials_file: PathBuf },

    #[error("UFM at {url} answered HTTP {status}; expected 200 with the port list")]
    HttpStatus { status: u16, url: String },

    #[error("UFM at {url} did not answer within {secs} s (timeout); expected the port list")]
    Timeout { url: String, secs: f64 },

    #[error(
        "UFM at {url} answered with a body that is not JSON ({source}); expected a JSON array of port records; \
         the body begins {head:?}"
    )]
    NotJson {
        url: String,
        /// serde_json's message carries the line and column.
        source: serde_json::Error,
        /// The first bytes of the body, lossily decoded.
        head: String,
    },

    #[error("UFM at {url} answered with a JSON {found}; expected a JSON array of port records")]
    NotPortList { url: String, found: &'static str },

    #[error(
        "UFM at {url} listed {records} port records but none usable of a host (description \"Computer…\" with \
         system_name and peer_node_name); keeping the previous HyperNodes"
    )]
    NoHosts { url: String, records: usize },

    #[error("UFM at {url} sent more than {limit} bytes; expected a port list below that")]
    TooLarge { url: String, limit: u64 },

    #[error("I/O error talking to UFM at {url}: {source}")]
    Io {
        url: String,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "TLS with UFM at {url} failed: {why}; expected a certificate from a trusted CA (set caFile to UFM's CA, \
         or insecureSkipVerify for a lab)"
    )]
    Tls { url: String, why: String },

    #[cfg(feature = "ufm-client")]
    #[error("cannot reach UFM at {url}: {source}")]
    Transport {
        url: String,
        #[source]
        source: Box<ureq::Error>,
    },

    #[error("UFM credentials file {}: {why}", path.display())]
    Credentials { path: PathBuf, why: String },

    #[error("UFM CA file {}: {why}", path.display())]
    CaFile { path: PathBuf, why: String },
}

pub use config::parse_duration;

#[cfg(feature = "ufm-client")]
/// One poll with a throw-away [`UfmSource`]; for one-shot commands. A long-running
/// planner keeps the source instead (it reuses connections and checks the CA file once).
pub fn fetch(config: &UfmConfig) -> Result<UfmTopology, UfmError> {
    UfmSource::new(config.clone())?.fetch()
}

/// A response body → HyperNodes, with the checks `fetch` applies (JSON, an array, at
/// least one host link). `url` is only for messages. Also usable on a saved response.
pub fn parse_ports(url: &str, body: &[u8]) -> Result<UfmTopology, UfmError> {
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|source| UfmError::NotJson {
        url: url.to_string(),
        source,
        head: head(body),
    })?;
    let found = match &value {
        serde_json::Value::Array(_) => None,
        serde_json::Value::Object(_) => Some("object"),
        serde_json::Value::String(_) => Some("string"),
        serde_json::Value::Number(_) => Some("number"),
        serde_json::Value::Bool(_) => Some("boolean"),
        serde_json::Value::Null => Some("null"),
    };
    if let Some(found) = found {
        return Err(UfmError::NotPortList {
            url: url.to_string(),
            found,
        });
    }
    let topology = group_ports(&value);
    if topology.hypernodes.is_empty() {
        return Err(UfmError::NoHosts {
            url: url.to_string(),
            records: topology.records,
        });
    }
    Ok(topology)
}

/// Up to 120 bytes of the body for an error message.
fn head(body: &[u8]) -> String {
    const N: usize = 120;
    let cut = &body[..body.len().min(N)];
    let mut s = String::from_utf8_lossy(cut).into_owned();
    if body.len() > N {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn parse_ports_errors_name_the_url_and_the_position() {
        let e = parse_ports("https://ufm/x", b"<html>\n<body>Login</body></html>").unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, UfmError::NotJson { .. }), "{msg}");
        assert!(
            msg.contains("https://ufm/x") && msg.contains("line 1 column 1") && msg.contains("<html>"),
            "{msg}"
        );

        let e = parse_ports("u", br#"{"error": "x"}"#).unwrap_err();
        assert!(matches!(e, UfmError::NotPortList { found: "object", .. }), "{e}");

        let e = parse_ports("u", b"[]").unwrap_err();
        assert!(matches!(e, UfmError::NoHosts { records: 0, .. }), "{e}");

        let long = vec![b'x'; 500];
        let e = parse_ports("u", &long).unwrap_err().to_string();
        assert!(e.contains('…') && e.len() < 400, "{e}");
    }
}
