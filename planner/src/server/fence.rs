//! PMI fences across a job's nodes (`mpi: pmi`): each agent sends its node's part of a
//! fence (the pairs its ranks put) once all of them are in the barrier; when every node
//! running the job has sent its part, each gets `FenceDone` with the pairs of all. Only
//! the job's own nodes are heard and answered, so a job's keys reach no one else.
//!
//! Per fence this is O(ranks) in and O(ranks) out per node. Bounded: a job's pairs at
//! one fence by [`MAX_FENCE_BYTES`] (past it, the fence fails for every node), the jobs
//! gathered at once by [`MAX_JOBS`]; a job that ended is forgotten at the driver's next
//! tick ([`FenceRelay::retain`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use hyperplan_net::messages::{PlannerToAgent, PmiFence};

/// The most bytes (keys and values) of one fence of one job, all nodes together: a
/// `FenceDone` is one frame, and agents read frames of up to 16 MiB.
pub const MAX_FENCE_BYTES: usize = 12 << 20;
/// Jobs with a fence under way at once.
pub const MAX_JOBS: usize = 4096;

/// One job's fence being gathered, and the last one done (answered again to a node
/// that asks again: its link was lost before the answer came).
#[derive(Debug, Default)]
struct Gather {
    job: String,
    seq: u64,
    got: BTreeMap<Arc<str>, Vec<(String, String)>>,
    bytes: usize,
    last: Option<PmiFence>,
}

/// Every job's fence under way.
#[derive(Debug, Default)]
pub struct FenceRelay {
    jobs: BTreeMap<hyperplan_shared::ids::JobId, Gather>,
}

impl FenceRelay {
    /// Node `node`'s part of a fence; `nodes`: the job's nodes now (`None`: no live job
    /// of that name and id). Returns the frames to send, by node.
    pub fn on_fence(
        &mut self,
        node: &str,
        fence: PmiFence,
        nodes: Option<&[Arc<str>]>,
    ) -> Vec<(Arc<str>, PlannerToAgent)> {
        let failed = |to: &str, reason: String| {
            vec![(
                Arc::<str>::from(to),
                PlannerToAgent::FenceFailed {
                    job_id: fence.job_id,
                    seq: fence.seq,
                    reason,
                },
            )]
        };
        let Some(nodes) = nodes else {
            self.jobs.remove(&fence.job_id);
            return failed(node, format!("no running job {} with id {}", fence.job, fence.job_id));
        };
        let Some(me) = nodes.iter().find(|n| &***n == node).cloned() else {
            tracing::warn!(node, job = %fence.job, job_id = %fence.job_id, "a PMI fence from a node that runs none of the job's tasks; refused");
            return failed(node, format!("node {node} runs no task of job {}", fence.job));
        };
        if !self.jobs.contains_key(&fence.job_id) && self.jobs.len() >= MAX_JOBS {
            return failed(node, "the planner is gathering too many fences; try again".into());
        }
        let gather = self.jobs.entry(fence.job_id).or_insert_with(|| Gather {
            job: fence.job.clone(),
            ..Gather::default()
        });
        // A node asking again for a fence done: its answer again.
        if let Some(last) = gather.last.as_ref().filter(|l| l.seq == fence.seq) {
            return vec![(me, PlannerToAgent::FenceDone(last.clone()))];
        }
        if fence.seq != gather.seq {
            if !gather.got.is_empty() && fence.seq < gather.seq {
                return Vec::new(); // an old repeat
            }
            gather.seq = fence.seq;
            gather.got.clear();
            gather.bytes = 0;
        }
        let bytes: usize = fence.pairs.iter().map(|(k, v)| k.len() + v.len()).sum();
        if let Some(old) = gather.got.insert(me, fence.pairs) {
            gather.bytes -= old.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        }
        gather.bytes += bytes;
        if gather.bytes > MAX_FENCE_BYTES {
            let reason = format!(
                "the job's pairs at fence {} are more than {MAX_FENCE_BYTES} bytes",
                fence.seq
            );
            self.jobs.remove(&fence.job_id);
            return nodes
                .iter()
                .map(|n| {
                    let frame = PlannerToAgent::FenceFailed {
                        job_id: fence.job_id,
                        seq: fence.seq,
                        reason: reason.clone(),
                    };
                    (n.clone(), frame)
                })
                .collect();
        }
        let want: BTreeSet<&str> = nodes.iter().map(|n| &**n).collect();
        if !want.iter().all(|n| gather.got.contains_key(*n)) {
            return Vec::new();
        }
        // Every node's pairs, nodes by name: the same answer everywhere.
        let mut pairs = Vec::new();
        for (_, part) in std::mem::take(&mut gather.got) {
            pairs.extend(part);
        }
        gather.bytes = 0;
        let done = PmiFence {
            job: fence.job,
            job_id: fence.job_id,
            seq: fence.seq,
            pairs,
        };
        gather.last = Some(done.clone());
        nodes
            .iter()
            .map(|n| (n.clone(), PlannerToAgent::FenceDone(done.clone())))
            .collect()
    }

