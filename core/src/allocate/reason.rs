//! Why a job is not placed, in words a person can act on: which HyperNode came
//! closest and how much room it has, or why the job can never run.

use crate::cache::capacity::Capacity;
use crate::cache::numa::NumaState;
use crate::model::ids::{HnIdx, NodeIdx};
use crate::model::reason::{NoFit, Reason};
use crate::topology::{TierCap, TopologyIndex};

use super::gang::JobCtx;
use super::search::{role_pending, room};

/// Reasons that do not depend on what is running: a task no node can ever hold.
pub(super) fn impossible(job: &JobCtx, index: &TopologyIndex, cap: &Capacity) -> Option<Reason> {
    let pending = role_pending(job, None);
    for (role, shape) in job.shapes.iter().enumerate() {
        if pending[role] == 0 {
            continue;
        }
        if let Some(m) = &shape.missing {
            return Some(Reason::NoSuchResource {
                task: job.role_names[role].to_string(),
                resource: m.to_string(),
            });
        }
        let fits_somewhere =
            (0..index.node_count()).any(|n| cap.fits_empty(crate::model::ids::NodeIdx(n as u32), shape));
        if !fits_somewhere {
            return Some(Reason::TooBig {
                task: job.role_names[role].to_string(),
                asks: cap.describe(shape),
            });
        }
    }
    if let Some(TierCap::Tier(t)) = job.tier
        && t < index.min_tier()
    {
        return Some(Reason::TierTooLow {
            tier: t,
            lowest: index.min_tier(),
        });
    }
    None
}

/// The pending reason for the current capacity: the best HyperNode within the limit and
/// how many of the job's tasks it could take, or the NUMA policy that turns nodes away.
/// The room per HyperNode comes from the cache's counted shapes (the search has just
/// counted them): a pending job costs its HyperNodes, not every node, each time it fails.
pub(super) fn pending(job: &JobCtx, index: &TopologyIndex, cap: &mut Capacity, numa: &NumaState) -> (NoFit, String) {
    let need = job.gang_min.saturating_sub(job.placed()).max(1) as u64;
    let pending = role_pending(job, None);
    let counts: Vec<Option<Vec<u64>>> = job
        .shapes
        .iter()
        .enumerate()
        .map(|(r, s)| (pending[r] > 0).then(|| cap.room_per_hn(index, s)))
        .collect();
    let cap = &*cap;
    let what = describe_tasks(job, cap, &pending);
    let limit = job.tier.unwrap_or(TierCap::Tier(index.root_tier()));
    if index.cap_is_whole(limit) {
        let have = room(&counts, &pending, index.root);
        if have < need {
            return (
                NoFit::Resource,
                format!("the cluster has free room for {have} of the {need} tasks needed ({what})"),
            );
        }
    } else {
        if let Some((have, i)) = best_hn(job, index, &counts, &pending, limit)
            && have < need
        {
            return (
                NoFit::Topo,
                format!(
                    "no HyperNode up to {} has free room for {need} tasks ({what}); best is {} with {have}",
                    index.cap_label(limit),
                    index.hns[i].name
                ),
            );
        }
    }
    if let Some(why) = numa_refusal(job, index, cap, numa, &pending) {
        return (NoFit::Numa, why);
    }
    // Enough room in total: the partitions, the segments or the gang shape do not fit
    // together.
    for sj in job.sub_job_order() {
        let s = &job.sub_jobs[sj];
        if let (Some(t), Some(_)) = (s.tier, s.group) {
            let p = role_pending(job, Some(sj));
            let need = s.min_available.saturating_sub(job.sj_placed(sj)).max(1) as u64;
            if let Some((have, i)) = best_hn(job, index, &counts, &p, t)
                && have < need
            {
                let room = format!(
                    "no HyperNode up to {} has free room for {need} tasks; best is {} with {have}",
                    index.cap_label(t),
                    index.hns[i].name
                );
                if s.block.is_some() || job.has_children(sj) {
                    let first = s.tasks.iter().min().copied().unwrap_or(0);
                    let last = s.tasks.iter().max().copied().unwrap_or(0);
                    return (
                        NoFit::Segment,
                        format!("segment {} (ranks {first}-{last}): {room}", s.id),
                    );
                }
                return (NoFit::Partition, format!("partition {}: {room}", s.id));
            }
        }
    }
    (
        NoFit::Gang,
        format!(
            "the gang of {} tasks ({what}) does not fit within one allowed HyperNode at once",
            job.gang_min
        ),
    )
}

/// The HyperNode up to tier `limit` with room for most of the pending tasks (ties by
/// name) and how many it can take.
fn best_hn(
    job: &JobCtx,
    index: &TopologyIndex,
    counts: &[Option<Vec<u64>>],
    pending: &[u64],
    limit: TierCap,
) -> Option<(u64, usize)> {
    index
        .hns
        .iter()
        .enumerate()
        .filter(|(i, _)| index.allows(limit, HnIdx(*i as u32)) && job.in_trees(index, HnIdx(*i as u32)))
        .map(|(i, h)| (room(counts, pending, HnIdx(i as u32)), std::cmp::Reverse(&h.name), i))
        .max()
        .map(|(have, _, i)| (have, i))
}

fn describe_tasks(job: &JobCtx, cap: &Capacity, pending: &[u64]) -> String {
    let parts: Vec<String> = job
        .shapes
        .iter()
        .enumerate()
        .filter(|(r, _)| pending[*r] > 0)
        .map(|(r, s)| format!("{} × {} {{{}}}", pending[r], job.role_names[r], cap.describe(s)))
        .collect();
    parts.join(", ")
}

/// A role with a NUMA request that fewer nodes admit than it has pending tasks, though
/// they have room by capacity: names how many admit it and why the first one (by name)
/// that refuses does (`gpu017: single-numa-node: no NUMA node has 16 free PUs and 2 GPUs`).
fn numa_refusal(
    job: &JobCtx,
    index: &TopologyIndex,
    cap: &Capacity,
    numa: &NumaState,
    pending: &[u64],
) -> Option<String> {
    for (role, req) in job.numa.iter().enumerate() {
        let (Some(req), true) = (req, pending[role] > 0) else {
            continue;
        };
        let shape = &job.shapes[role];
        let (mut with_room, mut admit) = (0u64, 0u64);
        let mut first_refusal: Option<String> = None;
        for n in 0..index.node_count() {
            let n = NodeIdx(n as u32);
            if !cap.fits(n, shape) {
                continue;
            }
            with_room += 1;
            match numa.assign(n, req) {
                Ok(_) => {
                    admit += 1;
                    if admit >= pending[role] {
                        break; // enough nodes admit it: NUMA is not what holds the job
                    }
                }
                Err(why) => {
                    if first_refusal.is_none() {
                        first_refusal = Some(format!("{}: {why}", index.node_names[n.ix()]));
                    }
                }
            }
        }
        if admit < pending[role]
            && let Some(example) = first_refusal
        {
            let task = &job.role_names[role];
            return Some(if admit == 0 {
                format!(
                    "task {task}: no node with room admits it under {}; {example}",
                    req.policy
                )
            } else {
                format!(
                    "task {task}: {admit} of {with_room} nodes with room admit it under {} ({} tasks pending); {example}",
                    req.policy, pending[role]
                )
            });
        }
    }
    None
}
