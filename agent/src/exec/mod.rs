//! `hyperplan exec` on this node: a command run inside a running job's allocation.
//!
//! - [`step`]: the planner opens a stream on the agent's link with an `ExecStart`; the
//!   command is started as the job's task on this node is (its cgroups, CPUs, memory
//!   policy, limits, user, environment and working directory: the task's own spec), its
//!   standard input, output and error carried as frames, its end reported. When the
//!   planner's side of the stream ends first (the person's `hyperplan exec` killed, its
//!   connection lost), the command's process group is killed.
//! - [`local`]: the tasks' way in. Each task gets `HYPERPLAN_EXEC_SOCKET` (this agent's
//!   Unix socket) and `HYPERPLAN_CREDENTIAL` (its job's); `hyperplan exec` inside a job
//!   sends its request there, and the agent carries it to the planner over its
//!   mutual-TLS link, where the credential is checked. A task needs no certificate.
//! - [`peer`]: only for a process of the job itself (the kernel says who calls): the
//!   credential alone admits nobody.
//! - [`gate`]: the socket's connections counted per local user, so that none can take
//!   the others'; [`said`]: what such a user can make the agent warn about, said at a
//!   bounded rate.
//! - [`kept`]: what the node keeps of steps' output, bounded per step, job and node.

pub mod gate;
pub mod kept;
pub mod local;
pub mod peer;
pub mod said;
pub mod step;

/// The socket tasks reach this agent's exec relay on, in its state directory.
pub fn socket_path(state_dir: &std::path::Path) -> std::path::PathBuf {
    state_dir.join("exec.sock")
}
