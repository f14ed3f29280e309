//! The launch spec: what the agent writes (`STATE/tasks/<job>.<jobId>/<task>/spec.json`)
//! for one task and the shepherd reads. JSON, camelCase field names, unknown fields refused:
//!
//! ```json
//! {
//!   "job": "train", "jobId": 7, "task": "worker-3", "rank": 3,
//!   "argv": ["python", "train.py"], "env": {"PATH": "/usr/bin:/bin", "RANK": "3"},
//!   "workingDir": "/home/alice/run", "stdout": "/home/alice/run/out.txt",
//!   "stderr": "/home/alice/run/out.txt",
//!   "user": "alice", "allowRoot": false,
//!   "cpus": "0-3,8-11", "numaNodes": [0], "memoryPolicy": "bind",
//!   "cgroups": ["/sys/fs/cgroup/freezer/hyperplan/train.7.worker-3",
//!               "/sys/fs/cgroup/pids/hyperplan/train.7.worker-3"],
//!   "stateDir": "/var/lib/hyperplan-agent", "timeLimitSecs": 3600, "killGraceSecs": 10
//! }
//! ```
//!
//! `cpus` empty: no affinity. `memoryPolicy` `none` (the default) leaves memory where the
//! kernel puts it; `bind` needs `numaNodes`. `cgroups` (optional): the cgroup directories the
//! agent prepared for the task (one in v2; one per hierarchy in v1: see
//! `tasks::cgroup`); the task joins each before exec, and every process in them is the
//! task's (`cgroup`, one v2 directory, is what earlier agents wrote and is still read). `timeLimitSecs`
//! (optional): SIGTERM to the task's process group at the limit, SIGKILL `killGraceSecs`
//! (default 10) later. `privateTmp` (optional): `{"tmp": DIR, "shm": DIR, "required": BOOL}`,
//! the job's own directories mounted on the task's `/tmp` and `/dev/shm` (each
//! `BASE/<job>.<jobId>/NAME`, see `shepherd::jobtmp`). The file is untrusted input: every field is checked and a bad one is
//! an error naming the file and the field, never a panic.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use hyperplan_shared::names::{NameKind, check_name};
use serde::{Deserialize, Serialize};

use crate::probe::live::parse_cpu_list;

/// The largest spec file read (argv and env included).
pub const MAX_SPEC_BYTES: u64 = 4 << 20;

/// Highest NUMA node number a spec may name (the kernel's largest `MAX_NUMNODES`).
pub const MAX_NUMA_NODE: u32 = 1023;

/// Grace between SIGTERM and SIGKILL when nothing else is said.
pub const DEFAULT_KILL_GRACE_SECS: u64 = 10;

/// Where the task's memory may come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum MemoryPolicy {
    /// The kernel's default (local first, then anywhere).
    #[default]
    None,
    /// `set_mempolicy(MPOL_BIND)` to `numaNodes`.
    Bind,
}

