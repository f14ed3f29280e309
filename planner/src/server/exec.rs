//! An exec session (`hyperplan exec`): a person's stream (or a task's, through its
//! agent) on one side, a stream to each node the command runs on on the other. The
//! driver says where it may run (`driver::exec`); this carries the frames: standard input
//! to every node, each node's output and exit back, tagged with the node. When the
//! asking side goes away (its process killed, its connection lost), the streams to the
//! nodes are reset and their agents kill the command: a dying `mpirun` takes its daemons
//! with it. However the session ends, its step's end (the first failure over the nodes'
//! exits) goes to the driver for the job's record (`ToCore::StepEnded`).

use hyperplan_core::model::jobstate::StepEnd;
use hyperplan_net::messages::{ExecFrame, ExecRequest};
use hyperplan_net::{read_frame, write_frame};
use tokio::sync::{mpsc, oneshot};

use super::inbox::{ExecAsk, ExecCaller, StepEnded, ToCore};

/// Frames buffered between a node and the person.
const QUEUE: usize = 64;
/// Close code for a stream reset because the other side went away.
const GONE: u32 = 1;

/// Runs one exec session to its end on `send`/`recv` (the request already read).
pub async fn session(
    to_core: mpsc::UnboundedSender<ToCore>,
    caller: ExecCaller,
    request: ExecRequest,
    mut send: quinn::SendStream,
    recv: quinn::RecvStream,
    max_frame: usize,
) {
    let who = format!("{caller:?}");
    let (reply, answer) = oneshot::channel();
    if to_core
        .send(ToCore::Exec(ExecAsk {
            caller,
            request: request.clone(),
            reply,
        }))
        .is_err()
    {
        return;
    }
    let plan = match answer.await {
        Ok(Ok(plan)) => plan,
        Ok(Err(refused)) => {
            let message = refused.to_string();
            tracing::info!(job = %request.job, who, "exec refused: {message}");
            let _ = write_frame(&mut send, &ExecFrame::Error { node: None, message }, max_frame).await;
            return finish(send).await;
        }
        Err(_) => return, // the planner is stopping
    };
    tracing::info!(job = %request.job, nodes = ?plan.nodes, who, argv = ?request.argv, "exec");
    // Told to the driver however the session ends (this function returning, or the
    // task dropped with the planner stopping).
    let mut watch = StepWatch {
        to_core,
        ended: plan.step.map(|step| StepEnded {
            job: plan.job.clone(),
            job_id: plan.job_id,
            step,
            end: StepEnd::default(),
        }),
    };
    let (out_tx, mut out_rx) = mpsc::channel::<ExecFrame>(QUEUE);
    let mut to_nodes: Vec<Option<quinn::SendStream>> = Vec::new();
    let mut failed = Vec::new();
    for (i, (conn, start)) in plan.targets.into_iter().enumerate() {
        let node = i as u32;
        let opened = async {
            let (mut s, r) = conn.open_bi().await.map_err(|e| e.to_string())?;
            write_frame(&mut s, &start, max_frame)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>((s, r))
        };
        match opened.await {
            Ok((s, r)) => {
                to_nodes.push(Some(s));
                tokio::spawn(from_node(node, r, out_tx.clone(), max_frame));
            }
            Err(e) => {
                to_nodes.push(None);
                failed.push(ExecFrame::Error {
                    node: Some(node),
                    message: format!("cannot reach node {}: {e}", plan.nodes[i]),
                });
            }
        }
    }
    drop(out_tx);
    let mut open = to_nodes.iter().filter(|s| s.is_some()).count();
    let mut first = vec![ExecFrame::Started {
        nodes: plan.nodes,
        step: plan.step,
    }];
    first.append(&mut failed);
    for frame in first {
        if write_frame(&mut send, &frame, max_frame).await.is_err() {
            return reset_all(&mut to_nodes);
        }
    }
    let (in_tx, mut in_rx) = mpsc::channel::<Result<ExecFrame, ()>>(QUEUE);
    tokio::spawn(from_person(recv, in_tx, max_frame));
    let mut person_done = false;
    while open > 0 {
        tokio::select! {
            frame = in_rx.recv(), if !person_done => match frame {
                Some(Ok(frame @ (ExecFrame::Stdin { .. } | ExecFrame::StdinEof))) => {
                    for s in to_nodes.iter_mut() {
                        if let Some(stream) = s
                            && write_frame(stream, &frame, max_frame).await.is_err()
                        {
                            *s = None;
                        }
                    }
                }
                Some(Ok(_)) => {} // only input goes to the nodes
                // Finished its side cleanly: the output still comes.
                None => person_done = true,
                // Gone: the command goes with it.
                Some(Err(())) => return reset_all(&mut to_nodes),
            },
            frame = out_rx.recv() => {
                let Some(frame) = frame else { break };
                if let ExecFrame::Exit { code, signal, .. } = &frame {
                    watch.node_exited(*code, *signal);
                }
                if let ExecFrame::Exit { node, .. } | ExecFrame::Error { node: Some(node), .. } = &frame
                    && let Some(s) = to_nodes.get_mut(*node as usize)
                    && let Some(mut stream) = s.take()
                {
                    let _ = stream.finish();
                    open -= 1;
                }
                if write_frame(&mut send, &frame, max_frame).await.is_err() {
                    return reset_all(&mut to_nodes);
                }
            }
        }
    }
    drop(watch); // the step is over: its end is told before the person's stream closes
    finish(send).await;
}

