//! A step of a running task (`hyperplan exec`): another command run as the task is (its
//! cgroups, CPUs, memory policy, limits, user, environment, working directory and its job's
//! own `/tmp` and `/dev/shm`: its spec), but not its PMI socket nor its time limit. The agent prepares one to fork it,
//! the launcher to start it outside the agent's unit.

use super::exec::Prepared;
use super::{LaunchSpec, TaskDir, current_euid};

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
) -> Result<Prepared, String> {
    if dir.record().exists() {
        return Err(format!("task {task} has ended on this node"));
    }
    let mut spec = LaunchSpec::read(&dir.spec()).map_err(|e| format!("task {task}: {e}"))?;
    if spec.user != user {
        return Err(format!("task {task} runs as {}, not {}", spec.user, user));
    }
    if argv.is_empty() || argv[0].is_empty() {
        return Err("no command to run".into());
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
    let checked = spec.check(&dir.spec()).map_err(|e| e.to_string())?;
    let identity = super::user::lookup(&checked.spec.user).map_err(|e| e.to_string())?;
    if identity.uid == 0 && !allow_root {
        return Err(format!(
            "user {} is root, and this node runs nothing as root (allowRoot)",
            identity.name
        ));
    }
    let euid = current_euid();
    let switch = match euid {
        0 => Some(&identity),
        e if e == identity.uid => None,
        e => {
            return Err(format!(
                "the agent runs as uid {e} and cannot run commands as {}",
                identity.name
            ));
        }
    };
    let mut prepared = Prepared::new(checked, switch);
    // The job's own /tmp and /dev/shm, as its tasks have them (when not required and not
    // to be had, the task's shepherd said why in its log).
    prepared.open_job_dirs().map_err(|e| format!("task {task}: {e}"))?;
    Ok(prepared)
}
