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
//! span = "minimal"   # or "volcano": see below
//! ```
//!
//! `span` is ours, not Volcano's: with `"minimal"` (the default) a topology job gets, in
//! the lowest tier that can hold it, the HyperNode whose placement spans the fewest
//! leaves; `"volcano"` keeps Volcano's choice (best bin-pack score) exactly.
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
//!
//! `[[discovery]]` entries say where HyperNodes come from (see [`SourceSpec`] for each
//! source's keys). Relative paths are relative to the directory of planner.toml.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bevy_ecs::prelude::Resource;
use hyperplan_fabric::ufm::config::DEFAULT_INTERVAL as UFM_DEFAULT_INTERVAL;
use hyperplan_fabric::ufm::{UfmConfig, parse_duration};
use serde::Deserialize;
use toml::Spanned;

pub use crate::core::components::SourceKind;
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
    /// When the core turns a silent node NotReady: `[server]`'s heartbeat keys
    /// ([`ServerConfig::health`]), derived again by the daemon when it starts so its
    /// flags count. The simulator's nodes have no heartbeats.
    pub health: HealthConfig,
}

/// Node health as the core decides it (`core::health`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthConfig {
    /// How often agents heartbeat.
    pub heartbeat_interval: Duration,
    /// Silent intervals after which a node is NotReady.
    pub missed_heartbeats: u32,
}

impl HealthConfig {
    /// How long a node may be silent and stay Ready.
    pub fn silent_after(&self) -> Duration {
        self.heartbeat_interval * self.missed_heartbeats
    }
}

impl Default for HealthConfig {
    fn default() -> Self {
        ServerConfig::default().health()
    }
}

/// Where the daemon's HyperNodes come from (`[[discovery]]` entries in planner.toml).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DiscoveryConfig {
    /// `source = "label"`: Volcano's `networkTopologyTypes`, type name → node label keys,
    /// top tier first. Event driven: it follows the labels agents report.
    pub label: BTreeMap<String, Vec<String>>,
    /// Every other source, read at start, every `interval` and on SIGHUP, in config order.
    pub sources: Vec<SourceConfig>,
}

/// One polled discovery source.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceConfig {
    /// `name`: unique among the entries; defaults to the source kind. Each source owns
    /// (and only ever replaces or deletes) the HyperNodes it made.
    pub name: String,
    /// `interval`: how often it is read again (also once at start and on SIGHUP).
    pub interval: Duration,
    pub spec: SourceSpec,
}

/// What a polled source reads, with its own keys.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceSpec {
    /// `source = "static"`, `files = ["hypernodes.yaml"]`: Volcano HyperNode manifests.
    Static { files: Vec<PathBuf> },
    /// `source = "ibnetdiscover"`: `file = "fabric.out"` (a saved dump) or
    /// `command = ["ibnetdiscover"]` (run on every poll, `timeout`), and an optional
    /// `guidMap = "hosts.map"` for CAs that neither agents nor descriptions name.
    Ibnetdiscover {
        input: DumpInput,
        guid_map: Option<PathBuf>,
    },
    /// `source = "ufm"`: `endpoint`, `credentialsFile`, `insecureSkipVerify`, `caFile`,
    /// `timeout` (the poll period is the entry's `interval`).
    Ufm(UfmConfig),
    /// `source = "slurm"`, `file = "/etc/slurm/topology.conf"`.
    Slurm { file: PathBuf },
}

/// Where an ibnetdiscover dump comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum DumpInput {
    File(PathBuf),
    /// Program and arguments (no shell), killed after `timeout`.
    Command {
        argv: Vec<String>,
        timeout: Duration,
    },
}

impl SourceSpec {
    pub fn kind(&self) -> SourceKind {
        match self {
            SourceSpec::Static { .. } => SourceKind::Static,
            SourceSpec::Ibnetdiscover { .. } => SourceKind::Ibnetdiscover,
            SourceSpec::Ufm(_) => SourceKind::Ufm,
            SourceSpec::Slurm { .. } => SourceKind::Slurm,
        }
    }

