//! `hyperplan-agent`: the node agent (a systemd service on every node).
//!
//! `probe` reports the node's topology; `run` is the daemon: it streams the topology to
//! the planner over QUIC with mutual TLS, heartbeats, re-probes, and reconnects for as
//! long as it runs. `shepherd` runs one task for the agent (`hyperplan_agent::shepherd`).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use hyperplan_agent::config::{AgentConfig, DEFAULT_CONFIG, Pin};
use hyperplan_agent::link::{self, CERT_DIR_ENV, DEFAULT_CERT_DIR, DEFAULT_REPROBE_INTERVAL, LinkOptions};
use hyperplan_agent::metrics::Listen;
use hyperplan_agent::probe::{self, ProbeOptions, Source};
use hyperplan_agent::shepherd;
use hyperplan_agent::tasks::cgroup::{CGROUP_ROOT, Confinement, DEFAULT_NAME, DEFAULT_PIDS_MAX};
use hyperplan_agent::tasks::{DEFAULT_STATE_DIR, TaskOptions};

#[derive(Parser, Debug)]
#[command(
    name = "hyperplan-agent",
    version,
    about = "hyperplan node agent: probes NUMA, CPU, GPU, NIC and InfiniBand topology"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Format {
    /// A short lstopo-like summary per NUMA node.
    Text,
    /// The full NodeTopology value (stable field names); `simulate` reads it back.
    Json,
    Yaml,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Report this machine's topology (or a saved description of one).
    ///
    /// By default the machine it runs on: hwloc for packages, NUMA nodes, cores, PUs,
    /// GPUs and NICs with their NUMA locality; /sys/class/infiniband for HCA ports; /proc
    /// for load and up time.
    #[command(
        after_help = "Examples:\n  hyperplan-agent probe\n  hyperplan-agent probe --hwloc-xml lstopo.xml --format json > node.json\n  hyperplan-agent probe --synthetic \"pack:2 numa:2 core:8 pu:2\"\n  hyperplan-agent probe --sysfs-root ./gathered-tree --label rack=r7"
    )]
    Probe {
        #[command(flatten)]
        source: SourceArgs,
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
    /// Run the agent daemon: probe, connect to the planner (QUIC, mutual TLS), register,
    /// heartbeat; re-probe periodically and on SIGHUP and send the topology again only
    /// when it changed; reconnect with backoff whenever the planner is away.
    ///
    /// Runs the tasks the planner places here: one shepherd per task (`hyperplan-agent
    /// shepherd`, detached: tasks outlive agent restarts), files under
    /// STATE/tasks/JOB.JOBID/TASK/; reports their start and end until the planner
    /// acknowledges them, lists them with their CPU and memory use in heartbeats, cancels
    /// them on Kill and serves their output files (ReadLog). A restarted agent finds its
    /// tasks in the state directory.
    ///
    /// Confinement (shown by `hyperplan nodes`, said once at start): `cgroup` where
    /// pinning is on and either cgroup v2 is there (each task in CGROUP/tasks/JOB.JOBID.TASK,
    /// with the limits of the controllers delegated to the agent, systemd Delegate=yes: it
    /// then moves itself into CGROUP/agent) or cgroup v1 has a freezer hierarchy (each task in
    /// OWN/hyperplan/JOB.JOBID.TASK of the freezer, cpuset, memory and pids hierarchies):
    /// its CPUs, its NUMA nodes when its memory is bound, its memory request and its
    /// process limit (--task-pids-max), and every process of the task killed at its end
    /// however it left its session; `affinity` where pinning is on without such cgroups
    /// (pinned, processes found by ancestry and session); `none` with pinning off.
    ///
    /// Health checks (`[health]` in agent.toml, on by default) run on threads of their
    /// own, each with an interval and a timeout: InfiniBand ports, GPUs through NVML,
    /// free space and inodes of the state directory and `paths`, `mounts`, memory the
    /// kernel reports as hardware-corrupted, and a site `script` such as NHC. Heartbeats
    /// carry their results (all of them on a link's first, then when one changes).
    ///
    /// Every option is also an agent.toml key (in parentheses); flags win. Stops cleanly
    /// on SIGTERM or SIGINT. Under systemd (Type=notify) it reports READY=1 once first
    /// registered, STATUS= lines, and WATCHDOG=1 when WatchdogSec= is set. With
    /// --metrics-listen it serves its own Prometheus metrics: tasks running, each one's CPU
    /// and memory use, the last probe's duration, the planner link, unacknowledged task ends.
    #[command(
        after_help = "Examples:\n  hyperplan-agent run --config /etc/hyperplan/agent.toml\n  hyperplan-agent run --planner head-1:7443 --cert-dir ./certs --node n001\n  hyperplan-agent run --planner head-1:7400,head-2:7400 --node n001\n  hyperplan-agent run --planner 127.0.0.1:7443 --node fake-3 --synthetic \"pack:2 numa:2 core:4 pu:2\" --label leaf=l1\n  hyperplan-agent run --config /etc/hyperplan/agent.toml --metrics-listen 127.0.0.1:9401"
    )]
    Run {
        #[command(flatten)]
        source: Box<SourceArgs>, // boxed: the largest variant by far
        /// The planner, HOST:PORT, or a leader and its standbys as a comma-separated list
        /// HOST:PORT,HOST:PORT (`planner`). Required here or in the configuration; each
        /// resolved again at every connection attempt. The agent starts with the first;
        /// a standby sends it to the leader it names, and when a planner is unreachable or
        /// its connection ends the agent tries the next one.
        #[arg(long, value_name = "HOST:PORT[,HOST:PORT...]")]
        planner: Option<String>,
        /// Directory with ca.pem and nodes/NODE.pem + nodes/NODE.key, as `hyperplan certs`
        /// writes them (`certDir`). Default: $HYPERPLAN_CERT_DIR, else /etc/hyperplan/certs.
        #[arg(long, value_name = "DIR")]
        cert_dir: Option<PathBuf>,
        /// This node's name; its certificate must name it (`nodeName`). Default: the host
        /// name.
        #[arg(long, value_name = "NAME")]
        node: Option<String>,
        /// Seconds between periodic re-probes; 0 re-probes only on SIGHUP
        /// (`reprobeInterval`). Default: 60.
        #[arg(long, value_name = "SECS")]
        reprobe_interval: Option<u64>,
        /// Serve this agent's Prometheus metrics at http://ADDR/metrics (`[metrics]
        /// listen`): ADDR is HOST:PORT, e.g. 127.0.0.1:9401 or 0.0.0.0:9401; port 0 takes
        /// any free port, and the log says which ("serving metrics on http://…/metrics").
        /// Plain HTTP with no authentication: bind it to localhost or a management
        /// network. An address that cannot be bound is logged and the agent runs on
        /// without metrics. Default: off; "" turns off what agent.toml sets.
        #[arg(long, value_name = "ADDR", value_parser = parse_metrics_listen)]
        metrics_listen: Option<MetricsListen>,
        #[command(flatten)]
        tasks: TaskArgs,
    },
    /// Run one task as its parent, detached from the agent (the agent starts one per
    /// task; people rarely need to).
    ///
    /// Reads the launch spec FILE (JSON: job, jobId, task, rank, argv, env, workingDir,
    /// stdout, stderr, user, allowRoot, cpus, numaNodes, memoryPolicy, cgroup, stateDir,
    /// timeLimitSecs, killGraceSecs), leaves the caller's session, and writes its pid to
    /// STATE/tasks/JOB.JOBID/TASK/pid. Then it starts the task pinned to its CPUs and NUMA nodes,
    /// as the user (all of the user's groups), with exactly the spec's environment and
    /// stdout/stderr opened as that user; waits for it; and writes record.json there (exit
    /// code or signal, start and end time, CPU seconds, peak memory, or the reason it never
    /// ran). SIGTERM or SIGINT to the shepherd goes to the task's process group (cancel),
    /// SIGKILL following after the seconds in the task directory's kill_grace file when
    /// there is one (the agent writes the planner's grace there), else killGraceSecs; the
    /// time limit sends SIGTERM, then SIGKILL after killGraceSecs (default 10 s).
    /// Exits 0 once the record is written, whatever the task did; 1 when no record could be
    /// written (the reason is on stderr).
    #[command(
        after_help = "Example:\n  hyperplan-agent shepherd --spec /var/lib/hyperplan-agent/tasks/train.7/worker-3/spec.json\n  cat /var/lib/hyperplan-agent/tasks/train.7/worker-3/record.json"
    )]
    Shepherd {
        /// The launch spec (JSON), normally STATE/tasks/JOB.JOBID/TASK/spec.json.
        #[arg(long, value_name = "FILE")]
        spec: PathBuf,
        /// The task's PMI socket is this inherited descriptor, not the spec's pmiFd (the
        /// launcher passes the socket on under another number).
        #[arg(long, value_name = "FD")]
        pmi_fd: Option<i32>,
    },
    /// Start tasks' shepherds (and `hyperplan exec` steps) for the agent, outside the
    /// agent's unit (run by hyperplan-launcher.service, as root).
    ///
    /// The agent's unit drops capabilities, filters system calls and mounts /usr and /etc
    /// read-only, and whatever the agent forks inherits that. With `launcher` set in
    /// agent.toml (or `run --launcher SOCKET`), the agent writes each task's files and
    /// cgroups as before and asks this small process to start the task's shepherd: tasks
    /// then run with none of the agent's restrictions (a setuid starter such as
    /// apptainer's, a filtered system call, a write to a path the agent may not).
    ///
    /// It listens on a Unix socket only its own user (root) may use: mode 0600 in a 0700
    /// directory, and each peer's uid checked. It starts only `hyperplan-agent shepherd`
    /// (this executable), only for a spec at STATE/tasks/JOB.JOBID/TASK/spec.json of the
    /// state directory, reached without a symbolic link, owned by root and writable by no
    /// one else, and only for a task that runs as root when allowRoot is set here too.
    /// The shepherd's log and the task's PMI socket come from the agent with the request;
    /// a step's standard input, output and error likewise, and its end goes back to the
    /// agent on the same connection.
    /// Stopping or restarting the launcher stops only it: shepherds run on in their own
    /// sessions, and the agent follows them by pid as after its own restart. Stops on
    /// SIGTERM or SIGINT; under systemd (Type=notify) it says READY=1 once it listens.
    #[command(
        after_help = "Examples:\n  hyperplan-launcher.service: hyperplan-agent launcher --config /etc/hyperplan/agent.toml\n  hyperplan-agent launcher --socket /run/hyperplan-launcher/launcher.sock --state-dir /var/lib/hyperplan-agent\n  hyperplan-agent run --launcher /run/hyperplan-launcher/launcher.sock ...\n  journalctl -u hyperplan-launcher   # \"started a shepherd\", refusals with their reason"
    )]
    Launcher {
        /// The socket to listen on (`launcher`, the key the agent reads to find it).
        /// Default: /run/hyperplan-launcher/launcher.sock.
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
        /// The agent's state directory (`stateDir`): the only place specs are taken
        /// from. Default: /var/lib/hyperplan-agent.
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// Start tasks whose spec lets them run as root (`allowRoot`). Default: refused.
        #[arg(long)]
        allow_root: bool,
        /// Agent configuration (TOML; `launcher`, `stateDir` and `allowRoot` are read).
        /// Default: /etc/hyperplan/agent.toml when it exists.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
}

