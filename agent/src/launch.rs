//! From the planner's `Job` and `Launch` frames to the spec a shepherd runs: the task's
//! place among its job's ranks (local rank, node rank), its whole environment
//! (`hyperplan_shared::taskenv`), its output files, and its pinning when the agent pins.
//! Pure: the caller writes the spec and the hostfile and starts the shepherd.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hyperplan_net::messages::{JobWorld, LaunchTask};
use hyperplan_shared::names::{NameKind, check_job_name, check_name};
use hyperplan_shared::outpattern::{PatternError, PatternValues, output_path};
use hyperplan_shared::taskenv::{TaskEnvError, TaskEnvInput, hostfile, local_ranks, task_env};

use crate::shepherd::{LaunchSpec, MemoryPolicy};

/// `PATH` of a task whose job sets none (nothing is inherited from the agent).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What the agent knows that the frames do not.
#[derive(Clone, Debug)]
pub struct NodeContext<'a> {
    /// This node's name (as the planner knows it).
    pub node: &'a str,
    /// All of this node's GPUs, PCI bus ids (for `CUDA_VISIBLE_DEVICES` numbering).
    pub gpus: &'a [String],
    pub state_dir: &'a Path,
    /// Pin the task to its PUs and NUMA nodes (`--pin`: the probed topology is this
    /// machine's); otherwise it runs unpinned, its variables still say what it was given.
    pub pin: bool,
    pub allow_root: bool,
}

/// Why a task cannot be started from what the planner sent. Each names the task.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("task {job}/{task}: {what}")]
    Frame { job: String, task: String, what: String },
    #[error("task {job}/{task}: the job's ranks: {source}")]
    Ranks {
        job: String,
        task: String,
        #[source]
        source: TaskEnvError,
    },
    #[error("task {job}/{task}: its output file: {source}")]
    Output {
        job: String,
        task: String,
        #[source]
        source: PatternError,
    },
}

/// The shepherd's spec and the job's hostfile (one node per line, one line per task, by
/// rank), whose path is `hostfile_path(state_dir, job, job_id)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    pub spec: LaunchSpec,
    pub hostfile: String,
}

/// Where the job's hostfile lives on this node: beside its tasks' directories.
pub fn hostfile_path(state_dir: &Path, job: &str, job_id: hyperplan_shared::ids::JobId) -> PathBuf {
    crate::shepherd::layout::job_dir(state_dir, job, job_id).join("hostfile")
}

/// What a batch job's tasks on a node get beyond a task's own: its allocation in the
/// forms MPI's launchers read, and `hyperplan exec --node` as their remote shell, so an
/// `mpirun` (Open MPI) or `mpiexec` (MPICH's hydra) in the batch script uses the job's
/// nodes and slots without ssh.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchFiles {
    /// (file name in the job's directory, text, mode).
    pub files: Vec<(&'static str, String, u32)>,
}

/// Open MPI's hostfile (`node slots=N`, nodes in rank order).
pub const OPENMPI_HOSTFILE: &str = "hostfile.openmpi";
/// Hydra's (`node:N`).
pub const HYDRA_HOSTFILE: &str = "hostfile.hydra";
/// The remote shell both launchers call as `rsh NODE COMMAND...`.
pub const RSH: &str = "rsh";

pub fn batch_files(world: &JobWorld, cli: &Path) -> BatchFiles {
    let mut slots = vec![0u32; world.nodes.len()];
    for &n in &world.node_of_rank {
        if let Some(s) = slots.get_mut(n as usize) {
            *s += 1;
        }
    }
    let mut openmpi = String::new();
    let mut hydra = String::new();
    for (node, n) in world.nodes.iter().zip(&slots).filter(|(_, n)| **n > 0) {
        openmpi.push_str(&format!("{node} slots={n}\n"));
        hydra.push_str(&format!("{node}:{n}\n"));
    }
    let rsh = format!(
        "#!/bin/sh\n# The remote shell of this job's mpirun: runs COMMAND on NODE inside the job.\nexec {} exec --node \"$@\"\n",
        shell_quote(&cli.to_string_lossy())
    );
    BatchFiles {
        files: vec![
            (OPENMPI_HOSTFILE, openmpi, 0o400),
            (HYDRA_HOSTFILE, hydra, 0o400),
            (RSH, rsh, 0o500),
        ],
    }
}

