//! `hyperplan run [--replicas N ...] -- COMMAND...` (like Slurm's `srun` outside an
//! allocation): submit a job made from the command line, stay with it, print every
//! rank's output as it comes (each line prefixed by its rank), and exit with the job's
//! exit code. Ctrl-C cancels the job (a second one leaves at once, the job running on).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use hyperplan_net::messages::RequestCommand;
use hyperplan_shared::report::JobReport;
use hyperplan_shared::status::{JobList, LogPiece, Submitted};

use super::submit::{ended_code, ended_line};
use super::{decode, long_help};
use crate::client::{self, ClientArgs, ClientConfig};

const EXAMPLES: &str = "  hyperplan run -- hostname
  hyperplan run --replicas 8 --cpu 4 --memory 8Gi --mpi pmi -- ./allreduce
  hyperplan run --replicas 4 --batch -- sh -c 'mpirun -np 4 ./app'
  hyperplan run --replicas 16 --gpus 1 --time-limit 2h -- torchrun train.py";

/// How often the job and its output are looked at.
const POLL: Duration = Duration::from_millis(300);
/// Output read per task per look.
const CHUNK: u32 = 256 << 10;

/// Run a command as a job and stay with it: every rank's output, its exit code.
///
/// The job is made from the options: `--replicas` tasks (ranks), each asking for
/// `--cpu`, `--memory` and `--gpus`, all running COMMAND in this directory (on their
/// nodes), as you. Its output files are written as for any job
/// (`hyperplan-<job>-<task>.out` here); `hyperplan run` prints them as they grow, each
/// line prefixed by its rank (`3: ...`), until the job has ended, then exits with its
/// exit code as `submit --wait` does (0, the failing task's code, 124 for the time limit,
/// 130 when cancelled). Ctrl-C cancels the job and waits for its end; a second Ctrl-C
/// leaves at once.
#[derive(clap::Args, Debug)]
#[command(after_long_help = long_help(EXAMPLES))]
pub struct Args {
    #[command(flatten)]
    job: JobArgs,
    /// `pmi`: a PMI-1 server for every rank (MPICH and friends wire up without mpirun).
    #[arg(long, value_name = "MODE")]
    mpi: Option<String>,
    /// The command runs once, as rank 0, with the allocation (`launch: batch`).
    #[arg(long)]
    batch: bool,
    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
    #[command(flatten)]
    client: ClientArgs,
}

/// The job `run` and `alloc` make from the command line.
#[derive(clap::Args, Debug)]
pub struct JobArgs {
    /// Tasks (ranks) to run.
    #[arg(long, short = 'n', default_value_t = 1, value_name = "N")]
    pub replicas: u32,
    /// CPUs per task (`2`, `500m`).
    #[arg(long, default_value = "1", value_name = "CPUS")]
    pub cpu: String,
    /// Memory per task (`4Gi`).
    #[arg(long, value_name = "BYTES")]
    pub memory: Option<String>,
    /// GPUs per task (`nvidia.com/gpu`).
    #[arg(long, value_name = "N")]
    pub gpus: Option<u32>,
    /// The job's name (default `run-<user>-<random>`, `alloc-<user>-<random>`).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// `timeLimit`: `3600`, `90m`, `2h`.
    #[arg(long, value_name = "TIME")]
    pub time_limit: Option<String>,
    /// The queue (`[[queue]]` in planner.toml).
    #[arg(long, value_name = "QUEUE")]
    pub queue: Option<String>,
    /// `topologyPolicy` of the tasks (`single-numa-node`, `best-effort`, ...).
    #[arg(long, value_name = "POLICY")]
    pub topology_policy: Option<String>,
}

/// Default names tried before giving up: another job may hold one (a clash of 64 random
/// bits is not expected, but one never blocks anyone).
const NAME_TRIES: u32 = 3;

/// `<prefix>-<user>-<16 hex digits>`: a default job name no one can take first, since
/// no one can guess it (a pid could be: another user submitting `run-12345` first made
/// that `hyperplan run` fail). The user part keeps name characters only and is cut so
/// that the whole stays a job name.
pub fn default_name(prefix: &str, user: &str, random: u64) -> String {
    let room = hyperplan_shared::names::MAX_JOB_NAME - prefix.len() - 18;
    let user: String = user
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(room)
        .collect();
    if user.is_empty() {
        format!("{prefix}-{random:016x}")
    } else {
        format!("{prefix}-{user}-{random:016x}")
    }
}

