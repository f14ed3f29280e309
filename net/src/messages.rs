//! The wire messages: what agents, the planner and the CLI say to each other, one
//! message per frame (see `frame`), MessagePack with named fields.
//!
//! Every connection opens with a [`Hello`] in both directions. Then an agent speaks
//! [`AgentMessage`] and hears [`PlannerToAgent`]; a CLI client sends [`Request`] and
//! hears [`Response`]. Enums are externally tagged (`{"Variant": {..}}`), which
//! round-trips through rmp-serde; field and variant names are the interface, so rename
//! nothing without bumping [`PROTOCOL_VERSION`].

use std::collections::BTreeMap;

use hyperplan_shared::taskend::TaskEnd;
use hyperplan_shared::topology::NodeTopology;
use serde::{Deserialize, Serialize};

/// Bumped on any incompatible change to the messages below. 7: [`RequestCommand::Queues`]
/// (a planner of 6 cannot decode it and would close the connection as a bad frame; with
/// the bump the CLI says which versions differ instead). 8: PMI fences
/// ([`AgentMessage::Fence`], [`PlannerToAgent::FenceDone`]). 9: a `Kill`'s warning signal
/// (preemption), which an agent of 8 would ignore, sending SIGTERM instead. 11: status
/// answers in pages (`RequestCommand::Status::page`, `JobList::next`), of which a CLI of 10
/// would show the first alone. 12: `RequestCommand::Hold`/`Release` (holds, begin times).
/// 13: arrays and dependencies (`Submit::array`/`dependency`, `JobWorld::array`), which a
/// planner of 12 would drop, running one job where an array was asked. 14: accounting
/// (`RequestCommand::History`/`Report`, `Submit::account`).
pub const PROTOCOL_VERSION: u32 = 14;

/// Who is speaking on a connection. The certificate says the same (its OU), and the
/// planner checks that the two agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Role {
    Agent,
    Client,
    Planner,
}

/// The first frame of every connection, in both directions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub version: u32,
    pub role: Role,
    /// Node name for an agent, user name for a client, `hyperplan-planner` for the planner.
    pub name: String,
}

impl Hello {
    /// A hello at this build's [`PROTOCOL_VERSION`].
    pub fn new(role: Role, name: impl Into<String>) -> Self {
        Self {
            version: PROTOCOL_VERSION,
            role,
            name: name.into(),
        }
    }
}

/// Agent → planner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum AgentMessage {
    /// Sent once per connection, after the hellos. `node` must match the certificate's CN.
    Register {
        version: u32,
        node: String,
        labels: BTreeMap<String, String>,
        topology: NodeTopology,
        /// [`topology_hash`] of `topology`.
        topology_hash: u64,
        /// How the node confines its tasks; `None` from an agent that does not say.
        #[serde(default)]
        confinement: Option<Confinement>,
        /// The address other nodes reach this one at (`MASTER_ADDR` when it holds rank
        /// 0): the agent's `advertiseAddress`; `None`: the address its connection comes from.
        #[serde(default)]
        advertise_address: Option<String>,
        /// The newest planner epoch this agent has obeyed (0: none, or an agent that does
        /// not say): a planner at an older epoch refuses it before taking the node, with
        /// [`close::STALE_EPOCH`](crate::hello::close::STALE_EPOCH).
        #[serde(default)]
        epoch: u64,
    },
    Heartbeat {
        seq: u64,
        /// 1-minute load average.
        load: f64,
        /// Free bytes per NUMA node, by NUMA OS index.
        free_memory: Vec<(u32, u64)>,
        /// The tasks whose shepherds run on the node, with their use now: the planner
        /// kills those it does not know (orphans) and shows the figures.
        running_tasks: Vec<RunningTask>,
        /// The TCP ports of the `MASTER_PORT` range bound on the node now (sorted): the
        /// planner chooses a job's `MASTER_PORT` among the others.
        #[serde(default)]
        ports_in_use: Vec<u16>,
        /// Why the node cannot start tasks now (a shepherd's fork failed: out of
        /// processes or memory), until a start works again; `None`: it can. The planner
        /// places nothing new there meanwhile. (Missing from an agent that does not say.)
        #[serde(default)]
        strained: Option<String>,
        /// Every health check's result, sent on a link's first heartbeat and whenever a
        /// check's state or code changed; `None`: nothing changed (or an agent that does
        /// not check).
        #[serde(default)]
        health: Option<Vec<hyperplan_shared::health::CheckResult>>,
    },
    /// The probe saw a real change (the hash moved), e.g. an IB port went down.
    TopologyChanged { topology: NodeTopology, topology_hash: u64 },
    /// A task runs (its shepherd started it). Sent until the planner acknowledges it
    /// ([`PlannerToAgent::Ack`]); a repeat is harmless.
    TaskStarted(TaskStarted),
    /// A task ended. Kept on the node's disk and sent (again after a reconnect or an
    /// agent restart) until the planner acknowledges it; a repeat is harmless.
    TaskFinished(Box<TaskFinished>),
    /// A piece of a task's output, the answer to [`PlannerToAgent::ReadLog`].
    Log(LogChunk),
    /// Every rank of a job on this node entered a PMI barrier: the pairs they put since
    /// the last one. Sent again on a new connection until its `FenceDone` comes.
    Fence(PmiFence),
}

