//! What the web view draws, as one JSON document (`GET /api/state`, and each server-sent
//! event): the HyperNodes of tier 1 and up with their children and member nodes, every
//! node with its state, drain and free resources, the live jobs (and those ended in the
//! last hour) with their nodes and ranks, and the queues. Built by the driver from the
//! core's views when asked; the page (`index.html`) reads exactly these fields.
//!
//! The driver makes one [`Snapshot`] for every viewer; each gets it as their
//! certificate may read it ([`Snapshot::json_for`]): under `[server] privateData` a
//! plain user's view holds only their own jobs, with no other user's job named in their
//! reasons, exactly as `hyperplan status` answers them (`core::caller`); an admin's holds
//! every job; the token's, naming no one, holds none. Nodes, HyperNodes and queue
//! totals are everyone's.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::OnceLock;

use bytes::Bytes;
use hyperplan_core::Planner;
use hyperplan_core::caller::Caller;
use hyperplan_shared::report::JobReport;
use hyperplan_shared::report::JobStatus;
use hyperplan_shared::status::{DrainStatus, FreeTotal, NodeState};
use serde::Serialize;

/// How long an ended job stays in the view.
const ENDED_SHOWN_SECS: u64 = 3600;

/// Who reads the view, for what of other people's jobs they may see.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Viewer {
    /// The holder of a user's or an admin's certificate of the cluster CA.
    Cert { user: String, admin: bool },
    /// Whoever shows the `[web] tokenFile` token (a reverse proxy): it names no one.
    Token,
}

/// The state once, for every viewer (see [`Snapshot::json_for`]).
pub struct Snapshot {
    state: State,
    /// `[server] privateData` when it was made.
    private_data: bool,
    /// The whole state as JSON, made once for all who see every job.
    whole: OnceLock<Bytes>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("at", &self.state.at)
            .field("jobs", &self.state.jobs.len())
            .field("private_data", &self.private_data)
            .finish_non_exhaustive()
    }
}

/// Which jobs a viewer's JSON holds.
enum Shown<'a> {
    All,
    /// Those of this owner, as they may read them.
    Own(&'a str),
    None,
}

impl Snapshot {
    /// The state as `viewer` may read it, as JSON: every job for an admin or without
    /// `privateData`; else a user's own jobs only, the token's none.
    pub fn json_for(&self, viewer: &Viewer) -> Bytes {
        let shown = match viewer {
            Viewer::Cert { user, admin } => {
                let caller = Caller {
                    user,
                    admin: *admin,
                    private_data: self.private_data,
                    groups: &[],
                };
                if caller.sees_all() {
                    Shown::All
                } else {
                    Shown::Own(user)
                }
            }
            Viewer::Token if self.private_data => Shown::None,
            Viewer::Token => Shown::All,
        };
        let jobs: Vec<Cow<'_, Job>> = match shown {
            Shown::All => {
                return self
                    .whole
                    .get_or_init(|| encode(&self.view(self.state.jobs.iter().map(Cow::Borrowed).collect())))
                    .clone();
            }
            Shown::Own(user) => self
                .state
                .jobs
                .iter()
                .filter(|j| j.owner.as_deref() == Some(user))
                .map(|j| match &j.owners_reason {
                    Some(reason) => Cow::Owned(Job {
                        reason: Some(reason.clone()),
                        ..j.clone()
                    }),
                    None => Cow::Borrowed(j),
                })
                .collect(),
            Shown::None => Vec::new(),
        };
        encode(&self.view(jobs))
    }

    fn view<'a>(&'a self, jobs: Vec<Cow<'a, Job>>) -> View<'a> {
        let s = &self.state;
        View {
            at: s.at,
            planner: &s.planner,
            colour_by: s.colour_by,
            hyper_nodes: &s.hyper_nodes,
            nodes: &s.nodes,
            jobs,
            queues: &s.queues,
        }
    }
}

fn encode(view: &View<'_>) -> Bytes {
    Bytes::from(serde_json::to_vec(view).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}").into_bytes()))
}

struct State {
    at: u64,
    planner: String,
    colour_by: &'static str,
    hyper_nodes: Vec<HyperNode>,
    nodes: Vec<Node>,
    jobs: Vec<Job>,
    queues: Vec<Queue>,
}

/// What one viewer's JSON holds.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct View<'a> {
    at: u64,
    planner: &'a str,
    colour_by: &'static str,
    hyper_nodes: &'a [HyperNode],
    nodes: &'a [Node],
    jobs: Vec<Cow<'a, Job>>,
    queues: &'a [Queue],
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
    /// Health checks that are not ok (omitted when all are).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    health: Vec<hyperplan_shared::health::CheckResult>,
    cpus: FreeTotal,
    gpus: FreeTotal,
    memory: FreeTotal,
    tasks: u32,
}