    /// Forgets the jobs `live(name, id)` says have ended.
    pub fn retain(&mut self, mut live: impl FnMut(&str, hyperplan_shared::ids::JobId) -> bool) {
        self.jobs.retain(|&id, g| live(&g.job, id));
    }

    /// No job has a fence under way or answered.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn part(seq: u64, pairs: &[(&str, &str)]) -> PmiFence {
        PmiFence {
            job: "mpi".into(),
            job_id: 3.into(),
            seq,
            pairs: pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    fn nodes(names: &[&str]) -> Vec<Arc<str>> {
        names.iter().map(|n| Arc::from(*n)).collect()
    }

    #[test]
    fn a_fence_completes_when_every_node_has_sent_its_part() {
        let mut relay = FenceRelay::default();
        let ns = nodes(&["a", "b"]);
        assert!(relay.on_fence("b", part(1, &[("kb", "vb")]), Some(&ns)).is_empty());
        let out = relay.on_fence("a", part(1, &[("ka", "va")]), Some(&ns));
        assert_eq!(out.len(), 2);
        for (node, frame) in &out {
            let PlannerToAgent::FenceDone(f) = frame else {
                panic!("{frame:?}")
            };
            assert!(ns.contains(node));
            assert_eq!(f.pairs, [("ka".into(), "va".into()), ("kb".into(), "vb".into())]);
        }
        // A node that lost its link asks again: the same answer, to it alone.
        let again = relay.on_fence("b", part(1, &[("kb", "vb")]), Some(&ns));
        assert_eq!(again.len(), 1);
        assert!(matches!(&again[0].1, PlannerToAgent::FenceDone(f) if f.seq == 1 && f.pairs.len() == 2));
        // The next fence starts afresh.
        assert!(relay.on_fence("a", part(2, &[]), Some(&ns)).is_empty());
        assert_eq!(relay.on_fence("b", part(2, &[]), Some(&ns)).len(), 2);
        relay.retain(|_, _| false);
        assert!(relay.is_empty());
    }

    #[test]
    fn strangers_and_ended_jobs_are_refused() {
        let mut relay = FenceRelay::default();
        let ns = nodes(&["a", "b"]);
        let out = relay.on_fence("c", part(1, &[("k", "v")]), Some(&ns));
        assert!(matches!(&out[..], [(n, PlannerToAgent::FenceFailed { .. })] if &**n == "c"));
        let out = relay.on_fence("a", part(1, &[("k", "v")]), None);
        assert!(matches!(&out[..], [(n, PlannerToAgent::FenceFailed { .. })] if &**n == "a"));
    }

    #[test]
    fn a_fence_too_large_fails_everywhere() {
        let mut relay = FenceRelay::default();
        let ns = nodes(&["a", "b"]);
        let big = "v".repeat(MAX_FENCE_BYTES / 2 + 1);
        assert!(relay.on_fence("a", part(1, &[("k", &big)]), Some(&ns)).is_empty());
        let out = relay.on_fence("b", part(1, &[("k2", &big)]), Some(&ns));
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|(_, f)| matches!(f, PlannerToAgent::FenceFailed { .. })));
        assert!(relay.is_empty());
    }
}
