//! A person's session: `Request` in, `Response` out, one at a time, until the client
//! closes. The driver answers; this only carries frames and refuses bad ones. A reply
//! too large for a frame becomes an error saying so (never a silent close): the person
//! always gets data or a reason.

use hyperplan_net::frame::encode;
use hyperplan_net::messages::{Request, Response, ResponseError};
use hyperplan_net::{FrameError, read_frame};
use tokio::sync::{mpsc, oneshot};

use super::close;
use super::driver::{self, ToCore};
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
        if let hyperplan_net::messages::RequestCommand::Exec(exec) = request.command {
            // The stream is the command's from here on.
            let caller = driver::ExecCaller::Person { user, admin };
            return super::exec::session(to_core, caller, exec, send, recv, max_frame).await;
        }
        let (reply, answer) = oneshot::channel();
        // Only a submit asks for them (queues that take groups).
        let groups = match request.command {
            hyperplan_net::messages::RequestCommand::Submit { .. } => super::groups::of(&user).await,
            _ => Vec::new(),
        };
        let msg = ToCore::Request(driver::Request {
            user: user.clone(),
            admin,
            groups,
            peer,
            command: request.command,
            reply,
        });
        if to_core.send(msg).is_err() {
            break;
        }
        let result = answer
            .await
            .unwrap_or_else(|_| Err(ResponseError::new("the planner is stopping")));
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

/// What a person hears instead of a reply that does not fit in a frame.
fn too_large(len: usize, max: usize) -> ResponseError {
    ResponseError::new(format!(
        "the reply is {len} bytes, larger than the largest frame of {max} bytes ([server] maxFrameBytes); \
         ask for less (`hyperplan status JOB` shows one job) or raise maxFrameBytes"
    ))
}