/// 64 bits from the kernel's random source; the time and pid where it cannot be read
/// (still unlike any other, though guessable).
fn random_u64() -> u64 {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    match read {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            nanos ^ (u64::from(std::process::id()) << 32)
        }
    }
}

/// Submits the job `text` makes for a name: `--name`, once; or default names
/// ([`default_name`]), another one while the planner's refusal names the one tried (the
/// name taken), up to [`NAME_TRIES`]. The job's name and id.
pub fn submit_named(
    config: &ClientConfig,
    args: &JobArgs,
    prefix: &str,
    text: impl Fn(&str) -> String,
) -> anyhow::Result<(String, u64)> {
    if let Some(name) = &args.name {
        return submit(config, text(name));
    }
    let mut tries = 0;
    loop {
        tries += 1;
        let name = default_name(prefix, &config.user.value, random_u64());
        match submit(config, text(&name)) {
            Err(e) if tries < NAME_TRIES && e.to_string().contains(&name) => {
                eprintln!("hyperplan {prefix}: {e:#}; trying another name");
            }
            done => return done,
        }
    }
}

/// The job file these make: JSON, which the planner reads as the YAML it is.
pub fn job_text(args: &JobArgs, name: &str, command: &[String], mpi: Option<&str>, batch: bool) -> String {
    let mut resources = serde_json::Map::new();
    resources.insert("cpu".into(), args.cpu.clone().into());
    if let Some(m) = &args.memory {
        resources.insert("memory".into(), m.clone().into());
    }
    if let Some(g) = args.gpus {
        resources.insert("nvidia.com/gpu".into(), g.into());
    }
    let mut task = serde_json::json!({
        "name": "rank",
        "replicas": args.replicas,
        "resources": resources,
        "command": command,
    });
    if let Some(p) = &args.topology_policy {
        task["topologyPolicy"] = p.clone().into();
    }
    let mut job = serde_json::json!({ "name": name, "tasks": [task] });
    for (key, value) in [
        ("timeLimit", args.time_limit.as_deref()),
        ("queue", args.queue.as_deref()),
        ("mpi", mpi),
    ] {
        if let Some(v) = value {
            job[key] = v.into();
        }
    }
    if batch {
        job["launch"] = "batch".into();
    }
    job.to_string()
}

/// Submits the job made from the command line; its name and id.
pub fn submit(config: &ClientConfig, text: String) -> anyhow::Result<(String, u64)> {
    let submit_dir = std::env::current_dir()
        .ok()
        .and_then(|d| d.to_str().map(str::to_string));
    let command = RequestCommand::Submit {
        file_name: "<command line>".into(),
        text,
        submit_dir,
        hold: false,
        begin: None,
        array: None,
        dependency: None,
        account: None,
    };
    let submitted: Submitted = decode(client::request(config, command)?, "submission receipt")?;
    match (submitted.submitted.first(), submitted.ids.first()) {
        (Some(job), Some(&id)) => Ok((job.clone(), id)),
        _ => bail!("the planner accepted no job"),
    }
}

/// The job `id` as the planner has it now.
pub fn report(config: &ClientConfig, job: &str, id: u64) -> anyhow::Result<JobReport> {
    let list: JobList = decode(
        super::status::fetch(config, Some(job.to_string()), true, None)?,
        "job list",
    )?;
    list.jobs
        .into_iter()
        .find(|j| j.id == id)
        .ok_or_else(|| anyhow::anyhow!("job {job} (id {id}) is no longer known to the planner"))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let config = ClientConfig::from_process(&args.client)?;
    let (job, id) = submit_named(&config, &args.job, "run", |name| {
        job_text(&args.job, name, &args.command, args.mpi.as_deref(), args.batch)
    })?;
    let job = &job;
    eprintln!("hyperplan run: job {job} (id {id}) submitted");
    let interrupts = Arc::new(AtomicU32::new(0));
    watch_interrupts(interrupts.clone());
    let mut follow = Follow::default();
    let mut cancelled = false;
    loop {
        match interrupts.load(Ordering::SeqCst) {
            0 => {}
            1 if !cancelled => {
                eprintln!("hyperplan run: cancelling job {job} (Ctrl-C again to leave it running)");
                let cancel = RequestCommand::Cancel {
                    job: job.clone(),
                    grace_secs: hyperplan_net::messages::DEFAULT_GRACE_SECS,
                };
                if let Err(e) = client::request(&config, cancel) {
                    eprintln!("hyperplan run: cannot cancel job {job}: {e:#}");
                }
                cancelled = true;
            }
            1 => {}
            _ => {
                eprintln!("hyperplan run: leaving; job {job} goes on (hyperplan status {job})");
                std::process::exit(130);
            }
        }
        let report = report(&config, job, id)?;
        let ended = ended_code(&report);
        let drained = follow.read(&config, &report, ended.is_some())?;
        if let (Some(code), true) = (ended, drained) {
            follow.flush();
            eprintln!("{}", ended_line(&report));
            if code != 0 {
                return Err(super::submit::JobsEnded(code).into());
            }
            return Ok(());
        }
        std::thread::sleep(POLL);
    }
}

