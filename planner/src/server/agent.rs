//! An agent's link: `Register` first (naming the node its certificate names), then
//! heartbeats, topology changes, task starts and ends, output and PMI fences in;
//! `Registered`, `Job`, `Launch`, `Kill`, `Ack`, `ReadLog` and `FenceDone` out. When the
//! link ends, for whatever reason, the driver hears `Gone` and the node turns NotReady.

use std::time::Duration;

use hyperplan_net::messages::{AgentMessage, ExecRequest, PlannerToAgent};
use hyperplan_net::{PROTOCOL_VERSION, read_frame, write_frame};
use tokio::sync::mpsc;

use super::close;
use super::inbox::{AgentLink, ExecCaller, FromAgent, ToCore};
use super::link::refuse;

const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);

pub async fn serve(
    conn: quinn::Connection,
    id: u64,
    node: String,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    to_core: mpsc::UnboundedSender<ToCore>,
    max_frame: usize,
) {
    let peer = conn.remote_address();
    let first = tokio::time::timeout(REGISTER_TIMEOUT, read_frame::<AgentMessage, _>(&mut recv, max_frame)).await;
    let (labels, topology, confinement, advertise, epoch) = match first {
        Ok(Ok(Some(AgentMessage::Register {
            version,
            node: claimed,
            labels,
            topology,
            confinement,
            advertise_address,
            epoch,
            ..
        }))) => {
            if claimed != node {
                return refuse(
                    &conn,
                    close::REFUSED,
                    &format!("Register names node {claimed:?} but the certificate is for node {node:?}"),
                );
            }
            if version != PROTOCOL_VERSION {
                return refuse(
                    &conn,
                    close::VERSION,
                    &format!(
                        "Register: unsupported protocol version {version} (this planner speaks {PROTOCOL_VERSION})"
                    ),
                );
            }
            (labels, topology, confinement, advertise_address, epoch)
        }
        Ok(Ok(Some(other))) => {
            return refuse(
                &conn,
                close::PROTOCOL,
                &format!("expected Register first, got {}", kind(&other)),
            );
        }
        Ok(Ok(None)) => return tracing::info!(%peer, node, "closed before registering"),
        Ok(Err(e)) => return refuse(&conn, close::PROTOCOL, &format!("expected Register: {e}")),
        Err(_) => return refuse(&conn, close::PROTOCOL, "no Register within 30 s"),
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<PlannerToAgent>();
    if to_core
        .send(ToCore::Agent(FromAgent::Register {
            node: node.clone(),
            link_id: id,
            labels,
            topology: Box::new(topology),
            confinement,
            advertise: advertise.filter(|a| hyperplan_shared::names::is_host_or_ip(a)),
            epoch,
            link: AgentLink {
                frames: tx,
                control: std::sync::Arc::new(conn.clone()),
            },
        }))
        .is_err()
    {
        return; // the planner is stopping
    }
    let writer = async {
        while let Some(msg) = rx.recv().await {
            if let Err(e) = write_frame(&mut send, &msg, max_frame).await {
                tracing::info!(%peer, node, "link lost while sending: {e}");
                break;
            }
        }
    };
    let reader = async {
        loop {
            match read_frame::<AgentMessage, _>(&mut recv, max_frame).await {
                Ok(Some(AgentMessage::Heartbeat {
                    seq,
                    running_tasks,
                    ports_in_use,
                    strained,
                    health,
                    ..
                })) => {
                    if to_core
                        .send(ToCore::Agent(FromAgent::Heartbeat {
                            node: node.clone(),
                            link_id: id,
                            seq,
                            running: running_tasks,
                            ports_in_use,
                            strained,
                            health,
                        }))
                        .is_err()
                    {
                        break;
                    }
                }
                Ok(Some(AgentMessage::TopologyChanged { topology, .. })) => {
                    let msg = ToCore::Agent(FromAgent::TopologyChanged {
                        node: node.clone(),
                        link_id: id,
                        topology: Box::new(topology),
                    });
                    if to_core.send(msg).is_err() {
                        break;
                    }
                }
                Ok(Some(
                    message @ (AgentMessage::TaskStarted(_) | AgentMessage::TaskFinished(_) | AgentMessage::Log(_)),
                )) => {
                    let msg = ToCore::Agent(FromAgent::Tasks {
                        node: node.clone(),
                        link_id: id,
                        message: Box::new(message),
                    });
                    if to_core.send(msg).is_err() {
                        break;
                    }
                }
                Ok(Some(AgentMessage::Fence(fence))) => {
                    let msg = ToCore::Agent(FromAgent::Fence {
                        node: node.clone(),
                        link_id: id,
                        fence,
                    });
                    if to_core.send(msg).is_err() {
                        break;
                    }
                }
                Ok(Some(AgentMessage::Register { .. })) => {
                    refuse(&conn, close::PROTOCOL, "Register sent twice on one connection");
                    break;
                }
                Ok(None) => {
                    tracing::info!(%peer, node, "agent closed its stream");
                    break;
                }
                Err(hyperplan_net::FrameError::Io(e)) => {
                    if matches!(conn.close_reason(), Some(quinn::ConnectionError::LocallyClosed)) {
                        // This planner closed it (a refusal, a replaced link): said there.
                        tracing::debug!(%peer, node, "link closed here: {e}");
                    } else {
                        tracing::info!(%peer, node, "link lost: {e}");
                    }
                    break;
                }
                Err(e) => {
                    refuse(&conn, close::PROTOCOL, &format!("bad frame from agent: {e}"));
                    break;
                }
            }
        }
    };
    // Streams the agent opens: `hyperplan exec` from its tasks (with the job's credential).
    let execs = async {
        while let Ok((send, mut recv)) = conn.accept_bi().await {
            let (to_core, node) = (to_core.clone(), node.clone());
            tokio::spawn(async move {
                let first = tokio::time::timeout(REGISTER_TIMEOUT, read_frame::<ExecRequest, _>(&mut recv, max_frame));
                match first.await {
                    Ok(Ok(Some(request))) => {
                        let caller = ExecCaller::Task { node };
                        super::exec::session(to_core, caller, request, send, recv, max_frame).await;
                    }
                    _ => tracing::debug!(node, "an exec stream without a request; dropped"),
                }
            });
        }
    };
    tokio::select! {
        () = writer => {}
        () = reader => {}
        () = execs => {}
    }
    let _ = to_core.send(ToCore::Agent(FromAgent::Gone { node, link_id: id }));
}

fn kind(m: &AgentMessage) -> &'static str {
    match m {
        AgentMessage::Register { .. } => "Register",
        AgentMessage::Heartbeat { .. } => "Heartbeat",
        AgentMessage::TopologyChanged { .. } => "TopologyChanged",
        AgentMessage::TaskStarted(_) => "TaskStarted",
        AgentMessage::TaskFinished(_) => "TaskFinished",
        AgentMessage::Log(_) => "Log",
        AgentMessage::Fence(_) => "Fence",
    }
}
