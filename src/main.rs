//! `hyperplan`: the command line for people.
//!
//! Offline: `simulate` (plan jobs on a cluster file with the real planner core, in
//! virtual time), `cluster generate fat-tree` (write a cluster file to plan with),
//! `topology` (HyperNodes from fabric dumps) and `certs` (the cluster CA).
//! Against a running planner (`client`, `commands/`): `nodes`, `hypernodes`, `queues`,
//! `submit`, `status`, `cancel`, `explain`, `logs`, `planners`.

mod certs;
mod client;
mod cluster;
mod commands;
mod demo;
mod fabric;
mod simulate;
mod topology;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "hyperplan",
    version,
    about = "Topology-aware batch planner for bare-metal HPC and AI clusters",
    long_about = "hyperplan places gang jobs under the lowest common switch that can hold them \
                  (Volcano's network-topology-aware scheduling, on bare metal).\n\n\
                  Start with `hyperplan demo` (a planner and agents on this machine) or \
                  `hyperplan simulate --cluster examples/cluster.yaml --jobs examples/jobs.yaml`.\n\n\
                  Against a running planner: `hyperplan nodes`, `hyperplan hypernodes`, `hyperplan queues`, `hyperplan submit FILE`, \
                  `hyperplan status [JOB]`, `hyperplan cancel JOB`, `hyperplan hold|release JOB...`, `hyperplan explain JOB`, `hyperplan planners`, \
                  and from the accounting database `hyperplan history` and `hyperplan report usage|utilisation|waits` \
                  (planner address and certificates from --planner/--cert-dir/--user, \
                  HYPERPLAN_PLANNER/HYPERPLAN_CERT_DIR/HYPERPLAN_USER or ~/.config/hyperplan/client.toml; a leader \
                  and its standbys as a list: --planner head01:7400,head02:7400)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    Demo(demo::Args),
    Simulate(simulate::Args),
    Nodes(commands::nodes::Args),
    Hypernodes(commands::hypernodes::Args),
    Queues(commands::queues::Args),
    Submit(commands::submit::Args),
    Status(commands::status::Args),
    Cancel(commands::cancel::Args),
    Hold(commands::hold::HoldArgs),
    Release(commands::hold::ReleaseArgs),
    Explain(commands::explain::Args),
    Logs(commands::logs::Args),
    Exec(commands::exec::Args),
    Run(commands::run::Args),
    Sbatch(commands::sbatch::Args),
    Alloc(commands::alloc::Args),
    Planners(commands::planners::Args),
    History(commands::history::Args),
    Report(commands::report::Args),
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

/// The daemon's allocator: `simulate` runs the same ticks (see planner/src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // Before anything else: this may be the child that loads an untrusted hwloc XML.
    hyperplan_agent::probe::isolate::serve_or_enable();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    // What clap's attributes cannot say about `simulate` (with --swf, --jobs is a number),
    // reported as clap reports usage errors: the message, usage, exit code 2.
    if let Command::Simulate(args) = &cli.command
        && let Err((kind, message)) = args.check()
    {
        let mut command = Cli::command();
        command.build();
        if let Some(simulate) = command.find_subcommand_mut("simulate") {
            simulate.error(kind, message).exit();
        }
    }
    let result = match cli.command {
        Command::Demo(args) => demo::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Nodes(args) => commands::nodes::run(args),
        Command::Hypernodes(args) => commands::hypernodes::run(args),
        Command::Queues(args) => commands::queues::run(args),
        Command::Submit(args) => commands::submit::run(args),
        Command::Status(args) => commands::status::run(args),
        Command::Cancel(args) => commands::cancel::run(args),
        Command::Hold(args) => commands::hold::hold(args),
        Command::Release(args) => commands::hold::release(args),
        Command::Explain(args) => commands::explain::run(args),
        Command::Logs(args) => commands::logs::run(args),
        Command::Exec(args) => commands::exec::run(args),
        Command::Run(args) => commands::run::run(args),
        Command::Sbatch(args) => commands::sbatch::run(args),
        Command::Alloc(args) => commands::alloc::run(args),
        Command::Planners(args) => commands::planners::run(args),
        Command::History(args) => commands::history::run(args),
        Command::Report(args) => commands::report::run(args),
        Command::Certs { command } => certs::run(command),
        Command::Cluster { command } => cluster::run(command),
        Command::Topology { command } => fabric::run(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // `submit --wait`: the job's own exit code, already explained on stderr.
        Err(e) if e.downcast_ref::<commands::submit::JobsEnded>().is_some() => {
            ExitCode::from(e.downcast_ref::<commands::submit::JobsEnded>().map_or(1, |j| j.0))
        }
        Err(e) => {
            eprintln!("hyperplan: {}", hyperplan_shared::error::chain_line(e.chain()));
            ExitCode::FAILURE
        }
    }
}
