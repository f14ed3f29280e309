//! `hyperplan status [JOB]`: where jobs are, in the simulator's own job table (the same
//! job objects `hyperplan simulate` prints).

use hyperplan_core::sim::{render_table, render_task_table};
use hyperplan_net::messages::RequestCommand;
use hyperplan_shared::MEMORY;
use hyperplan_shared::quantity::format_quantity;
use hyperplan_shared::report::{JobStatus, Report, Summary};
use hyperplan_shared::status::JobList;

use super::{Output, long_help, run_request};
use crate::client::ClientArgs;

const EXAMPLES: &str = "  hyperplan status
  hyperplan status train-64
  hyperplan status --all train-64
  hyperplan status --since 2h
  hyperplan status --output json | jq '.jobs[] | select(.status == \"pending\") | .reason'";

/// Show jobs: status, HyperNode, nodes and, for pending jobs, why they wait.
///
/// Without JOB, the newest job of every name; with JOB, the newest job of that name and then one row per task:
/// rank, node, and its pinning (CPUs, NUMA nodes, memory per NUMA node, GPUs, NICs). The
/// table and the JSON are those of `hyperplan simulate`: `{"jobs": [...]}` with the same
/// job objects, each with the `id` the planner gave it at submit. A name is unique among
/// jobs that have not ended; once a job ended (finished, cancelled, rejected) its name may
/// be used again, and `--all` shows every job of the name(s), each with its id, the ended
/// ones the planner keeps on disk included ([store] keepFinished, 7 days by default);
/// `--since 2h` shows the jobs that have not ended and those that ended in the last 2 hours.
/// `hyperplan explain JOB` says why a job is where it is.
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
    #[arg(long, value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    client: ClientArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let all = args.all || args.since.is_some();
    let one = args.job.is_some() && !all;
    let command = RequestCommand::Status {
        job: args.job,
        all: args.all,
        since_secs: args.since,
    };
    run_request(&args.client, command, args.output, "job list", |list: &JobList| {
        if all {
            render(&with_ids(list), one)
        } else {
            render(list, one)
        }
    })
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

/// The job table and a count line; with `tasks`, the task table after it.
pub fn render(list: &JobList, tasks: bool) -> String {
    if list.jobs.is_empty() {
        return "no jobs: submit one with `hyperplan submit FILE`\n".into();
    }
    let count = |status: JobStatus| {
        let n = list.jobs.iter().filter(|j| j.status == status).count();
        u32::try_from(n).unwrap_or(u32::MAX)
    };
    let summary = Summary {
        placed: count(JobStatus::Placed),
        pending: count(JobStatus::Pending),
        rejected: count(JobStatus::Rejected),
        makespan: 0,
    };
    // The simulator's count line ends in its virtual makespan, which a live planner has
    // not got; and a live planner's jobs run and end: count every status there is.
    let simulated = format!(
        "{} placed, {} pending, {} rejected; makespan 0 s\n",
        summary.placed, summary.pending, summary.rejected
    );
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
    let live = format!("{}\n", counts.join(", "));
    let report = Report {
        jobs: list.jobs.clone(),
        summary,
        warnings: Vec::new(),
    };
    let mut out = render_table(&report);
    if out.ends_with(&simulated) {
        out.truncate(out.len() - simulated.len());
        out.push_str(&live);
    }
    if tasks {
        out.push('\n');
        out.push_str(&render_task_table(&report));
        out.push_str(&render_runs(&list.jobs));
    }
    out
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

    use hyperplan_shared::report::{JobReport, TaskReport};

    use super::*;

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
                },
            ],
        }
    }

    #[test]
    fn all_jobs() {
        insta::assert_snapshot!(render(&jobs(), false));
    }

    #[test]
    fn one_job_with_its_tasks() {
        let mut list = jobs();
        list.jobs.truncate(1);
        insta::assert_snapshot!(render(&list, true));
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
        insta::assert_snapshot!(render(&list, true));
    }

    #[test]
    fn no_jobs() {
        insta::assert_snapshot!(render(&JobList::default(), false), @"no jobs: submit one with `hyperplan submit FILE`");
    }
}
