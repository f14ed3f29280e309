//! `hyperplan cluster generate fat-tree`: write a cluster file to plan with.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use hyperplan_shared::fattree::{self, FatTreeParams};
use hyperplan_shared::quantity::parse_resource_list;

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Generate a cluster file.
    Generate {
        #[command(subcommand)]
        kind: Generate,
    },
}

#[derive(Subcommand, Debug)]
pub enum Generate {
    /// A fat tree: nodes under leaves, leaves under spines, and so on, one top HyperNode.
    ///
    /// `--fanout 16,32,8` puts 16 nodes under each leaf (tier 1), 32 leaves under each
    /// spine (tier 2), 8 spines under each pod (tier 3), and one top HyperNode (tier 4)
    /// over the pods. HyperNodes are written as Volcano HyperNode manifests in a file
    /// beside the cluster file (listed in its `hyperNodeFiles`), or inline on stdout.
    #[command(
        after_help = "Example:\n  hyperplan cluster generate fat-tree --nodes 10000 --fanout 16,32,8 \\\n    --node-resources cpu=128,memory=1Ti,nvidia.com/gpu=8 --busy 0.1 --seed 7 -o big.yaml"
    )]
    FatTree {
        /// Number of nodes.
        #[arg(long)]
        nodes: u32,
        /// Nodes per leaf, then children per HyperNode for each higher tier.
        #[arg(long, value_delimiter = ',', required = true)]
        fanout: Vec<u32>,
        /// Every node's resources, e.g. cpu=128,memory=1Ti,nvidia.com/gpu=8.
        #[arg(long, default_value = "cpu=128,memory=1Ti,nvidia.com/gpu=8")]
        node_resources: String,
        /// Share of nodes (0..1) marked fully used by outside work.
        #[arg(long, default_value_t = 0.0)]
        busy: f64,
        /// Seed for choosing the busy nodes (same seed, same cluster).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Node name prefix.
        #[arg(long, default_value = "node")]
        prefix: String,
        /// Write the cluster file here (and the HyperNode manifests to
        /// `<stem>.hypernodes.yaml` beside it) instead of stdout.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
}

pub fn run(cmd: Command) -> anyhow::Result<()> {
    let Command::Generate { kind } = cmd;
    let Generate::FatTree {
        nodes,
        fanout,
        node_resources,
        busy,
        seed,
        prefix,
        output,
    } = kind;
    let node_resources = parse_resource_list(&node_resources).context("--node-resources")?;
    let mut spec = fattree::generate(&FatTreeParams {
        nodes,
        fanout,
        node_resources,
        busy,
        seed,
        prefix,
    })?;
    match output {
        None => print!("{}", fattree::to_cluster_yaml(&spec)),
        Some(path) => {
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("cluster");
            let hn_name = format!("{stem}.hypernodes.yaml");
            let hn_path = path.with_file_name(&hn_name);
            let manifests = fattree::to_hypernode_manifests(&spec.hyper_nodes);
            std::fs::write(&hn_path, manifests).with_context(|| format!("writing {}", hn_path.display()))?;
            spec.hyper_nodes.clear();
            let mut text = fattree::to_cluster_yaml(&spec);
            text.push_str(&format!("hyperNodeFiles: [{hn_name}]\n"));
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote {} and {}", path.display(), hn_path.display());
        }
    }
    Ok(())
}
