//! Reading the state directory: which tasks it holds (`tasks/<job>.<jobId>/<task>/`)
//! and what each task's files say. The files are untrusted input (anything with root
//! may have written them): every read is bounded, a file that does not parse counts as
//! absent, and nothing here panics.

use std::io::Read;
use std::path::Path;

use hyperplan_net::messages::TaskRef;
use hyperplan_shared::names::{NameKind, check_name};
use serde::de::DeserializeOwned;

use crate::shepherd::layout::parse_job_dir;
use crate::shepherd::{ExitRecord, Started, TaskDir};

/// The largest pid, started or record file read.
const MAX_SMALL_FILE: u64 = 64 * 1024;
/// The most task directories taken from the state directory at start-up.
pub const MAX_TASKS: usize = 100_000;

/// What a task directory holds now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Files {
    pub spec: bool,
    /// The shepherd's pid; `Some(0)` is the agent's tombstone (no shepherd will run).
    pub pid: Option<u32>,
    pub started: Option<Started>,
    pub record: Option<ExitRecord>,
}

/// Reads up to `cap` bytes of `path`; None when it cannot be read or is larger.
pub fn read_small(path: &Path, cap: u64) -> Option<Vec<u8>> {
    let file = std::fs::File::open(path).ok()?;
    let mut bytes = Vec::new();
    file.take(cap + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= cap).then_some(bytes)
}

fn read_json<T: DeserializeOwned>(path: &Path) -> Option<T> {
    serde_json::from_slice(&read_small(path, MAX_SMALL_FILE)?).ok()
}

pub fn read_pid(dir: &TaskDir) -> Option<u32> {
    let bytes = read_small(&dir.pid(), 64)?;
    std::str::from_utf8(&bytes).ok()?.trim().parse().ok()
}

pub fn read_started(dir: &TaskDir) -> Option<Started> {
    read_json(&dir.started())
}

/// The task's place in its job, from its launch spec (0 when the spec is gone or does
/// not say: the planner then finds no task there and the agent's report is ignored).
pub fn read_index(dir: &TaskDir) -> u32 {
    #[derive(serde::Deserialize)]
    struct Index {
        #[serde(default)]
        index: u32,
    }
    read_small(&dir.spec(), crate::shepherd::spec::MAX_SPEC_BYTES)
        .and_then(|b| serde_json::from_slice::<Index>(&b).ok())
        .map_or(0, |i| i.index)
}

pub fn read_record(dir: &TaskDir) -> Option<ExitRecord> {
    let path = dir.record();
    // Most scans find none: a stat is cheaper than an open.
    if !path.exists() {
        return None;
    }
    read_json(&path)
}

pub fn read_files(dir: &TaskDir) -> Files {
    Files {
        spec: dir.spec().is_file(),
        pid: read_pid(dir),
        started: read_started(dir),
        record: read_record(dir),
    }
}

/// Every task directory under `STATE/tasks` whose job and task names are valid (others
/// are left alone and logged), at most [`MAX_TASKS`].
pub fn list(state_dir: &Path) -> Vec<(TaskRef, TaskDir)> {
    let mut found = Vec::new();
    let Ok(jobs) = std::fs::read_dir(state_dir.join("tasks")) else {
        return found;
    };
    for job_entry in jobs.flatten() {
        let name = job_entry.file_name();
        let Some((job, job_id)) = name.to_str().and_then(parse_job_dir) else {
            tracing::warn!(dir = %job_entry.path().display(), "not a job directory (<job>.<jobId>); left alone");
            continue;
        };
        if hyperplan_shared::names::check_job_name(job).is_err() || !job_entry.path().is_dir() {
            tracing::warn!(dir = %job_entry.path().display(), "not a job directory; left alone");
            continue;
        }
        let Ok(tasks) = std::fs::read_dir(job_entry.path()) else {
            continue;
        };
        for task_entry in tasks.flatten() {
            if !task_entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue; // the hostfile
            }
            let task_name = task_entry.file_name();
            let Some(task) = task_name.to_str().filter(|t| check_name(NameKind::Task, t).is_ok()) else {
                tracing::warn!(dir = %task_entry.path().display(), "not a task directory; left alone");
                continue;
            };
            if found.len() >= MAX_TASKS {
                tracing::warn!(max = MAX_TASKS, "too many task directories; the rest are not looked at");
                return found;
            }
            let dir = TaskDir::new(state_dir, job, job_id.into(), task);
            let index = read_index(&dir);
            found.push((
                TaskRef {
                    job: job.to_string(),
                    job_id: job_id.into(),
                    task: task.to_string(),
                    index,
                },
                dir,
            ));
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn lists_valid_task_directories_and_reads_their_files() {
        let state = tempfile::tempdir().unwrap();
        let t = TaskDir::new(state.path(), "train.v2", 7.into(), "w-0");
        std::fs::create_dir_all(&t.dir).unwrap();
        std::fs::write(t.dir.parent().unwrap().join("hostfile"), "n1\n").unwrap();
        std::fs::create_dir_all(state.path().join("tasks/nojobid/w-0")).unwrap();
        std::fs::create_dir_all(state.path().join("tasks/j.1/.hidden")).unwrap();
        let listed = list(state.path());
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(
            listed[0].0,
            TaskRef {
                job: "train.v2".into(),
                job_id: 7.into(),
                task: "w-0".into(),
                index: 0,
            }
        );
        assert_eq!(read_files(&t), Files::default());
        std::fs::write(t.pid(), "123\n").unwrap();
        std::fs::write(t.started(), r#"{"pid": 124, "startTimeMs": 5}"#).unwrap();
        std::fs::write(t.record(), "not json").unwrap();
        let files = read_files(&t);
        assert_eq!(files.pid, Some(123));
        assert_eq!(files.started.map(|s| s.pid), Some(124));
        assert_eq!(files.record, None, "a record that does not parse is no record");
        std::fs::write(t.pid(), vec![b'1'; 100]).unwrap();
        assert_eq!(read_pid(&t), None, "too long");
    }
}
