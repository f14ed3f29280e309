//! A person's request as the driver receives it: who sent it, what they ask and where
//! the answer goes. A submitted file arrives already read into jobs ([`Submission`]):
//! the connection's task reads it (`server::submission`), so a large file never holds up
//! the driver's ticks and heartbeats.

use std::net::SocketAddr;

use hyperplan_net::messages::{RequestCommand, ResponseError};
use hyperplan_shared::JobSpec;
use serde_json::Value;
use tokio::sync::oneshot;

/// A person's request, with who sent it and where the answer goes.
#[derive(Debug)]
pub struct Request {
    /// Their certificate's user name and whether its role is admin.
    pub user: String,
    pub admin: bool,
    /// Their Unix groups on this host, for a submit (see `server::groups`).
    pub groups: Vec<String>,
    pub peer: SocketAddr,
    pub asked: Asked,
    pub reply: oneshot::Sender<Result<Value, ResponseError>>,
}

/// What a person asks the driver.
#[derive(Debug)]
pub enum Asked {
    /// `hyperplan submit`: the file's jobs, read and completed off the driver's task.
    Submit(Submission),
    /// Every other request, as the client sent it (a `Submit` here is refused: files
    /// are read before the driver, see `server::submission`).
    Command(RequestCommand),
}

/// A submitted file read into jobs: the command line's `--hold`, `--begin`, `--array`,
/// `--dependency` and `--account`, the submit directory and each job's credential are in
/// them already; what needs the planner's state (owners, queues, limits) is the driver's.
#[derive(Debug)]
pub struct Submission {
    /// The file's name as the client sent it: refusals start with it.
    pub file_name: String,
    pub jobs: Vec<JobSpec>,
}