/// How an agent confines the tasks it runs (`hyperplan nodes` shows it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Confinement {
    /// Each task in its own cgroup v2 (`cpuset.cpus`, `cpuset.mems`, `memory.max`), and
    /// pinned.
    Cgroup,
    /// Pinned to its PUs (`sched_setaffinity`) and NUMA memory; no cgroup of its own.
    Affinity,
    /// Not pinned (`--pin off`, or a described topology that is not this machine).
    None,
}

impl Confinement {
    /// The word shown and sent: `cgroup`, `affinity` or `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            Confinement::Cgroup => "cgroup",
            Confinement::Affinity => "affinity",
            Confinement::None => "none",
        }
    }
}

impl std::fmt::Display for Confinement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Names one task instance: a job's name may be used again, its id not.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TaskRef {
    pub job: String,
    pub job_id: hyperplan_shared::ids::JobId,
    /// `<task name>-<replica>`, for people and file names.
    pub task: String,
    /// The task's place in its job (spec order, then replica): with `job_id`, what the
    /// planner finds the task by (protocol 6; never parsed from `task`).
    #[serde(default)]
    pub index: u32,
}

/// A running task and its use, sampled by the agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunningTask {
    pub task: TaskRef,
    /// The task's pid (its process group); 0 while it is being started.
    pub pid: u32,
    /// CPU use of its process tree since the last sample, in cores (1.0 = one PU busy).
    pub cpu_cores: f32,
    /// Resident memory of its process tree.
    pub rss_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskStarted {
    pub task: TaskRef,
    pub pid: u32,
    pub start_time_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskFinished {
    pub task: TaskRef,
    pub end: TaskEnd,
}

/// Bytes of a task's output file from `offset`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogChunk {
    /// The `request` of the [`PlannerToAgent::ReadLog`] it answers.
    pub request: u64,
    /// Where `data` starts in the file.
    pub offset: u64,
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
    /// The file's length when it was read: more to read when `offset + data.len()` is less.
    pub size: u64,
    /// Why nothing could be read (no such task here, the file is gone).
    pub error: Option<String>,
}

/// Planner → agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PlannerToAgent {
    Registered {
        node: String,
        heartbeat_interval_ms: u64,
        /// The planner's epoch: raised at every start and every new leader. An agent
        /// refuses a planner (and its orders) older than the newest epoch it has seen.
        #[serde(default)]
        epoch: u64,
        /// The silence that makes a node NotReady plus `nodeLostAfter`, in ms: the
        /// planner starts none of the node's restartable tasks elsewhere before that long
        /// (and a margin) after it last heard the node. The node stops those tasks itself
        /// once that long has passed since the planner last acknowledged a heartbeat (its
        /// node-lost fence: `HeartbeatAck`, `LaunchTask::fence`).
        /// `None`: a planner that never restarts tasks elsewhere on its own.
        #[serde(default)]
        fence_after_ms: Option<u64>,
    },
    /// The planner heard heartbeat `seq`: the node was heard no earlier than when it sent
    /// it (what its node-lost fence counts from).
    HeartbeatAck { seq: u64 },
    /// A job's ranks and nodes, sent to each of its nodes before the `Launch` of its
    /// first task there (again, replacing it, when later tasks of the job are placed).
    Job(Box<JobWorld>),
    /// One task to start. A repeat (same job id and task) starts nothing.
    Launch(Box<LaunchTask>),
    /// Stop a task: SIGTERM to its process group, SIGKILL `grace_secs` later. A task
    /// the node does not run, or one already being killed, is left as it is.
    Kill {
        task: TaskRef,
        grace_secs: u64,
        /// The sending planner's epoch (see `Registered`).
        #[serde(default)]
        epoch: u64,
        /// Sent first instead of SIGTERM (a preempted job's `preemptSignal`, its
        /// checkpoint hook); `None`: SIGTERM.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
    },
    /// The planner has the agent's `TaskStarted` (`finished: false`) or `TaskFinished`
    /// (`finished: true`) of this task: stop sending it (and, for an end, forget it).
    Ack { task: TaskRef, finished: bool },
    /// In place of `Registered`: this planner is a standby (`[store] backend = "etcd"`);
    /// `leader` is the address the leader advertises, when one leads. The agent goes there.
    NotLeader { leader: Option<String> },
    /// Read up to `max_bytes` of the task's output file from `offset` (`stderr`: its
    /// error file, when that is another file); answered by [`AgentMessage::Log`].
    ReadLog {
        request: u64,
        task: TaskRef,
        stderr: bool,
        offset: u64,
        max_bytes: u32,
        /// The output of this step of the job (`hyperplan exec`) on the node instead.
        #[serde(default)]
        step: Option<u32>,
    },
    /// Every node of the job reached fence `seq`: the pairs all of them put (the
    /// receiving node's own included). Its ranks leave the barrier.
    FenceDone(PmiFence),
    /// Fence `seq` of the job cannot complete (its key-value space grew past the
    /// planner's bound, the job ended): its ranks get an error from the barrier.
    FenceFailed {
        job_id: hyperplan_shared::ids::JobId,
        seq: u64,
        reason: String,
    },
}

