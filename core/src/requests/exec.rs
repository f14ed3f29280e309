//! `hyperplan exec`: who may run a command inside a running job's allocation, and where.
//! A person may when they own the job or are an admin (under `privateData` another
//! user's job is one that does not exist); a task of the job may with the job's
//! credential (what `mpirun` in a batch script does through its node's agent), only
//! while the job runs. On each node the command joins the job's lowest rank there (a
//! batch job's node leader, which holds the job's CPUs on that node).

use hyperplan_shared::report::{JobStatus, TaskStatus};

use crate::Planner;
use crate::caller::Caller;
use crate::model::components::{Job, JobId, JobState};
use crate::model::jobstate::{StepEnd, StepRecord, step_command};
use crate::names::JobNames;

/// Which nodes an exec asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecWhere<'a> {
    /// Rank 0's node.
    Rank0,
    /// This node, which must hold a running task of the job.
    Node(&'a str),
    /// Every node of the job.
    All,
}

/// Who asks.
#[derive(Debug, Clone, Copy)]
pub enum ExecWho<'a> {
    /// A person, by their certificate.
    Person(Caller<'a>),
    /// A task of the job, by the credential it was given.
    Credential(&'a str),
}

/// One node the command runs on: the task whose allocation it joins there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecPlace {
    /// The node's name.
    pub node: String,
    /// The task whose allocation the command joins (`<task name>-<replica>`).
    pub task: String,
    /// Its place in the job.
    pub index: u32,
}

/// Where an exec runs, and as whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecTarget {
    /// The job's name.
    pub job: String,
    /// The job's id.
    pub job_id: hyperplan_shared::ids::JobId,
    /// The job's owner: the command runs as this user.
    pub user: String,
    /// Its nodes, by their lowest rank.
    pub places: Vec<ExecPlace>,
}

/// Why an exec is refused (the texts are what the person sees).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// No job of that name, or one the person may not see (`privateData`).
    #[error("no job named {0:?}")]
    NoSuchJob(String),
    /// Another user's job, and the person is no admin.
    #[error("job {job} belongs to {owner}; only its owner or an admin may run commands in it")]
    NotOwner {
        /// The job's name.
        job: String,
        /// Who submitted it.
        owner: String,
    },
    /// A credential that is not the job's.
    #[error("the credential is not job {0}'s (it is valid only for the job it was given to, while it runs)")]
    BadCredential(String),
    /// The job does not run (pending, or ended).
    #[error("job {job} is {status}, not running: commands run only inside a running job")]
    NotRunning {
        /// The job's name.
        job: String,
        /// Its status.
        status: String,
    },
    /// A node the job holds nothing on.
    #[error("node {node} holds no task of job {job} (its nodes: {nodes})")]
    NotItsNode {
        /// The job's name.
        job: String,
        /// The node asked for.
        node: String,
        /// The job's nodes.
        nodes: String,
    },
}

impl Planner {
    /// Where `who` may run a command in `job`, or why not.
    pub fn authorize_exec(&self, job: &str, nodes: ExecWhere<'_>, who: ExecWho<'_>) -> Result<ExecTarget, ExecError> {
        let missing = || ExecError::NoSuchJob(job.to_string());
        let world = self.world();
        let entity = world.resource::<JobNames>().0.get(job).copied().ok_or_else(missing)?;
        match who {
            ExecWho::Person(caller) => {
                if !self.sees_job(job, caller) {
                    return Err(missing());
                }
                let owner = self.owner_of(job).map(str::to_string);
                if !caller.admin && owner.as_deref() != Some(caller.user) {
                    return Err(ExecError::NotOwner {
                        job: job.to_string(),
                        owner: owner.unwrap_or_else(|| "nobody".into()),
                    });
                }
            }
            ExecWho::Credential(given) => {
                let theirs = world.get::<Job>(entity).and_then(|j| j.spec.credential.as_deref());
                if !theirs.is_some_and(|c| same(c.as_bytes(), given.as_bytes())) {
                    return Err(ExecError::BadCredential(job.to_string()));
                }
            }
        }
        let report = self.job(job).ok_or_else(missing)?;
        // Placed: its tasks are starting (a batch script may ask before the planner has
        // heard that its own task started).
        if !matches!(report.status, JobStatus::Running | JobStatus::Placed) {
            return Err(ExecError::NotRunning {
                job: job.to_string(),
                status: report.status.as_str().to_string(),
            });
        }
        // The running tasks by rank; per node its lowest rank.
        let mut running: Vec<(u32, String, String, u32)> = report
            .tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| matches!(t.state, Some(TaskStatus::Running | TaskStatus::Starting)))
            .filter_map(|(i, t)| Some((t.rank?, t.node.clone()?, t.name.clone(), i as u32)))
            .collect();
        running.sort();
        let mut places: Vec<ExecPlace> = Vec::new();
        for (_, node, task, index) in running {
            if !places.iter().any(|p| p.node == node) {
                places.push(ExecPlace { node, task, index });
            }
        }
        let places = match nodes {
            ExecWhere::All => places,
            ExecWhere::Rank0 => places.into_iter().take(1).collect(),
            ExecWhere::Node(node) => match places.iter().position(|p| p.node == node) {
                Some(i) => vec![places.swap_remove(i)],
                None => {
                    return Err(ExecError::NotItsNode {
                        job: job.to_string(),
                        node: node.to_string(),
                        nodes: places.iter().map(|p| p.node.as_str()).collect::<Vec<_>>().join(","),
                    });
                }
            },
        };
        if places.is_empty() {
            return Err(ExecError::NotRunning {
                job: job.to_string(),
                status: "without a running task".into(),
            });
        }
        Ok(ExecTarget {
            job: job.to_string(),
            job_id: report.id.into(),
            user: self.owner_of(job).unwrap_or_default().to_string(),
            places,
        })
    }
}

