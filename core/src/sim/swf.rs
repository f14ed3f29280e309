//! A Standard Workload Format log as jobs for the simulator (`hyperplan simulate --swf`):
//! a site replays its own history against a cluster and a config before deploying them.
//!
//! Each log job becomes one task spec of `processors` replicas, each asking for
//! `1/procs-per-node` of the smallest node's CPUs (one processor = one node by default), with
//! the log's run time as `runtime`, its requested time as `timeLimit` (the run time when
//! the log has none: a perfect estimate), its submit time (times `time_scale`: below 1
//! packs arrivals closer, a heavier load), and its user as `user`. Jobs the log cannot
//! run (unknown run time or processors) are skipped and counted.

use std::collections::BTreeMap;

use hyperplan_shared::swf::{SwfJob, SwfLog};
use hyperplan_shared::{ClusterSpec, JobSpec, NetworkTopology, Resources, TaskSpec, TopologyMode};

use crate::config::PlannerConfig;

/// How log jobs ask for topology.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopologyAsk {
    /// Hard: the lowest tier one of whose HyperNodes can hold the job.
    Hard,
    /// The same tier, soft: preferred, not required.
    Soft,
    /// Hard for the jobs that fit a leaf (tier 1: one leaf, full bisection among their
    /// ranks); wider jobs ask soft for their lowest tier, so they are packed into as few
    /// leaves and spines as the free nodes allow, never held back for it.
    Leaf,
    /// No topology: anywhere.
    None,
}

/// How a log becomes jobs.
#[derive(Clone, Copy, Debug)]
pub struct SwfOptions {
    /// How jobs ask for topology.
    pub topology: TopologyAsk,
    /// Log processors per node (1: one processor is one node).
    pub procs_per_node: u32,
    /// Submit times are multiplied by it (1: as logged).
    pub time_scale: f64,
    /// A job that asks for a hard topology takes it as soft once it has waited this long
    /// after its submit (`networkTopology.softAfter`, Slurm's `--switches=N@TIME`);
    /// `None`: hard until it starts.
    pub soft_after: Option<u64>,
}

impl Default for SwfOptions {
    fn default() -> Self {
        Self {
            topology: TopologyAsk::Hard,
            procs_per_node: 1,
            time_scale: 1.0,
            soft_after: None,
        }
    }
}

/// Why a log cannot be replayed on a cluster.
#[derive(Debug, thiserror::Error)]
pub enum SwfReplayError {
    /// No node with CPUs.
    #[error("the cluster has no node with CPUs to replay log processors on")]
    NoCpus,
    /// A processor would get less than a millicore.
    #[error("--procs-per-node {procs}: the smallest node has {millis} millicores, less than 1 per processor")]
    TooManyProcs {
        /// `--procs-per-node`.
        procs: u32,
        /// The smallest node's CPU, in millicores.
        millis: u64,
    },
    /// `--time-scale` is not a positive number.
    #[error("--time-scale {0}: expected a number above 0")]
    TimeScale(f64),
}

/// The log's jobs, ready to simulate, and the ones left out.
#[derive(Debug, Default)]
pub struct Replay {
    /// In log order.
    pub jobs: Vec<JobSpec>,
    /// (line, why) per job left out.
    pub skipped: Vec<(usize, String)>,
}

/// The largest HyperNode of each tier, in nodes: the lowest tier that can hold a job is
/// the first whose largest HyperNode has room for it.
pub fn tier_sizes(cluster: &ClusterSpec) -> BTreeMap<u32, u32> {
    let mut planner = super::planner_for(cluster, PlannerConfig::default());
    planner.tick(0);
    let mut sizes = BTreeMap::new();
    for h in planner.hyper_nodes().hyper_nodes {
        let s = sizes.entry(h.tier).or_insert(0);
        *s = (*s).max(h.nodes);
    }
    sizes
}

/// The log's jobs on `cluster`.
pub fn replay(log: &SwfLog, cluster: &ClusterSpec, opts: &SwfOptions) -> Result<Replay, SwfReplayError> {
    if !(opts.time_scale.is_finite() && opts.time_scale > 0.0) {
        return Err(SwfReplayError::TimeScale(opts.time_scale));
    }
    let millis = cluster
        .nodes
        .iter()
        .map(|n| {
            n.resources
                .get(hyperplan_shared::CPU)
                .saturating_sub(n.used.get(hyperplan_shared::CPU))
        })
        .filter(|&c| c > 0)
        .min()
        .ok_or(SwfReplayError::NoCpus)?;
    let per_proc = millis / u64::from(opts.procs_per_node.max(1));
    if per_proc == 0 {
        return Err(SwfReplayError::TooManyProcs {
            procs: opts.procs_per_node,
            millis,
        });
    }
    let sizes = tier_sizes(cluster);
    let mut out = Replay::default();
    for j in &log.jobs {
        match job_of(j, per_proc, &sizes, opts) {
            Ok(spec) => out.jobs.push(spec),
            Err(why) => out.skipped.push((j.line, why.to_string())),
        }
    }
    Ok(out)
}

