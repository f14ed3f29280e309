//! `hyperplan explain JOB`: the gradient search as the planner sees it now: the job's
//! status and reason, what it still needs and under which tier limit, and every
//! HyperNode it looked at with the room there and why it was or was not taken.

use hyperplan_net::messages::RequestCommand;
use hyperplan_shared::report::{JobReport, JobStatus};
use hyperplan_shared::status::Explanation;

use super::columns::columns;
use super::{Output, long_help, run_request};
use crate::client::ClientArgs;

const EXAMPLES: &str = "  hyperplan explain big-256
  hyperplan explain big-256 --output json | jq '.candidates[] | select(.room > 0)'";

/// Explain where a job is and why: the HyperNodes the gradient search considered.
///
/// First the job's status and reason, then what it still needs (tasks to place for its
/// gang minimum) and the hard tier limit in force (networkTopology highestTierAllowed or
/// highestTierName). Then one row per HyperNode within the limit, lowest tier first:
/// ROOM is how many of the job's pending tasks fit there now, VERDICT why it was or was
/// not taken; `*` marks the HyperNode holding the job's current placement.
#[derive(clap::Args, Debug)]
#[command(after_long_help = long_help(EXAMPLES))]
pub struct Args {
    /// The job's name (see `hyperplan status`).
    #[arg(value_name = "JOB")]
    job: String,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    client: ClientArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let command = RequestCommand::Explain { job: args.job };
    run_request(&args.client, command, args.output, "explanation", render)
}

/// Status, reason, the need/limit header, then the candidate table.
pub fn render(e: &Explanation) -> String {
    let mut out = format!("job {}: {}\n", e.job.name, status(&e.job));
    if let Some(reason) = &e.job.reason {
        out.push_str(&format!("reason: {reason}\n"));
    }
    let limit = match e.tier_limit {
        Some(tier) => format!("tier limit {tier} (HyperNodes of tier {tier} or lower)"),
        None => "no tier limit".into(),
    };
    let tasks = if e.need == 1 { "task" } else { "tasks" };
    out.push_str(&format!("needs {} more {tasks}; {limit}\n\n", e.need));
    if e.candidates.is_empty() {
        out.push_str("no HyperNode within the tier limit\n");
        return out;
    }
    let mut rows: Vec<[String; 4]> = vec![["HYPERNODE".into(), "TIER".into(), "ROOM".into(), "VERDICT".into()]];
    for c in &e.candidates {
        let mark = if c.holds_job { "*" } else { "" };
        rows.push([
            format!("{}{mark}", c.name),
            c.tier.to_string(),
            c.room.to_string(),
            c.verdict.clone(),
        ]);
    }
    out.push_str(&columns(&rows));
    if e.candidates.iter().any(|c| c.holds_job) {
        out.push_str("* holds the job's current placement\n");
    }
    out
}

/// `placed 8/8 tasks under leaf-0`, `running 8/8 tasks …`, `pending`, `failed (exit code 3)`.
fn status(job: &JobReport) -> String {
    match job.status {
        JobStatus::Placed | JobStatus::Running => {
            let placed = job.tasks.iter().filter(|t| t.node.is_some()).count();
            let under = job
                .allocated_hyper_node
                .as_deref()
                .map(|h| format!(" under {h}"))
                .unwrap_or_default();
            format!("{} {placed}/{} tasks{under}", job.status.as_str(), job.tasks.len())
        }
        JobStatus::Failed => match job.exit_code {
            Some(c) => format!("failed (exit code {c})"),
            None => "failed".into(),
        },
        other => other.as_str().into(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use hyperplan_shared::report::TaskReport;
    use hyperplan_shared::status::Candidate;

    use super::*;

    fn job(status: JobStatus, reason: Option<&str>, nodes: &[Option<&str>], under: Option<&str>) -> JobReport {
        JobReport {
            id: 1,
            name: "big-32".into(),
            status,
            reason: reason.map(Into::into),
            submit_time: 0,
            start_time: None,
            end_time: None,
            allocated_hyper_node: under.map(Into::into),
            owner: None,
            exit_code: None,
            tasks: nodes
                .iter()
                .enumerate()
                .map(|(i, n)| TaskReport {
                    name: format!("w-{i}"),
                    rank: None,
                    sub_job: "w".into(),
                    node: n.map(Into::into),
                    hyper_nodes: vec![],
                    ..TaskReport::default()
                })
                .collect(),
            reservation: None,
            queue: None,
            priority: None,
        }
    }

    fn candidate(name: &str, tier: u32, room: u64, holds_job: bool, verdict: &str) -> Candidate {
        Candidate {
            name: name.into(),
            tier,
            room,
            holds_job,
            verdict: verdict.into(),
        }
    }

    #[test]
    fn pending_job() {
        let e = Explanation {
            job: job(
                JobStatus::Pending,
                Some("no tier-1 HyperNode has 32 free GPUs; best is leaf-7 with 24"),
                &[None; 4],
                None,
            ),
            tier_limit: Some(2),
            need: 4,
            candidates: vec![
                candidate("leaf-0", 1, 0, false, "full: 0 of 4 tasks fit"),
                candidate("leaf-7", 1, 3, false, "too small: 3 of 4 tasks fit"),
                candidate("spine-0", 2, 3, false, "too small: 3 of 4 tasks fit"),
                candidate("spine-1", 2, 0, false, "no Ready node"),
            ],
        };
        insta::assert_snapshot!(render(&e));
    }

    #[test]
    fn placed_job() {
        let e = Explanation {
            job: job(JobStatus::Placed, None, &[Some("n1"), Some("n2")], Some("leaf-3")),
            tier_limit: None,
            need: 0,
            candidates: vec![
                candidate("leaf-3", 1, 2, true, "taken: lowest tier that fits, best score"),
                candidate("leaf-4", 1, 2, false, "fits, lower score (more fragmentation)"),
            ],
        };
        insta::assert_snapshot!(render(&e));
    }

    #[test]
    fn no_candidates() {
        let e = Explanation {
            job: job(
                JobStatus::Rejected,
                Some("needs 4096 GPUs; the cluster has 512"),
                &[None],
                None,
            ),
            tier_limit: Some(1),
            need: 1,
            candidates: vec![],
        };
        insta::assert_snapshot!(render(&e), @r"
        job big-32: rejected
        reason: needs 4096 GPUs; the cluster has 512
        needs 1 more task; tier limit 1 (HyperNodes of tier 1 or lower)

        no HyperNode within the tier limit
        ");
    }
}
