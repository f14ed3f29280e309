//! Job specs: hyperplan's own job file and Volcano `batch.volcano.sh/v1alpha1` Jobs.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::FileError;
use crate::hypernode::check_kind;
use crate::names::{NameKind, check_name};
use crate::outpattern::{DEFAULT_OUTPUT, check_output_place, check_pattern};
use crate::resources::Resources;
use crate::taskenv::is_env_name;
use crate::timelimit::parse_time_limit;
use crate::yaml::{self, Located, Node, Value, file_error, join_index, located_error};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TopologyMode {
    Hard,
    Soft,
}

/// `networkTopology: {mode, highestTierAllowed | highestTierName}`. At most one of the two
/// limits is set (the loader rejects both).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkTopology {
    pub mode: TopologyMode,
    pub highest_tier_allowed: Option<u32>,
    pub highest_tier_name: Option<String>,
}

/// Most `segments` layers a job may give (rack, tray, … : a few in practice).
pub const MAX_SEGMENT_LAYERS: usize = 8;

/// One layer of `segments`: groups of `size` consecutive ranks (over every task, in
/// the job's task order), each inside one HyperNode of the tier named (Slurm's
/// `--segment`, Kueue's multi-layer slices, Volcano's partition policy generalised).
/// Layers go outer first; each outer size is a multiple of the next one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Segment {
    pub size: u32,
    /// The tier each segment stays inside, by name (`nvlink`), resolved in each tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier_name: Option<String>,
    /// Or by number, the same in every tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<u32>,
    /// The last segment may be smaller when the ranks are not a multiple of `size`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_partial: bool,
}

impl Segment {
    /// The hard topology each segment of this layer is held to.
    pub fn network_topology(&self) -> NetworkTopology {
        NetworkTopology {
            mode: TopologyMode::Hard,
            highest_tier_allowed: self.tier,
            highest_tier_name: self.tier_name.clone(),
        }
    }

    /// `tier nvlink` or `tier 2`, for messages.
    pub fn tier_label(&self) -> String {
        match (&self.tier_name, self.tier) {
            (Some(n), _) => n.clone(),
            (None, Some(t)) => format!("tier {t}"),
            (None, None) => "any tier".into(),
        }
    }
}

/// `partitionPolicy`: the task's replicas split into `total_partitions` partitions of
/// `partition_size`; the gang needs `min_partitions` whole partitions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionPolicy {
    pub total_partitions: u32,
    pub partition_size: u32,
    pub min_partitions: u32,
    pub network_topology: Option<NetworkTopology>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskSpec {
    pub name: String,
    pub replicas: u32,
    /// Seconds each replica runs for, used by `simulate`; `None` runs until cancelled.
    pub runtime: Option<u64>,
    /// Per replica.
    pub resources: Resources,
    pub partition_policy: Option<PartitionPolicy>,
    /// NUMA topology policy (`none`, `best-effort`, `restricted`, `single-numa-node`);
    /// `None` = the planner's default.
    pub topology_policy: Option<String>,
    /// `packed` (kubelet's default) or `spread` (across the NUMA nodes of the hint).
    pub cpu_placement: Option<String>,
    /// No two tasks share a core (kubelet's `full-pcpus-only`).
    pub full_cores: bool,
    pub command: Vec<String>,
    /// Environment, working directory and output files (`simulate` ignores them).
    pub exec: TaskExec,
}

/// How a task runs, beyond its `command`: the job file's `env`, `workingDir`, `output` and
/// `error` (hyperplan's own format; a Volcano Job leaves them at their defaults).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskExec {
    /// Set over everything hyperplan sets ([`crate::taskenv`]). Names are
    /// `[A-Za-z_][A-Za-z0-9_]*`, values have no NUL.
    pub env: BTreeMap<String, String>,
    /// As written: an absolute path, or one relative to the directory `hyperplan submit`
    /// ran in (resolved there, by the CLI); `None` = that directory itself. No NUL.
    pub working_dir: Option<String>,
    /// Output file pattern ([`crate::outpattern`]) relative to the working directory;
    /// `None` = [`DEFAULT_OUTPUT`].
    pub output: Option<String>,
    /// Error file pattern; `None` = into the output file.
    pub error: Option<String>,
    /// `maxProcesses`: the most processes and threads each replica may have (its
    /// cgroup's `pids.max`), at most the node's own `taskPidsMax`; `None` = the node's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_processes: Option<u64>,
}

impl TaskExec {
    /// The output pattern in effect.
    pub fn output_pattern(&self) -> &str {
        self.output.as_deref().unwrap_or(DEFAULT_OUTPUT)
    }

    /// The error pattern in effect: the output's when `error` is not set.
    pub fn error_pattern(&self) -> &str {
        self.error.as_deref().unwrap_or_else(|| self.output_pattern())
    }
}

/// What happens to a job when one of its tasks fails (`onTaskFailure`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OnTaskFailure {
    /// The other tasks get SIGTERM, then SIGKILL (the default).
    #[default]
    KillJob,
    /// The others run on; the job fails when all have ended.
    Continue,
}

/// What happens to a job's tasks when their node is lost (`onNodeLost`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OnNodeLost {
    /// The job fails (the default without `requeue`).
    Fail,
    /// The job goes back to pending (the default with `requeue: true`).
    Requeue,
    /// The lost tasks start again, keeping their ranks, on spare nodes inside the job's
    /// HyperNode (its tier limit holds); the other ranks keep running. Without room there
    /// the job is requeued (with `requeue: true`) or fails.
    Replace,
}

impl OnNodeLost {
    /// The planner starts the lost tasks again elsewhere (the job's others, or all of them
    /// on a requeue): two copies of a rank could run while the lost node is only cut off,
    /// so such a task is fenced on its node (see `LaunchTask::fence`).
    pub fn restarts(self) -> bool {
        self != OnNodeLost::Fail
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "fail" => Some(Self::Fail),
            "requeue" => Some(Self::Requeue),
            "replace" => Some(Self::Replace),
            _ => None,
        }
    }
}

