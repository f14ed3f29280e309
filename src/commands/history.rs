//! `hyperplan history`: ended jobs from the planner's accounting database, like Slurm's
//! `sacct`: sacct's column names (`--format`), states, `ExitCode` as `code:signal`,
//! durations as `[D-]HH:MM:SS` and times as local `2026-12-05T10:02:03`. Also the pieces
//! `report` shares: `--output table|json|csv` ([`ListOutput`]), period parsing ([`When`]),
//! local times, and tables of any width ([`table`], [`csv`]).

use anyhow::bail;
use clap::ValueEnum;
use hyperplan_net::messages::RequestCommand;
use hyperplan_shared::history::{History, HistoryJob, HistoryQuery, HistoryStep, MAX_HISTORY_LIMIT};
use hyperplan_shared::names::escape_text;

use super::{Clock, call, decode, json, long_help};
use crate::client::ClientArgs;

const EXAMPLES: &str = "  hyperplan history                                  # what ended in the last day
  hyperplan history --since 7d --users alice,bob --state failed,timeout
  hyperplan history -S 2026-11-01 -E 2026-11-08T12:00 --account physics
  hyperplan history --job 17 --job 16_3 --steps     # any age: --job drops the default --since
  hyperplan history --format JobID,JobName,State,Elapsed,MaxRSS,HyperNode
  hyperplan history --since 30d --output csv > november.csv
  hyperplan history --output json | jq '.jobs[] | select(.state == \"OUT_OF_MEMORY\") | .name'";

/// Show ended jobs from the accounting database (like Slurm's sacct).
///
/// The planner copies every job (each element of an array on its own) to its accounting
/// database when it ends: SQLite beside its state, or PostgreSQL (`[accounting]` in
/// planner.toml). This lists them, oldest end first, one row per job: by default
/// JobID (`17`, or `16_3` for element 3 of array 16), JobName, User, Account, Partition
/// (the queue), State (COMPLETED, FAILED, CANCELLED, TIMEOUT, PREEMPTED, NODE_FAIL,
/// OUT_OF_MEMORY), ExitCode (`code:signal`: `0:0` completed, `1:0` exited with 1, `0:9`
/// killed by signal 9), Elapsed (`[D-]HH:MM:SS` it ran), Start and End (local time,
/// `2026-12-05T10:02:03`; Start `None` for a job that never started), NNodes, NodeList,
/// AllocCPUS, AllocTRES (what it held over all its tasks: `cpu=8,mem=16G,gres/gpu=2`,
/// sizes in K/M/G/T of 1024), MaxRSS (the largest peak resident memory of one task,
/// `1.2G`) and TotalCPU (user plus system CPU time of all its tasks, in sacct's form:
/// `MM:SS.mmm` under an hour, `HH:MM:SS` under a day, `D-HH:MM:SS` beyond).
///
/// `--format` picks the columns (names as sacct's, any case; a `%N` width suffix is
/// accepted and ignored, columns fit their contents). Besides the default ones: Submit,
/// Eligible (when it could first start: its begin time, or its submit), Timelimit
/// (`UNLIMITED` when none), ReqCPUS, ReqMem, ReqTRES (what it asked for), Reason,
/// HyperNode and Tier (where it was placed), CoreSeconds and GPUSeconds (cores or GPUs
/// held × seconds: what `report usage` sums), Requeues, Attempt (which run of a requeued
/// job this is), and Queue (the same as Partition).
///
/// Filters: each repeatable option, or a comma list (`--users alice,bob`), matches any
/// of its values; different options must all match. The period: a job is listed when it
/// ended at or after `--since` and was submitted before `--until`. Both take a time ago,
/// `7d`, `2h`, `90m`, `1h30m` (a bare number is seconds), `now`, or a date `2026-11-01`
/// or date and time `2026-11-01T08:00[:SS]` in this machine's local time (UTC with a `Z`,
/// or another zone with an offset like `+01:00`). Without `--since`: the last day (sacct
/// starts at midnight); with `--job` and no `--since`: any time. Without `--until`: now.
/// A plain user of a planner with `privateData` sees only their own jobs.
///
/// `--steps` adds, under each job, one row per step (each `hyperplan exec` into it): JobID
/// `17.0`, JobName the step's command, State COMPLETED (exit 0) or FAILED, ExitCode,
/// Elapsed, Start, End, NNodes and NodeList; its other columns are blank.
///
/// At most `--limit` jobs are listed (the planner's default 10,000, at most 100,000), the
/// newest; when more match, a line under the table says so. The database is written a
/// moment after each job ends: a line says when the newest jobs may not be there yet.
/// `hyperplan status --since` shows jobs that have not ended; `hyperplan report` sums.
///
/// `--output csv`: the same columns as the table, a header line, RFC 4180 quoting (lines
/// end in LF), notes on stderr. `--output json`: the planner's answer as is, `{"jobs":
/// [{"jobId", "arrayJobId", "arrayIndex", "attempt", "name", "user", "account", "queue",
/// "submit", "eligible", "start", "end", "state", "reason", "exitCode", "signal",
/// "nnodes", "ntasks", "nodelist", "hypernode", "tier", "reqCpus", "reqGpus",
/// "reqMemory", "allocCpus", "allocGpus", "allocMemory", "timeLimit", "cpuSeconds",
/// "maxRss", "coreSeconds", "gpuSeconds", "requeues", "restarts", "preemptedBy",
/// "steps"}], "truncated", "database", "behindSecs"}`, times in Unix seconds, memory
/// in bytes.
#[derive(clap::Args, Debug)]
#[command(after_long_help = long_help(EXAMPLES))]
pub struct Args {
    /// Only these users' jobs (sacct's -u; `--user` is who you connect as).
    #[arg(short = 'u', long = "users", value_name = "USER", value_delimiter = ',')]
    users: Vec<String>,
    /// Only jobs charged to these accounts.
    #[arg(short = 'A', long = "account", value_name = "ACCOUNT", value_delimiter = ',')]
    accounts: Vec<String>,
    /// Only jobs of these queues (sacct's partitions).
    #[arg(
        short = 'r',
        long = "queue",
        alias = "partition",
        value_name = "QUEUE",
        value_delimiter = ','
    )]
    queues: Vec<String>,
    /// Only jobs that ended so: COMPLETED, FAILED, CANCELLED, TIMEOUT, PREEMPTED,
    /// NODE_FAIL, OUT_OF_MEMORY, any case, or sacct's CD, F, CA, TO, PR, NF, OOM.
    #[arg(short = 's', long = "state", value_name = "STATE", value_delimiter = ',', value_parser = parse_state)]
    states: Vec<String>,
    /// Jobs that ended at or after this time: `7d` (ago), `2h`, `90m`, `2026-11-01`,
    /// `2026-11-01T08:00` (local time) [default: 1d; with --job: any time].
    #[arg(short = 'S', long, value_name = "TIME", value_parser = parse_when)]
    since: Option<When>,
    /// Jobs submitted before this time, in --since's forms [default: now].
    #[arg(short = 'E', long, value_name = "TIME", value_parser = parse_when)]
    until: Option<When>,
    /// Only these jobs: an id (`17`: the job, or every element of array 17), an element
    /// (`16_3`) or a name (`train`, `sweep[3]`).
    #[arg(short = 'j', long = "job", value_name = "ID|NAME", value_delimiter = ',')]
    jobs: Vec<String>,
    /// Each job's steps too, one row each under it (`17.0`, `17.1`).
    #[arg(long)]
    steps: bool,
    /// The columns, comma-separated sacct names: `JobID,JobName,State,Elapsed`.
    #[arg(short = 'o', long, value_name = "COLS", value_parser = parse_format)]
    format: Option<Format>,
    /// At most this many jobs, the newest [default: 10000, at most 100000].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_HISTORY_LIMIT)))]
    limit: Option<u32>,
    #[arg(long, value_enum, default_value_t)]
    output: ListOutput,
    #[command(flatten)]
    client: ClientArgs,
}

