//! The launcher: a small root process that starts the shepherds the agent asks for, so
//! tasks are children of an unrestricted unit (`hyperplan-launcher.service`) and not of
//! the agent's. The agent's unit drops capabilities (`CapabilityBoundingSet=`), filters
//! system calls, mounts /usr and /etc read-only and sets other limits that every process
//! it forks inherits; a task started through the launcher has none of them, as a task
//! started by slurmd has none of slurmd's unit's. The agent keeps everything else: the
//! task's directory, spec, cgroups and PMI hub; it follows the shepherd by its pid as it
//! does after a restart.
//!
//! One request per connection on a Unix socket only root may use (mode 0600 in a 0700
//! directory, and `SO_PEERCRED` checked): a JSON line naming the task's spec, with the
//! shepherd's stderr log and, for a PMI task, its PMI socket attached (`SCM_RIGHTS`).
//! The answer is a JSON line: the shepherd's pid, or why not. A `hyperplan exec` step
//! of a running task is asked for the same way (its standard input, output and error
//! attached); its connection stays open until the launcher says its wait status.
//!
//! - [`fds`]: descriptors across the socket, and the peer's credentials.
//! - [`check`]: what the launcher accepts: a spec in a task directory of its state
//!   directory, written by root, for a user it may run.
//! - [`server`]: the daemon (`hyperplan-agent launcher`).
//! - [`client`]: the agent's side.

pub mod check;
pub mod client;
pub mod fds;
pub mod server;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where the launcher listens unless told (`launcher` in agent.toml, `--socket`): the
/// runtime directory systemd makes for `hyperplan-launcher.service`.
pub const DEFAULT_SOCKET: &str = "/run/hyperplan-launcher/launcher.sock";

/// The most bytes of a request or an answer.
pub const MAX_MESSAGE: usize = 16 * 1024;

/// What the agent asks: start the shepherd of this spec (descriptors attached: the
/// shepherd's stderr, then the task's PMI socket when `pmi`), or, with `step`, run a
/// command as that task's step (`hyperplan exec`; attached: its standard input, output
/// and error). A step's connection stays open until the command ends, with
/// [`Reply::Exited`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Request {
    pub spec: PathBuf,
    #[serde(default)]
    pub pmi: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<Step>,
}

/// A command run as a task's step, set up as the task is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Step {
    pub argv: Vec<String>,
    /// Through `/bin/sh -c` (argv joined).
    #[serde(default)]
    pub shell: bool,
    /// Who asks: the task's user.
    pub user: String,
}

impl Request {
    /// The descriptors that must come with it.
    pub fn descriptors(&self) -> usize {
        match self.step {
            Some(_) => 3,
            None => 1 + usize::from(self.pmi),
        }
    }
}

/// The launcher's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub enum Reply {
    /// The shepherd (or the step) runs (exec done) as `pid`.
    Started { pid: u32 },
    /// The step ended with this wait status (as `waitpid` gives it).
    Exited { status: i32 },
    /// Nothing runs: why, and the error number when starting it failed (EAGAIN, ENOMEM:
    /// the agent tries again later).
    Refused {
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        errno: Option<i32>,
    },
}