/// One PMI fence of a job as a node (or, in `FenceDone`, the planner) has it: the
/// key-value pairs put before it, in the order they were put.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PmiFence {
    pub job: String,
    pub job_id: hyperplan_shared::ids::JobId,
    /// 1 for a job's first fence, then one more each.
    pub seq: u64,
    pub pairs: Vec<(String, String)>,
}

/// What every task of a job needs to know about the others (ranks, nodes, the master's
/// address): the node list once per node, not once per task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobWorld {
    pub job: String,
    pub job_id: hyperplan_shared::ids::JobId,
    /// The job's nodes, in the order of their first rank.
    pub nodes: Vec<String>,
    /// By rank: the index in `nodes` of the task's node (its length is the world size).
    pub node_of_rank: Vec<u32>,
    /// `MASTER_ADDR`: the address of rank 0's node as the planner sees its agent.
    pub master_addr: String,
    /// `MASTER_PORT`: the job's `masterPort`, or one derived from its id.
    pub master_port: u16,
    /// `batch`: rank 0 runs the job's command with the allocation described (MPI
    /// hostfiles, `mpirun`'s launch agent); the other tasks hold their nodes.
    #[serde(default)]
    pub launch: hyperplan_shared::job::LaunchMode,
    /// Times lost tasks of the job were started again elsewhere (`onNodeLost:
    /// replace`): `HYPERPLAN_RESTART`, and the job's `restart` file. A `Job` frame that
    /// changes the world of a job already running on a node rewrites its hostfile there.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restart: u32,
    /// `Some` for a job with `compat: slurm` (or from `hyperplan sbatch`): what its
    /// tasks' `SLURM_*` variables need beyond the rest of the frame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<hyperplan_shared::taskenv::SlurmJob>,
    /// An element of an array: `HYPERPLAN_ARRAY_*` (and `SLURM_ARRAY_*`), `%A` and `%a`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<hyperplan_shared::array::ArrayElement>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One task to start, as the planner placed it and the job asked for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchTask {
    pub job: String,
    pub job_id: hyperplan_shared::ids::JobId,
    /// `<task name>-<replica>`.
    pub task: String,
    /// The task's place in its job (see [`TaskRef::index`]).
    #[serde(default)]
    pub index: u32,
    /// Topology-ordered, 0 … world size − 1 (see [`JobWorld`]).
    pub rank: u32,
    /// The Unix user to run as: the CN of the certificate that submitted the job.
    pub user: String,
    pub argv: Vec<String>,
    /// The job's own variables; they win over everything hyperplan sets.
    pub env: BTreeMap<String, String>,
    /// Absolute (the submit directory or the task's `workingDir` resolved against it);
    /// `None` when the job said nothing usable (the agent refuses the task then).
    pub working_dir: Option<String>,
    /// Output and error file patterns (`%j %x %i %A %a %t %r %n %u`), relative to the working
    /// directory.
    pub output: String,
    pub error: String,
    /// Seconds to SIGTERM (SIGKILL 10 s later); `None` = no limit.
    pub time_limit_secs: Option<u64>,
    /// The node's HyperNodes, lowest tier first.
    pub hyper_nodes: Vec<String>,
    /// PUs in list form (`0-3,8-11`); empty = not pinned.
    pub cpus: String,
    pub numa_nodes: Vec<u32>,
    /// Bind memory to `numa_nodes` (the task's NUMA policy is not `none`).
    pub bind_memory: bool,
    /// GPU PCI bus ids.
    pub gpus: Vec<String>,
    /// RDMA devices (rails) local to its GPUs or CPUs.
    pub nics: Vec<String>,
    /// The task's memory request in bytes (`memory.max` of its cgroup where the agent
    /// confines tasks by cgroup); `None` when the job asked for none.
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    /// The job's `maxProcesses` for the task (its cgroup's `pids.max`, at most the
    /// agent's `taskPidsMax`); `None` when the job said nothing.
    #[serde(default)]
    pub max_processes: Option<u64>,
    /// The sending planner's epoch (see [`PlannerToAgent::Registered`]).
    #[serde(default)]
    pub epoch: u64,
    /// `mpi` of the job; `None`: the agent's `[exec] defaultMpi`.
    #[serde(default)]
    pub mpi: Option<hyperplan_shared::job::MpiMode>,
    /// The job's credential (`HYPERPLAN_CREDENTIAL`): what its tasks `hyperplan exec` with.
    #[serde(default)]
    pub credential: Option<String>,
    /// Which placement of this task it is: the job's requeues plus its tasks' restarts
    /// elsewhere. A node that ran an earlier one starts a later one (a requeued job back on
    /// it); the same one again starts nothing.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub run: u32,
    /// The planner starts this task again elsewhere (`onNodeLost: replace` or `requeue`)
    /// once its node is lost: the node must stop it first, when the planner has not
    /// acknowledged a heartbeat for `fence_after_ms` (see `Registered`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fence: bool,
}