/// `--output` of `history` and `report`: [`super::Output`]'s two and CSV, which only these
/// listings print.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ListOutput {
    /// Columns for people.
    #[default]
    Table,
    /// The planner's reply as is, pretty-printed; field names are a stable interface.
    Json,
    /// The table's columns as CSV: a header line, RFC 4180 quoting.
    Csv,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let clock = Clock::local();
    let query = query(&args, &clock)?;
    let columns = args.format.map_or_else(|| DEFAULT_COLUMNS.to_vec(), |f| f.0);
    let value = call(&args.client, RequestCommand::History(query))?;
    if args.output == ListOutput::Json {
        print!("{}", json(&value)?);
        return Ok(());
    }
    let history: History = decode(value, "job history")?;
    match args.output {
        ListOutput::Csv => {
            print!("{}", escape_text(&render_csv(&history, &columns, &clock)));
            for note in notes(&history) {
                eprintln!("{}", escape_text(&note));
            }
        }
        _ => print!("{}", escape_text(&render_table(&history, &columns, &clock))),
    }
    Ok(())
}

/// The question the options ask, times resolved against `clock`.
fn query(args: &Args, clock: &Clock) -> anyhow::Result<HistoryQuery> {
    let since = match args.since {
        Some(w) => Some(w.resolve(clock)),
        None if args.jobs.is_empty() => Some(clock.now.saturating_sub(DEFAULT_SINCE_SECS)),
        None => None,
    };
    let until = args.until.map(|w| w.resolve(clock));
    check_period(since.unwrap_or(0), until)?;
    Ok(HistoryQuery {
        users: args.users.clone(),
        accounts: args.accounts.clone(),
        queues: args.queues.clone(),
        states: args.states.clone(),
        since,
        until,
        jobs: args.jobs.clone(),
        steps: args.steps,
        limit: args.limit,
    })
}

/// `--since` without one: a day.
const DEFAULT_SINCE_SECS: u64 = 86_400;

