//! What a running planner tells people: its nodes, its HyperNode tree and why a job is
//! where it is. The planner's replies carry these as JSON (`hyperplan nodes --output
//! json`, …); job status reuses the simulator's [`crate::report::JobReport`]. Field names
//! (camelCase) are an interface.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::report::JobReport;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeState {
    /// Registered and heartbeating: its resources are candidates.
    Ready,
    /// Missed heartbeats or disconnected: left out of placement until it is back.
    NotReady,
}

/// Free and total of one resource.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreeTotal {
    pub free: u64,
    pub total: u64,
}

/// `hyperplan nodes --output json` is `{"nodes": [NodeStatus, …]}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    pub name: String,
    pub state: NodeState,
    pub labels: BTreeMap<String, String>,
    /// Whole CPUs (PUs).
    pub cpus: FreeTotal,
    pub gpus: FreeTotal,
    /// Bytes.
    pub memory: FreeTotal,
    pub numa_nodes: u32,
    /// InfiniBand ports in state ACTIVE, and all of them.
    pub ib_ports: FreeTotal,
    /// Seconds since the last heartbeat (`None` for nodes that never sent one).
    pub last_heartbeat_secs: Option<u64>,
    /// Tasks holding resources on it.
    pub running_tasks: u32,
    /// How its agent confines tasks: `cgroup`, `affinity` or `none` (`None`: no agent
    /// link now, or an agent that does not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confinement: Option<String>,
    /// Why a NotReady node is not coming back by itself (its agent was refused, and
    /// why); `None` when nothing is known beyond its state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// An admin drained it (`hyperplan nodes drain`): it takes no new task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<DrainStatus>,
    /// What its GPUs say of their NVLink fabric; `None`: nothing (no NVIDIA GPU, or no
    /// fabric information).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink: Option<NvlinkStatus>,
    /// Its health checks that are not ok (degraded or failed), as its agent last said.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health: Vec<crate::health::CheckResult>,
}

/// A node's NVLink domain as `hyperplan nodes` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NvlinkStatus {
    pub state: NvlinkState,
    /// The lowest NVLink HyperNode holding it (`nvl-6b8d7c1e`, or its partition
    /// `nvl-6b8d7c1e-c2`); `None` when in none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hyper_node: Option<String>,
    /// What is degraded, or why it is in no domain, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Where a node stands with its NVLink domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NvlinkState {
    /// In a domain, all GPUs healthy.
    Ok,
    /// In a domain, some GPU reports fabric trouble: it is placed on last.
    Degraded,
    /// NVLink inside the machine only (HGX/DGX), or no fabric: in no domain.
    None,
    /// Some GPU has not finished fabric registration.
    Registering,
    /// Fabric registration failed.
    Failed,
    /// Its GPUs report different domains or partitions.
    Disagree,
}

impl NvlinkState {
    pub fn as_str(self) -> &'static str {
        match self {
            NvlinkState::Ok => "ok",
            NvlinkState::Degraded => "degraded",
            NvlinkState::None => "none",
            NvlinkState::Registering => "registering",
            NvlinkState::Failed => "failed",
            NvlinkState::Disagree => "disagree",
        }
    }
}

/// A drained node's drain (`hyperplan nodes`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainStatus {
    /// `draining` while tasks still run on it, then `drained`.
    pub state: DrainState,
    /// `--reason`, as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The admin who drained it (their certificate's name).
    pub by: String,
    /// Since when (Unix seconds).
    pub since: u64,
}

/// Whether a drained node still runs tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DrainState {
    /// Drained, with tasks still running on it.
    Draining,
    /// Drained and idle: it may be taken down, or removed.
    Drained,
}

impl DrainState {
    /// As `hyperplan nodes` shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Draining => "draining",
            Self::Drained => "drained",
        }
    }
}

/// `hyperplan nodes drain|resume|remove --output json`: what was done, per node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodesChanged {
    /// `drain`, `resume` or `remove`.
    pub action: String,
    /// One line per node, by name.
    pub nodes: Vec<NodeChange>,
}

/// What a drain, resume or remove did to one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeChange {
    pub name: String,
    /// What happened, in words ("drained: 3 tasks still run on it", "was not drained").
    pub note: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeList {
    pub nodes: Vec<NodeStatus>,
}

