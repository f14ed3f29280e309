//! `hyperplan status [JOB]`: where jobs are, in the simulator's job table (the same job
//! objects `hyperplan simulate` prints) with each job's queue and start, and for one job its
//! priority and reservation.

use std::collections::{HashMap, HashSet};

use anyhow::{Context, bail};
use hyperplan_core::sim::render_task_table;
use hyperplan_net::messages::RequestCommand;
use hyperplan_shared::quantity::format_quantity;
use hyperplan_shared::report::{JobReport, JobStatus, PriorityReport, Report, ReservationReport};
use hyperplan_shared::status::{JobList, StatusCursor};
use hyperplan_shared::{MEMORY, hostlist};
use serde_json::Value;

use super::{Clock, Output, long_help, print_reply};
use crate::client::{self, ClientArgs, ClientConfig};

const EXAMPLES: &str = "  hyperplan status
  hyperplan status train-64
  hyperplan status --all train-64
  hyperplan status --since 2h
  hyperplan status --expand            # every element of an array on a row of its own
  hyperplan status --output json | jq '.jobs[] | select(.status == \"pending\") | .reason'";

/// Show jobs: queue, status, start, HyperNode, nodes and, for pending jobs, why they wait.
///
/// Without JOB, the newest job of every name: JOB, QUEUE, STATUS, START (when it started,
/// `5m ago`; for a pending job that holds a reservation, when it is expected to start,
/// `expected in 2h13m`, like `squeue --start`), HYPERNODE, NODES and REASON. With JOB, the
/// newest job of that name, then its queue; if it waits, its priority (its rank among the
/// waiting jobs, 1 going first: jobs of a higher-priority queue go first, then the higher
/// score, the weighted sum of the job's own priority and its fair-share, age and size
/// factors, each 0 to 1, weighted by `[priority]` in planner.toml) and, once the planner
/// has reserved room for it (backfill: smaller jobs start only where they do not delay
/// it), its expected start as a local time and the HyperNode and nodes kept for it; then
/// one row per task: rank, node, and its pinning (CPUs, NUMA nodes, memory per NUMA node,
/// GPUs, NICs). An expected start moves as jobs end earlier than their time limits.
///
/// The JSON is `{"jobs": [...]}` with the job objects of `hyperplan simulate`, each with
/// the `id` the planner gave it at submit, its `queue`, and while it waits `priority`
/// (`queuePriority`, `score`, `job`, `fairshare`, `age`, `size`, `rank`, `of`) and
/// `reservation` (`start` in Unix seconds, `hyperNode`, `nodes`). A name is unique among
/// jobs that have not ended; once a job ended (finished, cancelled, rejected) its name may
/// be used again, and `--all` shows every job of the name(s), each with its id, the ended
/// ones the planner keeps on disk included ([store] keepFinished, 7 days by default);
/// `--since 2h` shows the jobs that have not ended and those that ended in the last 2 hours.
/// The planner keeps the newest ended jobs of each user in memory (`[limits]
/// maxEndedJobsPerUser`); older ones are shown by `--all` and `--since`, from its store.
/// However many jobs and tasks there are, the planner answers in pages that each fit in
/// a frame, and this command asks for all of them: what it prints is whole.
/// The elements of an array (`submit --array`) are jobs of their own, but the table shows
/// each array as one line, `sweep[1-100%8]` (with `--all` or `--since`, the array's id
/// beside it) and how many of its elements are in each state (`12 running, 80 pending,
/// 8 completed`), so that an array of 10,000 does not bury the other jobs; `--expand`
/// lists every element (`sweep[7]`) instead. The JSON is never folded: one object per
/// element, each with its `array` (`arrayId`, `arrayName`, `index`, `count`, `min`,
/// `max`, `spec`).
/// `hyperplan explain JOB` says why a job is where it is; `hyperplan queues` shows the queues.
#[derive(clap::Args, Debug)]
#[command(after_long_help = long_help(EXAMPLES))]
pub struct Args {
    /// One job's name; all jobs without it.
    #[arg(value_name = "JOB")]
    job: Option<String>,
    /// Every job, ended ones whose name was used again included (each with its id).
    #[arg(long)]
    all: bool,
    /// Jobs that have not ended, and those that ended within DURATION (`90m`, `2h`,
    /// `7d`), each with its id.
    #[arg(long, value_name = "DURATION", value_parser = parse_since)]
    since: Option<u64>,
    /// Every element of an array on a row of its own, not one line per array.
    #[arg(long)]
    expand: bool,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    client: ClientArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let all = args.all || args.since.is_some();
    let one = args.job.is_some() && !all;
    let config = ClientConfig::from_process(&args.client)?;
    let value = fetch(&config, args.job, args.all, args.since)?;
    let shown = Shown {
        tasks: one,
        expand: args.expand,
        ids: all,
    };
    print_reply(args.output, value, "job list", |list: &JobList| {
        let clock = Clock::local();
        if all {
            render_shown(&with_ids(list), shown, &clock)
        } else {
            render_shown(list, shown, &clock)
        }
    })
}