/// `hyperplan cancel`'s default grace between SIGTERM and SIGKILL.
pub const DEFAULT_GRACE_SECS: u64 = 10;

fn default_grace() -> u64 {
    DEFAULT_GRACE_SECS
}

/// CLI → planner. `id` is echoed in the matching [`Response`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub id: u64,
    pub command: RequestCommand,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequestCommand {
    /// A job file as text; the planner parses it (so errors name the file).
    Submit {
        file_name: String,
        text: String,
        /// The directory `hyperplan submit` ran in (absolute): the default working
        /// directory of the jobs' tasks, and where relative ones start.
        #[serde(default)]
        submit_dir: Option<String>,
        /// `--hold`: every job of the file is submitted held.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        hold: bool,
        /// `--begin`, resolved by the client to Unix seconds: every job's begin time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        begin: Option<u64>,
        /// `--array`: every job of the file is an array of these indices.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        array: Option<hyperplan_shared::array::ArraySpec>,
        /// `--dependency`: every job of the file waits for it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dependency: Option<hyperplan_shared::dependency::Dependency>,
        /// `--account`: every job of the file is charged to it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        account: Option<String>,
    },
    /// `hyperplan hold JOB...`: the owner's or an admin's; answered with a
    /// `hyperplan_shared::status::HoldsChanged` once committed.
    Hold {
        jobs: Vec<String>,
    },
    /// `hyperplan release JOB...`: an admin's hold only an admin may release.
    Release {
        jobs: Vec<String>,
    },
    Cancel {
        job: String,
        /// Seconds between SIGTERM and SIGKILL for its tasks (`--grace`).
        #[serde(default = "default_grace")]
        grace_secs: u64,
    },
    /// One job (the newest of that name), or the newest job of every name; with `all`,
    /// every job of the name(s), ended ones included. Answered a page at a time (see
    /// `hyperplan_shared::status::JobList`).
    Status {
        job: Option<String>,
        #[serde(default)]
        all: bool,
        /// Jobs that have not ended and those that ended in the last `since_secs`
        /// seconds (the stored ones included), each of them.
        #[serde(default)]
        since_secs: Option<u64>,
        /// Where the page starts: the `next` of the page before; `None` for the first.
        #[serde(default)]
        page: Option<hyperplan_shared::status::StatusCursor>,
    },
    Nodes,
    /// `hyperplan nodes drain|resume|remove`: admins only; answered with a
    /// `hyperplan_shared::status::NodesChanged` once the change is committed.
    NodeAdmin {
        action: NodeAction,
        nodes: Vec<String>,
    },
    HyperNodes,
    /// The HyperNodes the planner places with, as Volcano manifests (`{"manifests":
    /// "<multi-document YAML>"}`): members resolved to node names, broken ones left out.
    Manifests,
    Explain {
        job: String,
    },
    /// This planner's role, epoch and the leader it knows (`hyperplan planners`), answered
    /// by standbys too, with a `hyperplan_shared::status::PlannerInfo`.
    Planners,
    /// `hyperplan history`: ended jobs from the accounting database, answered with a
    /// `hyperplan_shared::history::History`. Under `privateData` a plain user's question
    /// is narrowed to their own jobs.
    History(hyperplan_shared::history::HistoryQuery),
    /// `hyperplan report`: sums over a period from the accounting database, answered with
    /// a `hyperplan_shared::history::Report`.
    Report(hyperplan_shared::history::ReportQuery),
    /// Every queue (`[[queue]]` in planner.toml, `default` first): quota, limit, use,
    /// jobs, fair share and its busiest users (`hyperplan queues`). Answered with a
    /// `hyperplan_shared::status::QueuesReport`; any user may ask.
    Queues,
    /// Up to `max_bytes` of a task's output from `offset` (the job's rank-0 task when
    /// `task` is `None`), read on its node; only its owner or an admin. Answered with a
    /// `hyperplan_shared::status::LogPiece`.
    Logs {
        job: String,
        task: Option<String>,
        #[serde(default)]
        stderr: bool,
        offset: u64,
        max_bytes: u32,
        /// For a step (`job` is `JOB.STEP`): its output on this node (default: the first
        /// it ran on).
        #[serde(default)]
        node: Option<String>,
    },
    /// `hyperplan exec`: the stream becomes the command's ([`ExecFrame`]s both ways, the
    /// first from the planner `Started` or `Error`); no `Response` comes.
    Exec(ExecRequest),
}

