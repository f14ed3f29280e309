//! The placement report `hyperplan simulate` prints (and the daemon's status replies carry).
//! Field names are an interface: scripts and tests depend on them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A job's status for people: `pending` → `placed` → `running` → `completed` | `failed` |
/// `cancelled` | `timeout`, or `rejected`. The simulator's jobs stay `placed` (nothing
/// reports their tasks starting or ending).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    /// The gang minimum is placed, no task reported started yet (the simulator's jobs,
    /// finished or not, stay here).
    Placed,
    /// Could run later; `reason` says why not now.
    #[default]
    Pending,
    /// Can never run, even on the empty cluster; `reason` says why.
    Rejected,
    /// Cancelled (before or after it was placed); its name is free again once its tasks
    /// ended.
    Cancelled,
    /// Placed, and some task reported started.
    Running,
    /// Every placed task exited 0.
    Completed,
    /// A task failed (non-zero exit, a signal, never ran, or lost with its node).
    Failed,
    /// A task hit the job's time limit.
    Timeout,
    /// Preempted for a job of higher priority (or reclaimed by a queue under its quota),
    /// and not requeued; `preemptedBy` says by whom.
    Preempted,
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Placed => "placed",
            JobStatus::Pending => "pending",
            JobStatus::Rejected => "rejected",
            JobStatus::Cancelled => "cancelled",
            JobStatus::Running => "running",
            JobStatus::Completed => "completed",
            JobStatus::Failed => "failed",
            JobStatus::Timeout => "timeout",
            JobStatus::Preempted => "preempted",
        }
    }

    /// Over for good: completed, failed, cancelled or timeout (`rejected` may be looked
    /// at again when nodes join).
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobStatus::Completed | JobStatus::Failed | JobStatus::Cancelled | JobStatus::Timeout | JobStatus::Preempted
        )
    }
}

/// A task's state for people.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    /// Not placed.
    Pending,
    /// Placed (launching), its start not reported yet.
    Starting,
    Running,
    /// Ended by itself: exited (0 or not), a signal hyperplan did not send, or never ran.
    Exited,
    /// Killed on purpose: a cancel, another task failed, the time limit.
    Killed,
    /// Its node was NotReady for longer than `nodeLostAfter`.
    Lost,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::Starting => "starting",
            TaskStatus::Running => "running",
            TaskStatus::Exited => "exited",
            TaskStatus::Killed => "killed",
            TaskStatus::Lost => "lost",
        }
    }
}

/// One task. The run fields (`state` to `rssBytes`) are set for tasks on agents' nodes
/// only (the simulator's have none, so its output has none of them).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskReport {
    pub name: String,
    pub rank: Option<u32>,
    pub sub_job: String,
    pub node: Option<String>,
    /// The node's HyperNodes from the lowest tier up, the virtual root left out.
    pub hyper_nodes: Vec<String>,
    /// Exclusive PUs (OS indexes in list form, `0-3,8-11`), for a task with a NUMA policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
    /// OS indexes of the NUMA nodes the task uses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub numa_nodes: Vec<u32>,
    /// Bytes of memory per NUMA node (OS index).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub memory_numa: BTreeMap<u32, u64>,
    /// PCI bus ids (`0000:3b:00.0`; an index on nodes described only by resources).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<String>,
    /// RDMA devices and fast NICs local to the task's GPUs (or CPUs), shared: `mlx5_0`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nics: Vec<String>,
    /// Where the task runs on its node ([`crate::JobSpec::working_dir`]); the
    /// simulator has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<TaskStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that ended it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// On its node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<u64>,
    /// Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<u64>,
    /// User plus system CPU time, once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<f64>,
    /// Peak resident memory, once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rss_bytes: Option<u64>,
    /// Why it never ran, was lost or was killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// CPU use (cores) its agent last sampled, while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_cores: Option<f32>,
    /// Resident memory its agent last sampled, while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobReport {
    /// The number the planner gave the job at submit (1, 2, …): tells jobs of one name
    /// apart once an ended job's name is used again.
    #[serde(default)]
    pub id: u64,
    pub name: String,
    pub status: JobStatus,
    pub reason: Option<String>,
    pub submit_time: u64,
    pub start_time: Option<u64>,
    pub end_time: Option<u64>,
    pub allocated_hyper_node: Option<String>,
    /// Who submitted it (they and admins may cancel it); `sim` in the simulator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Once it ended (tasks on agents' nodes only): 0, or the first non-zero task exit
    /// code by end time (a signal counts 128 + its number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    pub tasks: Vec<TaskReport>,
    /// A pending job's reservation (backfill): when it is expected to start, and where.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<ReservationReport>,
    /// Its queue (`default` when it named none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// A waiting job's place in the order: each factor and the score they make.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<PriorityReport>,
    /// The job that preempted it last (it is then `preempted`, or pending again when it
    /// asks `requeue`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_by: Option<String>,
    /// A pending job's preemption under way: the HyperNode freed for it and its victims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempting: Option<Nomination>,
    /// An element of an array: which array, which index (`status` folds an array into
    /// one line unless asked `--expand`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<crate::array::ArrayElement>,
    /// Its steps (`hyperplan exec` into it), the newest the planner keeps: when each
    /// began and ended and how (JSON only; the table leaves them out).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepReport>,
}