/// How `run` runs tasks.
#[derive(Args, Debug)]
struct TaskArgs {
    /// Where task directories live (`stateDir`); created if missing. Default:
    /// /var/lib/hyperplan-agent.
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Pin tasks to their PUs and NUMA nodes (`pin`): auto pins when the topology is
    /// this machine's (not --synthetic, --hwloc-xml or --sysfs-root). Default: auto.
    #[arg(long, value_enum, value_name = "WHEN")]
    pin: Option<Pin>,
    /// Let tasks run as root (uid 0) (`allowRoot`). Default: refused.
    #[arg(long)]
    allow_root: bool,
    /// The address other nodes reach this one at, an IP address or host name
    /// (`advertiseAddress`): MASTER_ADDR of the jobs whose rank 0 runs here. Default: the
    /// address the planner sees this agent connect from.
    #[arg(long, value_name = "ADDR")]
    advertise_address: Option<String>,
    /// The most processes and threads one task may have, its cgroup's pids.max
    /// (`taskPidsMax`); `max` for no limit of its own. A fork bomb stops there instead of
    /// taking the node's. Default: 4096.
    #[arg(long, value_name = "N|max", value_parser = parse_pids_max)]
    task_pids_max: Option<PidsMax>,
    /// The directory below the agent's own cgroup in each cgroup v1 hierarchy that holds
    /// the tasks' cgroups (`cgroupName`). Default: hyperplan.
    #[arg(long, value_name = "NAME")]
    cgroup_name: Option<String>,
    /// Start tasks' shepherds through the launcher listening on SOCKET (`launcher`; see
    /// `hyperplan-agent launcher --help`), so tasks inherit none of the agent unit's
    /// restrictions; "" starts them as the agent's children, which is what happens
    /// without it. A launcher that does not answer is tried again for 10 s before the
    /// task fails.
    // (Any OS string, "" included: clap's own path parser refuses an empty value.)
    #[arg(long, value_name = "SOCKET", value_parser = clap::builder::TypedValueParser::map(clap::builder::OsStringValueParser::new(), PathBuf::from))]
    launcher: Option<PathBuf>,
    /// Each job its own /tmp and /dev/shm on this node, removed when its last task here
    /// ends (`[exec] privateTmp`): auto gives them where the agent runs as root and can make
    /// a mount namespace (or starts tasks through a launcher); on: a task that cannot have
    /// them fails; off: tasks see the node's. Default: auto.
    #[arg(long, value_enum, value_name = "WHEN")]
    private_tmp: Option<PrivateTmpArg>,
}

