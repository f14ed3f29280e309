//! `hyperplan hold JOB...` and `hyperplan release JOB...` (Slurm's `scontrol hold` and
//! `release`): keep pending jobs from starting, and let them start again. The planner
//! decides who may; this only sends the names and prints what was done.

use hyperplan_net::messages::RequestCommand;
use hyperplan_shared::status::HoldsChanged;

use super::{Output, long_help, run_request};
use crate::client::ClientArgs;

const HOLD_EXAMPLES: &str = "  hyperplan hold train-64
  hyperplan hold prep train eval --output json
  hyperplan submit --hold train.yaml && hyperplan release train";

const RELEASE_EXAMPLES: &str = "  hyperplan release train-64
  hyperplan release prep train eval";

/// Hold pending jobs: they are not started, do not preempt and get no reservation until
/// released (`hyperplan status` says `held by USER`). A job already running is refused.
///
/// You may hold your own jobs; an admin certificate may hold anyone's, and an admin's
/// hold only an admin may release. Every job is checked first: a refusal changes
/// nothing. Prints `held JOB...`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = long_help(HOLD_EXAMPLES))]
pub struct HoldArgs {
    /// The jobs' names (see `hyperplan status`).
    #[arg(value_name = "JOB", required = true)]
    jobs: Vec<String>,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    client: ClientArgs,
}

/// Release held jobs: they are tried from the next tick (a job not held is left as it
/// is). A hold an admin put on a job only an admin may release. Prints `released JOB...`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = long_help(RELEASE_EXAMPLES))]
pub struct ReleaseArgs {
    /// The jobs' names (see `hyperplan status`).
    #[arg(value_name = "JOB", required = true)]
    jobs: Vec<String>,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    client: ClientArgs,
}

pub fn hold(args: HoldArgs) -> anyhow::Result<()> {
    let command = RequestCommand::Hold { jobs: args.jobs };
    run_request(&args.client, command, args.output, "hold receipt", render)
}

pub fn release(args: ReleaseArgs) -> anyhow::Result<()> {
    let command = RequestCommand::Release { jobs: args.jobs };
    run_request(&args.client, command, args.output, "release receipt", render)
}

/// `held JOB...` / `released JOB...`.
pub fn render(changed: &HoldsChanged) -> String {
    format!("{} {}\n", changed.action, changed.jobs.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipts() {
        let h = HoldsChanged {
            action: "held".into(),
            jobs: vec!["prep".into(), "train".into()],
        };
        insta::assert_snapshot!(render(&h), @"held prep train");
        let r = HoldsChanged {
            action: "released".into(),
            jobs: vec!["train".into()],
        };
        insta::assert_snapshot!(render(&r), @"released train");
    }
}
