//! What the launcher accepts. The agent is the only client (root, checked by the
//! server), and the spec is what the shepherd will do, so the spec must be one the agent
//! wrote where it writes them: `STATE/tasks/JOB.JOBID/TASK/spec.json` of the launcher's
//! own state directory, reached without a symbolic link, in a directory and a file
//! owned by the launcher's user that no one else may write, whose names place it there.
//! A spec that would run its task as root (`allowRoot`) needs the launcher's own
//! `allowRoot`: a confined agent cannot grant what the node's configuration does not.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::shepherd::{LaunchSpec, TaskDir};

/// Why a request is refused (said to the agent, which fails the task with it).
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("the spec path {0} is not absolute")]
    Relative(PathBuf),
    #[error("the spec {path} cannot be resolved: {source}")]
    Resolve {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the spec path {path} goes through a symbolic link or `..` (it resolves to {resolved})")]
    NotCanonical { path: PathBuf, resolved: PathBuf },
    #[error("the spec {path} is not STATE/tasks/JOB.JOBID/TASK/spec.json of this launcher's state directory {state}")]
    Outside { path: PathBuf, state: PathBuf },
    #[error("{path} is {what}, expected {expected}")]
    Owner {
        path: PathBuf,
        what: String,
        expected: String,
    },
    #[error(transparent)]
    Spec(#[from] crate::shepherd::SpecError),
    #[error("the spec {path} names job {job}.{job_id} task {task}, whose spec would be {expected}")]
    Misplaced {
        path: PathBuf,
        job: String,
        job_id: hyperplan_shared::ids::JobId,
        task: String,
        expected: PathBuf,
    },
    #[error(
        "the spec {0} lets its task run as root (allowRoot), and this launcher does not (allowRoot in agent.toml, or --allow-root)"
    )]
    Root(PathBuf),
    #[error("the spec {path} names a PMI descriptor (pmiFd), and the request brought no PMI socket")]
    PmiMissing { path: PathBuf },
    #[error("the request brought a PMI socket, and the spec {path} names no PMI descriptor (pmiFd)")]
    PmiUnwanted { path: PathBuf },
}

/// The launcher's side of the rules.
#[derive(Clone, Debug)]
pub struct Rules {
    /// The state directory, resolved (no symbolic link in it).
    pub state_dir: PathBuf,
    /// Tasks may run as root.
    pub allow_root: bool,
    /// The uid that must own task directories and specs (the launcher's own).
    pub owner: u32,
}

/// The spec at `path`, read, when the launcher may start its shepherd or a step of its
/// task.
pub fn check(rules: &Rules, path: &Path) -> Result<LaunchSpec, Refusal> {
    if !path.is_absolute() {
        return Err(Refusal::Relative(path.to_path_buf()));
    }
    let resolved = std::fs::canonicalize(path).map_err(|source| Refusal::Resolve {
        path: path.to_path_buf(),
        source,
    })?;
    if resolved != path {
        return Err(Refusal::NotCanonical {
            path: path.to_path_buf(),
            resolved,
        });
    }
    let outside = || Refusal::Outside {
        path: path.to_path_buf(),
        state: rules.state_dir.clone(),
    };
    let rest = path
        .strip_prefix(rules.state_dir.join("tasks"))
        .map_err(|_| outside())?;
    let parts: Vec<_> = rest.components().collect();
    if parts.len() != 3 || parts[2].as_os_str() != "spec.json" {
        return Err(outside());
    }
    let task_dir = path.parent().ok_or_else(outside)?;
    owned(task_dir, rules.owner, 0o077, "a directory only its owner may enter")?;
    owned(path, rules.owner, 0o022, "a file only its owner may write")?;
    let spec = LaunchSpec::read(path)?;
    spec.check_names(path)?;
    let expected = TaskDir::new(&spec.state_dir, &spec.job, spec.job_id, &spec.task).spec();
    if expected != path {
        return Err(Refusal::Misplaced {
            path: path.to_path_buf(),
            job: spec.job,
            job_id: spec.job_id,
            task: spec.task,
            expected,
        });
    }
    if spec.allow_root && !rules.allow_root {
        return Err(Refusal::Root(path.to_path_buf()));
    }
    Ok(spec)
}

/// The spec names a PMI descriptor exactly when the request brings a PMI socket.
pub fn pmi_matches(spec: &LaunchSpec, path: &Path, pmi: bool) -> Result<(), Refusal> {
    match (spec.pmi_fd.is_some(), pmi) {
        (true, false) => Err(Refusal::PmiMissing {
            path: path.to_path_buf(),
        }),
        (false, true) => Err(Refusal::PmiUnwanted {
            path: path.to_path_buf(),
        }),
        _ => Ok(()),
    }
}