/// `--private-tmp`.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum PrivateTmpArg {
    Auto,
    On,
    Off,
}

/// `--metrics-listen`: an address, or none ("").
#[derive(Clone, Debug)]
struct MetricsListen(Option<String>);

fn parse_metrics_listen(s: &str) -> Result<MetricsListen, String> {
    hyperplan_agent::config::parse_listen(s)
        .map(MetricsListen)
        .map_err(|e| e.to_string())
}

/// `--task-pids-max`: a count, or no limit.
#[derive(Clone, Copy, Debug)]
struct PidsMax(Option<u64>);

fn parse_pids_max(s: &str) -> Result<PidsMax, String> {
    match s {
        "max" | "unlimited" => Ok(PidsMax(None)),
        n => match n.parse::<u64>() {
            Ok(n) if n >= 1 => Ok(PidsMax(Some(n))),
            _ => Err(format!(
                "expected a number of processes (at least 1) or `max`, got {s:?}"
            )),
        },
    }
}

/// Where the topology comes from: the probe's sources, shared by `probe` and `run`.
#[derive(Args, Debug)]
struct SourceArgs {
    /// Load an `lstopo` XML export instead of probing this machine.
    #[arg(long, value_name = "FILE", conflicts_with = "synthetic")]
    hwloc_xml: Option<PathBuf>,
    /// Build from an hwloc synthetic description, e.g. "pack:2 numa:2 core:8 pu:2".
    #[arg(long, value_name = "DESC")]
    synthetic: Option<String>,
    /// Read InfiniBand and NUMA sysfs files under DIR instead of /sys (`sysfsRoot`). A
    /// full hwloc-gather-topology tree (DIR/sys, DIR/proc) is also what hwloc reads
    /// (HWLOC_FSROOT) when no XML or synthetic source is given.
    #[arg(long, value_name = "DIR")]
    sysfs_root: Option<PathBuf>,
    /// A label for label discovery (repeatable), e.g. --label leaf=l7; adds to and
    /// overrides the `[labels]` of the agent configuration.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    labels: Vec<(String, String)>,
    /// Take the GPUs' NVLink fabric information from FILE, a saved `nvidia-smi
    /// --query-gpu=index,pci.bus_id,fabric.clusterUuid,fabric.cliqueId,fabric.state,fabric.status
    /// --format=csv` or `nvidia-smi -q` report, instead of asking them (NVML, then
    /// nvidia-smi): the fabric of the machine an `--hwloc-xml` export describes.
    #[arg(long, value_name = "FILE")]
    gpu_fabric: Option<PathBuf>,
    /// Agent configuration (TOML: `[labels]`, `sysfsRoot`, and for `run` `planner`,
    /// `certDir`, `nodeName`, `reprobeInterval`, `stateDir`, `pin`, `allowRoot`, `[exec]`,
    /// `[metrics]`, `[health]`). Default: /etc/hyperplan/agent.toml when it exists.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

fn main() -> ExitCode {
    // Before anything else: this may be the child that loads an untrusted XML.
    probe::isolate::serve_or_enable();
    let cli = Cli::parse();
    // A shepherd lives as long as its task: it starts no logger and keeps small.
    if let Command::Shepherd { spec, pmi_fd } = &cli.command {
        return match shepherd::run(spec, *pmi_fd) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("hyperplan-agent shepherd: {e}");
                ExitCode::FAILURE
            }
        };
    }
    // The daemon says what it does; the probe only what went wrong.
    let default_filter = match cli.command {
        Command::Run { .. } | Command::Launcher { .. } => "info",
        Command::Probe { .. } | Command::Shepherd { .. } => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        )
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Probe { source, format } => run_probe(source, format),
        Command::Run {
            source,
            planner,
            cert_dir,
            node,
            reprobe_interval,
            metrics_listen,
            tasks,
        } => run_agent(
            *source,
            planner,
            cert_dir,
            node,
            reprobe_interval,
            metrics_listen,
            tasks,
        ),
        Command::Launcher {
            socket,
            state_dir,
            allow_root,
            config,
        } => run_launcher(socket, state_dir, allow_root, config),
        Command::Shepherd { .. } => Ok(()), // handled above
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hyperplan-agent: {}", hyperplan_shared::error::chain_line(e.chain()));
            ExitCode::FAILURE
        }
    }
}