/// Whether a job's ranks get a PMI server (`mpi`): MPICH, Intel MPI and MVAPICH wire up
/// through it without `mpirun`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum MpiMode {
    /// No PMI socket (PyTorch and other jobs that find each other by `MASTER_ADDR`).
    #[default]
    None,
    /// PMI-1 over `PMI_FD`, with `PMI_RANK`, `PMI_SIZE`, a key-value space per job.
    Pmi,
}

impl MpiMode {
    pub fn parse(text: &str) -> Option<MpiMode> {
        match text {
            "none" => Some(MpiMode::None),
            "pmi" | "pmi1" => Some(MpiMode::Pmi),
            _ => None,
        }
    }
}

/// How a job's command runs (`launch`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum LaunchMode {
    /// One process per task, every rank (the default).
    #[default]
    Tasks,
    /// The command runs once, on rank 0's node, with the whole allocation described;
    /// the other tasks hold their nodes for the job's steps (`hyperplan exec`). Like
    /// `sbatch`: the job ends with that command, with its exit code.
    Batch,
}

/// How a job runs (`simulate` ignores it): `timeLimit`, `masterPort`, `onTaskFailure`,
/// `requeue`, `mpi`, `launch`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobRun {
    /// Seconds from start to SIGTERM (SIGKILL 10 s later); `None` = no limit. Above 0.
    pub time_limit: Option<u64>,
    /// `MASTER_PORT`, 1024–65535; `None` = [`crate::taskenv::default_master_port`].
    pub master_port: Option<u16>,
    pub on_task_failure: OnTaskFailure,
    /// Back to pending (rather than failed) when a node with its tasks is lost.
    pub requeue: bool,
    /// `None`: the agent's `[exec] defaultMpi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi: Option<MpiMode>,
    #[serde(default, skip_serializing_if = "is_tasks")]
    pub launch: LaunchMode,
    /// `compat`: `slurm` also gives the tasks the `SLURM_*` variables.
    #[serde(default, skip_serializing_if = "is_no_compat")]
    pub compat: Compat,
    /// Seconds a preempted task has from its warning signal to SIGKILL
    /// (`preemptGrace`); `None`: the planner's `[preemption] grace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempt_grace: Option<u64>,
    /// The signal a preempted task is warned with (`preemptSignal`, its checkpoint
    /// hook); `None`: SIGTERM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempt_signal: Option<i32>,
    /// `onNodeLost`; `None`: requeue with `requeue: true`, else fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_node_lost: Option<OnNodeLost>,
}

impl JobRun {
    /// What happens when a node with its tasks is lost.
    pub fn node_lost(&self) -> OnNodeLost {
        self.on_node_lost.unwrap_or(if self.requeue {
            OnNodeLost::Requeue
        } else {
            OnNodeLost::Fail
        })
    }
}

/// Which other batch system's environment a job's tasks also get (`compat`), so that
/// scripts written for it run unchanged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Compat {
    /// Only hyperplan's variables (the default).
    #[default]
    None,
    /// Also Slurm's `SLURM_*` variables (set by `hyperplan sbatch`).
    Slurm,
}

fn is_no_compat(compat: &Compat) -> bool {
    *compat == Compat::None
}

fn is_tasks(mode: &LaunchMode) -> bool {
    *mode == LaunchMode::Tasks
}

/// A validated job: replicas match partitions, `min_available` ≤ replicas, names unique.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSpec {
    pub name: String,
    pub priority: i32,
    /// Gang minimum; `None` = every replica (partitioned tasks count
    /// `min_partitions × partition_size`).
    pub min_available: Option<u32>,
    pub submit_time: u64,
    pub network_topology: Option<NetworkTopology>,
    pub tasks: Vec<TaskSpec>,
    pub run: JobRun,
    /// The directory `hyperplan submit` ran in (absolute): where a task's working
    /// directory starts. Set by the planner from the request, never read from a job
    /// file; `None` in the simulator.
    pub submit_dir: Option<String>,
    /// The `[[queue]]` it goes to (`queue`, Volcano's `spec.queue`); `None`: `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Who submits it, for `simulate` (fair share, per-user limits); the planner takes
    /// the submitter from their certificate instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The job's credential: a random secret the planner makes at submit (never read
    /// from a job file), kept with the job and given to its tasks
    /// (`HYPERPLAN_CREDENTIAL`), with which they `hyperplan exec` into it until it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
    /// Its `[[priorityClass]]` (`priorityClassName`): how far ahead it goes and whom it
    /// may preempt; `None`: the planner's default class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class: Option<String>,
    /// The `[[account]]` it is charged to (`account`, `submit --account`, sbatch's
    /// `-A`); the planner writes the submitter's default account in when accounts are
    /// configured and the job names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// `segments`, outer layer first; empty: none. Every rank is needed (the gang is the
    /// whole job), and no task has a `partitionPolicy`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub segments: Vec<Segment>,
    /// Submitted held (`hold: true`, `submit --hold`): it waits until its owner or an
    /// admin releases it (the hold itself lives in the job's state from then on).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hold: bool,
    /// Its begin time (`begin`, `submit --begin`), Unix seconds: never placed before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub begin: Option<u64>,
    /// `array` (`submit --array`): the job is an array; the planner splits it at submit
    /// into elements, each a job of its own named `NAME[INDEX]` (see `element`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<crate::array::ArraySpec>,
    /// Set by the planner on each element of an array: which array, which index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub element: Option<crate::array::ArrayElement>,
    /// `dependsOn` (`--dependency`): when it may start, in Slurm's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<crate::dependency::Dependency>,
    /// `keepOnFailedDependency`: a dependency that can never be met leaves the job
    /// waiting (for a person to cancel it) instead of cancelling it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_on_failed_dependency: bool,
    /// `networkTopology.softAfter` (Slurm's `--switches=N@TIME`): seconds a job with a
    /// hard topology waits for it; then it is placed as `soft` (best effort).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_soft_after: Option<u64>,
}

