//! `[[discovery]]`: where the daemon's HyperNodes come from, one entry per source, each
//! with its own keys (see [`SourceSpec`]). Relative paths are relative to the directory of
//! planner.toml.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyperplan_core::config::ConfigError;
use hyperplan_fabric::ufm::config::DEFAULT_INTERVAL as UFM_DEFAULT_INTERVAL;
use hyperplan_fabric::ufm::{UfmConfig, parse_duration};
use serde::Deserialize;
use toml::Spanned;

pub use hyperplan_core::model::components::SourceKind;

use super::server::seconds;

/// Where the daemon's HyperNodes come from (`[[discovery]]` entries in planner.toml).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DiscoveryConfig {
    /// `source = "label"`: Volcano's `networkTopologyTypes`, type name → node label keys,
    /// top tier first. Event driven: it follows the labels agents report.
    pub label: BTreeMap<String, Vec<String>>,
    /// `source = "nvlink"`, `enabled = false`: no HyperNodes from the NVLink domains agents
    /// report. On by default: nodes without a multi-node NVLink domain make none.
    pub nvlink_off: bool,
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
pub struct RawSource {
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

/// The `[[discovery]]` entries: each source's keys checked, names unique, paths resolved.
pub fn discovery_config(
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
            "nvlink" => &[],
            other => {
                return Err(at(
                    here,
                    format!(
                        "discovery[{i}].source: expected \"label\", \"static\", \"ibnetdiscover\", \"ufm\", \"slurm\" or \"nvlink\", got {other:?}"
                    ),
                ));
            }
        };
        if let Some((key, offset)) = d.set_keys().into_iter().find(|(k, _)| !allowed.contains(k)) {
            let takes = if allowed.is_empty() {
                "it takes only `enabled`".to_string()
            } else {
                format!("it takes {}", allowed.join(", "))
            };
            return Err(at(
                offset,
                format!("discovery[{i}].{key}: source \"{kind}\" has no key `{key}`; {takes}"),
            ));
        }
        if kind == "nvlink" {
            discovery.nvlink_off = !d.enabled;
            continue;
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
                toml::Value::String(s) => parse_duration(s).map_err(|e| e.to_string()),
                toml::Value::Integer(n) if *n > 0 => Ok(Duration::from_secs(*n as u64)),
                toml::Value::Float(f) => {
                    seconds(*f).ok_or_else(|| format!("expected seconds > 0 and below 1000000000, got {f}"))
                }
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