/// The planner list of `--planner` or agent.toml's `planner` (`origin` names which).
fn planner_list(text: &str, origin: &str) -> anyhow::Result<Vec<String>> {
    link::planners::parse_list(text).map_err(|e| anyhow::anyhow!("{origin}: {e}"))
}

/// The configuration file named, or the default one when it exists, or none.
fn load_config(path: Option<&Path>) -> anyhow::Result<AgentConfig> {
    let default_config = Path::new(DEFAULT_CONFIG);
    Ok(match path {
        Some(p) => AgentConfig::load(p)?,
        None if default_config.is_file() => AgentConfig::load(default_config)?,
        None => AgentConfig::default(),
    })
}

/// Probe options from the source flags over the configuration. A saved
/// hwloc-gather-topology tree re-executes this process with HWLOC_FSROOT set first
/// (see [`rerun_with_fsroot`]); an error means that failed.
fn probe_options(source: SourceArgs, config: &AgentConfig) -> anyhow::Result<ProbeOptions> {
    let sysfs_root = source.sysfs_root.or_else(|| config.sysfs_root.clone());
    let gpu_fabric = source.gpu_fabric;
    let mut all_labels = config.labels.clone();
    all_labels.extend(source.labels);
    let source = match (source.hwloc_xml, source.synthetic) {
        (Some(p), _) => Source::HwlocXml(p),
        (None, Some(s)) => Source::Synthetic(s),
        (None, None) => Source::Local,
    };
    if let (Source::Local, Some(root)) = (&source, &sysfs_root)
        && root.join("sys").is_dir()
        && std::env::var_os("HWLOC_FSROOT").as_deref() != Some(root.as_os_str())
    {
        return Err(rerun_with_fsroot(root));
    }
    Ok(ProbeOptions {
        source,
        sysfs_root,
        procfs_root: None,
        labels: all_labels,
        gpu_fabric,
    })
}

