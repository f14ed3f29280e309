//! The agent configuration (`/etc/hyperplan/agent.toml`): labels for label discovery,
//! where to read sysfs from, and for `run` the planner, certificates, node name,
//! re-probe interval, and how tasks run (state directory, pinning, root). Every key also
//! has a command-line flag; flags win.
//!
//! ```toml
//! # sysfsRoot = "/sys"
//! planner = "head-1:7443"              # or a leader and its standbys: "head-1:7443,head-2:7443"
//! # certDir = "/etc/hyperplan/certs"
//! # nodeName = "n001"
//! # reprobeInterval = 60
//! # stateDir = "/var/lib/hyperplan-agent"
//! # pin = "auto"
//! # allowRoot = false
//! # taskPidsMax = 4096                 # or "max"
//! # cgroupName = "hyperplan"
//! [exec]
//! # limitsConf = true                   # the user's /etc/security/limits.conf for tasks
//! # rlimits = { memlock = "unlimited", nofile = 65536, core = { soft = 0, hard = "unlimited" } }
//! # defaultMpi = "none"                # or "pmi": a PMI server for every task whose job says nothing
//! # outputMode = "0600"                # tasks' output files: the user's alone (or "0640", "0644")
//! # privateTmp = true                  # each job its own /tmp and /dev/shm (default: where it works)
//! # privateTmpDir = "/var/lib/hyperplan-agent/jobtmp"   # where jobs' /tmp directories go
//! [metrics]
//! # listen = "127.0.0.1:9401"          # the agent's own Prometheus /metrics; default off
//! [health]                             # node health checks, sent in the heartbeat
//! # enabled = true                     # false: no checks at all
//! # interval = 60                      # seconds between two runs of each built-in check
//! # timeout = 30                       # seconds a check may take before it fails "timeout"
//! # paths = ["/scratch", "/tmp"]       # free space and inodes checked here, and on stateDir
//! # minFreePercent = 5                 # less free space fails the path ("disk-space")
//! # minFreeInodesPercent = 5           # fewer free inodes fail it ("disk-inodes")
//! # mounts = ["/scratch", "/home"]     # must be mounted ("mount-missing")
//! # script = ["/usr/sbin/nhc"]         # a site command, no shell: exit 0 healthy, else its first line
//! # scriptInterval = 300               # default: interval
//! # scriptTimeout = 120                # default: timeout; then its process group is killed
//! # ibErrorThreshold = 0               # IB error counters may rise this much between checks
//! # ibWidth = "4x"                     # every IB port's width (default: as first seen ACTIVE)
//! # ibSpeed = "HDR"                    # every IB port's lane speed (default: as first seen)
//! # gpu = true                         # GPUs through NVML, where the library is
//! # xid = true                         # NVIDIA XID errors from /dev/kmsg, where it can be read
//! [labels]
//! rack = "r7"
//! leaf = "ib-leaf-12"
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Where the agent looks for its configuration when `--config` is not given.
pub const DEFAULT_CONFIG: &str = "/etc/hyperplan/agent.toml";

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AgentConfig {
    /// Labels this node reports (label discovery groups nodes by them).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Root of the sysfs tree to read (default `/sys`).
    #[serde(default)]
    pub sysfs_root: Option<PathBuf>,
    /// `hyperplan-agent run`: the planner's `HOST:PORT`, or a comma-separated list of them
    /// (a leader and its standbys; checked by `link::planners::parse_list`).
    #[serde(default)]
    pub planner: Option<String>,
    /// `run`: directory holding `ca.pem` and `nodes/<node>.pem` / `.key`.
    #[serde(default)]
    pub cert_dir: Option<PathBuf>,
    /// `run`: this node's name, as its certificate names it (default: the host name).
    #[serde(default)]
    pub node_name: Option<String>,
    /// `run`: seconds between periodic re-probes (default 60; 0: only on SIGHUP).
    #[serde(default)]
    pub reprobe_interval: Option<u64>,
    /// `run`: where task directories live (default `/var/lib/hyperplan-agent`).
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
    /// `run`: pin tasks to their PUs and NUMA nodes (default `auto`).
    #[serde(default)]
    pub pin: Option<Pin>,
    /// `run`: tasks may run as root (uid 0); default false.
    #[serde(default)]
    pub allow_root: Option<bool>,
    /// `run`: the address other nodes reach this one at (`MASTER_ADDR` of the jobs whose
    /// rank 0 runs here); default: the address the planner sees the agent connect from.
    #[serde(default)]
    pub advertise_address: Option<String>,
    /// `run`: each task's `pids.max` (default 4096), or `"max"` for none of its own.
    #[serde(default)]
    pub task_pids_max: Option<PidsMaxKey>,
    /// `run`: the directory below the agent's cgroup in each cgroup v1 hierarchy that
    /// holds the tasks' cgroups (default `hyperplan`).
    #[serde(default)]
    pub cgroup_name: Option<String>,
    /// `run` and `launcher`: the launcher's socket; the agent starts shepherds through it
    /// (default: none, the agent forks them itself).
    #[serde(default)]
    pub launcher: Option<PathBuf>,
    /// `run`: how tasks are started (`[exec]`).
    #[serde(default)]
    pub exec: ExecSection,
    /// `run`: the agent's own Prometheus endpoint (`[metrics]`).
    #[serde(default)]
    pub metrics: MetricsSection,
    /// `run`: node health checks (`[health]`, see `crate::health`).
    #[serde(default)]
    pub health: HealthSection,
}