/// What `hyperplan nodes drain|resume|remove` does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeAction {
    /// No new tasks; with `now`, the running ones end as a lost node's do.
    Drain {
        #[serde(default)]
        reason: Option<String>,
        #[serde(default)]
        now: bool,
    },
    /// Take tasks again.
    Resume,
    /// Leave the planner for good (drained and idle, or its agent gone).
    Remove,
}

/// Which of a job's nodes `hyperplan exec` runs its command on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExecNodes {
    /// Rank 0's node (the default).
    Rank0,
    /// This node, which must hold a task of the job.
    Node(String),
    /// Every node of the job, at once.
    All,
}

/// `hyperplan exec`: run a command inside a running job's allocation, on its nodes, as
/// its user. From a person (their certificate: the job's owner or an admin), or from a
/// task of the job through its node's agent with the job's `credential`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecRequest {
    pub job: String,
    pub nodes: ExecNodes,
    pub argv: Vec<String>,
    /// As ssh does: the words joined by spaces and run by `/bin/sh -c` (what `mpirun`'s
    /// remote shell expects); otherwise `argv` is executed as it is.
    #[serde(default)]
    pub shell: bool,
    /// The job's credential (`HYPERPLAN_CREDENTIAL` in its tasks' environment).
    #[serde(default)]
    pub credential: Option<String>,
}

/// Planner → agent, the first frame on a stream the planner opens: run the command in
/// `task`'s allocation (its cgroup, CPUs, environment and working directory), as `user`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecStart {
    pub task: TaskRef,
    pub user: String,
    pub argv: Vec<String>,
    pub shell: bool,
    /// The sending planner's epoch: an agent refuses an older planner's.
    pub epoch: u64,
    /// The step's number in the job: its output is kept on the node under it
    /// (`hyperplan logs JOB.STEP`).
    #[serde(default)]
    pub step: Option<u32>,
}

/// An exec stream's frames after its request. `node` numbers the nodes of `Started`
/// (always 0 between planner and agent).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExecFrame {
    /// Planner → CLI: the command starts on these nodes, as this step of the job.
    Started {
        nodes: Vec<String>,
        #[serde(default)]
        step: Option<u32>,
    },
    /// Towards the command: its standard input (to every node).
    Stdin {
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    StdinEof,
    Stdout {
        node: u32,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    Stderr {
        node: u32,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// The command ended on `node`: its exit code, or the signal that killed it.
    Exit {
        node: u32,
        code: Option<i32>,
        signal: Option<i32>,
    },
    /// It could not run (on `node`, or at all): why.
    Error {
        node: Option<u32>,
        message: String,
    },
}

/// Planner → CLI. `Ok` holds the JSON the CLI prints with `--output json`; `Err` a
/// message for the user.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub id: u64,
    pub result: Result<serde_json::Value, ResponseError>,
}

/// The planner's refusal of a request (no such job, not yours to cancel): a sentence for
/// the person who asked, and what kind of refusal it is, so that a client decides what
/// to do from the kind, never from the words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ResponseError {
    pub message: String,
    #[serde(default)]
    pub kind: RefusalKind,
}

/// What a client may do about a [`ResponseError`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RefusalKind {
    /// Asking again gives the same answer.
    #[default]
    Final,
    /// The answer may be different if asked again: a node that is away, a relay that is
    /// busy (`hyperplan logs --follow` waits and asks again).
    ForNow,
    /// A standby's answer: ask the leader (`None`: no leader yet, an election is under way).
    NotLeader { leader: Option<String> },
}

impl ResponseError {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            kind: RefusalKind::Final,
        }
    }

    /// An answer that may be different if asked again: a node that is away, a relay
    /// that is busy. The message says so (`(for now)`).
    pub fn for_now(message: impl std::fmt::Display) -> Self {
        Self {
            message: format!("{message} (for now)"),
            kind: RefusalKind::ForNow,
        }
    }

    /// Whether this is a [`ResponseError::for_now`] answer.
    pub fn is_for_now(&self) -> bool {
        self.kind == RefusalKind::ForNow
    }

    /// A standby's answer to every request but `Planners`.
    pub fn not_leader(leader: Option<&str>) -> Self {
        Self {
            message: format!(
                "not the leader; the leader is {}",
                leader.unwrap_or("unknown (an election is under way)")
            ),
            kind: RefusalKind::NotLeader {
                leader: leader.map(str::to_string),
            },
        }
    }

    /// `Some(leader)` when this is a standby's refusal (`Some(None)`: no leader yet):
    /// the CLI asks the leader instead.
    pub fn not_leader_hint(&self) -> Option<Option<&str>> {
        match &self.kind {
            RefusalKind::NotLeader { leader } => Some(leader.as_deref()),
            _ => None,
        }
    }
}

impl From<String> for ResponseError {
    fn from(message: String) -> Self {
        Self::new(message)
    }
}