fn run_probe(source: SourceArgs, format: Format) -> anyhow::Result<()> {
    let config = load_config(source.config.as_deref())?;
    let opts = probe_options(source, &config)?;
    let topo = probe::probe(&opts)?;
    if !matches!(format, Format::Text) {
        // The text view lists them itself; JSON/YAML carry them in `warnings` too.
        for w in &topo.warnings {
            eprintln!("warning: {w}");
        }
    }
    let out = match format {
        Format::Text => probe::render_text(&topo),
        Format::Json => serde_json::to_string_pretty(&topo).context("encoding JSON")? + "\n",
        Format::Yaml => serde_saphyr::to_string(&topo).context("encoding YAML")?,
    };
    print!("{out}");
    Ok(())
}

fn run_agent(
    source: SourceArgs,
    planner: Option<String>,
    cert_dir: Option<PathBuf>,
    node: Option<String>,
    reprobe_interval: Option<u64>,
    metrics_listen: Option<MetricsListen>,
    tasks: TaskArgs,
) -> anyhow::Result<()> {
    let config_path = source.config.clone();
    let config_path_for_errors = config_path.clone();
    let config = load_config(source.config.as_deref())?;
    let planners = match (planner, &config.planner) {
        (Some(flag), _) => planner_list(&flag, "--planner")?,
        (None, Some(key)) => {
            let file = config_path.unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG));
            planner_list(key, &format!("`planner` in {}", file.display()))?
        }
        (None, None) => anyhow::bail!(
            "no planner address: pass --planner HOST:PORT (or HOST:PORT,HOST:PORT for a leader and its \
             standbys) or set `planner = \"HOST:PORT\"` in agent.toml"
        ),
    };
    let cert_dir = cert_dir
        .or_else(|| config.cert_dir.clone())
        .or_else(|| {
            std::env::var_os(CERT_DIR_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CERT_DIR));
    let node = match node.or_else(|| config.node_name.clone()) {
        Some(node) => node,
        None => link::hostname().context("no node name: pass --node NAME (the host name is unreadable)")?,
    };
    let reprobe_secs = reprobe_interval
        .or(config.reprobe_interval)
        .unwrap_or(DEFAULT_REPROBE_INTERVAL.as_secs());
    let probe = probe_options(source, &config)?;
    let live = probe.source == Source::Local && probe.sysfs_root.is_none();
    // The checks look at the machine the agent runs on: its sysfs, or the tree
    // `sysfsRoot` names (a saved one in tests and demos).
    let health_sysfs = probe
        .sysfs_root
        .as_deref()
        .map_or_else(|| PathBuf::from("/sys"), probe::sysfs_dir_of);
    let pin = match tasks.pin.or(config.pin).unwrap_or_default() {
        Pin::Auto => live,
        Pin::On => true,
        Pin::Off => false,
    };
    let state_dir = tasks
        .state_dir
        .or_else(|| config.state_dir.clone())
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR));
    anyhow::ensure!(
        state_dir.is_absolute(),
        "the state directory must be an absolute path, got {}",
        state_dir.display()
    );
    let advertise_address = tasks.advertise_address.or_else(|| config.advertise_address.clone());
    if let Some(a) = &advertise_address {
        anyhow::ensure!(
            hyperplan_shared::names::is_host_or_ip(a),
            "--advertise-address (advertiseAddress): expected an IP address or a host name, got {:?}",
            hyperplan_shared::names::shorten(a, 100)
        );
    }
    let pids_max = match (tasks.task_pids_max, config.task_pids_max) {
        (Some(PidsMax(flag)), _) => flag,
        (None, Some(key)) => key.limit(),
        (None, None) => Some(DEFAULT_PIDS_MAX),
    };
    let rlimits = match &config.exec.rlimits {
        Some(table) => hyperplan_agent::shepherd::rlimits::parse_table(table).map_err(|e| {
            let file = config_path_for_errors
                .clone()
                .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG));
            anyhow::anyhow!("{}: [exec] {e}", file.display())
        })?,
        None => Default::default(),
    };
    let cgroup_name = tasks
        .cgroup_name
        .or_else(|| config.cgroup_name.clone())
        .unwrap_or_else(|| DEFAULT_NAME.to_string());
    hyperplan_agent::tasks::cgroup::v1::check_dir_name(&cgroup_name)
        .map_err(|e| anyhow::anyhow!("--cgroup-name (cgroupName): {e}"))?;
    let metrics = match (metrics_listen, &config.metrics.listen) {
        (Some(MetricsListen(flag)), _) => flag.map(|addr| Listen {
            addr,
            origin: "--metrics-listen".into(),
        }),
        (None, Some(key)) => Some(Listen {
            addr: key.clone(),
            origin: format!(
                "[metrics] listen in {}",
                config_path_for_errors
                    .as_deref()
                    .unwrap_or(Path::new(DEFAULT_CONFIG))
                    .display()
            ),
        }),
        (None, None) => None,
    };
    let launcher = match tasks.launcher.or_else(|| config.launcher.clone()) {
        Some(p) if p.as_os_str().is_empty() => None,
        Some(p) => {
            anyhow::ensure!(
                p.is_absolute(),
                "--launcher (launcher): expected the launcher's socket as an absolute path, got {}",
                p.display()
            );
            if !p.exists() {
                tracing::warn!(
                    socket = %p.display(),
                    "no launcher listens yet; tasks wait for it (start hyperplan-launcher.service)"
                );
            }
            tracing::info!(socket = %p.display(), "tasks start through the launcher, outside this agent's unit");
            Some(p)
        }
        None => None,
    };
    let private_tmp = match tasks.private_tmp {
        Some(PrivateTmpArg::Auto) => None,
        Some(PrivateTmpArg::On) => Some(true),
        Some(PrivateTmpArg::Off) => Some(false),
        None => config.exec.private_tmp,
    };
    // Before the runtime's threads: it may fork a child to try a mount namespace.
    let private_tmp = hyperplan_agent::tasks::jobtmp::decide(
        private_tmp,
        config.exec.private_tmp_dir.clone(),
        launcher.is_some(),
        &state_dir,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    // The OOM killer takes a task that overran, not the agent (its shepherds inherit
    // this; each task goes back to 0 before exec).
    hyperplan_agent::oom::protect_self();
    // Before the runtime's threads: this may move the process into its cgroup's leaf.
    let confinement = Confinement::detect(Path::new(CGROUP_ROOT), pin, &cgroup_name);
    let health = hyperplan_agent::health::HealthOptions::from_section(&config.health, &state_dir, &health_sysfs);
    let opts = LinkOptions {
        health,
        planners,
        cert_dir,
        node,
        reprobe_interval: (reprobe_secs > 0).then(|| Duration::from_secs(reprobe_secs)),
        probe,
        advertise_address,
        metrics,
        tasks: TaskOptions {
            state_dir,
            pin,
            confinement,
            allow_root: tasks.allow_root || config.allow_root.unwrap_or(false),
            pids_max,
            limits_conf: config.exec.limits_conf.unwrap_or(true),
            rlimits,
            shepherd: std::env::current_exe().context("finding this executable (it runs the shepherds)")?,
            default_mpi: config.exec.default_mpi().map_err(|e| anyhow::anyhow!("{e}"))?,
            output_mode: config.exec.output_mode()?,
            private_tmp,
            cli: cli_path(),
            launcher,
        },
    };
    // Every thread the agent will use exists before any task runs: a task that uses up
    // the node's processes (EAGAIN) then costs the agent nothing. Blocking work (probes,
    // log reads, usage samples, name lookups) shares these threads and waits its turn.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(BLOCKING_THREADS)
        .thread_keep_alive(Duration::from_secs(KEEP_THREADS_SECS))
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(prestart_blocking_threads());
    runtime.block_on(link::run(opts))?;
    Ok(())
}

