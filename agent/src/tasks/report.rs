//! What the planner is told about a task, and until when: `TaskStarted` until an
//! `Ack { finished: false }` (or the end's ack), `TaskFinished` until an
//! `Ack { finished: true }`. An exit record becomes the protocol's [`TaskEnd`].

use hyperplan_net::messages::{AgentMessage, TaskFinished, TaskRef, TaskStarted};
use hyperplan_shared::taskend::{TaskEnd, TaskOutcome};

use crate::shepherd::{ExitRecord, Outcome, Started};

/// The protocol's view of an exit record.
pub fn task_end(record: &ExitRecord) -> TaskEnd {
    TaskEnd {
        outcome: match record.outcome {
            Outcome::Exited => TaskOutcome::Exited,
            Outcome::Signaled => TaskOutcome::Signaled,
            Outcome::Timeout => TaskOutcome::Timeout,
            Outcome::Cancelled => TaskOutcome::Cancelled,
            // The planner gives it up as lost (it has, or will have, by the time this arrives).
            Outcome::Fenced => TaskOutcome::Lost,
            Outcome::Failed => TaskOutcome::Failed,
        },
        exit_code: record.exit_code,
        signal: record.signal,
        pid: record.pid,
        // A task that never ran has no start.
        start_time_ms: record.pid.map(|_| record.start_time_ms),
        end_time_ms: record.end_time_ms,
        cpu_seconds: if record.cpu_seconds.is_finite() && record.cpu_seconds >= 0.0 {
            record.cpu_seconds
        } else {
            0.0
        },
        max_rss_bytes: record.max_rss_bytes,
        oom_killed: record.oom_killed,
        reason: match record.outcome {
            Outcome::Fenced => Some(FENCED.to_string()),
            _ => record.reason.clone(),
        },
    }
}

/// What a fenced task's end says.
const FENCED: &str = "fenced: its node had not heard the planner for as long as it takes to declare a node \
     lost, so it stopped the task before the planner started it again elsewhere";

pub fn started_message(task: &TaskRef, started: &Started) -> AgentMessage {
    AgentMessage::TaskStarted(TaskStarted {
        task: task.clone(),
        pid: started.pid,
        start_time_ms: started.start_time_ms,
    })
}

pub fn finished_message(task: &TaskRef, end: TaskEnd) -> AgentMessage {
    AgentMessage::TaskFinished(Box::new(TaskFinished {
        task: task.clone(),
        end,
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn record(outcome: Outcome) -> ExitRecord {
        ExitRecord {
            job: "j".into(),
            job_id: 4.into(),
            task: "w-0".into(),
            rank: 0,
            shepherd_pid: 10,
            pid: Some(11),
            outcome,
            exit_code: Some(3),
            signal: None,
            signal_name: None,
            start_time_ms: 100,
            end_time_ms: 200,
            cpu_seconds: 1.5,
            max_rss_bytes: 4096,
            oom_killed: false,
            reason: None,
        }
    }

    #[test]
    fn records_map_to_task_ends() {
        let end = task_end(&record(Outcome::Exited));
        assert_eq!(end.outcome, TaskOutcome::Exited);
        assert_eq!(
            (end.exit_code, end.pid, end.start_time_ms),
            (Some(3), Some(11), Some(100))
        );
        assert_eq!((end.end_time_ms, end.max_rss_bytes), (200, 4096));
        let mut failed = record(Outcome::Failed);
        failed.pid = None;
        failed.exit_code = None;
        failed.cpu_seconds = f64::NAN;
        failed.reason = Some("user \"x\" is unknown on this node".into());
        let end = task_end(&failed);
        assert_eq!(end.outcome, TaskOutcome::Failed);
        assert_eq!((end.start_time_ms, end.cpu_seconds), (None, 0.0));
        assert!(end.reason.unwrap().contains("unknown"));
        for (o, t) in [
            (Outcome::Signaled, TaskOutcome::Signaled),
            (Outcome::Timeout, TaskOutcome::Timeout),
            (Outcome::Cancelled, TaskOutcome::Cancelled),
        ] {
            assert_eq!(task_end(&record(o)).outcome, t);
        }
    }
}
