//! The exit record: how a task ended, as the shepherd writes it last into
//! `STATE/tasks/<job>.<jobId>/<task>/record.json` (JSON, camelCase):
//!
//! ```json
//! {
//!   "job": "train", "jobId": 7, "task": "worker-3", "rank": 3, "shepherdPid": 4100, "pid": 4101,
//!   "outcome": "exited", "exitCode": 3, "signal": null, "signalName": null,
//!   "startTimeMs": 1767225600000, "endTimeMs": 1767225612345,
//!   "cpuSeconds": 11.92, "maxRssBytes": 104857600, "oomKilled": false, "reason": null
//! }
//! ```
//!
//! `outcome`: `exited` (by itself, `exitCode`), `signaled` (a signal the shepherd did not
//! send, `signal`), `timeout` (the time limit; how it then ended is in `exitCode` or
//! `signal`), `cancelled` (the shepherd got SIGTERM or SIGINT and passed it on), `fenced`
//! (the node-lost fence stopped it: the planner had not heard the node for its
//! `nodeLostAfter`, and starts the task again elsewhere), `failed`
//! (it never ran: `reason` says why — unknown user, root refused, exec or chdir failed;
//! `pid` then is the child that failed, or null). Times are Unix milliseconds; CPU time
//! and peak memory come from the task's rusage (its reaped descendants included).

use serde::{Deserialize, Serialize};

/// How the task ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    Exited,
    Signaled,
    Timeout,
    Cancelled,
    Fenced,
    Failed,
}

/// What `record.json` holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExitRecord {
    pub job: String,
    #[serde(default)]
    pub job_id: hyperplan_shared::ids::JobId,
    pub task: String,
    pub rank: u32,
    pub shepherd_pid: u32,
    /// The task's pid (= its process group id); null when no process was started.
    pub pid: Option<u32>,
    pub outcome: Outcome,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub signal_name: Option<String>,
    pub start_time_ms: u64,
    pub end_time_ms: u64,
    /// User plus system CPU time.
    pub cpu_seconds: f64,
    pub max_rss_bytes: u64,
    /// The task's cgroup counted an OOM kill (`memory.events`); false without a cgroup.
    #[serde(default)]
    pub oom_killed: bool,
    /// Why the task failed before it ran; null otherwise.
    pub reason: Option<String>,
}

/// What `started.json` holds: the task runs (exec succeeded).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Started {
    pub pid: u32,
    pub start_time_ms: u64,
}

pub use hyperplan_shared::taskend::signal_name;

/// `ENOENT` for 2: the symbolic name people search for; `errno N` otherwise.
pub fn errno_name(errno: i32) -> String {
    let name = match errno {
        1 => "EPERM",
        2 => "ENOENT",
        5 => "EIO",
        7 => "E2BIG",
        8 => "ENOEXEC",
        12 => "ENOMEM",
        13 => "EACCES",
        16 => "EBUSY",
        17 => "EEXIST",
        20 => "ENOTDIR",
        21 => "EISDIR",
        22 => "EINVAL",
        24 => "EMFILE",
        26 => "ETXTBSY",
        28 => "ENOSPC",
        30 => "EROFS",
        36 => "ENAMETOOLONG",
        40 => "ELOOP",
        _ => return format!("errno {errno}"),
    };
    name.to_string()
}

/// "No such file or directory (ENOENT)".
pub fn describe_errno(errno: i32) -> String {
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    // std says "No such file or directory (os error 2)"; keep the words, name the errno.
    let words = text.split(" (os error").next().unwrap_or(&text);
    format!("{words} ({})", errno_name(errno))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn names() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(40), "signal 40");
        assert_eq!(describe_errno(2), "No such file or directory (ENOENT)");
        assert_eq!(errno_name(99), "errno 99");
    }

    #[test]
    fn record_roundtrips_with_camel_case_names() {
        let r = ExitRecord {
            job: "j".into(),
            job_id: 3.into(),
            task: "t".into(),
            rank: 0,
            shepherd_pid: 10,
            pid: Some(11),
            outcome: Outcome::Timeout,
            exit_code: None,
            signal: Some(15),
            signal_name: Some(signal_name(15)),
            start_time_ms: 1,
            end_time_ms: 2,
            cpu_seconds: 0.5,
            max_rss_bytes: 4096,
            oom_killed: false,
            reason: None,
        };
        let text = serde_json::to_string(&r).unwrap();
        assert!(
            text.contains("\"outcome\":\"timeout\"") && text.contains("\"maxRssBytes\":4096"),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<ExitRecord>(&text).unwrap(), r);
    }
}