/// `hyperplan-agent launcher`: flags over agent.toml over the defaults.
fn run_launcher(
    socket: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    allow_root: bool,
    config: Option<PathBuf>,
) -> anyhow::Result<()> {
    let config = load_config(config.as_deref())?;
    let socket = socket
        .or_else(|| config.launcher.clone())
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| PathBuf::from(hyperplan_agent::launcher::DEFAULT_SOCKET));
    let state_dir = state_dir
        .or_else(|| config.state_dir.clone())
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR));
    anyhow::ensure!(
        socket.is_absolute() && state_dir.is_absolute(),
        "the socket and the state directory must be absolute paths, got {} and {}",
        socket.display(),
        state_dir.display()
    );
    // The OOM killer takes a task that overran, not the launcher (shepherds inherit this;
    // each task goes back to 0 before exec).
    hyperplan_agent::oom::protect_self();
    let opts = hyperplan_agent::launcher::server::Options {
        socket,
        state_dir,
        allow_root: allow_root || config.allow_root.unwrap_or(false),
        shepherd: std::env::current_exe().context("finding this executable (it runs the shepherds)")?,
    };
    hyperplan_agent::launcher::server::run(&opts)?;
    Ok(())
}

/// The agent's blocking threads: all started at once and never let go.
const BLOCKING_THREADS: usize = 6;
/// "Never" for tokio's idle blocking threads (a year; a huge value would overflow).
const KEEP_THREADS_SECS: u64 = 365 * 24 * 3600;

