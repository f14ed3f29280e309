//! From the core's `Place` commands to what agents are sent: per job and node, one `Job`
//! frame (the job's ranks and nodes, the master's address) before the `Launch` frames
//! of its tasks there. The pinning text (CPU list, devices) is rendered here, outside
//! the tick.
//!
//! A batch job (`launch: batch`) runs its command once, as rank 0; every other task only
//! holds its node for the job's steps ([`HOLD_COMMAND`], as Slurm's extern step). On each
//! node the job's lowest rank there is its node leader: it gets the union of the job's
//! CPUs, NUMA nodes, GPUs and NICs on that node and the sum of their memory, so the batch
//! command and the steps `hyperplan exec` runs in its cgroup have the whole allocation
//! there.

use std::collections::BTreeMap;
use std::sync::Arc;

use hyperplan_core::numa::hints::Policy;
use hyperplan_core::{Placement, Planner};
use hyperplan_net::messages::{JobWorld, LaunchTask, PlannerToAgent};
use hyperplan_shared::cpulist::{format_cpu_list, parse_cpu_list};
use hyperplan_shared::job::{Compat, LaunchMode};
use hyperplan_shared::taskenv::SlurmJob;

/// What a batch job's tasks other than rank 0 run: nothing but holding their node.
pub const HOLD_COMMAND: [&str; 2] = ["sleep", "infinity"];

/// The frames for one tick's placements, as (node, frame) in sending order: the jobs
/// in the order their placements came (the core's: job name, then rank), per job its
/// nodes in rank order, per node the `Job` frame, then its tasks by rank.
/// `address_of(node)` is the address its agent connects from (`MASTER_ADDR`).
pub fn frames(
    planner: &Planner,
    placements: Vec<Placement>,
    address_of: impl Fn(&str) -> Option<String>,
) -> Vec<(Arc<str>, PlannerToAgent)> {
    // Placements by job, keeping the core's order (a job's come together).
    let mut jobs: Vec<Vec<Placement>> = Vec::new();
    for p in placements {
        match jobs.last_mut() {
            Some(last) if last[0].job_id == p.job_id && last[0].job() == p.job() => last.push(p),
            _ => jobs.push(vec![p]),
        }
    }
    let mut out = Vec::new();
    for placed in jobs {
        let first = &placed[0];
        let ranks = planner.job_ranks(first.job()).unwrap_or_default();
        let restart = planner.job_restarts(first.job()).unwrap_or(0);
        let world_info = job_world(first, &ranks, restart, &address_of);
        // This tick's tasks by node, nodes in the order of their first rank.
        let mut by_node: Vec<(Arc<str>, Vec<&Placement>)> = Vec::new();
        for p in &placed {
            match by_node.iter_mut().find(|(n, _)| *n == p.node) {
                Some((_, ps)) => ps.push(p),
                None => by_node.push((p.node.clone(), vec![p])),
            }
        }
        let batch = first.spec.run.launch == LaunchMode::Batch;
        for (node, mut tasks) in by_node {
            tasks.sort_by_key(|p| p.rank);
            out.push((node.clone(), PlannerToAgent::Job(Box::new(world_info.clone()))));
            let hyper_nodes = planner.hyper_nodes_of(&node);
            let mut launches: Vec<LaunchTask> = tasks.iter().map(|p| launch(p, &hyper_nodes)).collect();
            if batch {
                batch_roles(&mut launches);
            }
            for l in launches {
                out.push((node.clone(), PlannerToAgent::Launch(Box::new(l))));
            }
        }
        // The job's other nodes learn its new world too (a lost task started again
        // elsewhere, a task placed late): their agents rewrite its hostfile.
        let mut others: Vec<&Arc<str>> = ranks
            .iter()
            .map(|(_, n)| n)
            .filter(|n| !placed.iter().any(|p| &p.node == *n))
            .collect();
        others.sort();
        others.dedup();
        for node in others {
            out.push((node.clone(), PlannerToAgent::Job(Box::new(world_info.clone()))));
        }
    }
    out
}

/// One node's tasks of a batch job, by rank: the first (the node leader) takes the
/// node's whole share of the job; every task but rank 0 holds.
fn batch_roles(launches: &mut [LaunchTask]) {
    let Some((leader, rest)) = launches.split_first_mut() else {
        return;
    };
    let mut cpus: Vec<u32> = parse_cpu_list(&leader.cpus).unwrap_or_default();
    for l in rest.iter() {
        cpus.extend(parse_cpu_list(&l.cpus).unwrap_or_default());
        leader.numa_nodes.extend(&l.numa_nodes);
        leader.gpus.extend(l.gpus.iter().cloned());
        leader.nics.extend(l.nics.iter().cloned());
        leader.memory_bytes = match (leader.memory_bytes, l.memory_bytes) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (a, b) => a.or(b),
        };
    }
    cpus.sort_unstable();
    cpus.dedup();
    leader.cpus = format_cpu_list(&cpus);
    leader.numa_nodes.sort_unstable();
    leader.numa_nodes.dedup();
    leader.gpus.sort();
    leader.gpus.dedup();
    leader.nics.sort();
    leader.nics.dedup();
    for l in launches.iter_mut().filter(|l| l.rank != 0) {
        l.argv = HOLD_COMMAND.iter().map(|s| s.to_string()).collect();
    }
}

