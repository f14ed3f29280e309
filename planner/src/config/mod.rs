//! The daemon's configuration (`planner.toml`): the core's sections (`[scoring]`,
//! `[numa]`: `hyperplan_core::config`), `[server]` ([`server`]), `[[discovery]]`
//! ([`discovery`]), `[metrics]` and `[web]` ([`http`]). An unknown key, or a key a source does not take, is an error naming its
//! line.

pub mod discovery;
pub mod http;
pub mod server;

use std::path::Path;

use hyperplan_core::PlannerConfig;
use hyperplan_core::config::{
    ConfigError, LimitsConfig, LimitsSection, NumaSection, SchedulerConfig, SchedulerSection, ScoringSection,
    parse_error,
};
use serde::Deserialize;

use discovery::RawSource;
use server::RawServer;

pub use discovery::{
    DEFAULT_COMMAND_TIMEOUT, DiscoveryConfig, DumpInput, SourceConfig, SourceKind, SourceSpec, default_interval,
};
pub use server::{DEFAULT_PORT, ServerConfig, seconds};

/// All of planner.toml.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DaemonConfig {
    /// What the core reads (the simulator takes this part alone).
    pub planner: PlannerConfig,
    pub server: ServerConfig,
    pub discovery: DiscoveryConfig,
    /// `[store]`: where the durable state lives.
    pub store: crate::store::StoreConfig,
    /// `[metrics]`: Prometheus's endpoint.
    pub metrics: http::MetricsConfig,
    /// `[web]`: the web view.
    pub web: http::WebConfig,
    /// `[accounting]`: the database ended jobs are copied to.
    pub accounting: crate::accounting::AccountingConfig,
    /// The file it was read from (`None`: parsed from text): what SIGHUP reads again for
    /// the policy sections.
    pub path: Option<std::path::PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    scoring: ScoringSection,
    numa: Option<NumaSection>,
    limits: Option<LimitsSection>,
    scheduler: Option<SchedulerSection>,
    #[serde(default)]
    queue: Vec<hyperplan_core::config::QueueSection>,
    #[serde(default)]
    account: Vec<hyperplan_core::config::AccountSection>,
    fairshare: Option<hyperplan_core::config::FairshareSection>,
    priority: Option<hyperplan_core::config::PrioritySection>,
    #[serde(default)]
    reservation: Vec<hyperplan_core::config::MaintenanceSection>,
    preemption: Option<hyperplan_core::config::PreemptionSection>,
    #[serde(default, rename = "priorityClass")]
    priority_class: Vec<hyperplan_core::config::PriorityClassSection>,
    health: Option<hyperplan_core::config::ChecksSection>,
    server: Option<RawServer>,
    store: Option<crate::store::config::RawStore>,
    ha: Option<crate::store::config::RawHa>,
    #[serde(default)]
    discovery: Vec<RawSource>,
    metrics: Option<http::RawMetrics>,
    web: Option<http::RawWeb>,
    accounting: Option<crate::accounting::config::RawAccounting>,
}

