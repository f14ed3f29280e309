//! The environment a task starts with: hyperplan's `HYPERPLAN_*` variables, torchrun's
//! rank variables, and the GPU, NCCL and OpenMP settings its placement implies, as pure
//! functions the agent's shepherd calls (and tests check without running anything).
//!
//! For a job of W tasks on N nodes, task rank r has local rank l among the L tasks on its
//! node, whose node rank is k ([`local_ranks`]). [`task_env`] sets:
//!
//! - `HYPERPLAN_JOB`, `HYPERPLAN_TASK`, `HYPERPLAN_NODE` (its node's name, as the planner
//!   knows it), `HYPERPLAN_RANK`, `HYPERPLAN_LOCAL_RANK`, `HYPERPLAN_NODE_RANK`, `HYPERPLAN_NTASKS` (W), `HYPERPLAN_NNODES` (N),
//!   `HYPERPLAN_NODELIST` (a compressed hostlist), `HYPERPLAN_HOSTFILE` (a path; its text is
//!   [`hostfile`]), `HYPERPLAN_CPUS` (`0-23,112-135`), `HYPERPLAN_NUMA_NODES` (`0,1`),
//!   `HYPERPLAN_GPUS` (PCI bus ids), `HYPERPLAN_NICS`, `HYPERPLAN_HYPERNODES` (lowest tier
//!   first), all lists comma-separated;
//! - torchrun's `RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `LOCAL_WORLD_SIZE`, `GROUP_RANK` and
//!   `NODE_RANK` (both k), `MASTER_ADDR`, `MASTER_PORT`;
//! - where the node has GPUs, `CUDA_DEVICE_ORDER=PCI_BUS_ID` and `CUDA_VISIBLE_DEVICES`: the
//!   indices of the task's GPUs among the node's GPUs sorted by PCI bus id (what CUDA numbers
//!   them under that order), ascending; empty when the task has none of them;
//! - `NCCL_IB_HCA` (`mlx5_0:1,mlx5_1:1`, port 1 of each rail) when the task has rails, and
//!   `OMP_NUM_THREADS` (its PU count) when it has PUs;
//! - for a job from a batch script or with `compat: slurm` ([`SlurmJob`]), the `SLURM_*`
//!   variables scripts read, from the same values: `SLURM_JOB_ID`, `SLURM_JOB_NAME`,
//!   `SLURM_JOB_NODELIST` (= `HYPERPLAN_NODELIST`), `SLURM_NNODES`, `SLURM_NTASKS`,
//!   `SLURM_PROCID` (r), `SLURM_LOCALID` (l), `SLURM_NODEID` (k), `SLURM_SUBMIT_DIR`, and
//!   `SLURM_CPUS_PER_TASK` / `SLURM_CLUSTER_NAME` when known;
//! - for an element of an array ([`ArrayElement`]), so that each element knows which
//!   part of the sweep it is: `HYPERPLAN_ARRAY_JOB_ID` (the array's id, its first
//!   element's), `HYPERPLAN_ARRAY_TASK_ID` (this element's index),
//!   `HYPERPLAN_ARRAY_TASK_COUNT`, `HYPERPLAN_ARRAY_TASK_MIN` and
//!   `HYPERPLAN_ARRAY_TASK_MAX`; with the `SLURM_*` variables also `SLURM_ARRAY_JOB_ID`,
//!   `SLURM_ARRAY_TASK_ID`, `SLURM_ARRAY_TASK_COUNT`, `SLURM_ARRAY_TASK_MIN`,
//!   `SLURM_ARRAY_TASK_MAX`, and `SLURM_ARRAY_TASK_STEP` when the spec is one range
//!   (`0-30:10` gives 10, `1-100` gives 1), as Slurm sets it; a list (`1,3,7-9`) has none;
//! - then the job's own `env`, which wins over all of the above.
//!
//! `MASTER_PORT` is the job's `masterPort`, or one the planner chose free on rank 0's node
//! when the job was placed ([`choose_master_port`]: from 29500 + (job id mod 1000) on, the
//! first its agent did not report bound), kept for the job; so neither another job nor
//! another user who bound the job's default port first makes it fail.

use std::collections::{BTreeMap, HashMap};

use crate::array::ArrayElement;
use crate::cpulist::{CpuListError, parse_cpu_list};
use crate::hostlist::compress;

