//! The HTTP side of the UFM source: one blocking `GET {endpoint}/ufmRest/resources/ports`
//! with basic auth, over ureq with rustls on ring.
//!
//! TLS: server certificates are verified against Mozilla's roots (webpki-roots) or, with
//! `caFile`, against the CAs in that PEM file. `insecureSkipVerify` uses ureq's own
//! `disable_verification` switch (no custom rustls verifier here). Timeouts: `timeout`
//! bounds the TCP+TLS connect and, separately, the whole exchange including the body,
//! so a server that accepts and never answers fails within `timeout`.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use ureq::Agent;
use ureq::config::RedirectAuthHeaders;
use ureq::tls::{PemItem, RootCerts, TlsConfig, TlsProvider};

use super::credentials::Credentials;
use super::grouping::UfmTopology;
use super::{UfmConfig, UfmError, parse_ports};

/// Volcano's cap on the response body; a real fabric's port list is far below it.
pub const MAX_BODY_BYTES: u64 = 100 * 1024 * 1024;

/// A configured UFM source: the settings, the resolved URL and a reusable HTTP agent.
/// Credentials are re-read (and their permissions re-checked) on every fetch, so a
/// rotated password is picked up without a restart.
#[derive(Debug)]
pub struct UfmSource {
    config: UfmConfig,
    url: String,
    agent: Agent,
}

impl UfmSource {
    /// Checks what can be checked without the network (the CA file parses, the
    /// credentials file is private and well-formed) and builds the HTTP agent.
    pub fn new(config: UfmConfig) -> Result<Self, UfmError> {
        Credentials::load(&config.credentials_file)?;
        let mut tls = TlsConfig::builder()
            .provider(TlsProvider::Rustls)
            .disable_verification(config.insecure_skip_verify);
        if let Some(path) = &config.ca_file {
            tls = tls.root_certs(load_ca_file(path)?);
        }
        if config.insecure_skip_verify {
            tracing::warn!(
                endpoint = %config.endpoint,
                "UFM: insecureSkipVerify is set; the server's certificate is not checked"
            );
        }
        let agent: Agent = Agent::config_builder()
            .tls_config(tls.build())
            .http_status_as_error(false)
            .timeout_connect(Some(config.timeout))
            .timeout_global(Some(config.timeout))
            .redirect_auth_headers(RedirectAuthHeaders::SameHost)
            .user_agent(concat!("hyperplan/", env!("CARGO_PKG_VERSION")))
            .accept("application/json")
            .build()
            .into();
        Ok(UfmSource {
            url: config.ports_url(),
            config,
            agent,
        })
    }

    pub fn config(&self) -> &UfmConfig {
        &self.config
    }

    /// The URL polled: `{endpoint}/ufmRest/resources/ports`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The poll period (the discovery system also polls once at start).
    pub fn interval(&self) -> Duration {
        self.config.interval
    }

    /// One poll: GET, parse, group. An error leaves the caller's last good HyperNodes
    /// in place; so does a response with no host ports ([`UfmError::NoHosts`]).
    pub fn fetch(&self) -> Result<UfmTopology, UfmError> {
        let _span = tracing::info_span!("ufm_fetch", url = %self.url).entered();
        let started = std::time::Instant::now();
        let creds = Credentials::load(&self.config.credentials_file)?;
        let response = self
            .agent
            .get(&self.url)
            .header("Authorization", creds.basic_auth_header())
            .call()
            .map_err(|e| self.transport_error(e))?;
        let status = response.status().as_u16();
        if status == 401 {
            return Err(UfmError::Unauthorized {
                url: self.url.clone(),
                credentials_file: self.config.credentials_file.clone(),
            });
        }
        if !(200..300).contains(&status) {
            return Err(UfmError::HttpStatus {
                status,
                url: self.url.clone(),
            });
        }
        let body = response
            .into_body()
            .with_config()
            .limit(MAX_BODY_BYTES)
            .read_to_vec()
            .map_err(|e| self.transport_error(e))?;
        let topology = parse_ports(&self.url, &body)?;
        for w in &topology.warnings {
            tracing::warn!("{w}");
        }
        tracing::info!(
            records = topology.records,
            hypernodes = topology.hypernodes.len(),
            skipped = topology.warnings.iter().map(|w| w.count).sum::<usize>(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "UFM ports fetched"
        );
        Ok(topology)
    }

    fn transport_error(&self, e: ureq::Error) -> UfmError {
        let url = self.url.clone();
        match e {
            ureq::Error::Timeout(_) => UfmError::Timeout {
                url,
                secs: self.config.timeout.as_secs_f64(),
            },
            ureq::Error::Io(e) if matches!(e.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock) => {
                UfmError::Timeout {
                    url,
                    secs: self.config.timeout.as_secs_f64(),
                }
            }
            ureq::Error::Io(source) => match source.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) {
                Some(tls) => UfmError::Tls {
                    url,
                    why: tls.to_string(),
                },
                None => UfmError::Io { url, source },
            },
            ureq::Error::Rustls(tls) => UfmError::Tls {
                url,
                why: tls.to_string(),
            },
            ureq::Error::BodyExceedsLimit(limit) => UfmError::TooLarge { url, limit },
            source => UfmError::Transport {
                url,
                source: Box::new(source),
            },
        }
    }
}

/// Every certificate in a PEM file, as the only trusted roots.
fn load_ca_file(path: &std::path::Path) -> Result<RootCerts, UfmError> {
    let bad = |why: String| UfmError::CaFile {
        path: path.to_path_buf(),
        why,
    };
    let pem = std::fs::read(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item {
            Ok(PemItem::Certificate(c)) => certs.push(c),
            Ok(_) => {} // a key in the same file is not a root
            Err(e) => return Err(bad(format!("expected PEM certificates: {e}"))),
        }
    }
    if certs.is_empty() {
        return Err(bad(
            "expected at least one PEM `CERTIFICATE` block, found none".to_string()
        ));
    }
    Ok(RootCerts::Specific(Arc::new(certs)))
}
