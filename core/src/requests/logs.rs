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
    pub job_id: hyperplan_shared::ids::JobId,
    /// `<task name>-<replica>`.
    pub task: String,
    /// Its place in the job.
    pub index: u32,
    /// The node whose agent reads it.
    pub node: String,
    /// The task has ended: what was read is all there will be.
    pub ended: bool,
    /// A step's output (`hyperplan logs JOB.STEP`) rather than the task's.
    pub step: Option<u32>,
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
    /// `JOB.STEP` of a job that has no such step (or no longer keeps it).
    #[error("job {job} has no step {step} (its steps: {steps})")]
    NoSuchStep {
        /// The job's name.
        job: String,
        /// The step asked for.
        step: u32,
        /// The steps it has.
        steps: String,
    },
    /// A step that did not run on the node asked for.
    #[error("step {job}.{step} did not run on node {node} (it ran on {nodes})")]
    StepNotOnNode {
        /// The job's name.
        job: String,
        /// The step.
        step: u32,
        /// The node asked for.
        node: String,
        /// Where it ran.
        nodes: String,
    },
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
    pub fn authorize_logs(
        &self,
        job: &str,
        task: Option<&str>,
        node: Option<&str>,
        caller: Caller<'_>,
    ) -> Result<LogTarget, LogsError> {
        // `JOB.STEP` (when no job has that very name): a step's output.
        if !self.sees_job(job, caller)
            && let Some((name, step)) = job.rsplit_once('.')
            && let Ok(step) = step.parse::<u32>()
            && self.sees_job(name, caller)
        {
            return self.authorize_step_logs(name, step, node, caller);
        }
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
            job_id: report.id.into(),
            task: t.name.clone(),
            index: index as u32,
            node,
            ended: t
                .state
                .is_some_and(|s| matches!(s, TaskStatus::Exited | TaskStatus::Killed | TaskStatus::Lost)),
            step: None,
        })
    }

    /// Step `step` of `job` on `node` (default: the first it ran on).
    fn authorize_step_logs(
        &self,
        job: &str,
        step: u32,
        node: Option<&str>,
        caller: Caller<'_>,
    ) -> Result<LogTarget, LogsError> {
        let owner = self.owner_of(job).map(str::to_string);
        if !caller.admin && owner.as_deref() != Some(caller.user) {
            return Err(LogsError::NotOwner {
                job: job.to_string(),
                owner: owner.unwrap_or_else(|| "nobody".into()),
            });
        }
        let report = self.job(job).ok_or_else(|| LogsError::NoSuchJob(job.to_string()))?;
        let world = self.world();
        let steps = world
            .resource::<crate::names::JobNames>()
            .0
            .get(job)
            .and_then(|&e| world.get::<crate::model::components::JobState>(e))
            .map(|st| st.steps.clone())
            .unwrap_or_default();
        let Some(record) = steps.iter().find(|s| s.step == step) else {
            let list: Vec<String> = steps.iter().map(|s| s.step.to_string()).collect();
            return Err(LogsError::NoSuchStep {
                job: job.to_string(),
                step,
                steps: if list.is_empty() { "none".into() } else { list.join(",") },
            });
        };
        let node = match node {
            None => record.nodes.first().cloned().unwrap_or_default(),
            Some(n) if record.nodes.iter().any(|m| m == n) => n.to_string(),
            Some(n) => {
                return Err(LogsError::StepNotOnNode {
                    job: job.to_string(),
                    step,
                    node: n.to_string(),
                    nodes: record.nodes.join(","),
                });
            }
        };
        let live = matches!(
            report.status,
            hyperplan_shared::report::JobStatus::Running | hyperplan_shared::report::JobStatus::Placed
        );
        Ok(LogTarget {
            job: job.to_string(),
            job_id: report.id.into(),
            task: format!("{job}.{step}"),
            index: 0,
            node,
            ended: !live,
            step: Some(step),
        })
    }
}