/// How the table shows the jobs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Shown {
    /// One job: its details and its tasks after the table.
    pub tasks: bool,
    /// An array's elements one per row (`--expand`), not folded into one line.
    pub expand: bool,
    /// Names carry their ids (`--all`, `--since`): a folded array its array id.
    pub ids: bool,
}

/// The planner's answer to a status request, every page of it joined (see
/// [`JobList`]): `{"jobs": [...]}` with each job whole, as one reply would have it.
pub fn fetch(config: &ClientConfig, job: Option<String>, all: bool, since_secs: Option<u64>) -> anyhow::Result<Value> {
    let mut jobs: Vec<Value> = Vec::new();
    let mut seen: HashSet<u64> = HashSet::new();
    let mut page: Option<StatusCursor> = None;
    loop {
        let command = RequestCommand::Status {
            job: job.clone(),
            all,
            since_secs,
            page,
        };
        let mut reply = client::request(config, command)?;
        let next = match reply.get_mut("next").map(Value::take) {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                serde_json::from_value::<StatusCursor>(v)
                    .context("the planner's reply is not the job list this hyperplan expects (its `next`)")?,
            ),
        };
        let Some(Value::Array(part)) = reply.get_mut("jobs").map(Value::take) else {
            bail!("the planner's reply is not the job list this hyperplan expects (no `jobs`)");
        };
        // The job the page starts inside of, if it does (its first job continues it).
        let continuing = page.filter(|p| p.task > 0).map(|p| p.id);
        join(&mut jobs, &mut seen, part, continuing);
        match next {
            None => break,
            Some(n) if page == Some(n) => bail!("the planner sent the page at {n:?} twice; not asking again"),
            Some(n) => page = Some(n),
        }
    }
    Ok(serde_json::json!({ "jobs": jobs }))
}

/// Adds a page's jobs to `jobs`: a page asked for inside job `continuing` (the last
/// page ended inside its task list) starts with the rest of its tasks; a job already had
/// (the planner starts over when the jobs moved between two pages) is left out.
fn join(jobs: &mut Vec<Value>, seen: &mut HashSet<u64>, part: Vec<Value>, continuing: Option<u64>) {
    let id_of = |j: &Value| j.get("id").and_then(Value::as_u64);
    for (i, mut job) in part.into_iter().enumerate() {
        let id = id_of(&job);
        if let Some(last) = jobs.last_mut()
            && i == 0
            && id.is_some()
            && id == continuing
            && id_of(last) == id
        {
            if let (Some(Value::Array(have)), Some(Value::Array(more))) =
                (last.get_mut("tasks"), job.get_mut("tasks").map(Value::take))
            {
                have.extend(more);
            }
            continue;
        }
        if let Some(id) = id
            && !seen.insert(id)
        {
            continue;
        }
        jobs.push(job);
    }
}

/// `--since`: `90m`, `2h`, `1h30m`, `7d`, or seconds.
fn parse_since(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if let Some(days) = t.strip_suffix('d') {
        return days
            .parse::<u64>()
            .ok()
            .and_then(|d| d.checked_mul(86_400))
            .ok_or_else(|| format!("expected a duration such as 90m, 2h or 7d, got {text:?}"));
    }
    hyperplan_shared::timelimit::parse_time_limit(t).map_err(|e| e.to_string())
}

/// Job names with their ids (`train (id 7)`), for `--all`, where one name may be listed
/// more than once.
fn with_ids(list: &JobList) -> JobList {
    let mut list = list.clone();
    for j in &mut list.jobs {
        j.name = format!("{} (id {})", j.name, j.id);
    }
    list
}

