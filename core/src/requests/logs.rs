//! `hyperplan logs`: which task's output a person may read and which node's agent has
//! it. Only the job's owner or an admin may; under `privateData` another user's job is
//! one that does not exist. Without a task named, rank 0 (the lowest rank placed).

use hyperplan_shared::report::TaskStatus;

use crate::Planner;
use crate::caller::Caller;

/// The task whose output to read, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogTarget {
    /// The job's name.
    pub job: String,
    /// The job's id.
    pub job_id: u64,
    /// `<task name>-<replica>`.
    pub task: String,
    /// Its place in the job.
    pub index: u32,
    /// The node whose agent reads it.
    pub node: String,
    /// The task has ended: what was read is all there will be.
    pub ended: bool,
}

/// Why a person may not read a task's output (the texts are what they see).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogsError {
    /// No job of that name, or one the caller may not see (`privateData`).
    #[error("no job named {0:?}")]
    NoSuchJob(String),
    /// Another user's job, and the caller is no admin.
    #[error("job {job} belongs to {owner}; only its owner or an admin may read its output")]
    NotOwner {
        /// The job's name.
        job: String,
        /// Who submitted it.
        owner: String,
    },
    /// The job has no task of that name.
    #[error("job {job} has no task {task:?} (see `hyperplan status {job}`)")]
    NoSuchTask {
        /// The job's name.
        job: String,
        /// The task name asked for.
        task: String,
    },
    /// No task named, and none of the job's is placed.
    #[error("job {0} has no task placed yet: no output")]
    NothingPlaced(String),
    /// The task named is not placed.
    #[error("task {job}/{task} is not placed yet: no output")]
    NotPlaced {
        /// The job's name.
        job: String,
        /// `<task name>-<replica>`.
        task: String,
    },
}

impl Planner {
    /// Whose output `caller` reads with `hyperplan logs JOB [TASK]`: the task, its node,
    /// and whether it has ended.
    pub fn authorize_logs(&self, job: &str, task: Option<&str>, caller: Caller<'_>) -> Result<LogTarget, LogsError> {
        let missing = || LogsError::NoSuchJob(job.to_string());
        // Under privateData another user's job is answered as a missing one.
        if !self.sees_job(job, caller) {
            return Err(missing());
        }
        let owner = self.owner_of(job).map(str::to_string);
        let report = self.job(job).ok_or_else(missing)?;
        if !caller.admin && owner.as_deref() != Some(caller.user) {
            return Err(LogsError::NotOwner {
                job: job.to_string(),
                owner: owner.unwrap_or_else(|| "nobody".into()),
            });
        }
        // A report lists the job's tasks in their order: a task's place is its index.
        let (index, t) = match task {
            Some(name) => report
                .tasks
                .iter()
                .enumerate()
                .find(|(_, t)| t.name == name)
                .ok_or_else(|| LogsError::NoSuchTask {
                    job: job.to_string(),
                    task: name.to_string(),
                })?,
            None => report
                .tasks
                .iter()
                .enumerate()
                .filter(|(_, t)| t.rank.is_some())
                .min_by_key(|(_, t)| t.rank)
                .ok_or_else(|| LogsError::NothingPlaced(job.to_string()))?,
        };
        let node = t.node.clone().ok_or_else(|| LogsError::NotPlaced {
            job: job.to_string(),
            task: t.name.clone(),
        })?;
        Ok(LogTarget {
            job: job.to_string(),
            job_id: report.id,
            task: t.name.clone(),
            index: index as u32,
            node,
            ended: t
                .state
                .is_some_and(|s| matches!(s, TaskStatus::Exited | TaskStatus::Killed | TaskStatus::Lost)),
        })
    }
}
