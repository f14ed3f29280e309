//! Planner configuration (`planner.toml`). The `[scoring]` section takes Volcano's
//! network-topology-aware plugin arguments under their own names, as quoted TOML keys:
//!
//! ```toml
//! [scoring]
//! weight = 1
//! "hypernode.binpack.cpu" = 5
//! "hypernode.binpack.memory" = 1
//! "hypernode.binpack.resources" = "nvidia.com/gpu"
//! "hypernode.binpack.resources.nvidia.com/gpu" = 2
//! "hypernode.binpack.normal-pod.enable" = true
//! "hypernode.binpack.normal-pod.fading" = 0.8
//! ```
//!
//! Invalid values fall back to Volcano's defaults, as the plugin does (a negative
//! weight becomes 1, a negative fading 0.8, a non-bool `enable` is ignored).
//!
//! The `[numa]` section holds the numa-aware plugin's settings:
//!
//! ```toml
//! [numa]
//! defaultPolicy = "none"   # none | best-effort | restricted | single-numa-node
//! weight = 1               # numa-aware node score weight (Volcano's plugin weight)
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use bevy_ecs::prelude::Resource;
use serde::Deserialize;

use crate::core::numa::hints::Policy;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}:{line}:{column}: {message}")]
    Parse {
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
}

/// Everything the planner core reads from its configuration.
#[derive(Clone, Debug, Default, PartialEq, Resource)]
pub struct PlannerConfig {
    pub scoring: ScoringConfig,
    pub numa: NumaConfig,
    /// The daemon's `[server]` section (the simulator ignores it).
    pub server: ServerConfig,
    /// The daemon's `[[discovery]]` sources (the simulator takes its cluster file's).
    pub discovery: DiscoveryConfig,
}

/// Where the daemon's HyperNodes come from (`[[discovery]]` entries in planner.toml).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DiscoveryConfig {
    /// `source = "label"`: Volcano's `networkTopologyTypes`, type name → node label keys,
    /// top tier first.
    pub label: BTreeMap<String, Vec<String>>,
    /// `source = "static"`: Volcano HyperNode manifest files.
    pub static_files: Vec<std::path::PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSource {
    source: toml::Spanned<String>,
    #[serde(default = "yes")]
    enabled: bool,
    types: Option<BTreeMap<String, Vec<String>>>,
    files: Option<Vec<String>>,
}

fn yes() -> bool {
    true
}

/// Where the daemon listens and how it keeps time (`[server]` in planner.toml; every key
/// is also a flag of `hyperplan-planner`).
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
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: std::net::SocketAddr::from(([0, 0, 0, 0], DEFAULT_PORT)),
            cert_dir: std::path::PathBuf::from("/etc/hyperplan/certs"),
            tick_interval: std::time::Duration::from_secs(1),
            heartbeat_interval: std::time::Duration::from_secs(1),
            missed_heartbeats: 3,
            max_frame_bytes: 16 * 1024 * 1024,
        }
    }
}

/// The planner's default UDP port.
pub const DEFAULT_PORT: u16 = 7400;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawServer {
    listen: Option<toml::Spanned<String>>,
    cert_dir: Option<String>,
    tick_interval: Option<toml::Spanned<f64>>,
    heartbeat_interval: Option<toml::Spanned<f64>>,
    missed_heartbeats: Option<toml::Spanned<u32>>,
    max_frame_bytes: Option<toml::Spanned<u64>>,
}

/// Seconds as a duration: positive and finite, else `None`.
pub fn seconds(v: f64) -> Option<std::time::Duration> {
    (v.is_finite() && v > 0.0 && v < 1e9).then(|| std::time::Duration::from_secs_f64(v))
}

/// The numa-aware plugin's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct NumaConfig {
    /// For tasks that name no `topologyPolicy`.
    pub default_policy: Policy,
    /// Weight of the numa-aware node score (fewer NUMA nodes spanned scores higher).
    pub weight: f64,
}