/// `[health]`: which checks run on the node and how (`crate::health::HealthOptions`
/// resolves them with their defaults). Each key is checked as it is read: a bad value is
/// an error at its line that names the key and says what it takes.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HealthSection {
    /// false: no checks, and heartbeats carry none (default true).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Seconds between two runs of each built-in check (default 60).
    #[serde(default, deserialize_with = "health_interval")]
    pub interval: Option<u64>,
    /// Seconds a built-in check may take; past them it fails `timeout` (default 30).
    #[serde(default, deserialize_with = "health_timeout")]
    pub timeout: Option<u64>,
    /// Paths whose file systems are checked for free space and inodes, beside the state
    /// directory (always checked).
    #[serde(default, deserialize_with = "health_paths")]
    pub paths: Option<Vec<PathBuf>>,
    /// Free space below this percentage fails a path (default 5).
    #[serde(default, deserialize_with = "health_min_free")]
    pub min_free_percent: Option<f64>,
    /// Free inodes below this percentage fail a path (default 5).
    #[serde(default, deserialize_with = "health_min_free_inodes")]
    pub min_free_inodes_percent: Option<f64>,
    /// Mount points that must be mounted.
    #[serde(default, deserialize_with = "health_mounts")]
    pub mounts: Option<Vec<PathBuf>>,
    /// The site script's argv, run without a shell: `["/usr/sbin/nhc"]` (default none).
    #[serde(default, deserialize_with = "health_script")]
    pub script: Option<Vec<String>>,
    /// Seconds between two runs of the script (default: `interval`).
    #[serde(default, deserialize_with = "health_script_interval")]
    pub script_interval: Option<u64>,
    /// Seconds the script may run before its process group is killed (default: `timeout`).
    #[serde(default, deserialize_with = "health_script_timeout")]
    pub script_timeout: Option<u64>,
    /// How much an InfiniBand error counter may rise between two checks (default 0).
    #[serde(default, deserialize_with = "health_count")]
    pub ib_error_threshold: Option<u64>,
    /// Lanes every InfiniBand port should have, `"4x"` (default: as first seen active).
    #[serde(default, deserialize_with = "health_ib_width")]
    pub ib_width: Option<u32>,
    /// Lane speed every InfiniBand port should have, `"HDR"` (default: as first seen).
    #[serde(default, deserialize_with = "health_ib_speed")]
    pub ib_speed: Option<crate::health::ib::IbSpeed>,
    /// GPUs checked through NVML where the library is (default true).
    #[serde(default)]
    pub gpu: Option<bool>,
    /// NVIDIA XID errors read from the kernel log (`/dev/kmsg`) where it can be opened
    /// (default true; see `crate::health::xid`).
    #[serde(default)]
    pub xid: Option<bool>,
}

/// A `[health]` value as the key's error shows it.
fn shown(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => format!("{:?}", hyperplan_shared::names::shorten(s, 100)),
        toml::Value::Integer(n) => n.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(_) => "a date".into(),
        toml::Value::Array(_) => "a list".into(),
        toml::Value::Table(_) => "a table".into(),
    }
}