/// A task's place in its job, from [`local_ranks`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankPlace {
    pub rank: u32,
    pub node: String,
    /// k: the node's position among the job's nodes, in order of first appearance by rank.
    pub node_rank: u32,
    /// l: the task's position among its node's tasks, by rank.
    pub local_rank: u32,
    /// L: how many of the job's tasks share its node.
    pub local_world_size: u32,
}

/// Placements or inputs that cannot make an environment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskEnvError {
    #[error("rank {0} is placed twice")]
    DuplicateRank(u32),
    #[error("GPU {gpu} of the task is not among the node's GPUs ({node_gpus})")]
    GpuNotOnNode { gpu: String, node_gpus: String },
    #[error("the task's CPUs: {0}")]
    Cpus(#[from] CpuListError),
}

/// Node ranks, local ranks and local sizes from `(rank, node)` placements (any order):
/// tasks sorted by rank, nodes numbered in order of first appearance. The result is in
/// rank order. A rank placed twice is an error.
pub fn local_ranks(placements: &[(u32, &str)]) -> Result<Vec<RankPlace>, TaskEnvError> {
    let mut sorted: Vec<(u32, &str)> = placements.to_vec();
    sorted.sort_by_key(|(rank, _)| *rank);
    if let Some(w) = sorted.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(TaskEnvError::DuplicateRank(w[0].0));
    }
    // node → (node rank, tasks seen so far)
    let mut nodes: HashMap<&str, (u32, u32)> = HashMap::new();
    let mut out = Vec::with_capacity(sorted.len());
    for (rank, node) in &sorted {
        let next = nodes.len() as u32;
        let entry = nodes.entry(node).or_insert((next, 0));
        out.push(RankPlace {
            rank: *rank,
            node: node.to_string(),
            node_rank: entry.0,
            local_rank: entry.1,
            local_world_size: 0,
        });
        entry.1 += 1;
    }
    for p in &mut out {
        p.local_world_size = nodes.get(p.node.as_str()).map_or(0, |n| n.1);
    }
    Ok(out)
}

/// The hostfile's text: one line per task in rank order, naming its node.
pub fn hostfile(nodes_by_rank: &[&str]) -> String {
    nodes_by_rank.iter().map(|n| format!("{n}\n")).collect()
}

/// The first port of the default `MASTER_PORT` range.
pub const MASTER_PORT_BASE: u16 = 29500;
/// How many ports the default range has (29500–30499).
pub const MASTER_PORT_SPAN: u16 = 1000;

/// The `MASTER_PORT` of a job without `masterPort`: `29500 + job_id % 1000`.
pub fn default_master_port(job_id: u64) -> u16 {
    MASTER_PORT_BASE + (job_id % u64::from(MASTER_PORT_SPAN)) as u16
}

/// The `MASTER_PORT` for job `job_id` on a node where the ports `busy` (sorted) of the
/// range are bound: the first free one from [`default_master_port`] on, round the range;
/// the default when every one is taken (the job then fails to bind, as it would have).
pub fn choose_master_port(job_id: u64, busy: &[u16]) -> u16 {
    let first = default_master_port(job_id);
    (0..MASTER_PORT_SPAN)
        .map(|k| MASTER_PORT_BASE + (first - MASTER_PORT_BASE + k) % MASTER_PORT_SPAN)
        .find(|p| busy.binary_search(p).is_err())
        .unwrap_or(first)
}

/// Whether `port` is in the range [`choose_master_port`] chooses from.
pub fn in_master_range(port: u16) -> bool {
    (MASTER_PORT_BASE..MASTER_PORT_BASE + MASTER_PORT_SPAN).contains(&port)
}

/// Whether `name` can be an environment variable name: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A PCI address `domain:bus:device.function` as numbers, for ordering; `0000:3b:00.0` and
/// nvidia-smi's `00000000:3B:00.0` are the same. `None` when it does not read as one.
fn pci_key(bus_id: &str) -> Option<(u32, u32, u32, u32)> {
    let (domain, rest) = bus_id.trim().split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (device, function) = rest.split_once('.')?;
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    Some((hex(domain)?, hex(bus)?, hex(device)?, hex(function)?))
}

/// A bus id for comparison: its numbers when it reads as one, else its lowercase text.
fn bus_order(bus_id: &str) -> (Option<(u32, u32, u32, u32)>, String) {
    let key = pci_key(bus_id);
    let text = if key.is_some() {
        String::new()
    } else {
        bus_id.trim().to_ascii_lowercase()
    };
    (key, text)
}