    /// What it reads, for people: files, the command, the URL.
    pub fn target(&self) -> String {
        match self {
            SourceSpec::Static { files } => files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            SourceSpec::Ibnetdiscover { input, guid_map } => {
                let dump = match input {
                    DumpInput::File(f) => f.display().to_string(),
                    DumpInput::Command { argv, .. } => format!("`{}`", argv.join(" ")),
                };
                match guid_map {
                    Some(m) => format!("{dump} (GUID map {})", m.display()),
                    None => dump,
                }
            }
            SourceSpec::Ufm(u) => u.ports_url(),
            SourceSpec::Slurm { file } => file.display().to_string(),
        }
    }
}

/// How often a source is read when its entry gives no `interval`. Files are cheap to
/// look at again (and re-parsed only when their content changed); a fabric sweep or a
/// UFM query is not, so those follow Volcano's hour.
pub fn default_interval(spec: &SourceSpec) -> Duration {
    match spec {
        SourceSpec::Static { .. } | SourceSpec::Slurm { .. } => Duration::from_secs(60),
        SourceSpec::Ibnetdiscover {
            input: DumpInput::File(_),
            ..
        } => Duration::from_secs(60),
        SourceSpec::Ibnetdiscover {
            input: DumpInput::Command { .. },
            ..
        }
        | SourceSpec::Ufm(_) => UFM_DEFAULT_INTERVAL,
    }
}

/// How long `command = [...]` may run when the entry gives no `timeout`.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(300);

/// One `[[discovery]]` entry as written: every key any source takes, checked per source.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSource {
    source: Spanned<String>,
    #[serde(default = "yes")]
    enabled: bool,
    name: Option<Spanned<String>>,
    interval: Option<Spanned<toml::Value>>,
    types: Option<Spanned<BTreeMap<String, Vec<String>>>>,
    files: Option<Spanned<Vec<String>>>,
    file: Option<Spanned<String>>,
    command: Option<Spanned<Vec<String>>>,
    guid_map: Option<Spanned<String>>,
    endpoint: Option<Spanned<String>>,
    credentials_file: Option<Spanned<String>>,
    insecure_skip_verify: Option<Spanned<bool>>,
    ca_file: Option<Spanned<String>>,
    timeout: Option<Spanned<toml::Value>>,
}

impl RawSource {
    /// The keys that are set, with where they start.
    fn set_keys(&self) -> Vec<(&'static str, usize)> {
        let mut keys = Vec::new();
        let mut add = |k: &'static str, span: Option<std::ops::Range<usize>>| {
            if let Some(s) = span {
                keys.push((k, s.start));
            }
        };
        add("name", self.name.as_ref().map(Spanned::span));
        add("interval", self.interval.as_ref().map(Spanned::span));
        add("types", self.types.as_ref().map(Spanned::span));
        add("files", self.files.as_ref().map(Spanned::span));
        add("file", self.file.as_ref().map(Spanned::span));
        add("command", self.command.as_ref().map(Spanned::span));
        add("guidMap", self.guid_map.as_ref().map(Spanned::span));
        add("endpoint", self.endpoint.as_ref().map(Spanned::span));
        add("credentialsFile", self.credentials_file.as_ref().map(Spanned::span));
        add(
            "insecureSkipVerify",
            self.insecure_skip_verify.as_ref().map(Spanned::span),
        );
        add("caFile", self.ca_file.as_ref().map(Spanned::span));
        add("timeout", self.timeout.as_ref().map(Spanned::span));
        keys
    }
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

