//! What the web view draws, as one JSON document (`GET /api/state`, and each server-sent
//! event): the HyperNodes of tier 1 and up with their children and member nodes, every
//! node with its state, drain and free resources, the live jobs (and those ended in the
//! last hour) with their nodes and ranks, and the queues. Built by the driver from the
//! core's views when asked; the page (`index.html`) reads exactly these fields.

use std::collections::BTreeMap;

use hyperplan_core::Planner;
use hyperplan_shared::report::JobStatus;
use hyperplan_shared::status::{DrainStatus, FreeTotal, NodeState};
use serde::Serialize;

/// How long an ended job stays in the view.
const ENDED_SHOWN_SECS: u64 = 3600;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct State<'a> {
    at: u64,
    planner: &'a str,
    colour_by: &'static str,
    hyper_nodes: Vec<HyperNode>,
    nodes: Vec<Node>,
    jobs: Vec<Job>,
    queues: Vec<Queue>,
}

#[derive(Serialize)]
struct HyperNode {
    name: String,
    tier: u32,
    children: Vec<String>,
    nodes: Vec<String>,
}

#[derive(Serialize)]
struct Node {
    name: String,
    state: &'static str,
    drain: Option<DrainStatus>,
    cpus: FreeTotal,
    gpus: FreeTotal,
    memory: FreeTotal,
    tasks: u32,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Job {
    name: String,
    id: u64,
    owner: Option<String>,
    queue: String,
    status: &'static str,
    tasks: usize,
    nodes: Vec<JobNode>,
    hyper_node: Option<String>,
    reserved: Option<String>,
    reason: Option<String>,
    submit_time: u64,
}

#[derive(Serialize)]
struct JobNode {
    node: String,
    ranks: Vec<u32>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Queue {
    name: String,
    running: u32,
    pending: u32,
    cpus_used: u64,
    cpus_quota: Option<u64>,
    weight: f64,
}

/// The state of `planner` at `now` (Unix seconds), as JSON; `advertise` names the
/// planner in the page's title.
pub fn state_json(planner: &Planner, advertise: &str, now: u64) -> Vec<u8> {
    let tree = planner.hyper_nodes();
    let statuses = planner.nodes();
    // Each node under its lowest HyperNode.
    let mut members: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for n in &statuses {
        if let Some(lowest) = planner.hyper_nodes_of(&n.name).into_iter().next() {
            members.entry(lowest).or_default().push(n.name.clone());
        }
    }
    let hyper_nodes = tree
        .hyper_nodes
        .iter()
        .filter(|h| h.tier >= 1)
        .map(|h| HyperNode {
            name: h.name.clone(),
            tier: h.tier,
            children: h.children.clone(),
            nodes: members.remove(&h.name).unwrap_or_default(),
        })
        .collect();
    let gpus = statuses.iter().any(|n| n.gpus.total > 0);
    let nodes = statuses
        .into_iter()
        .map(|n| Node {
            state: match n.state {
                NodeState::Ready => "Ready",
                NodeState::NotReady => "NotReady",
            },
            name: n.name,
            drain: n.drain,
            cpus: n.cpus,
            gpus: n.gpus,
            memory: n.memory,
            tasks: n.running_tasks,
        })
        .collect();
    let jobs = planner
        .jobs()
        .into_iter()
        .filter(|j| j.end_time.is_none_or(|e| now.saturating_sub(e) < ENDED_SHOWN_SECS))
        .map(|j| {
            let mut by_node: BTreeMap<String, Vec<u32>> = BTreeMap::new();
            let live = matches!(j.status, JobStatus::Placed | JobStatus::Running);
            for t in j.tasks.iter().filter(|_| live) {
                if let (Some(node), Some(rank)) = (&t.node, t.rank) {
                    by_node.entry(node.clone()).or_default().push(rank);
                }
            }
            let reserved = j
                .preempting
                .as_ref()
                .and_then(|p| p.hyper_node.clone())
                .or_else(|| j.reservation.as_ref().and_then(|r| r.hyper_node.clone()));
            Job {
                tasks: j.tasks.len(),
                nodes: by_node
                    .into_iter()
                    .map(|(node, mut ranks)| {
                        ranks.sort_unstable();
                        JobNode { node, ranks }
                    })
                    .collect(),
                hyper_node: j.allocated_hyper_node.filter(|_| live),
                reserved: reserved.filter(|_| j.status == JobStatus::Pending),
                reason: j.reason.filter(|_| j.status == JobStatus::Pending),
                queue: j.queue.unwrap_or_else(|| "default".into()),
                name: j.name,
                id: j.id,
                owner: j.owner,
                status: status_name(j.status),
                submit_time: j.submit_time,
            }
        })
        .collect();
    let queues = planner
        .queues()
        .queues
        .into_iter()
        .map(|q| Queue {
            running: q.running_jobs,
            pending: q.pending_jobs,
            cpus_used: q.used.get(hyperplan_shared::CPU).copied().unwrap_or(0) / 1000,
            cpus_quota: q.quota.get(hyperplan_shared::CPU).map(|c| c / 1000),
            weight: q.weight,
            name: q.name,
        })
        .collect();
    let state = State {
        at: now,
        planner: advertise,
        colour_by: if gpus { "gpu" } else { "cpu" },
        hyper_nodes,
        nodes,
        jobs,
        queues,
    };
    serde_json::to_vec(&state).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}").into_bytes())
}

/// As the page shows it (`Running`, `Pending`, …).
fn status_name(s: JobStatus) -> &'static str {
    match s {
        JobStatus::Pending => "Pending",
        JobStatus::Placed => "Placed",
        JobStatus::Running => "Running",
        JobStatus::Completed => "Completed",
        JobStatus::Failed => "Failed",
        JobStatus::Cancelled => "Cancelled",
        JobStatus::Timeout => "Timeout",
        JobStatus::Rejected => "Rejected",
        JobStatus::Preempted => "Preempted",
    }
}