/// An empty period (`--until` not after `--since`) is a mistake, not "nothing ended".
pub(super) fn check_period(since: u64, until: Option<u64>) -> anyhow::Result<()> {
    if let Some(until) = until
        && until <= since
    {
        bail!("--until must be later than --since (the period is [since, until))");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Times: `--since`/`--until`, and how tables print them.

/// A `--since`/`--until` as typed: resolved against the clock only when the command runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// This many seconds before now (`7d`, `2h`, `now`).
    Ago(u64),
    /// A wall-clock time in the local time zone, as seconds since 1970-01-01T00:00 of it.
    Local(i64),
    /// An instant: a date and time with `Z` or an offset.
    At(u64),
}

impl When {
    /// Unix seconds, by `clock`'s now and time zone.
    pub fn resolve(self, clock: &Clock) -> u64 {
        match self {
            When::Ago(secs) => clock.now.saturating_sub(secs),
            When::At(unix) => unix,
            When::Local(wall) => local_to_unix(wall, clock),
        }
    }
}

/// A time ago (`7d`, `2h`, `90m`, `1h30m`, seconds, `now`), or a date `2026-11-01` or
/// date and time `2026-11-01T08:00[:SS]`, local unless it ends in `Z` or an offset.
pub fn parse_when(text: &str) -> Result<When, String> {
    let t = text.trim();
    let form = || {
        format!(
            "expected a time ago (7d, 2h, 90m, 1h30m, now) or a local date and time \
             (2026-11-01, 2026-11-01T08:00), got {text:?}"
        )
    };
    if t.eq_ignore_ascii_case("now") {
        return Ok(When::Ago(0));
    }
    if t.bytes().next().is_some_and(|b| b.is_ascii_digit()) && t.get(4..5) == Some("-") {
        let secs = hyperplan_shared::begin::parse_date(t).map_err(|e| e.to_string())?;
        let clock_part = t.find(['T', 't', ' ']).map_or("", |i| &t[i + 1..]);
        let zoned = clock_part.ends_with(['Z', 'z']) || clock_part.contains(['+', '-']);
        return Ok(if zoned {
            When::At(secs)
        } else {
            When::Local(i64::try_from(secs).map_err(|_| form())?)
        });
    }
    if let Some(days) = t.strip_suffix(['d', 'D'])
        && !days.is_empty()
        && days.bytes().all(|b| b.is_ascii_digit())
    {
        return days
            .parse::<u64>()
            .ok()
            .and_then(|d| d.checked_mul(86_400))
            .map(When::Ago)
            .ok_or_else(form);
    }
    hyperplan_shared::timelimit::parse_time_limit(t)
        .map(When::Ago)
        .map_err(|_| form())
}

/// The instant a local wall-clock time names (for a time a DST change skips or repeats,
/// one of the two nearby).
fn local_to_unix(wall: i64, clock: &Clock) -> u64 {
    let offset_at = |guess: i64| (clock.utc_offset)(u64::try_from(guess).unwrap_or(0));
    let first = wall - offset_at(wall);
    u64::try_from(wall - offset_at(first)).unwrap_or(0)
}

/// Local wall-clock parts of `unix`: (date, seconds of the day).
fn local_parts(unix: u64, clock: &Clock) -> ((i64, i64, i64), i64) {
    let local = i64::try_from(unix)
        .unwrap_or(i64::MAX)
        .saturating_add((clock.utc_offset)(unix));
    (
        hyperplan_shared::civil::civil_from_days(local.div_euclid(86_400)),
        local.rem_euclid(86_400),
    )
}

/// `2026-12-05T10:02:03`, local time: sacct's times.
pub fn local_iso(unix: u64, clock: &Clock) -> String {
    let ((y, m, d), s) = local_parts(unix, clock);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// `2026-11-05T00:00`, local time, seconds only when there are some: a period's ends.
pub fn local_minute(unix: u64, clock: &Clock) -> String {
    let ((y, m, d), s) = local_parts(unix, clock);
    let mut out = format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}", s / 3600, s / 60 % 60);
    if s % 60 != 0 {
        out.push_str(&format!(":{:02}", s % 60));
    }
    out
}

/// sacct's Elapsed and Timelimit: `HH:MM:SS`, `D-HH:MM:SS` from a day on.
pub fn elapsed(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

/// sacct's TotalCPU: `MM:SS.mmm` under an hour, `HH:MM:SS` under a day, `D-HH:MM:SS`.
pub fn total_cpu(secs: f64) -> String {
    let ms = if secs.is_finite() && secs > 0.0 {
        (secs * 1000.0).round() as u64
    } else {
        0
    };
    let whole = ms / 1000;
    if whole >= 3600 {
        elapsed(whole)
    } else {
        format!("{:02}:{:02}.{:03}", whole / 60, whole % 60, ms % 1000)
    }
}

// ---------------------------------------------------------------------------------------
// Amounts.

/// Bytes as Slurm prints sizes: `512`, `16G`, `1.2G`, `1.25T` (units of 1024, at most two
/// decimals).
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["K", "M", "G", "T", "P"];
    let mut unit = None;
    let mut scale = 1u64;
    for (i, _) in UNITS.iter().enumerate() {
        let next = 1u64 << (10 * (i + 1));
        if bytes >= next {
            unit = Some(i);
            scale = next;
        }
    }
    let Some(unit) = unit else {
        return bytes.to_string();
    };
    if bytes.is_multiple_of(scale) {
        return format!("{}{}", bytes / scale, UNITS[unit]);
    }
    format!("{}{}", decimals(bytes as f64 / scale as f64), UNITS[unit])
}

/// `8`, `0.5`, `2.25`: at most two decimals, none when whole.
pub fn decimals(v: f64) -> String {
    let text = format!("{v:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" { "0".into() } else { text.into() }
}

/// Slurm's TRES list: `cpu=8,mem=16G,gres/gpu=2` (no GPUs: no `gres/gpu`); empty when
/// nothing was held.
fn tres(cpus: f64, memory: u64, gpus: u64) -> String {
    if cpus <= 0.0 && memory == 0 && gpus == 0 {
        return String::new();
    }
    let mut out = format!("cpu={},mem={}", decimals(cpus), size(memory));
    if gpus > 0 {
        out.push_str(&format!(",gres/gpu={gpus}"));
    }
    out
}

// ---------------------------------------------------------------------------------------
// States and columns.

/// sacct's end states, long and short names.
const STATES: [(&str, &str); 7] = [
    ("COMPLETED", "CD"),
    ("FAILED", "F"),
    ("CANCELLED", "CA"),
    ("TIMEOUT", "TO"),
    ("PREEMPTED", "PR"),
    ("NODE_FAIL", "NF"),
    ("OUT_OF_MEMORY", "OOM"),
];

/// `--state`: one of [`STATES`], either name, any case, as the long name.
pub fn parse_state(text: &str) -> Result<String, String> {
    let t = text.trim();
    if let Some((long, _)) = STATES
        .iter()
        .find(|(long, short)| long.eq_ignore_ascii_case(t) || short.eq_ignore_ascii_case(t))
    {
        return Ok((*long).to_string());
    }
    let known = STATES
        .iter()
        .map(|(long, short)| format!("{long} ({short})"))
        .collect::<Vec<_>>()
        .join(", ");
    let live = ["PENDING", "PD", "RUNNING", "R", "REQUEUED", "RQ", "SUSPENDED", "S"];
    let hint = if live.iter().any(|s| s.eq_ignore_ascii_case(t)) {
        "; jobs that have not ended are in `hyperplan status`"
    } else {
        ""
    };
    Err(format!(
        "unknown state {text:?}: an ended job's state is one of {known}{hint}"
    ))
}

/// A column of the history table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Column {
    JobId,
    JobName,
    User,
    Account,
    Partition,
    State,
    ExitCode,
    Elapsed,
    Start,
    End,
    NNodes,
    NodeList,
    AllocCpus,
    AllocTres,
    MaxRss,
    TotalCpu,
    Submit,
    Eligible,
    Timelimit,
    ReqCpus,
    ReqMem,
    ReqTres,
    Reason,
    HyperNode,
    Tier,
    GpuSeconds,
    CoreSeconds,
    Requeues,
    Attempt,
}

/// Every column by its sacct name, the header it prints.
const COLUMNS: [(Column, &str); 29] = [
    (Column::JobId, "JobID"),
    (Column::JobName, "JobName"),
    (Column::User, "User"),
    (Column::Account, "Account"),
    (Column::Partition, "Partition"),
    (Column::State, "State"),
    (Column::ExitCode, "ExitCode"),
    (Column::Elapsed, "Elapsed"),
    (Column::Start, "Start"),
    (Column::End, "End"),
    (Column::NNodes, "NNodes"),
    (Column::NodeList, "NodeList"),
    (Column::AllocCpus, "AllocCPUS"),
    (Column::AllocTres, "AllocTRES"),
    (Column::MaxRss, "MaxRSS"),
    (Column::TotalCpu, "TotalCPU"),
    (Column::Submit, "Submit"),
    (Column::Eligible, "Eligible"),
    (Column::Timelimit, "Timelimit"),
    (Column::ReqCpus, "ReqCPUS"),
    (Column::ReqMem, "ReqMem"),
    (Column::ReqTres, "ReqTRES"),
    (Column::Reason, "Reason"),
    (Column::HyperNode, "HyperNode"),
    (Column::Tier, "Tier"),
    (Column::GpuSeconds, "GPUSeconds"),
    (Column::CoreSeconds, "CoreSeconds"),
    (Column::Requeues, "Requeues"),
    (Column::Attempt, "Attempt"),
];

/// The table without `--format`: sacct's usual columns.
pub const DEFAULT_COLUMNS: [Column; 16] = [
    Column::JobId,
    Column::JobName,
    Column::User,
    Column::Account,
    Column::Partition,
    Column::State,
    Column::ExitCode,
    Column::Elapsed,
    Column::Start,
    Column::End,
    Column::NNodes,
    Column::NodeList,
    Column::AllocCpus,
    Column::AllocTres,
    Column::MaxRss,
    Column::TotalCpu,
];

impl Column {
    fn header(self) -> &'static str {
        COLUMNS.iter().find(|(c, _)| *c == self).map_or("?", |(_, name)| name)
    }
}

