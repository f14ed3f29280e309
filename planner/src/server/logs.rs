//! `hyperplan logs`: a task's output is read by the agent of its node (no shared file
//! system needed) and relayed. The driver asks with `ReadLog` and a request number; the
//! agent's `Log` answers it; a node that does not answer in time, or goes away, gets the
//! person an error instead of a hang.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hyperplan_net::messages::{LogChunk, PlannerToAgent, ResponseError, TaskRef};
use hyperplan_shared::status::LogPiece;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

/// How long an agent has to answer a `ReadLog`.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(10);
/// The most a single `logs` request reads (the client asks again for more).
pub const MAX_READ: u32 = 1 << 20;
/// Requests waiting at once; more are refused (a client looping fast cannot grow this).
const MAX_PENDING: usize = 1024;

type Reply = oneshot::Sender<Result<Value, ResponseError>>;

struct Pending {
    reply: Reply,
    /// The answer so far: job, task, node, offset, ended.
    piece: LogPiece,
    deadline: Instant,
}

/// The `ReadLog` requests waiting for their agents.
#[derive(Default)]
pub struct LogRelay {
    next: u64,
    pending: BTreeMap<u64, Pending>,
}

impl LogRelay {
    /// Sends the agent of `piece.node` a `ReadLog` for `task` and keeps `reply` until it
    /// answers; answers at once with an error when that cannot be sent.
    #[allow(clippy::too_many_arguments)]
    pub fn ask(
        &mut self,
        link: Option<&mpsc::UnboundedSender<PlannerToAgent>>,
        task: TaskRef,
        step: Option<u32>,
        stderr: bool,
        max_bytes: u32,
        piece: LogPiece,
        reply: Reply,
    ) {
        if self.pending.len() >= MAX_PENDING {
            let _ = reply.send(Err(ResponseError::for_now(
                "the planner is relaying too many logs requests; try again",
            )));
            return;
        }
        let Some(link) = link else {
            let _ = reply.send(Err(ResponseError::for_now(format!(
                "node {} is not connected: the output of {}/{} cannot be read now",
                piece.node, piece.job, piece.task
            ))));
            return;
        };
        self.next += 1;
        let request = self.next;
        let frame = PlannerToAgent::ReadLog {
            request,
            task,
            stderr,
            offset: piece.offset,
            max_bytes: max_bytes.clamp(1, MAX_READ),
            step,
        };
        if link.send(frame).is_err() {
            let _ = reply.send(Err(ResponseError::for_now(format!(
                "node {} just disconnected",
                piece.node
            ))));
            return;
        }
        let deadline = Instant::now() + ANSWER_WITHIN;
        self.pending.insert(request, Pending { reply, piece, deadline });
    }

    /// The agent of `node` answered.
    pub fn answer(&mut self, node: &str, chunk: LogChunk) {
        let Some(p) = self.pending.remove(&chunk.request) else {
            return; // too late, or never asked
        };
        if p.piece.node != node {
            // Only the node asked may answer; put it back for the right one.
            self.pending.insert(chunk.request, p);
            return;
        }
        let result = match chunk.error {
            Some(e) => Err(ResponseError::new(format!("node {node}: {e}"))),
            None => {
                let (data, used) = decode(&chunk.data);
                let mut piece = p.piece;
                piece.offset = chunk.offset;
                piece.data = data;
                piece.next_offset = chunk.offset.saturating_add(used as u64);
                piece.size = chunk.size;
                serde_json::to_value(&piece).map_err(|e| ResponseError::new(format!("encoding the reply: {e}")))
            }
        };
        let _ = p.reply.send(result);
    }

    /// Errors for the requests whose node did not answer in time.
    pub fn expire(&mut self, now: Instant) {
        let late: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(&r, _)| r)
            .collect();
        for r in late {
            if let Some(p) = self.pending.remove(&r) {
                let _ = p.reply.send(Err(ResponseError::for_now(format!(
                    "node {} did not send the output within {} s",
                    p.piece.node,
                    ANSWER_WITHIN.as_secs()
                ))));
            }
        }
    }

    /// The node's link ended: its requests will not be answered.
    pub fn node_gone(&mut self, node: &str) {
        let gone: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.piece.node == node)
            .map(|(&r, _)| r)
            .collect();
        for r in gone {
            if let Some(p) = self.pending.remove(&r) {
                let _ = p.reply.send(Err(ResponseError::for_now(format!(
                    "node {node} disconnected before it sent the output"
                ))));
            }
        }
    }
}

/// The bytes as text and how many of them it used: invalid bytes become U+FFFD, and a
/// character cut off at the end is left for the next read.
pub fn decode(bytes: &[u8]) -> (String, usize) {
    let mut out = String::new();
    let mut rest = bytes;
    loop {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                out.push_str(s);
                return (out, bytes.len());
            }
            Err(e) => {
                let (good, bad) = rest.split_at(e.valid_up_to());
                // `good` is valid UTF-8 by construction.
                out.push_str(std::str::from_utf8(good).unwrap_or_default());
                match e.error_len() {
                    Some(n) => {
                        out.push(char::REPLACEMENT_CHARACTER);
                        rest = &bad[n..];
                    }
                    // An incomplete character at the end: leave it for the next read.
                    None => return (out, bytes.len() - bad.len()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn decoding_keeps_text_replaces_garbage_and_leaves_a_cut_character() {
        assert_eq!(decode(b"rank 0\n"), ("rank 0\n".to_string(), 7));
        assert_eq!(decode(b"a\xffb"), ("a\u{fffd}b".to_string(), 3));
        // "é" is C3 A9: cut after C3, the C3 is left for the next read.
        assert_eq!(decode(b"caf\xc3"), ("caf".to_string(), 3));
        assert_eq!(decode(b""), (String::new(), 0));
    }

    #[tokio::test]
    async fn an_answer_from_another_node_or_too_late_is_not_taken() {
        let mut relay = LogRelay::default();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (reply, answer) = oneshot::channel();
        let task = TaskRef {
            job: "j".into(),
            job_id: 1.into(),
            task: "w-0".into(),
            index: 0,
        };
        let piece = LogPiece {
            job: "j".into(),
            task: "w-0".into(),
            node: "n1".into(),
            ..LogPiece::default()
        };
        relay.ask(Some(&tx), task, None, false, 4096, piece, reply);
        let Some(PlannerToAgent::ReadLog { request, .. }) = rx.recv().await else {
            panic!("no ReadLog sent");
        };
        let chunk = LogChunk {
            request,
            offset: 0,
            data: b"hello\n".to_vec(),
            size: 6,
            error: None,
        };
        relay.answer("n2", chunk.clone());
        assert_eq!(relay.pending.len(), 1, "n2 may not answer n1's request");
        relay.answer("n1", chunk);
        let v = answer.await.unwrap().unwrap();
        assert_eq!(v["data"], "hello\n");
        assert_eq!(v["nextOffset"], 6);
        // A node that never answers: an error after the deadline, not a hang.
        let (reply, answer) = oneshot::channel();
        let task = TaskRef {
            job: "j".into(),
            job_id: 1.into(),
            task: "w-1".into(),
            index: 1,
        };
        relay.ask(Some(&tx), task, None, false, 1, LogPiece::default(), reply);
        relay.expire(Instant::now() + ANSWER_WITHIN);
        assert!(answer.await.unwrap().is_err());
        assert!(relay.pending.is_empty());
    }
}
