//! `hyperplan submit FILE...`: send job files to the planner. The planner parses them,
//! so its errors name the file as you typed it.

use std::path::PathBuf;

use anyhow::{Context, anyhow, bail};
use hyperplan_net::messages::RequestCommand;
use hyperplan_shared::array::ArraySpec;
use hyperplan_shared::dependency::Dependency;
use hyperplan_shared::limits::{MAX_JOB_FILE, ReadError, read_file_text, read_text};
use hyperplan_shared::status::Submitted;

use super::{Output, decode, long_help, print_reply};
use crate::client::{self, ClientArgs, ClientConfig};

const EXAMPLES: &str = "  hyperplan submit examples/jobs.yaml
  hyperplan submit --wait train.yaml && echo trained
  hyperplan submit train.yaml eval.yaml --output json
  hyperplan submit --array 1-100%8 sweep.yaml     # sweep[1]..sweep[100], at most 8 running
  hyperplan submit --array 0-30:10,45 sweep.yaml  # indices 0, 10, 20, 30 and 45
  hyperplan submit --dependency afterok:prep train.yaml        # once prep has completed
  hyperplan submit -d afterany:train,afterok:1234 report.yaml  # after both ended (1234: an id)
  hyperplan submit --account physics train.yaml  # charged to the [[account]] physics
  generate-job | hyperplan submit -";

/// Submit job files to the planner; print the names of the jobs it accepted.
///
/// A job file holds one job, a list, or several YAML documents, in hyperplan's format or
/// as a Volcano batch.volcano.sh/v1alpha1 Job (the same files `hyperplan simulate
/// --jobs` reads). Every file is read before anything is sent; then the files go to the
/// planner in order, and the first one it refuses stops the rest (the jobs before it
/// stay submitted, and are named). `-` reads a file from standard input.
/// Tasks without a `workingDir` run in the directory you submit from (on their nodes, so
/// it should be on a shared filesystem), and a relative `workingDir` starts there.
/// Follow the jobs with `hyperplan status` and `hyperplan logs`, or stay with `--wait`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = long_help(EXAMPLES))]
pub struct Args {
    /// Job files (YAML); `-` for standard input.
    #[arg(value_name = "FILE", required = true)]
    files: Vec<PathBuf>,
    /// Stay until the submitted jobs have ended; exit with the job's exit code (the first
    /// non-zero one of several jobs): 0 when all completed, the task's exit code for a
    /// failed job (128 + N for a signal), 124 for a time limit, 130 when cancelled, 143 when preempted, 1 when
    /// rejected. A planner restart or failover meanwhile is waited out (up to 5 minutes
    /// without an answer); jobs that wait for agents to come back after it stay pending.
    #[arg(long)]
    wait: bool,
    /// Submit every job held: none starts until `hyperplan release JOB`.
    #[arg(long)]
    hold: bool,
    /// Start no job before this time (Slurm's `--begin`): `now+N[seconds|minutes|hours|
    /// days|weeks]`, `HH:MM[:SS]` (the next such time, UTC), `YYYY-MM-DD[THH:MM[:SS]]`
    /// (UTC unless an offset like `+01:00` follows). Relative times count from this
    /// machine's clock.
    #[arg(long, value_name = "TIME", value_parser = parse_begin)]
    begin: Option<u64>,
    /// Make every job of the files a job array (Slurm's `--array`, the job file's
    /// `array`): one job per index, each named `NAME[INDEX]` with an id of its own and
    /// `HYPERPLAN_ARRAY_TASK_ID` set to its index. SPEC is ranges `1-100`, lists
    /// `1,3,7-9`, steps `0-30:10`, and an optional `%N` for at most N elements running at
    /// once: `1-100%8`. At most 10,000 elements; `status` shows the array as one line.
    #[arg(long, value_name = "SPEC", value_parser = ArraySpec::parse)]
    array: Option<ArraySpec>,
    /// Start every job of the files only when EXPR holds (Slurm's `--dependency`, the job
    /// file's `dependsOn`): `afterok:JOB[:JOB...]` (completed), `afternotok` (failed),
    /// `afterany` (ended), `after:JOB[+MINUTES]` (started), `aftercorr` (element i after
    /// element i of another array), `singleton` (one job of this name and user at a
    /// time); JOB a name or an id; `,` all of, `?` any of: `afterok:prep`,
    /// `afterany:a,afternotok:b`. A dependency that can never be met cancels the job,
    /// unless its file says `keepOnFailedDependency: true`.
    #[arg(short = 'd', long, value_name = "EXPR", value_parser = Dependency::parse)]
    dependency: Option<Dependency>,
    /// Charge every job of the files to this account (Slurm's `-A/--account`, the job
    /// file's `account`), over what the files say. Where planner.toml has `[[account]]`
    /// sections a job that names none is charged to your default account (`defaultFor`).
    #[arg(short = 'A', long, value_name = "NAME", value_parser = parse_account)]
    account: Option<String>,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    client: ClientArgs,
}