impl Default for NumaConfig {
    fn default() -> Self {
        Self {
            default_policy: Policy::None,
            weight: 1.0,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawNuma {
    default_policy: Option<toml::Spanned<String>>,
    weight: Option<toml::Spanned<f64>>,
}

/// Volcano's network-topology-aware plugin arguments, resolved (§5.1 defaults).
#[derive(Clone, Debug, PartialEq)]
pub struct ScoringConfig {
    pub weight: f64,
    /// Bin-pack weight per resource name; only these resources ever score.
    pub binpack_weights: BTreeMap<String, f64>,
    pub normal_pod_enable: bool,
    pub normal_pod_fading: f64,
}

impl Default for ScoringConfig {
    fn default() -> Self {
        let mut binpack_weights = BTreeMap::new();
        binpack_weights.insert(hyperplan_shared::CPU.to_string(), 1.0);
        binpack_weights.insert(hyperplan_shared::MEMORY.to_string(), 1.0);
        Self {
            weight: 1.0,
            binpack_weights,
            normal_pod_enable: true,
            normal_pod_fading: 0.8,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    scoring: BTreeMap<String, toml::Value>,
    numa: Option<RawNuma>,
    server: Option<RawServer>,
    #[serde(default)]
    discovery: Vec<RawSource>,
}

impl PlannerConfig {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses `planner.toml` text; `origin` names the file in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let (line, column) = e.span().map(|s| line_col(text, s.start)).unwrap_or((0, 0));
            ConfigError::Parse {
                path: origin.to_string(),
                line,
                column,
                message: e.message().to_string(),
            }
        })?;
        let mut numa = NumaConfig::default();
        if let Some(n) = raw.numa {
            let at = |span: std::ops::Range<usize>, message: String| {
                let (line, column) = line_col(text, span.start);
                ConfigError::Parse {
                    path: origin.to_string(),
                    line,
                    column,
                    message,
                }
            };
            if let Some(p) = n.default_policy {
                numa.default_policy = p
                    .get_ref()
                    .parse()
                    .map_err(|e: String| at(p.span(), format!("numa.defaultPolicy: {e}")))?;
            }
            if let Some(w) = n.weight {
                if w.get_ref().is_nan() || *w.get_ref() < 0.0 {
                    return Err(at(
                        w.span(),
                        format!("numa.weight: expected a number ≥ 0, got {}", w.get_ref()),
                    ));
                }
                numa.weight = *w.get_ref();
            }
        }
        let mut server = ServerConfig::default();
        if let Some(s) = raw.server {
            let at = |span: std::ops::Range<usize>, message: String| {
                let (line, column) = line_col(text, span.start);
                ConfigError::Parse {
                    path: origin.to_string(),
                    line,
                    column,
                    message,
                }
            };
            if let Some(l) = s.listen {
                server.listen = l.get_ref().parse().map_err(|_| {
                    at(
                        l.span(),
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
            for (key, value, target) in [
                ("tickInterval", s.tick_interval, &mut server.tick_interval),
                (
                    "heartbeatInterval",
                    s.heartbeat_interval,
                    &mut server.heartbeat_interval,
                ),
            ] {
                if let Some(v) = value {
                    *target = seconds(*v.get_ref()).ok_or_else(|| {
                        at(
                            v.span(),
                            format!("server.{key}: expected seconds > 0, got {}", v.get_ref()),
                        )
                    })?;
                }
            }
            if let Some(m) = s.missed_heartbeats {
                if *m.get_ref() == 0 {
                    return Err(at(m.span(), "server.missedHeartbeats: expected at least 1".into()));
                }
                server.missed_heartbeats = *m.get_ref();
            }
            if let Some(m) = s.max_frame_bytes {
                let v = *m.get_ref();
                if !(1024..=1 << 30).contains(&v) {
                    return Err(at(
                        m.span(),
                        format!("server.maxFrameBytes: expected 1024 to 1073741824, got {v}"),
                    ));
                }
                server.max_frame_bytes = v as usize;
            }
        }
        let mut discovery = DiscoveryConfig::default();
        for d in raw.discovery.into_iter().filter(|d| d.enabled) {
            let at = |message: String| {
                let (line, column) = line_col(text, d.source.span().start);
                ConfigError::Parse {
                    path: origin.to_string(),
                    line,
                    column,
                    message,
                }
            };
            match d.source.get_ref().as_str() {
                "label" => {
                    let types = d.types.ok_or_else(|| {
                        at(
                            "discovery: source \"label\" needs `types = { NAME = [\"top-label\", …, \"leaf-label\"] }`"
                                .into(),
                        )
                    })?;
                    if let Some((k, _)) = types.iter().find(|(_, v)| v.is_empty()) {
                        return Err(at(format!("discovery.types.{k}: expected at least one label key")));
                    }
                    discovery.label.extend(types);
                }
                "static" => {
                    let files = d.files.ok_or_else(|| {
                        at("discovery: source \"static\" needs `files = [\"hypernodes.yaml\"]`".into())
                    })?;
                    discovery.static_files.extend(files.into_iter().map(Into::into));
                }
                other => {
                    return Err(at(format!(
                        "discovery.source: expected \"label\" or \"static\", got {other:?}"
                    )));
                }
            }
        }
        Ok(Self {
            scoring: ScoringConfig::from_args(&raw.scoring),
            numa,
            server,
            discovery,
        })
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

fn number(v: &toml::Value) -> Option<f64> {
    match v {
        toml::Value::Integer(i) => Some(*i as f64),
        toml::Value::Float(f) => Some(*f),
        toml::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A weight argument: missing or negative → `default`, as the plugin does.
fn weight_arg(args: &BTreeMap<String, toml::Value>, key: &str, default: f64) -> f64 {
    match args.get(key).and_then(number) {
        Some(w) if w >= 0.0 => w,
        _ => default,
    }
}

impl ScoringConfig {
    /// Resolves Volcano plugin arguments (string keys as in the plugin's `arguments`).
    pub fn from_args(args: &BTreeMap<String, toml::Value>) -> Self {
        let mut binpack_weights = BTreeMap::new();
        binpack_weights.insert(
            hyperplan_shared::CPU.to_string(),
            weight_arg(args, "hypernode.binpack.cpu", 1.0),
        );
        binpack_weights.insert(
            hyperplan_shared::MEMORY.to_string(),
            weight_arg(args, "hypernode.binpack.memory", 1.0),
        );
        if let Some(toml::Value::String(list)) = args.get("hypernode.binpack.resources") {
            for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                let key = format!("hypernode.binpack.resources.{name}");
                binpack_weights.insert(name.to_string(), weight_arg(args, &key, 1.0));
            }
        }
        let normal_pod_enable = match args.get("hypernode.binpack.normal-pod.enable") {
            Some(toml::Value::Boolean(b)) => *b,
            Some(toml::Value::String(s)) => s.parse().unwrap_or(true),
            _ => true,
        };
        let normal_pod_fading = match args.get("hypernode.binpack.normal-pod.fading").and_then(number) {
            Some(f) if f >= 0.0 => f,
            _ => 0.8,
        };
        Self {
            weight: weight_arg(args, "weight", 1.0),
            binpack_weights,
            normal_pod_enable,
            normal_pod_fading,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volcano_argument_names_and_invalid_values() -> Result<(), ConfigError> {
        let cfg = PlannerConfig::parse(
            r#"
[scoring]
weight = 2
"hypernode.binpack.cpu" = 5
"hypernode.binpack.memory" = -1
"hypernode.binpack.resources" = "nvidia.com/gpu, rdma/hca"
"hypernode.binpack.resources.nvidia.com/gpu" = 2
"hypernode.binpack.resources.unlisted" = 9
"hypernode.binpack.normal-pod.fading" = -0.5
"hypernode.binpack.normal-pod.enable" = 7
"#,
            "planner.toml",
        )?;
        let s = cfg.scoring;
        assert_eq!(s.weight, 2.0);
        assert_eq!(s.binpack_weights["cpu"], 5.0);
        assert_eq!(s.binpack_weights["memory"], 1.0);
        assert_eq!(s.binpack_weights["nvidia.com/gpu"], 2.0);
        assert_eq!(s.binpack_weights["rdma/hca"], 1.0);
        assert!(!s.binpack_weights.contains_key("unlisted"));
        assert_eq!(s.normal_pod_fading, 0.8);
        assert!(s.normal_pod_enable);
        Ok(())
    }

    #[test]
    fn shipped_example_parses_to_the_defaults_plus_gpu() -> Result<(), ConfigError> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd/planner.toml");
        let cfg = PlannerConfig::load(&path)?;
        let mut expected = ScoringConfig::default();
        expected.binpack_weights.insert("nvidia.com/gpu".into(), 1.0);
        assert_eq!(cfg.scoring, expected);
        Ok(())
    }

    #[test]
    fn numa_section() -> Result<(), ConfigError> {
        let cfg = PlannerConfig::parse("[numa]\ndefaultPolicy = \"restricted\"\nweight = 3\n", "p.toml")?;
        assert_eq!(cfg.numa.default_policy, Policy::Restricted);
        assert_eq!(cfg.numa.weight, 3.0);
        let err = PlannerConfig::parse("[numa]\ndefaultPolicy = \"strict\"\n", "p.toml");
        let msg = err.map(|_| ()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            msg.starts_with("p.toml:2:17: numa.defaultPolicy: unknown topology policy"),
            "{msg}"
        );
        Ok(())
    }

    #[test]
    fn server_and_discovery_sections() -> Result<(), ConfigError> {
        let cfg = PlannerConfig::parse(
            "[server]\nlisten = \"127.0.0.1:9000\"\nheartbeatInterval = 0.5\nmissedHeartbeats = 5\n\
             [[discovery]]\nsource = \"label\"\ntypes = { fabric = [\"spine\", \"leaf\"] }\n\
             [[discovery]]\nsource = \"static\"\nfiles = [\"hn.yaml\"]\n",
            "p.toml",
        )?;
        assert_eq!(cfg.server.listen.port(), 9000);
        assert_eq!(cfg.server.heartbeat_interval, std::time::Duration::from_millis(500));
        assert_eq!(cfg.server.missed_heartbeats, 5);
        assert_eq!(cfg.discovery.label["fabric"], vec!["spine", "leaf"]);
        assert_eq!(cfg.discovery.static_files, vec![std::path::PathBuf::from("hn.yaml")]);
        let err = PlannerConfig::parse("[[discovery]]\nsource = \"magic\"\n", "p.toml");
        let msg = err.map(|_| ()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.starts_with("p.toml:2:10: discovery.source: expected"), "{msg}");
        let err = PlannerConfig::parse("[server]\nlisten = \"nowhere\"\n", "p.toml");
        let msg = err.map(|_| ()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("server.listen: expected IP:PORT"), "{msg}");
        Ok(())
    }

    #[test]
    fn unknown_section_names_line() {
        let err = PlannerConfig::parse("[scoring]\nweight = 1\n[bogus]\nx = 1\n", "p.toml");
        let msg = err.map(|_| ()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.starts_with("p.toml:3:"), "{msg}");
    }
}