/// [`render_shown`] with arrays folded and no ids, as the tests show it.
#[cfg(test)]
fn render(list: &JobList, tasks: bool, clock: &Clock) -> String {
    render_shown(
        list,
        Shown {
            tasks,
            ..Shown::default()
        },
        clock,
    )
}

/// The job table and a count line (every element of an array counted as the job it is);
/// with `tasks`, each job's queue, priority and reservation, then the task table after
/// it. `clock` turns times into `5m ago`, `in 2h13m` and local times.
pub fn render_shown(list: &JobList, shown: Shown, clock: &Clock) -> String {
    let tasks = shown.tasks;
    if list.jobs.is_empty() {
        return "no jobs: submit one with `hyperplan submit FILE`\n".into();
    }
    let count = |status: JobStatus| list.jobs.iter().filter(|j| j.status == status).count();
    // A live planner's jobs run and end: count every status there is.
    let mut counts: Vec<String> = [JobStatus::Placed, JobStatus::Pending, JobStatus::Rejected]
        .into_iter()
        .map(|s| format!("{} {}", count(s), s.as_str()))
        .collect();
    for s in [
        JobStatus::Running,
        JobStatus::Completed,
        JobStatus::Failed,
        JobStatus::Timeout,
        JobStatus::Cancelled,
    ] {
        if count(s) > 0 {
            counts.push(format!("{} {}", count(s), s.as_str()));
        }
    }
    let mut out = job_table(&list.jobs, shown, clock);
    out.push_str(&format!("\n{}\n", counts.join(", ")));
    if tasks {
        for j in &list.jobs {
            let detail = details(j, clock);
            if detail.is_empty() {
                continue;
            }
            out.push('\n');
            if list.jobs.len() > 1 {
                out.push_str(&format!("{}:\n", j.name));
            }
            out.push_str(&detail);
        }
        let report = Report {
            jobs: list.jobs.clone(),
            ..Report::default()
        };
        out.push('\n');
        out.push_str(&render_task_table(&report));
        out.push_str(&render_runs(&list.jobs));
    }
    out
}

/// The simulator's job table (`hyperplan simulate`) with the queue and a START column:
/// when a job started (`5m ago`), or, for a pending job holding a reservation, when it is
/// expected to (`expected in 2h13m`, like `squeue --start`). Unless `shown.expand`, the
/// elements of each array are one row ([`fold`]).
fn job_table(jobs: &[JobReport], shown: Shown, clock: &Clock) -> String {
    let mut rows: Vec<[String; 7]> = vec![[
        "JOB".into(),
        "QUEUE".into(),
        "STATUS".into(),
        "START".into(),
        "HYPERNODE".into(),
        "NODES".into(),
        "REASON".into(),
    ]];
    for line in fold(jobs, shown.expand) {
        let j = match line {
            Line::Job(j) => j,
            Line::Array(a) => {
                rows.push(a.row(shown.ids, clock));
                continue;
            }
        };
        let mut names: Vec<&str> = j.tasks.iter().filter_map(|t| t.node.as_deref()).collect();
        names.sort_unstable();
        names.dedup();
        let status = match j.status {
            JobStatus::Placed => {
                let placed = j.tasks.iter().filter(|t| t.node.is_some()).count();
                format!("placed {placed}/{}", j.tasks.len())
            }
            other => other.as_str().into(),
        };
        rows.push([
            j.name.clone(),
            j.queue.clone().unwrap_or_else(|| "-".into()),
            status,
            start(j, clock),
            j.allocated_hyper_node.clone().unwrap_or_else(|| "-".into()),
            if names.is_empty() {
                "-".into()
            } else {
                hostlist::compress(&names)
            },
            j.reason.clone().unwrap_or_default(),
        ]);
    }
    super::columns::columns(&rows)
}

/// A line of the job table: a job, or the elements of an array folded into one.
enum Line<'a> {
    Job(&'a JobReport),
    /// Boxed: a job's line is one reference, and most lines are jobs.
    Array(Box<Folded<'a>>),
}

/// The states of an array's summary, in the order it names them.
const SUMMARY_ORDER: [JobStatus; 9] = [
    JobStatus::Running,
    JobStatus::Placed,
    JobStatus::Pending,
    JobStatus::Completed,
    JobStatus::Failed,
    JobStatus::Timeout,
    JobStatus::Cancelled,
    JobStatus::Preempted,
    JobStatus::Rejected,
];

/// An array's elements, as one line of the table.
struct Folded<'a> {
    element: &'a hyperplan_shared::array::ArrayElement,
    /// The first element listed: the array's queue.
    first: &'a JobReport,
    /// Elements per state, in [`SUMMARY_ORDER`].
    counts: [usize; SUMMARY_ORDER.len()],
    /// The earliest start of an element.
    start: Option<u64>,
    hyper_nodes: HashSet<&'a str>,
    nodes: HashSet<&'a str>,
    /// The first waiting element's reason (an array at its `%N` limit says so).
    reason: Option<&'a str>,
}

