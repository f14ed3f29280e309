//! `hyperplan explain JOB`: the gradient search as the planner sees it now: the job's
//! status and reason, its queue, priority and reservation, what it still needs and under
//! which tier limit, and every HyperNode it looked at with the room there and why it was
//! or was not taken.

use hyperplan_net::messages::RequestCommand;
use hyperplan_shared::report::{JobReport, JobStatus};
use hyperplan_shared::status::Explanation;

use super::columns::columns;
use super::status::{priority, reservation};
use super::{Clock, Output, long_help, run_request};
use crate::client::ClientArgs;

const EXAMPLES: &str = "  hyperplan explain big-256
  hyperplan explain big-256 --output json | jq '.candidates[] | select(.room > 0)'";

/// Explain where a job is and why: the HyperNodes the gradient search considered.
///
/// First the job's status and reason and its queue; for a waiting job its priority (its
/// rank among the waiting jobs, 1 going first: queue priority first, then the score made
/// of the job's own priority and its fair-share, age and size factors, each 0 to 1) and,
/// when the planner holds a reservation for it (backfill), its expected start and the
/// HyperNode and nodes reserved. Then what it still needs (tasks to place for its gang
/// minimum) and the hard tier limit in force (networkTopology highestTierAllowed or
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
    run_request(&args.client, command, args.output, "explanation", |e| {
        render(e, &Clock::local())
    })
}

/// Status, reason, queue, priority and reservation, the need/limit header, then the
/// candidate table.
pub fn render(e: &Explanation, clock: &Clock) -> String {
    let mut out = format!("job {}: {}\n", e.job.name, status(&e.job));
    if let Some(reason) = &e.job.reason {
        out.push_str(&format!("reason: {reason}\n"));
    }
    if let Some(queue) = &e.job.queue {
        out.push_str(&format!("queue: {queue}\n"));
    }
    if let Some(p) = &e.job.priority {
        let (rank, factors) = priority(p);
        out.push_str(&format!("priority: {rank} ({factors})\n"));
    }
    if e.job.status == JobStatus::Pending
        && let Some(r) = &e.job.reservation
    {
        let (start, reserved) = reservation(r, clock);
        out.push_str(&format!("expected start: {start}; reserved: {reserved}\n"));
    }
    if let Some(p) = &e.preemption {
        out.push_str(&format!("preemption: {p}\n"));
    }
    if let Some(by) = &e.job.preempted_by {
        out.push_str(&format!("preempted by: {by}\n"));
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

    use hyperplan_shared::report::{PriorityReport, ReservationReport, TaskReport};
    use hyperplan_shared::status::Candidate;

    use super::*;

    fn clock() -> Clock {
        Clock {
            now: 1_748_787_180,
            utc_offset: |_| 0,
        }
    }

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
            preempted_by: None,
            preempting: None,
            array: None,
            steps: vec![],
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
            preemption: None,
            candidates: vec![
                candidate("leaf-0", 1, 0, false, "full: 0 of 4 tasks fit"),
                candidate("leaf-7", 1, 3, false, "too small: 3 of 4 tasks fit"),
                candidate("spine-0", 2, 3, false, "too small: 3 of 4 tasks fit"),
                candidate("spine-1", 2, 0, false, "no Ready node"),
            ],
        };
        insta::assert_snapshot!(render(&e, &clock()));
    }

    /// Issue 23: a waiting job's priority factors, expected start and reserved HyperNode.
    #[test]
    fn pending_job_with_a_reservation() {
        let mut j = job(
            JobStatus::Pending,
            Some("waiting for a reservation: spine-0 frees 32 nodes at its expected start"),
            &[None; 2],
            None,
        );
        j.queue = Some("gpu".into());
        j.priority = Some(PriorityReport {
            queue_priority: 10,
            score: 10_523.14,
            job: 0,
            fairshare: 0.953,
            age: 0.5204,
            size: 0.0,
            rank: 3,
            of: 41,
        });
        j.reservation = Some(ReservationReport {
            start: clock().now + 2 * 3600 + 13 * 60,
            hyper_node: Some("spine-0".into()),
            nodes: vec!["n017".into(), "n018".into()],
        });
        let e = Explanation {
            job: j,
            tier_limit: Some(2),
            need: 2,
            preemption: None,
            candidates: vec![candidate("spine-0", 2, 1, false, "too small: 1 of 2 tasks fit")],
        };
        insta::assert_snapshot!(render(&e, &clock()), @r"
        job big-32: pending
        reason: waiting for a reservation: spine-0 frees 32 nodes at its expected start
        queue: gpu
        priority: rank 3 of 41 waiting: queue priority 10, score 10523.1 (job priority 0, fair share 0.95, age 0.52, size 0.00)
        expected start: 2025-06-01 16:26:00 +0000 (in 2h13m); reserved: 2 nodes under spine-0: n[017-018]
        needs 2 more tasks; tier limit 2 (HyperNodes of tier 2 or lower)

        HYPERNODE  TIER  ROOM  VERDICT
        spine-0    2     1     too small: 1 of 2 tasks fit
        ");
    }

    #[test]
    fn placed_job() {
        let e = Explanation {
            job: job(JobStatus::Placed, None, &[Some("n1"), Some("n2")], Some("leaf-3")),
            tier_limit: None,
            need: 0,
            preemption: None,
            candidates: vec![
                candidate("leaf-3", 1, 2, true, "taken: lowest tier that fits, best score"),
                candidate("leaf-4", 1, 2, false, "fits, lower score (more fragmentation)"),
            ],
        };
        insta::assert_snapshot!(render(&e, &clock()));
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
            preemption: None,
            candidates: vec![],
        };
        insta::assert_snapshot!(render(&e, &clock()), @r"
        job big-32: rejected
        reason: needs 4096 GPUs; the cluster has 512
        needs 1 more task; tier limit 1 (HyperNodes of tier 1 or lower)

        no HyperNode within the tier limit
        ");
    }
}
