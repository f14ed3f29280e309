//! `hyperplan-agent`: the node agent (a systemd service on every node).
//!
//! Today: `probe`, which reports the node's topology. The link to the planner (QUIC +
//! mutual TLS, register and heartbeat) arrives with its own issue.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use hyperplan_agent::config::{AgentConfig, DEFAULT_CONFIG};
use hyperplan_agent::probe::{self, ProbeOptions, Source};

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
        /// Load an `lstopo` XML export instead of probing this machine.
        #[arg(long, value_name = "FILE", conflicts_with = "synthetic")]
        hwloc_xml: Option<PathBuf>,
        /// Build from an hwloc synthetic description, e.g. "pack:2 numa:2 core:8 pu:2".
        #[arg(long, value_name = "DESC")]
        synthetic: Option<String>,
        /// Read InfiniBand and NUMA sysfs files under DIR instead of /sys. A full
        /// hwloc-gather-topology tree (DIR/sys, DIR/proc) is also what hwloc reads
        /// (HWLOC_FSROOT) when no XML or synthetic source is given.
        #[arg(long, value_name = "DIR")]
        sysfs_root: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
        /// A label for label discovery (repeatable), e.g. --label leaf=l7; adds to and
        /// overrides the `[labels]` of the agent configuration.
        #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
        labels: Vec<(String, String)>,
        /// Agent configuration (TOML: `[labels]`, `sysfsRoot`). Default:
        /// /etc/hyperplan/agent.toml when it exists.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hyperplan-agent: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let Command::Probe {
        hwloc_xml,
        synthetic,
        sysfs_root,
        format,
        labels,
        config,
    } = cli.command;
    let default_config = std::path::Path::new(DEFAULT_CONFIG);
    let config = match config {
        Some(p) => AgentConfig::load(&p)?,
        None if default_config.is_file() => AgentConfig::load(default_config)?,
        None => AgentConfig::default(),
    };
    let sysfs_root = sysfs_root.or(config.sysfs_root);
    let mut all_labels = config.labels;
    all_labels.extend(labels);
    let source = match (hwloc_xml, synthetic) {
        (Some(p), _) => Source::HwlocXml(p),
        (None, Some(s)) => Source::Synthetic(s),
        (None, None) => Source::Local,
    };
    if let (Source::Local, Some(root)) = (&source, &sysfs_root)
        && root.join("sys").is_dir()
        && std::env::var_os("HWLOC_FSROOT").as_deref() != Some(root.as_os_str())
    {
        return rerun_with_fsroot(root);
    }
    let opts = ProbeOptions {
        source,
        sysfs_root,
        procfs_root: None,
        labels: all_labels,
    };
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

/// hwloc 2.x has no API for a file-system root: it reads `HWLOC_FSROOT` when it builds
/// the topology. Rather than change this process's environment, run the same command
/// again with the variable set and pass its exit status on.
fn rerun_with_fsroot(root: &std::path::Path) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("finding this executable")?;
    let status = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env("HWLOC_FSROOT", root)
        .status()
        .context("running the probe with HWLOC_FSROOT set")?;
    if status.success() {
        Ok(())
    } else {
        std::process::exit(status.code().unwrap_or(1))
    }
}