/// Starts every blocking thread now: each of [`BLOCKING_THREADS`] jobs waits until all
/// are running, so tokio must start a thread for each; they stay idle afterwards.
async fn prestart_blocking_threads() {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(BLOCKING_THREADS));
    let jobs: Vec<_> = (0..BLOCKING_THREADS)
        .map(|_| {
            let b = barrier.clone();
            tokio::task::spawn_blocking(move || {
                b.wait();
            })
        })
        .collect();
    for job in jobs {
        let _ = job.await;
    }
}

/// hwloc 2.x has no API for a file-system root: it reads `HWLOC_FSROOT` when it builds
/// the topology. Rather than change this process's environment (unsafe), replace this
/// process with the same command and the variable set: same pid, so systemd's
/// notifications and signals still reach the agent. Returns only if exec failed.
fn rerun_with_fsroot(root: &Path) -> anyhow::Error {
    use std::os::unix::process::CommandExt;
    let exe = match std::env::current_exe().context("finding this executable") {
        Ok(exe) => exe,
        Err(e) => return e,
    };
    let err = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env("HWLOC_FSROOT", root)
        .exec();
    anyhow::Error::new(err).context("running the probe with HWLOC_FSROOT set")
}

/// The `hyperplan` CLI batch jobs' `mpirun` calls (`hyperplan exec --node`): the one
/// installed beside this agent, else whichever the task's `PATH` finds.
fn cli_path() -> PathBuf {
    std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name("hyperplan"))
        .filter(|cli| cli.is_file())
        .unwrap_or_else(|| PathBuf::from("hyperplan"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// `--launcher ''` is what the README gives for forking shepherds this once.
    #[test]
    fn an_empty_launcher_is_taken_as_none() {
        for (given, want) in [("", ""), ("/run/l.sock", "/run/l.sock")] {
            let cli = Cli::try_parse_from(["hyperplan-agent", "run", "--launcher", given]).unwrap();
            let Command::Run { tasks, .. } = cli.command else {
                panic!("not run");
            };
            assert_eq!(tasks.launcher, Some(PathBuf::from(want)));
        }
    }
}