/// `--account`, checked as a name (the planner checks that it may be charged).
fn parse_account(text: &str) -> Result<String, hyperplan_shared::names::NameError> {
    hyperplan_shared::names::check_name(hyperplan_shared::names::NameKind::Account, text)?;
    Ok(text.to_string())
}

/// `--begin`, as Unix seconds by this machine's clock.
fn parse_begin(text: &str) -> Result<u64, hyperplan_shared::begin::BeginError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    hyperplan_shared::begin::parse_begin(text, now)
}

/// The process's exit code after `submit --wait`: how the jobs ended (see `Args::wait`).
/// `main` exits with it and prints nothing more.
#[derive(Debug)]
pub struct JobsEnded(pub u8);

impl std::fmt::Display for JobsEnded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the job ended with exit code {}", self.0)
    }
}

impl std::error::Error for JobsEnded {}

/// How often `--wait` asks how the jobs are.
const WAIT_POLL: std::time::Duration = std::time::Duration::from_millis(300);
/// `--wait` through a planner restart or failover (the jobs go on meanwhile): asks
/// again every [`WAIT_POLL`], and gives up after this long without an answer.
const WAIT_GIVE_UP: std::time::Duration = std::time::Duration::from_secs(300);

pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(script) = batch_script(&args.files)? {
        return submit_script(args, script);
    }
    let files = read_files(&args.files)?;
    let config = ClientConfig::from_process(&args.client)?;
    let names: Vec<String> = files.iter().map(|(name, _)| name.clone()).collect();
    // Tasks without a `workingDir` run here (on their nodes), and relative ones start here.
    let submit_dir = std::env::current_dir()
        .ok()
        .and_then(|d| d.to_str().map(str::to_string));
    let commands = files
        .into_iter()
        .map(|(file_name, text)| RequestCommand::Submit {
            file_name,
            text,
            submit_dir: submit_dir.clone(),
            hold: args.hold,
            begin: args.begin,
            array: args.array.clone(),
            dependency: args.dependency.clone(),
            account: args.account.clone(),
        })
        .collect();
    let mut values = Vec::with_capacity(names.len());
    let mut submitted = Submitted::default();
    for (reply, file) in client::requests(&config, commands)?.into_iter().zip(&names) {
        match reply {
            Ok(value) => {
                let receipt = decode::<Submitted>(value.clone(), "submission receipt")?;
                submitted.submitted.extend(receipt.submitted);
                submitted.ids.extend(receipt.ids);
                values.push(value);
            }
            Err(message) if submitted.submitted.is_empty() => bail!("{message}"),
            Err(message) => bail!(
                "{message}\n(submitted before {file}: {}; files after it were not sent)",
                submitted.submitted.join(", ")
            ),
        }
    }
    // One file: the planner's reply exactly. Several: their lists joined.
    let value = match values.as_slice() {
        [one] => one.clone(),
        _ => serde_json::to_value(&submitted).context("encoding the receipt")?,
    };
    print_reply(args.output, value, "submission receipt", render)?;
    if args.wait {
        let code = wait_for(&config, &submitted)?;
        if code != 0 {
            return Err(JobsEnded(code).into());
        }
    }
    Ok(())
}