impl<'a> Folded<'a> {
    fn new(element: &'a hyperplan_shared::array::ArrayElement, first: &'a JobReport) -> Self {
        Folded {
            element,
            first,
            counts: [0; SUMMARY_ORDER.len()],
            start: None,
            hyper_nodes: HashSet::new(),
            nodes: HashSet::new(),
            reason: None,
        }
    }

    fn add(&mut self, j: &'a JobReport) {
        if let Some(i) = SUMMARY_ORDER.iter().position(|s| *s == j.status) {
            self.counts[i] += 1;
        }
        if let Some(s) = j.start_time {
            self.start = Some(self.start.map_or(s, |t| t.min(s)));
        }
        if !j.status.is_final() {
            self.hyper_nodes.extend(j.allocated_hyper_node.as_deref());
            self.nodes.extend(j.tasks.iter().filter_map(|t| t.node.as_deref()));
        }
        if self.reason.is_none() && j.status == JobStatus::Pending {
            self.reason = j.reason.as_deref();
        }
    }

    /// `12 running, 80 pending, 8 completed`: the states it has, with the table's words.
    fn summary(&self) -> String {
        SUMMARY_ORDER
            .iter()
            .zip(self.counts)
            .filter(|(_, n)| *n > 0)
            .map(|(s, n)| format!("{n} {}", s.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Its row: `sweep[1-100%8]` (with ` (id 40)` under `ids`), the first element's
    /// queue, the summary, the earliest start, and where its live elements are.
    fn row(&self, ids: bool, clock: &Clock) -> [String; 7] {
        let a = self.element;
        let mut name = format!("{}[{}]", a.array_name, a.spec);
        if ids {
            name.push_str(&format!(" (id {})", a.array_id));
        }
        let hyper_node = match self.hyper_nodes.len() {
            0 => "-".to_string(),
            1 => self
                .hyper_nodes
                .iter()
                .next()
                .map_or_else(|| "-".into(), |h| h.to_string()),
            n => format!("{n} HyperNodes"),
        };
        let mut nodes: Vec<&str> = self.nodes.iter().copied().collect();
        nodes.sort_unstable();
        [
            name,
            self.first.queue.clone().unwrap_or_else(|| "-".into()),
            self.summary(),
            self.start.map_or_else(|| "-".into(), |s| clock.relative(s)),
            hyper_node,
            if nodes.is_empty() {
                "-".into()
            } else {
                hostlist::compress(&nodes)
            },
            self.reason.unwrap_or_default().to_string(),
        ]
    }
}

/// The table's lines: each job in order, except that the elements of an array are one
/// line where its first listed element is, unless `expand`. One pass over the jobs.
fn fold(jobs: &[JobReport], expand: bool) -> Vec<Line<'_>> {
    let mut lines: Vec<Line<'_>> = Vec::with_capacity(jobs.len());
    // Array id → its line.
    let mut arrays: HashMap<u64, usize> = HashMap::new();
    for j in jobs {
        let Some(a) = j.array.as_ref().filter(|_| !expand) else {
            lines.push(Line::Job(j));
            continue;
        };
        let at = *arrays.entry(a.array_id).or_insert_with(|| {
            lines.push(Line::Array(Box::new(Folded::new(a, j))));
            lines.len() - 1
        });
        if let Some(Line::Array(f)) = lines.get_mut(at) {
            f.add(j);
        }
    }
    lines
}

/// The START cell: `5m ago`, `expected in 2h13m`, `-`.
fn start(j: &JobReport, clock: &Clock) -> String {
    if j.status == JobStatus::Pending {
        return match &j.reservation {
            Some(r) => format!("expected {}", expected(r.start, clock)),
            None => "-".into(),
        };
    }
    j.start_time.map_or_else(|| "-".into(), |s| clock.relative(s))
}

/// `in 2h13m`, or `now` for a reservation whose start has come.
fn expected(start: u64, clock: &Clock) -> String {
    if start <= clock.now {
        "now".into()
    } else {
        clock.relative(start)
    }
}

/// One job's `Queue:`, `Priority:` (with its factors), `Expected start:` and `Reserved:`
/// lines, those it has.
fn details(j: &JobReport, clock: &Clock) -> String {
    let mut lines: Vec<(&str, String)> = Vec::new();
    if let Some(q) = &j.queue {
        lines.push(("Queue:", q.clone()));
    }
    if let Some(p) = &j.priority {
        let (rank, factors) = priority(p);
        lines.push(("Priority:", rank));
        lines.push(("  factors:", factors));
    }
    if j.status == JobStatus::Pending
        && let Some(r) = &j.reservation
    {
        let (start, reserved) = reservation(r, clock);
        lines.push(("Expected start:", start));
        lines.push(("Reserved:", reserved));
    }
    if let Some(n) = j.preempting.as_ref().filter(|_| j.status == JobStatus::Pending) {
        lines.push(("Preempting:", preempting(n)));
    }
    if let Some(by) = &j.preempted_by {
        lines.push(("Preempted by:", by.clone()));
    }
    lines
        .into_iter()
        .map(|(label, text)| format!("{label:<16} {text}\n"))
        .collect()
}

/// A preemption under way: `f13, f14 in leaf-4; n[13-16] held for it`.
pub(super) fn preempting(n: &hyperplan_shared::report::Nomination) -> String {
    format!(
        "{} in {}; {} held for it until they have ended",
        n.victims.join(", "),
        n.hyper_node.as_deref().unwrap_or("the cluster"),
        n.nodes.join(",")
    )
}

/// A waiting job's place and what makes it: `rank 3 of 41 waiting: queue priority 10,
/// score 10523.1` and `job priority 0, fair share 0.95, age 0.52, size 0.00`.
pub(super) fn priority(p: &PriorityReport) -> (String, String) {
    (
        format!(
            "rank {} of {} waiting: queue priority {}, score {:.1}",
            p.rank, p.of, p.queue_priority, p.score
        ),
        format!(
            "job priority {}, fair share {:.2}, age {:.2}, size {:.2}",
            p.job, p.fairshare, p.age, p.size
        ),
    )
}

/// A reservation's start (`2025-06-01 16:26:20 +0200 (in 2h13m)`) and where
/// (`32 nodes under spine-0: n[001-032]`).
pub(super) fn reservation(r: &ReservationReport, clock: &Clock) -> (String, String) {
    let start = format!("{} ({})", clock.local_time(r.start), expected(r.start, clock));
    let names: Vec<&str> = r.nodes.iter().map(String::as_str).collect();
    let count = match r.nodes.len() {
        1 => "1 node".to_string(),
        n => format!("{n} nodes"),
    };
    let under = match &r.hyper_node {
        Some(h) => format!("under {h}"),
        None => "under several top HyperNodes".into(),
    };
    let reserved = if names.is_empty() {
        under
    } else {
        format!("{count} {under}: {}", hostlist::compress(&names))
    };
    (start, reserved)
}

/// How each task runs or ended, for tasks that ran on agents (the simulator's have no
/// run): `TASK NODE STATE EXIT PID CPU-TIME PEAK-MEM`. Empty when no task has a state.
fn render_runs(jobs: &[hyperplan_shared::report::JobReport]) -> String {
    let runs: Vec<_> = jobs
        .iter()
        .flat_map(|j| j.tasks.iter())
        .filter(|t| t.state.is_some())
        .collect();
    if runs.is_empty() {
        return String::new();
    }
    let mut rows = vec![[
        "TASK".to_string(),
        "NODE".into(),
        "STATE".into(),
        "EXIT".into(),
        "PID".into(),
        "CPU-TIME".into(),
        "PEAK-MEM".into(),
    ]];
    for t in runs {
        let exit = match (t.exit_code, t.signal) {
            (_, Some(s)) => hyperplan_shared::taskend::signal_name(s),
            (Some(c), None) => c.to_string(),
            (None, None) => "-".into(),
        };
        rows.push([
            t.name.clone(),
            t.node.clone().unwrap_or_else(|| "-".into()),
            t.state.map_or("-", |s| s.as_str()).to_string(),
            exit,
            t.pid.map_or_else(|| "-".into(), |p| p.to_string()),
            t.cpu_seconds.map_or_else(|| "-".into(), |s| format!("{s:.2}s")),
            t.max_rss_bytes
                .or(t.rss_bytes)
                .map_or_else(|| "-".into(), |b| format_quantity(MEMORY, b)),
        ]);
    }
    format!("\n{}", super::columns::columns(&rows))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::BTreeMap;

    use hyperplan_shared::report::TaskReport;

    use super::*;

    /// 1,000 s after the fixtures' epoch, in UTC.
    fn clock() -> Clock {
        Clock {
            now: 1_000,
            utc_offset: |_| 0,
        }
    }

    fn task(rank: u32, node: Option<&str>, pinned: bool) -> TaskReport {
        TaskReport {
            name: format!("worker-{rank}"),
            rank: node.map(|_| rank),
            sub_job: "worker".into(),
            node: node.map(Into::into),
            hyper_nodes: node
                .map(|_| vec!["leaf-0".into(), "spine-0".into()])
                .unwrap_or_default(),
            cpus: pinned.then(|| "0-15".into()),
            numa_nodes: if pinned { vec![0] } else { vec![] },
            memory_numa: if pinned {
                BTreeMap::from([(0, 64 << 30)])
            } else {
                BTreeMap::new()
            },
            gpus: if pinned { vec!["0000:3b:00.0".into()] } else { vec![] },
            nics: if pinned { vec!["mlx5_0".into()] } else { vec![] },
            ..TaskReport::default()
        }
    }

    fn jobs() -> JobList {
        JobList {
            jobs: vec![
                JobReport {
                    id: 1,
                    name: "train-64".into(),
                    status: JobStatus::Placed,
                    reason: None,
                    submit_time: 100,
                    start_time: Some(101),
                    end_time: None,
                    allocated_hyper_node: Some("leaf-0".into()),
                    owner: None,
                    exit_code: None,
                    tasks: vec![task(0, Some("gpu-b01"), true), task(1, Some("gpu-b02"), true)],
                    reservation: None,
                    queue: None,
                    priority: None,
                    preempted_by: None,
                    preempting: None,
                    array: None,
                    steps: vec![],
                },
                JobReport {
                    id: 1,
                    name: "big-256".into(),
                    status: JobStatus::Pending,
                    reason: Some("no tier-1 HyperNode has 32 free GPUs; best is leaf-7 with 24".into()),
                    submit_time: 102,
                    start_time: None,
                    end_time: None,
                    allocated_hyper_node: None,
                    owner: None,
                    exit_code: None,
                    tasks: vec![task(0, None, false)],
                    reservation: None,
                    queue: None,
                    priority: None,
                    preempted_by: None,
                    preempting: None,
                    array: None,
                    steps: vec![],
                },
                JobReport {
                    id: 1,
                    name: "huge".into(),
                    status: JobStatus::Rejected,
                    reason: Some("needs 4096 GPUs; the cluster has 512".into()),
                    submit_time: 103,
                    start_time: None,
                    end_time: None,
                    allocated_hyper_node: None,
                    owner: None,
                    exit_code: None,
                    tasks: vec![],
                    reservation: None,
                    queue: None,
                    priority: None,
                    preempted_by: None,
                    preempting: None,
                    array: None,
                    steps: vec![],
                },
            ],
            next: None,
        }
    }

    #[test]
    fn all_jobs() {
        insta::assert_snapshot!(render(&jobs(), false, &clock()));
    }

    #[test]
    fn one_job_with_its_tasks() {
        let mut list = jobs();
        list.jobs.truncate(1);
        insta::assert_snapshot!(render(&list, true, &clock()));
    }

    /// A live planner's jobs: every status counted, and how each task ran or ended.
    #[test]
    fn jobs_that_ran_with_their_tasks_runs() {
        use hyperplan_shared::report::TaskStatus;
        let ran = |rank: u32, state: TaskStatus, exit: Option<i32>, signal: Option<i32>| TaskReport {
            state: Some(state),
            exit_code: exit,
            signal,
            pid: Some(4100 + rank),
            cpu_seconds: Some(12.5),
            max_rss_bytes: Some(3 << 30),
            ..task(rank, Some("gpu-b01"), false)
        };
        let mut list = jobs();
        list.jobs.truncate(1);
        list.jobs[0].status = JobStatus::Failed;
        list.jobs[0].exit_code = Some(3);
        list.jobs[0].tasks = vec![
            ran(0, TaskStatus::Exited, Some(3), None),
            ran(1, TaskStatus::Killed, None, Some(15)),
        ];
        let mut done = list.jobs[0].clone();
        done.name = "eval".into();
        done.status = JobStatus::Completed;
        done.tasks.clear();
        list.jobs.push(done);
        insta::assert_snapshot!(render(&list, true, &clock()));
    }

    /// Issue 23: a waiting job's queue, rank and factors, and the room reserved for it.
    fn waiting_with_a_reservation() -> JobList {
        let mut list = jobs();
        list.jobs.swap(0, 1);
        list.jobs.truncate(2);
        let big = &mut list.jobs[0];
        big.queue = Some("gpu".into());
        big.priority = Some(PriorityReport {
            queue_priority: 10,
            score: 10_523.14,
            job: 0,
            fairshare: 0.953,
            age: 0.5204,
            size: 0.0,
            rank: 3,
            of: 41,
        });
        big.reservation = Some(ReservationReport {
            start: 1_000 + 2 * 3600 + 13 * 60 + 20,
            hyper_node: Some("spine-0".into()),
            nodes: (1..=32).map(|i| format!("gpu-a{i:02}")).collect(),
        });
        list.jobs[1].queue = Some("default".into());
        list
    }

    #[test]
    fn pending_job_with_a_reservation_in_the_list() {
        insta::assert_snapshot!(render(&waiting_with_a_reservation(), false, &clock()), @r"
        JOB       QUEUE    STATUS      START              HYPERNODE  NODES         REASON
        big-256   gpu      pending     expected in 2h13m  -          -             no tier-1 HyperNode has 32 free GPUs; best is leaf-7 with 24
        train-64  default  placed 2/2  14m59s ago         leaf-0     gpu-b[01-02]

        1 placed, 1 pending, 0 rejected
        ");
    }

    #[test]
    fn pending_job_with_a_reservation_and_priority() {
        let mut list = waiting_with_a_reservation();
        list.jobs.truncate(1);
        let east = Clock {
            utc_offset: |_| 7200,
            ..clock()
        };
        insta::assert_snapshot!(render(&list, true, &east));
    }

    #[test]
    fn a_reservation_spread_over_the_top() {
        let r = ReservationReport {
            start: 900,
            hyper_node: None,
            nodes: vec!["n1".into()],
        };
        let (start, reserved) = reservation(&r, &clock());
        assert_eq!(start, "1970-01-01 00:15:00 +0000 (now)");
        assert_eq!(reserved, "1 node under several top HyperNodes: n1");
    }

    /// Pages join into whole jobs: a job cut between two pages is one job with every task,
    /// in order; a job a page repeats (the planner started over) is kept once.
    #[test]
    fn pages_join_into_whole_jobs() {
        let job = |id: u64, tasks: &[&str]| serde_json::json!({"id": id, "name": format!("j{id}"), "tasks": tasks});
        let mut jobs = Vec::new();
        let mut seen = HashSet::new();
        join(
            &mut jobs,
            &mut seen,
            vec![job(1, &["a"]), job(2, &["t-0", "t-1"])],
            None,
        );
        join(&mut jobs, &mut seen, vec![job(2, &["t-2"])], Some(2));
        join(&mut jobs, &mut seen, vec![job(2, &["t-3"]), job(3, &[])], Some(2));
        // Started over: every job again, each kept once, none added to.
        join(
            &mut jobs,
            &mut seen,
            vec![job(1, &["a"]), job(2, &["t-0"]), job(3, &[])],
            None,
        );
        assert_eq!(
            serde_json::Value::Array(jobs),
            serde_json::json!([
                {"id": 1, "name": "j1", "tasks": ["a"]},
                {"id": 2, "name": "j2", "tasks": ["t-0", "t-1", "t-2", "t-3"]},
                {"id": 3, "name": "j3", "tasks": []},
            ])
        );
    }

    /// `n` elements of the array `sweep[1-100%8]` (id 40), each in the state `state_of`
    /// gives its index.
    fn array(n: u32, state_of: impl Fn(u32) -> JobStatus) -> Vec<JobReport> {
        let spec = hyperplan_shared::array::ArraySpec::parse("1-100%8").unwrap();
        let template = jobs().jobs.remove(1);
        (1..=n)
            .map(|index| {
                let status = state_of(index);
                let running = status == JobStatus::Running;
                JobReport {
                    id: 39 + u64::from(index),
                    name: format!("sweep[{index}]"),
                    status,
                    reason: (status == JobStatus::Pending)
                        .then(|| "the array sweep runs its limit of 8 elements (%8)".into()),
                    start_time: (status != JobStatus::Pending).then_some(200 + u64::from(index)),
                    allocated_hyper_node: running.then(|| "leaf-0".into()),
                    queue: Some("cpu".into()),
                    tasks: vec![task(
                        0,
                        running.then_some(["n1", "n2", "n3"][index as usize % 3]),
                        false,
                    )],
                    array: Some(hyperplan_shared::array::ArrayElement {
                        array_id: 40,
                        array_name: "sweep".into(),
                        index,
                        count: 100,
                        min: 1,
                        max: 100,
                        spec: spec.clone(),
                    }),
                    ..template.clone()
                }
            })
            .collect()
    }

    /// 8 done, 12 running (the %8 limit is a planner's matter; any counts fold), 80 waiting.
    fn sweep_state(index: u32) -> JobStatus {
        match index {
            1..=8 => JobStatus::Completed,
            9..=20 => JobStatus::Running,
            _ => JobStatus::Pending,
        }
    }

    /// An array is one line, named by its spec, with counts by state; the jobs around it
    /// keep their places, and the count line counts every element.
    #[test]
    fn an_array_folds_into_one_line() {
        let mut list = jobs();
        let others = list.jobs.split_off(1);
        list.jobs.extend(array(100, sweep_state));
        list.jobs.extend(others);
        insta::assert_snapshot!(render(&list, false, &clock()), @r"
        JOB             QUEUE  STATUS                               START       HYPERNODE  NODES         REASON
        train-64        -      placed 2/2                           14m59s ago  leaf-0     gpu-b[01-02]
        sweep[1-100%8]  cpu    12 running, 80 pending, 8 completed  13m19s ago  leaf-0     n[1-3]        the array sweep runs its limit of 8 elements (%8)
        big-256         -      pending                              -           -          -             no tier-1 HyperNode has 32 free GPUs; best is leaf-7 with 24
        huge            -      rejected                             -           -          -             needs 4096 GPUs; the cluster has 512

        1 placed, 81 pending, 1 rejected, 12 running, 8 completed
        ");
    }

    /// `--expand`: every element a row of its own; `--all`: the array's id beside its name.
    #[test]
    fn expand_lists_elements_and_ids_name_the_array() {
        let list = JobList {
            jobs: array(3, |i| if i == 1 { JobStatus::Failed } else { JobStatus::Pending }),
            next: None,
        };
        let expanded = Shown {
            expand: true,
            ..Shown::default()
        };
        insta::assert_snapshot!(render_shown(&list, expanded, &clock()), @r"
        JOB       QUEUE  STATUS   START       HYPERNODE  NODES  REASON
        sweep[1]  cpu    failed   13m19s ago  -          -
        sweep[2]  cpu    pending  -           -          -      the array sweep runs its limit of 8 elements (%8)
        sweep[3]  cpu    pending  -           -          -      the array sweep runs its limit of 8 elements (%8)

        0 placed, 2 pending, 0 rejected, 1 failed
        ");
        let ids = Shown {
            ids: true,
            ..Shown::default()
        };
        let table = render_shown(&with_ids(&list), ids, &clock());
        assert!(
            table.contains("sweep[1-100%8] (id 40)  cpu    2 pending, 1 failed  13m19s ago"),
            "{table}"
        );
    }

    /// 10,000 elements fold in one pass into one line.
    #[test]
    fn ten_thousand_elements_fold() {
        let list = JobList {
            jobs: array(10_000, |i| {
                if i % 10 == 0 {
                    JobStatus::Running
                } else {
                    JobStatus::Pending
                }
            }),
            next: None,
        };
        let lines = fold(&list.jobs, false);
        assert_eq!(lines.len(), 1);
        let Some(Line::Array(f)) = lines.first() else {
            panic!("one folded array")
        };
        assert_eq!(f.summary(), "1000 running, 9000 pending");
        assert_eq!(fold(&list.jobs, true).len(), 10_000);
    }

    #[test]
    fn no_jobs() {
        insta::assert_snapshot!(render(&JobList::default(), false, &clock()), @"no jobs: submit one with `hyperplan submit FILE`");
    }
}