/// One task as the agent asks the shepherd to run it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LaunchSpec {
    pub job: String,
    /// The job's id (a job name may be used again, its id not); 0 when not given.
    #[serde(default)]
    pub job_id: hyperplan_shared::ids::JobId,
    pub task: String,
    /// The task's place in its job (what the planner finds it by; see `TaskRef::index`).
    #[serde(default)]
    pub index: u32,
    pub rank: u32,
    /// Program and arguments; a program without `/` is looked up in the spec's `PATH`.
    pub argv: Vec<String>,
    /// The task's whole environment: nothing is inherited.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub working_dir: PathBuf,
    /// Created (or truncated) by the user, mode `output_mode` (0600) less the umask.
    pub stdout: PathBuf,
    /// May equal `stdout`: both go to one file, opened once.
    pub stderr: PathBuf,
    pub user: String,
    #[serde(default)]
    pub allow_root: bool,
    /// Kernel list form, `0-3,8-11`; empty: no affinity.
    #[serde(default)]
    pub cpus: String,
    #[serde(default)]
    pub numa_nodes: Vec<u32>,
    #[serde(default)]
    pub memory_policy: MemoryPolicy,
    /// One cgroup v2 directory (the form earlier agents wrote); see `cgroups`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroups: Vec<PathBuf>,
    /// The agent's state directory; the shepherd's files go under `tasks/<job>.<jobId>/<task>/`.
    pub state_dir: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_grace_secs: Option<u64>,
    /// The task's resource limits (the user's `limits.conf` and the agent's `[exec]
    /// rlimits`); a resource not named keeps the shepherd's (memlock: raised, for RDMA).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub rlimits: super::rlimits::Rlimits,
    /// The task's end of its PMI socket (`PMI_FD`): a descriptor the shepherd inherited
    /// from the agent, passed on to the task and closed in the shepherd once it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pmi_fd: Option<i32>,
    /// The mode its output files are created with, less the umask (`[exec] outputMode`);
    /// `None`: 0600, the task's user alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_mode: Option<u32>,
    /// The node-lost fence: stop the task once the agent's deadline
    /// (`STATE/fence-deadline`, [`crate::deadman`]) has passed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fence: bool,
    /// The job's own `/tmp` and `/dev/shm` on this node (`[exec] privateTmp`), mounted in a
    /// mount namespace of the task's; absent: the node's ([`super::jobtmp`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_tmp: Option<super::jobtmp::JobDirs>,
}

impl LaunchSpec {
    /// Every cgroup the task runs in (`cgroup` and `cgroups`).
    pub fn all_cgroups(&self) -> Vec<PathBuf> {
        self.cgroup.iter().chain(&self.cgroups).cloned().collect()
    }
}

/// Why a spec cannot be used. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("cannot read the launch spec {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the launch spec {path} is larger than {MAX_SPEC_BYTES} bytes")]
    TooLarge { path: PathBuf },
    #[error("the launch spec {path} does not parse: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("the launch spec {path}: field `{field}`: {message}")]
    Field {
        path: PathBuf,
        field: &'static str,
        message: String,
    },
}

/// A spec that passed every check, with the CPU list parsed.
#[derive(Clone, Debug)]
pub struct Checked {
    pub spec: LaunchSpec,
    /// Sorted PU numbers; empty: no affinity.
    pub cpus: Vec<u32>,
}

