//! What a task's agent reported of its run: pid, start, its end with its figures, and the
//! use last sampled. A component of its own, inserted on the first report, so placing a
//! task (the hot path) spawns nothing more and the simulator's tasks never have one;
//! changing it does not count as a `TaskState` change (which the resource cache follows).

use bevy_ecs::prelude::*;
use hyperplan_shared::report::TaskStatus;
use hyperplan_shared::taskend::{TaskEnd, TaskOutcome};

use crate::model::components::{TaskPhase, TaskState};

/// What a task's agent reported of its run; a field is `None` until reported.
#[derive(Component, Clone, Debug, Default, PartialEq)]
pub struct TaskRun {
    /// On its node (from `TaskStarted`, a heartbeat's task list or its end).
    pub pid: Option<u32>,
    /// Unix milliseconds.
    pub start_ms: Option<u64>,
    /// How it ended, as reported (or as the core declared it: lost).
    pub end: Option<TaskEnd>,
    /// CPU use (cores) and resident memory its agent last sampled, while it runs.
    pub cpu_cores: Option<f32>,
    /// Resident memory (bytes), sampled with `cpu_cores`.
    pub rss_bytes: Option<u64>,
    /// When its node's agent last listed it as running (the driver's clock, ms); a
    /// started task its agent stops listing is lost after `nodeLostAfter`.
    pub seen_ms: Option<u64>,
}

impl TaskRun {
    /// It is known to have started: a start time or a pid was reported.
    pub fn started(&self) -> bool {
        self.start_ms.is_some() || self.pid.is_some()
    }

    /// Its agent has it: it reported a start, or listed the task (perhaps while still
    /// starting it). Such a task needs no second `Launch`, and is lost when no longer
    /// listed.
    pub fn accepted(&self) -> bool {
        self.started() || self.seen_ms.is_some()
    }
}

/// The task's state for people: pending until placed, starting until its start is
/// reported, running until its end is, then how it ended.
pub fn task_status(ts: &TaskState, run: Option<&TaskRun>) -> TaskStatus {
    match ts.phase {
        TaskPhase::Pending => TaskStatus::Pending,
        TaskPhase::Running if run.is_some_and(TaskRun::started) => TaskStatus::Running,
        TaskPhase::Running => TaskStatus::Starting,
        TaskPhase::Finished => match run.and_then(|r| r.end.as_ref()).map(|e| e.outcome) {
            Some(TaskOutcome::Cancelled | TaskOutcome::Timeout) => TaskStatus::Killed,
            Some(TaskOutcome::Lost) => TaskStatus::Lost,
            // Ended by itself, or stopped at once on a node without an agent.
            Some(TaskOutcome::Exited | TaskOutcome::Signaled | TaskOutcome::Failed) | None => TaskStatus::Exited,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(phase: TaskPhase) -> TaskState {
        TaskState {
            phase,
            ..TaskState::pending()
        }
    }

    fn ended(outcome: TaskOutcome) -> TaskRun {
        TaskRun {
            end: Some(TaskEnd {
                outcome,
                ..TaskEnd::default()
            }),
            ..TaskRun::default()
        }
    }

    #[test]
    fn task_states_follow_the_reports() {
        assert_eq!(task_status(&state(TaskPhase::Pending), None), TaskStatus::Pending);
        assert_eq!(task_status(&state(TaskPhase::Running), None), TaskStatus::Starting);
        let sampled = TaskRun {
            cpu_cores: Some(1.0),
            ..TaskRun::default()
        };
        assert_eq!(
            task_status(&state(TaskPhase::Running), Some(&sampled)),
            TaskStatus::Starting
        );
        let started = TaskRun {
            pid: Some(7),
            start_ms: Some(1),
            ..TaskRun::default()
        };
        assert_eq!(
            task_status(&state(TaskPhase::Running), Some(&started)),
            TaskStatus::Running
        );
        let done = state(TaskPhase::Finished);
        for (outcome, want) in [
            (TaskOutcome::Exited, TaskStatus::Exited),
            (TaskOutcome::Signaled, TaskStatus::Exited),
            (TaskOutcome::Failed, TaskStatus::Exited),
            (TaskOutcome::Cancelled, TaskStatus::Killed),
            (TaskOutcome::Timeout, TaskStatus::Killed),
            (TaskOutcome::Lost, TaskStatus::Lost),
        ] {
            assert_eq!(task_status(&done, Some(&ended(outcome))), want, "{outcome:?}");
        }
        assert_eq!(task_status(&done, None), TaskStatus::Exited);
    }
}
