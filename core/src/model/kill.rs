//! [`KillReason`]: why the core kills a task. Its own room in the vocabulary: a command
//! carries it (`commands`) and a job's durable state keeps the last one sent
//! (`jobstate`), which may not import `commands` (commands carry records, records carry
//! job states: that was an import circle).

/// Why the core kills a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum KillReason {
    /// `hyperplan cancel`.
    Cancel,
    /// Another task of its job failed (`onTaskFailure: killJob`, the default).
    TaskFailed,
    /// Another task of its job hit the time limit.
    Timeout,
    /// Its node reports a task the planner does not have running there (an orphan: its
    /// job ended, it was declared lost, or the planner never placed it).
    Orphan,
    /// Its job's batch command (`launch: batch`, rank 0) ended: the job ends with it.
    BatchEnded,
    /// Its job is preempted for a job of higher priority (or reclaimed).
    Preempted,
    /// Its node was drained with `--now` (`hyperplan nodes drain --now`).
    Drained,
}

impl KillReason {
    /// The reason in words, for the driver's log line.
    pub fn as_str(self) -> &'static str {
        match self {
            KillReason::Cancel => "cancelled",
            KillReason::TaskFailed => "another task of the job failed",
            KillReason::Timeout => "the job's time limit",
            KillReason::Orphan => "orphan: the planner does not have it running there",
            KillReason::BatchEnded => "the job's batch command ended",
            KillReason::Preempted => "preempted",
            KillReason::Drained => "its node was drained with --now",
        }
    }
}
