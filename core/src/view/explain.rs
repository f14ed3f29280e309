//! `hyperplan explain JOB`: the gradient search seen from outside — the tier limit in
//! force, how many tasks the gang still needs, and for every HyperNode within the limit
//! (lowest tier first, as the search walks them) how many of the job's pending tasks fit
//! there now and what that means.

use bevy_ecs::prelude::*;
use hyperplan_shared::status::{Candidate, Explanation};

use super::jobs::job_report;
use hyperplan_shared::report::JobStatus;
use hyperplan_shared::timelimit::format_time_limit;

use crate::allocate::backfill::Reservations;
use crate::allocate::backfill::active::Window;
use crate::allocate::gradients;
use crate::allocate::tier::effective_tier;
use crate::cache::capacity::Capacity;
use crate::model::components::{Job, NodeSlot, TaskPhase, TaskState};
use crate::model::ids::HnIdx;
use crate::topology::{TierCap, TopologyIndex};

/// `None` when no job has that name.
pub fn explain(world: &World, name: &str) -> Option<Explanation> {
    explain_naming(world, name, &|n: &str| n.to_string())
}

/// As [`explain`], every other job it names (a reservation's, a preemption's victims)
/// named as `other` says: under `privateData` another user's job is not named.
pub fn explain_naming(world: &World, name: &str, other: &dyn Fn(&str) -> String) -> Option<Explanation> {
    let report = job_report(world, name)?;
    let &e = world.resource::<crate::names::JobNames>().0.get(name)?;
    let job = world.get::<Job>(e)?;
    let index = world.resource::<TopologyIndex>();
    let cap = world.resource::<Capacity>();

    // A rejected job keeps no task entity (`jobs::shed`): its spec's replicas all wait.
    let mut pending: Vec<u64> = if job.tasks.is_empty() {
        job.spec.tasks.iter().map(|t| u64::from(t.replicas)).collect()
    } else {
        vec![0u64; job.spec.tasks.len()]
    };
    let mut placed = 0u64;
    let mut running_nodes = Vec::new();
    for &t in &job.tasks {
        let (Some(ts), Some(task)) = (
            world.get::<TaskState>(t),
            world.get::<crate::model::components::Task>(t),
        ) else {
            continue;
        };
        match ts.phase {
            TaskPhase::Pending => pending[task.role] += 1,
            TaskPhase::Running | TaskPhase::Finished => {
                placed += 1;
                if ts.is_running()
                    && let Some(slot) = ts.node.and_then(|n| world.get::<NodeSlot>(n))
                {
                    running_nodes.push(slot.0);
                }
            }
        }
    }
    let need = u64::from(job.gang_min)
        .saturating_sub(placed)
        .max(u64::from(pending.iter().any(|p| *p > 0)));
    // The allocator's own tier limit (soft = the whole cluster, shown as no limit).
    let whole = TierCap::Tier(index.root_tier());
    let limit = effective_tier(job.spec.network_topology.as_ref(), whole, index)
        .tier
        .filter(|c| !index.cap_is_whole(*c));
    let tier_limit = limit.map(|c| index.cap_tier(c));
    let rooms: Vec<Vec<u64>> = job
        .spec
        .tasks
        .iter()
        .enumerate()
        .filter(|(r, _)| pending[*r] > 0)
        .map(|(r, t)| {
            let per_hn = cap.fit_counts_per_hn(index, &cap.shape(&t.resources));
            per_hn.into_iter().map(|c| c.min(pending[r])).collect()
        })
        .collect();
    // The HyperNodes the gradient search walks within the limit, lowest tier first (by
    // name within a tier), every one shown whether or not it has room.
    let mut order: Vec<HnIdx> = Vec::new();
    for mut tier in gradients(index, index.root, Some(limit.unwrap_or(whole)), None, |_| true) {
        tier.retain(|&h| h != index.root);
        tier.sort_by(|a, b| index.hns[a.ix()].name.cmp(&index.hns[b.ix()].name));
        order.extend(tier);
    }
    // What keeps a waiting job off room it could use now: the reservations (and
    // maintenance windows) its time limit would run into (see `allocate::backfill`).
    let now = world.resource::<crate::model::tick::Now>().secs();
    let limit = job.spec.run.time_limit;
    let window = Window::of(now, limit);
    let past = match limit {
        Some(l) => format!("this job's timeLimit {} would run past it", format_time_limit(l)),
        None => "this job has no timeLimit, so it could not be sure to end first".to_string(),
    };
    let blockers: Vec<(Vec<crate::model::ids::NodeIdx>, String)> = if report.status == JobStatus::Pending {
        world
            .resource::<Reservations>()
            .list
            .iter()
            .filter(|r| r.job != e && window.overlaps(r))
            .map(|r| {
                let when = if r.start > now {
                    format!("starting in {}", format_time_limit(r.start - now))
                } else {
                    "starting now".to_string()
                };
                let whose = match (&r.window, world.get::<Job>(r.job)) {
                    (Some(w), _) => format!("in maintenance window {w}, {when}"),
                    (None, Some(j)) => format!("reserved for {}, {when}", named_job(&other(&j.spec.name))),
                    (None, None) => format!("reserved, {when}"),
                };
                (r.held.iter().map(|h| h.node).collect(), format!("{whose}; {past}"))
            })
            .collect()
    } else {
        Vec::new()
    };
    let candidates = order
        .into_iter()
        .map(|h| {
            let info = &index.hns[h.ix()];
            let room: u64 = rooms.iter().map(|r| r[h.ix()]).sum();
            let holds_job = !running_nodes.is_empty() && running_nodes.iter().all(|n| info.nodes.contains(n.ix()));
            let verdict = if report.allocated_hyper_node.as_deref() == Some(info.name.as_str()) {
                "the job's HyperNode: its tasks were placed under it".to_string()
            } else if holds_job {
                "holds all of the job's running tasks".to_string()
            } else if need == 0 {
                "nothing left to place".to_string()
            } else if room >= need
                && let Some(why) = blockers.iter().find_map(|(nodes, why)| {
                    let held = nodes.iter().filter(|n| info.nodes.contains(n.ix())).count();
                    (held > 0)
                        .then(|| format!("room for the {need} tasks needed now, but {held} of its nodes are {why}"))
                })
            {
                why
            } else if room >= need {
                format!("room for the {need} tasks needed")
            } else {
                format!("room for {room} of the {need} tasks needed")
            };
            Candidate {
                name: info.name.clone(),
                tier: info.tier,
                room,
                holds_job,
                verdict,
            }
        })
        .collect();
    let preemption = (report.status == JobStatus::Pending).then(|| preemption(world, e, index, other));
    Some(Explanation {
        job: report,
        tier_limit,
        need,
        candidates,
        preemption,
    })
}