impl Planner {
    /// Numbers a step of `job` (id `job_id`) that runs `argv` on `nodes`, begun at
    /// `now_s` (Unix seconds, the driver's clock): the next after its last. Kept in the
    /// job's record (`hyperplan logs JOB.STEP`, accounting); `None` when no live job has
    /// that name and id.
    pub fn begin_step(
        &mut self,
        job: &str,
        job_id: hyperplan_shared::ids::JobId,
        nodes: Vec<String>,
        argv: &[String],
        now_s: u64,
    ) -> Option<u32> {
        let mut state = self.job_state_mut(job, job_id)?;
        let step = state.steps.last().map_or(0, |s| s.step.saturating_add(1));
        state.steps.push(StepRecord {
            step,
            nodes,
            start_time: Some(now_s),
            end_time: None,
            exit_code: None,
            signal: None,
            command: step_command(argv),
        });
        if state.steps.len() > crate::model::jobstate::MAX_STEPS {
            state.steps.remove(0);
        }
        Some(step)
    }

    /// Records the end of step `step` of `job` (id `job_id`) at `now_s` (Unix seconds):
    /// its exec session is over. A job that ended meanwhile (its steps' commands killed
    /// with it) still gets it while the world keeps the job, and its record is written
    /// again. Whether it was recorded: not for a job the world no longer has (forgotten,
    /// or its name now another job's), a step no longer kept, or one already ended (the
    /// first end stands).
    pub fn end_step(
        &mut self,
        job: &str,
        job_id: hyperplan_shared::ids::JobId,
        step: u32,
        end: StepEnd,
        now_s: u64,
    ) -> bool {
        let world = self.world_mut();
        let Some(entity) = world.resource::<JobNames>().0.get(job).copied() else {
            return false;
        };
        if world.get::<JobId>(entity).is_none_or(|id| *id != job_id) {
            return false;
        }
        // Looked at before `get_mut`, which marks the state changed (and so written).
        let open = world
            .get::<JobState>(entity)
            .and_then(|st| st.steps.iter().position(|s| s.step == step && s.end_time.is_none()));
        let Some(i) = open else {
            return false;
        };
        let Some(mut state) = world.get_mut::<JobState>(entity) else {
            return false;
        };
        let record = &mut state.steps[i];
        record.end_time = Some(record.start_time.map_or(now_s, |s| s.max(now_s)));
        record.exit_code = end.exit_code;
        record.signal = end.signal;
        true
    }

    /// A live job's state, by name and id, to change (marked changed, so written).
    fn job_state_mut(
        &mut self,
        job: &str,
        job_id: hyperplan_shared::ids::JobId,
    ) -> Option<bevy_ecs::world::Mut<'_, JobState>> {
        let world = self.world_mut();
        let entity = world.resource::<JobNames>().0.get(job).copied()?;
        if world.get::<JobId>(entity).is_none_or(|id| *id != job_id) {
            return None;
        }
        if !world.get::<JobState>(entity)?.is_live() {
            return None;
        }
        world.get_mut::<JobState>(entity)
    }
}

/// Equal, in time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