/// Polls the planner until every submitted job has ended; says how each ended (on
/// standard error) and returns the exit code for the process. A planner that does not
/// answer for now (restarting, or a standby taking over) is waited for.
fn wait_for(config: &ClientConfig, submitted: &Submitted) -> anyhow::Result<u8> {
    let mut waiting: Vec<(String, u64)> = submitted
        .submitted
        .iter()
        .cloned()
        .zip(submitted.ids.iter().copied())
        .collect();
    let mut code = 0u8;
    // Since when the planner has not answered.
    let mut unanswered: Option<std::time::Instant> = None;
    while !waiting.is_empty() {
        // One question per job, and one per array for all its elements.
        let mut keys: Vec<String> = Vec::new();
        let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
        for (name, _) in &waiting {
            let key = query_name(name);
            if seen.insert(key) {
                keys.push(key.to_string());
            }
        }
        let mut answers: std::collections::HashMap<String, hyperplan_shared::status::JobList> =
            std::collections::HashMap::new();
        for key in keys {
            match super::status::fetch(config, Some(key.clone()), true, None) {
                Ok(reply) => {
                    if unanswered.take().is_some() {
                        eprintln!("hyperplan: the planner answers again");
                    }
                    answers.insert(key, decode(reply, "job list")?);
                }
                Err(e) if super::logs::for_now(&e) => {
                    let since = *unanswered.get_or_insert_with(|| {
                        eprintln!("hyperplan: still waiting for the jobs; the planner does not answer: {e:#}");
                        std::time::Instant::now()
                    });
                    if since.elapsed() >= WAIT_GIVE_UP {
                        return Err(e.context(format!("no answer for {} s", WAIT_GIVE_UP.as_secs())));
                    }
                    // The jobs not answered for are asked about again after the pause.
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        let mut still = Vec::new();
        for (name, id) in waiting {
            let Some(list) = answers.get(query_name(&name)) else {
                still.push((name, id));
                continue;
            };
            let Some(job) = list.jobs.iter().find(|j| j.id == id) else {
                bail!("job {name} (id {id}) is no longer known to the planner");
            };
            match ended_code(job) {
                Some(c) => {
                    eprintln!("{}", ended_line(job));
                    if code == 0 {
                        code = c;
                    }
                }
                None => still.push((name, id)),
            }
        }
        waiting = still;
        if !waiting.is_empty() {
            std::thread::sleep(WAIT_POLL);
        }
    }
    Ok(code)
}

/// What `status` is asked for a job: an array's element is asked about with its array.
fn query_name(name: &str) -> &str {
    hyperplan_shared::array::split_element_name(name).map_or(name, |(array, _)| array)
}

/// The exit code for a job that has ended; `None` while it has not.
pub(crate) fn ended_code(job: &hyperplan_shared::report::JobReport) -> Option<u8> {
    use hyperplan_shared::report::{JobStatus as S, TaskStatus as T};
    // Decided, but tasks are still being stopped: not over until they are.
    if job
        .tasks
        .iter()
        .any(|t| matches!(t.state, Some(T::Starting | T::Running)))
    {
        return None;
    }
    let code = |c: Option<i32>| u8::try_from(c.unwrap_or(1).clamp(0, 255)).unwrap_or(1);
    match job.status {
        S::Completed => Some(0),
        S::Failed => Some(code(job.exit_code).max(1)),
        S::Timeout => Some(124),
        S::Cancelled => Some(130),
        // Preempted and not requeued (a requeued job is pending again: not over).
        S::Preempted => Some(143),
        S::Rejected => Some(1),
        S::Pending | S::Placed | S::Running => None,
    }
}

/// `job train (id 7): failed, exit code 3`.
pub(crate) fn ended_line(job: &hyperplan_shared::report::JobReport) -> String {
    let status = serde_json::to_value(job.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let mut line = format!("job {} (id {}): {status}", job.name, job.id);
    if let Some(c) = job.exit_code {
        line.push_str(&format!(", exit code {c}"));
    }
    if let Some(r) = &job.reason {
        line.push_str(&format!(" ({})", hyperplan_shared::names::escape_text(r)));
    }
    line
}

/// `(name as typed, text)` per file, all read before any is sent. Each is read up to
/// the job-file limit and no further: `submit - < /dev/zero` stops at 8 MiB.
fn read_files(paths: &[PathBuf]) -> anyhow::Result<Vec<(String, String)>> {
    paths
        .iter()
        .map(|path| {
            if path.as_os_str() == "-" {
                let text = read_text(std::io::stdin().lock(), MAX_JOB_FILE, "standard input")
                    .map_err(limit_hint)
                    .context("cannot read a job file from standard input")?;
                Ok(("<stdin>".to_owned(), text))
            } else {
                let text = read_file_text(path, MAX_JOB_FILE, &format!("the job file {}", path.display()))
                    .map_err(limit_hint)?;
                if text.starts_with("#!") {
                    bail!(
                        "{0} is a batch script (it starts with #!): submit it alone, or with hyperplan sbatch {0}",
                        path.display()
                    );
                }
                Ok((path.display().to_string(), text))
            }
        })
        .collect()
}

/// The one file given, when it is a batch script (it starts with `#!`): `hyperplan
/// submit job.sh` is `hyperplan sbatch job.sh`.
fn batch_script(paths: &[PathBuf]) -> anyhow::Result<Option<PathBuf>> {
    let [path] = paths else { return Ok(None) };
    if path.as_os_str() == "-" {
        return Ok(None);
    }
    let mut head = [0u8; 2];
    let is_script = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .is_ok_and(|()| &head == b"#!");
    Ok(is_script.then(|| path.clone()))
}

/// A batch script through `hyperplan sbatch`, with this command's `--hold`, `--begin`,
/// `--array` and `--dependency` as sbatch's options (over the script's `#SBATCH` lines).
fn submit_script(args: Args, script: PathBuf) -> anyhow::Result<()> {
    if args.wait {
        bail!(
            "--wait is for job files; a batch script is submitted by hyperplan sbatch: follow it with hyperplan status"
        );
    }
    let mut words: Vec<String> = Vec::new();
    if args.hold {
        words.push("--hold".into());
    }
    if let Some(b) = args.begin {
        words.push(format!("--begin={}", hyperplan_shared::begin::format_begin(b)));
    }
    if let Some(a) = &args.array {
        words.push(format!("--array={a}"));
    }
    if let Some(d) = &args.dependency {
        words.push(format!("--dependency={d}"));
    }
    if let Some(a) = &args.account {
        words.push(format!("--account={a}"));
    }
    words.push(script.to_string_lossy().into_owned());
    super::sbatch::run(super::sbatch::Args::for_words(words, args.client))
}

/// Says where the limit comes from when a file is too large.
fn limit_hint(e: ReadError) -> anyhow::Error {
    match e {
        ReadError::TooLarge { .. } => anyhow!("{e} for a job file (see Limits in README.md)"),
        other => other.into(),
    }
}

/// `submitted job-a (id 7), job-b (id 8)` (without ids from a planner that gives none).
pub fn render(submitted: &Submitted) -> String {
    if submitted.submitted.is_empty() {
        return "submitted nothing: the files hold no jobs\n".into();
    }
    let with_ids = submitted.ids.len() == submitted.submitted.len();
    let mut jobs: Vec<String> = Vec::new();
    let mut i = 0;
    let names = &submitted.submitted;
    while i < names.len() {
        // An array's elements, one after the other with ids that follow: one entry.
        let Some((array, first)) = hyperplan_shared::array::split_element_name(&names[i]) else {
            jobs.push(match with_ids {
                true => format!("{} (id {})", names[i], submitted.ids[i]),
                false => names[i].clone(),
            });
            i += 1;
            continue;
        };
        let mut indices = vec![first];
        let mut j = i + 1;
        while j < names.len()
            && let Some((a, index)) = hyperplan_shared::array::split_element_name(&names[j])
            && a == array
        {
            indices.push(index);
            j += 1;
        }
        let shown = format!("{array}[{}]", index_list(&indices));
        jobs.push(match with_ids {
            true => format!(
                "{shown} (array {}: ids {}-{}, {}_INDEX)",
                submitted.ids[i],
                submitted.ids[i],
                submitted.ids[j - 1],
                submitted.ids[i]
            ),
            false => shown,
        });
        i = j;
    }
    format!("submitted {}\n", jobs.join(", "))
}

/// Sorted indices as an array spec: `1-100`, `1,3,7-9`.
fn index_list(indices: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut k = 0;
    while k < indices.len() {
        let start = indices[k];
        let mut end = start;
        while k + 1 < indices.len() && end.checked_add(1) == Some(indices[k + 1]) {
            k += 1;
            end = indices[k];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        k += 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn receipt() {
        let mut s = Submitted {
            submitted: vec!["job-a".into(), "job-b".into()],
            ids: vec![],
        };
        insta::assert_snapshot!(render(&s), @"submitted job-a, job-b");
        s.ids = vec![7, 8];
        insta::assert_snapshot!(render(&s), @"submitted job-a (id 7), job-b (id 8)");
        insta::assert_snapshot!(render(&Submitted::default()), @"submitted nothing: the files hold no jobs");
        // An array is one entry, however many elements it has.
        let mut names: Vec<String> = (1..=100).map(|i| format!("sweep[{i}]")).collect();
        names.extend(["sweep[200]".to_string(), "merge".to_string()]);
        let s = Submitted {
            ids: (17..17 + names.len() as u64).collect(),
            submitted: names,
        };
        insta::assert_snapshot!(render(&s), @"submitted sweep[1-100,200] (array 17: ids 17-117, 17_INDEX), merge (id 118)");
    }

    /// `--array` and `--dependency` are read here, so a mistyped one is an error before
    /// anything is sent.
    #[test]
    fn array_and_dependency_are_parsed_on_the_client() {
        use clap::Parser;
        #[derive(clap::Parser, Debug)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let cli = Cli::try_parse_from(["submit", "--array", "1-100%8", "-d", "afterok:prep", "a.yaml"]).unwrap();
        assert_eq!(cli.args.array.map(|a| a.to_string()).as_deref(), Some("1-100%8"));
        assert_eq!(
            cli.args.dependency.map(|d| d.to_string()).as_deref(),
            Some("afterok:prep")
        );
        let cli = Cli::try_parse_from(["submit", "a.yaml"]).unwrap();
        assert!(cli.args.array.is_none() && cli.args.dependency.is_none());
        let e = Cli::try_parse_from(["submit", "--array", "1-10:0", "a.yaml"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid value '1-10:0' for '--array <SPEC>'"), "{e}");
        assert!(e.contains("expected a step"), "{e}");
        let e = Cli::try_parse_from(["submit", "--dependency", "afterwards:a", "a.yaml"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected a kind"), "{e}");
    }

    #[test]
    fn unreadable_file_is_named_before_anything_is_sent() {
        let err = read_files(&[PathBuf::from("/nonexistent/jobs.yaml")]).unwrap_err();
        assert!(
            format!("{err:#}").starts_with("cannot read the job file /nonexistent/jobs.yaml: "),
            "{err:#}"
        );
    }
}