/// `CUDA_VISIBLE_DEVICES` under `CUDA_DEVICE_ORDER=PCI_BUS_ID`: the index of each of the
/// task's GPUs among all of the node's GPUs sorted by PCI bus id, ascending, comma-joined.
pub fn cuda_visible_devices(task_gpus: &[String], node_gpus: &[String]) -> Result<String, TaskEnvError> {
    let mut order: Vec<_> = node_gpus.iter().map(|g| bus_order(g)).collect();
    order.sort();
    order.dedup();
    let mut indices = Vec::with_capacity(task_gpus.len());
    for gpu in task_gpus {
        let key = bus_order(gpu);
        let Some(i) = order.iter().position(|k| *k == key) else {
            return Err(TaskEnvError::GpuNotOnNode {
                gpu: gpu.clone(),
                node_gpus: node_gpus.join(","),
            });
        };
        indices.push(i);
    }
    indices.sort_unstable();
    indices.dedup();
    Ok(indices.iter().map(usize::to_string).collect::<Vec<_>>().join(","))
}

/// `NCCL_IB_HCA`: port 1 of each rail, `mlx5_0:1,mlx5_1:1`.
pub fn nccl_ib_hca(nics: &[String]) -> String {
    nics.iter().map(|n| format!("{n}:1")).collect::<Vec<_>>().join(",")
}

/// What a job that asks for Slurm's variables (`compat: slurm`, or from `hyperplan
/// sbatch`) adds to them, beyond what every task already knows: existing scripts read
/// `SLURM_*` and should run unchanged.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlurmJob {
    /// The job's numeric id (`SLURM_JOB_ID`).
    pub job_id: u64,
    /// The directory it was submitted from, else its working directory.
    pub submit_dir: String,
    /// Whole CPUs per task, when the task asks whole CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus_per_task: Option<u32>,
    /// Set only when the planner knows a cluster name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
}

/// Everything [`task_env`] needs to know about one task.
#[derive(Debug, Clone, Copy)]
pub struct TaskEnvInput<'a> {
    pub job: &'a str,
    /// The task instance, e.g. `worker-3`.
    pub task: &'a str,
    pub place: &'a RankPlace,
    /// W.
    pub world_size: u32,
    /// N.
    pub nnodes: u32,
    /// One entry per task, in rank order.
    pub nodes_by_rank: &'a [&'a str],
    /// Where the agent wrote [`hostfile`].
    pub hostfile_path: &'a str,
    /// The task's PUs as a CPU list (`0-23,112-135`).
    pub cpus: &'a str,
    pub numa_nodes: &'a [u32],
    /// The task's GPUs, PCI bus ids.
    pub gpus: &'a [String],
    /// All of the node's GPUs, PCI bus ids (any order).
    pub node_gpus: &'a [String],
    /// The task's rails (`mlx5_0`, …).
    pub nics: &'a [String],
    /// The HyperNodes the task's node is in, lowest tier first.
    pub hypernodes: &'a [String],
    pub master_addr: &'a str,
    pub master_port: u16,
    /// `Some` for a job that asks for the `SLURM_*` variables.
    pub slurm: Option<&'a SlurmJob>,
    /// `Some` for an element of an array: its `*_ARRAY_*` variables.
    pub array: Option<&'a ArrayElement>,
    /// The job's `env`: set last, over everything else.
    pub job_env: &'a BTreeMap<String, String>,
}

/// `SLURM_ARRAY_TASK_STEP`: the step of a spec that is one range (`0-30:10`, `1-100`);
/// `None` for a list, where no one step describes the indices.
fn array_step(a: &ArrayElement) -> Option<u32> {
    match a.spec.ranges.as_slice() {
        [one] if one.start < one.end => Some(one.step),
        _ => None,
    }
}

