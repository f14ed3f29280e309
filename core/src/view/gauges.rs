//! What the planner's `/metrics` reports of the cluster at one moment ([`Gauges`]): live
//! jobs by queue and status, pending jobs by the kind of their reason, nodes by state,
//! what is allocated of each HyperNode of tier 1 and up, the backfill reservations, and
//! the nodes' health checks by state and the nodes drained by health.
//! Labels come from bounded sets only (queues, statuses, reason kinds, node states,
//! HyperNodes): never a job's or a task's name. Read at scrape time, not every tick.

use std::collections::BTreeMap;

use bevy_ecs::prelude::*;
use hyperplan_shared::report::JobStatus;

use crate::allocate::backfill::Reservations;
use crate::cache::capacity::Capacity;
use crate::jobs::lifecycle::job_status;
use crate::model::checks::NodeChecks;
use crate::model::components::{Job, JobQueue, JobState, Node, Retired, TaskState};
use crate::model::drain::{Drained, Drains};
use crate::model::reason::{Reason, ReasonKind};
use crate::numa::node::is_gpu_resource;
use crate::queues::QueueTable;
use crate::topology::TopologyIndex;

/// See the module documentation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gauges {
    /// (queue, status in lower case) → live jobs.
    pub jobs: BTreeMap<(String, &'static str), u64>,
    /// Reason kind ([`ReasonKind::label`]; a pending job with no reason yet counts as
    /// `resources`) → pending jobs.
    pub pending: BTreeMap<&'static str, u64>,
    /// `ready`, `not_ready`, `draining`, `drained` → nodes.
    pub nodes: BTreeMap<&'static str, u64>,
    /// Every HyperNode of tier 1 and up, by name.
    pub hyper_nodes: Vec<HyperNodeUse>,
    /// Jobs holding a backfill reservation now (maintenance windows left out).
    pub reservations: u64,
    /// `ok`, `degraded`, `failed` → health checks of all nodes in that state.
    pub checks: BTreeMap<&'static str, u64>,
    /// Nodes drained by a failed health check (not by an admin).
    pub drained_by_health: u64,
}

/// One HyperNode's allocation: in use (tasks, work outside hyperplan, and nodes that
/// offer nothing: NotReady or drained) and in all.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HyperNodeUse {
    /// Its name.
    pub name: String,
    /// Its tier.
    pub tier: u32,
    /// CPUs (whole), allocated and in all.
    pub cpus: (f64, f64),
    /// GPUs (every GPU resource), allocated and in all.
    pub gpus: (f64, f64),
    /// Memory bytes, allocated and in all.
    pub memory: (f64, f64),
}

fn status_label(s: JobStatus) -> &'static str {
    match s {
        JobStatus::Pending => "pending",
        JobStatus::Placed => "placed",
        JobStatus::Running => "running",
        JobStatus::Completed => "completed",
        JobStatus::Failed => "failed",
        JobStatus::Cancelled => "cancelled",
        JobStatus::Timeout => "timeout",
        JobStatus::Rejected => "rejected",
        JobStatus::Preempted => "preempted",
    }
}

/// The gauges of `world` now.
pub fn gauges(world: &World) -> Gauges {
    let mut g = Gauges::default();
    let queues = world.resource::<QueueTable>();
    if let Some(mut q) = world.try_query_filtered::<(&JobState, Option<&JobQueue>), (With<Job>, Without<Retired>)>() {
        for (st, jq) in q.iter(world) {
            let queue = jq
                .and_then(|jq| queues.queues.get(jq.queue.ix()))
                .map_or("default", |c| c.name.as_str());
            let status = job_status(st);
            *g.jobs.entry((queue.to_string(), status_label(status))).or_default() += 1;
            if status == JobStatus::Pending {
                *g.pending
                    .entry(st.reason.as_ref().map_or(ReasonKind::Resources, Reason::kind).label())
                    .or_default() += 1;
            }
        }
    }
    let mut running: std::collections::HashSet<Entity> = Default::default();
    if let Some(mut q) = world.try_query::<&TaskState>() {
        running.extend(q.iter(world).filter(|ts| ts.is_running()).filter_map(|ts| ts.node));
    }
    if let Some(mut q) = world.try_query::<(Entity, &Node, Has<Drained>)>() {
        for (e, n, drained) in q.iter(world) {
            let state = match (drained, running.contains(&e), n.ready) {
                (true, true, _) => "draining",
                (true, false, _) => "drained",
                (false, _, true) => "ready",
                (false, _, false) => "not_ready",
            };
            *g.nodes.entry(state).or_default() += 1;
        }
    }
    if let Some(mut q) = world.try_query::<&NodeChecks>() {
        for c in q.iter(world).flat_map(|c| c.0.iter()) {
            *g.checks.entry(c.state.as_str()).or_default() += 1;
        }
    }
    g.drained_by_health = world
        .resource::<Drains>()
        .nodes
        .values()
        .filter(|d| d.by_health)
        .count() as u64;
    let index = world.resource::<TopologyIndex>();
    let cap = world.resource::<Capacity>();
    if cap.hn_alloc.len() == index.hns.len() * cap.d {
        for (h, info) in index.hns.iter().enumerate() {
            if h == index.root.ix() {
                continue;
            }
            let sum = |pick: &dyn Fn(&str) -> bool| -> (f64, f64) {
                let (mut used, mut all) = (0u64, 0u64);
                for (k, dim) in cap.dims.iter().enumerate() {
                    if pick(dim) {
                        used += cap.hn_used[h * cap.d + k];
                        all += cap.hn_alloc[h * cap.d + k];
                    }
                }
                (used as f64, all as f64)
            };
            let (cu, ca) = sum(&|d| d == hyperplan_shared::CPU);
            g.hyper_nodes.push(HyperNodeUse {
                name: info.name.clone(),
                tier: info.tier,
                cpus: (cu / 1000.0, ca / 1000.0),
                gpus: sum(&is_gpu_resource),
                memory: sum(&|d| d == hyperplan_shared::MEMORY),
            });
        }
    }
    let reservations = world.resource::<Reservations>();
    g.reservations = reservations.list.len().saturating_sub(reservations.windows) as u64;
    g
}
