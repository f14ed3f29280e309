//! `hyperplan topology`: HyperNodes from an InfiniBand fabric dump, and Slurm
//! `topology.conf` in and out, printed so a person can inspect or edit them before use.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Subcommand, ValueEnum};
use hyperplan_fabric::slurm::{parse_topology_conf, to_topology_conf};
use hyperplan_fabric::{Discovery, GuidMap, HostNames, discover, dot, json, parse_ibnetdiscover};
use hyperplan_net::messages::RequestCommand;
use hyperplan_shared::HyperNodeSpec;
use hyperplan_shared::status::Manifests;

use crate::client::ClientArgs;
use hyperplan_shared::hypernode::{parse_hypernode_files, parse_hypernode_manifests, to_hypernode_manifests};

/// How many unmapped CAs the stderr summary lists before it says "and N more".
const UNMAPPED_SHOWN: usize = 10;

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Build HyperNodes (every tier) from an `ibnetdiscover` dump.
    ///
    /// Reads the standard `ibnetdiscover` output or its `-p` ports report. Host CAs are
    /// named by --guid-map, else by the host name in their node description
    /// (`"gpu017 mlx5_0"` → gpu017); CAs nothing names are listed on stderr, never guessed.
    /// SHARP aggregation nodes and other switch-internal CAs are not hosts. Tier 1 groups the
    /// leaf switches that share a host (multi-rail nodes join their leaves); each higher tier
    /// groups the tier below through the next layer of switches, up to the top. A director
    /// chassis counts as one switch. Tier names: leaf, spine, core, tier4, …. Links that
    /// trained narrower or slower than most of their switch's links to the same tier (a
    /// host cable at 1xHDR among 4xHDR ones) are listed on stderr: the planner marks their
    /// HyperNodes degraded.
    #[command(after_help = "Examples:\n  \
        ibnetdiscover > fabric.out\n  \
        hyperplan topology discover --ibnetdiscover fabric.out > hypernodes.yaml\n  \
        hyperplan topology discover --ibnetdiscover fabric.out --guid-map hosts.map --output slurm > topology.conf\n  \
        hyperplan topology discover --ibnetdiscover fabric.out --output dot | dot -Tsvg > fabric.svg\n\n\
        GUID map file: one `GUID HOST` per line, the GUID written H-<16 hex digits> (as ibnetdiscover\n\
        names CAs), 0x<hex> or hex, node or port GUID; `#` starts a comment. ibnetdiscover's own\n\
        --node-name-map files work too.")]
    Discover {
        /// The `ibnetdiscover` (or `ibnetdiscover -p`) output to read.
        #[arg(long, value_name = "FILE")]
        ibnetdiscover: PathBuf,
        /// GUID → host name map for CAs whose descriptions do not name their host.
        #[arg(long, value_name = "FILE")]
        guid_map: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "yaml")]
        output: DiscoverOutput,
    },
    /// Read a Slurm `topology.conf` (topology/tree) as HyperNodes.
    ///
    /// `SwitchName=… Nodes=…` switches are tier 1; a switch's tier is one more than its
    /// highest child switch. Hostlists such as `gpu[001-016,020]` are expanded; `LinkSpeed`
    /// is ignored. A cycle of `Switches=` references is broken with a warning on stderr.
    #[command(after_help = "Example:\n  hyperplan topology import --slurm /etc/slurm/topology.conf > hypernodes.yaml")]
    Import {
        /// The `topology.conf` to read.
        #[arg(long, value_name = "FILE")]
        slurm: PathBuf,
        #[arg(long, value_enum, default_value = "yaml")]
        output: ImportOutput,
    },
    /// Write HyperNodes in another tool's format: the running planner's, or files'.
    ///
    /// Without --hypernodes, asks the running planner for the HyperNodes it places with
    /// (every discovery source's, broken ones left out, members resolved to node names).
    /// `--format slurm` writes a topology.conf for Slurm's topology/tree plugin, one
    /// `SwitchName=` line per HyperNode, names compressed to hostlists; `--format yaml`
    /// writes Volcano HyperNode manifests (e.g. to freeze a discovered fabric into a
    /// `static` source you edit by hand).
    #[command(after_help = "Examples:\n  \
        hyperplan topology export --format slurm > /etc/slurm/topology.conf\n  \
        hyperplan topology export --format yaml > /etc/hyperplan/hypernodes.yaml\n  \
        hyperplan topology export --format slurm --hypernodes hypernodes.yaml > topology.conf")]
    Export {
        #[arg(long, value_enum)]
        format: ExportFormat,
        /// Volcano HyperNode manifest files (several YAML documents each) instead of the
        /// planner's HyperNodes.
        #[arg(long, value_name = "FILE", num_args = 1..)]
        hypernodes: Vec<PathBuf>,
        #[command(flatten)]
        client: ClientArgs,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum DiscoverOutput {
    /// Volcano HyperNode manifests (`kubectl apply -f` and hyperplan's hyperNodeFiles take them).
    Yaml,
    /// A Slurm topology.conf.
    Slurm,
    /// A Graphviz tree: pipe it to `dot -Tsvg`.
    Dot,
    /// HyperNodes, switches with their levels, hosts, unmapped and excluded CAs, warnings.
    Json,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ImportOutput {
    /// Volcano HyperNode manifests.
    Yaml,
    /// `{"hypernodes": [...], "warnings": [...]}`.
    Json,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ExportFormat {
    /// Slurm topology.conf (topology/tree).
    Slurm,
    /// Volcano HyperNode manifests.
    Yaml,
}

/// A fabric dump or topology.conf, read no further than the limit (README, Limits).
fn read(path: &Path) -> anyhow::Result<String> {
    use hyperplan_shared::limits::{MAX_FABRIC_FILE, ReadError, read_file_text};
    let what = path.display().to_string();
    read_file_text(path, MAX_FABRIC_FILE, &what).map_err(|e| match e {
        ReadError::Io { error, .. } => anyhow::anyhow!("reading {what}: {error}"),
        other => anyhow::anyhow!("{other}"),
    })
}

pub fn run(cmd: Command) -> anyhow::Result<()> {
    match cmd {
        Command::Discover {
            ibnetdiscover,
            guid_map,
            output,
        } => run_discover(&ibnetdiscover, guid_map.as_deref(), output),
        Command::Import { slurm, output } => {
            let imported = parse_topology_conf(&read(&slurm)?, &slurm)?;
            for w in &imported.warnings {
                eprintln!("warning: {w}");
            }
            let text = match output {
                ImportOutput::Yaml => to_hypernode_manifests(&imported.hypernodes),
                ImportOutput::Json => pretty(&json::hypernodes_json(&imported.hypernodes, &imported.warnings))?,
            };
            print!("{text}");
            Ok(())
        }
        Command::Export {
            format,
            hypernodes,
            client,
        } => {
            let mut all: Vec<HyperNodeSpec> = Vec::new();
            if hypernodes.is_empty() {
                let reply = crate::commands::call(&client, RequestCommand::Manifests)?;
                let m: Manifests = crate::commands::decode(reply, "HyperNode manifests")?;
                all = parse_hypernode_manifests(&m.manifests, Path::new("the planner's HyperNodes"))?;
                if all.is_empty() {
                    bail!("the planner has no HyperNodes (`hyperplan hypernodes` shows its discovery sources)");
                }
            }
            let texts = hypernodes
                .iter()
                .map(|p| read(p).map(|t| (p.as_path(), t)))
                .collect::<anyhow::Result<Vec<_>>>()?;
            all.extend(parse_hypernode_files(texts.iter().map(|(p, t)| (*p, t.as_str())))?);
            match format {
                ExportFormat::Slurm => print!("{}", to_topology_conf(&all)?),
                ExportFormat::Yaml => print!("{}", to_hypernode_manifests(&all)),
            }
            Ok(())
        }
    }
}

fn pretty(v: &serde_json::Value) -> anyhow::Result<String> {
    Ok(serde_json::to_string_pretty(v).context("encoding JSON")? + "\n")
}

fn run_discover(dump: &Path, guid_map: Option<&Path>, output: DiscoverOutput) -> anyhow::Result<()> {
    let mut names = HostNames::default();
    if let Some(path) = guid_map {
        names.map_file = GuidMap::parse(&read(path)?, path)?;
    }
    let fabric = parse_ibnetdiscover(&read(dump)?, dump)?;
    let d = discover(&fabric, &names)?;
    eprint!("{}", summary(&d, dump));
    let text = match output {
        DiscoverOutput::Yaml => to_hypernode_manifests(&d.hypernodes),
        DiscoverOutput::Slurm => to_topology_conf(&d.hypernodes)?,
        DiscoverOutput::Dot => dot::to_dot(&d.hypernodes),
        DiscoverOutput::Json => pretty(&json::discovery_json(&d))?,
    };
    print!("{text}");
    Ok(())
}

/// What a person should know on stderr: counts, unmapped CAs, warnings.
fn summary(d: &Discovery, dump: &Path) -> String {
    let mut out = format!("{}: {}\n", dump.display(), d.summary());
    if !d.unmapped.is_empty() {
        out.push_str(&format!(
            "{} CA(s) name no host; map their GUIDs with --guid-map (they are in no HyperNode):\n",
            d.unmapped.len()
        ));
        for u in d.unmapped.iter().take(UNMAPPED_SHOWN) {
            out.push_str(&format!("  {u}\n"));
        }
        if d.unmapped.len() > UNMAPPED_SHOWN {
            out.push_str(&format!(
                "  … and {} more (all of them: --output json, \"unmapped\")\n",
                d.unmapped.len() - UNMAPPED_SHOWN
            ));
        }
    }
    if !d.degraded_links.is_empty() {
        out.push_str(&format!(
            "{} link(s) below their neighbours' rate (the planner marks their HyperNodes degraded):\n",
            d.degraded_links.len()
        ));
        for l in d.degraded_links.iter().take(UNMAPPED_SHOWN) {
            out.push_str(&format!("  {}: {l}\n", l.hypernode));
        }
        if d.degraded_links.len() > UNMAPPED_SHOWN {
            out.push_str(&format!(
                "  … and {} more (all of them: --output json, \"degradedLinks\")\n",
                d.degraded_links.len() - UNMAPPED_SHOWN
            ));
        }
    }
    for w in &d.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}