/// One HyperNode of the tree (`hyperplan hypernodes --output json` is
/// `{"hyperNodes": [...], "warnings": [...]}`), parents before children.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HyperNodeStatus {
    pub name: String,
    pub tier: u32,
    pub tier_name: Option<String>,
    /// Which discovery source owns it: `static`, `label`, `ibnetdiscover`, `ufm`, `slurm`.
    pub source: String,
    pub parent: Option<String>,
    pub children: Vec<String>,
    /// Real nodes under it, and how many of them are Ready.
    pub nodes: u32,
    pub ready_nodes: u32,
    /// Its nodes whose health checks find an InfiniBand port degraded (errors rising, a
    /// slower lane; a port down or narrow drains its node instead): hard-topology
    /// jobs take a healthy HyperNode of the same tier first.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub fabric_degraded: u32,
    /// Links between its members and its own switches that its discovery source found
    /// narrower or slower than their neighbours (an `ibnetdiscover` dump's rates):
    /// `gpu017 mlx5_0 port 1 – sw95 port 23: 1xHDR (expected 4xHDR), line 812`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub degraded_links: Vec<String>,
    /// Such links anywhere inside it, its children's included: hard-topology jobs take a
    /// HyperNode of the same tier without any first.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub links_degraded: u32,
    /// Per resource (`cpu` in millicores, `memory` in bytes, `nvidia.com/gpu`, …).
    pub free: BTreeMap<String, u64>,
    pub allocatable: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HyperNodeTree {
    pub hyper_nodes: Vec<HyperNodeStatus>,
    /// HyperNodes left out and why (a cycle, a second parent, a member matching nothing).
    pub warnings: Vec<String>,
    /// Every discovery source: what it owns now, when it last worked, and its error.
    #[serde(default)]
    pub sources: Vec<SourceStatus>,
}

/// `hyperplan topology export` against a running planner: its HyperNodes (members
/// resolved to names) as Volcano HyperNode manifests, one YAML document each.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifests {
    pub manifests: String,
}

/// One discovery source (`[[discovery]]` in planner.toml) as the planner sees it now.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceStatus {
    /// The entry's `name` (its kind unless the config names it).
    pub name: String,
    /// `static`, `label`, `ibnetdiscover`, `ufm` or `slurm`.
    pub kind: String,
    /// What it reads: a file, a command, a URL (empty for label discovery).
    pub target: String,
    /// HyperNodes it owns now (its last good result, filtered to the planner's nodes).
    pub hyper_nodes: u32,
    /// Unix seconds of the last attempt and of the last one that worked (`None`: never).
    pub last_attempt: Option<u64>,
    pub last_success: Option<u64>,
    /// Why the last attempt failed; `None` when it worked. The HyperNodes of the last good
    /// result stay while this is set.
    pub error: Option<String>,
    /// What the last good result held, for people (`121 hosts on 161 CAs, 40 switch-internal
    /// CAs left out`).
    pub summary: String,
    /// Hosts the source names that are no planner node (left out of its HyperNodes).
    #[serde(default)]
    pub unknown_hosts: Vec<String>,
    /// Fabric CAs nothing maps to a host (ibnetdiscover), as `H-<guid> "description"`.
    #[serde(default)]
    pub unmapped: Vec<String>,
    /// What the source tolerated in its input.
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// `hyperplan status --output json`: the same job objects `simulate` prints.
///
/// The planner answers a status request a page at a time, each within its largest frame
/// (`[server] maxFrameBytes`): a page ends between two jobs, or inside a job's task list
/// (the next page then starts with the same job, by id, and the rest of its tasks), and
/// says where the next starts. The CLI asks for every page and joins them, so what it
/// prints has every job whole and no `next`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JobList {
    pub jobs: Vec<JobReport>,
    /// Where the next page starts; `None` on the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<StatusCursor>,
}

/// Where a page of a status answer starts: the job at `index` in the answer's order,
/// which should be job `id` (looked for by id when jobs came or went meanwhile), from
/// its task `task` (0: the whole job).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCursor {
    pub index: u64,
    pub id: u64,
    pub task: u64,
}

/// `hyperplan submit --output json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submitted {
    pub submitted: Vec<String>,
    /// Each submitted job's id (see `JobReport::id`), in the same order.
    #[serde(default)]
    pub ids: Vec<u64>,
}

/// One planner's answer to `Planners` (`hyperplan planners`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannerInfo {
    /// `leader` or `standby` (the CLI adds `unreachable` for one that did not answer).
    pub role: String,
    /// The newest epoch this planner knows (its own when it leads).
    pub epoch: u64,
    /// The address the leader advertises, as this planner knows it.
    pub leader: Option<String>,
    /// Where the state is (`embedded /var/lib/…` or `etcd http://…`).
    pub store: String,
    /// Where ended jobs go and how far behind that is (the leader; `None`: a standby,
    /// or accounting is off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accounting: Option<AccountingInfo>,
}

