//! A standby's answers (`[store] backend = "etcd"`, another planner leads): it serves
//! the same port with the same handshake, but answers an agent's `Register` with
//! `NotLeader` and the leader's address, every request with "not the leader; the leader
//! is …", and `hyperplan planners` with its role and the epoch it knows. It keeps no
//! agent and decides nothing; its state stays warm through the etcd watch. Every
//! [`REPORT_EVERY`] it says in etcd which nodes' agents came to it lately: agents come to
//! a standby when they cannot reach the leader, and a leader no agent reaches hands the
//! lead over on it (`server::isolation`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hyperplan_net::messages::{PlannerToAgent, RequestCommand, ResponseError};
use hyperplan_shared::status::PlannerInfo;
use tokio::sync::{mpsc, watch};

use super::inbox::{Asked, FromAgent, Request, ToCore};
use crate::store::HaView;

/// How long a standby keeps an agent's connection open after `NotLeader`, for the frame
/// to arrive (the agent closes it as soon as it reads it).
const LINGER: Duration = Duration::from_secs(5);
/// How often a standby says which agents came to it, and how long one counts.
pub const REPORT_EVERY: Duration = Duration::from_secs(2);
const HEARD_FOR: Duration = Duration::from_secs(10);
/// Nodes remembered at most (a flood of names is not kept).
const MAX_HEARD: usize = 100_000;

pub async fn respond(
    mut rx: mpsc::UnboundedReceiver<ToCore>,
    view: watch::Receiver<HaView>,
    store: String,
    advertise: String,
    etcd: crate::store::Etcd,
) {
    let mut heard: BTreeMap<String, Instant> = BTreeMap::new();
    let mut reported = false;
    let mut report = tokio::time::interval(REPORT_EVERY);
    report.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let msg = tokio::select! {
            msg = rx.recv() => match msg {
                Some(msg) => msg,
                None => break,
            },
            _ = report.tick() => {
                heard.retain(|_, at| at.elapsed() < HEARD_FOR);
                // While agents come, and once more when they stopped coming.
                if !heard.is_empty() || reported {
                    let nodes: Vec<String> = heard.keys().cloned().collect();
                    etcd.report_heard(&advertise, &nodes);
                    reported = !nodes.is_empty();
                }
                continue;
            }
        };
        let mut v = view.borrow().clone();
        // Won, still loading: not "the leader is me" (the asker would come back here and
        // give up); no leader yet, so agents and the CLI ask again in a moment.
        if v.leading || v.leader.as_deref() == Some(advertise.as_str()) {
            v.leader = None;
        }
        match msg {
            ToCore::Agent(FromAgent::Register { node, link, .. }) => {
                if heard.len() < MAX_HEARD || heard.contains_key(&node) {
                    heard.insert(node.clone(), Instant::now());
                }
                tracing::info!(
                    node,
                    leader = v.leader.as_deref().unwrap_or("none yet"),
                    "standby: sent an agent to the leader"
                );
                let _ = link.frames.send(PlannerToAgent::NotLeader {
                    leader: v.leader.clone(),
                });
                // The link's writer sends it while the sender lives; the agent closes
                // the connection as soon as it reads it, which ends the writer (or
                // LINGER passes for an agent that never does).
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(LINGER, link.frames.closed()).await;
                    drop(link);
                });
            }
            ToCore::Request(Request {
                asked: Asked::Command(RequestCommand::Planners),
                reply,
                ..
            }) => {
                let info = PlannerInfo {
                    role: "standby".into(),
                    epoch: v.epoch,
                    leader: v.leader.clone(),
                    store: store.clone(),
                    accounting: None,
                };
                let _ = reply.send(serde_json::to_value(&info).map_err(|e| ResponseError::new(e.to_string())));
            }
            ToCore::Request(Request { reply, .. }) => {
                let _ = reply.send(Err(ResponseError::not_leader(v.leader.as_deref())));
            }
            // Nothing else comes before a `Registered` this planner never sends.
            _ => {}
        }
    }
}