/// Reads a `[health]` key's value with `check`, which says what it expected when the
/// value will not do; the error names the key (serde gives the field's name only to
/// its own errors, so the caller passes it through `key`).
fn health_key<'de, D, T>(
    d: D,
    key: &str,
    expected: &str,
    check: impl FnOnce(&toml::Value) -> Option<T>,
) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let value = toml::Value::deserialize(d)?;
    check(&value)
        .map(Some)
        .ok_or_else(|| serde::de::Error::custom(format!("[health] {key}: expected {expected}, got {}", shown(&value))))
}

/// Seconds, at least 1.
fn seconds<'de, D: serde::Deserializer<'de>>(d: D, key: &str) -> Result<Option<u64>, D::Error> {
    health_key(d, key, "a number of seconds, at least 1", |v| {
        v.as_integer().and_then(|n| u64::try_from(n).ok()).filter(|n| *n >= 1)
    })
}

/// A percentage, 0 to 100.
fn percent<'de, D: serde::Deserializer<'de>>(d: D, key: &str) -> Result<Option<f64>, D::Error> {
    health_key(d, key, "a percentage from 0 to 100", |v| {
        let n = v.as_float().or_else(|| v.as_integer().map(|i| i as f64))?;
        (0.0..=100.0).contains(&n).then_some(n)
    })
}

/// Absolute paths.
fn abs_paths<'de, D: serde::Deserializer<'de>>(d: D, key: &str) -> Result<Option<Vec<PathBuf>>, D::Error> {
    health_key(d, key, "a list of absolute paths, like [\"/scratch\"]", |v| {
        v.as_array()?
            .iter()
            .map(|p| p.as_str().filter(|s| s.starts_with('/')).map(PathBuf::from))
            .collect()
    })
}

/// One `deserialize_with` function per `[health]` key, so that its errors name it.
macro_rules! health_keys {
    ($($fn_name:ident: $key:literal => $read:ident -> $t:ty;)*) => {$(
        fn $fn_name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<$t>, D::Error> {
            $read(d, $key)
        }
    )*};
}

health_keys! {
    health_interval: "interval" => seconds -> u64;
    health_timeout: "timeout" => seconds -> u64;
    health_script_interval: "scriptInterval" => seconds -> u64;
    health_script_timeout: "scriptTimeout" => seconds -> u64;
    health_min_free: "minFreePercent" => percent -> f64;
    health_min_free_inodes: "minFreeInodesPercent" => percent -> f64;
    health_paths: "paths" => abs_paths -> Vec<PathBuf>;
    health_mounts: "mounts" => abs_paths -> Vec<PathBuf>;
}

/// A count, 0 or more (`ibErrorThreshold`).
fn health_count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    health_key(d, "ibErrorThreshold", "a count, 0 or more", |v| {
        v.as_integer().and_then(|n| u64::try_from(n).ok())
    })
}

/// A command's argv, its program an absolute path (`script`); `[]` for none.
fn health_script<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    health_key(
        d,
        "script",
        "the command as a list, its program an absolute path, like [\"/usr/sbin/nhc\"] (run without a shell)",
        |v| {
            let argv: Vec<String> = v
                .as_array()?
                .iter()
                .map(|a| a.as_str().filter(|s| !s.contains('\0')).map(str::to_string))
                .collect::<Option<_>>()?;
            (argv.first().is_none_or(|p| p.starts_with('/'))).then_some(argv)
        },
    )
}

/// `"4x"` (`ibWidth`).
fn health_ib_width<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    health_key(d, "ibWidth", "\"1x\", \"2x\", \"4x\", \"8x\" or \"12x\"", |v| {
        v.as_str().and_then(crate::health::ib::parse_width)
    })
}

/// `"HDR"` (`ibSpeed`).
fn health_ib_speed<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<crate::health::ib::IbSpeed>, D::Error> {
    health_key(
        d,
        "ibSpeed",
        "an InfiniBand speed: SDR, DDR, QDR, FDR10, FDR, EDR, HDR, NDR or XDR",
        |v| v.as_str().and_then(crate::health::ib::IbSpeed::parse),
    )
}

/// `[metrics]`: the agent's `/metrics` (see `crate::metrics`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MetricsSection {
    /// `HOST:PORT` to serve `/metrics` on over plain HTTP (port 0: any free one); absent or
    /// empty: no endpoint (the default).
    #[serde(default, deserialize_with = "listen_key")]
    pub listen: Option<String>,
}