#[cfg(test)]
mod not_leader {
    use super::ResponseError;

    #[test]
    fn a_standbys_refusal_names_the_leader_for_the_cli() {
        let e = ResponseError::not_leader(Some("head-2:7400"));
        assert_eq!(e.message, "not the leader; the leader is head-2:7400");
        assert_eq!(e.not_leader_hint(), Some(Some("head-2:7400")));
        assert_eq!(ResponseError::not_leader(None).not_leader_hint(), Some(None));
        assert_eq!(ResponseError::new("no job named \"x\"").not_leader_hint(), None);
        // The words do not decide: a message that reads like a standby's is not one.
        let lookalike = ResponseError::new("not the leader; the leader is head-2:7400");
        assert_eq!(lookalike.not_leader_hint(), None);
        let for_now = ResponseError::for_now("node n1 is not connected");
        assert!(for_now.is_for_now() && for_now.message.ends_with(" (for now)"));
        assert!(!ResponseError::new("job x ended (for now)").is_for_now());
    }
}

impl From<&str> for ResponseError {
    fn from(message: &str) -> Self {
        Self::new(message)
    }
}

/// FNV-1a 64 over the named MessagePack encoding of `topology` without its live
/// figures and probe warnings, which change between probes of an unchanged machine.
///
/// Stable across runs and builds: every map in `NodeTopology` is a `BTreeMap` and field
/// order is declaration order.
pub fn topology_hash(topology: &NodeTopology) -> u64 {
    let mut canonical = topology.clone();
    canonical.live = None;
    canonical.warnings.clear();
    // Encoding plain structs into a Vec cannot fail; an empty encoding would still hash.
    let bytes = rmp_serde::to_vec_named(&canonical).unwrap_or_default();
    fnv1a64(&bytes)
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use hyperplan_shared::topology::{LiveFigures, NumaNode};

    use super::*;

    fn roundtrip<T>(value: &T)
    where
        T: Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let bytes = rmp_serde::to_vec_named(value).unwrap();
        let back: T = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(&back, value);
    }

    fn topology() -> NodeTopology {
        NodeTopology {
            hostname: "n001".into(),
            architecture: "x86_64".into(),
            total_memory: 1 << 30,
            numa_nodes: vec![NumaNode {
                os_index: 0,
                local_memory: 1 << 30,
                cpus: vec![0, 1],
                distances: vec![10],
            }],
            labels: BTreeMap::from([("rack".into(), "r1".into()), ("zone".into(), "a".into())]),
            ..Default::default()
        }
    }

    #[test]
    fn fnv_matches_reference_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn hash_ignores_live_figures_and_warnings() {
        let t = topology();
        let mut live = t.clone();
        live.live = Some(LiveFigures {
            load: [1.0, 2.0, 3.0],
            numa_free_memory: BTreeMap::from([(0, 12345)]),
            uptime_seconds: 99,
        });
        live.warnings.push("could not read something".into());
        assert_eq!(topology_hash(&t), topology_hash(&live));
        let mut changed = t.clone();
        changed.numa_nodes[0].cpus.push(2);
        assert_ne!(topology_hash(&t), topology_hash(&changed));
    }

    /// A change of NVLink fabric state alone moves the hash, so the agent's re-probe sends
    /// `TopologyChanged`.
    #[test]
    fn hash_sees_gpu_fabric_changes() {
        use hyperplan_shared::gpufabric::{FabricState, GpuFabric};
        let mut pending = topology();
        let mut gpu = GpuFabric::not_supported();
        gpu.state = FabricState::InProgress;
        pending.gpu_fabric = vec![gpu.clone()];
        assert_ne!(topology_hash(&topology()), topology_hash(&pending));
        let mut done = pending.clone();
        gpu.state = FabricState::Completed;
        done.gpu_fabric = vec![gpu];
        assert_ne!(topology_hash(&pending), topology_hash(&done));
    }

    #[test]
    fn hash_is_deterministic_and_sees_label_changes() {
        assert_eq!(topology_hash(&topology()), topology_hash(&topology()));
        let mut relabeled = topology();
        relabeled.labels.insert("rack".into(), "r2".into());
        assert_ne!(topology_hash(&topology()), topology_hash(&relabeled));
    }

    #[test]
    fn hello_roundtrips() {
        for role in [Role::Agent, Role::Client, Role::Planner] {
            roundtrip(&Hello::new(role, "x"));
        }
    }

    #[test]
    fn confinement_and_memory_are_optional_on_the_wire() {
        // A Register and a Launch of a build that did not send the new fields.
        #[derive(Serialize)]
        enum OldAgent {
            Register {
                version: u32,
                node: String,
                labels: BTreeMap<String, String>,
                topology: NodeTopology,
                topology_hash: u64,
            },
        }
        let old = OldAgent::Register {
            version: PROTOCOL_VERSION,
            node: "n1".into(),
            labels: BTreeMap::new(),
            topology: topology(),
            topology_hash: 1,
        };
        let back: AgentMessage = rmp_serde::from_slice(&rmp_serde::to_vec_named(&old).unwrap()).unwrap();
        assert!(
            matches!(back, AgentMessage::Register { confinement: None, .. }),
            "{back:?}"
        );
        for (c, word) in [
            (Confinement::Cgroup, "cgroup"),
            (Confinement::Affinity, "affinity"),
            (Confinement::None, "none"),
        ] {
            assert_eq!(serde_json::to_value(c).unwrap(), word);
            assert_eq!(c.to_string(), word);
        }
    }

    #[test]
    fn every_agent_message_roundtrips() {
        let t = topology();
        let hash = topology_hash(&t);
        roundtrip(&AgentMessage::Register {
            version: PROTOCOL_VERSION,
            node: "n001".into(),
            labels: BTreeMap::from([("gpu".into(), "a100".into())]),
            topology: t.clone(),
            topology_hash: hash,
            confinement: Some(Confinement::Cgroup),
            advertise_address: Some("10.0.0.7".into()),
            epoch: 7,
        });
        roundtrip(&AgentMessage::Heartbeat {
            seq: u64::MAX,
            load: 0.25,
            free_memory: vec![(0, 1 << 33), (3, 7)],
            running_tasks: vec![RunningTask {
                task: TaskRef {
                    job: "job-1".into(),
                    job_id: 1.into(),
                    task: "w-0".into(),
                    index: 0,
                },
                pid: 4242,
                cpu_cores: 1.5,
                rss_bytes: 1 << 30,
            }],
            ports_in_use: vec![29500, 30499],
            strained: Some("cannot start a shepherd: Resource temporarily unavailable".into()),
            health: Some(vec![hyperplan_shared::health::CheckResult::bad(
                "ib:mlx5_0/1",
                hyperplan_shared::health::CheckState::Failed,
                "ib-width",
                "mlx5_0 port 1 width 1x (expected 4x)",
            )]),
        });
        let task = TaskRef {
            job: "j".into(),
            job_id: 2.into(),
            task: "w-1".into(),
            index: 1,
        };
        roundtrip(&AgentMessage::TaskStarted(TaskStarted {
            task: task.clone(),
            pid: 77,
            start_time_ms: 1_767_225_600_000,
        }));
        roundtrip(&AgentMessage::TaskFinished(Box::new(TaskFinished {
            task,
            end: TaskEnd {
                outcome: hyperplan_shared::taskend::TaskOutcome::Signaled,
                signal: Some(9),
                pid: Some(77),
                end_time_ms: 1_767_225_601_000,
                cpu_seconds: 0.25,
                max_rss_bytes: 1 << 20,
                ..TaskEnd::default()
            },
        })));
        let log = AgentMessage::Log(LogChunk {
            request: 9,
            offset: 0,
            data: b"rank 0 on n1\n\xff".to_vec(),
            size: 14,
            error: None,
        });
        roundtrip(&log);
        // Bytes travel as a binary, not as an array of small integers.
        let bytes = rmp_serde::to_vec_named(&log).unwrap();
        assert!(bytes.len() < 60, "{}", bytes.len());
        roundtrip(&AgentMessage::TopologyChanged {
            topology: t,
            topology_hash: hash,
        });
    }

    #[test]
    fn every_planner_message_roundtrips() {
        roundtrip(&PlannerToAgent::Registered {
            node: "n001".into(),
            heartbeat_interval_ms: 1000,
            epoch: 3,
            fence_after_ms: Some(300_000),
        });
        roundtrip(&PlannerToAgent::HeartbeatAck { seq: 41 });
        roundtrip(&PlannerToAgent::Job(Box::new(JobWorld {
            job: "j".into(),
            job_id: 7.into(),
            nodes: vec!["n1".into(), "n2".into()],
            node_of_rank: vec![0, 0, 1, 1],
            master_addr: "10.0.0.1".into(),
            master_port: 29507,
            launch: Default::default(),
            restart: 0,
            slurm: None,
            array: None,
        })));
        roundtrip(&PlannerToAgent::Launch(Box::new(LaunchTask {
            job: "j".into(),
            job_id: 7.into(),
            task: "w-0".into(),
            index: 0,
            rank: 0,
            user: "alice".into(),
            argv: vec!["/bin/true".into()],
            env: BTreeMap::from([("NCCL_DEBUG".into(), "INFO".into())]),
            working_dir: Some("/home/alice".into()),
            output: "hyperplan-%j-%t.out".into(),
            error: "hyperplan-%j-%t.out".into(),
            time_limit_secs: Some(60),
            hyper_nodes: vec!["leaf-1".into()],
            cpus: "0-3".into(),
            numa_nodes: vec![0],
            bind_memory: true,
            gpus: vec!["0000:3b:00.0".into()],
            nics: vec!["mlx5_0".into()],
            memory_bytes: Some(1 << 30),
            max_processes: Some(64),
            epoch: 2,
            mpi: None,
            credential: None,
            run: 0,
            fence: false,
        })));
        let task = TaskRef {
            job: "j".into(),
            job_id: 7.into(),
            task: "w-0".into(),
            index: 0,
        };
        roundtrip(&PlannerToAgent::Kill {
            task: task.clone(),
            grace_secs: 10,
            epoch: 3,
            signal: None,
        });
        roundtrip(&PlannerToAgent::Kill {
            task: task.clone(),
            grace_secs: 30,
            epoch: 3,
            signal: Some(10),
        });
        roundtrip(&PlannerToAgent::Ack {
            task: task.clone(),
            finished: true,
        });
        roundtrip(&PlannerToAgent::ReadLog {
            request: 3,
            task,
            stderr: false,
            offset: 1 << 40,
            max_bytes: 65536,
            step: Some(2),
        });
    }

    #[test]
    fn every_request_roundtrips() {
        for command in [
            RequestCommand::Submit {
                file_name: "jobs.yaml".into(),
                text: "jobs: []\n".into(),
                submit_dir: Some("/home/alice/runs".into()),
                hold: true,
                begin: Some(1_798_099_200),
                array: Some(hyperplan_shared::array::ArraySpec::parse("1-9%2").unwrap_or_else(|e| panic!("{e}"))),
                dependency: Some(
                    hyperplan_shared::dependency::Dependency::parse("afterok:a").unwrap_or_else(|e| panic!("{e}")),
                ),
                account: Some("physics".into()),
            },
            RequestCommand::Hold {
                jobs: vec!["a".into(), "b".into()],
            },
            RequestCommand::Release { jobs: vec!["a".into()] },
            RequestCommand::Cancel {
                job: "j".into(),
                grace_secs: 10,
            },
            RequestCommand::Status {
                job: None,
                all: true,
                since_secs: Some(7200),
                page: Some(hyperplan_shared::status::StatusCursor {
                    index: 3,
                    id: 41,
                    task: 1000,
                }),
            },
            RequestCommand::Status {
                job: Some("j".into()),
                all: false,
                since_secs: None,
                page: None,
            },
            RequestCommand::Nodes,
            RequestCommand::NodeAdmin {
                action: NodeAction::Drain {
                    reason: Some("firmware".into()),
                    now: true,
                },
                nodes: vec!["n1".into(), "n2".into()],
            },
            RequestCommand::NodeAdmin {
                action: NodeAction::Remove,
                nodes: vec!["n1".into()],
            },
            RequestCommand::HyperNodes,
            RequestCommand::Manifests,
            RequestCommand::Explain { job: "j".into() },
            RequestCommand::Planners,
            RequestCommand::Queues,
            RequestCommand::History(hyperplan_shared::history::HistoryQuery {
                users: vec!["alice".into()],
                since: Some(1),
                steps: true,
                ..Default::default()
            }),
            RequestCommand::Report(hyperplan_shared::history::ReportQuery {
                since: 1,
                until: 2,
                ..Default::default()
            }),
        ] {
            roundtrip(&Request { id: 7, command });
        }
    }

    #[test]
    fn responses_with_json_values_roundtrip() {
        let value = serde_json::json!({
            "nodes": [{"name": "n001", "state": "Ready", "labels": {"rack": "r1"}, "cpus": 64,
                       "load": 0.5, "neg": -3, "big": u64::MAX, "none": null, "ok": true}],
            "empty": [], "nested": {"a": {"b": [1, 2.5, "x"]}}
        });
        roundtrip(&Response {
            id: 1,
            result: Ok(value),
        });
        roundtrip(&Response {
            id: 2,
            result: Err("no such job".into()),
        });
    }

    /// A refusal carries its kind on the wire (protocol 6): a client reads a standby's
    /// answer or a passing one from it, and the message is the sentence as it was.
    #[test]
    fn a_refusal_carries_its_kind_on_the_wire() {
        for e in [
            ResponseError::new("no job named \"x\""),
            ResponseError::for_now("node n1 is not connected"),
            ResponseError::not_leader(Some("head-2:7400")),
            ResponseError::not_leader(None),
        ] {
            let new = Response {
                id: 3,
                result: Err(e.clone()),
            };
            let back: Response = rmp_serde::from_slice(&rmp_serde::to_vec_named(&new).unwrap()).unwrap();
            assert_eq!(back, new);
        }
        assert_eq!(ResponseError::new("no such job").to_string(), "no such job");
        let text =
            String::from_utf8_lossy(&rmp_serde::to_vec_named(&ResponseError::not_leader(None)).unwrap()).to_string();
        assert!(text.contains("NotLeader") && text.contains("kind"), "{text}");
    }

    #[test]
    fn encoding_uses_field_names() {
        let bytes = rmp_serde::to_vec_named(&Hello::new(Role::Agent, "n1")).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("version") && text.contains("role") && text.contains("name"));
    }
}