impl BatchFiles {
    /// The variables that point Open MPI (4 and 5) and hydra at the files in `job_dir`;
    /// the job's own `env` still wins.
    pub fn env(&self, job_dir: &Path) -> Vec<(String, String)> {
        let at = |name: &str| job_dir.join(name).to_string_lossy().into_owned();
        vec![
            ("OMPI_MCA_orte_default_hostfile".into(), at(OPENMPI_HOSTFILE)),
            ("PRTE_MCA_prte_default_hostfile".into(), at(OPENMPI_HOSTFILE)),
            ("OMPI_MCA_plm_rsh_agent".into(), at(RSH)),
            ("PRTE_MCA_plm_ssh_agent".into(), at(RSH)),
            ("HYDRA_HOST_FILE".into(), at(HYDRA_HOSTFILE)),
            ("HYDRA_LAUNCHER".into(), "rsh".into()),
            ("HYDRA_LAUNCHER_EXEC".into(), at(RSH)),
            ("HYPERPLAN_RSH".into(), at(RSH)),
        ]
    }
}

/// `s` as one word for `sh`.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

pub fn prepare(world: &JobWorld, task: &LaunchTask, node: &NodeContext<'_>) -> Result<Prepared, LaunchError> {
    let frame = |what: String| LaunchError::Frame {
        job: task.job.clone(),
        task: task.task.clone(),
        what,
    };
    // The names become directories: checked here, whatever the planner sent.
    check_job_name(&task.job).map_err(|e| frame(format!("job name: {e}")))?;
    check_name(NameKind::Task, &task.task).map_err(|e| frame(format!("task name: {e}")))?;
    if world.job != task.job || world.job_id != task.job_id {
        return Err(frame(format!(
            "the job frame is for {} (id {}), the task's job is id {}",
            world.job, world.job_id, task.job_id
        )));
    }
    let placements: Vec<(u32, &str)> = world
        .node_of_rank
        .iter()
        .enumerate()
        .filter_map(|(rank, &n)| Some((rank as u32, world.nodes.get(n as usize)?.as_str())))
        .collect();
    let ranks = local_ranks(&placements).map_err(|source| LaunchError::Ranks {
        job: task.job.clone(),
        task: task.task.clone(),
        source,
    })?;
    let place = ranks
        .iter()
        .find(|p| p.rank == task.rank)
        .filter(|p| p.node == node.node)
        .ok_or_else(|| frame(format!("rank {} is not placed on this node ({})", task.rank, node.node)))?;
    let nodes_by_rank: Vec<&str> = ranks.iter().map(|p| p.node.as_str()).collect();
    let working_dir = task
        .working_dir
        .as_deref()
        .filter(|d| d.starts_with('/'))
        .map(PathBuf::from)
        .ok_or_else(|| {
            frame("no absolute working directory (submit it with `hyperplan submit`, or set workingDir)".into())
        })?;
    let hostfile_at = hostfile_path(node.state_dir, &task.job, task.job_id);
    let mut env: BTreeMap<String, String> = BTreeMap::from([
        ("PATH".to_string(), DEFAULT_PATH.to_string()),
        ("USER".to_string(), task.user.clone()),
        ("LOGNAME".to_string(), task.user.clone()),
    ]);
    let hostfile_text = hostfile(&nodes_by_rank);
    let input = TaskEnvInput {
        job: &task.job,
        task: &task.task,
        place,
        world_size: ranks.len() as u32,
        nnodes: world.nodes.len() as u32,
        nodes_by_rank: &nodes_by_rank,
        hostfile_path: &hostfile_at.to_string_lossy(),
        cpus: &task.cpus,
        numa_nodes: &task.numa_nodes,
        gpus: &task.gpus,
        node_gpus: node.gpus,
        nics: &task.nics,
        hypernodes: &task.hyper_nodes,
        master_addr: &world.master_addr,
        master_port: world.master_port,
        slurm: world.slurm.as_ref(),
        array: world.array.as_ref(),
        job_env: &task.env,
    };
    env.extend(task_env(&input).map_err(|source| LaunchError::Ranks {
        job: task.job.clone(),
        task: task.task.clone(),
        source,
    })?);
    // Times the job's lost tasks were started again elsewhere when this one started
    // (the job's `restart` file beside its hostfile says it now).
    env.entry("HYPERPLAN_RESTART".into())
        .or_insert_with(|| world.restart.to_string());
    let values = PatternValues {
        job: &task.job,
        job_id: task.job_id.0,
        task: &task.task,
        rank: task.rank,
        node: node.node,
        user: &task.user,
        array: world.array.as_ref().map(|a| (a.array_id, a.index)),
    };
    let output = |pattern: &str| {
        output_path(&working_dir, pattern, &values).map_err(|source| LaunchError::Output {
            job: task.job.clone(),
            task: task.task.clone(),
            source,
        })
    };
    let spec = LaunchSpec {
        job: task.job.clone(),
        job_id: task.job_id,
        task: task.task.clone(),
        index: task.index,
        rank: task.rank,
        argv: task.argv.clone(),
        env,
        stdout: output(&task.output)?,
        stderr: output(&task.error)?,
        working_dir,
        user: task.user.clone(),
        allow_root: node.allow_root,
        cpus: if node.pin { task.cpus.clone() } else { String::new() },
        numa_nodes: if node.pin { task.numa_nodes.clone() } else { Vec::new() },
        memory_policy: if node.pin && task.bind_memory {
            MemoryPolicy::Bind
        } else {
            MemoryPolicy::None
        },
        cgroup: None,
        cgroups: Vec::new(),
        state_dir: node.state_dir.to_path_buf(),
        time_limit_secs: task.time_limit_secs,
        kill_grace_secs: None,
        rlimits: Default::default(),
        pmi_fd: None,
        output_mode: None,
        fence: task.fence,
        private_tmp: None,
    };
    Ok(Prepared {
        spec,
        hostfile: hostfile_text,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn world() -> JobWorld {
        JobWorld {
            job: "train".into(),
            job_id: 7.into(),
            nodes: vec!["gpu1".into(), "gpu2".into()],
            node_of_rank: vec![0, 0, 1, 1],
            master_addr: "10.0.0.1".into(),
            master_port: 29507,
            launch: Default::default(),
            restart: 0,
            slurm: None,
            array: None,
        }
    }

    fn task(rank: u32) -> LaunchTask {
        LaunchTask {
            job: "train".into(),
            job_id: 7.into(),
            task: format!("worker-{rank}"),
            index: rank,
            rank,
            user: "alice".into(),
            argv: vec!["torchrun".into(), "train.py".into()],
            env: BTreeMap::from([("OMP_NUM_THREADS".into(), "2".into())]),
            working_dir: Some("/home/alice/runs".into()),
            output: "%j-%t.out".into(),
            error: "%j-%t.err".into(),
            time_limit_secs: Some(60),
            hyper_nodes: vec!["leaf-1".into(), "spine-1".into()],
            cpus: "4-7".into(),
            numa_nodes: vec![1],
            bind_memory: true,
            gpus: vec!["0000:b1:00.0".into()],
            nics: vec!["mlx5_1".into()],
            memory_bytes: Some(1 << 30),
            max_processes: Some(100),
            epoch: 1,
            mpi: None,
            credential: None,
            run: 0,
            fence: false,
        }
    }

    fn node(pin: bool) -> NodeContext<'static> {
        static GPUS: std::sync::LazyLock<Vec<String>> =
            std::sync::LazyLock::new(|| vec!["0000:b1:00.0".into(), "0000:3b:00.0".into()]);
        NodeContext {
            node: "gpu2",
            gpus: &GPUS,
            state_dir: Path::new("/var/lib/hyperplan-agent"),
            pin,
            allow_root: false,
        }
    }

    #[test]
    fn a_task_gets_its_place_environment_files_and_pinning() {
        let p = prepare(&world(), &task(3), &node(true)).unwrap();
        let env = &p.spec.env;
        let get = |k: &str| env.get(k).map(String::as_str);
        assert_eq!(get("RANK"), Some("3"));
        assert_eq!(get("LOCAL_RANK"), Some("1"));
        assert_eq!(get("LOCAL_WORLD_SIZE"), Some("2"));
        assert_eq!(get("NODE_RANK"), Some("1"));
        assert_eq!(get("WORLD_SIZE"), Some("4"));
        assert_eq!(get("HYPERPLAN_NNODES"), Some("2"));
        assert_eq!(get("MASTER_ADDR"), Some("10.0.0.1"));
        assert_eq!(get("MASTER_PORT"), Some("29507"));
        assert_eq!(
            get("CUDA_VISIBLE_DEVICES"),
            Some("1"),
            "the 2nd of the node's GPUs by bus id"
        );
        assert_eq!(get("NCCL_IB_HCA"), Some("mlx5_1:1"));
        assert_eq!(get("OMP_NUM_THREADS"), Some("2"), "the job's own env wins");
        assert_eq!(
            get("HYPERPLAN_HOSTFILE"),
            Some("/var/lib/hyperplan-agent/tasks/train.7/hostfile")
        );
        assert_eq!(get("HYPERPLAN_HYPERNODES"), Some("leaf-1,spine-1"));
        assert_eq!(get("PATH"), Some(DEFAULT_PATH));
        assert_eq!(get("USER"), Some("alice"));
        assert_eq!(p.hostfile, "gpu1\ngpu1\ngpu2\ngpu2\n");
        assert_eq!(p.spec.stdout, Path::new("/home/alice/runs/train-worker-3.out"));
        assert_eq!(p.spec.stderr, Path::new("/home/alice/runs/train-worker-3.err"));
        assert_eq!(
            (p.spec.cpus.as_str(), p.spec.memory_policy),
            ("4-7", MemoryPolicy::Bind)
        );
        assert_eq!(p.spec.numa_nodes, [1]);
        assert_eq!(p.spec.time_limit_secs, Some(60));

        // Unpinned (a synthetic topology): no affinity, no binding; the variables still say.
        let p = prepare(&world(), &task(3), &node(false)).unwrap();
        assert_eq!((p.spec.cpus.as_str(), p.spec.memory_policy), ("", MemoryPolicy::None));
        assert_eq!(p.spec.env.get("HYPERPLAN_CPUS").map(String::as_str), Some("4-7"));
    }

    /// An element of an array: its `HYPERPLAN_ARRAY_*` variables, and `%i %A %a` in its
    /// output file names.
    #[test]
    fn an_array_element_gets_its_variables_and_file_names() {
        let mut w = world();
        let spec = hyperplan_shared::array::ArraySpec::parse("1-10%2").unwrap();
        w.array = Some(hyperplan_shared::array::ArrayElement {
            array_id: 5,
            array_name: "train".into(),
            index: 3,
            count: 10,
            min: 1,
            max: 10,
            spec,
        });
        // The planner names an element NAME[INDEX]: a name its directories may have.
        w.job = "train[3]".into();
        let mut t = task(3);
        t.job = "train[3]".into();
        t.output = "slurm-%A_%a-%i.out".into();
        let p = prepare(&w, &t, &node(true)).unwrap();
        assert_eq!(
            p.spec.env.get("HYPERPLAN_HOSTFILE").map(String::as_str),
            Some("/var/lib/hyperplan-agent/tasks/train[3].7/hostfile")
        );
        let get = |k: &str| p.spec.env.get(k).map(String::as_str);
        assert_eq!(get("HYPERPLAN_ARRAY_JOB_ID"), Some("5"));
        assert_eq!(get("HYPERPLAN_ARRAY_TASK_ID"), Some("3"));
        assert_eq!(get("HYPERPLAN_ARRAY_TASK_COUNT"), Some("10"));
        assert_eq!(get("SLURM_ARRAY_TASK_ID"), None, "no compat: slurm");
        assert_eq!(p.spec.stdout, Path::new("/home/alice/runs/slurm-5_3-7.out"));
        // Not an element: %A is the job's own id and %a nothing.
        t.job = "train".into();
        let p = prepare(&world(), &t, &node(true)).unwrap();
        assert_eq!(p.spec.stdout, Path::new("/home/alice/runs/slurm-7_-7.out"));
        assert_eq!(p.spec.env.get("HYPERPLAN_ARRAY_TASK_ID"), None);
    }

    #[test]
    fn frames_that_do_not_fit_are_errors_naming_the_task() {
        let err = |w: JobWorld, t: LaunchTask| prepare(&w, &t, &node(true)).unwrap_err().to_string();
        assert!(err(world(), task(0)).contains("rank 0 is not placed on this node (gpu2)"));
        let mut t = task(2);
        t.working_dir = Some("runs".into());
        assert!(err(world(), t).contains("no absolute working directory"));
        let mut t = task(2);
        t.job = "../etc".into();
        assert!(err(world(), t).contains("job name"));
        let mut w = world();
        w.job_id = 8.into();
        assert!(err(w, task(2)).contains("the job frame is for train (id 8)"));
        let mut t = task(2);
        t.output = "%q".into();
        assert!(err(world(), t).starts_with("task train/worker-2: its output file"));
    }
}