/// The task's environment (see the module header), sorted by name.
pub fn task_env(input: &TaskEnvInput<'_>) -> Result<BTreeMap<String, String>, TaskEnvError> {
    let p = input.place;
    let pus = parse_cpu_list(input.cpus)?;
    let join = |items: &[String]| items.join(",");
    let mut env = BTreeMap::new();
    let mut set = |k: &str, v: String| {
        env.insert(k.to_string(), v);
    };
    set("HYPERPLAN_JOB", input.job.to_string());
    set("HYPERPLAN_TASK", input.task.to_string());
    set("HYPERPLAN_RANK", p.rank.to_string());
    set("HYPERPLAN_LOCAL_RANK", p.local_rank.to_string());
    set("HYPERPLAN_NODE_RANK", p.node_rank.to_string());
    set("HYPERPLAN_NODE", p.node.clone());
    set("HYPERPLAN_NTASKS", input.world_size.to_string());
    set("HYPERPLAN_NNODES", input.nnodes.to_string());
    set("HYPERPLAN_NODELIST", compress(input.nodes_by_rank));
    set("HYPERPLAN_HOSTFILE", input.hostfile_path.to_string());
    set("HYPERPLAN_CPUS", input.cpus.trim().to_string());
    let numa: Vec<String> = input.numa_nodes.iter().map(u32::to_string).collect();
    set("HYPERPLAN_NUMA_NODES", numa.join(","));
    set("HYPERPLAN_GPUS", join(input.gpus));
    set("HYPERPLAN_NICS", join(input.nics));
    set("HYPERPLAN_HYPERNODES", join(input.hypernodes));
    set("RANK", p.rank.to_string());
    set("LOCAL_RANK", p.local_rank.to_string());
    set("WORLD_SIZE", input.world_size.to_string());
    set("LOCAL_WORLD_SIZE", p.local_world_size.to_string());
    set("GROUP_RANK", p.node_rank.to_string());
    set("NODE_RANK", p.node_rank.to_string());
    set("MASTER_ADDR", input.master_addr.to_string());
    set("MASTER_PORT", input.master_port.to_string());
    if !input.node_gpus.is_empty() || !input.gpus.is_empty() {
        set("CUDA_DEVICE_ORDER", "PCI_BUS_ID".to_string());
        set(
            "CUDA_VISIBLE_DEVICES",
            cuda_visible_devices(input.gpus, input.node_gpus)?,
        );
    }
    if !input.nics.is_empty() {
        set("NCCL_IB_HCA", nccl_ib_hca(input.nics));
    }
    if !pus.is_empty() {
        set("OMP_NUM_THREADS", pus.len().to_string());
    }
    if let Some(slurm) = input.slurm {
        set("SLURM_JOB_ID", slurm.job_id.to_string());
        set("SLURM_JOB_NAME", input.job.to_string());
        set("SLURM_JOB_NODELIST", compress(input.nodes_by_rank));
        set("SLURM_NNODES", input.nnodes.to_string());
        set("SLURM_NTASKS", input.world_size.to_string());
        set("SLURM_PROCID", p.rank.to_string());
        set("SLURM_LOCALID", p.local_rank.to_string());
        set("SLURM_NODEID", p.node_rank.to_string());
        set("SLURM_SUBMIT_DIR", slurm.submit_dir.clone());
        if let Some(n) = slurm.cpus_per_task {
            set("SLURM_CPUS_PER_TASK", n.to_string());
        }
        if let Some(name) = &slurm.cluster_name {
            set("SLURM_CLUSTER_NAME", name.clone());
        }
    }
    if let Some(a) = input.array {
        let prefixes: &[&str] = if input.slurm.is_some() {
            &["HYPERPLAN", "SLURM"]
        } else {
            &["HYPERPLAN"]
        };
        for prefix in prefixes {
            set(&format!("{prefix}_ARRAY_JOB_ID"), a.array_id.to_string());
            set(&format!("{prefix}_ARRAY_TASK_ID"), a.index.to_string());
            set(&format!("{prefix}_ARRAY_TASK_COUNT"), a.count.to_string());
            set(&format!("{prefix}_ARRAY_TASK_MIN"), a.min.to_string());
            set(&format!("{prefix}_ARRAY_TASK_MAX"), a.max.to_string());
        }
        if input.slurm.is_some()
            && let Some(step) = array_step(a)
        {
            set("SLURM_ARRAY_TASK_STEP", step.to_string());
        }
    }
    env.extend(input.job_env.iter().map(|(k, v)| (k.clone(), v.clone())));
    Ok(env)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// 2 nodes × 4 tasks; the planner's ranks interleave them (node b holds rank 0).
    fn two_by_four() -> Vec<(u32, &'static str)> {
        vec![
            (4, "gpu001"),
            (0, "gpu002"),
            (1, "gpu002"),
            (5, "gpu001"),
            (2, "gpu002"),
            (6, "gpu001"),
            (3, "gpu002"),
            (7, "gpu001"),
        ]
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn ranks_local_ranks_and_node_ranks() {
        let places = local_ranks(&two_by_four()).unwrap();
        let got: Vec<_> = places
            .iter()
            .map(|p| (p.rank, p.node.as_str(), p.node_rank, p.local_rank, p.local_world_size))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, "gpu002", 0, 0, 4),
                (1, "gpu002", 0, 1, 4),
                (2, "gpu002", 0, 2, 4),
                (3, "gpu002", 0, 3, 4),
                (4, "gpu001", 1, 0, 4),
                (5, "gpu001", 1, 1, 4),
                (6, "gpu001", 1, 2, 4),
                (7, "gpu001", 1, 3, 4),
            ]
        );
    }

    #[test]
    fn uneven_and_interleaved_placements() {
        let places = local_ranks(&[(2, "a"), (0, "a"), (1, "b")]).unwrap();
        let got: Vec<_> = places
            .iter()
            .map(|p| (p.rank, p.node_rank, p.local_rank, p.local_world_size))
            .collect();
        assert_eq!(got, vec![(0, 0, 0, 2), (1, 1, 0, 1), (2, 0, 1, 2)]);
        assert_eq!(local_ranks(&[]).unwrap(), vec![]);
        assert_eq!(local_ranks(&[(1, "a"), (1, "b")]), Err(TaskEnvError::DuplicateRank(1)));
    }

    #[test]
    fn hostfile_repeats_nodes_per_task_in_rank_order() {
        let places = local_ranks(&two_by_four()).unwrap();
        let nodes: Vec<&str> = places.iter().map(|p| p.node.as_str()).collect();
        assert_eq!(hostfile(&nodes), "gpu002\n".repeat(4) + &"gpu001\n".repeat(4));
        assert_eq!(hostfile(&[]), "");
    }

    #[test]
    fn master_port_default_range() {
        assert_eq!(default_master_port(0), 29500);
        assert_eq!(default_master_port(7), 29507);
        assert_eq!(default_master_port(999), 30499);
        assert_eq!(default_master_port(1000), 29500);
        assert_eq!(default_master_port(u64::MAX), 29500 + (u64::MAX % 1000) as u16);
    }

    #[test]
    fn a_master_port_is_chosen_free_round_the_range() {
        assert_eq!(choose_master_port(7, &[]), 29507);
        assert_eq!(choose_master_port(7, &[29507, 29508, 29600]), 29509);
        assert_eq!(choose_master_port(999, &[30499]), 29500);
        let all: Vec<u16> = (29500..30500).collect();
        assert_eq!(choose_master_port(7, &all), 29507);
        assert!(in_master_range(29500) && in_master_range(30499));
        assert!(!in_master_range(30500) && !in_master_range(29499));
    }

    #[test]
    fn env_names() {
        for ok in ["A", "_", "PATH", "my_var2", "_X1"] {
            assert!(is_env_name(ok), "{ok}");
        }
        for bad in ["", "1A", "A-B", "A=B", "A B", "É", "A\0"] {
            assert!(!is_env_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn cuda_indices_follow_pci_bus_order() {
        // The node lists its GPUs out of order, in mixed spellings.
        let node = strings(&[
            "0000:DB:00.0",
            "0000:1a:00.0",
            "00000000:9C:00.0",
            "0000:3b:00.0",
            "0000:5e:00.0",
        ]);
        // Sorted: 1a=0, 3b=1, 5e=2, 9c=3, db=4.
        assert_eq!(
            cuda_visible_devices(&strings(&["0000:db:00.0", "0000:3B:00.0"]), &node).unwrap(),
            "1,4"
        );
        assert_eq!(cuda_visible_devices(&strings(&["0000:9c:00.0"]), &node).unwrap(), "3");
        assert_eq!(cuda_visible_devices(&[], &node).unwrap(), "");
        let e = cuda_visible_devices(&strings(&["0000:af:00.0"]), &node).unwrap_err();
        assert!(
            matches!(e, TaskEnvError::GpuNotOnNode { ref gpu, .. } if gpu == "0000:af:00.0"),
            "{e}"
        );
    }

    #[test]
    fn nccl_rails() {
        assert_eq!(nccl_ib_hca(&strings(&["mlx5_0", "mlx5_3"])), "mlx5_0:1,mlx5_3:1");
        assert_eq!(nccl_ib_hca(&[]), "");
    }

    struct Fixture {
        places: Vec<RankPlace>,
        nodes: Vec<&'static str>,
        node_gpus: Vec<String>,
        gpus: Vec<String>,
        nics: Vec<String>,
        hypernodes: Vec<String>,
        job_env: BTreeMap<String, String>,
        slurm: Option<SlurmJob>,
        array: Option<ArrayElement>,
    }

    impl Fixture {
        fn new() -> Self {
            let places = local_ranks(&two_by_four()).unwrap();
            let nodes = vec![
                "gpu002", "gpu002", "gpu002", "gpu002", "gpu001", "gpu001", "gpu001", "gpu001",
            ];
            Fixture {
                places,
                nodes,
                node_gpus: strings(&["0000:db:00.0", "0000:1a:00.0", "0000:3b:00.0", "0000:5e:00.0"]),
                gpus: strings(&["0000:db:00.0"]),
                nics: strings(&["mlx5_3"]),
                hypernodes: strings(&["leaf-1", "spine-0"]),
                job_env: BTreeMap::new(),
                slurm: None,
                array: None,
            }
        }

        fn input<'a>(&'a self, rank: usize, cpus: &'a str) -> TaskEnvInput<'a> {
            TaskEnvInput {
                job: "train",
                task: "worker-5",
                place: &self.places[rank],
                world_size: 8,
                nnodes: 2,
                nodes_by_rank: &self.nodes,
                hostfile_path: "/var/lib/hyperplan-agent/jobs/7/hostfile",
                cpus,
                numa_nodes: &[1],
                gpus: &self.gpus,
                node_gpus: &self.node_gpus,
                nics: &self.nics,
                hypernodes: &self.hypernodes,
                master_addr: "10.0.0.2",
                master_port: default_master_port(7),
                slurm: self.slurm.as_ref(),
                array: self.array.as_ref(),
                job_env: &self.job_env,
            }
        }
    }

    #[test]
    fn every_variable_of_a_rank() {
        let f = Fixture::new();
        let env = task_env(&f.input(5, "56-63,168-175")).unwrap();
        let expected: BTreeMap<String, String> = [
            ("HYPERPLAN_JOB", "train"),
            ("HYPERPLAN_TASK", "worker-5"),
            ("HYPERPLAN_RANK", "5"),
            ("HYPERPLAN_LOCAL_RANK", "1"),
            ("HYPERPLAN_NODE_RANK", "1"),
            ("HYPERPLAN_NODE", "gpu001"),
            ("HYPERPLAN_NTASKS", "8"),
            ("HYPERPLAN_NNODES", "2"),
            ("HYPERPLAN_NODELIST", "gpu[001-002]"),
            ("HYPERPLAN_HOSTFILE", "/var/lib/hyperplan-agent/jobs/7/hostfile"),
            ("HYPERPLAN_CPUS", "56-63,168-175"),
            ("HYPERPLAN_NUMA_NODES", "1"),
            ("HYPERPLAN_GPUS", "0000:db:00.0"),
            ("HYPERPLAN_NICS", "mlx5_3"),
            ("HYPERPLAN_HYPERNODES", "leaf-1,spine-0"),
            ("RANK", "5"),
            ("LOCAL_RANK", "1"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_WORLD_SIZE", "4"),
            ("GROUP_RANK", "1"),
            ("NODE_RANK", "1"),
            ("MASTER_ADDR", "10.0.0.2"),
            ("MASTER_PORT", "29507"),
            ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
            ("CUDA_VISIBLE_DEVICES", "3"),
            ("NCCL_IB_HCA", "mlx5_3:1"),
            ("OMP_NUM_THREADS", "16"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(env, expected);
    }

    #[test]
    fn the_job_env_wins() {
        let mut f = Fixture::new();
        f.job_env = [
            ("OMP_NUM_THREADS", "2"),
            ("NCCL_IB_HCA", "mlx5_0"),
            ("RANK", "x"),
            ("FOO", "bar"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let env = task_env(&f.input(0, "0-3")).unwrap();
        assert_eq!(env["OMP_NUM_THREADS"], "2");
        assert_eq!(env["NCCL_IB_HCA"], "mlx5_0");
        assert_eq!(env["RANK"], "x");
        assert_eq!(env["FOO"], "bar");
        assert_eq!(env["LOCAL_RANK"], "0");
    }

    #[test]
    fn no_pus_gpus_or_rails_leaves_their_variables_out() {
        let mut f = Fixture::new();
        f.node_gpus.clear();
        f.gpus.clear();
        f.nics.clear();
        let env = task_env(&f.input(0, "")).unwrap();
        for absent in [
            "OMP_NUM_THREADS",
            "CUDA_VISIBLE_DEVICES",
            "CUDA_DEVICE_ORDER",
            "NCCL_IB_HCA",
        ] {
            assert!(!env.contains_key(absent), "{absent}");
        }
        assert_eq!(env["HYPERPLAN_GPUS"], "");
        assert_eq!(env["HYPERPLAN_NICS"], "");
    }

    #[test]
    fn a_task_without_gpus_on_a_gpu_node_sees_none() {
        let mut f = Fixture::new();
        f.gpus.clear();
        let env = task_env(&f.input(0, "0")).unwrap();
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "");
        assert_eq!(env["OMP_NUM_THREADS"], "1");
    }

    #[test]
    fn bad_inputs_are_errors_not_panics() {
        let f = Fixture::new();
        assert!(matches!(task_env(&f.input(0, "0-x")), Err(TaskEnvError::Cpus(_))));
        let mut f = Fixture::new();
        f.gpus = strings(&["0000:ff:00.0"]);
        assert!(matches!(
            task_env(&f.input(0, "0")),
            Err(TaskEnvError::GpuNotOnNode { .. })
        ));
    }

    #[test]
    fn slurm_variables_of_a_two_node_four_rank_job() {
        let mut f = Fixture::new();
        // 4 ranks: 0 and 1 on gpu002, 2 and 3 on gpu001.
        f.places = local_ranks(&[(2, "gpu001"), (0, "gpu002"), (3, "gpu001"), (1, "gpu002")]).unwrap();
        f.nodes = vec!["gpu002", "gpu002", "gpu001", "gpu001"];
        f.slurm = Some(SlurmJob {
            job_id: 42,
            submit_dir: "/home/ada/run".into(),
            cpus_per_task: Some(8),
            cluster_name: None,
        });
        let slurm_of = |rank: usize| {
            let mut input = f.input(rank, "0-7");
            input.world_size = 4;
            let env = task_env(&input).unwrap();
            env.into_iter()
                .filter(|(k, _)| k.starts_with("SLURM_"))
                .collect::<BTreeMap<_, _>>()
        };
        let env = slurm_of(3);
        let expected: BTreeMap<String, String> = [
            ("SLURM_JOB_ID", "42"),
            ("SLURM_JOB_NAME", "train"),
            ("SLURM_JOB_NODELIST", "gpu[001-002]"),
            ("SLURM_NNODES", "2"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_CPUS_PER_TASK", "8"),
            ("SLURM_SUBMIT_DIR", "/home/ada/run"),
            ("SLURM_PROCID", "3"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NODEID", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(env, expected);
        let ids: Vec<_> = (0..4)
            .map(|r| {
                let e = slurm_of(r);
                (
                    e["SLURM_PROCID"].clone(),
                    e["SLURM_LOCALID"].clone(),
                    e["SLURM_NODEID"].clone(),
                )
            })
            .collect();
        let want: Vec<_> = [("0", "0", "0"), ("1", "1", "0"), ("2", "0", "1"), ("3", "1", "1")]
            .iter()
            .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
            .collect();
        assert_eq!(ids, want);
        assert!(!env.contains_key("SLURM_CLUSTER_NAME"));
    }

    #[test]
    fn slurm_variables_only_when_asked_and_the_job_env_wins() {
        let mut f = Fixture::new();
        let env = task_env(&f.input(0, "0")).unwrap();
        assert!(!env.keys().any(|k| k.starts_with("SLURM_")));
        f.slurm = Some(SlurmJob {
            job_id: 7,
            submit_dir: "/w".into(),
            cpus_per_task: None,
            cluster_name: Some("alps".into()),
        });
        f.job_env = [("SLURM_JOB_NAME".to_string(), "mine".to_string())]
            .into_iter()
            .collect();
        let env = task_env(&f.input(0, "0")).unwrap();
        assert_eq!(env["SLURM_JOB_NAME"], "mine");
        assert_eq!(env["SLURM_CLUSTER_NAME"], "alps");
        assert!(!env.contains_key("SLURM_CPUS_PER_TASK"));
    }

    fn element(spec: &str, index: u32) -> ArrayElement {
        let spec = crate::array::ArraySpec::parse(spec).unwrap();
        let indices = spec.indices();
        ArrayElement {
            array_id: 40,
            array_name: "sweep".into(),
            index,
            count: indices.len() as u32,
            min: indices[0],
            max: indices[indices.len() - 1],
            spec,
        }
    }

    fn array_vars(env: &BTreeMap<String, String>) -> BTreeMap<&str, &str> {
        env.iter()
            .filter(|(k, _)| k.contains("_ARRAY_"))
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    #[test]
    fn an_array_element_knows_its_place_in_the_array() {
        let mut f = Fixture::new();
        let env = task_env(&f.input(0, "0")).unwrap();
        assert!(array_vars(&env).is_empty(), "not an element: none");
        f.array = Some(element("0-30:10%2", 20));
        let env = task_env(&f.input(0, "0")).unwrap();
        assert_eq!(
            array_vars(&env),
            BTreeMap::from([
                ("HYPERPLAN_ARRAY_JOB_ID", "40"),
                ("HYPERPLAN_ARRAY_TASK_ID", "20"),
                ("HYPERPLAN_ARRAY_TASK_COUNT", "4"),
                ("HYPERPLAN_ARRAY_TASK_MIN", "0"),
                ("HYPERPLAN_ARRAY_TASK_MAX", "30"),
            ]),
            "no SLURM_* without compat: slurm"
        );
    }

    #[test]
    fn slurm_array_variables_with_the_step_of_one_range() {
        let mut f = Fixture::new();
        f.slurm = Some(SlurmJob {
            job_id: 43,
            submit_dir: "/w".into(),
            cpus_per_task: None,
            cluster_name: None,
        });
        f.array = Some(element("0-30:10", 10));
        let env = task_env(&f.input(0, "0")).unwrap();
        let vars = array_vars(&env);
        for (k, v) in [
            ("SLURM_ARRAY_JOB_ID", "40"),
            ("SLURM_ARRAY_TASK_ID", "10"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_MAX", "30"),
            ("SLURM_ARRAY_TASK_STEP", "10"),
            ("HYPERPLAN_ARRAY_TASK_ID", "10"),
        ] {
            assert_eq!(vars.get(k), Some(&v), "{k}");
        }
        assert_eq!(vars.len(), 11);
        // The element's own id stays SLURM_JOB_ID.
        assert_eq!(env["SLURM_JOB_ID"], "43");
        f.array = Some(element("1-100%8", 7));
        let env = task_env(&f.input(0, "0")).unwrap();
        assert_eq!(env["SLURM_ARRAY_TASK_STEP"], "1");
        // A list has no one step; nor has a lone index.
        for spec in ["1,3,7-9", "5"] {
            f.array = Some(element(spec, 5));
            let env = task_env(&f.input(0, "0")).unwrap();
            assert!(!env.contains_key("SLURM_ARRAY_TASK_STEP"), "{spec}");
            assert_eq!(array_vars(&env).len(), 10, "{spec}");
        }
        f.array = Some(element("1,3,7-9", 8));
        let env = task_env(&f.input(0, "0")).unwrap();
        assert_eq!(
            (
                env["SLURM_ARRAY_TASK_COUNT"].as_str(),
                env["SLURM_ARRAY_TASK_MIN"].as_str(),
                env["SLURM_ARRAY_TASK_MAX"].as_str()
            ),
            ("5", "1", "9")
        );
    }

    #[test]
    fn the_job_env_wins_over_array_variables() {
        let mut f = Fixture::new();
        f.array = Some(element("1-4", 2));
        f.job_env = BTreeMap::from([("HYPERPLAN_ARRAY_TASK_ID".to_string(), "x".to_string())]);
        let env = task_env(&f.input(0, "0")).unwrap();
        assert_eq!(env["HYPERPLAN_ARRAY_TASK_ID"], "x");
        assert_eq!(env["HYPERPLAN_ARRAY_TASK_COUNT"], "4");
    }
}
