//! `hyperplan-agent`: the node agent (systemd service on every node).
//!
//! Its probe (hwloc + sysfs topology) and its link to the planner (QUIC + mutual TLS)
//! arrive with their own issues; this binary only reports that and its version.

use clap::Parser;

#[derive(Parser, Debug)]
#[command(version, about = "hyperplan node agent (probe and planner link not built yet)")]
struct Args {}

fn main() -> anyhow::Result<()> {
    let _ = Args::parse();
    anyhow::bail!("hyperplan-agent: the topology probe and planner link are not built yet")
}
