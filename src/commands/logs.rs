//! `hyperplan logs JOB [--task NAME] [--follow]`: a task's output, read from its node by
//! the node's agent and relayed through the planner, so no shared file system is needed.
//! `hyperplan logs JOB.STEP [--node N]`: a step's (`hyperplan exec`), kept by the agents.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use hyperplan_net::messages::{RequestCommand, ResponseError};
use hyperplan_shared::status::LogPiece;

use super::{Output, decode, long_help};
use crate::client::{self, ClientArgs, ClientConfig};

const EXAMPLES: &str = "  hyperplan logs train-64
  hyperplan logs train-64 --task worker-3 --follow
  hyperplan logs train-64 --task worker-3 --stderr --output json
  hyperplan logs train-64.2 --node gpu017     # step 2 (the third `hyperplan exec` into it)";

/// How often `--follow` asks again when there was nothing new.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);
/// `--follow` through a planner or agent restart: asks again, waiting up to this long
/// between tries, and gives up after [`FOLLOW_GIVE_UP`] without an answer.
const FOLLOW_RETRY_MAX: Duration = Duration::from_secs(5);
const FOLLOW_GIVE_UP: Duration = Duration::from_secs(300);
/// Bytes per request.
const CHUNK: u32 = 256 << 10;

/// Print a task's output (its `output` file; `--stderr`: its `error` file when that is
/// another one).
///
/// The task's agent reads the file on the task's node, wherever the job's `output`
/// pattern put it, and the planner relays it: no shared file system needed. Without
/// `--task`, the job's rank-0 task. Only the job's owner or an admin may read it. With
/// `--follow`, keeps printing what the task writes until it has ended and everything is
/// printed (Ctrl-C stops following; the task runs on); it follows through restarts of
/// the planner and of the task's agent, saying on stderr what it waits for, and gives up
/// after 5 minutes without an answer. `JOB.STEP` reads a step's output instead: every
/// `hyperplan exec` into a job is a step, numbered from 0 (`hyperplan exec` does not
/// say; the first is 0), whose output (standard output and error together, the first 64
/// MiB of a step, 256 MiB of a job's steps, 1 GiB on a node; a last line says where it was
/// cut) its nodes' agents keep for the newest 256 jobs; `--node` picks the node (default:
/// the first it ran on). `--output json` prints the
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
    /// For `JOB.STEP`: the node whose output of the step to read.
    #[arg(long, value_name = "NODE")]
    node: Option<String>,
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
    let (mut read_once, mut retry) = (false, FOLLOW_EVERY);
    let mut waiting: Option<std::time::Instant> = None;
    let mut last_said: Option<String> = None;
    loop {
        let command = RequestCommand::Logs {
            job: args.job.clone(),
            task: args.task.clone(),
            stderr: args.stderr,
            offset,
            max_bytes: CHUNK,
            node: args.node.clone(),
        };
        let value = match client::request(&config, command) {
            Ok(value) => {
                if waiting.take().is_some() {
                    eprintln!("hyperplan: reading the output again");
                }
                value
            }
            // Only while following, and only once something was read (a first request
            // that fails is a mistake to say at once): wait out a restart.
            Err(e) if args.follow && read_once && for_now(&e) => {
                let since = *waiting.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= FOLLOW_GIVE_UP {
                    return Err(e.context(format!("no answer for {} s", FOLLOW_GIVE_UP.as_secs())));
                }
                let said = format!("{e:#}");
                if last_said.as_deref() != Some(said.as_str()) {
                    eprintln!("hyperplan: waiting to read the output: {said}");
                    last_said = Some(said);
                }
                std::thread::sleep(retry.min(FOLLOW_RETRY_MAX));
                retry = (retry * 2).min(FOLLOW_RETRY_MAX);
                continue;
            }
            Err(e) => return Err(e),
        };
        read_once = true;
        retry = FOLLOW_EVERY;
        last_said = None;
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

/// An error that a restart explains: the planner unreachable or gone mid-request (no
/// answer at all), or its answer that a node is away for now (`submit --wait` too).
pub(super) fn for_now(e: &anyhow::Error) -> bool {
    match e.downcast_ref::<ResponseError>() {
        Some(answer) => answer.is_for_now() || answer.not_leader_hint().is_some(),
        None => true,
    }
}