/// The preemption of a waiting job in words: the one under way, or who it would
/// preempt now and why (whether preemption is on or not), or why it can preempt no one.
fn preemption(world: &World, e: Entity, index: &TopologyIndex, other: &dyn Fn(&str) -> String) -> String {
    let st = world.get::<crate::model::components::JobState>(e);
    if let Some(n) = st.and_then(|s| s.nomination.as_ref()) {
        return format!(
            "under way: preempting {} in {}; nodes {} held for it until they have ended",
            n.victims.iter().map(|v| other(v)).collect::<Vec<_>>().join(", "),
            n.hyper_node.as_deref().unwrap_or("the cluster"),
            n.nodes.join(",")
        );
    }
    let mut config = world.resource::<crate::config::PlannerConfig>().clone();
    let off = !config.preemption.enabled;
    config.preemption.enabled = true;
    let lead = if off {
        "preemption is off ([preemption] enabled = false); were it on, "
    } else {
        ""
    };
    match crate::preempt::plan_with(world, e, &config) {
        Ok(f) if f.victims.is_empty() => format!("{lead}none needed: what is ending makes room"),
        Ok(f) => {
            let h = if f.hn == index.root {
                "the cluster".to_string()
            } else {
                index.hns[f.hn.ix()].name.clone()
            };
            let who: Vec<String> = f
                .victims
                .iter()
                .map(|(_, n, why, _)| format!("{} ({why})", other(n)))
                .collect();
            format!(
                "{lead}it would preempt {} job{} in {h}, losing {} CPU-seconds of work: {}",
                f.victims.len(),
                if f.victims.len() == 1 { "" } else { "s" },
                f.key.1,
                who.join("; ")
            )
        }
        Err(no) => format!("{lead}none: {}", no.0),
    }
}

/// `job NAME`, or a hidden job's words as they are (`another user's job`).
fn named_job(shown: &str) -> String {
    if shown == crate::caller::ANOTHER_USERS_JOB {
        shown.to_string()
    } else {
        format!("job {shown}")
    }
}
