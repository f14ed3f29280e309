//! Who may use a job's credential on this node: a process of that job. The exec socket
//! is open to every local user, and a credential is a string that can leak (a task that
//! prints its environment to a readable file); so, as Slurm's step daemons do, the agent
//! asks the kernel who is calling (`SO_PEERCRED`) and relays only for a process that runs
//! as the job's user *and* belongs to one of the job's tasks here: a descendant of its
//! shepherd (a subreaper, so neither a double fork nor `setsid` leaves it) or a member of
//! its cgroups (the job's `hyperplan exec` steps). The credential alone is worth nothing.
//!
//! The refusal tells a caller nothing it could not know: a job with no task here and
//! another user's job get the same words ([`Refused::NotYours`]), so the socket, open to
//! everyone and asking no certificate, does not say which job names exist on the node.
//! Only the job's own user hears that its job is here ([`Refused::NotInJob`]).

use std::path::Path;

use crate::shepherd::{LaunchSpec, TaskDir};

/// The job's tasks on this node looked at, at most (a state directory is the agent's own).
const MAX_TASKS: usize = 4096;
/// Parents followed from the caller up, at most.
const MAX_DEPTH: usize = 4096;

/// Why a caller is not relayed.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// No task of the job here runs as the caller's user: none at all, or another
    /// user's. One text for both, so that it does not tell whether the job exists.
    #[error("no task of job {job} runs on this node as your user (uid {uid})")]
    NotYours { uid: u32, job: String },
    /// The job's user, from a process outside the job's tasks.
    #[error("pid {pid} is not a process of job {job} on this node (none of its tasks' processes)")]
    NotInJob { pid: u32, job: String },
}

/// Whether process `pid` of user `uid` may ask on behalf of `job`.
pub fn admit(state_dir: &Path, job: &str, uid: u32, pid: u32) -> Result<(), Refused> {
    let tasks = job_tasks(state_dir, job);
    let ancestors = ancestors(pid);
    let groups = cgroups_of(pid);
    let mut ours = false;
    for (dir, spec) in &tasks {
        let Ok(identity) = crate::shepherd::user::lookup(&spec.user) else {
            continue;
        };
        if identity.uid != uid {
            continue;
        }
        ours = true;
        let shepherd = crate::tasks::scan::read_pid(dir).filter(|&p| p > 1);
        if shepherd.is_some_and(|s| ancestors.contains(&s)) {
            return Ok(());
        }
        let in_cgroup = spec.all_cgroups().iter().any(|c| {
            let c = c.to_string_lossy();
            groups.iter().any(|g| !g.is_empty() && c.ends_with(g.as_str()))
        });
        if in_cgroup {
            return Ok(());
        }
    }
    let job = job.to_string();
    Err(if ours {
        Refused::NotInJob { pid, job }
    } else {
        Refused::NotYours { uid, job }
    })
}

/// The job's task directories here with their specs (`STATE/tasks/<job>.<id>/<task>/`).
fn job_tasks(state_dir: &Path, job: &str) -> Vec<(TaskDir, LaunchSpec)> {
    let mut found = Vec::new();
    let Ok(jobs) = std::fs::read_dir(state_dir.join("tasks")) else {
        return found;
    };
    for entry in jobs.flatten().take(MAX_TASKS) {
        let name = entry.file_name();
        let Some((name, id)) = name.to_str().and_then(|n| n.rsplit_once('.')) else {
            continue;
        };
        let Ok(id) = id.parse::<u64>() else { continue };
        if name != job {
            continue;
        }
        let Ok(tasks) = std::fs::read_dir(entry.path()) else {
            continue;
        };
        for task in tasks.flatten().take(MAX_TASKS) {
            let Some(task) = task.file_name().to_str().map(str::to_string) else {
                continue;
            };
            let dir = TaskDir::new(state_dir, job, id.into(), &task);
            if let Ok(spec) = LaunchSpec::read(&dir.spec()) {
                found.push((dir, spec));
            }
        }
    }
    found
}

/// `pid` and its parents up to init.
fn ancestors(pid: u32) -> Vec<u32> {
    let mut chain = vec![pid];
    let mut at = pid;
    while chain.len() < MAX_DEPTH {
        match crate::tasks::runner::proc_stat(at) {
            Some(p) if p.ppid > 1 && !chain.contains(&p.ppid) => {
                chain.push(p.ppid);
                at = p.ppid;
            }
            _ => break,
        }
    }
    chain
}

/// The cgroup paths `pid` is in (`/proc/PID/cgroup`, v1 and v2 lines alike).
fn cgroups_of(pid: u32) -> Vec<String> {
    let Some(bytes) = crate::tasks::scan::read_small(Path::new(&format!("/proc/{pid}/cgroup")), 64 * 1024) else {
        return Vec::new();
    };
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .filter(|p| *p != "/")
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_process_outside_the_job_or_of_another_user_is_refused() {
        let state = tempfile::tempdir().unwrap();
        // No task of the job here.
        let nothing = admit(state.path(), "train", 1234, std::process::id())
            .unwrap_err()
            .to_string();
        assert_eq!(
            nothing,
            "no task of job train runs on this node as your user (uid 1234)"
        );
        // A task of the job whose shepherd is not this process' ancestor.
        let dir = TaskDir::new(state.path(), "train", 7.into(), "w-0");
        std::fs::create_dir_all(&dir.dir).unwrap();
        let me = crate::shepherd::current_euid();
        let out = std::process::Command::new("id").arg("-un").output().unwrap();
        let user = String::from_utf8(out.stdout).unwrap().trim().to_string();
        let spec = serde_json::json!({
            "job": "train", "jobId": 7, "task": "w-0", "rank": 0, "argv": ["true"],
            "workingDir": "/", "stdout": "/dev/null", "stderr": "/dev/null", "user": user,
            "stateDir": state.path(),
        });
        std::fs::write(dir.spec(), spec.to_string()).unwrap();
        std::fs::write(dir.pid(), "1\n").unwrap();
        let e = admit(state.path(), "train", me, std::process::id())
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a process of job train"), "{e}");
        // Another user hears what it would of a job that is not here: no more.
        let other = if me == 1234 { 1235 } else { 1234 };
        let e = admit(state.path(), "train", other, std::process::id())
            .unwrap_err()
            .to_string();
        let nothing = nothing.replace("1234", &other.to_string());
        assert_eq!(e, nothing);
        // Its shepherd is our parent: admitted.
        let parent = crate::tasks::runner::proc_stat(std::process::id()).unwrap().ppid;
        std::fs::write(dir.pid(), format!("{parent}\n")).unwrap();
        admit(state.path(), "train", me, std::process::id()).unwrap();
    }
}