/// `[metrics] listen`, checked by [`parse_listen`] (an error points at the value).
fn listen_key<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let text = String::deserialize(d)?;
    parse_listen(&text).map_err(|e| serde::de::Error::custom(format!("[metrics] listen: {e}")))
}

/// A metrics listen address, `--metrics-listen` or `[metrics] listen`: `HOST:PORT` (an
/// IP address, `[IPv6]` or a host name, resolved when the agent binds; port 0 for any
/// free one) is `Some`, the empty string `None` (off).
pub fn parse_listen(text: &str) -> Result<Option<String>, BadListen> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    if !hyperplan_shared::names::is_host_port(text) {
        return Err(BadListen(hyperplan_shared::names::shorten(text, 100)));
    }
    Ok(Some(text.to_string()))
}

/// A metrics listen address that is not `HOST:PORT` (the text, shortened).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected HOST:PORT such as \"127.0.0.1:9401\" or \"0.0.0.0:9401\" (or \"\" for none), got {0:?}")]
pub struct BadListen(pub String);

/// `[exec]`: what a task starts with beyond its spec.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExecSection {
    /// Apply the task user's `/etc/security/limits.conf` and `limits.d/*.conf`, as
    /// pam_limits would at a login (default true).
    #[serde(default)]
    pub limits_conf: Option<bool>,
    /// The site's resource limits for every task, over the user's: `nofile = 65536`,
    /// `memlock = "unlimited"`, `stack = { soft = "8M", hard = "unlimited" }`
    /// (`shepherd::rlimits::parse_table`).
    #[serde(default)]
    pub rlimits: Option<toml::Table>,
    /// `pmi` or `none` (the default): whether tasks whose job has no `mpi` get a PMI-1
    /// server on `PMI_FD` (MPICH, Intel MPI, MVAPICH wire up through it).
    #[serde(default)]
    pub default_mpi: Option<String>,
    /// The mode tasks' output files are created with (octal text, `"0600"` by default:
    /// output often holds the job's environment and secrets; `"0640"` or `"0644"` to
    /// share it), less the task's umask.
    #[serde(default)]
    pub output_mode: Option<String>,
    /// Each job its own `/tmp` and `/dev/shm` on the node, in a mount namespace of each
    /// task's, removed when the job's last task here ends (Slurm's `job_container/tmpfs`):
    /// what tasks leave there no longer outlives the job nor holds memory. Unsaid: on where
    /// the agent runs as root and a namespace can be made (`tasks::jobtmp::decide`).
    #[serde(default)]
    pub private_tmp: Option<bool>,
    /// Where jobs' `/tmp` directories go, on the node's disk (default `STATE/jobtmp`).
    #[serde(default)]
    pub private_tmp_dir: Option<PathBuf>,
}

/// `[exec] outputMode` when agent.toml says nothing: the task's user alone.
pub const DEFAULT_OUTPUT_MODE: u32 = 0o600;

/// `[exec] outputMode` that is not octal permission bits the owner may write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[exec] outputMode: expected octal permissions the owner may write, like \"0600\" or \"0640\", got {0:?}")]
pub struct BadOutputMode(pub String);

/// `[exec] defaultMpi` that is not a mode the agent serves (the text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[exec] defaultMpi: expected \"pmi\" or \"none\", got {0:?}")]
pub struct BadDefaultMpi(pub String);

impl ExecSection {
    /// `outputMode`, checked: octal permission bits, owner-writable, no set-id or sticky bit.
    pub fn output_mode(&self) -> Result<u32, BadOutputMode> {
        let Some(text) = self.output_mode.as_deref() else {
            return Ok(DEFAULT_OUTPUT_MODE);
        };
        u32::from_str_radix(text.trim_start_matches("0o"), 8)
            .ok()
            .filter(|m| *m <= 0o777 && m & 0o200 != 0)
            .ok_or_else(|| BadOutputMode(text.to_string()))
    }

    /// `defaultMpi`, checked.
    pub fn default_mpi(&self) -> Result<hyperplan_shared::job::MpiMode, BadDefaultMpi> {
        match self.default_mpi.as_deref() {
            None => Ok(hyperplan_shared::job::MpiMode::None),
            Some(text) => hyperplan_shared::job::MpiMode::parse(text).ok_or_else(|| BadDefaultMpi(text.to_string())),
        }
    }
}

