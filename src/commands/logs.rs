//! `hyperplan logs JOB [--task NAME] [--follow]`: a task's output, read from its node by
//! the node's agent and relayed through the planner, so no shared file system is needed.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use hyperplan_net::messages::RequestCommand;
use hyperplan_shared::status::LogPiece;

use super::{Output, decode, long_help};
use crate::client::{self, ClientArgs, ClientConfig};

const EXAMPLES: &str = "  hyperplan logs train-64
  hyperplan logs train-64 --task worker-3 --follow
  hyperplan logs train-64 --task worker-3 --stderr --output json";

/// How often `--follow` asks again when there was nothing new.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);
/// Bytes per request.
const CHUNK: u32 = 256 << 10;

/// Print a task's output (its `output` file; `--stderr`: its `error` file when that is
/// another one).
///
/// The task's agent reads the file on the task's node, wherever the job's `output`
/// pattern put it, and the planner relays it: no shared file system needed. Without
/// `--task`, the job's rank-0 task. Only the job's owner or an admin may read it. With
/// `--follow`, keeps printing what the task writes until it has ended and everything is
/// printed (Ctrl-C stops following; the task runs on). `--output json` prints the
/// pieces as they come, one JSON object per line (`job`, `task`, `node`, `offset`,
/// `data`, `nextOffset`, `size`, `ended`).
#[derive(clap::Args, Debug)]
#[command(after_long_help = long_help(EXAMPLES))]
pub struct Args {
    /// The job's name (see `hyperplan status`).
    #[arg(value_name = "JOB")]
    job: String,
    /// The task's name, e.g. `worker-3` (`hyperplan status JOB` lists them). Default: the
    /// job's rank-0 task.
    #[arg(long, value_name = "NAME")]
    task: Option<String>,
    /// Read the task's error file (its `error` pattern) instead of its output file.
    #[arg(long)]
    stderr: bool,
    /// Keep printing new output until the task has ended.
    #[arg(long, short = 'f')]
    follow: bool,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    client: ClientArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let config = ClientConfig::from_process(&args.client)?;
    let mut offset = 0u64;
    let stdout = std::io::stdout();
    loop {
        let command = RequestCommand::Logs {
            job: args.job.clone(),
            task: args.task.clone(),
            stderr: args.stderr,
            offset,
            max_bytes: CHUNK,
        };
        let value = client::request(&config, command)?;
        let piece: LogPiece = decode(value.clone(), "piece of output")?;
        {
            let mut out = stdout.lock();
            match args.output {
                Output::Json => {
                    let line = serde_json::to_string(&value).context("encoding the reply")?;
                    writeln!(out, "{line}")?;
                }
                // The task's own output, printed as it wrote it, to its owner.
                Output::Table => out.write_all(piece.data.as_bytes())?,
            }
            out.flush().context("writing to standard output")?;
        }
        let progressed = piece.next_offset > offset;
        offset = piece.next_offset.max(offset);
        let at_end = offset >= piece.size;
        if at_end && (!args.follow || piece.ended) {
            return Ok(());
        }
        if at_end || !progressed {
            std::thread::sleep(FOLLOW_EVERY);
        }
    }
}
