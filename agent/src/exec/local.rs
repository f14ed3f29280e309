//! The tasks' exec socket (see [`super`]): a task's `hyperplan exec` connects, sends its
//! `ExecRequest` (with its job's credential) and then the frames of the command; the
//! agent opens a stream to the planner on its current link, sends the request on, and
//! carries bytes both ways. The socket is open to every local user, but only a process
//! of the named job, running as its user, is relayed ([`super::peer`]); the planner then
//! checks the credential. A task's side closing before the
//! planner's means the task's `hyperplan exec` is gone: the stream is reset, and the
//! command is killed wherever it runs.
//!
//! One local user cannot starve the others: each connection counts against its user
//! from its accept ([`super::gate`]), the excess of that user alone is closed at once,
//! a request must come whole within [`REQUEST_WITHIN`], and running out of file
//! descriptors or memory makes the agent wait before accepting again, not spin.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyperplan_net::frame::{DEFAULT_MAX_FRAME, read_frame, write_frame};
use hyperplan_net::messages::{ExecFrame, ExecRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

use super::gate::{Gate, LIMITS, Ticket};
use super::said::{EVERY, Said};

/// The planner link now (none between links), shared with the session.
pub type Current = Arc<Mutex<Option<quinn::Connection>>>;

/// How long a task has to send its request, from its connection's accept.
const REQUEST_WITHIN: Duration = Duration::from_secs(10);
/// The largest request read: a command line the kernel can run (`ARG_MAX` is 2 MiB at
/// the usual 8 MiB stack) with room to spare; what one user's waiting connections may
/// make the agent hold is this times [`LIMITS`]' `waiting_per_user`.
const MAX_REQUEST: usize = 4 << 20;
/// Reset code: the task's side went away.
const GONE: u32 = 1;
/// The first wait after a failed accept, and the longest.
const ACCEPT_PAUSE: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(1));

/// Refused connections and callers, failed accepts: said at most every [`EVERY`].
static REFUSED_CONNECTION: Said = Said::new(EVERY);
static REFUSED_CALLER: Said = Said::new(EVERY);
static ACCEPT_FAILED: Said = Said::new(EVERY);

/// Listens on `path` (replacing a stale socket) and relays until the runtime ends; the
/// jobs' task directories are under `state_dir`.
pub fn listen(path: &Path, state_dir: &Path, current: Current) -> std::io::Result<()> {
    let state_dir = state_dir.to_path_buf();
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    let gate = Gate::new(LIMITS);
    tokio::spawn(accept_loop(listener, move |stream| {
        let Some(ticket) = admit_connection(&gate, &stream) else {
            return;
        };
        let (current, state_dir) = (current.clone(), state_dir.clone());
        tokio::spawn(async move {
            relay(stream, ticket, current, &state_dir).await;
        });
    }));
    Ok(())
}

/// Where connections come from (a trait so that the loop's pauses can be tested).
trait Accept: Send + 'static {
    fn accept(&mut self) -> impl std::future::Future<Output = std::io::Result<UnixStream>> + Send;
}

impl Accept for UnixListener {
    async fn accept(&mut self) -> std::io::Result<UnixStream> {
        UnixListener::accept(self).await.map(|(stream, _)| stream)
    }
}

/// Accepts until the runtime ends, handing each connection to `serve`. An accept that
/// fails (out of file descriptors, `EMFILE`/`ENFILE`, or of memory, `ENOBUFS`/`ENOMEM`:
/// failing again at once until something closes) is followed by a pause, from
/// [`ACCEPT_PAUSE`]'s first doubling to its last while failures go on, so the agent does
/// not spin; the connection waits in the kernel's backlog meanwhile.
async fn accept_loop(mut listener: impl Accept, mut serve: impl FnMut(UnixStream) + Send + 'static) {
    let mut pause = ACCEPT_PAUSE.0;
    loop {
        match listener.accept().await {
            Ok(stream) => {
                pause = ACCEPT_PAUSE.0;
                serve(stream);
            }
            Err(e) => {
                match ACCEPT_FAILED.now(Instant::now()) {
                    Some(unsaid) => tracing::warn!(
                        unsaid,
                        "exec socket: accepting a connection failed: {e}; waiting {pause:?} before the next"
                    ),
                    None => tracing::debug!("exec socket: accepting a connection failed: {e}"),
                }
                tokio::time::sleep(pause).await;
                pause = next_pause(pause);
            }
        }
    }
}

/// The pause after `pause` while accepts go on failing.
fn next_pause(pause: Duration) -> Duration {
    (pause * 2).clamp(ACCEPT_PAUSE.0, ACCEPT_PAUSE.1)
}

