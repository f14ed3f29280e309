//! A person's session: `Request` in, `Response` out, one at a time, until the client
//! closes. The driver answers; this only carries frames and refuses bad ones.

use hyperplan_net::messages::{Request, Response, ResponseError};
use hyperplan_net::{read_frame, write_frame};
use tokio::sync::{mpsc, oneshot};

use super::close;
use super::driver::ToCore;
use super::refuse::refuse;

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
        let (reply, answer) = oneshot::channel();
        let msg = ToCore::Request {
            user: user.clone(),
            admin,
            peer,
            command: request.command,
            reply,
        };
        if to_core.send(msg).is_err() {
            break;
        }
        let result = answer
            .await
            .unwrap_or_else(|_| Err(ResponseError::new("the planner is stopping")));
        let response = Response { id: request.id, result };
        if let Err(e) = write_frame(&mut send, &response, max_frame).await {
            tracing::debug!(%peer, user, "client gone before the reply: {e}");
            break;
        }
    }
    let _ = send.finish();
}