impl JobSpec {
    /// The working directory of task spec `role`: its `workingDir` when absolute, else
    /// that path under the submit directory (the submit directory itself without one).
    /// `None` when neither says where (a relative path without a submit directory).
    pub fn working_dir(&self, role: usize) -> Option<String> {
        let dir = self.tasks.get(role)?.exec.working_dir.as_deref();
        match (dir, self.submit_dir.as_deref()) {
            (Some(d), _) if d.starts_with('/') => Some(d.to_string()),
            (Some(d), Some(base)) => Some(format!("{}/{}", base.trim_end_matches('/'), d.trim_start_matches("./"))),
            (None, Some(base)) => Some(base.to_string()),
            (_, None) => None,
        }
    }

    pub fn replicas(&self) -> u32 {
        self.tasks.iter().map(|t| t.replicas).sum()
    }

    /// The gang minimum the planner enforces.
    pub fn gang_minimum(&self) -> u32 {
        self.min_available.unwrap_or_else(|| {
            self.tasks
                .iter()
                .map(|t| match &t.partition_policy {
                    Some(p) if p.min_partitions > 0 => p.min_partitions * p.partition_size,
                    _ => t.replicas,
                })
                .sum()
        })
    }
}

/// The `apiVersion` of Volcano Jobs.
pub const VOLCANO_JOB_API_VERSION: &str = "batch.volcano.sh/v1alpha1";

/// NUMA topology policies the kubelet knows.
const TOPOLOGY_POLICIES: [&str; 4] = ["none", "best-effort", "restricted", "single-numa-node"];
const CPU_PLACEMENTS: [&str; 2] = ["packed", "spread"];

/// Under a NUMA policy other than `none` a task gets exclusive PUs (kubelet's static CPU
/// policy), so its `cpu` must be whole. `Some(what is wrong)` otherwise.
pub fn whole_cpu_problem(policy: &str, resources: &Resources) -> Option<String> {
    let cpu = resources.get(crate::CPU);
    (policy != "none" && !cpu.is_multiple_of(1000)).then(|| {
        format!(
            "expected a whole number of CPUs, got {}: a task with a NUMA policy gets exclusive CPUs (ask for {} or {})",
            crate::quantity::format_quantity(crate::CPU, cpu),
            cpu / 1000,
            cpu / 1000 + 1
        )
    })
}

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum RawMode {
    /// Volcano's default.
    #[default]
    Hard,
    Soft,
}

/// `networkTopology` in both formats (Volcano has exactly these fields).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawTopology {
    #[serde(default)]
    mode: RawMode,
    highest_tier_allowed: Option<u32>,
    highest_tier_name: Option<String>,
    /// hyperplan's: how long a hard limit is waited for (`30m`), then soft.
    soft_after: Option<Located<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSegment {
    size: Located<u32>,
    tier_name: Option<Located<String>>,
    tier: Option<Located<u32>>,
    #[serde(default)]
    allow_partial: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawPartition {
    total_partitions: Located<u32>,
    partition_size: Located<u32>,
    /// Volcano's default is 0 (the gang then needs every partition).
    min_partitions: Option<Located<u32>>,
    network_topology: Option<Located<RawTopology>>,
}

/// hyperplan's own job format.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawJob {
    name: Located<String>,
    #[serde(default)]
    priority: i32,
    min_available: Option<Located<u32>>,
    #[serde(default)]
    submit_time: u64,
    network_topology: Option<Located<RawTopology>>,
    segments: Option<Located<Vec<Located<RawSegment>>>>,
    tasks: Located<Vec<RawTask>>,
    /// Read as text: `3600` or `1h30m`.
    time_limit: Option<Located<String>>,
    queue: Option<Located<String>>,
    account: Option<Located<String>>,
    user: Option<Located<String>>,
    /// Read as text, so a bad port is reported in the same words however it was written.
    master_port: Option<Located<String>>,
    on_task_failure: Option<Located<String>>,
    #[serde(default)]
    requeue: bool,
    mpi: Option<Located<String>>,
    launch: Option<Located<String>>,
    compat: Option<Located<String>>,
    priority_class_name: Option<Located<String>>,
    /// Read as text: `30` or `2m`.
    preempt_grace: Option<Located<String>>,
    preempt_signal: Option<Located<String>>,
    on_node_lost: Option<Located<String>>,
    /// Submitted held (Slurm's `--hold`).
    #[serde(default)]
    hold: bool,
    /// Not placed before (Slurm's `--begin`), an instant: see `begin::parse_file_begin`.
    begin: Option<Located<String>>,
    /// Slurm's `--array`: `1-100%8`.
    array: Option<Located<String>>,
    /// Slurm's `--dependency`: a list of conditions (all of them), or one expression.
    depends_on: Option<Located<DependsOn>>,
    #[serde(default)]
    keep_on_failed_dependency: bool,
}

/// `dependsOn` as written: `["afterok:prep", "afterany:12"]` (all of them) or one
/// expression in Slurm's form (`afterok:a?afterok:b`).
struct DependsOn(String);