/// One step of a job (a `hyperplan exec` into it), as `status --output json` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepReport {
    /// Numbered from 0 in the job.
    pub step: u32,
    /// Where it ran.
    pub nodes: Vec<String>,
    /// When it began (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<u64>,
    /// When it ended (Unix seconds); `None` while it runs (or when its end was never
    /// heard, its planner having stopped meanwhile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<u64>,
    /// The first non-zero exit code of its nodes, else 0; `None` when no node reported
    /// one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The first signal that killed it on a node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Its command line (the first 256 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

/// The HyperNode a preemption frees for a job (held for it until it starts), the nodes
/// its tasks will use there, and the jobs preempted for it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Nomination {
    /// The HyperNode (`None`: the whole cluster, a job without topology over several).
    pub hyper_node: Option<String>,
    /// The nodes held for it (whole, against every other job) until it starts.
    pub nodes: Vec<String>,
    /// The jobs preempted for it, by name.
    pub victims: Vec<String>,
    /// When it was decided (Unix seconds).
    pub at: u64,
}

/// A waiting job's multifactor priority (see the README's formula).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PriorityReport {
    /// Its queue's priority (compared before the score).
    pub queue_priority: i32,
    /// The weighted sum.
    pub score: f64,
    /// The job's own priority.
    pub job: i32,
    /// Fair-share factor, 0 to 1.
    pub fairshare: f64,
    /// Age factor, 0 to 1.
    pub age: f64,
    /// Size factor, 0 to 1.
    pub size: f64,
    /// Its place among the waiting jobs in the allocate walk's order: 1 goes first.
    /// Jobs waiting past `[scheduler] starvation`, then holders of kept reservations,
    /// go before the score's order.
    pub rank: u32,
    /// Of how many waiting jobs.
    pub of: u32,
}

/// Room held for a pending job: its expected start and the nodes kept for it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReservationReport {
    /// Expected start (Unix seconds; virtual seconds in `simulate`).
    pub start: u64,
    /// The lowest HyperNode holding every reserved node; `None`: several at the top.
    pub hyper_node: Option<String>,
    /// The reserved nodes, by name, sorted.
    pub nodes: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub placed: u32,
    pub pending: u32,
    pub rejected: u32,
    pub makespan: u64,
    /// Jobs preempted (each time one is), in `simulate`; left out when none was.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub preemptions: u32,
    /// Work those preemptions lost: seconds run × CPUs; left out when none was.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub lost_cpu_seconds: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub jobs: Vec<JobReport>,
    pub summary: Summary,
    /// Problems a working planner survives: broken HyperNodes, unknown tier names.
    #[serde(default)]
    pub warnings: Vec<String>,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}