impl LaunchSpec {
    /// Reads and parses `path` (at most [`MAX_SPEC_BYTES`]) without checking the fields.
    pub fn read(path: &Path) -> Result<LaunchSpec, SpecError> {
        let read_err = |source| SpecError::Read {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read_err)?;
        let mut bytes = Vec::new();
        file.take(MAX_SPEC_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(read_err)?;
        if bytes.len() as u64 > MAX_SPEC_BYTES {
            return Err(SpecError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        serde_json::from_slice(&bytes).map_err(|source| SpecError::Parse {
            path: path.to_path_buf(),
            source,
        })
    }

    /// The job and task names, the only fields the task directory depends on.
    pub fn check_names(&self, path: &Path) -> Result<(), SpecError> {
        let field = |field, message: String| SpecError::Field {
            path: path.to_path_buf(),
            field,
            message,
        };
        hyperplan_shared::names::check_job_name(&self.job).map_err(|e| field("job", e.to_string()))?;
        check_name(NameKind::Task, &self.task).map_err(|e| field("task", e.to_string()))?;
        absolute(&self.state_dir).map_err(|e| field("stateDir", e.to_string()))?;
        Ok(())
    }

    /// Checks every field; `path` is the file named in errors.
    pub fn check(self, path: &Path) -> Result<Checked, SpecError> {
        self.check_names(path)?;
        let field = |field, message: String| SpecError::Field {
            path: path.to_path_buf(),
            field,
            message,
        };
        if self.argv.is_empty() || self.argv[0].is_empty() {
            return Err(field("argv", "expected a program and its arguments, got none".into()));
        }
        if let Some(bad) = self.argv.iter().find(|a| a.contains('\0')) {
            return Err(field("argv", format!("{bad:?} contains a NUL byte")));
        }
        for (key, value) in &self.env {
            if key.is_empty() || key.contains('=') || key.contains('\0') {
                return Err(field("env", format!("{key:?} is not a variable name")));
            }
            if value.contains('\0') {
                return Err(field("env", format!("the value of {key} contains a NUL byte")));
            }
        }
        // The user's own paths may climb (`../logs/%j.out`): they are used as the user.
        user_path(&self.working_dir).map_err(|e| field("workingDir", e.to_string()))?;
        user_path(&self.stdout).map_err(|e| field("stdout", e.to_string()))?;
        user_path(&self.stderr).map_err(|e| field("stderr", e.to_string()))?;
        if let Some(cgroup) = &self.cgroup {
            absolute(cgroup).map_err(|e| field("cgroup", e.to_string()))?;
        }
        for cgroup in &self.cgroups {
            absolute(cgroup).map_err(|e| field("cgroups", e.to_string()))?;
        }
        if self.user.is_empty() || self.user.contains('\0') || self.user.contains('/') {
            return Err(field("user", format!("{:?} is not a user name", self.user)));
        }
        let cpus = parse_cpu_list(&self.cpus).map_err(|e| field("cpus", e.to_string()))?;
        if let Some(&n) = self.numa_nodes.iter().find(|&&n| n > MAX_NUMA_NODE) {
            return Err(field(
                "numaNodes",
                format!("node {n} is beyond any machine (at most {MAX_NUMA_NODE})"),
            ));
        }
        if self.memory_policy == MemoryPolicy::Bind && self.numa_nodes.is_empty() {
            return Err(field(
                "numaNodes",
                "memoryPolicy `bind` needs at least one NUMA node".into(),
            ));
        }
        if self.time_limit_secs == Some(0) {
            return Err(field("timeLimitSecs", "expected at least 1 second".into()));
        }
        if let Some(dirs) = &self.private_tmp {
            let job_dir = super::jobtmp::job_dir_name(&self.job, self.job_id);
            for (name, path) in [("privateTmp.tmp", &dirs.tmp), ("privateTmp.shm", &dirs.shm)] {
                absolute(path).map_err(|e| field(name, e.to_string()))?;
                if path.parent().and_then(Path::file_name) != Some(std::ffi::OsStr::new(&job_dir)) {
                    return Err(field(
                        name,
                        format!("expected BASE/{job_dir}/NAME, got {}", path.display()),
                    ));
                }
            }
        }
        if let Some(fd) = self.pmi_fd {
            if fd < 3 {
                return Err(field("pmiFd", format!("expected a descriptor above 2, got {fd}")));
            }
            if !is_socket(fd) {
                return Err(field(
                    "pmiFd",
                    format!("descriptor {fd} is not an open socket (was the shepherd started by the agent?)"),
                ));
            }
        }
        Ok(Checked { spec: self, cpus })
    }
}

/// `fd` is an open socket in this process.
#[allow(unsafe_code)]
fn is_socket(fd: i32) -> bool {
    // SAFETY: `st` is written by fstat before it is read; a bad descriptor is an error.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let rc = unsafe { libc::fstat(fd, &mut st) };
    rc == 0 && st.st_mode & libc::S_IFMT == libc::S_IFSOCK
}

/// Why a path field is refused; the field's [`SpecError::Field`] carries the text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum PathError {
    #[error("expected an absolute path, got {}", .0.display())]
    Relative(PathBuf),
    #[error("{} contains a NUL byte", .0.display())]
    Nul(PathBuf),
    #[error("expected a path without `..`, got {}", .0.display())]
    ParentDir(PathBuf),
}

/// An absolute path without NUL bytes (`..` allowed: the shepherd uses it as the user).
fn user_path(path: &Path) -> Result<(), PathError> {
    use std::os::unix::ffi::OsStrExt;
    if !path.is_absolute() {
        return Err(PathError::Relative(path.to_path_buf()));
    }
    if path.as_os_str().as_bytes().contains(&0) {
        return Err(PathError::Nul(path.to_path_buf()));
    }
    Ok(())
}

/// An absolute path without NUL bytes or `..` (the agent's own paths).
fn absolute(path: &Path) -> Result<(), PathError> {
    user_path(path)?;
    if path.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return Err(PathError::ParentDir(path.to_path_buf()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn good() -> serde_json::Value {
        serde_json::json!({
            "job": "j1", "task": "worker-0", "rank": 0, "argv": ["true"],
            "workingDir": "/tmp", "stdout": "/tmp/o", "stderr": "/tmp/o",
            "user": "alice", "cpus": "0-3,8", "stateDir": "/var/lib/hyperplan-agent"
        })
    }

    fn check(v: serde_json::Value) -> Result<Checked, SpecError> {
        let spec: LaunchSpec = serde_json::from_value(v).map_err(|source| SpecError::Parse {
            path: "s.json".into(),
            source,
        })?;
        spec.check(Path::new("s.json"))
    }

    fn field_error(change: impl FnOnce(&mut serde_json::Value)) -> String {
        let mut v = good();
        change(&mut v);
        match check(v) {
            Err(e @ SpecError::Field { .. }) => e.to_string(),
            other => panic!("expected a field error, got {other:?}"),
        }
    }

    #[test]
    fn a_good_spec_checks() {
        let checked = check(good()).unwrap();
        assert_eq!(checked.cpus, [0, 1, 2, 3, 8]);
        assert_eq!(checked.spec.memory_policy, MemoryPolicy::None);
        assert_eq!(checked.spec.time_limit_secs, None);
    }

    #[test]
    fn bad_fields_are_named() {
        let e = field_error(|v| v["job"] = "../etc".into());
        assert!(e.contains("s.json") && e.contains("`job`"), "{e}");
        assert!(field_error(|v| v["task"] = "a/b".into()).contains("`task`"));
        assert!(field_error(|v| v["argv"] = serde_json::json!([])).contains("`argv`"));
        assert!(field_error(|v| v["stdout"] = "out.txt".into()).contains("absolute"));
        assert!(field_error(|v| v["cgroups"] = serde_json::json!(["/a/../b"])).contains("`..`"));
        assert!(field_error(|v| v["stateDir"] = "/a/../b".into()).contains("`stateDir`"));
        // The user's own paths may climb: they are opened as the user.
        let mut v = good();
        v["stdout"] = "/home/a/run/../logs/o".into();
        v["workingDir"] = "/home/a/run/..".into();
        assert!(check(v).is_ok());
        assert!(field_error(|v| v["cpus"] = "3-1".into()).contains("`cpus`"));
        assert!(field_error(|v| v["env"] = serde_json::json!({"A=B": "x"})).contains("`env`"));
        assert!(field_error(|v| v["memoryPolicy"] = "bind".into()).contains("numaNodes"));
        assert!(field_error(|v| v["numaNodes"] = serde_json::json!([5000])).contains("numaNodes"));
        assert!(field_error(|v| v["user"] = "".into()).contains("`user`"));
        let e = field_error(|v| v["privateTmp"] = serde_json::json!({"tmp": "/s/j1.0/tmp", "shm": "/s/j2.0/shm"}));
        assert!(e.contains("`privateTmp.shm`") && e.contains("BASE/j1.0/NAME"), "{e}");
        let e = field_error(|v| v["privateTmp"] = serde_json::json!({"tmp": "/s/../j1.0/tmp", "shm": "/s/j1.0/shm"}));
        assert!(e.contains("`privateTmp.tmp`"), "{e}");
        let mut v = good();
        v["privateTmp"] = serde_json::json!({"tmp": "/s/j1.0/tmp", "shm": "/dev/shm/h/a/j1.0/shm", "required": true});
        assert!(check(v).unwrap().spec.private_tmp.unwrap().required);
    }

    #[test]
    fn unknown_fields_and_wrong_types_do_not_parse() {
        let mut v = good();
        v["cpu"] = "0".into();
        assert!(matches!(check(v), Err(SpecError::Parse { .. })));
        let mut v = good();
        v["rank"] = (-1).into();
        assert!(matches!(check(v), Err(SpecError::Parse { .. })));
    }
}