/// `--format`'s columns, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Format(pub Vec<Column>);

/// `--format JobID,JobName%30,state`: sacct names, any case (`Queue` for Partition), a
/// `%N` width ignored.
pub fn parse_format(text: &str) -> Result<Format, String> {
    let mut out = Vec::new();
    for part in text.split(',') {
        let name = part.trim();
        let name = match name.split_once('%') {
            Some((n, width)) if width.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => name,
        };
        if name.is_empty() {
            return Err(format!("expected comma-separated column names, got {text:?}"));
        }
        let column = if name.eq_ignore_ascii_case("Queue") {
            Some(Column::Partition)
        } else {
            COLUMNS
                .iter()
                .find(|(_, n)| n.eq_ignore_ascii_case(name))
                .map(|(c, _)| *c)
        };
        match column {
            Some(c) => out.push(c),
            None => {
                let known = COLUMNS.iter().map(|(_, n)| *n).collect::<Vec<_>>().join(", ");
                return Err(format!(
                    "unknown column {name:?}; the columns are {known}, and Queue (the same as Partition)"
                ));
            }
        }
    }
    Ok(Format(out))
}

/// One job's cell of `column`.
fn job_cell(j: &HistoryJob, column: Column, clock: &Clock) -> String {
    let started = j.start.is_some();
    match column {
        Column::JobId => j.job_id_text(),
        Column::JobName => j.name.clone(),
        Column::User => j.user.clone(),
        Column::Account => j.account.clone(),
        Column::Partition => j.queue.clone(),
        Column::State => j.state.clone(),
        Column::ExitCode => exit_code(j.exit_code, j.signal),
        Column::Elapsed => elapsed(j.elapsed()),
        Column::Start => j.start.map_or_else(|| "None".into(), |s| local_iso(s, clock)),
        Column::End => local_iso(j.end, clock),
        Column::NNodes => j.nnodes.to_string(),
        Column::NodeList if j.nodelist.is_empty() => "None assigned".into(),
        Column::NodeList => j.nodelist.clone(),
        Column::AllocCpus => decimals(j.alloc_cpus),
        Column::AllocTres => tres(j.alloc_cpus, j.alloc_memory, j.alloc_gpus),
        Column::MaxRss if !started => String::new(),
        Column::MaxRss => size(j.max_rss),
        Column::TotalCpu => total_cpu(j.cpu_seconds),
        Column::Submit => local_iso(j.submit, clock),
        Column::Eligible => local_iso(j.eligible, clock),
        Column::Timelimit => j.time_limit.map_or_else(|| "UNLIMITED".into(), elapsed),
        Column::ReqCpus => decimals(j.req_cpus),
        Column::ReqMem => size(j.req_memory),
        Column::ReqTres => tres(j.req_cpus, j.req_memory, j.req_gpus),
        Column::Reason => j.reason.clone().unwrap_or_else(|| "None".into()),
        Column::HyperNode => j.hypernode.clone().unwrap_or_default(),
        Column::Tier => j.tier.map(|t| t.to_string()).unwrap_or_default(),
        Column::GpuSeconds => whole(j.gpu_seconds),
        Column::CoreSeconds => whole(j.core_seconds),
        Column::Requeues => j.requeues.to_string(),
        Column::Attempt => j.attempt.to_string(),
    }
}

