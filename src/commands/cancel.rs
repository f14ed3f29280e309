//! `hyperplan cancel JOB`: stop a job and give its resources back. Only the job's owner
//! or an admin may; the planner says so when you may not.

use hyperplan_net::messages::RequestCommand;
use hyperplan_shared::status::Cancelled;

use super::{Output, long_help, run_request};
use crate::client::ClientArgs;

const EXAMPLES: &str = "  hyperplan cancel train-64
  hyperplan cancel train-64 --grace 60s
  hyperplan cancel train-64 --user admin --output json";

/// Cancel a job: pending, it never starts; running, every task's process group gets
/// SIGTERM, then SIGKILL after the grace period, and its CPUs, GPUs and memory are free
/// once its node reports it ended.
///
/// You may cancel your own jobs (the user your certificate names); an admin certificate
/// may cancel anyone's. Prints `cancelled JOB`, or with `--output json` `{"cancelled":
/// "JOB"}`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = long_help(EXAMPLES))]
pub struct Args {
    /// The job's name (see `hyperplan status`).
    #[arg(value_name = "JOB")]
    job: String,
    /// Time between SIGTERM and SIGKILL for the job's tasks: seconds, or `30s`, `2m`; at
    /// most the planner's `[limits] maxCancelGrace` (10m by default). Cancelling a job
    /// already being stopped shortens its grace to this one if shorter (an admin's
    /// cancel then kills it at once).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_grace)]
    grace: u64,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    client: ClientArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let command = RequestCommand::Cancel {
        job: args.job,
        grace_secs: args.grace,
    };
    run_request(&args.client, command, args.output, "cancellation receipt", render)
}

/// `--grace`: `10`, `10s`, `2m` (the job file's time format).
fn parse_grace(text: &str) -> Result<u64, String> {
    if text.trim() == "0" {
        return Ok(0); // SIGKILL at once
    }
    hyperplan_shared::timelimit::parse_time_limit(text).map_err(|e| e.to_string())
}

/// `cancelled JOB`.
pub fn render(cancelled: &Cancelled) -> String {
    format!("cancelled {}\n", cancelled.cancelled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipt() {
        let c = Cancelled {
            cancelled: "train-64".into(),
        };
        insta::assert_snapshot!(render(&c), @"cancelled train-64");
    }
}