/// `taskPidsMax`: a count (at least 1) or `"max"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum PidsMaxKey {
    Count(std::num::NonZeroU64),
    Word(MaxWord),
}

/// The one word `taskPidsMax` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MaxWord {
    Max,
}

impl PidsMaxKey {
    /// None: no limit of the task's own.
    pub fn limit(self) -> Option<u64> {
        match self {
            PidsMaxKey::Count(n) => Some(n.get()),
            PidsMaxKey::Word(MaxWord::Max) => None,
        }
    }
}

/// Whether tasks are pinned to the PUs and NUMA nodes the planner gave them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Pin {
    /// Pin when the topology is this machine's (the live probe), not a described one
    /// (`--synthetic`, `--hwloc-xml`, `--sysfs-root`).
    #[default]
    Auto,
    On,
    Off,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: cannot read: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{}:{line}:{column}: {message}", path.display())]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
}

impl AgentConfig {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        Self::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| {
            let offset = e.span().map_or(0, |s| s.start).min(text.len());
            let before = &text[..offset];
            ConfigError::Parse {
                path: path.into(),
                line: before.matches('\n').count() + 1,
                column: before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1,
                message: e.message().to_string(),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_mode_is_the_users_alone_unless_said_and_refuses_nonsense() {
        let with = |m: Option<&str>| ExecSection {
            output_mode: m.map(str::to_string),
            ..ExecSection::default()
        };
        assert_eq!(with(None).output_mode(), Ok(0o600));
        assert_eq!(with(Some("0640")).output_mode(), Ok(0o640));
        assert_eq!(with(Some("644")).output_mode(), Ok(0o644));
        for bad in ["4755", "0400", "rw-r--r--", "", "0o1000"] {
            let said = with(Some(bad)).output_mode();
            assert!(
                said.as_ref()
                    .is_err_and(|e| e.to_string().starts_with("[exec] outputMode: expected octal")),
                "{bad}: {said:?}"
            );
        }
    }

    #[test]
    fn the_shipped_example_parses_commented_and_uncommented() {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../systemd/agent.toml"));
        let text = std::fs::read_to_string(path).unwrap_or_default();
        assert!(text.contains("reprobeInterval"), "{}", path.display());
        // Everything commented out but the launcher, which the shipped units pair with.
        let shipped = AgentConfig::parse(&text, path).ok();
        let launcher = Some(PathBuf::from(crate::launcher::DEFAULT_SOCKET));
        assert_eq!(
            shipped,
            Some(AgentConfig {
                launcher,
                ..AgentConfig::default()
            })
        );
        // Every `# key = value` line, uncommented, is a key the agent knows.
        let uncommented: String = text
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(rest) if rest.split_once(" = ").is_some_and(|(k, _)| !k.contains(' ')) => rest,
                _ => l,
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let all = AgentConfig::parse(&uncommented, path);
        assert!(
            all.as_ref().is_ok_and(|c| c.planner.is_some()
                && c.reprobe_interval == Some(60)
                && c.state_dir.is_some()
                && c.pin.is_some()
                && c.allow_root.is_some()
                && c.advertise_address.is_some()
                && c.task_pids_max.is_some()
                && c.cgroup_name.is_some()
                && c.exec.limits_conf == Some(true)
                && c.exec.rlimits.is_some()
                && c.exec.private_tmp == Some(true)
                && c.exec.private_tmp_dir.is_some()
                && c.metrics.listen.is_some()
                && c.exec
                    .default_mpi()
                    .is_ok_and(|m| m == hyperplan_shared::job::MpiMode::None)),
            "{all:?}"
        );
        // The shipped rlimits table is one the agent takes.
        let table = all.ok().and_then(|c| c.exec.rlimits).unwrap_or_default();
        assert!(crate::shepherd::rlimits::parse_table(&table).is_ok_and(|r| r.len() == 3));
    }

    #[test]
    fn default_mpi_is_pmi_or_none() {
        let p = Path::new("agent.toml");
        let get = |text: &str| AgentConfig::parse(text, p).map(|c| c.exec.default_mpi());
        assert!(matches!(
            get("[exec]\ndefaultMpi = \"pmi\"\n"),
            Ok(Ok(hyperplan_shared::job::MpiMode::Pmi))
        ));
        assert!(matches!(get(""), Ok(Ok(hyperplan_shared::job::MpiMode::None))));
        let bad = get("[exec]\ndefaultMpi = \"pmix\"\n");
        assert!(
            matches!(&bad, Ok(Err(e)) if e.to_string().contains("defaultMpi") && e.to_string().contains("\"pmix\"")),
            "{bad:?}"
        );
    }

    #[test]
    fn metrics_listen_is_host_port_or_empty() {
        let p = Path::new("agent.toml");
        let get = |text: &str| AgentConfig::parse(text, p).map(|c| c.metrics.listen);
        assert_eq!(get("").ok(), Some(None));
        assert_eq!(get("[metrics]\n").ok(), Some(None));
        assert_eq!(get("[metrics]\nlisten = \"\"\n").ok(), Some(None));
        for good in ["0.0.0.0:9401", "127.0.0.1:0", "[::1]:9401", "mgmt-7.example:9401"] {
            assert_eq!(
                get(&format!("[metrics]\nlisten = \"{good}\"\n")).ok(),
                Some(Some(good.into()))
            );
        }
        for bad in ["9401", "0.0.0.0:99999", "::1:9401", "a b:1", "0.0.0.0:"] {
            let err = get(&format!("[labels]\n[metrics]\nlisten = \"{bad}\"\n"))
                .err()
                .map(|e| e.to_string());
            assert!(
                err.as_deref()
                    .is_some_and(|e| e.starts_with("agent.toml:3:") && e.contains("listen") && e.contains(bad)),
                "{bad}: {err:?}"
            );
        }
        let unknown = AgentConfig::parse("[metrics]\nlisten = \"127.0.0.1:0\"\nport = 1\n", p);
        assert!(
            unknown
                .as_ref()
                .err()
                .is_some_and(|e| e.to_string().starts_with("agent.toml:3:")),
            "{unknown:?}"
        );
        assert!(AgentConfig::parse("[metrics]\nlisten = 9401\n", p).is_err());
    }

    #[test]
    fn health_keys_parse_and_a_bad_value_names_its_key() {
        let p = Path::new("agent.toml");
        let text = "[health]\nenabled = true\ninterval = 60\ntimeout = 30\npaths = [\"/scratch\"]\n\
                    minFreePercent = 5\nminFreeInodesPercent = 2.5\nmounts = [\"/scratch\"]\n\
                    script = [\"/usr/sbin/nhc\", \"-t\", \"60\"]\nscriptInterval = 300\nscriptTimeout = 120\n\
                    ibErrorThreshold = 10\nibWidth = \"4X\"\nibSpeed = \"hdr\"\ngpu = false\nxid = false\n";
        let h = AgentConfig::parse(text, p).map(|c| c.health);
        assert_eq!(
            h.ok(),
            Some(HealthSection {
                enabled: Some(true),
                interval: Some(60),
                timeout: Some(30),
                paths: Some(vec![PathBuf::from("/scratch")]),
                min_free_percent: Some(5.0),
                min_free_inodes_percent: Some(2.5),
                mounts: Some(vec![PathBuf::from("/scratch")]),
                script: Some(vec!["/usr/sbin/nhc".into(), "-t".into(), "60".into()]),
                script_interval: Some(300),
                script_timeout: Some(120),
                ib_error_threshold: Some(10),
                ib_width: Some(4),
                ib_speed: Some(crate::health::ib::IbSpeed::Hdr),
                gpu: Some(false),
                xid: Some(false),
            })
        );
        assert_eq!(
            AgentConfig::parse("", p).ok().map(|c| c.health),
            Some(HealthSection::default())
        );
        assert_eq!(
            AgentConfig::parse("[health]\nscript = []\n", p)
                .ok()
                .map(|c| c.health.script),
            Some(Some(Vec::new()))
        );
        for (bad, key) in [
            ("interval = 0", "interval"),
            ("timeout = \"30s\"", "timeout"),
            ("scriptInterval = -5", "scriptInterval"),
            ("scriptTimeout = 0", "scriptTimeout"),
            ("minFreePercent = 101", "minFreePercent"),
            ("minFreeInodesPercent = \"5%\"", "minFreeInodesPercent"),
            ("paths = [\"scratch\"]", "paths"),
            ("mounts = \"/scratch\"", "mounts"),
            ("script = \"/usr/sbin/nhc\"", "script"),
            ("script = [\"nhc\"]", "script"),
            ("ibErrorThreshold = -1", "ibErrorThreshold"),
            ("ibWidth = \"3x\"", "ibWidth"),
            ("ibSpeed = \"fast\"", "ibSpeed"),
        ] {
            let err = AgentConfig::parse(&format!("[health]\n{bad}\n"), p)
                .err()
                .map(|e| e.to_string());
            assert!(
                err.as_deref().is_some_and(
                    |e| e.starts_with("agent.toml:2:") && e.contains(&format!("[health] {key}: expected "))
                ),
                "{bad}: {err:?}"
            );
        }
        assert!(AgentConfig::parse("[health]\nintervall = 5\n", p).is_err());
        assert!(AgentConfig::parse("[health]\nenabled = \"yes\"\n", p).is_err());
        assert!(AgentConfig::parse("[health]\nxid = 1\n", p).is_err());
    }

    /// The example in this module's header, uncommented, is a configuration the agent
    /// takes.
    #[test]
    fn the_header_example_parses_uncommented() {
        let source = include_str!("config.rs");
        let example: String = source
            .lines()
            .skip_while(|l| !l.starts_with("//! ```toml"))
            .skip(1)
            .take_while(|l| !l.starts_with("//! ```"))
            .map(|l| l.trim_start_matches("//!").trim_start())
            .map(|l| l.strip_prefix("# ").unwrap_or(l))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(example.contains("[health]"), "{example}");
        let parsed = AgentConfig::parse(&example, Path::new("example.toml"));
        assert!(
            parsed
                .as_ref()
                .is_ok_and(|c| c.health.script.is_some() && c.health.ib_width == Some(4)),
            "{parsed:?}"
        );
    }

    #[test]
    fn task_pids_max_is_a_count_or_max() {
        let p = Path::new("agent.toml");
        let get = |text: &str| AgentConfig::parse(text, p).map(|c| c.task_pids_max.map(PidsMaxKey::limit));
        assert_eq!(get("taskPidsMax = 64\n").ok(), Some(Some(Some(64))));
        assert_eq!(get("taskPidsMax = \"max\"\n").ok(), Some(Some(None)));
        for bad in ["taskPidsMax = 0\n", "taskPidsMax = -3\n", "taskPidsMax = \"lots\"\n"] {
            assert!(get(bad).is_err(), "{bad}");
        }
        assert!(AgentConfig::parse("[exec]\nlimitsConf = \"yes\"\n", p).is_err());
        assert!(AgentConfig::parse("[exec]\nrlimit = {}\n", p).is_err());
    }

    #[test]
    fn labels_and_unknown_keys() {
        let p = Path::new("agent.toml");
        let c = AgentConfig::parse("sysfsRoot = \"/host/sys\"\n[labels]\nrack = \"r7\"\n", p).unwrap_or_default();
        assert_eq!(c.labels.get("rack").map(String::as_str), Some("r7"));
        assert_eq!(c.sysfs_root.as_deref(), Some(Path::new("/host/sys")));
        let run = AgentConfig::parse(
            "planner = \"head:7443\"\ncertDir = \"/c\"\nnodeName = \"n7\"\nreprobeInterval = 5\n",
            p,
        )
        .unwrap_or_default();
        assert_eq!(run.planner.as_deref(), Some("head:7443"));
        assert_eq!(run.cert_dir.as_deref(), Some(Path::new("/c")));
        assert_eq!(run.node_name.as_deref(), Some("n7"));
        assert_eq!(run.reprobe_interval, Some(5));
        let tasks = AgentConfig::parse("stateDir = \"/s\"\npin = \"off\"\nallowRoot = true\n", p).unwrap_or_default();
        assert_eq!(tasks.state_dir.as_deref(), Some(Path::new("/s")));
        assert_eq!((tasks.pin, tasks.allow_root), (Some(Pin::Off), Some(true)));
        assert!(AgentConfig::parse("pin = \"sometimes\"\n", p).is_err());
        let err = AgentConfig::parse("[labels]\nrack = \"r7\"\nplaner = 1\n", p)
            .err()
            .map(|e| e.to_string());
        assert!(
            err.as_deref().is_some_and(|e| e.starts_with("agent.toml:3:")),
            "{err:?}"
        );
    }
}