/// Counts SIGINT and SIGTERM, on a thread of its own.
pub fn watch_interrupts(count: Arc<AtomicU32>) {
    std::thread::spawn(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
            return;
        };
        runtime.block_on(async {
            let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
                return;
            };
            loop {
                tokio::select! {
                    r = tokio::signal::ctrl_c() => if r.is_err() { return },
                    _ = term.recv() => {}
                }
                count.fetch_add(1, Ordering::SeqCst);
            }
        });
    });
}

/// Where each task's output has been read to, and its unfinished last line.
#[derive(Default)]
struct Follow {
    /// By task name: (rank, offset, partial line).
    tasks: BTreeMap<String, (u32, u64, Vec<u8>)>,
}

impl Follow {
    /// Reads what the placed tasks wrote since the last look; true when everything was
    /// read (with `ended`: there will be no more).
    fn read(&mut self, config: &ClientConfig, report: &JobReport, ended: bool) -> anyhow::Result<bool> {
        let placed: Vec<(String, u32)> = report
            .tasks
            .iter()
            .filter(|t| t.node.is_some())
            .filter_map(|t| Some((t.name.clone(), t.rank?)))
            .collect();
        if placed.is_empty() {
            return Ok(true);
        }
        let commands: Vec<RequestCommand> = placed
            .iter()
            .map(|(task, rank)| {
                let entry = self.tasks.entry(task.clone()).or_insert((*rank, 0, Vec::new()));
                RequestCommand::Logs {
                    job: report.name.clone(),
                    task: Some(task.clone()),
                    stderr: false,
                    offset: entry.1,
                    max_bytes: CHUNK,
                    node: None,
                }
            })
            .collect();
        let replies = match client::requests(config, commands) {
            Ok(r) => r,
            // A planner restarting: look again later.
            Err(e) if !ended => {
                tracing::debug!("reading the output: {e:#}");
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        let mut all_read = replies.len() == placed.len();
        let out = std::io::stdout();
        let mut out = out.lock();
        for ((task, _), reply) in placed.iter().zip(replies) {
            let Ok(value) = reply else {
                all_read = false;
                continue;
            };
            let piece: LogPiece = decode(value, "piece of output").context("reading the output")?;
            let Some((rank, offset, partial)) = self.tasks.get_mut(task) else {
                continue;
            };
            partial.extend_from_slice(piece.data.as_bytes());
            *offset = piece.next_offset.max(*offset);
            while let Some(pos) = partial.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = partial.drain(..=pos).collect();
                write!(out, "{rank}: ")?;
                out.write_all(&line)?;
            }
            if *offset < piece.size {
                all_read = false;
            }
        }
        out.flush().context("writing to standard output")?;
        Ok(all_read)
    }

    /// Last lines without a newline.
    fn flush(&mut self) {
        let mut out = std::io::stdout().lock();
        for (rank, _, partial) in self.tasks.values_mut() {
            if !partial.is_empty() {
                let _ = write!(out, "{rank}: ");
                let _ = out.write_all(partial);
                let _ = out.write_all(b"\n");
                partial.clear();
            }
        }
        let _ = out.flush();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use hyperplan_shared::names::{MAX_JOB_NAME, NameKind, check_name};

    #[test]
    fn default_names_hold_the_user_and_an_unguessable_part() {
        assert_eq!(default_name("run", "alice", 0xab), "run-alice-00000000000000ab");
        assert_eq!(default_name("alloc", "a b@c", 1), "alloc-a-b-c-0000000000000001");
        assert_eq!(default_name("run", "", 1), "run-0000000000000001");
        let long = default_name("alloc", &"u".repeat(200), u64::MAX);
        assert_eq!(long.len(), MAX_JOB_NAME);
        for name in [long, default_name("run", "é.x_y", 7)] {
            check_name(NameKind::Job, &name).unwrap();
        }
        // Two runs at once (and one run's tries) get different names.
        assert_ne!(random_u64(), random_u64());
    }
}
