//! The report of a job the planner has only as a stored record (one that ended before
//! the planner last started): `hyperplan status --all` and `--since` show these next to
//! the jobs in the world. Without the node's hardware at hand, NUMA pinning is not shown.

use hyperplan_shared::report::{JobReport, TaskReport};

use crate::jobs::lifecycle::job_status;
use crate::model::components::{JobState, TaskPhase, TaskState};
use crate::model::record::{JobRecord, StateRecord};
use crate::model::taskrun::{TaskRun, task_status};

/// The report of a job from its stored record alone (no NUMA pinning, no use samples).
pub fn stored_report(rec: &JobRecord) -> JobReport {
    JobReport {
        tasks: stored_tasks(rec, 0).collect(),
        ..stored_head(rec)
    }
}

/// The task reports of a stored job from its task `from`, made as they are taken.
pub(crate) fn stored_tasks(rec: &JobRecord, from: usize) -> impl Iterator<Item = TaskReport> + '_ {
    let tracked = rec
        .tasks
        .iter()
        .any(|t| t.node.is_some() || t.pid.is_some() || t.end.is_some());
    // The record's tasks are in the job's order (spec order, then replica): each one's
    // role by its place, never by its name.
    let roles = rec
        .spec
        .tasks
        .iter()
        .enumerate()
        .flat_map(|(r, t)| std::iter::repeat_n(r, t.replicas as usize));
    rec.tasks.iter().zip(roles).skip(from).map(move |(t, role)| {
        let placed = t.phase != TaskPhase::Pending;
        let ts = TaskState {
            phase: t.phase,
            ..TaskState::pending()
        };
        let run = TaskRun {
            pid: t.pid,
            start_ms: t.start_ms,
            end: t.end.clone(),
            ..TaskRun::default()
        };
        let end = t.end.as_ref();
        TaskReport {
            name: t.name.clone(),
            rank: t.rank.filter(|_| placed),
            node: t.node.clone().filter(|_| placed),
            state: tracked.then(|| task_status(&ts, Some(&run))),
            exit_code: end.and_then(|e| e.exit_code),
            signal: end.and_then(|e| e.signal),
            pid: t.pid,
            start_time: t.start_ms,
            end_time: end.map(|e| e.end_time_ms),
            cpu_seconds: end.map(|e| e.cpu_seconds),
            max_rss_bytes: end.map(|e| e.max_rss_bytes),
            reason: end.and_then(|e| e.reason.clone()),
            working_dir: rec.spec.working_dir(role),
            ..TaskReport::default()
        }
    })
}

/// A stored job's report without its tasks.
pub(crate) fn stored_head(rec: &JobRecord) -> JobReport {
    let s = &rec.state;
    let st = JobState::from_stored(StateRecord {
        phase: s.phase,
        verdict: s.verdict,
        task_started: s.task_started,
        requeue: s.requeue.clone(),
        ..StateRecord::new()
    });
    JobReport {
        id: rec.id,
        name: rec.spec.name.clone(),
        status: job_status(&st),
        reason: s.reason.as_ref().map(ToString::to_string),
        submit_time: rec.spec.submit_time,
        start_time: s.start_time,
        end_time: s.end_time,
        allocated_hyper_node: s.allocated_hyper_node.clone(),
        owner: Some(rec.owner.clone()),
        exit_code: s.exit_code,
        tasks: Vec::new(),
        reservation: None,
        queue: Some(
            rec.spec
                .queue
                .clone()
                .unwrap_or_else(|| crate::config::DEFAULT_QUEUE.to_string()),
        ),
        priority: None,
        preempted_by: s.preempted_by.clone(),
        preempting: None,
        array: rec.spec.element.clone(),
        steps: s.steps.iter().map(|st| st.report()).collect(),
    }
}