#[derive(Clone, Serialize)]
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
    /// `reason` as its owner reads it under `privateData` (no other user's job named),
    /// where that differs.
    #[serde(skip)]
    owners_reason: Option<String>,
}

#[derive(Clone, Serialize)]
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

/// The state of `planner` at `now` (Unix seconds); `advertise` names the planner in the
/// page's title; `private_data`: `[server] privateData`.
pub fn snapshot(planner: &Planner, advertise: &str, now: u64, private_data: bool) -> Snapshot {
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
            health: n.health,
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
            let owners_reason = owners_reason(planner, &j).filter(|_| j.status == JobStatus::Pending);
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
                owners_reason,
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
        planner: advertise.to_string(),
        colour_by: if gpus { "gpu" } else { "cpu" },
        hyper_nodes,
        nodes,
        jobs,
        queues,
    };
    Snapshot {
        state,
        private_data,
        whole: OnceLock::new(),
    }
}

/// Job `j`'s reason as its owner reads it under `privateData`, where that differs from
/// what an admin reads (it names another user's job).
fn owners_reason(planner: &Planner, j: &JobReport) -> Option<String> {
    let owner = j.owner.as_deref()?;
    let mut seen = JobReport {
        reason: j.reason.clone(),
        preempted_by: j.preempted_by.clone(),
        preempting: j.preempting.clone(),
        ..JobReport::default()
    };
    planner.hide_other_jobs(Caller::user(owner).private(true), &mut seen);
    seen.reason.filter(|r| Some(r) != j.reason.as_ref())
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn job(name: &str, owner: &str, reason: &str, owners_reason: Option<&str>) -> Job {
        Job {
            name: name.into(),
            id: 1,
            owner: Some(owner.into()),
            queue: "default".into(),
            status: "Pending",
            tasks: 1,
            nodes: vec![JobNode {
                node: "n1".into(),
                ranks: vec![0],
            }],
            hyper_node: None,
            reserved: None,
            reason: Some(reason.into()),
            submit_time: 0,
            owners_reason: owners_reason.map(str::to_string),
        }
    }

    fn snapshot(private_data: bool) -> Snapshot {
        Snapshot {
            state: State {
                at: 7,
                planner: "p".into(),
                colour_by: "cpu",
                hyper_nodes: Vec::new(),
                nodes: Vec::new(),
                jobs: vec![
                    job("train", "alice", "waits", None),
                    job(
                        "sweep",
                        "bob",
                        "requeued: preempted by job train: why",
                        Some("requeued: preempted by another user's job: why"),
                    ),
                ],
                queues: Vec::new(),
            },
            private_data,
            whole: OnceLock::new(),
        }
    }

    fn read(s: &Snapshot, viewer: &Viewer) -> serde_json::Value {
        serde_json::from_slice(&s.json_for(viewer)).unwrap()
    }

    fn names(v: &serde_json::Value) -> Vec<&str> {
        v["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["name"].as_str().unwrap())
            .collect()
    }

    fn cert(user: &str, admin: bool) -> Viewer {
        Viewer::Cert {
            user: user.into(),
            admin,
        }
    }

    /// Issue 38: under privateData a plain user's view holds their jobs alone, with
    /// their reasons as they read them; an admin's every job; the token's none.
    #[test]
    fn private_data_shows_a_user_their_own_jobs_only() {
        let s = snapshot(true);
        let bob = read(&s, &cert("bob", false));
        assert_eq!(names(&bob), ["sweep"]);
        assert_eq!(
            bob["jobs"][0]["reason"],
            "requeued: preempted by another user's job: why"
        );
        let text = String::from_utf8(s.json_for(&cert("bob", false)).to_vec()).unwrap();
        assert!(!text.contains("train") && !text.contains("alice"), "{text}");
        assert!(!text.contains("ownersReason"), "{text}");
        assert_eq!(names(&read(&s, &cert("alice", false))), ["train"]);
        let root = read(&s, &cert("root", true));
        assert_eq!(names(&root), ["train", "sweep"]);
        assert_eq!(root["jobs"][1]["reason"], "requeued: preempted by job train: why");
        assert_eq!(names(&read(&s, &Viewer::Token)), Vec::<&str>::new());
        assert_eq!(read(&s, &Viewer::Token)["at"], 7, "the cluster itself is everyone's");
    }

    #[test]
    fn without_private_data_everyone_sees_every_job() {
        let s = snapshot(false);
        for v in [cert("bob", false), cert("root", true), Viewer::Token] {
            let seen = read(&s, &v);
            assert_eq!(names(&seen), ["train", "sweep"], "{v:?}");
            assert_eq!(seen["jobs"][1]["reason"], "requeued: preempted by job train: why");
        }
    }
}