impl ServerConfig {
    /// What the core needs of these keys to decide node health.
    pub fn health(&self) -> HealthConfig {
        HealthConfig {
            heartbeat_interval: self.heartbeat_interval,
            missed_heartbeats: self.missed_heartbeats,
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
    /// How a topology job picks among the HyperNodes of its lowest feasible tier.
    pub span: SpanMode,
}

/// `[scoring] span`: which HyperNode of the lowest tier that can hold a gang it gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SpanMode {
    /// The one whose placement spans the fewest leaves, then the tightest fit, then
    /// Volcano's bin-pack score, then name; tasks fill those leaves, most room first.
    #[default]
    Minimal,
    /// Volcano's order: best bin-pack score first, tasks by LCA score then node name.
    Volcano,
}

impl std::str::FromStr for SpanMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "minimal" => Ok(Self::Minimal),
            "volcano" => Ok(Self::Volcano),
            other => Err(format!("expected \"minimal\" or \"volcano\", got {other:?}")),
        }
    }
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
            span: SpanMode::default(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    scoring: BTreeMap<String, Spanned<toml::Value>>,
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

    /// Parses `planner.toml` text; `origin` names the file in errors, and relative paths
    /// in `[[discovery]]` are taken relative to its directory.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let at = |offset: usize, message: String| parse_error(text, origin, offset, message);
        let raw: RawConfig =
            toml::from_str(text).map_err(|e| at(e.span().map_or(usize::MAX, |s| s.start), e.message().to_string()))?;
        let mut numa = NumaConfig::default();
        if let Some(n) = raw.numa {
            if let Some(p) = n.default_policy {
                numa.default_policy = p
                    .get_ref()
                    .parse()
                    .map_err(|e: String| at(p.span().start, format!("numa.defaultPolicy: {e}")))?;
            }
            if let Some(w) = n.weight {
                if w.get_ref().is_nan() || *w.get_ref() < 0.0 {
                    return Err(at(
                        w.span().start,
                        format!("numa.weight: expected a number ≥ 0, got {}", w.get_ref()),
                    ));
                }
                numa.weight = *w.get_ref();
            }
        }
        let mut server = ServerConfig::default();
        if let Some(s) = raw.server {
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
                            v.span().start,
                            format!("server.{key}: expected seconds > 0, got {}", v.get_ref()),
                        )
                    })?;
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
        let base = Path::new(origin).parent().unwrap_or(Path::new(""));
        let discovery = discovery_config(raw.discovery, base, &at)?;
        let args: BTreeMap<String, toml::Value> = raw
            .scoring
            .iter()
            .map(|(k, v)| (k.clone(), v.get_ref().clone()))
            .collect();
        let mut scoring = ScoringConfig::from_args(&args);
        if let Some(v) = raw.scoring.get("span") {
            let mode = match v.get_ref() {
                toml::Value::String(s) => s.parse(),
                other => Err(format!("expected \"minimal\" or \"volcano\", got {}", other.type_str())),
            };
            scoring.span = mode.map_err(|e| at(v.span().start, format!("scoring.span: {e}")))?;
        }
        Ok(Self {
            health: server.health(),
            scoring,
            numa,
            server,
            discovery,
        })
    }
}