fn job_world(
    p: &Placement,
    ranks: &[(u32, Arc<str>)],
    restart: u32,
    address_of: &impl Fn(&str) -> Option<String>,
) -> JobWorld {
    let mut nodes: Vec<String> = Vec::new();
    let mut index: BTreeMap<&str, u32> = BTreeMap::new();
    let size = ranks.last().map_or(0, |(r, _)| *r as usize + 1);
    // A rank no running task holds (one that ended) names no node.
    let mut node_of_rank = vec![u32::MAX; size];
    for (rank, node) in ranks {
        let i = *index.entry(node).or_insert_with(|| {
            nodes.push(node.to_string());
            (nodes.len() - 1) as u32
        });
        node_of_rank[*rank as usize] = i;
    }
    let master = ranks.first().map_or(&*p.node, |(_, n)| &**n);
    JobWorld {
        job: p.job().to_string(),
        job_id: p.job_id,
        nodes,
        node_of_rank,
        master_addr: address_of(master).unwrap_or_else(|| master.to_string()),
        master_port: p.master_port,
        launch: p.spec.run.launch,
        restart,
        slurm: slurm_job(p),
        array: p.spec.element.clone(),
    }
}

/// What the `SLURM_*` variables of a `compat: slurm` job need; `None` for other jobs.
/// `SLURM_CPUS_PER_TASK` only when the task asks whole CPUs, as Slurm's `-c` does.
fn slurm_job(p: &Placement) -> Option<SlurmJob> {
    if p.spec.run.compat != Compat::Slurm {
        return None;
    }
    let cpu = p
        .spec
        .tasks
        .get(p.role)
        .map_or(0, |t| t.resources.get(hyperplan_shared::CPU));
    let cpus_per_task = (cpu > 0 && cpu.is_multiple_of(1000))
        .then(|| u32::try_from(cpu / 1000).ok())
        .flatten();
    let submit_dir = p
        .spec
        .submit_dir
        .clone()
        .or_else(|| p.spec.working_dir(p.role))
        .unwrap_or_default();
    Some(SlurmJob {
        job_id: p.job_id.0,
        submit_dir,
        cpus_per_task,
        cluster_name: None,
    })
}