/// A session's step and how its nodes' commands ended so far; its end goes to the
/// driver when this is dropped, that is, when the session is over whichever way.
struct StepWatch {
    to_core: mpsc::UnboundedSender<ToCore>,
    /// `None` for an exec that is no step (its job's record was not found).
    ended: Option<StepEnded>,
}

impl StepWatch {
    fn node_exited(&mut self, code: Option<i32>, signal: Option<i32>) {
        if let Some(e) = &mut self.ended {
            e.end.node_exited(code, signal);
        }
    }
}

impl Drop for StepWatch {
    fn drop(&mut self) {
        if let Some(ended) = self.ended.take() {
            let _ = self.to_core.send(ToCore::StepEnded(ended));
        }
    }
}

/// Ends the person's stream and waits (a little) until they have read it: the
/// connection closes when the session returns, which would drop what is in flight.
async fn finish(mut send: quinn::SendStream) {
    let _ = send.finish();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), send.stopped()).await;
}

/// A node's frames, tagged with its number; a stream that ends without an exit is an
/// error for that node.
async fn from_node(node: u32, mut recv: quinn::RecvStream, out: mpsc::Sender<ExecFrame>, max_frame: usize) {
    loop {
        let frame = match read_frame::<ExecFrame, _>(&mut recv, max_frame).await {
            Ok(Some(f)) => f,
            Ok(None) => ExecFrame::Error {
                node: Some(node),
                message: "the node's agent ended the command's stream".into(),
            },
            Err(e) => ExecFrame::Error {
                node: Some(node),
                message: format!("the node's agent is gone: {e}"),
            },
        };
        let (frame, last) = match frame {
            ExecFrame::Stdout { data, .. } => (ExecFrame::Stdout { node, data }, false),
            ExecFrame::Stderr { data, .. } => (ExecFrame::Stderr { node, data }, false),
            ExecFrame::Exit { code, signal, .. } => (ExecFrame::Exit { node, code, signal }, true),
            ExecFrame::Error { message, .. } => (
                ExecFrame::Error {
                    node: Some(node),
                    message,
                },
                true,
            ),
            _ => continue,
        };
        if out.send(frame).await.is_err() || last {
            return;
        }
    }
}

/// The person's frames; `Err` when their side broke off (not a clean finish).
async fn from_person(mut recv: quinn::RecvStream, tx: mpsc::Sender<Result<ExecFrame, ()>>, max_frame: usize) {
    loop {
        match read_frame::<ExecFrame, _>(&mut recv, max_frame).await {
            Ok(Some(f)) => {
                if tx.send(Ok(f)).await.is_err() {
                    return;
                }
            }
            Ok(None) => return,
            Err(_) => {
                let _ = tx.send(Err(())).await;
                return;
            }
        }
    }
}

/// The asking side is gone: every node's command is killed (its agent sees the reset).
fn reset_all(to_nodes: &mut [Option<quinn::SendStream>]) {
    for s in to_nodes.iter_mut() {
        if let Some(mut stream) = s.take() {
            let _ = stream.reset(quinn::VarInt::from_u32(GONE));
        }
    }
}