/// The `[[discovery]]` entries: each source's keys checked, names unique, paths resolved.
fn discovery_config(
    raw: Vec<RawSource>,
    base: &Path,
    at: &dyn Fn(usize, String) -> ConfigError,
) -> Result<DiscoveryConfig, ConfigError> {
    let mut discovery = DiscoveryConfig::default();
    // name → where it was first given, for duplicates.
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    for (i, d) in raw.into_iter().enumerate() {
        let here = d.source.span().start;
        let kind = d.source.get_ref().as_str();
        let allowed: &[&str] = match kind {
            "label" => &["name", "types"],
            "static" => &["name", "interval", "files"],
            "ibnetdiscover" => &["name", "interval", "file", "command", "guidMap", "timeout"],
            "ufm" => &[
                "name",
                "interval",
                "endpoint",
                "credentialsFile",
                "insecureSkipVerify",
                "caFile",
                "timeout",
            ],
            "slurm" => &["name", "interval", "file"],
            other => {
                return Err(at(
                    here,
                    format!(
                        "discovery[{i}].source: expected \"label\", \"static\", \"ibnetdiscover\", \"ufm\" or \"slurm\", got {other:?}"
                    ),
                ));
            }
        };
        if let Some((key, offset)) = d.set_keys().into_iter().find(|(k, _)| !allowed.contains(k)) {
            return Err(at(
                offset,
                format!(
                    "discovery[{i}].{key}: source \"{kind}\" has no key `{key}`; it takes {}",
                    allowed.join(", ")
                ),
            ));
        }
        if !d.enabled {
            continue;
        }
        let name = match &d.name {
            Some(n) if n.get_ref().trim().is_empty() => {
                return Err(at(
                    n.span().start,
                    format!("discovery[{i}].name: expected a non-empty name"),
                ));
            }
            Some(n) => n.get_ref().trim().to_string(),
            None => kind.to_string(),
        };
        let name_at = d.name.as_ref().map_or(here, |n| n.span().start);
        if names.insert(name.clone(), name_at).is_some() {
            return Err(at(
                name_at,
                format!(
                    "discovery[{i}]: a second source named {name:?}; give each [[discovery]] of the same kind its own `name = \"…\"`"
                ),
            ));
        }
        let path = |p: &Spanned<String>| -> PathBuf { base.join(p.get_ref()) };
        let need = |key: &str, example: &str| {
            at(
                here,
                format!("discovery[{i}]: source \"{kind}\" needs `{key} = {example}`"),
            )
        };
        let duration = |key: &str, v: &Spanned<toml::Value>| -> Result<Duration, ConfigError> {
            let parsed = match v.get_ref() {
                toml::Value::String(s) => parse_duration(s),
                toml::Value::Integer(n) if *n > 0 => Ok(Duration::from_secs(*n as u64)),
                toml::Value::Float(f) => seconds(*f).ok_or_else(|| format!("expected seconds > 0, got {f}")),
                other => Err(format!(
                    "expected a duration such as \"1h\", \"30m\", \"90s\" or seconds > 0, got {}",
                    other.type_str()
                )),
            };
            parsed.map_err(|e| at(v.span().start, format!("discovery[{i}].{key}: {e}")))
        };
        let spec = match kind {
            "label" => {
                let types = d
                    .types
                    .ok_or_else(|| need("types", "{ NAME = [\"top-label\", …, \"leaf-label\"] }"))?;
                if let Some((k, _)) = types.get_ref().iter().find(|(_, v)| v.is_empty()) {
                    return Err(at(
                        types.span().start,
                        format!("discovery[{i}].types.{k}: expected at least one label key"),
                    ));
                }
                discovery.label.extend(types.into_inner());
                continue;
            }
            "static" => {
                let files = d.files.ok_or_else(|| need("files", "[\"hypernodes.yaml\"]"))?;
                if files.get_ref().is_empty() {
                    return Err(at(
                        files.span().start,
                        format!("discovery[{i}].files: expected at least one file"),
                    ));
                }
                SourceSpec::Static {
                    files: files.get_ref().iter().map(|f| base.join(f)).collect(),
                }
            }
            "ibnetdiscover" => {
                let input = match (&d.file, &d.command) {
                    (Some(f), None) => {
                        if let Some(t) = &d.timeout {
                            return Err(at(
                                t.span().start,
                                format!(
                                    "discovery[{i}].timeout: only a `command` has a timeout; a `file` is read as it is"
                                ),
                            ));
                        }
                        DumpInput::File(path(f))
                    }
                    (None, Some(c)) => {
                        if c.get_ref().first().is_none_or(|p| p.trim().is_empty()) {
                            return Err(at(
                                c.span().start,
                                format!(
                                    "discovery[{i}].command: expected a program and its arguments, e.g. [\"ibnetdiscover\"]"
                                ),
                            ));
                        }
                        DumpInput::Command {
                            argv: c.get_ref().clone(),
                            timeout: match &d.timeout {
                                Some(t) => duration("timeout", t)?,
                                None => DEFAULT_COMMAND_TIMEOUT,
                            },
                        }
                    }
                    (Some(_), Some(c)) => {
                        return Err(at(
                            c.span().start,
                            format!("discovery[{i}]: give `file` or `command`, not both"),
                        ));
                    }
                    (None, None) => {
                        return Err(need(
                            "file",
                            "\"/var/lib/hyperplan/fabric.out\"` (a saved dump) or `command = [\"ibnetdiscover\"]",
                        ));
                    }
                };
                SourceSpec::Ibnetdiscover {
                    input,
                    guid_map: d.guid_map.as_ref().map(path),
                }
            }
            "ufm" => {
                let endpoint = d.endpoint.ok_or_else(|| need("endpoint", "\"https://ufm.example\""))?;
                if endpoint.get_ref().trim().is_empty() {
                    return Err(at(
                        endpoint.span().start,
                        format!("discovery[{i}].endpoint: expected a URL or host"),
                    ));
                }
                let credentials = d
                    .credentials_file
                    .ok_or_else(|| need("credentialsFile", "\"/etc/hyperplan/ufm.credentials\""))?;
                let mut ufm = UfmConfig::new(endpoint.get_ref().trim(), path(&credentials));
                ufm.insecure_skip_verify = d.insecure_skip_verify.is_some_and(Spanned::into_inner);
                ufm.ca_file = d.ca_file.as_ref().map(path);
                if let Some(t) = &d.timeout {
                    ufm.timeout = duration("timeout", t)?;
                }
                SourceSpec::Ufm(ufm)
            }
            _ => SourceSpec::Slurm {
                file: path(&d.file.ok_or_else(|| need("file", "\"/etc/slurm/topology.conf\""))?),
            },
        };
        let interval = match &d.interval {
            Some(v) => duration("interval", v)?,
            None => default_interval(&spec),
        };
        let mut spec = spec;
        if let SourceSpec::Ufm(u) = &mut spec {
            u.interval = interval;
        }
        discovery.sources.push(SourceConfig { name, interval, spec });
    }
    Ok(discovery)
}