/// One step's cell of `column` (blank for what only jobs have).
fn step_cell(j: &HistoryJob, s: &HistoryStep, column: Column, clock: &Clock) -> String {
    match column {
        Column::JobId => format!("{}.{}", j.job_id_text(), s.step),
        Column::JobName => s.command.clone().unwrap_or_default(),
        Column::State => step_state(s).into(),
        Column::ExitCode => exit_code(s.exit_code, s.signal),
        Column::Elapsed => match (s.start, s.end) {
            (Some(a), Some(b)) => elapsed(b.saturating_sub(a)),
            _ => elapsed(0),
        },
        Column::Start => s.start.map_or_else(|| "None".into(), |t| local_iso(t, clock)),
        Column::End => s.end.map_or_else(|| "Unknown".into(), |t| local_iso(t, clock)),
        Column::NNodes => s.nnodes.to_string(),
        Column::NodeList => s.nodelist.clone(),
        _ => String::new(),
    }
}

/// A step's State: COMPLETED when it exited 0 without a signal, else FAILED.
fn step_state(s: &HistoryStep) -> &'static str {
    if s.exit_code == Some(0) && s.signal.unwrap_or(0) == 0 {
        "COMPLETED"
    } else {
        "FAILED"
    }
}

/// sacct's ExitCode: `code:signal`.
fn exit_code(code: Option<i32>, signal: Option<i32>) -> String {
    format!("{}:{}", code.unwrap_or(0), signal.unwrap_or(0))
}

/// A non-negative amount, rounded to a whole number.
fn whole(v: f64) -> String {
    if v.is_finite() && v > 0.0 {
        format!("{:.0}", v.round())
    } else {
        "0".into()
    }
}

// ---------------------------------------------------------------------------------------
// Rendering.

/// The header row and one row per job (and step), in `columns`.
fn rows(history: &History, columns: &[Column], clock: &Clock) -> Vec<Vec<String>> {
    let mut rows = vec![columns.iter().map(|c| c.header().to_string()).collect::<Vec<_>>()];
    for j in &history.jobs {
        rows.push(columns.iter().map(|c| job_cell(j, *c, clock)).collect());
        for s in &j.steps {
            rows.push(columns.iter().map(|c| step_cell(j, s, *c, clock)).collect());
        }
    }
    rows
}

/// What the table's reader should know beyond its rows: a cut answer, a database that is
/// behind.
pub fn notes(history: &History) -> Vec<String> {
    let mut notes = Vec::new();
    if history.truncated {
        let n = history.jobs.len();
        notes.push(format!(
            "only the newest {n} matching {} shown: narrow the period with --since/--until \
             (or --users, --state, --job), or raise --limit (at most {MAX_HISTORY_LIMIT})",
            if n == 1 { "job is" } else { "jobs are" }
        ));
    }
    if let Some(behind) = history.behind_secs.filter(|b| *b > 0) {
        notes.push(format!(
            "note: the accounting database is {behind}s behind the planner: jobs that ended in the \
             last {} may not be listed yet",
            super::span(behind)
        ));
    }
    notes
}

