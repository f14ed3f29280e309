//! One command of `hyperplan exec` on this node (see [`super`]).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyperplan_net::frame::{DEFAULT_MAX_FRAME, read_frame, write_frame};
use hyperplan_net::messages::{ExecFrame, ExecStart};
use hyperplan_shared::names::NameError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::kept::Kept;
use crate::launcher::Step;
use crate::shepherd::TaskDir;
use crate::shepherd::exec::Prepared;
use crate::shepherd::step::StepError;

/// How long the planner has to send the `ExecStart`.
const START_WITHIN: Duration = Duration::from_secs(10);
/// After the command exits, how long its output pipes may stay open (a daemon it left
/// behind holds them) before its exit is reported without the rest.
const DRAIN: Duration = Duration::from_secs(2);
/// SIGTERM to SIGKILL when the asking side went away.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// Output read at once.
const CHUNK: usize = 32 * 1024;

/// Why a command of `hyperplan exec` did not start here; the words go back to the
/// planner, and on to who asked.
#[derive(Debug, thiserror::Error)]
enum ExecError {
    #[error("job name: {0}")]
    JobName(NameError),
    #[error("task name: {0}")]
    TaskName(NameError),
    #[error(transparent)]
    Step(#[from] StepError),
    /// The launcher refused the step, or could not be asked.
    #[error("{0}")]
    Launcher(std::io::Error),
    #[error("starting the command: {0}")]
    Join(tokio::task::JoinError),
}

/// Where step `step` of job `job` (id `job_id`) keeps its output on this node: the
/// agent's own directory, written and read by the agent alone.
pub fn output_path(state_dir: &Path, job: &str, job_id: hyperplan_shared::ids::JobId, step: u32) -> PathBuf {
    let dir = match hyperplan_shared::names::check_job_name(job) {
        Ok(()) => format!("{job}.{job_id}"),
        Err(_) => "invalid".into(), // never made: nothing to read
    };
    state_dir.join("steps").join(dir).join(format!("{step}.out"))
}

/// Serves one stream the planner opened, to its end. With `launcher`, the command is
/// started by the launcher (outside the agent's unit, as the tasks are); else forked here.
pub async fn serve(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    state_dir: PathBuf,
    allow_root: bool,
    launcher: Option<PathBuf>,
) {
    let start = match tokio::time::timeout(START_WITHIN, read_frame::<ExecStart, _>(&mut recv, DEFAULT_MAX_FRAME)).await
    {
        Ok(Ok(Some(s))) => s,
        _ => {
            tracing::debug!("an exec stream without an ExecStart; dropped");
            return;
        }
    };
    let task = &start.task;
    let process = match launcher {
        None => prepare(&start, &state_dir, allow_root)
            .and_then(|p| p.spawn_piped().map_err(ExecError::from))
            .map(Process::forked),
        Some(socket) => {
            let (start, state_dir) = (start.clone(), state_dir.clone());
            tokio::task::spawn_blocking(move || through_launcher(&socket, &start, &state_dir))
                .await
                .unwrap_or_else(|e| Err(ExecError::Join(e)))
        }
    };
    let process = match process {
        Ok(p) => p,
        Err(e) => {
            let message = e.to_string();
            tracing::info!(job = %task.job, task = %task.task, "exec refused: {message}");
            let _ = write_frame(
                &mut send,
                &ExecFrame::Error { node: Some(0), message },
                DEFAULT_MAX_FRAME,
            )
            .await;
            let _ = send.finish();
            return;
        }
    };
    tracing::info!(job = %task.job, task = %task.task, step = ?start.step, pid = process.pid, argv = ?start.argv, "exec started");
    // Kept within the bounds of `super::kept`; the caller gets all of it.
    let kept = start
        .step
        .and_then(|step| Kept::open(&output_path(&state_dir, &task.job, task.job_id, step)));
    relay(process, send, recv, kept).await;
}

/// A running command: its pid, the agent's ends of its standard input, output and
/// error, and what waits for its end.
struct Process {
    pid: u32,
    stdin: Option<OwnedFd>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    wait: Box<dyn FnOnce() -> std::io::Result<std::process::ExitStatus> + Send>,
}

impl Process {
    /// The agent's own child.
    fn forked(mut child: std::process::Child) -> Process {
        Process {
            pid: child.id(),
            stdin: child.stdin.take().map(OwnedFd::from),
            stdout: child.stdout.take().map(OwnedFd::from),
            stderr: child.stderr.take().map(OwnedFd::from),
            wait: Box::new(move || child.wait()),
        }
    }
}

/// Starts the command through the launcher: pipes made here, their far ends handed
/// over; the launcher says when it ends.
fn through_launcher(socket: &Path, start: &ExecStart, state_dir: &Path) -> Result<Process, ExecError> {
    let dir = task_dir(start, state_dir)?;
    let pipes = || std::io::pipe().map_err(StepError::Pipe);
    let ((in_read, in_write), (out_read, out_write), (err_read, err_write)) = (pipes()?, pipes()?, pipes()?);
    let step = Step {
        argv: start.argv.clone(),
        shell: start.shell,
        user: start.user.clone(),
    };
    let far = [
        OwnedFd::from(in_read),
        OwnedFd::from(out_write),
        OwnedFd::from(err_write),
    ];
    let running = crate::launcher::client::start_step(socket, &dir.spec(), step, far).map_err(ExecError::Launcher)?;
    let pid = running.pid;
    // A launcher that stops while the command runs takes its end with it: the command
    // is killed rather than left running unheard.
    let wait = move || {
        running.wait().map_err(|e| {
            crate::tasks::runner::signal_group(pid, libc::SIGKILL);
            std::io::Error::other(format!(
                "the launcher stopped while the command ran ({e}); the command was killed"
            ))
        })
    };
    Ok(Process {
        pid,
        stdin: Some(OwnedFd::from(in_write)),
        stdout: Some(OwnedFd::from(out_read)),
        stderr: Some(OwnedFd::from(err_read)),
        wait: Box::new(wait),
    })
}

/// The task directory `start` names, its names checked (they place the files read,
/// whatever the planner sent).
fn task_dir(start: &ExecStart, state_dir: &Path) -> Result<TaskDir, ExecError> {
    let t = &start.task;
    use hyperplan_shared::names::{NameKind, check_name};
    hyperplan_shared::names::check_job_name(&t.job).map_err(ExecError::JobName)?;
    check_name(NameKind::Task, &t.task).map_err(ExecError::TaskName)?;
    Ok(TaskDir::new(state_dir, &t.job, t.job_id, &t.task))
}

/// The command as the task's spec says to run it, with `start`'s argv.
fn prepare(start: &ExecStart, state_dir: &Path, allow_root: bool) -> Result<Prepared, ExecError> {
    let dir = task_dir(start, state_dir)?;
    let task = format!("{}/{}", start.task.job, start.task.task);
    Ok(crate::shepherd::step::prepare(
        &dir,
        &task,
        &start.argv,
        start.shell,
        &start.user,
        allow_root,
    )?)
}

/// Carries the command's input and output until it ends, or kills it when the planner's
/// side ends first.
async fn relay(process: Process, mut send: quinn::SendStream, mut recv: quinn::RecvStream, mut kept: Option<Kept>) {
    let Process {
        pid,
        stdin,
        stdout,
        stderr,
        wait,
    } = process;
    let (out_tx, mut out_rx) = mpsc::channel::<ExecFrame>(16);
    let readers = [(stdout, true), (stderr, false)].map(|(fd, is_out)| {
        let tx = out_tx.clone();
        tokio::spawn(async move {
            let Some(fd) = fd else { return };
            let Ok(mut pipe) = tokio::net::unix::pipe::Receiver::from_owned_fd(fd) else {
                return;
            };
            let mut buf = vec![0u8; CHUNK];
            while let Ok(n) = pipe.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let data = buf[..n].to_vec();
                let frame = if is_out {
                    ExecFrame::Stdout { node: 0, data }
                } else {
                    ExecFrame::Stderr { node: 0, data }
                };
                if tx.send(frame).await.is_err() {
                    break;
                }
            }
        })
    });
    drop(out_tx);
    let mut waiter = tokio::task::spawn_blocking(wait);
    // The planner's frames, read off the loop (reads are not cancel-safe).
    let (in_tx, mut in_rx) = mpsc::channel::<Option<ExecFrame>>(16);
    tokio::spawn(async move {
        loop {
            match read_frame::<ExecFrame, _>(&mut recv, DEFAULT_MAX_FRAME).await {
                Ok(Some(f)) => {
                    if in_tx.send(Some(f)).await.is_err() {
                        return;
                    }
                }
                _ => {
                    let _ = in_tx.send(None).await;
                    return;
                }
            }
        }
    });
    let mut stdin = stdin.and_then(|fd| tokio::net::unix::pipe::Sender::from_owned_fd(fd).ok());
    let mut outputs_open = true;
    let status = loop {
        tokio::select! {
            frame = in_rx.recv() => match frame {
                Some(Some(ExecFrame::Stdin { data })) => {
                    if let Some(s) = &mut stdin
                        && s.write_all(&data).await.is_err()
                    {
                        stdin = None;
                    }
                }
                Some(Some(ExecFrame::StdinEof)) => stdin = None,
                Some(Some(_)) => {}
                // The asking side is gone: so is the command.
                Some(None) | None => {
                    tracing::info!(pid, "exec: the asking side went away; killing the command");
                    kill_group(pid, &mut waiter).await;
                    return;
                }
            },
            frame = out_rx.recv(), if outputs_open => match frame {
                Some(frame) => {
                    keep(&mut kept, &frame);
                    if write_frame(&mut send, &frame, DEFAULT_MAX_FRAME).await.is_err() {
                        kill_group(pid, &mut waiter).await;
                        return;
                    }
                }
                None => outputs_open = false,
            },
            status = &mut waiter => break status,
        }
    };
    // What the command wrote before it ended, while its pipes drain.
    let drained = async {
        while let Some(frame) = out_rx.recv().await {
            keep(&mut kept, &frame);
            if write_frame(&mut send, &frame, DEFAULT_MAX_FRAME).await.is_err() {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN, drained).await;
    for r in readers {
        r.abort();
    }
    let end = match status {
        Ok(Ok(s)) => {
            use std::os::unix::process::ExitStatusExt;
            ExecFrame::Exit {
                node: 0,
                code: s.code(),
                signal: s.signal(),
            }
        }
        Ok(Err(e)) => ExecFrame::Error {
            node: Some(0),
            message: format!("waiting for the command: {e}"),
        },
        Err(e) => ExecFrame::Error {
            node: Some(0),
            message: format!("waiting for the command: {e}"),
        },
    };
    let _ = write_frame(&mut send, &end, DEFAULT_MAX_FRAME).await;
    let _ = send.finish();
    tracing::info!(pid, ?end, "exec ended");
}

/// Output frames into the kept output.
fn keep(kept: &mut Option<Kept>, frame: &ExecFrame) {
    if let (Some(kept), ExecFrame::Stdout { data, .. } | ExecFrame::Stderr { data, .. }) = (kept, frame) {
        kept.write(data);
    }
}

/// SIGTERM to the command's process group, SIGKILL after [`KILL_GRACE`].
async fn kill_group(pid: u32, waiter: &mut tokio::task::JoinHandle<std::io::Result<std::process::ExitStatus>>) {
    crate::tasks::runner::signal_group(pid, libc::SIGTERM);
    if tokio::time::timeout(KILL_GRACE, &mut *waiter).await.is_err() {
        crate::tasks::runner::signal_group(pid, libc::SIGKILL);
        let _ = waiter.await;
    }
}