/// Where the leader's accounting stands (`hyperplan planners`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountingInfo {
    /// `sqlite /var/lib/hyperplan/accounting.db` or `postgres://db1:5432/hyperplan`.
    pub database: String,
    /// The newest end written (Unix seconds); `None`: nothing yet, or not known (the
    /// database has not answered since the start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_until: Option<u64>,
    /// Seconds since the oldest ended job not yet written ended; 0: up to date.
    pub behind_secs: u64,
    /// Jobs written since the planner started leading.
    pub written: u64,
    /// The last error, while it lasts, and since when (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_since: Option<u64>,
}

/// `hyperplan planners --output json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannerList {
    pub planners: Vec<PlannerRow>,
}

/// One row of `hyperplan planners`: the address as given to the CLI and what it said.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannerRow {
    pub address: String,
    /// `leader`, `standby` or `unreachable`.
    pub role: String,
    /// `null` for an unreachable planner.
    pub epoch: Option<u64>,
    /// The leader this planner names (absent when unreachable or none leads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    /// Why it is unreachable, or what it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The leader's accounting: where ended jobs go and how far behind it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accounting: Option<AccountingInfo>,
}

/// `hyperplan cancel --output json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancelled {
    pub cancelled: String,
}

/// `hyperplan hold|release --output json`: what was done (`held`, `released`) to which jobs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldsChanged {
    pub action: String,
    pub jobs: Vec<String>,
}

/// A piece of a task's output (`hyperplan logs --output json`), read on its node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogPiece {
    pub job: String,
    pub task: String,
    pub node: String,
    /// Where `data` starts in the file.
    pub offset: u64,
    /// The text read (UTF-8; bytes that are not become U+FFFD, and a character cut at
    /// the end is left for the next read).
    pub data: String,
    /// Where the next read starts.
    pub next_offset: u64,
    /// The file's length when it was read.
    pub size: u64,
    /// The task has ended: once `next_offset` reaches `size` there is no more to come.
    pub ended: bool,
}

/// `hyperplan explain JOB --output json`: the gradient search as the planner sees it now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    pub job: JobReport,
    /// The hard tier limit in force (`None`: no limit).
    pub tier_limit: Option<u32>,
    /// Tasks still to place for the gang minimum.
    pub need: u64,
    /// Every HyperNode within the limit, lowest tier first, then by name.
    pub candidates: Vec<Candidate>,
    /// A waiting job's preemption: the one under way, who it would preempt and why
    /// (before it happens), or why it can preempt no one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<String>,
}

/// One HyperNode the gradient search looks at, and what it found there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    pub name: String,
    pub tier: u32,
    /// How many of the job's pending tasks fit in it now (capacity, per task shape).
    pub room: u64,
    /// Whether the job's current placement lies inside it.
    pub holds_job: bool,
    /// Why it was or was not taken, in words.
    pub verdict: String,
}

/// `hyperplan queues`: every queue, `default` first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueuesReport {
    pub queues: Vec<QueueStatus>,
}

/// One queue: what it is guaranteed and may use, what it uses, and its jobs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueStatus {
    pub name: String,
    pub priority: i32,
    /// Fair-share weight among queues.
    pub weight: f64,
    pub preemptible: bool,
    /// Guaranteed, in base units (millicores, bytes, counts).
    pub quota: BTreeMap<String, u64>,
    /// The most it may use (resources not named: no limit).
    pub limit: BTreeMap<String, u64>,
    pub max_per_user: BTreeMap<String, u64>,
    pub max_running_jobs: Option<u32>,
    /// What its running tasks hold, per resource it bounds or fair share weighs.
    pub used: BTreeMap<String, u64>,
    /// What it uses beyond its quota (borrowed idle room), per resource with a quota.
    pub borrowed: BTreeMap<String, u64>,
    pub running_jobs: u32,
    pub pending_jobs: u32,
    /// Its fair-share factor among queues (0 to 1).
    pub fairshare: f64,
    /// Its decayed usage (weighted resource-seconds).
    pub usage: f64,
    /// Its busiest users (by usage, at most 5).
    pub users: Vec<UserShare>,
    pub default_time_limit: Option<u64>,
    pub max_time_limit: Option<u64>,
    /// Who may submit (both empty: everyone).
    pub allowed_users: Vec<String>,
    pub allowed_groups: Vec<String>,
}

/// One user's share of a queue.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserShare {
    pub user: String,
    /// Decayed usage (weighted resource-seconds).
    pub usage: f64,
    /// The fair-share factor a job of theirs in this queue gets now.
    pub fairshare: f64,
    /// What they hold now.
    pub used: BTreeMap<String, u64>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
