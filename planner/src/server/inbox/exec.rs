//! `hyperplan exec` as the driver's inbox carries it: who asks ([`ExecCaller`]), the
//! question ([`ExecAsk`]), the driver's answer ([`ExecPlan`] or [`ExecRefused`]), and the
//! step's end once the session is over ([`StepEnded`]).

use hyperplan_core::model::jobstate::StepEnd;
use hyperplan_core::requests::exec::ExecError;
use hyperplan_net::messages::{ExecRequest, ExecStart};
use tokio::sync::oneshot;

/// Who asks for an exec.
#[derive(Debug, Clone)]
pub enum ExecCaller {
    /// A person, by certificate.
    Person { user: String, admin: bool },
    /// A task of the job, through `node`'s agent, by the job's credential.
    Task { node: String },
}

/// Where an exec runs: each node's link and the frame to start it with.
#[derive(Debug)]
pub struct ExecPlan {
    /// The job's name and id (the step's end names them, see [`StepEnded`]).
    pub job: String,
    pub job_id: hyperplan_shared::ids::JobId,
    pub nodes: Vec<String>,
    /// The step's number in its job.
    pub step: Option<u32>,
    pub targets: Vec<(quinn::Connection, ExecStart)>,
}

/// An exec session's question to the driver.
#[derive(Debug)]
pub struct ExecAsk {
    pub caller: ExecCaller,
    pub request: ExecRequest,
    pub reply: oneshot::Sender<Result<ExecPlan, ExecRefused>>,
}

/// Why the driver refused an exec (the texts are what the caller sees).
#[derive(Debug, thiserror::Error)]
pub enum ExecRefused {
    #[error("a task's exec needs the job's credential (HYPERPLAN_CREDENTIAL)")]
    NoCredential,
    /// The core's refusal: no such job, not the person's, not running, …
    #[error(transparent)]
    Core(#[from] ExecError),
    #[error("node {node} holds no task of job {job}")]
    NotJobsNode { node: String, job: String },
    #[error("node {0} is not connected now; try again")]
    NotConnected(String),
}

/// An exec session is over (every node's command ended, or the person went away, or
/// the nodes could not be reached): its step's end, for the job's record.
#[derive(Debug)]
pub struct StepEnded {
    pub job: String,
    pub job_id: hyperplan_shared::ids::JobId,
    pub step: u32,
    pub end: StepEnd,
}
