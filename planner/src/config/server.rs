//! `[server]`: where the daemon listens, how it keeps time and what it tells people of
//! each other's jobs; every key is also a flag of `hyperplan-planner`.

use serde::Deserialize;

use hyperplan_core::config::ConfigError;
use hyperplan_core::config::HealthConfig;

/// Where the daemon listens, how it keeps time and what it tells people of each other's
/// jobs (`[server]` in planner.toml; every key is also a flag of `hyperplan-planner`).
#[derive(Clone, Debug, PartialEq)]
pub struct ServerConfig {
    /// `listen`: UDP address for QUIC (agents and the CLI).
    pub listen: std::net::SocketAddr,
    /// `certDir`: holds `ca.pem`, `planner.pem`, `planner.key` (`hyperplan certs init`).
    pub cert_dir: std::path::PathBuf,
    /// `tickInterval` (seconds): a tick at least this often, and one as soon as
    /// something arrives.
    pub tick_interval: std::time::Duration,
    /// `heartbeatInterval` (seconds): what agents are told to send at.
    pub heartbeat_interval: std::time::Duration,
    /// `missedHeartbeats`: silent intervals after which a node is NotReady.
    pub missed_heartbeats: u32,
    /// `maxFrameBytes`: the largest message accepted.
    pub max_frame_bytes: usize,
    /// `nodeLostAfter` (seconds): NotReady this long, a node's running tasks are lost.
    pub node_lost_after: std::time::Duration,
    /// `privateData`: plain users see only their own jobs (like Slurm's `PrivateData`);
    /// another user's job answers as one that does not exist. Admins see every job.
    pub private_data: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: std::net::SocketAddr::from(([0, 0, 0, 0], DEFAULT_PORT)),
            cert_dir: std::path::PathBuf::from("/etc/hyperplan/certs"),
            tick_interval: std::time::Duration::from_secs(1),
            heartbeat_interval: HealthConfig::default().heartbeat_interval,
            missed_heartbeats: HealthConfig::default().missed_heartbeats,
            max_frame_bytes: 16 * 1024 * 1024,
            node_lost_after: HealthConfig::default().node_lost_after,
            private_data: false,
        }
    }
}

impl ServerConfig {
    /// What the core needs of these keys to decide node health.
    pub fn health(&self) -> HealthConfig {
        HealthConfig {
            heartbeat_interval: self.heartbeat_interval,
            missed_heartbeats: self.missed_heartbeats,
            node_lost_after: self.node_lost_after,
        }
    }
}

/// The planner's default UDP port.
pub const DEFAULT_PORT: u16 = 7400;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawServer {
    listen: Option<toml::Spanned<String>>,
    cert_dir: Option<String>,
    tick_interval: Option<toml::Spanned<f64>>,
    heartbeat_interval: Option<toml::Spanned<f64>>,
    missed_heartbeats: Option<toml::Spanned<u32>>,
    max_frame_bytes: Option<toml::Spanned<u64>>,
    node_lost_after: Option<toml::Spanned<f64>>,
    private_data: Option<bool>,
}

/// Seconds as a duration: positive, finite and below [`MAX_SECONDS`], else `None`.
pub fn seconds(v: f64) -> Option<std::time::Duration> {
    (v.is_finite() && v > 0.0 && v < MAX_SECONDS).then(|| std::time::Duration::from_secs_f64(v))
}

/// The longest duration any setting takes, in seconds (about 31 years).
pub const MAX_SECONDS: f64 = 1e9;

/// The range a duration setting takes, in seconds: what the file, the flag and the error
/// message all use.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SecondsRange {
    pub min: f64,
    pub max: f64,
}

/// `tickInterval`: 10 ms (faster burns a core for nothing) to a minute (slower and the
/// planner looks dead to people waiting for a placement).
pub const TICK_INTERVAL: SecondsRange = SecondsRange { min: 0.01, max: 60.0 };
/// `heartbeatInterval`: 50 ms to 10 minutes.
pub const HEARTBEAT_INTERVAL: SecondsRange = SecondsRange { min: 0.05, max: 600.0 };
/// `nodeLostAfter`: 100 ms to a year.
pub const NODE_LOST_AFTER: SecondsRange = SecondsRange {
    min: 0.1,
    max: 365.0 * 86_400.0,
};

/// A duration setting out of its [`SecondsRange`]; the file and the flag name the key.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[error("expected seconds from {} to {}, got {found}", range.min, range.max)]
pub struct SecondsError {
    pub range: SecondsRange,
    pub found: f64,
}

impl SecondsRange {
    /// `v` seconds when in range, else what was expected and what came.
    pub fn check(self, v: f64) -> Result<std::time::Duration, SecondsError> {
        if v.is_finite() && (self.min..=self.max).contains(&v) {
            Ok(std::time::Duration::from_secs_f64(v))
        } else {
            Err(SecondsError { range: self, found: v })
        }
    }
}

/// Checks `[server]`; `at` turns an offset and a message into an error naming the line.
pub fn server_config(
    raw: Option<RawServer>,
    at: &dyn Fn(usize, String) -> ConfigError,
) -> Result<ServerConfig, ConfigError> {
    let mut server = ServerConfig::default();
    if let Some(s) = raw {
        if let Some(l) = s.listen {
            server.listen = l.get_ref().parse().map_err(|_| {
                at(
                    l.span().start,
                    format!(
                        "server.listen: expected IP:PORT (e.g. 0.0.0.0:7400), got {:?}",
                        l.get_ref()
                    ),
                )
            })?;
        }
        if let Some(d) = s.cert_dir {
            server.cert_dir = d.into();
        }
        if let Some(p) = s.private_data {
            server.private_data = p;
        }
        for (key, value, range, target) in [
            (
                "tickInterval",
                s.tick_interval,
                TICK_INTERVAL,
                &mut server.tick_interval,
            ),
            (
                "heartbeatInterval",
                s.heartbeat_interval,
                HEARTBEAT_INTERVAL,
                &mut server.heartbeat_interval,
            ),
            (
                "nodeLostAfter",
                s.node_lost_after,
                NODE_LOST_AFTER,
                &mut server.node_lost_after,
            ),
        ] {
            if let Some(v) = value {
                *target = range
                    .check(*v.get_ref())
                    .map_err(|e| at(v.span().start, format!("server.{key}: {e}")))?;
            }
        }
        if let Some(m) = s.missed_heartbeats {
            if *m.get_ref() == 0 {
                return Err(at(
                    m.span().start,
                    "server.missedHeartbeats: expected at least 1".into(),
                ));
            }
            server.missed_heartbeats = *m.get_ref();
        }
        if let Some(m) = s.max_frame_bytes {
            let v = *m.get_ref();
            if !(1024..=1 << 30).contains(&v) {
                return Err(at(
                    m.span().start,
                    format!("server.maxFrameBytes: expected 1024 to 1073741824, got {v}"),
                ));
            }
            server.max_frame_bytes = v as usize;
        }
    }
    Ok(server)
}