fn launch(p: &Placement, hyper_nodes: &[String]) -> LaunchTask {
    let task = p.spec.tasks.get(p.role);
    let exec = task.map(|t| t.exec.clone()).unwrap_or_default();
    let pin = p.pinning.as_ref();
    let strings = |v: Vec<Arc<str>>| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    LaunchTask {
        job: p.job().to_string(),
        job_id: p.job_id,
        task: p.task.to_string(),
        index: p.index,
        rank: p.rank,
        user: p.owner.to_string(),
        argv: p.command().to_vec(),
        output: exec.output_pattern().to_string(),
        error: exec.error_pattern().to_string(),
        env: exec.env,
        working_dir: p.spec.working_dir(p.role),
        time_limit_secs: p.spec.run.time_limit,
        hyper_nodes: hyper_nodes.to_vec(),
        cpus: pin.map(|p| p.cpus()).unwrap_or_default(),
        numa_nodes: pin.map(|p| p.numa_nodes()).unwrap_or_default(),
        bind_memory: pin.is_some_and(|p| p.policy != Policy::None),
        gpus: pin.map(|p| strings(p.gpus())).unwrap_or_default(),
        nics: pin.map(|p| strings(p.nics())).unwrap_or_default(),
        memory_bytes: task
            .map(|t| t.resources.get(hyperplan_shared::MEMORY))
            .filter(|&bytes| bytes > 0),
        max_processes: exec.max_processes,
        // Stamped by the driver as it sends the frame.
        epoch: 0,
        mpi: p.spec.run.mpi,
        credential: p.spec.credential.clone(),
        run: p.run,
        fence: p.spec.run.node_lost().restarts(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use hyperplan_core::testing::{ClusterBuilder, JobBuilder, MachineBuilder};
    use hyperplan_core::{Command, Planner, PlannerConfig};

    use super::*;

    fn placed(planner: &mut Planner, now: u64) -> Vec<Placement> {
        planner
            .tick(now)
            .into_iter()
            .filter_map(|c| match c {
                Command::Place(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn each_node_gets_the_job_once_then_its_tasks_in_rank_order() {
        let cluster = ClusterBuilder::flat(3)
            .hardware(MachineBuilder::new(2, 1, 4, 1).memory_per_numa(8 << 30).build())
            .build();
        let mut planner = hyperplan_core::sim::planner_for(&cluster, PlannerConfig::default());
        let mut spec = JobBuilder::gang("train", 4, "cpu=4,memory=1Gi")
            .numa("single-numa-node")
            .build();
        spec.submit_dir = Some("/home/alice".into());
        spec.tasks[0].command = vec!["torchrun".into(), "train.py".into()];
        spec.tasks[0].exec.env.insert("NCCL_DEBUG".into(), "INFO".into());
        spec.run.time_limit = Some(90);
        hyperplan_core::sim::submit::submit(&mut planner, spec, "alice");
        let placements = placed(&mut planner, 1);
        assert_eq!(placements.len(), 4);
        let frames = frames(&planner, placements, |n| Some(format!("10.0.0.{}", &n[1..])));

        // Per node: a Job frame, then that node's Launches; every node hears the same world.
        let mut worlds = Vec::new();
        let mut launches = Vec::new();
        let mut last_node: Option<Arc<str>> = None;
        for (node, frame) in &frames {
            match frame {
                PlannerToAgent::Job(w) => {
                    assert_ne!(last_node.as_ref(), Some(node), "one Job frame per node");
                    last_node = Some(node.clone());
                    worlds.push(w.clone());
                }
                PlannerToAgent::Launch(l) => {
                    assert_eq!(last_node.as_ref(), Some(node), "a Launch follows its node's Job frame");
                    launches.push((node.clone(), l.clone()));
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(worlds.windows(2).all(|w| w[0] == w[1]));
        let world = &worlds[0];
        assert_eq!(world.node_of_rank.len(), 4);
        assert_eq!(world.job_id.0, 1);
        assert_eq!(world.master_port, hyperplan_shared::taskenv::default_master_port(1));
        let master = &world.nodes[world.node_of_rank[0] as usize];
        assert_eq!(world.master_addr, format!("10.0.0.{}", &master[1..]));
        let mut ranks: Vec<u32> = launches.iter().map(|(_, l)| l.rank).collect();
        ranks.sort_unstable();
        assert_eq!(ranks, [0, 1, 2, 3]);
        for (node, l) in &launches {
            assert_eq!(world.nodes[world.node_of_rank[l.rank as usize] as usize], **node);
            assert_eq!(l.user, "alice");
            assert_eq!(l.argv, ["torchrun", "train.py"]);
            assert_eq!(l.env.get("NCCL_DEBUG").map(String::as_str), Some("INFO"));
            assert_eq!(l.working_dir.as_deref(), Some("/home/alice"));
            assert_eq!(l.output, "hyperplan-%j-%t.out");
            assert_eq!(l.time_limit_secs, Some(90));
            assert!(l.bind_memory && l.numa_nodes.len() == 1 && !l.cpus.is_empty(), "{l:?}");
            assert_eq!(
                l.memory_bytes,
                Some(1 << 30),
                "the task's memory request, for memory.max"
            );
        }
        // Two tasks on one node get disjoint PUs.
        for (i, (n1, a)) in launches.iter().enumerate() {
            for (n2, b) in &launches[i + 1..] {
                if n1 == n2 {
                    assert_ne!(a.cpus, b.cpus);
                }
            }
        }
    }

    fn world_of(spec: hyperplan_shared::JobSpec) -> JobWorld {
        let cluster = ClusterBuilder::flat(2)
            .hardware(MachineBuilder::new(2, 1, 4, 1).memory_per_numa(8 << 30).build())
            .build();
        let mut planner = hyperplan_core::sim::planner_for(&cluster, PlannerConfig::default());
        hyperplan_core::sim::submit::submit(&mut planner, spec, "alice");
        let placements = placed(&mut planner, 1);
        frames(&planner, placements, |_| None)
            .into_iter()
            .find_map(|(_, f)| match f {
                PlannerToAgent::Job(w) => Some(*w),
                _ => None,
            })
            .unwrap()
    }

    #[test]
    fn a_compat_slurm_job_frame_carries_what_slurm_variables_need() {
        let mut spec = JobBuilder::gang("sim", 2, "cpu=2,memory=1Gi").build();
        spec.submit_dir = Some("/home/alice/run".into());
        assert_eq!(world_of(spec.clone()).slurm, None, "compat: none sends nothing");
        spec.run.compat = Compat::Slurm;
        let slurm = world_of(spec.clone()).slurm.unwrap();
        assert_eq!(
            slurm,
            SlurmJob {
                job_id: 1,
                submit_dir: "/home/alice/run".into(),
                cpus_per_task: Some(2),
                cluster_name: None,
            }
        );
        // Part of a CPU: no SLURM_CPUS_PER_TASK.
        let mut spec = JobBuilder::gang("half", 1, "cpu=500m,memory=1Gi").build();
        spec.run.compat = Compat::Slurm;
        spec.tasks[0].exec.working_dir = Some("/scratch".into());
        let slurm = world_of(spec).slurm.unwrap();
        assert_eq!((slurm.cpus_per_task, slurm.submit_dir.as_str()), (None, "/scratch"));
    }
}