/// `path` is owned by `uid`, has none of the mode bits `forbidden`, and is the kind its
/// description says (a directory, or a regular file).
fn owned(path: &Path, uid: u32, forbidden: u32, described: &str) -> Result<(), Refusal> {
    let meta = std::fs::symlink_metadata(path).map_err(|source| Refusal::Resolve {
        path: path.to_path_buf(),
        source,
    })?;
    let kind_ok = if forbidden == 0o077 {
        meta.is_dir()
    } else {
        meta.is_file()
    };
    if kind_ok && meta.uid() == uid && meta.mode() & forbidden == 0 {
        return Ok(());
    }
    Err(Refusal::Owner {
        path: path.to_path_buf(),
        what: format!(
            "a {} of uid {} with mode {:o}",
            if meta.is_dir() { "directory" } else { "non-directory" },
            meta.uid(),
            meta.mode() & 0o7777
        ),
        expected: format!("{described}, owned by uid {uid}"),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn euid() -> u32 {
        crate::shepherd::current_euid()
    }

    /// A state directory with one task whose spec is written as the agent writes it.
    fn state_with_task(allow_root: bool, pmi: bool) -> (tempfile::TempDir, Rules, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let state = std::fs::canonicalize(tmp.path()).unwrap();
        let dir = TaskDir::new(&state, "train", 7.into(), "worker-0");
        std::fs::create_dir_all(&dir.dir).unwrap();
        std::fs::set_permissions(&dir.dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let spec = serde_json::json!({
            "job": "train", "jobId": 7, "task": "worker-0", "rank": 0,
            "argv": ["/bin/true"], "env": {}, "workingDir": "/", "user": "nobody",
            "stdout": "/dev/null", "stderr": "/dev/null",
            "allowRoot": allow_root, "stateDir": state, "pmiFd": if pmi { Some(9) } else { None },
        });
        std::fs::write(dir.spec(), serde_json::to_vec(&spec).unwrap()).unwrap();
        std::fs::set_permissions(dir.spec(), std::fs::Permissions::from_mode(0o600)).unwrap();
        let rules = Rules {
            state_dir: state,
            allow_root: false,
            owner: euid(),
        };
        (tmp, rules, dir.spec())
    }

    #[test]
    fn a_spec_the_agent_wrote_is_accepted() {
        let (_tmp, rules, spec) = state_with_task(false, false);
        let read = check(&rules, &spec).unwrap();
        assert_eq!((read.job.as_str(), read.job_id), ("train", 7.into()));
        assert!(pmi_matches(&read, &spec, false).is_ok());
        let (_tmp, rules, spec) = state_with_task(false, true);
        let read = check(&rules, &spec).unwrap();
        assert!(pmi_matches(&read, &spec, true).is_ok());
    }

    #[test]
    fn specs_elsewhere_or_reached_through_links_are_refused() {
        let (tmp, rules, spec) = state_with_task(false, false);
        let said = |path: &Path| check(&rules, path).unwrap_err().to_string();
        assert!(said(Path::new("tasks/x/spec.json")).contains("not absolute"));
        // `..` and a symbolic link to the task directory.
        let dotted = rules.state_dir.join("tasks/train.7/../train.7/worker-0/spec.json");
        assert!(said(&dotted).contains("symbolic link or `..`"), "{}", said(&dotted));
        let link = rules.state_dir.join("tasks/train.7/link");
        std::os::unix::fs::symlink(spec.parent().unwrap(), &link).unwrap();
        assert!(said(&link.join("spec.json")).contains("symbolic link"));
        // A file of the right name outside the tasks, and one level too deep.
        let other = tmp.path().join("elsewhere");
        std::fs::create_dir_all(other.join("a/b")).unwrap();
        std::fs::copy(&spec, other.join("a/b/spec.json")).unwrap();
        let elsewhere = std::fs::canonicalize(other.join("a/b/spec.json")).unwrap();
        assert!(said(&elsewhere).contains("is not STATE/tasks/JOB.JOBID/TASK/spec.json"));
        let deep = spec.parent().unwrap().join("x");
        std::fs::create_dir(&deep).unwrap();
        std::fs::copy(&spec, deep.join("spec.json")).unwrap();
        assert!(said(&deep.join("spec.json")).contains("is not STATE/tasks"));
        assert!(said(&rules.state_dir.join("tasks/nope.1/t/spec.json")).contains("cannot be resolved"));
    }

    #[test]
    fn a_spec_others_may_write_or_that_is_misplaced_is_refused() {
        let (_tmp, rules, spec) = state_with_task(false, false);
        std::fs::set_permissions(&spec, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = check(&rules, &spec).unwrap_err().to_string();
        assert!(e.contains("mode 666") && e.contains("only its owner may write"), "{e}");
        std::fs::set_permissions(&spec, std::fs::Permissions::from_mode(0o600)).unwrap();
        let dir = spec.parent().unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = check(&rules, &spec).unwrap_err().to_string();
        assert!(e.contains("only its owner may enter"), "{e}");
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        // Owned by someone else than the launcher's user.
        let strict = Rules {
            owner: euid() + 1,
            ..rules.clone()
        };
        assert!(check(&strict, &spec).unwrap_err().to_string().contains("owned by uid"));
        // Its names place it in another task's directory.
        let mut text: serde_json::Value = serde_json::from_slice(&std::fs::read(&spec).unwrap()).unwrap();
        text["task"] = "worker-1".into();
        std::fs::write(&spec, serde_json::to_vec(&text).unwrap()).unwrap();
        let e = check(&rules, &spec).unwrap_err().to_string();
        assert!(e.contains("task worker-1, whose spec would be"), "{e}");
    }

    #[test]
    fn root_needs_the_launcher_s_own_allow_root_and_pmi_must_match() {
        let (_tmp, rules, spec) = state_with_task(true, false);
        let e = check(&rules, &spec).unwrap_err().to_string();
        assert!(e.contains("allowRoot"), "{e}");
        let lenient = Rules {
            allow_root: true,
            ..rules.clone()
        };
        let read = check(&lenient, &spec).unwrap();
        let e = pmi_matches(&read, &spec, true).unwrap_err().to_string();
        assert!(e.contains("names no PMI descriptor"), "{e}");
        let (_tmp, rules, spec) = state_with_task(false, true);
        let read = check(&rules, &spec).unwrap();
        let e = pmi_matches(&read, &spec, false).unwrap_err().to_string();
        assert!(e.contains("brought no PMI socket"), "{e}");
    }
}
