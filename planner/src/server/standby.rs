//! A standby's answers (`[store] backend = "etcd"`, another planner leads): it serves
//! the same port with the same handshake, but answers an agent's `Register` with
//! `NotLeader` and the leader's address, every request with "not the leader; the leader
//! is …", and `hyperplan planners` with its role and the epoch it knows. It keeps no
//! agent and decides nothing; its state stays warm through the etcd watch.

use std::time::Duration;

use hyperplan_net::messages::{PlannerToAgent, RequestCommand, ResponseError};
use hyperplan_shared::status::PlannerInfo;
use tokio::sync::{mpsc, watch};

use super::driver::{FromAgent, Request, ToCore};
use crate::store::HaView;

/// How long a standby keeps an agent's connection open after `NotLeader`, for the frame
/// to arrive (the agent closes it as soon as it reads it).
const LINGER: Duration = Duration::from_secs(5);

pub async fn respond(
    mut rx: mpsc::UnboundedReceiver<ToCore>,
    view: watch::Receiver<HaView>,
    store: String,
    advertise: String,
) {
    while let Some(msg) = rx.recv().await {
        let mut v = view.borrow().clone();
        // Won, still loading: not "the leader is me" (the asker would come back here and
        // give up); no leader yet, so agents and the CLI ask again in a moment.
        if v.leading || v.leader.as_deref() == Some(advertise.as_str()) {
            v.leader = None;
        }
        match msg {
            ToCore::Agent(FromAgent::Register { node, link, .. }) => {
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
                command: RequestCommand::Planners,
                reply,
                ..
            }) => {
                let info = PlannerInfo {
                    role: "standby".into(),
                    epoch: v.epoch,
                    leader: v.leader.clone(),
                    store: store.clone(),
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