/// Counts `stream` against its user ([`super::gate`]); `None` (and the stream closed at
/// once, with a best-effort word why that never waits) when the user, or the node, has
/// too many, or the kernel does not say whose it is.
fn admit_connection(gate: &Arc<Gate>, stream: &UnixStream) -> Option<Ticket> {
    let why = match stream.peer_cred() {
        Ok(cred) => match gate.enter(cred.uid()) {
            Ok(ticket) => return Some(ticket),
            Err(full) => full.to_string(),
        },
        Err(e) => format!("cannot tell whose connection it is: {e}"),
    };
    match REFUSED_CONNECTION.now(Instant::now()) {
        Some(unsaid) => tracing::warn!(unsaid, "exec socket: closed a connection at once: {why}"),
        None => tracing::debug!("exec socket: closed a connection at once: {why}"),
    }
    let frame = ExecFrame::Error {
        node: None,
        message: format!("refused: {why}"),
    };
    if let Ok(bytes) = hyperplan_net::frame::encode(&frame, DEFAULT_MAX_FRAME) {
        let _ = stream.try_write(&bytes);
    }
    None
}

/// Reads `task`'s request, checks its caller and relays it; `ticket` counts it meanwhile.
async fn relay(mut task: UnixStream, mut ticket: Ticket, current: Current, state_dir: &Path) {
    let request = match tokio::time::timeout(REQUEST_WITHIN, read_frame::<ExecRequest, _>(&mut task, MAX_REQUEST)).await
    {
        Ok(Ok(Some(r))) => r,
        _ => return,
    };
    let refuse = |message: String| ExecFrame::Error { node: None, message };
    // Who calls, as the kernel says; then whether it is a process of the job it names.
    let admitted = match task.peer_cred() {
        Ok(cred) => match cred.pid().and_then(|p| u32::try_from(p).ok()) {
            Some(pid) => {
                let (dir, job, uid) = (state_dir.to_path_buf(), request.job.clone(), cred.uid());
                match tokio::task::spawn_blocking(move || super::peer::admit(&dir, &job, uid, pid)).await {
                    Ok(admitted) => admitted.map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                }
            }
            None => Err("the kernel does not say which process calls".to_string()),
        },
        Err(e) => Err(format!("cannot tell who calls: {e}")),
    };
    if let Err(why) = admitted {
        match REFUSED_CALLER.now(Instant::now()) {
            Some(unsaid) => {
                tracing::warn!(job = %request.job, unsaid, "refused a hyperplan exec from the exec socket: {why}")
            }
            None => tracing::debug!(job = %request.job, "refused a hyperplan exec from the exec socket: {why}"),
        }
        let frame = refuse(format!(
            "refused: {why} (hyperplan exec inside a job only runs from its own tasks)"
        ));
        let _ = write_frame(&mut task, &frame, DEFAULT_MAX_FRAME).await;
        return;
    }
    ticket.relaying();
    let conn = current.lock().ok().and_then(|c| c.clone());
    let Some(conn) = conn else {
        let frame = refuse("this node's agent is not connected to the planner now; try again".into());
        let _ = write_frame(&mut task, &frame, DEFAULT_MAX_FRAME).await;
        return;
    };
    let (mut send, mut recv) = match conn.open_bi().await {
        Ok(s) => s,
        Err(e) => {
            let _ = write_frame(
                &mut task,
                &refuse(format!("cannot reach the planner: {e}")),
                DEFAULT_MAX_FRAME,
            )
            .await;
            return;
        }
    };
    if write_frame(&mut send, &request, DEFAULT_MAX_FRAME).await.is_err() {
        let _ = write_frame(
            &mut task,
            &refuse("the link to the planner broke".into()),
            DEFAULT_MAX_FRAME,
        )
        .await;
        return;
    }
    let (mut task_read, mut task_write) = task.into_split();
    // Planner → task until the planner finishes (the command's end) or breaks.
    let down = async {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match recv.read(&mut buf).await {
                Ok(Some(n)) => {
                    if task_write.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
                Ok(None) | Err(_) => return,
            }
        }
    };
    // Task → planner until the task's side closes: it is gone (it never closes first).
    let up = async {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match task_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if send.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    tokio::select! {
        () = down => {
            let _ = send.finish();
        }
        () = up => {
            let _ = send.reset(quinn::VarInt::from_u32(GONE));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// A listener out of file descriptors: every accept fails at once, its time sent.
    struct OutOfFiles(tokio::sync::mpsc::UnboundedSender<Instant>);

    impl Accept for OutOfFiles {
        async fn accept(&mut self) -> std::io::Result<UnixStream> {
            let _ = self.0.send(Instant::now());
            tokio::task::yield_now().await;
            Err(std::io::Error::from_raw_os_error(libc::EMFILE))
        }
    }

    #[tokio::test]
    async fn failing_accepts_are_paused_between_not_spun_on() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let looping = tokio::spawn(accept_loop(OutOfFiles(tx), |_| {}));
        let mut at = Vec::new();
        for _ in 0..4 {
            at.push(rx.recv().await.unwrap());
        }
        looping.abort();
        // 100 ms, then 200, then 400: growing, never a spin.
        let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
        for (gap, least) in gaps.iter().zip([100, 200, 400]) {
            assert!(*gap >= Duration::from_millis(least), "{gaps:?}");
        }
    }

    #[test]
    fn the_pause_grows_to_a_second() {
        let pauses: Vec<u128> = std::iter::successors(Some(ACCEPT_PAUSE.0), |p| Some(next_pause(*p)))
            .take(6)
            .map(|p| p.as_millis())
            .collect();
        assert_eq!(pauses, [100, 200, 400, 800, 1000, 1000]);
    }
}
