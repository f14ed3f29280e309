//! The tasks' exec socket (see [`super`]): a task's `hyperplan exec` connects, sends its
//! `ExecRequest` (with its job's credential) and then the frames of the command; the
//! agent opens a stream to the planner on its current link, sends the request on, and
//! carries bytes both ways. The socket is open to every local user, but only a process
//! of the named job, running as its user, is relayed ([`super::peer`]); the planner then
//! checks the credential. A task's side closing before the
//! planner's means the task's `hyperplan exec` is gone: the stream is reset, and the
//! command is killed wherever it runs.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyperplan_net::frame::{DEFAULT_MAX_FRAME, read_frame, write_frame};
use hyperplan_net::messages::{ExecFrame, ExecRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

/// The planner link now (none between links), shared with the session.
pub type Current = Arc<Mutex<Option<quinn::Connection>>>;

/// How long a task has to send its request.
const REQUEST_WITHIN: Duration = Duration::from_secs(10);
/// Requests relayed at once; more wait for the kernel's backlog.
const MAX_RELAYS: usize = 1024;
/// Reset code: the task's side went away.
const GONE: u32 = 1;

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
    let busy = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            if busy.load(std::sync::atomic::Ordering::SeqCst) >= MAX_RELAYS {
                drop(stream);
                continue;
            }
            let (current, busy, state_dir) = (current.clone(), busy.clone(), state_dir.clone());
            busy.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                relay(stream, current, &state_dir).await;
                busy.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
    });
    Ok(())
}

async fn relay(mut task: UnixStream, current: Current, state_dir: &Path) {
    let request = match tokio::time::timeout(
        REQUEST_WITHIN,
        read_frame::<ExecRequest, _>(&mut task, DEFAULT_MAX_FRAME),
    )
    .await
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
        tracing::warn!(job = %request.job, "refused a hyperplan exec from the exec socket: {why}");
        let frame = refuse(format!(
            "refused: {why} (hyperplan exec inside a job only runs from its own tasks)"
        ));
        let _ = write_frame(&mut task, &frame, DEFAULT_MAX_FRAME).await;
        return;
    }
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
