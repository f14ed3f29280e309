//! `hyperplan-planner`: the planner daemon on the head node.
//!
//! The networked daemon (QUIC + mutual TLS ingest from agents, the CLI API) lands with
//! its own issue; today this binary checks a planner configuration so an operator can
//! validate `/etc/hyperplan/planner.toml` before deploying it.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    version,
    about = "hyperplan planner daemon (configuration check; the network daemon is not built yet)"
)]
struct Args {
    /// Planner configuration (TOML; see systemd/planner.toml).
    #[arg(long, default_value = "/etc/hyperplan/planner.toml")]
    config: PathBuf,
    /// Only validate the configuration and print the resolved scoring arguments.
    #[arg(long)]
    check: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let cfg = hyperplan_planner::PlannerConfig::load(&args.config)
        .with_context(|| format!("loading {}", args.config.display()))?;
    println!("{}: ok", args.config.display());
    println!("{:#?}", cfg.scoring);
    if !args.check {
        anyhow::bail!("the planner daemon is not built yet; use `hyperplan simulate` to plan with this configuration");
    }
    Ok(())
}
