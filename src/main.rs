//! `hyperplan`: the command line for people.
//!
//! Today: `simulate` (plan jobs on a cluster file with the real planner core, in virtual
//! time) and `cluster generate fat-tree` (write a cluster file to plan with). The
//! commands that talk to a running planner (submit, status, nodes, hypernodes, explain)
//! and `certs` arrive with the daemon.

mod certs;
mod cluster;
mod fabric;
mod simulate;
mod topology;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "hyperplan",
    version,
    about = "Topology-aware batch planner for bare-metal HPC and AI clusters",
    long_about = "hyperplan places gang jobs under the lowest common switch that can hold them \
                  (Volcano's network-topology-aware scheduling, on bare metal).\n\n\
                  Start with `hyperplan simulate --cluster examples/cluster.yaml --jobs examples/jobs.yaml`."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    Simulate(simulate::Args),
    /// Cluster CA and certificates for mutual TLS between planner, agents and people.
    Certs {
        #[command(subcommand)]
        command: certs::Command,
    },
    /// Work with cluster files.
    Cluster {
        #[command(subcommand)]
        command: cluster::Command,
    },
    /// Fabric topology: HyperNodes from ibnetdiscover dumps, Slurm topology.conf in and out.
    Topology {
        #[command(subcommand)]
        command: fabric::Command,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(args) => simulate::run(args),
        Command::Certs { command } => certs::run(command),
        Command::Cluster { command } => cluster::run(command),
        Command::Topology { command } => fabric::run(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hyperplan: {e:#}");
            ExitCode::FAILURE
        }
    }
}
