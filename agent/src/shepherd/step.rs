//! A step of a running task (`hyperplan exec`): another command run as the task is (its
//! cgroups, CPUs, memory policy, limits, user, environment, working directory and its job's
//! own `/tmp` and `/dev/shm`: its spec), but not its PMI socket nor its time limit. The agent prepares one to fork it,
//! the launcher to start it outside the agent's unit.

use super::exec::Prepared;
use super::jobtmp::JobTmpError;
use super::user::UserError;
use super::{LaunchSpec, SpecError, TaskDir, current_euid};

/// Why a step did not start: refused before the fork ([`prepare`]) or failed in it
/// ([`Prepared::spawn_piped`], [`Prepared::spawn_with`]). The words go to the caller.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("task {task} has ended on this node")]
    Ended { task: String },
    #[error("task {task}: {source}")]
    Spec { task: String, source: SpecError },
    #[error("task {task} runs as {owner}, not {asker}")]
    NotTheUser { task: String, owner: String, asker: String },
    #[error("no command to run")]
    NoCommand,
    /// The spec, with the step's command, is not one to run.
    #[error(transparent)]
    Checked(SpecError),
    #[error(transparent)]
    User(#[from] UserError),
    #[error("user {user} is root, and this node runs nothing as root (allowRoot)")]
    Root { user: String },
    #[error("the agent runs as uid {euid} and cannot run commands as {user}")]
    CannotSwitch { euid: u32, user: String },
    #[error("task {task}: {source}")]
    JobDirs { task: String, source: JobTmpError },
    #[error("cannot start the command: creating a pipe failed: {0}")]
    Pipe(std::io::Error),
    /// The fork or exec failed; why, in the words of the failed set-up step.
    #[error("{0}")]
    Start(String),
}

/// The command `argv` (through `/bin/sh -c` when `shell`) as the spec in `dir` says to
/// run its task (`task`: JOB/TASK, for the errors); `user`, who asks, must be the
/// spec's. `Err`: why not, in words for the caller.
pub fn prepare(
    dir: &TaskDir,
    task: &str,
    argv: &[String],
    shell: bool,
    user: &str,
    allow_root: bool,
) -> Result<Prepared, StepError> {
    if dir.record().exists() {
        return Err(StepError::Ended { task: task.into() });
    }
    let mut spec = LaunchSpec::read(&dir.spec()).map_err(|source| StepError::Spec {
        task: task.into(),
        source,
    })?;
    if spec.user != user {
        return Err(StepError::NotTheUser {
            task: task.into(),
            owner: spec.user,
            asker: user.into(),
        });
    }
    if argv.is_empty() || argv[0].is_empty() {
        return Err(StepError::NoCommand);
    }
    spec.argv = if shell {
        vec!["/bin/sh".into(), "-c".into(), argv.join(" ")]
    } else {
        argv.to_vec()
    };
    // Not the task's PMI socket: that descriptor is the task's alone.
    spec.pmi_fd = None;
    for key in ["PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_SPAWNED"] {
        spec.env.remove(key);
    }
    spec.time_limit_secs = None;
    let checked = spec.check(&dir.spec()).map_err(StepError::Checked)?;
    let identity = super::user::lookup(&checked.spec.user)?;
    if identity.uid == 0 && !allow_root {
        return Err(StepError::Root { user: identity.name });
    }
    let euid = current_euid();
    let switch = match euid {
        0 => Some(&identity),
        e if e == identity.uid => None,
        e => {
            return Err(StepError::CannotSwitch {
                euid: e,
                user: identity.name,
            });
        }
    };
    let mut prepared = Prepared::new(checked, switch);
    // The job's own /tmp and /dev/shm, as its tasks have them (when not required and not
    // to be had, the task's shepherd said why in its log).
    prepared.open_job_dirs().map_err(|source| StepError::JobDirs {
        task: task.into(),
        source,
    })?;
    Ok(prepared)
}
