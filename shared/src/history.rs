//! What `hyperplan history` and `hyperplan report` ask the planner and what it answers:
//! the accounting database's rows (one per ended job or array element, with its steps)
//! and its sums, in the planner's words. The database itself is `hyperplan-accounting`;
//! the CLI prints these as sacct's and sreport's columns.

use serde::{Deserialize, Serialize};

/// Rows one `history` answers at most unless it asks for fewer.
pub const DEFAULT_HISTORY_LIMIT: u32 = 10_000;
/// The most rows one answer carries, whatever it asks (a page is one QUIC frame).
pub const MAX_HISTORY_LIMIT: u32 = 100_000;

/// `hyperplan history`'s filters: each list is "any of", the lists "all of"; times are
/// Unix seconds. A job counts in `[since, until)` when it ran (or waited) in it: it
/// ended at or after `since` and was submitted before `until`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryQuery {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accounts: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<String>,
    /// sacct's state names (`COMPLETED`, `FAILED`, `CANCELLED`, `TIMEOUT`, `PREEMPTED`,
    /// `NODE_FAIL`, `OUT_OF_MEMORY`), upper case.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
    /// Job ids (`17`: the job, or every element of array 17), elements (`17_3`) or names
    /// (`train`, `sweep[3]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<String>,
    /// Each job's steps too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub steps: bool,
    /// At most this many jobs, the newest; `None`: [`DEFAULT_HISTORY_LIMIT`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// The answer to a `history`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct History {
    /// Oldest end first.
    pub jobs: Vec<HistoryJob>,
    /// More jobs matched than the limit: these are the newest.
    pub truncated: bool,
    /// Where the rows came from (`sqlite /var/lib/…` or `postgresql://host/db`).
    pub database: String,
    /// The newest end the database has from this planner (Unix seconds), and how far
    /// behind the planner's ended jobs it is (seconds): a job that ended meanwhile is not
    /// shown yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behind_secs: Option<u64>,
}

/// One ended job (or array element) as the accounting database keeps it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryJob {
    pub job_id: u64,
    /// Its array's id and its index there; `None` for a job that is no element.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_job_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_index: Option<u64>,
    /// Which run of it this is: the number of requeues before it.
    pub attempt: u32,
    pub name: String,
    pub user: String,
    pub account: String,
    pub queue: String,
    pub submit: u64,
    /// When it could first have started (its begin time, or its submit).
    pub eligible: u64,
    /// `None`: it never started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<u64>,
    pub end: u64,
    /// sacct's word: `COMPLETED`, `FAILED`, `CANCELLED`, `TIMEOUT`, `PREEMPTED`,
    /// `NODE_FAIL`, `OUT_OF_MEMORY`.
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    pub nnodes: u32,
    pub ntasks: u32,
    /// Its nodes as a hostlist (`node[01-04]`); empty when it never started.
    pub nodelist: String,
    /// The HyperNode it was placed in (the job's, or its first sub-job's) and its tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hypernode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<u32>,
    /// Asked for, over all tasks: cores, GPUs, bytes.
    pub req_cpus: f64,
    pub req_gpus: u64,
    pub req_memory: u64,
    /// Held while it ran, over all its placed tasks.
    pub alloc_cpus: f64,
    pub alloc_gpus: u64,
    pub alloc_memory: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<u64>,
    /// User plus system CPU time its tasks used, as their agents reported.
    pub cpu_seconds: f64,
    /// The largest peak resident memory of one task.
    pub max_rss: u64,
    /// Allocated cores × seconds held (sreport's CPU time).
    pub core_seconds: f64,
    /// Allocated GPUs × seconds held.
    pub gpu_seconds: f64,
    pub requeues: u32,
    pub restarts: u32,
    /// The job that preempted it last, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_by: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<HistoryStep>,
}

impl HistoryJob {
    /// sacct's JobID: `17`, or `16_3` for element 3 of array 16.
    pub fn job_id_text(&self) -> String {
        match (self.array_job_id, self.array_index) {
            (Some(a), Some(i)) => format!("{a}_{i}"),
            _ => self.job_id.to_string(),
        }
    }

    /// Seconds it ran (0 when it never started).
    pub fn elapsed(&self) -> u64 {
        self.start.map_or(0, |s| self.end.saturating_sub(s))
    }

    /// Seconds from eligible to start (to its end when it never started).
    pub fn waited(&self) -> u64 {
        self.start.unwrap_or(self.end).saturating_sub(self.eligible)
    }
}

/// One step (`hyperplan exec` into the job).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryStep {
    pub step: u32,
    pub nodelist: String,
    pub nnodes: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

/// What `usage` sums by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum UsageBy {
    #[default]
    User,
    Account,
    Queue,
    Hypernode,
}

impl UsageBy {
    pub fn as_str(self) -> &'static str {
        match self {
            UsageBy::User => "user",
            UsageBy::Account => "account",
            UsageBy::Queue => "queue",
            UsageBy::Hypernode => "hypernode",
        }
    }
}

/// Which report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ReportKind {
    /// CPU- and GPU-hours by user, account, queue or HyperNode.
    #[default]
    Usage,
    /// How full each HyperNode and tier was.
    Utilisation,
    /// How long jobs waited, by queue and size.
    Waits,
}

/// `hyperplan report`'s question. Times are Unix seconds; only the part of each job's
/// run inside `[since, until)` counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportQuery {
    pub kind: ReportKind,
    #[serde(default)]
    pub by: UsageBy,
    pub since: u64,
    pub until: u64,
    /// Only these users' jobs (a user under `privateData`: their own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
}

/// The answer to a `report`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub kind: ReportKind,
    pub since: u64,
    pub until: u64,
    pub database: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usage: Vec<UsageRow>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub utilisation: Vec<UtilisationRow>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waits: Vec<WaitRow>,
}

/// One line of `report usage`: what one user (account, queue, HyperNode) held.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageRow {
    pub key: String,
    pub jobs: u64,
    pub cpu_hours: f64,
    pub gpu_hours: f64,
}

/// One line of `report utilisation`: a HyperNode (or a whole tier: `hypernode` is
/// `tier N`), what it could hold over the period and what its jobs held.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UtilisationRow {
    pub hypernode: String,
    pub tier: u32,
    pub nodes: u64,
    pub cpu_hours: f64,
    pub cpu_capacity_hours: f64,
    pub gpu_hours: f64,
    pub gpu_capacity_hours: f64,
}

/// One line of `report waits`: jobs of one queue and size that started in the period.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitRow {
    pub queue: String,
    /// Nodes: `1`, `2-4`, `5-16`, `17-64`, `65-256`, `257+`.
    pub size: String,
    pub jobs: u64,
    pub mean_secs: f64,
    pub p95_secs: u64,
    pub max_secs: u64,
}

/// The node-count buckets of `report waits`, as (largest node count, label).
pub const WAIT_SIZES: [(u32, &str); 6] = [
    (1, "1"),
    (4, "2-4"),
    (16, "5-16"),
    (64, "17-64"),
    (256, "65-256"),
    (u32::MAX, "257+"),
];