/// The table for people, then its notes; with no job, the header and a line saying so.
pub fn render_table(history: &History, columns: &[Column], clock: &Clock) -> String {
    let mut out = table(&rows(history, columns, clock));
    if history.jobs.is_empty() {
        out.push_str("no job ended in that period matches\n");
    }
    for note in notes(history) {
        out.push_str(&note);
        out.push('\n');
    }
    out
}

/// The same columns as CSV (the notes go to stderr).
pub fn render_csv(history: &History, columns: &[Column], clock: &Clock) -> String {
    csv(&rows(history, columns, clock))
}

/// The table of `rows` ([`hyperplan_shared::columns::columns_of`]: rows of any width).
pub fn table(rows: &[Vec<String>]) -> String {
    hyperplan_shared::columns::columns_of(rows)
}

/// Rows as CSV (RFC 4180): a cell with a comma, quote or line break is quoted, its quotes
/// doubled; lines end in LF.
pub fn csv(rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .map(|cell| {
                if cell.contains([',', '"', '\n', '\r']) {
                    format!("\"{}\"", cell.replace('"', "\"\""))
                } else {
                    cell.clone()
                }
            })
            .collect();
        out.push_str(&line.join(","));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use clap::Parser;

    use super::*;

    const GI: u64 = 1 << 30;

    /// 2026-12-05T10:00:00Z, in UTC.
    fn clock() -> Clock {
        Clock {
            now: 1_796_464_800,
            utc_offset: |_| 0,
        }
    }

    /// What the planner answers to the examples' questions: a plain job, an array
    /// element, a failed job killed by a signal with its steps, and a job cancelled
    /// before it started.
    fn history() -> History {
        let t0 = 1_796_464_800 - 6 * 3600;
        History {
            jobs: vec![
                HistoryJob {
                    job_id: 12,
                    name: "prep".into(),
                    user: "alice".into(),
                    account: "physics".into(),
                    queue: "default".into(),
                    submit: t0,
                    eligible: t0,
                    start: Some(t0 + 5),
                    end: t0 + 5 + 3723,
                    state: "COMPLETED".into(),
                    exit_code: Some(0),
                    nnodes: 1,
                    ntasks: 1,
                    nodelist: "n001".into(),
                    hypernode: Some("leaf-0".into()),
                    tier: Some(1),
                    req_cpus: 8.0,
                    req_memory: 16 * GI,
                    alloc_cpus: 8.0,
                    alloc_memory: 16 * GI,
                    time_limit: Some(2 * 3600),
                    cpu_seconds: 25_000.4,
                    max_rss: 1_288_490_189,
                    core_seconds: 8.0 * 3723.0,
                    ..HistoryJob::default()
                },
                HistoryJob {
                    job_id: 19,
                    array_job_id: Some(16),
                    array_index: Some(3),
                    name: "sweep[3]".into(),
                    user: "bob".into(),
                    account: "ml".into(),
                    queue: "gpu".into(),
                    submit: t0 + 60,
                    eligible: t0 + 600,
                    start: Some(t0 + 900),
                    end: t0 + 900 + 90_061,
                    state: "TIMEOUT".into(),
                    exit_code: Some(0),
                    signal: Some(15),
                    nnodes: 2,
                    ntasks: 2,
                    nodelist: "gpu[01-02]".into(),
                    hypernode: Some("spine-1".into()),
                    tier: Some(2),
                    req_cpus: 16.0,
                    req_gpus: 4,
                    req_memory: 64 * GI,
                    alloc_cpus: 16.0,
                    alloc_gpus: 4,
                    alloc_memory: 64 * GI,
                    time_limit: Some(86_400 + 3600),
                    cpu_seconds: 42.123,
                    max_rss: 3 * GI / 2 + 12_345,
                    core_seconds: 16.0 * 90_061.0,
                    gpu_seconds: 4.0 * 90_061.0,
                    requeues: 1,
                    attempt: 1,
                    ..HistoryJob::default()
                },
                HistoryJob {
                    job_id: 17,
                    name: "train, v2".into(),
                    user: "alice".into(),
                    account: "physics".into(),
                    queue: "gpu".into(),
                    submit: t0 + 120,
                    eligible: t0 + 120,
                    start: Some(t0 + 180),
                    end: t0 + 180 + 600,
                    state: "FAILED".into(),
                    reason: Some("task worker-1 killed by signal 9".into()),
                    exit_code: Some(0),
                    signal: Some(9),
                    nnodes: 4,
                    ntasks: 32,
                    nodelist: "n[001-004]".into(),
                    req_cpus: 0.5,
                    req_memory: 512 * 1024 * 1024,
                    alloc_cpus: 0.5,
                    alloc_memory: 512 * 1024 * 1024,
                    cpu_seconds: 0.0,
                    max_rss: 900,
                    steps: vec![
                        HistoryStep {
                            step: 0,
                            nodelist: "n[001-004]".into(),
                            nnodes: 4,
                            start: Some(t0 + 200),
                            end: Some(t0 + 260),
                            exit_code: Some(0),
                            command: Some("hostname".into()),
                            ..HistoryStep::default()
                        },
                        HistoryStep {
                            step: 1,
                            nodelist: "n001".into(),
                            nnodes: 1,
                            start: Some(t0 + 300),
                            end: Some(t0 + 780),
                            exit_code: Some(137),
                            signal: Some(9),
                            command: Some("python \"train.py\" --lr 0.1".into()),
                        },
                    ],
                    ..HistoryJob::default()
                },
                HistoryJob {
                    job_id: 21,
                    name: "never".into(),
                    user: "carol".into(),
                    account: "physics".into(),
                    queue: "default".into(),
                    submit: t0 + 300,
                    eligible: t0 + 300,
                    end: t0 + 4000,
                    state: "CANCELLED".into(),
                    req_cpus: 4.0,
                    req_memory: 8 * GI,
                    ..HistoryJob::default()
                },
            ],
            truncated: false,
            database: "sqlite /var/lib/hyperplan/accounting.db".into(),
            behind_secs: None,
        }
    }

    #[test]
    fn default_columns() {
        insta::assert_snapshot!(render_table(&history(), &DEFAULT_COLUMNS, &clock()));
    }

    #[test]
    fn chosen_columns_with_steps_in_csv() {
        let format = parse_format("JobID,JobName,State,ExitCode,Elapsed,NodeList,NNodes,Queue").unwrap();
        insta::assert_snapshot!(render_csv(&history(), &format.0, &clock()));
    }

    #[test]
    fn every_other_column() {
        let format = parse_format(
            "jobid,submit,eligible,timelimit,reqcpus,reqmem,reqtres,reason,hypernode,tier,\
             gpuseconds,coreseconds,requeues,attempt",
        )
        .unwrap();
        insta::assert_snapshot!(render_table(&history(), &format.0, &clock()));
    }

    #[test]
    fn cut_and_behind() {
        let mut h = history();
        h.jobs.drain(..2);
        h.truncated = true;
        h.behind_secs = Some(95);
        let format = parse_format("JobID,State%20,Elapsed").unwrap();
        insta::assert_snapshot!(render_table(&h, &format.0, &clock()), @r#"
        JobID  State      Elapsed
        17     FAILED     00:10:00
        17.0   COMPLETED  00:01:00
        17.1   FAILED     00:08:00
        21     CANCELLED  00:00:00
        only the newest 2 matching jobs are shown: narrow the period with --since/--until (or --users, --state, --job), or raise --limit (at most 100000)
        note: the accounting database is 95s behind the planner: jobs that ended in the last 1m35s may not be listed yet
        "#);
    }

    #[test]
    fn nothing_ended() {
        let h = History::default();
        let format = parse_format("JobID,State").unwrap();
        insta::assert_snapshot!(render_table(&h, &format.0, &clock()), @r"
        JobID  State
        no job ended in that period matches
        ");
        insta::assert_snapshot!(render_csv(&h, &format.0, &clock()), @"JobID,State");
    }

    /// A wrapper to see the options' errors as people do.
    #[derive(Parser, Debug)]
    #[command(name = "history")]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn error(argv: &[&str]) -> String {
        let mut full = vec!["history"];
        full.extend_from_slice(argv);
        Cli::try_parse_from(full).unwrap_err().to_string()
    }

    #[test]
    fn unknown_column() {
        insta::assert_snapshot!(error(&["--format", "JobID,Nodes"]));
    }

    #[test]
    fn unknown_state() {
        insta::assert_snapshot!(error(&["--state", "failed,RUNNING"]));
        insta::assert_snapshot!(parse_state("done").unwrap_err(), @r#"unknown state "done": an ended job's state is one of COMPLETED (CD), FAILED (F), CANCELLED (CA), TIMEOUT (TO), PREEMPTED (PR), NODE_FAIL (NF), OUT_OF_MEMORY (OOM)"#);
    }

    #[test]
    fn options_and_comma_lists() {
        let cli = Cli::try_parse_from([
            "history",
            "--users",
            "alice,bob",
            "-u",
            "carol",
            "--state",
            "cd,oom",
            "-s",
            "Failed",
            "--job",
            "17",
            "--job",
            "16_3,train",
            "--queue",
            "gpu",
            "--partition",
            "cpu",
            "--since",
            "2026-11-01",
            "--until",
            "2h",
            "--limit",
            "50",
            "--steps",
            "--user",
            "admin",
        ])
        .unwrap();
        let q = query(&cli.args, &clock()).unwrap();
        assert_eq!(q.users, ["alice", "bob", "carol"]);
        assert_eq!(q.states, ["COMPLETED", "OUT_OF_MEMORY", "FAILED"]);
        assert_eq!(q.jobs, ["17", "16_3", "train"]);
        assert_eq!(q.queues, ["gpu", "cpu"]);
        assert_eq!(q.since, Some(1_793_491_200));
        assert_eq!(q.until, Some(clock().now - 7200));
        assert_eq!(q.limit, Some(50));
        assert!(q.steps);
        // `--user` stays who connects.
        assert_eq!(cli.args.client.user.as_deref(), Some("admin"));
        assert!(Cli::try_parse_from(["history", "--limit", "0"]).is_err());
        assert!(Cli::try_parse_from(["history", "--output", "csv"]).is_ok());
    }

    #[test]
    fn default_period_is_a_day_and_any_time_for_jobs() {
        let cli = Cli::try_parse_from(["history"]).unwrap();
        let q = query(&cli.args, &clock()).unwrap();
        assert_eq!((q.since, q.until), (Some(clock().now - 86_400), None));
        let cli = Cli::try_parse_from(["history", "-j", "17"]).unwrap();
        assert_eq!(query(&cli.args, &clock()).unwrap().since, None);
        let cli = Cli::try_parse_from(["history", "-S", "1h", "-E", "2h"]).unwrap();
        let err = query(&cli.args, &clock()).unwrap_err().to_string();
        assert!(err.contains("--until must be later than --since"), "{err}");
    }

    #[test]
    fn times_ago_and_local_dates() {
        assert_eq!(parse_when("7d"), Ok(When::Ago(7 * 86_400)));
        assert_eq!(parse_when("400d"), Ok(When::Ago(400 * 86_400)));
        assert_eq!(parse_when("2h"), Ok(When::Ago(7200)));
        assert_eq!(parse_when("90m"), Ok(When::Ago(5400)));
        assert_eq!(parse_when("1h30m"), Ok(When::Ago(5400)));
        assert_eq!(parse_when("45"), Ok(When::Ago(45)));
        assert_eq!(parse_when("now"), Ok(When::Ago(0)));
        // 2026-11-01T00:00 and 08:00 as wall-clock times, resolved in the local zone.
        assert_eq!(parse_when("2026-11-01"), Ok(When::Local(1_793_491_200)));
        assert_eq!(parse_when("2026-11-01T08:00"), Ok(When::Local(1_793_520_000)));
        assert_eq!(parse_when("2026-11-01T08:00:30"), Ok(When::Local(1_793_520_030)));
        assert_eq!(parse_when("2026-11-01T08:00Z"), Ok(When::At(1_793_520_000)));
        assert_eq!(parse_when("2026-11-01T09:00+01:00"), Ok(When::At(1_793_520_000)));
        assert_eq!(parse_when("2026-11-01T03:00-05:00"), Ok(When::At(1_793_520_000)));
        for bad in ["", "yesterday", "7x", "2026-13-01", "2026-11-01T25:00", "-1d", "d"] {
            assert!(parse_when(bad).is_err(), "{bad:?}");
        }
        let c = clock();
        assert_eq!(When::Ago(3600).resolve(&c), c.now - 3600);
        assert_eq!(When::Ago(u64::MAX).resolve(&c), 0);
        let paris = Clock {
            utc_offset: |_| 3600,
            ..c
        };
        assert_eq!(When::Local(1_793_520_000).resolve(&paris), 1_793_520_000 - 3600);
        assert_eq!(local_iso(1_793_520_000 - 3600, &paris), "2026-11-01T08:00:00");
        let new_york = Clock {
            utc_offset: |_| -5 * 3600,
            ..c
        };
        assert_eq!(When::Local(1_793_520_000).resolve(&new_york), 1_793_520_000 + 5 * 3600);
        // Around a change of offset (here at 2026-11-01T06:00Z: -4h before, -5h after),
        // a wall-clock time resolves by the offset in force then.
        let dst = Clock {
            utc_offset: |t| if t < 1_793_512_800 { -4 * 3600 } else { -5 * 3600 },
            ..c
        };
        assert_eq!(
            local_iso(When::Local(1_793_520_000).resolve(&dst), &dst),
            "2026-11-01T08:00:00"
        );
        assert_eq!(
            local_iso(When::Local(1_793_491_200).resolve(&dst), &dst),
            "2026-11-01T00:00:00"
        );
        assert_eq!(local_minute(1_793_520_000, &c), "2026-11-01T08:00");
        assert_eq!(local_minute(1_793_520_007, &c), "2026-11-01T08:00:07");
    }

    #[test]
    fn durations_and_sizes() {
        assert_eq!(elapsed(0), "00:00:00");
        assert_eq!(elapsed(3723), "01:02:03");
        assert_eq!(elapsed(90_061), "1-01:01:01");
        assert_eq!(total_cpu(0.0), "00:00.000");
        assert_eq!(total_cpu(42.1234), "00:42.123");
        assert_eq!(total_cpu(3599.9996), "01:00:00");
        assert_eq!(total_cpu(25_000.4), "06:56:40");
        assert_eq!(total_cpu(200_000.0), "2-07:33:20");
        assert_eq!(size(0), "0");
        assert_eq!(size(900), "900");
        assert_eq!(size(16 * GI), "16G");
        assert_eq!(size(1_288_490_189), "1.2G");
        assert_eq!(size(5 * GI / 4), "1.25G");
        assert_eq!(size(3 << 40), "3T");
        assert_eq!(size(1536 * 1024), "1.5M");
        assert_eq!(tres(8.0, 16 * GI, 2), "cpu=8,mem=16G,gres/gpu=2");
        assert_eq!(tres(0.5, 512 << 20, 0), "cpu=0.5,mem=512M");
        assert_eq!(tres(0.0, 0, 0), "");
        assert_eq!(exit_code(Some(1), None), "1:0");
        assert_eq!(exit_code(None, Some(9)), "0:9");
    }

    #[test]
    fn csv_quotes_as_rfc_4180() {
        let rows = vec![
            vec!["a".to_string(), "b,c".to_string()],
            vec!["say \"hi\"".to_string(), "two\nlines".to_string()],
        ];
        assert_eq!(csv(&rows), "a,\"b,c\"\n\"say \"\"hi\"\"\",\"two\nlines\"\n");
    }
}
