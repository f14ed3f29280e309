//! The tasks this node runs for the planner: `Launch` starts a shepherd
//! (`hyperplan-agent shepherd --spec FILE`, detached, the task's parent), the state
//! directory says how each task goes, and its start and end are reported until the
//! planner acknowledges them. Everything a task is lives in its directory
//! (`STATE/tasks/<job>.<jobId>/<task>/`, see [`crate::shepherd::layout`]), so an agent
//! that was killed and started again finds its tasks there and goes on reporting them.
//!
//! - [`manager`]: [`Tasks`], what the link calls for each planner frame and timer.
//! - [`runner`]: writing a task's spec and hostfile, starting and signalling shepherds.
//! - [`scan`]: reading task directories (bounded reads of untrusted files).
//! - [`report`]: exit records as the protocol's `TaskEnd`, reports awaiting an `Ack`.
//! - [`logs`]: `ReadLog`, a piece of a task's output file.
//! - [`usage`]: CPU and memory of each task's processes, for heartbeats.
//! - [`epoch`]: the planner epoch seen; orders from an older one are refused.
//! - [`stop`]: stopping every task of a state directory (the demo's and tests' end).
//! - [`cgroup`]: how the node confines tasks: cgroups of each task's own (v2 where the
//!   agent has one delegated, else v1), found and emptied by [`cgroup::kill`].
//! - [`sweep`]: a task's processes without cgroups, by ancestry, session, user and start.
//! - [`strain`]: a node whose shepherds' forks fail (out of processes or memory) says so
//!   in its heartbeats, so the planner places nothing new there until it recovers.
//! - [`jobtmp`]: whether tasks get their job's own `/tmp` and `/dev/shm`, and removing them
//!   once the job has no task left here.

pub mod cgroup;
pub mod epoch;
pub mod jobtmp;
pub mod logs;
pub mod manager;
pub mod report;
pub mod runner;
pub mod scan;
pub mod stop;
pub mod strain;
pub mod sweep;
pub mod usage;

use std::path::PathBuf;

pub use manager::Tasks;

/// The agent's default state directory (`--state-dir`, agent.toml `stateDir`).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/hyperplan-agent";

/// How this node runs tasks, from flags and agent.toml.
#[derive(Clone, Debug)]
pub struct TaskOptions {
    pub state_dir: PathBuf,
    /// Pin tasks to their PUs and NUMA nodes (the probed topology is this machine).
    pub pin: bool,
    /// How tasks are confined ([`cgroup::Confinement::detect`], from `pin`).
    pub confinement: cgroup::Confinement,
    /// Tasks may run as uid 0 (`allowRoot`).
    pub allow_root: bool,
    /// Each task's `pids.max` where its cgroups have the pids controller (`taskPidsMax`);
    /// None: no limit of its own.
    pub pids_max: Option<u64>,
    /// Apply the user's `limits.conf` to its tasks (`[exec] limitsConf`).
    pub limits_conf: bool,
    /// The site's limits over the user's (`[exec] rlimits`).
    pub rlimits: crate::shepherd::rlimits::Rlimits,
    /// The program started as `PROGRAM shepherd --spec FILE` (this executable).
    pub shepherd: PathBuf,
    /// The launcher's socket (`launcher`): shepherds start there, outside the agent's
    /// unit, rather than as the agent's children.
    pub launcher: Option<PathBuf>,
    /// PMI for tasks whose job does not say (`[exec] defaultMpi`).
    pub default_mpi: hyperplan_shared::job::MpiMode,
    /// The mode tasks' output files are created with (`[exec] outputMode`).
    pub output_mode: u32,
    /// Whether tasks get their job's own `/tmp` and `/dev/shm`, and where (`[exec]
    /// privateTmp`, `privateTmpDir`; [`jobtmp::decide`]).
    pub private_tmp: crate::shepherd::jobtmp::Setting,
    /// The `hyperplan` CLI on this node: batch jobs' `mpirun` starts its daemons with
    /// `hyperplan exec --node` (see `launch::batch_files`).
    pub cli: PathBuf,
}

/// Why the task manager cannot start.
#[derive(Debug, thiserror::Error)]
pub enum TasksError {
    /// The cause is in the message (not a `source`), so a chain printer says it once.
    #[error(
        "the state directory {path}: {why} (set --state-dir, or stateDir in agent.toml, to a directory the agent may own)"
    )]
    StateDir { path: PathBuf, why: String },
}
