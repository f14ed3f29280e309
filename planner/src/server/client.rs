//! A person's session: `Request` in, `Response` out, one at a time, until the client
//! closes. The driver answers; this only carries frames and refuses bad ones, and reads
//! a submitted file into jobs before the driver sees it (`submission`: a large file
//! holds up this connection only, never the driver's ticks). A reply too large for a
//! frame becomes an error saying so (never a silent close): the person always gets data
//! or a reason.

use hyperplan_net::frame::encode;
use std::net::SocketAddr;

use hyperplan_net::messages::{Request, RequestCommand, Response, ResponseError};
use hyperplan_net::{FrameError, read_frame};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::close;
use super::inbox::{self, ExecCaller, ToCore};
use super::link::refuse;

pub async fn serve(
    conn: quinn::Connection,
    user: String,
    admin: bool,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    to_core: mpsc::UnboundedSender<ToCore>,
    max_frame: usize,
) {
    let peer = conn.remote_address();
    loop {
        let request = match read_frame::<Request, _>(&mut recv, max_frame).await {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(hyperplan_net::FrameError::Io(e)) => {
                tracing::debug!(%peer, user, "client gone: {e}");
                break;
            }
            Err(e) => {
                refuse(&conn, close::PROTOCOL, &format!("bad frame from client: {e}"));
                return;
            }
        };
        if let RequestCommand::Exec(exec) = request.command {
            // The stream is the command's from here on.
            let caller = ExecCaller::Person { user, admin };
            return super::exec::session(to_core, caller, exec, send, recv, max_frame).await;
        }
        let Some(result) = answer(&to_core, &user, admin, peer, request.command).await else {
            break;
        };
        let id = request.id;
        let frame = match encode(&Response { id, result }, max_frame) {
            Ok(frame) => Ok(frame),
            Err(e) => {
                let why = match e {
                    FrameError::Oversized { len, max } => {
                        tracing::warn!(%peer, user, len, max, "a reply larger than the largest frame: sent why instead");
                        too_large(len, max)
                    }
                    other => ResponseError::new(format!("encoding the reply: {other}")),
                };
                encode(&Response { id, result: Err(why) }, max_frame)
            }
        };
        let sent = match frame {
            Ok(frame) => send.write_all(&frame).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = sent {
            tracing::debug!(%peer, user, "client gone before the reply: {e}");
            break;
        }
    }
    let _ = send.finish();
}

/// The answer to `command`: a submitted file is read into jobs here (a refusal is
/// answered at once, the driver never sees it), then the driver answers. `None`: the
/// driver is gone.
async fn answer(
    to_core: &mpsc::UnboundedSender<ToCore>,
    user: &str,
    admin: bool,
    peer: SocketAddr,
    command: RequestCommand,
) -> Option<Result<Value, ResponseError>> {
    let asked = match super::submission::read_off_driver(command).await {
        Ok(asked) => asked,
        Err(refused) => return Some(Err(refused)),
    };
    // Only a submit asks for them (queues that take groups).
    let groups = match asked {
        inbox::Asked::Submit(_) => super::groups::of(user).await,
        inbox::Asked::Command(_) => Vec::new(),
    };
    let (reply, answer) = oneshot::channel();
    let msg = ToCore::Request(inbox::Request {
        user: user.to_string(),
        admin,
        groups,
        peer,
        asked,
        reply,
    });
    to_core.send(msg).ok()?;
    Some(
        answer
            .await
            .unwrap_or_else(|_| Err(ResponseError::new("the planner is stopping"))),
    )
}

/// What a person hears instead of a reply that does not fit in a frame.
fn too_large(len: usize, max: usize) -> ResponseError {
    ResponseError::new(format!(
        "the reply is {len} bytes, larger than the largest frame of {max} bytes ([server] maxFrameBytes); \
         ask for less (`hyperplan status JOB` shows one job) or raise maxFrameBytes"
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::server::inbox::Asked;

    const PEER: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 50000);

    fn submit(text: String) -> RequestCommand {
        RequestCommand::Submit {
            file_name: "job.yaml".into(),
            text,
            submit_dir: Some("/home/alice".into()),
            hold: false,
            begin: None,
            array: None,
            dependency: None,
            account: None,
        }
    }

    fn jobs(n: usize) -> String {
        (0..n)
            .map(|i| format!("- name: j{i}\n  tasks:\n    - name: w\n      replicas: 1\n      resources: {{cpu: 1}}\n"))
            .collect()
    }

    /// A driver that answers each request with what it received, in order.
    fn fake_driver(mut rx: mpsc::UnboundedReceiver<ToCore>) -> tokio::task::JoinHandle<Vec<String>> {
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some(msg) = rx.recv().await {
                let ToCore::Request(r) = msg else {
                    panic!("not a request: {msg:?}")
                };
                let what = match &r.asked {
                    Asked::Submit(s) => format!("submit of {} jobs", s.jobs.len()),
                    Asked::Command(c) => format!("{c:?}"),
                };
                let _ = r.reply.send(Ok(Value::String(what.clone())));
                seen.push(what);
            }
            seen
        })
    }

    #[tokio::test]
    async fn a_file_that_cannot_be_read_is_answered_without_the_driver() {
        let (to_core, mut rx) = mpsc::unbounded_channel();
        let text = "name: a\ntasks:\n  - name: w\n    replicas: many\n".to_string();
        let said = hyperplan_shared::parse_jobs(&text, std::path::Path::new("job.yaml"))
            .unwrap_err()
            .to_string();
        let e = answer(&to_core, "alice", false, PEER, submit(text))
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(e.to_string(), said);
        assert!(said.starts_with("job.yaml:4:"), "{said}");
        assert!(rx.try_recv().is_err(), "the driver heard of it");
        // A file that can: the driver gets its jobs, not its text.
        let driver = fake_driver(rx);
        let v = answer(&to_core, "alice", false, PEER, submit(jobs(2)))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(v, "submit of 2 jobs");
        drop(to_core);
        assert_eq!(driver.await.unwrap(), ["submit of 2 jobs"]);
    }

    /// A large submission is parsed while the driver answers another connection's request
    /// (parsed on the driver's task, it would have come first and held the other up).
    #[tokio::test]
    async fn a_large_submission_holds_up_no_other_request() {
        let (to_core, rx) = mpsc::unbounded_channel();
        let driver = fake_driver(rx);
        let large = answer(&to_core, "alice", false, PEER, submit(jobs(4000)));
        let other = async {
            tokio::task::yield_now().await; // the submission is on its way first
            answer(&to_core, "bob", false, PEER, RequestCommand::Queues).await
        };
        let (large, other) = tokio::join!(large, other);
        assert_eq!(large.unwrap().unwrap(), "submit of 4000 jobs");
        assert_eq!(other.unwrap().unwrap(), "Queues");
        drop(to_core);
        assert_eq!(driver.await.unwrap(), ["Queues", "submit of 4000 jobs"]);
    }
}
