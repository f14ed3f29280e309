//! What a replay is judged by: waits (mean, p95, max), bounded slowdown, utilisation, and
//! how well jobs sit on the fabric (leaves per job, the share of multi-node jobs that fit
//! in a leaf and got one). The same figures for the planner's report and for a baseline
//! that knows only start times (the topology-oblivious EASY of `sim::easy`).

use std::collections::BTreeSet;

use hyperplan_shared::report::Report;
use serde::Serialize;

/// Slowdown counts runtimes below this as this long (the literature's usual τ).
pub const SLOWDOWN_BOUND_SECS: u64 = 10;

/// One job's outcome.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Submitted (seconds).
    pub submit: u64,
    /// Started; `None`: never.
    pub start: Option<u64>,
    /// Ended; `None`: never.
    pub end: Option<u64>,
    /// Nodes it ran on (or asked for).
    pub nodes: u32,
    /// Distinct leaves (lowest-tier HyperNodes) it ran in; `None` when unknown.
    pub leaves: Option<u32>,
}

/// The figures of one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceMetrics {
    /// Jobs in the run.
    pub jobs: usize,
    /// Jobs that started.
    pub started: usize,
    /// Mean wait of started jobs (seconds).
    pub mean_wait: f64,
    /// 95th percentile wait (seconds).
    pub p95_wait: u64,
    /// Longest wait (seconds).
    pub max_wait: u64,
    /// Mean bounded slowdown: max(1, (wait + run) / max(run, τ)), τ = 10 s.
    pub bounded_slowdown: f64,
    /// Node-seconds used over node-seconds offered, from the first submit to the last end.
    pub utilisation: f64,
    /// Mean distinct leaves per multi-node job (where known).
    pub leaves_per_job: Option<f64>,
    /// Of the multi-node jobs no larger than a leaf, the share placed inside one leaf.
    pub leaf_sized_in_one_leaf: Option<f64>,
    /// Last end (seconds).
    pub makespan: u64,
}

/// Each job of a simulator report: its nodes and leaves from its tasks.
pub fn outcomes(report: &Report) -> Vec<Outcome> {
    report
        .jobs
        .iter()
        .map(|j| {
            let nodes: BTreeSet<&str> = j.tasks.iter().filter_map(|t| t.node.as_deref()).collect();
            let leaves: BTreeSet<&str> = j
                .tasks
                .iter()
                .filter(|t| t.node.is_some())
                .filter_map(|t| t.hyper_nodes.first().map(String::as_str))
                .collect();
            Outcome {
                submit: j.submit_time,
                start: j.start_time,
                end: j.end_time,
                nodes: nodes.len() as u32,
                leaves: Some(leaves.len() as u32),
            }
        })
        .collect()
}

/// The figures of `jobs` on `cluster_nodes` nodes whose leaves hold `leaf_size` nodes.
pub fn trace_metrics(jobs: &[Outcome], cluster_nodes: u32, leaf_size: u32) -> TraceMetrics {
    let mut waits: Vec<u64> = Vec::new();
    let mut slowdown = 0.0;
    let mut used = 0.0;
    let (mut first, mut last) = (u64::MAX, 0u64);
    let (mut leaves, mut multi) = (0u64, 0u64);
    let (mut leaf_sized, mut in_one) = (0u64, 0u64);
    let mut leaves_known = false;
    for j in jobs {
        first = first.min(j.submit);
        let (Some(s), Some(e)) = (j.start, j.end) else { continue };
        let wait = s.saturating_sub(j.submit);
        let run = e.saturating_sub(s);
        waits.push(wait);
        slowdown += ((wait + run) as f64 / run.max(SLOWDOWN_BOUND_SECS) as f64).max(1.0);
        used += f64::from(j.nodes) * run as f64;
        last = last.max(e);
        if j.nodes > 1
            && let Some(l) = j.leaves
        {
            leaves_known = true;
            multi += 1;
            leaves += u64::from(l);
            if j.nodes <= leaf_size {
                leaf_sized += 1;
                in_one += u64::from(l == 1);
            }
        }
    }
    let started = waits.len();
    waits.sort_unstable();
    let span = last.saturating_sub(first.min(last)) as f64;
    TraceMetrics {
        jobs: jobs.len(),
        started,
        mean_wait: if started > 0 {
            waits.iter().sum::<u64>() as f64 / started as f64
        } else {
            0.0
        },
        p95_wait: percentile(&waits, 95),
        max_wait: waits.last().copied().unwrap_or(0),
        bounded_slowdown: if started > 0 { slowdown / started as f64 } else { 0.0 },
        utilisation: if span > 0.0 {
            used / (f64::from(cluster_nodes) * span)
        } else {
            0.0
        },
        leaves_per_job: (leaves_known && multi > 0).then(|| leaves as f64 / multi as f64),
        leaf_sized_in_one_leaf: (leaves_known && leaf_sized > 0).then(|| in_one as f64 / leaf_sized as f64),
        makespan: last,
    }
}

/// The `p`th percentile of sorted values (nearest rank).
fn percentile(sorted: &[u64], p: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_slowdown_and_leaves() {
        let jobs = vec![
            Outcome {
                submit: 0,
                start: Some(0),
                end: Some(100),
                nodes: 2,
                leaves: Some(1),
            },
            Outcome {
                submit: 0,
                start: Some(100),
                end: Some(105),
                nodes: 4,
                leaves: Some(2),
            },
            Outcome {
                submit: 10,
                start: None,
                end: None,
                nodes: 1,
                leaves: None,
            },
        ];
        let m = trace_metrics(&jobs, 4, 2);
        assert_eq!((m.jobs, m.started, m.max_wait, m.p95_wait), (3, 2, 100, 100));
        assert_eq!(m.mean_wait, 50.0);
        // (0+100)/100 = 1; (100+5)/10 = 10.5.
        assert_eq!(m.bounded_slowdown, 5.75);
        assert_eq!(m.leaves_per_job, Some(1.5));
        assert_eq!(m.leaf_sized_in_one_leaf, Some(1.0));
        // 2×100 + 4×5 = 220 node-seconds of 4 × 105.
        assert!((m.utilisation - 220.0 / 420.0).abs() < 1e-9);
    }
}