/// Why a job of the log is left out of the replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum Skip {
    #[error("no processor count")]
    NoProcs,
    #[error("no run time")]
    NoRunTime,
}

fn job_of(j: &SwfJob, per_proc: u64, sizes: &BTreeMap<u32, u32>, opts: &SwfOptions) -> Result<JobSpec, Skip> {
    let procs = j.procs.filter(|&p| p > 0).ok_or(Skip::NoProcs)?;
    let runtime = j.runtime.ok_or(Skip::NoRunTime)?.max(1);
    let limit = j.requested_time.filter(|&t| t > 0).unwrap_or(runtime);
    let nodes = procs.div_ceil(opts.procs_per_node.max(1));
    let tier = sizes.iter().find(|(_, size)| **size >= nodes).map(|(t, _)| *t);
    let network_topology = match (opts.topology, tier) {
        (TopologyAsk::None, _) | (_, None) => None,
        (TopologyAsk::Hard, Some(t)) => Some(NetworkTopology {
            mode: TopologyMode::Hard,
            highest_tier_allowed: Some(t),
            highest_tier_name: None,
        }),
        (TopologyAsk::Leaf, Some(1)) => Some(NetworkTopology {
            mode: TopologyMode::Hard,
            highest_tier_allowed: Some(1),
            highest_tier_name: None,
        }),
        (TopologyAsk::Soft | TopologyAsk::Leaf, Some(t)) => Some(NetworkTopology {
            mode: TopologyMode::Soft,
            highest_tier_allowed: Some(t),
            highest_tier_name: None,
        }),
    };
    let hard = network_topology.as_ref().is_some_and(|t| t.mode == TopologyMode::Hard);
    let mut resources = Resources::default();
    resources.0.insert(hyperplan_shared::CPU.to_string(), per_proc);
    Ok(JobSpec {
        name: format!("j{}", j.id),
        priority: 0,
        min_available: None,
        submit_time: (j.submit as f64 * opts.time_scale).round() as u64,
        network_topology,
        tasks: vec![TaskSpec {
            name: "proc".into(),
            replicas: procs,
            runtime: Some(runtime),
            resources,
            partition_policy: None,
            topology_policy: None,
            cpu_placement: None,
            full_cores: false,
            command: Vec::new(),
            exec: Default::default(),
        }],
        run: hyperplan_shared::JobRun {
            time_limit: Some(limit),
            ..Default::default()
        },
        submit_dir: None,
        queue: None,
        user: j.user.map(|u| format!("u{u}")),
        credential: None,
        priority_class: None,
        account: None,
        segments: Vec::new(),
        hold: false,
        begin: None,
        array: None,
        element: None,
        depends_on: None,
        keep_on_failed_dependency: false,
        topology_soft_after: opts.soft_after.filter(|_| hard),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::testing::ClusterBuilder;

    /// Job 1: 2 processors (fits a leaf of 4); job 2: 6 (wider than a leaf).
    const LOG: &str = "; Computer: test\n1 0 -1 100 2 -1 -1 2 200 -1 1 1 -1 -1 -1 -1 -1 -1\n\
                       2 5 -1 100 6 -1 -1 6 200 -1 1 2 -1 -1 -1 -1 -1 -1\n";

    fn asks(topology: TopologyAsk, soft_after: Option<u64>) -> Vec<(Option<TopologyMode>, Option<u64>)> {
        let log = hyperplan_shared::swf::parse_swf(std::path::Path::new("t.swf"), LOG, None).unwrap();
        let cluster = ClusterBuilder::fat_tree(&[4, 2], 1).node_resources("cpu=4").build();
        let opts = SwfOptions {
            topology,
            soft_after,
            ..SwfOptions::default()
        };
        let r = replay(&log, &cluster, &opts).unwrap();
        r.jobs
            .iter()
            .map(|j| (j.network_topology.as_ref().map(|t| t.mode), j.topology_soft_after))
            .collect()
    }

    #[test]
    fn soft_after_goes_only_to_hard_asks() {
        let (hard, soft) = (Some(TopologyMode::Hard), Some(TopologyMode::Soft));
        assert_eq!(asks(TopologyAsk::Leaf, Some(600)), [(hard, Some(600)), (soft, None)]);
        assert_eq!(
            asks(TopologyAsk::Hard, Some(600)),
            [(hard, Some(600)), (hard, Some(600))]
        );
        assert_eq!(asks(TopologyAsk::Soft, Some(600)), [(soft, None), (soft, None)]);
        assert_eq!(asks(TopologyAsk::None, Some(600)), [(None, None), (None, None)]);
        assert_eq!(asks(TopologyAsk::Leaf, None), [(hard, None), (soft, None)]);
    }
}