/// `FILE:LINE:COLUMN: message` for a byte offset into the text (past the end: the end).
fn parse_error(text: &str, origin: &str, offset: usize, message: String) -> ConfigError {
    let (line, column) = line_col(text, offset);
    ConfigError::Parse {
        path: origin.to_string(),
        line,
        column,
        message,
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
            span: SpanMode::default(),
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
    fn every_commented_discovery_example_in_the_shipped_file_parses() -> Result<(), ConfigError> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd/planner.toml");
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let mut blocks = Vec::new();
        let mut current: Option<String> = None;
        for line in text.lines() {
            match (line.strip_prefix("# "), &mut current) {
                (Some("[[discovery]]"), _) => {
                    blocks.extend(current.take());
                    current = Some("[[discovery]]\n".into());
                }
                (Some(l), Some(block)) => block.push_str(&format!("{l}\n")),
                (None, Some(_)) => blocks.extend(current.take()),
                (Some(_), None) | (None, None) => {}
            }
        }
        blocks.extend(current);
        assert_eq!(blocks.len(), 5, "{blocks:#?}");
        let kinds: Vec<SourceKind> = blocks
            .iter()
            .map(|b| PlannerConfig::parse(b, "planner.toml").map(|c| c.discovery.sources[0].spec.kind()))
            .collect::<Result<_, _>>()?;
        use SourceKind::*;
        assert_eq!(kinds, vec![Static, Ibnetdiscover, Ibnetdiscover, Ufm, Slurm]);
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
        assert_eq!(
            cfg.discovery.sources,
            vec![SourceConfig {
                name: "static".into(),
                interval: Duration::from_secs(60),
                spec: SourceSpec::Static {
                    files: vec![PathBuf::from("hn.yaml")]
                },
            }]
        );
        let err = PlannerConfig::parse("[[discovery]]\nsource = \"magic\"\n", "p.toml");
        let msg = err.map(|_| ()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.starts_with("p.toml:2:10: discovery[0].source: expected"), "{msg}");
        let err = PlannerConfig::parse("[server]\nlisten = \"nowhere\"\n", "p.toml");
        let msg = err.map(|_| ()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("server.listen: expected IP:PORT"), "{msg}");
        Ok(())
    }

    fn error(text: &str) -> String {
        PlannerConfig::parse(text, "/etc/hyperplan/planner.toml")
            .map(|_| ())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn every_fabric_source_with_its_keys_defaults_and_paths() -> Result<(), ConfigError> {
        let cfg = PlannerConfig::parse(
            r#"
[[discovery]]
source = "ibnetdiscover"
file = "fabric.out"
guidMap = "/etc/hyperplan/hosts.map"

[[discovery]]
source = "ibnetdiscover"
name = "fabric-b"
command = ["ibnetdiscover", "-p"]
interval = "6h"
timeout = "2m"

[[discovery]]
source = "ufm"
endpoint = "ufm.lab"
credentialsFile = "ufm.credentials"
insecureSkipVerify = true
interval = 900
timeout = 10

[[discovery]]
source = "slurm"
file = "/etc/slurm/topology.conf"
interval = 30.5

[[discovery]]
source = "slurm"
name = "old"
enabled = false
"#,
            "/etc/hyperplan/planner.toml",
        )?;
        let s = &cfg.discovery.sources;
        assert_eq!(s.len(), 4, "the disabled entry is left out: {s:#?}");
        assert_eq!(
            s[0],
            SourceConfig {
                name: "ibnetdiscover".into(),
                interval: Duration::from_secs(60),
                spec: SourceSpec::Ibnetdiscover {
                    input: DumpInput::File("/etc/hyperplan/fabric.out".into()),
                    guid_map: Some("/etc/hyperplan/hosts.map".into()),
                },
            }
        );
        assert_eq!(s[1].name, "fabric-b");
        assert_eq!(s[1].interval, Duration::from_secs(6 * 3600));
        assert_eq!(
            s[1].spec,
            SourceSpec::Ibnetdiscover {
                input: DumpInput::Command {
                    argv: vec!["ibnetdiscover".into(), "-p".into()],
                    timeout: Duration::from_secs(120),
                },
                guid_map: None,
            }
        );
        assert_eq!(s[1].spec.target(), "`ibnetdiscover -p`");
        let SourceSpec::Ufm(u) = &s[2].spec else {
            panic!("{:?}", s[2])
        };
        assert_eq!(u.ports_url(), "https://ufm.lab/ufmRest/resources/ports");
        assert_eq!(u.credentials_file, PathBuf::from("/etc/hyperplan/ufm.credentials"));
        assert!(u.insecure_skip_verify);
        assert_eq!(
            (u.interval, u.timeout),
            (Duration::from_secs(900), Duration::from_secs(10))
        );
        assert_eq!(s[2].interval, Duration::from_secs(900));
        assert_eq!(s[3].spec.kind(), SourceKind::Slurm);
        assert_eq!(s[3].interval, Duration::from_millis(30_500));
        // A command sweeps the fabric: hourly unless told otherwise, with a 5 min budget.
        let cfg = PlannerConfig::parse(
            "[[discovery]]\nsource = \"ibnetdiscover\"\ncommand = [\"ibnetdiscover\"]\n",
            "p.toml",
        )?;
        assert_eq!(cfg.discovery.sources[0].interval, Duration::from_secs(3600));
        Ok(())
    }

    #[test]
    fn discovery_errors_name_the_line_the_key_and_what_was_expected() {
        let cases = [
            (
                "[[discovery]]\nsource = \"ufm\"\nendpoint = \"u\"\nfiles = [\"x\"]\ncredentialsFile = \"c\"\n",
                "planner.toml:4:9: discovery[0].files: source \"ufm\" has no key `files`; it takes name, interval, endpoint, credentialsFile, insecureSkipVerify, caFile, timeout",
            ),
            (
                "[[discovery]]\nsource = \"ufm\"\nendpoint = \"u\"\n",
                "planner.toml:2:10: discovery[0]: source \"ufm\" needs `credentialsFile = \"/etc/hyperplan/ufm.credentials\"`",
            ),
            (
                "[[discovery]]\nsource = \"ibnetdiscover\"\n",
                "planner.toml:2:10: discovery[0]: source \"ibnetdiscover\" needs `file = \"/var/lib/hyperplan/fabric.out\"` (a saved dump) or `command = [\"ibnetdiscover\"]`",
            ),
            (
                "[[discovery]]\nsource = \"ibnetdiscover\"\nfile = \"f\"\ncommand = [\"ibnetdiscover\"]\n",
                "planner.toml:4:11: discovery[0]: give `file` or `command`, not both",
            ),
            (
                "[[discovery]]\nsource = \"ibnetdiscover\"\nfile = \"f\"\ntimeout = 5\n",
                "planner.toml:4:11: discovery[0].timeout: only a `command` has a timeout",
            ),
            (
                "[[discovery]]\nsource = \"ibnetdiscover\"\ncommand = []\n",
                "planner.toml:3:11: discovery[0].command: expected a program and its arguments",
            ),
            (
                "[[discovery]]\nsource = \"slurm\"\nfile = \"t\"\ninterval = \"soon\"\n",
                "planner.toml:4:12: discovery[0].interval: expected a duration such as",
            ),
            (
                "[[discovery]]\nsource = \"slurm\"\nfile = \"t\"\ninterval = 0\n",
                "planner.toml:4:12: discovery[0].interval: expected a duration",
            ),
            (
                "[[discovery]]\nsource = \"slurm\"\nfile = \"a\"\n[[discovery]]\nsource = \"slurm\"\nfile = \"b\"\n",
                "planner.toml:5:10: discovery[1]: a second source named \"slurm\"; give each [[discovery]] of the same kind its own `name = \"…\"`",
            ),
            (
                "[[discovery]]\nsource = \"label\"\ntypes = { t = [\"a\"] }\ninterval = \"1h\"\n",
                "planner.toml:4:12: discovery[0].interval: source \"label\" has no key `interval`",
            ),
            (
                "[[discovery]]\nsource = \"static\"\nfiles = []\n",
                "planner.toml:3:9: discovery[0].files: expected at least one file",
            ),
            (
                "[[discovery]]\nsource = \"slurm\"\nfile = \"t\"\nbogus = 1\n",
                "planner.toml:4:1: unknown field `bogus`",
            ),
        ];
        for (text, expected) in cases {
            let msg = error(text);
            assert!(
                msg.starts_with(&format!("/etc/hyperplan/{expected}")),
                "{text}\n  got: {msg}\n want: {expected}"
            );
        }
    }

    #[test]
    fn span_mode_and_its_errors() -> Result<(), ConfigError> {
        assert_eq!(PlannerConfig::parse("", "p.toml")?.scoring.span, SpanMode::Minimal);
        let v = PlannerConfig::parse("[scoring]\nspan = \"volcano\"\n", "p.toml")?;
        assert_eq!(v.scoring.span, SpanMode::Volcano);
        let bad = |text: &str| match PlannerConfig::parse(text, "p.toml") {
            Ok(_) => panic!("{text:?} parsed"),
            Err(e) => e.to_string(),
        };
        assert_eq!(
            bad("[scoring]\nweight = 1\nspan = \"fewest\"\n"),
            "p.toml:3:8: scoring.span: expected \"minimal\" or \"volcano\", got \"fewest\""
        );
        assert_eq!(
            bad("[scoring]\nspan = 2\n"),
            "p.toml:2:8: scoring.span: expected \"minimal\" or \"volcano\", got integer"
        );
        Ok(())
    }

    #[test]
    fn unknown_section_names_line() {
        let err = PlannerConfig::parse("[scoring]\nweight = 1\n[bogus]\nx = 1\n", "p.toml");
        let msg = err.map(|_| ()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.starts_with("p.toml:3:"), "{msg}");
    }
}
