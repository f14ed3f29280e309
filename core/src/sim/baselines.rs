//! The yardsticks a replay is judged against, on the same jobs: EASY backfill,
//! topology-oblivious ([`super::easy`]), and a topology-aware EASY ([`super::topo_easy`])
//! where the cluster is a regular fat tree. `hyperplan simulate --swf --baselines` and
//! `benches/policy.rs` print them beside the planner's figures.

use hyperplan_shared::{ClusterSpec, JobSpec};

use super::easy::{TraceJob, easy_backfill};
use super::metrics::{Outcome, TraceMetrics, trace_metrics};
use super::topo_easy::{TreeShape, Wide, topo_easy_backfill};

/// Both yardsticks' figures, and the outcomes they came from.
#[derive(Clone, Debug)]
pub struct Baselines {
    /// EASY, topology-oblivious.
    pub easy: TraceMetrics,
    /// Its jobs, in the order given.
    pub easy_outcomes: Vec<Outcome>,
    /// EASY with one leaf per leaf-sized job (and one domain of the lowest tier per wider
    /// job, or anywhere, as asked), on `shape`; `None` where the cluster is not a regular
    /// fat tree.
    pub topology_aware: Option<(TreeShape, TraceMetrics, Vec<Outcome>)>,
}

/// The jobs as the yardsticks see them: whole nodes (every replica one), the first
/// role's runtime, the time limit (a job without one: a second, as `easy` counts it).
pub fn trace_jobs(jobs: &[JobSpec]) -> Vec<TraceJob> {
    jobs.iter()
        .map(|j| TraceJob {
            submit: j.submit_time,
            nodes: j.replicas(),
            runtime: j.tasks.first().and_then(|t| t.runtime).unwrap_or(0),
            limit: j.run.time_limit.unwrap_or(1),
        })
        .collect()
}

/// Both yardsticks on `jobs` (one node per replica) on `cluster`, judged with leaves of
/// `leaf_size` nodes; `wide` says where the topology-aware EASY may put a job wider than
/// a leaf (as the jobs ask: `--topology hard` or `leaf`).
pub fn baselines(jobs: &[JobSpec], cluster: &ClusterSpec, leaf_size: u32, wide: Wide) -> Baselines {
    let nodes = u32::try_from(cluster.nodes.len()).unwrap_or(u32::MAX);
    let trace = trace_jobs(jobs);
    let outcome = |j: &TraceJob, start: Option<u64>, leaves: Option<u32>| Outcome {
        submit: j.submit,
        start,
        end: start.map(|s| s.saturating_add(j.runtime.min(j.limit.max(1)))),
        nodes: j.nodes,
        leaves,
    };
    let easy_outcomes: Vec<Outcome> = trace
        .iter()
        .zip(easy_backfill(nodes, &trace))
        .map(|(j, s)| outcome(j, s, None))
        .collect();
    let topology_aware = tree_shape(cluster).map(|shape| {
        let out: Vec<Outcome> = trace
            .iter()
            .zip(topo_easy_backfill(shape, wide, &trace))
            .map(|(j, s)| outcome(j, s.as_ref().map(|s| s.start), s.as_ref().map(|s| s.leaves)))
            .collect();
        (shape, trace_metrics(&out, nodes, leaf_size), out)
    });
    Baselines {
        easy: trace_metrics(&easy_outcomes, nodes, leaf_size),
        easy_outcomes,
        topology_aware,
    }
}

/// The cluster as a regular fat tree: every leaf (tier 1) with the same nodes, every
/// spine (tier 2) with the same leaves, at most one HyperNode above; `None` otherwise (a
/// topology-aware EASY over counts of nodes cannot model it).
pub fn tree_shape(cluster: &ClusterSpec) -> Option<TreeShape> {
    let mut planner = super::planner_for(cluster, crate::PlannerConfig::default());
    planner.tick(0);
    let tree = planner.hyper_nodes().hyper_nodes;
    let tier = |t: u32| tree.iter().filter(move |h| h.tier == t);
    let leaf = tier(1).next()?.nodes;
    if leaf == 0 || tier(1).any(|h| h.nodes != leaf) || tree.iter().any(|h| h.tier > 2 && tier(h.tier).count() > 1) {
        return None;
    }
    let leaves = u32::try_from(tier(1).count()).ok()?;
    let (per_spine, spines) = match tier(2).next() {
        None => (leaves, 1),
        Some(first) => {
            let per = u32::try_from(first.children.len()).ok()?;
            if tier(2).any(|h| h.children.len() != first.children.len()) {
                return None;
            }
            (per, u32::try_from(tier(2).count()).ok()?)
        }
    };
    let shape = TreeShape {
        leaf,
        per_spine,
        spines,
    };
    (per_spine > 0 && u64::from(shape.nodes()) == cluster.nodes.len() as u64).then_some(shape)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::testing::{ClusterBuilder, JobBuilder};

    #[test]
    fn a_generated_fat_tree_is_regular_and_a_ragged_one_is_not() {
        let c = ClusterBuilder::fat_tree(&[4, 3], 2).build();
        assert_eq!(
            tree_shape(&c),
            Some(TreeShape {
                leaf: 4,
                per_spine: 3,
                spines: 2
            })
        );
        let c = ClusterBuilder::fat_tree(&[4], 3).build();
        assert_eq!(
            tree_shape(&c),
            Some(TreeShape {
                leaf: 4,
                per_spine: 3,
                spines: 1
            })
        );
        let mut c = ClusterBuilder::fat_tree(&[4, 3], 2).build();
        c.nodes.pop();
        c.hyper_nodes
            .iter_mut()
            .find(|h| h.name == "leaf-6")
            .unwrap()
            .members
            .pop();
        assert_eq!(tree_shape(&c), None, "one leaf has 3 nodes");
        assert_eq!(tree_shape(&ClusterBuilder::flat(4).build()), None, "no leaves");
    }

    #[test]
    fn both_yardsticks_run_the_same_jobs() {
        let c = ClusterBuilder::fat_tree(&[2, 2], 1).node_resources("cpu=8").build();
        let jobs = vec![
            JobBuilder::gang("a", 2, "cpu=8")
                .submit(0)
                .runtime(10)
                .limit(10)
                .build(),
            JobBuilder::gang("b", 2, "cpu=8")
                .submit(0)
                .runtime(10)
                .limit(10)
                .build(),
            JobBuilder::gang("c", 4, "cpu=8")
                .submit(1)
                .runtime(10)
                .limit(10)
                .build(),
        ];
        let b = baselines(&jobs, &c, 2, Wide::OneDomain);
        assert_eq!(b.easy.started, 3);
        let (shape, topo, out) = b.topology_aware.unwrap();
        assert_eq!(shape.nodes(), 4);
        assert_eq!(topo.started, 3);
        assert_eq!(out[2].start, Some(10));
        assert_eq!(out[0].leaves, Some(1));
    }
}