impl<'de> Deserialize<'de> for DependsOn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = DependsOn;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of dependencies like [\"afterok:prep\"] or one like \"afterok:prep\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<DependsOn, E> {
                Ok(DependsOn(v.to_string()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<DependsOn, A::Error> {
                let mut parts: Vec<String> = Vec::new();
                while let Some(p) = seq.next_element::<String>()? {
                    // Bounded: the expression's own limit refuses more later anyway.
                    if parts.iter().map(String::len).sum::<usize>() > crate::dependency::MAX_DEPENDENCY_LEN {
                        break;
                    }
                    parts.push(p);
                }
                if parts.iter().any(|p| p.contains('?')) && parts.len() > 1 {
                    return Err(serde::de::Error::custom(
                        "expected conditions all of which must hold in a list; write a ? (any of) expression as one string",
                    ));
                }
                Ok(DependsOn(parts.join(",")))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawTask {
    name: Located<String>,
    replicas: Located<u32>,
    runtime: Option<u64>,
    /// Located so "cpu must be > 0" can point at what was written.
    resources: Option<Located<Resources>>,
    partition_policy: Option<Located<RawPartition>>,
    topology_policy: Option<Located<String>>,
    cpu_placement: Option<Located<String>>,
    #[serde(default)]
    full_cores: bool,
    #[serde(default)]
    command: Vec<String>,
    env: Option<Located<BTreeMap<String, Located<String>>>>,
    working_dir: Option<Located<String>>,
    output: Option<Located<String>>,
    error: Option<Located<String>>,
    max_processes: Option<Located<u64>>,
}

/// A Volcano Job; fields hyperplan has no use for are ignored.
#[derive(Deserialize)]
struct VolcanoJob {
    metadata: VolcanoMetadata,
    spec: VolcanoJobSpec,
}

#[derive(Deserialize)]
struct VolcanoMetadata {
    name: Located<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct VolcanoJobSpec {
    min_available: Option<Located<u32>>,
    queue: Option<Located<String>>,
    priority_class_name: Option<Located<String>>,
    network_topology: Option<Located<RawTopology>>,
    tasks: Located<Vec<VolcanoTask>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct VolcanoTask {
    name: Option<Located<String>>,
    replicas: Located<u32>,
    partition_policy: Option<Located<RawPartition>>,
    topology_policy: Option<Located<String>>,
    cpu_placement: Option<Located<String>>,
    #[serde(default)]
    full_cores: bool,
    template: Option<PodTemplate>,
}

#[derive(Deserialize)]
struct PodTemplate {
    spec: Option<PodSpec>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodSpec {
    #[serde(default)]
    containers: Vec<Container>,
    #[serde(default)]
    init_containers: Vec<Container>,
}

#[derive(Deserialize)]
struct Container {
    #[serde(default)]
    command: Vec<String>,
    resources: Option<ContainerResources>,
}

#[derive(Deserialize)]
struct ContainerResources {
    #[serde(default)]
    requests: Resources,
    #[serde(default)]
    limits: Resources,
}

impl Container {
    /// Kubernetes: a resource with a limit but no request is requested at its limit.
    fn requests(&self) -> Resources {
        let Some(r) = &self.resources else {
            return Resources::new();
        };
        let mut out = r.limits.clone();
        out.0.extend(r.requests.0.iter().map(|(k, v)| (k.clone(), *v)));
        out
    }
}

impl PodSpec {
    /// What one pod asks for: the sum over containers, or the largest init container
    /// when that is more (they run before the others, one at a time).
    fn requests(&self) -> Resources {
        let mut sum = Resources::new();
        for c in &self.containers {
            sum.add(&c.requests());
        }
        for c in &self.init_containers {
            for (k, v) in c.requests().0 {
                let e = sum.0.entry(k).or_insert(0);
                *e = (*e).max(v);
            }
        }
        sum
    }
}

/// `networkTopology.softAfter`, in seconds: only with `mode: hard`.
fn soft_after(raw: Option<&Located<RawTopology>>, path: &Path) -> Result<Option<u64>, FileError> {
    let Some(t) = raw else { return Ok(None) };
    let Some(after) = &t.value.soft_after else {
        return Ok(None);
    };
    if matches!(t.value.mode, RawMode::Soft) {
        return Err(located_error(
            path,
            after,
            "expected mode: hard with softAfter (a soft topology is best effort from the start)",
        ));
    }
    parse_time_limit(&after.value)
        .map(Some)
        .map_err(|e| located_error(path, after, e.to_string()))
}

fn build_topology(raw: Option<Located<RawTopology>>, path: &Path) -> Result<Option<NetworkTopology>, FileError> {
    let Some(t) = raw else { return Ok(None) };
    if t.value.highest_tier_allowed.is_some() && t.value.highest_tier_name.is_some() {
        return Err(located_error(
            path,
            &t,
            "expected highestTierAllowed or highestTierName, not both",
        ));
    }
    let mode = match t.value.mode {
        RawMode::Hard => TopologyMode::Hard,
        RawMode::Soft => TopologyMode::Soft,
    };
    Ok(Some(NetworkTopology {
        mode,
        highest_tier_allowed: t.value.highest_tier_allowed,
        highest_tier_name: t.value.highest_tier_name,
    }))
}

/// The parts of a task both formats share, validated into a [`TaskSpec`].
struct TaskParts {
    name: Located<String>,
    replicas: Located<u32>,
    runtime: Option<u64>,
    resources: Resources,
    /// Where the resources were written (the task's name when they were not), and the
    /// field path their `cpu` has.
    resources_at: Located<()>,
    partition_policy: Option<Located<RawPartition>>,
    topology_policy: Option<Located<String>>,
    cpu_placement: Option<Located<String>>,
    full_cores: bool,
    command: Vec<String>,
    exec: RawExec,
}

/// A task's `env`, `workingDir`, `output`, `error` and `maxProcesses` as written.
#[derive(Default)]
struct RawExec {
    env: Option<Located<BTreeMap<String, Located<String>>>>,
    working_dir: Option<Located<String>>,
    output: Option<Located<String>>,
    error: Option<Located<String>>,
    max_processes: Option<Located<u64>>,
}

/// The most bytes a task's `command` and `env` may have together.
pub const MAX_EXEC_BYTES: usize = 1 << 20;

/// Checks a task's `env`, `workingDir`, `output` and `error`.
fn build_exec(raw: RawExec, path: &Path) -> Result<TaskExec, FileError> {
    let mut env = BTreeMap::new();
    if let Some(e) = raw.env {
        for (name, value) in e.value {
            if !is_env_name(&name) {
                return Err(file_error(
                    path,
                    value.pos,
                    &e.field,
                    format!(
                        "expected a variable name (letters, digits and _, not starting with a digit), got {name:?}"
                    ),
                ));
            }
            if value.value.contains('\0') {
                return Err(located_error(path, &value, "expected a value without NUL bytes"));
            }
            env.insert(name, value.value);
        }
    }
    if let Some(dir) = &raw.working_dir {
        if dir.value.is_empty() {
            return Err(located_error(
                path,
                dir,
                "expected a directory (absolute, or relative to where `hyperplan submit` runs), got nothing",
            ));
        }
        if dir.value.contains('\0') {
            return Err(located_error(path, dir, "expected a path without NUL bytes"));
        }
    }
    for pattern in [&raw.output, &raw.error].into_iter().flatten() {
        check_pattern(&pattern.value).map_err(|e| located_error(path, pattern, e.to_string()))?;
    }
    // Where the files land, the working directory taken in (`workingDir: /proc/self/fd`
    // with `output: "1"`): blamed on the pattern when written, else on the directory.
    if let Some(dir) = &raw.working_dir {
        for pattern in [&raw.output, &raw.error] {
            let value = pattern.as_ref().map_or(DEFAULT_OUTPUT, |p| p.value.as_str());
            if let Err(e) = check_output_place(Some(&dir.value), value) {
                return Err(match pattern {
                    Some(p) => located_error(path, p, e.to_string()),
                    None => located_error(path, dir, e.to_string()),
                });
            }
        }
    }
    if let Some(max) = &raw.max_processes
        && max.value == 0
    {
        return Err(located_error(
            path,
            max,
            "expected at least 1 process (the task itself)",
        ));
    }
    Ok(TaskExec {
        env,
        working_dir: raw.working_dir.map(|d| d.value),
        output: raw.output.map(|o| o.value),
        error: raw.error.map(|o| o.value),
        max_processes: raw.max_processes.map(|m| m.value),
    })
}

/// Checks a job's `timeLimit`, `masterPort` and `onTaskFailure`.
fn build_run(j: &JobParts, path: &Path) -> Result<JobRun, FileError> {
    let time_limit = match &j.time_limit {
        None => None,
        Some(t) => Some(parse_time_limit(&t.value).map_err(|e| located_error(path, t, e.to_string()))?),
    };
    let master_port = match &j.master_port {
        None => None,
        Some(p) => match p.value.trim().parse::<u16>() {
            Ok(port) if port >= 1024 => Some(port),
            _ => {
                return Err(located_error(
                    path,
                    p,
                    format!("expected a port number from 1024 to 65535, got {:?}", p.value),
                ));
            }
        },
    };
    let on_task_failure = match &j.on_task_failure {
        None => OnTaskFailure::default(),
        Some(o) => match o.value.as_str() {
            "killJob" => OnTaskFailure::KillJob,
            "continue" => OnTaskFailure::Continue,
            other => {
                return Err(located_error(
                    path,
                    o,
                    format!("expected killJob or continue, got {other:?}"),
                ));
            }
        },
    };
    let mpi = match &j.mpi {
        None => None,
        Some(m) => Some(MpiMode::parse(&m.value).ok_or_else(|| {
            located_error(
                path,
                m,
                format!(
                    "expected pmi (a PMI-1 server for MPICH, Intel MPI, MVAPICH) or none, got {:?}",
                    m.value
                ),
            )
        })?),
    };
    let launch = match j.launch.as_ref().map(|l| (l, l.value.as_str())) {
        None | Some((_, "tasks")) => LaunchMode::Tasks,
        Some((_, "batch")) => LaunchMode::Batch,
        Some((l, other)) => {
            return Err(located_error(
                path,
                l,
                format!(
                    "expected tasks (one process per rank) or batch (the command once, on rank 0's node, with the allocation), got {other:?}"
                ),
            ));
        }
    };
    let compat = match j.compat.as_ref().map(|c| (c, c.value.as_str())) {
        None | Some((_, "none")) => Compat::None,
        Some((_, "slurm")) => Compat::Slurm,
        Some((c, other)) => {
            return Err(located_error(
                path,
                c,
                format!("expected none or slurm (the tasks also get the SLURM_* variables), got {other:?}"),
            ));
        }
    };
    let preempt_grace = match &j.preempt_grace {
        None => None,
        Some(g) if g.value.trim() == "0" => Some(0),
        Some(g) => Some(parse_time_limit(&g.value).map_err(|e| located_error(path, g, e.to_string()))?),
    };
    let preempt_signal = match &j.preempt_signal {
        None => None,
        Some(sig) => Some(crate::taskend::warning_signal(&sig.value).ok_or_else(|| {
            located_error(
                path,
                sig,
                format!(
                    "expected a signal a task can catch (USR1, USR2, TERM, INT, HUP, … or its number), got {:?}",
                    sig.value
                ),
            )
        })?),
    };
    let on_node_lost = match &j.on_node_lost {
        None => None,
        Some(o) => Some(OnNodeLost::parse(&o.value).ok_or_else(|| {
            located_error(
                path,
                o,
                format!(
                    "expected fail, requeue or replace (the lost tasks again on spare nodes of the job's HyperNode), got {:?}",
                    o.value
                ),
            )
        })?),
    };
    Ok(JobRun {
        time_limit,
        master_port,
        on_task_failure,
        requeue: j.requeue,
        mpi,
        launch,
        compat,
        preempt_grace,
        preempt_signal,
        on_node_lost,
    })
}

/// A name that breaks [`check_name`] as an error at the name.
pub(crate) fn check_located_name(kind: NameKind, name: &Located<String>, path: &Path) -> Result<(), FileError> {
    check_name(kind, &name.value).map_err(|e| located_error(path, name, e.to_string()))
}

/// The task's own field prefix (`tasks[2]`), from its name's path.
fn task_prefix(name: &Located<String>) -> &str {
    name.field.strip_suffix(".name").unwrap_or(&name.field)
}

fn at_least_one(value: &Located<u32>, path: &Path) -> Result<(), FileError> {
    if value.value == 0 {
        return Err(located_error(path, value, "expected at least 1, got 0"));
    }
    Ok(())
}

fn build_task(t: TaskParts, path: &Path) -> Result<TaskSpec, FileError> {
    check_located_name(NameKind::Task, &t.name, path)?;
    at_least_one(&t.replicas, path)?;
    // A task asking for nothing would pile onto one node without end (a job file cut
    // in the middle of a task): every task needs some CPU.
    if t.resources.get(crate::CPU) == 0 {
        let got = match t.resources.0.contains_key(crate::CPU) {
            true => "0",
            false => "nothing",
        };
        return Err(located_error(
            path,
            &t.resources_at,
            format!("expected cpu > 0 (every task needs some CPU, e.g. `cpu: 1` or `cpu: 500m`), got {got}"),
        ));
    }
    let partition_policy = match t.partition_policy {
        None => None,
        Some(p) => {
            at_least_one(&p.value.total_partitions, path)?;
            at_least_one(&p.value.partition_size, path)?;
            let total = p.value.total_partitions.value;
            let size = p.value.partition_size.value;
            if u64::from(total) * u64::from(size) != u64::from(t.replicas.value) {
                return Err(located_error(
                    path,
                    &p,
                    format!(
                        "expected totalPartitions × partitionSize to equal replicas ({}), got {total} × {size} = {}",
                        t.replicas.value,
                        u64::from(total) * u64::from(size)
                    ),
                ));
            }
            let min_partitions = match &p.value.min_partitions {
                Some(m) if m.value > total => {
                    return Err(located_error(
                        path,
                        m,
                        format!("expected at most totalPartitions ({total}), got {}", m.value),
                    ));
                }
                Some(m) => m.value,
                None => 0,
            };
            Some(PartitionPolicy {
                total_partitions: total,
                partition_size: size,
                min_partitions,
                network_topology: build_topology(p.value.network_topology, path)?,
            })
        }
    };
    if let Some(policy) = &t.topology_policy
        && !TOPOLOGY_POLICIES.contains(&policy.value.as_str())
    {
        return Err(located_error(
            path,
            policy,
            format!(
                "expected one of none, best-effort, restricted, single-numa-node, got {:?}",
                policy.value
            ),
        ));
    }
    if let Some(p) = &t.cpu_placement
        && !CPU_PLACEMENTS.contains(&p.value.as_str())
    {
        return Err(located_error(
            path,
            p,
            format!("expected packed or spread, got {:?}", p.value),
        ));
    }
    if let Some(policy) = &t.topology_policy
        && let Some(why) = whole_cpu_problem(&policy.value, &t.resources)
    {
        let prefix = task_prefix(&t.name);
        return Err(crate::yaml::file_error(
            path,
            t.name.pos,
            &format!("{prefix}.resources.cpu"),
            format!("{why} (topologyPolicy {})", policy.value),
        ));
    }
    let exec = build_exec(t.exec, path)?;
    // A NUL ends a C string: such an argument could only fail on the node, at exec.
    if let Some(i) = t.command.iter().position(|a| a.contains('\0')) {
        let prefix = task_prefix(&t.name);
        return Err(crate::yaml::file_error(
            path,
            t.name.pos,
            &format!("{prefix}.command"),
            format!("expected arguments without NUL bytes, argument {i} has one"),
        ));
    }
    // Checked here, not when a node gets the task: its launch spec is bounded (4 MiB, with
    // what hyperplan adds, such as a large job's node list).
    let exec_bytes: usize = t.command.iter().map(|a| a.len() + 1).sum::<usize>()
        + exec.env.iter().map(|(k, v)| k.len() + v.len() + 2).sum::<usize>();
    if exec_bytes > MAX_EXEC_BYTES {
        let prefix = task_prefix(&t.name);
        return Err(crate::yaml::file_error(
            path,
            t.name.pos,
            &format!("{prefix}.env"),
            format!("expected a command and env of at most {MAX_EXEC_BYTES} bytes together (1 MiB), got {exec_bytes}"),
        ));
    }
    Ok(TaskSpec {
        name: t.name.value,
        replicas: t.replicas.value,
        runtime: t.runtime,
        resources: t.resources,
        partition_policy,
        topology_policy: t.topology_policy.map(|p| p.value),
        cpu_placement: t.cpu_placement.map(|p| p.value),
        full_cores: t.full_cores,
        command: t.command,
        exec,
    })
}

/// The parts of a job both formats share.
struct JobParts {
    name: Located<String>,
    priority: i32,
    min_available: Option<Located<u32>>,
    submit_time: u64,
    network_topology: Option<Located<RawTopology>>,
    segments: Option<Located<Vec<Located<RawSegment>>>>,
    tasks: Located<Vec<TaskParts>>,
    time_limit: Option<Located<String>>,
    master_port: Option<Located<String>>,
    on_task_failure: Option<Located<String>>,
    requeue: bool,
    mpi: Option<Located<String>>,
    launch: Option<Located<String>>,
    compat: Option<Located<String>>,
    queue: Option<Located<String>>,
    account: Option<Located<String>>,
    user: Option<Located<String>>,
    priority_class: Option<Located<String>>,
    preempt_grace: Option<Located<String>>,
    preempt_signal: Option<Located<String>>,
    on_node_lost: Option<Located<String>>,
    hold: bool,
    begin: Option<Located<String>>,
    array: Option<Located<String>>,
    depends_on: Option<Located<DependsOn>>,
    keep_on_failed_dependency: bool,
}

fn build_job(j: JobParts, path: &Path) -> Result<(JobSpec, Located<String>), FileError> {
    check_located_name(NameKind::Job, &j.name, path)?;
    if let Some(q) = &j.queue {
        check_located_name(NameKind::Queue, q, path)?;
    }
    if let Some(a) = &j.account {
        check_located_name(NameKind::Account, a, path)?;
    }
    if let Some(u) = &j.user {
        check_located_name(NameKind::User, u, path)?;
    }
    if let Some(c) = &j.priority_class {
        check_located_name(NameKind::PriorityClass, c, path)?;
    }
    let run = build_run(&j, path)?;
    if j.tasks.value.is_empty() {
        return Err(located_error(path, &j.tasks, "expected at least one task"));
    }
    let tasks_at = Located {
        value: (),
        pos: j.tasks.pos,
        field: j.tasks.field.clone(),
    };
    let mut seen: HashMap<String, u64> = HashMap::new();
    let mut tasks = Vec::with_capacity(j.tasks.value.len());
    let mut replicas: u64 = 0;
    for t in j.tasks.value {
        if let Some(first) = seen.insert(t.name.value.clone(), t.name.pos.line) {
            return Err(located_error(
                path,
                &t.name,
                format!("duplicate task name {:?} (first at line {first})", t.name.value),
            ));
        }
        replicas += u64::from(t.replicas.value);
        tasks.push(build_task(t, path)?);
    }
    if replicas > u64::from(u32::MAX) {
        return Err(located_error(
            path,
            &tasks_at,
            format!("expected at most {} replicas in all, got {replicas}", u32::MAX),
        ));
    }
    if let Some(m) = &j.min_available {
        if m.value == 0 {
            return Err(located_error(path, m, "expected at least 1, got 0"));
        }
        if u64::from(m.value) > replicas {
            return Err(located_error(
                path,
                m,
                format!("expected at most the job's {replicas} replicas, got {}", m.value),
            ));
        }
    }
    let partitioned = tasks.iter().any(|t| t.partition_policy.is_some());
    let segments = build_segments(j.segments, replicas as u32, partitioned, j.min_available.as_ref(), path)?;
    let begin = match &j.begin {
        Some(b) => Some(crate::begin::parse_file_begin(&b.value).map_err(|e| located_error(path, b, e.to_string()))?),
        None => None,
    };
    let array = match &j.array {
        Some(a) => Some(crate::array::ArraySpec::parse(&a.value).map_err(|e| located_error(path, a, e.to_string()))?),
        None => None,
    };
    let depends_on = match &j.depends_on {
        Some(d) => {
            Some(crate::dependency::Dependency::parse(&d.value.0).map_err(|e| located_error(path, d, e.to_string()))?)
        }
        None => None,
    };
    let topology_soft_after = soft_after(j.network_topology.as_ref(), path)?;
    let spec = JobSpec {
        name: j.name.value.clone(),
        priority: j.priority,
        min_available: j.min_available.map(|m| m.value),
        submit_time: j.submit_time,
        network_topology: build_topology(j.network_topology, path)?,
        tasks,
        run,
        submit_dir: None,
        queue: j.queue.map(|q| q.value),
        user: j.user.map(|u| u.value),
        credential: None,
        priority_class: j.priority_class.map(|c| c.value),
        account: j.account.map(|a| a.value),
        segments,
        hold: j.hold,
        begin,
        array,
        element: None,
        depends_on,
        keep_on_failed_dependency: j.keep_on_failed_dependency,
        topology_soft_after,
    };
    Ok((spec, j.name))
}

/// `segments`, checked: sizes from 1, each layer's size dividing the one outside it,
/// a tier name or number each, the job's ranks a multiple of the outer size (or the
/// layer `allowPartial`, and so for each inner layer the tail does not fill), every rank
/// needed, and no `partitionPolicy` beside them.
fn build_segments(
    raw: Option<Located<Vec<Located<RawSegment>>>>,
    ranks: u32,
    partitioned: bool,
    min_available: Option<&Located<u32>>,
    path: &Path,
) -> Result<Vec<Segment>, FileError> {
    let Some(raw) = raw else { return Ok(Vec::new()) };
    if raw.value.is_empty() {
        return Err(located_error(
            path,
            &raw,
            "expected at least one layer, e.g. [{size: 16, tierName: nvlink}]",
        ));
    }
    if raw.value.len() > MAX_SEGMENT_LAYERS {
        return Err(located_error(
            path,
            &raw,
            format!("expected at most {MAX_SEGMENT_LAYERS} layers, got {}", raw.value.len()),
        ));
    }
    if partitioned {
        return Err(located_error(
            path,
            &raw,
            "expected segments or a task's partitionPolicy, not both (segments generalise partitions)",
        ));
    }
    if let Some(m) = min_available.filter(|m| m.value != ranks) {
        return Err(located_error(
            path,
            m,
            format!(
                "expected no minAvailable or all {ranks} ranks with segments (each segment is whole), got {}",
                m.value
            ),
        ));
    }
    let mut out: Vec<Segment> = Vec::with_capacity(raw.value.len());
    // The last segment's size in the layer above (the job's ranks above the outer layer).
    let mut tail = ranks;
    for (k, layer) in raw.value.into_iter().enumerate() {
        let l = layer.value;
        at_least_one(&l.size, path)?;
        let size = l.size.value;
        if let Some(outer) = out.last()
            && outer.size % size != 0
        {
            return Err(located_error(
                path,
                &l.size,
                format!(
                    "expected a size that divides the outer layer's {}, got {size}",
                    outer.size
                ),
            ));
        }
        let (tier_name, tier) = match (l.tier_name, l.tier) {
            (Some(n), None) if !n.value.trim().is_empty() => (Some(n.value), None),
            (None, Some(t)) => {
                at_least_one(&t, path)?;
                (None, Some(t.value))
            }
            (Some(n), Some(_)) => {
                return Err(located_error(path, &n, "expected tierName or tier, not both"));
            }
            _ => {
                return Err(file_error(
                    path,
                    layer.pos,
                    &format!("{}.tierName", layer.field),
                    "expected the tier each segment stays inside, e.g. tierName: nvlink",
                ));
            }
        };
        let rest = tail % size;
        if rest != 0 && !l.allow_partial {
            let what = if k == 0 {
                format!("the job's {ranks} ranks")
            } else {
                format!("the last outer segment's {tail} ranks")
            };
            return Err(located_error(
                path,
                &l.size,
                format!(
                    "{what} are not a multiple of {size}; give allowPartial: true to let the last segment be smaller"
                ),
            ));
        }
        tail = if rest != 0 { rest } else { size };
        out.push(Segment {
            size,
            tier_name,
            tier,
            allow_partial: l.allow_partial,
        });
    }
    Ok(out)
}

impl RawJob {
    fn parts(self) -> JobParts {
        let tasks = self.tasks.value.into_iter().map(|t| {
            let resources_at = match &t.resources {
                Some(r) => Located {
                    value: (),
                    pos: r.pos,
                    field: format!("{}.cpu", r.field),
                },
                None => Located {
                    value: (),
                    pos: t.name.pos,
                    field: format!("{}.resources.cpu", task_prefix(&t.name)),
                },
            };
            TaskParts {
                name: t.name,
                replicas: t.replicas,
                runtime: t.runtime,
                resources: t.resources.map(|r| r.value).unwrap_or_default(),
                resources_at,
                partition_policy: t.partition_policy,
                topology_policy: t.topology_policy,
                cpu_placement: t.cpu_placement,
                full_cores: t.full_cores,
                command: t.command,
                exec: RawExec {
                    env: t.env,
                    working_dir: t.working_dir,
                    output: t.output,
                    error: t.error,
                    max_processes: t.max_processes,
                },
            }
        });
        JobParts {
            name: self.name,
            priority: self.priority,
            min_available: self.min_available,
            submit_time: self.submit_time,
            network_topology: self.network_topology,
            segments: self.segments,
            tasks: Located {
                value: tasks.collect(),
                pos: self.tasks.pos,
                field: self.tasks.field,
            },
            time_limit: self.time_limit,
            master_port: self.master_port,
            on_task_failure: self.on_task_failure,
            requeue: self.requeue,
            mpi: self.mpi,
            launch: self.launch,
            compat: self.compat,
            queue: self.queue,
            account: self.account,
            user: self.user,
            priority_class: self.priority_class_name,
            preempt_grace: self.preempt_grace,
            preempt_signal: self.preempt_signal,
            on_node_lost: self.on_node_lost,
            hold: self.hold,
            begin: self.begin,
            array: self.array,
            depends_on: self.depends_on,
            keep_on_failed_dependency: self.keep_on_failed_dependency,
        }
    }
}

impl VolcanoJob {
    fn parts(self) -> JobParts {
        let spec = self.spec;
        let tasks = spec.tasks.value.into_iter().enumerate().map(|(i, t)| {
            // Volcano's admission webhook names unnamed tasks `default<index>`.
            let name = t.name.unwrap_or_else(|| Located {
                value: format!("default{i}"),
                pos: t.replicas.pos,
                field: join_index(&spec.tasks.field, i),
            });
            let pod = t.template.and_then(|tpl| tpl.spec);
            let resources_at = Located {
                value: (),
                pos: t.replicas.pos,
                field: format!(
                    "{}.template.spec.containers[].resources.requests.cpu",
                    join_index(&spec.tasks.field, i)
                ),
            };
            TaskParts {
                name,
                replicas: t.replicas,
                runtime: None,
                resources: pod.as_ref().map(PodSpec::requests).unwrap_or_default(),
                resources_at,
                partition_policy: t.partition_policy,
                topology_policy: t.topology_policy,
                cpu_placement: t.cpu_placement,
                full_cores: t.full_cores,
                command: pod
                    .and_then(|p| p.containers.into_iter().next())
                    .map(|c| c.command)
                    .unwrap_or_default(),
                exec: RawExec::default(),
            }
        });
        JobParts {
            name: self.metadata.name,
            priority: 0,
            // Volcano treats minAvailable 0 as unset (every replica).
            min_available: spec.min_available.filter(|m| m.value > 0),
            submit_time: 0,
            network_topology: spec.network_topology,
            segments: None,
            tasks: Located {
                value: tasks.collect(),
                pos: spec.tasks.pos,
                field: spec.tasks.field,
            },
            time_limit: None,
            master_port: None,
            on_task_failure: None,
            requeue: false,
            mpi: None,
            launch: None,
            compat: None,
            queue: spec.queue,
            account: None,
            user: None,
            priority_class: spec.priority_class_name,
            preempt_grace: None,
            preempt_signal: None,
            on_node_lost: None,
            hold: false,
            begin: None,
            array: None,
            depends_on: None,
            keep_on_failed_dependency: false,
        }
    }
}

/// One job document (or list item) in either format, chosen by `apiVersion`/`kind`.
fn parse_one(node: &Node, field: &str, path: &Path) -> Result<(JobSpec, Located<String>), FileError> {
    let parts = if node.get("apiVersion").is_some() || node.get("kind").is_some() {
        check_kind(node, field, VOLCANO_JOB_API_VERSION, "Job", path)?;
        yaml::from_node::<VolcanoJob>(node, field, path)?.parts()
    } else {
        yaml::from_node::<RawJob>(node, field, path)?.parts()
    };
    build_job(parts, path)
}

/// Reads a job file: one job, a list of jobs, or several YAML documents (each a job
/// or a list), in hyperplan's format or as Volcano `batch.volcano.sh/v1alpha1` Jobs.
/// Job names must be unique within the file.
pub fn parse_jobs(text: &str, path: &Path) -> Result<Vec<JobSpec>, FileError> {
    // Submitted text arrives without a file to measure: the limit applies here too.
    if text.len() as u64 > crate::limits::MAX_JOB_FILE {
        return Err(crate::yaml::file_error(
            path,
            yaml::Pos::default(),
            "",
            format!(
                "the job file is larger than the limit of {} (see Limits in README.md)",
                crate::limits::human(crate::limits::MAX_JOB_FILE)
            ),
        ));
    }
    let mut jobs = Vec::new();
    let mut seen: HashMap<String, u64> = HashMap::new();
    for doc in yaml::parse_documents(text, path)? {
        let parsed = match &doc.value {
            Value::Seq(items) => items
                .iter()
                .enumerate()
                .map(|(i, item)| parse_one(item, &join_index("", i), path))
                .collect::<Result<Vec<_>, _>>()?,
            _ => vec![parse_one(&doc, "", path)?],
        };
        for (job, name) in parsed {
            if let Some(first) = seen.insert(job.name.clone(), name.pos.line) {
                return Err(located_error(
                    path,
                    &name,
                    format!("duplicate job name {:?} (first at line {first})", job.name),
                ));
            }
            jobs.push(job);
        }
    }
    Ok(jobs)
}

/// Reads and parses a job file; a file that cannot be read is reported at `0:0`.
pub fn load_job_file(path: &Path) -> Result<Vec<JobSpec>, FileError> {
    parse_jobs(&yaml::read_file(path, crate::limits::MAX_JOB_FILE, "job file")?, path)
}
