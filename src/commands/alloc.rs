//! `hyperplan alloc [--replicas N ...] [--print-env]` (like Slurm's `salloc`): hold an
//! allocation as a batch job whose rank 0 only waits, then open a shell on rank 0's node
//! inside it (`hyperplan exec`), with the job's environment: `mpirun` there uses the
//! job's nodes. Leaving the shell ends the job and frees the nodes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::bail;
use hyperplan_net::messages::{ExecNodes, ExecRequest, RequestCommand};
use hyperplan_shared::report::JobStatus;

use super::long_help;
use super::run::{JobArgs, job_text, report, submit_named, watch_interrupts};
use crate::client::{self, ClientArgs, ClientConfig};

const EXAMPLES: &str = "  hyperplan alloc --replicas 4 --cpu 8
  hyperplan alloc --replicas 2 --print-env > job.env   # the job holds on; cancel it to free its nodes";

/// How often the job is looked at while it starts.
const POLL: Duration = Duration::from_millis(300);

/// Hold an allocation and open a shell inside it.
///
/// Submits a batch job of `--replicas` tasks whose rank 0 only holds; once it runs, opens
/// an interactive shell (your login shell, `-i`; no terminal is allocated, so line
/// editing is your local terminal's) on rank 0's node inside the job, with its
/// environment: `HYPERPLAN_NODELIST`, the MPI hostfiles, `hyperplan exec` as `mpirun`'s
/// remote shell. Leaving the shell cancels the job. With `--print-env`, prints the job's
/// environment on rank 0's node instead and leaves the job holding its nodes (`hyperplan
/// cancel JOB` frees them). Ctrl-C while waiting cancels the job.
#[derive(clap::Args, Debug)]
#[command(after_long_help = long_help(EXAMPLES))]
pub struct Args {
    #[command(flatten)]
    job: JobArgs,
    /// Print the job's environment (`NAME=value` lines) instead of opening a shell.
    #[arg(long)]
    print_env: bool,
    #[command(flatten)]
    client: ClientArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let config = ClientConfig::from_process(&args.client)?;
    let hold = ["sleep".to_string(), "infinity".to_string()];
    let (job, id) = submit_named(&config, &args.job, "alloc", |name| {
        job_text(&args.job, name, &hold, None, true)
    })?;
    eprintln!("hyperplan alloc: job {job} (id {id}) submitted; waiting for its nodes");
    let interrupts = Arc::new(AtomicU32::new(0));
    watch_interrupts(interrupts.clone());
    loop {
        if interrupts.load(Ordering::SeqCst) > 0 {
            cancel(&config, &job);
            bail!("interrupted: job {job} cancelled");
        }
        let r = report(&config, &job, id)?;
        match r.status {
            JobStatus::Running => break,
            JobStatus::Pending | JobStatus::Placed => std::thread::sleep(POLL),
            other => bail!(
                "job {job} is {} before it held its nodes{}",
                other.as_str(),
                match &r.reason {
                    Some(why) => format!(": {why}"),
                    None => String::new(),
                }
            ),
        }
    }
    let nodes = report(&config, &job, id)?
        .tasks
        .iter()
        .filter_map(|t| t.node.clone())
        .collect::<std::collections::BTreeSet<_>>();
    eprintln!(
        "hyperplan alloc: job {job} holds {} ({} tasks)",
        nodes.into_iter().collect::<Vec<_>>().join(","),
        args.job.replicas
    );
    let (argv, shell) = if args.print_env {
        (vec!["env".to_string()], false)
    } else {
        (vec!["exec \"${SHELL:-/bin/sh}\" -i".to_string()], true)
    };
    let request = ExecRequest {
        job: job.clone(),
        nodes: ExecNodes::Rank0,
        argv,
        shell,
        credential: None,
    };
    let code = super::exec::as_person(&config, request, false);
    if args.print_env {
        eprintln!("hyperplan alloc: job {job} holds its nodes until `hyperplan cancel {job}`");
    } else {
        cancel(&config, &job);
        eprintln!("hyperplan alloc: job {job} ended, its nodes freed");
    }
    std::process::exit(code?)
}

fn cancel(config: &ClientConfig, job: &str) {
    let command = RequestCommand::Cancel {
        job: job.to_string(),
        grace_secs: hyperplan_net::messages::DEFAULT_GRACE_SECS,
    };
    if let Err(e) = client::request(config, command) {
        eprintln!("hyperplan alloc: cannot cancel job {job}: {e:#}");
    }
}