impl DaemonConfig {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let mut config = Self::parse(&text, &path.display().to_string())?;
        config.path = Some(path.to_path_buf());
        Ok(config)
    }

    /// Parses `planner.toml` text; `origin` names the file in errors, and relative paths
    /// in `[[discovery]]` are taken relative to its directory.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let at = |offset: usize, message: String| parse_error(text, origin, offset, message);
        let raw: RawConfig =
            toml::from_str(text).map_err(|e| at(e.span().map_or(usize::MAX, |s| s.start), e.message().to_string()))?;
        let mut planner = PlannerConfig::from_sections(&raw.scoring, raw.numa.as_ref(), &at)?;
        planner.limits = LimitsConfig::from_section(raw.limits.as_ref(), &at)?;
        planner.scheduler = SchedulerConfig::from_section(raw.scheduler.as_ref(), &at)?;
        planner.accounts = hyperplan_core::config::accounts_from_sections(&raw.account, &at)?;
        planner.queues = hyperplan_core::config::queues_from_sections(&raw.queue, &planner.accounts, &at)?;
        planner.fairshare =
            hyperplan_core::config::FairshareConfig::from_section(raw.fairshare.as_ref(), &planner.accounts, &at)?;
        planner.priority = hyperplan_core::config::PriorityConfig::from_section(raw.priority.as_ref(), &at)?;
        planner.maintenance = hyperplan_core::config::windows_from_sections(&raw.reservation, &at)?;
        planner.preemption =
            hyperplan_core::config::PreemptionConfig::from_sections(raw.preemption.as_ref(), &raw.priority_class, &at)?;
        planner.checks = hyperplan_core::config::ChecksConfig::from_section(raw.health.as_ref(), &at)?;
        let server = server::server_config(raw.server, &at)?;
        planner.health = server.health();
        let base = Path::new(origin).parent().unwrap_or(Path::new(""));
        let discovery = discovery::discovery_config(raw.discovery, base, &at)?;
        let store = crate::store::config::store_config(raw.store, raw.ha, base, &at)?;
        let (metrics, web) = http::http_config(raw.metrics, raw.web, base, &at)?;
        let accounting = crate::accounting::config::accounting_config(raw.accounting, base, &at)?;
        Ok(Self {
            planner,
            server,
            discovery,
            store,
            metrics,
            web,
            accounting,
            path: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use hyperplan_core::config::{ScoringConfig, SpanMode};
    use hyperplan_core::numa::hints::Policy;

    use super::*;

    #[test]
    fn volcano_argument_names() -> Result<(), ConfigError> {
        let cfg = DaemonConfig::parse(
            r#"
[scoring]
weight = 2
"hypernode.binpack.cpu" = 5
"hypernode.binpack.memory" = "0.5"
"hypernode.binpack.resources" = "nvidia.com/gpu, rdma/hca"
"hypernode.binpack.resources.nvidia.com/gpu" = 2
"hypernode.binpack.normal-pod.fading" = 0.5
"hypernode.binpack.normal-pod.enable" = "false"
"#,
            "planner.toml",
        )?;
        let s = cfg.planner.scoring;
        assert_eq!(s.weight, 2.0);
        assert_eq!(s.binpack_weights["cpu"], 5.0);
        assert_eq!(s.binpack_weights["memory"], 0.5);
        assert_eq!(s.binpack_weights["nvidia.com/gpu"], 2.0);
        assert_eq!(s.binpack_weights["rdma/hca"], 1.0);
        assert_eq!(s.normal_pod_fading, 0.5);
        assert!(!s.normal_pod_enable);
        Ok(())
    }

    #[test]
    fn shipped_example_parses_to_the_defaults_plus_gpu() -> Result<(), ConfigError> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd/planner.toml");
        let cfg = DaemonConfig::load(&path)?;
        let mut expected = ScoringConfig::default();
        expected.binpack_weights.insert("nvidia.com/gpu".into(), 1.0);
        assert_eq!(cfg.planner.scoring, expected);
        Ok(())
    }

    #[test]
    fn the_commented_policy_example_in_the_shipped_file_parses() -> Result<(), ConfigError> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd/planner.toml");
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let from = text
            .find("# [[queue]]")
            .unwrap_or_else(|| panic!("the shipped file shows no [[queue]]"));
        let policy: String = text[from..]
            .lines()
            .map(|l| l.strip_prefix("# ").unwrap_or(if l == "#" { "" } else { l }))
            .map(|l| format!("{l}\n"))
            .collect();
        let cfg = DaemonConfig::parse(&policy, "planner.toml (policy example)")?;
        let gpu = cfg.planner.queues.iter().find(|q| q.name == "gpu");
        let gpu = gpu.unwrap_or_else(|| panic!("no gpu queue in {:?}", cfg.planner.queues));
        assert_eq!((gpu.priority, gpu.max_time_limit), (10, Some(2 * 86_400)));
        assert_eq!(cfg.planner.scheduler.reservations, 1);
        assert_eq!(cfg.planner.maintenance.len(), 1);
        assert_eq!(cfg.planner.preemption.grace, 30);
        assert_eq!(cfg.planner.preemption.of(Some("urgent")), (1000, false));
        let physics = cfg
            .planner
            .accounts
            .find("physics")
            .map(|i| cfg.planner.accounts.get(i));
        assert_eq!(physics.map(|a| a.parent.as_deref()), Some(Some("science")));
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
        assert_eq!(blocks.len(), 6, "{blocks:#?}");
        // The last turns NVLink discovery off: it is no polled source.
        let nvlink = DaemonConfig::parse(&blocks[5], "planner.toml")?;
        assert!(nvlink.discovery.nvlink_off && nvlink.discovery.sources.is_empty());
        let kinds: Vec<SourceKind> = blocks[..5]
            .iter()
            .map(|b| DaemonConfig::parse(b, "planner.toml").map(|c| c.discovery.sources[0].spec.kind()))
            .collect::<Result<_, _>>()?;
        use SourceKind::*;
        assert_eq!(kinds, vec![Static, Ibnetdiscover, Ibnetdiscover, Ufm, Slurm]);
        Ok(())
    }

    #[test]
    fn numa_section() -> Result<(), ConfigError> {
        let cfg = DaemonConfig::parse("[numa]\ndefaultPolicy = \"restricted\"\nweight = 3\n", "p.toml")?;
        assert_eq!(cfg.planner.numa.default_policy, Policy::Restricted);
        assert_eq!(cfg.planner.numa.weight, 3.0);
        let err = DaemonConfig::parse("[numa]\ndefaultPolicy = \"strict\"\n", "p.toml");
        let msg = err.map(|_| ()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            msg.starts_with("p.toml:2:17: numa.defaultPolicy: unknown topology policy"),
            "{msg}"
        );
        Ok(())
    }

    #[test]
    fn server_and_discovery_sections() -> Result<(), ConfigError> {
        let cfg = DaemonConfig::parse(
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
        let err = DaemonConfig::parse("[[discovery]]\nsource = \"magic\"\n", "p.toml");
        let msg = err.map(|_| ()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.starts_with("p.toml:2:10: discovery[0].source: expected"), "{msg}");
        let err = DaemonConfig::parse("[server]\nlisten = \"nowhere\"\n", "p.toml");
        let msg = err.map(|_| ()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("server.listen: expected IP:PORT"), "{msg}");
        Ok(())
    }

    fn error(text: &str) -> String {
        DaemonConfig::parse(text, "/etc/hyperplan/planner.toml")
            .map(|_| ())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn every_fabric_source_with_its_keys_defaults_and_paths() -> Result<(), ConfigError> {
        let cfg = DaemonConfig::parse(
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
        let cfg = DaemonConfig::parse(
            "[[discovery]]\nsource = \"ibnetdiscover\"\ncommand = [\"ibnetdiscover\"]\n",
            "p.toml",
        )?;
        assert_eq!(cfg.discovery.sources[0].interval, Duration::from_secs(3600));
        assert!(!cfg.discovery.nvlink_off, "NVLink discovery is on unless turned off");
        Ok(())
    }

    #[test]
    fn nvlink_discovery_turns_off_and_takes_no_other_key() -> Result<(), ConfigError> {
        let cfg = DaemonConfig::parse("[[discovery]]\nsource = \"nvlink\"\nenabled = false\n", "p.toml")?;
        assert!(cfg.discovery.nvlink_off);
        assert!(cfg.discovery.sources.is_empty());
        let cfg = DaemonConfig::parse("[[discovery]]\nsource = \"nvlink\"\n", "p.toml")?;
        assert!(!cfg.discovery.nvlink_off);
        let e = DaemonConfig::parse("[[discovery]]\nsource = \"nvlink\"\nfile = \"x\"\n", "p.toml")
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("p.toml:3:8: discovery[0].file: source \"nvlink\" has no key `file`; it takes only `enabled`")
        );
        Ok(())
    }

    #[test]
    fn intervals_out_of_their_range_name_it() {
        let cases = [
            (
                "[server]\ntickInterval = 0.000000001\n",
                "planner.toml:2:16: server.tickInterval: expected seconds from 0.01 to 60, got 0.000000001",
            ),
            (
                "[server]\nheartbeatInterval = 1e-9\n",
                "planner.toml:2:21: server.heartbeatInterval: expected seconds from 0.05 to 600, got 0.000000001",
            ),
            (
                "[server]\nnodeLostAfter = 1e9\n",
                "planner.toml:2:17: server.nodeLostAfter: expected seconds from 0.1 to 31536000, got 1000000000",
            ),
            (
                "[server]\nnodeLostAfter = nan\n",
                "planner.toml:2:17: server.nodeLostAfter: expected seconds from 0.1 to 31536000, got NaN",
            ),
        ];
        for (text, expected) in cases {
            let msg = error(text);
            assert_eq!(msg, format!("/etc/hyperplan/{expected}"), "{text}");
        }
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
        assert_eq!(
            DaemonConfig::parse("", "p.toml")?.planner.scoring.span,
            SpanMode::Minimal
        );
        let v = DaemonConfig::parse("[scoring]\nspan = \"volcano\"\n", "p.toml")?;
        assert_eq!(v.planner.scoring.span, SpanMode::Volcano);
        let bad = |text: &str| match DaemonConfig::parse(text, "p.toml") {
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

    /// Issue 20: `[server] privateData`, off unless set; a value that is no boolean, or a
    /// misspelt key, is an error naming its line.
    #[test]
    fn private_data_key() -> Result<(), ConfigError> {
        assert!(!DaemonConfig::parse("", "p.toml")?.server.private_data);
        assert!(!ServerConfig::default().private_data);
        let on = DaemonConfig::parse("[server]\ntickInterval = 2\nprivateData = true\n", "p.toml")?;
        assert!(on.server.private_data);
        assert_eq!(on.server.tick_interval, Duration::from_secs(2));
        assert!(
            !DaemonConfig::parse("[server]\nprivateData = false\n", "p.toml")?
                .server
                .private_data
        );
        let msg = error("[server]\nprivateData = \"yes\"\n");
        assert!(
            msg.starts_with("/etc/hyperplan/planner.toml:2:15: ") && msg.contains("bool"),
            "{msg}"
        );
        let msg = error("[server]\nprivatedata = true\n");
        assert!(
            msg.starts_with("/etc/hyperplan/planner.toml:2:1: unknown field `privatedata`"),
            "{msg}"
        );
        // The shipped file's commented example turns it on.
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd/planner.toml");
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        assert!(
            text.contains("\n# privateData = true\n"),
            "systemd/planner.toml documents privateData"
        );
        let shipped = DaemonConfig::parse(
            &text.replace("\n# privateData = true\n", "\nprivateData = true\n"),
            "p.toml",
        )?;
        assert!(shipped.server.private_data);
        Ok(())
    }

    #[test]
    fn unknown_section_names_line() {
        let err = DaemonConfig::parse("[scoring]\nweight = 1\n[bogus]\nx = 1\n", "p.toml");
        let msg = err.map(|_| ()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.starts_with("p.toml:3:"), "{msg}");
    }
}
