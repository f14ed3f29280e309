//! One command of `hyperplan exec` on this node (see [`super`]).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyperplan_net::frame::{DEFAULT_MAX_FRAME, read_frame, write_frame};
use hyperplan_net::messages::{ExecFrame, ExecStart};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::shepherd::exec::Prepared;
use crate::shepherd::{LaunchSpec, TaskDir, current_euid, user};

/// How long the planner has to send the `ExecStart`.
const START_WITHIN: Duration = Duration::from_secs(10);
/// After the command exits, how long its output pipes may stay open (a daemon it left
/// behind holds them) before its exit is reported without the rest.
const DRAIN: Duration = Duration::from_secs(2);
/// SIGTERM to SIGKILL when the asking side went away.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// Output read at once.
const CHUNK: usize = 32 * 1024;
/// The most of a step's output kept on the node (`hyperplan logs JOB.STEP`); the rest
/// still goes to the caller.
const MAX_KEPT: u64 = 64 << 20;
/// Jobs whose steps' output is kept on the node (the newest).
const KEEP_JOBS: usize = 256;

/// Where step `step` of job `job` (id `job_id`) keeps its output on this node: the
/// agent's own directory, written and read by the agent alone.
pub fn output_path(state_dir: &Path, job: &str, job_id: u64, step: u32) -> PathBuf {
    let dir = match hyperplan_shared::names::check_name(hyperplan_shared::names::NameKind::Job, job) {
        Ok(()) => format!("{job}.{job_id}"),
        Err(_) => "invalid".into(), // never made: nothing to read
    };
    state_dir.join("steps").join(dir).join(format!("{step}.out"))
}

/// The step's output file, made (the directories 0700) and the oldest jobs' pruned;
/// `None` (said in the log) when it cannot be.
fn keep_output(state_dir: &Path, start: &ExecStart) -> Option<std::fs::File> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let step = start.step?;
    let path = output_path(state_dir, &start.task.job, start.task.job_id, step);
    let dir = path.parent()?;
    let made = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir);
    if let Err(e) = made {
        tracing::warn!(dir = %dir.display(), "cannot keep the step's output: {e}");
        return None;
    }
    prune(dir.parent()?, dir);
    match std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
    {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::warn!(path = %path.display(), "cannot keep the step's output: {e}");
            None
        }
    }
}

/// Removes the step directories of all but the newest [`KEEP_JOBS`] jobs (by change
/// time), never `keep`.
fn prune(steps: &Path, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(steps) else { return };
    let mut dirs: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    if dirs.len() <= KEEP_JOBS {
        return;
    }
    dirs.sort();
    let excess = dirs.len() - KEEP_JOBS;
    for (_, dir) in dirs.into_iter().take(excess).filter(|(_, d)| d != keep) {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Appends to the kept output up to [`MAX_KEPT`].
struct Kept {
    file: Option<std::fs::File>,
    written: u64,
}

impl Kept {
    fn write(&mut self, data: &[u8]) {
        use std::io::Write;
        let Some(file) = &mut self.file else { return };
        let room = MAX_KEPT.saturating_sub(self.written);
        let take = data.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if take == 0 || file.write_all(&data[..take]).is_err() {
            self.file = None;
            return;
        }
        self.written += take as u64;
    }
}

/// Serves one stream the planner opened, to its end.
pub async fn serve(mut send: quinn::SendStream, mut recv: quinn::RecvStream, state_dir: PathBuf, allow_root: bool) {
    let start = match tokio::time::timeout(START_WITHIN, read_frame::<ExecStart, _>(&mut recv, DEFAULT_MAX_FRAME)).await
    {
        Ok(Ok(Some(s))) => s,
        _ => {
            tracing::debug!("an exec stream without an ExecStart; dropped");
            return;
        }
    };
    let task = &start.task;
    let child = match prepare(&start, &state_dir, allow_root).and_then(|p| p.spawn_piped()) {
        Ok(c) => c,
        Err(message) => {
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
    tracing::info!(job = %task.job, task = %task.task, step = ?start.step, pid = child.id(), argv = ?start.argv, "exec started");
    let kept = Kept {
        file: keep_output(&state_dir, &start),
        written: 0,
    };
    relay(child, send, recv, kept).await;
}

/// The command as the task's spec says to run it, with `start`'s argv.
fn prepare(start: &ExecStart, state_dir: &Path, allow_root: bool) -> Result<Prepared, String> {
    let t = &start.task;
    // The names place the files read: checked, whatever the planner sent.
    use hyperplan_shared::names::{NameKind, check_name};
    check_name(NameKind::Job, &t.job).map_err(|e| format!("job name: {e}"))?;
    check_name(NameKind::Task, &t.task).map_err(|e| format!("task name: {e}"))?;
    let dir = TaskDir::new(state_dir, &t.job, t.job_id, &t.task);
    if dir.record().exists() {
        return Err(format!("task {}/{} has ended on this node", t.job, t.task));
    }
    let mut spec = LaunchSpec::read(&dir.spec()).map_err(|e| format!("task {}/{}: {e}", t.job, t.task))?;
    if spec.user != start.user {
        return Err(format!(
            "task {}/{} runs as {}, not {}",
            t.job, t.task, spec.user, start.user
        ));
    }
    if start.argv.is_empty() || start.argv[0].is_empty() {
        return Err("no command to run".into());
    }
    spec.argv = if start.shell {
        vec!["/bin/sh".into(), "-c".into(), start.argv.join(" ")]
    } else {
        start.argv.clone()
    };
    // Not the task's PMI socket: that descriptor is the task's alone.
    spec.pmi_fd = None;
    for key in ["PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_SPAWNED"] {
        spec.env.remove(key);
    }
    spec.time_limit_secs = None;
    let checked = spec.check(&dir.spec()).map_err(|e| e.to_string())?;
    let identity = user::lookup(&checked.spec.user).map_err(|e| e.to_string())?;
    if identity.uid == 0 && !allow_root {
        return Err(format!(
            "user {} is root, and this node runs nothing as root (allowRoot)",
            identity.name
        ));
    }
    let euid = current_euid();
    let switch = match euid {
        0 => Some(&identity),
        e if e == identity.uid => None,
        e => {
            return Err(format!(
                "the agent runs as uid {e} and cannot run commands as {}",
                identity.name
            ));
        }
    };
    Ok(Prepared::new(checked, switch))
}

/// Carries the command's input and output until it ends, or kills it when the planner's
/// side ends first.
async fn relay(
    mut child: std::process::Child,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    mut kept: Kept,
) {
    let pid = child.id();
    let stdin = child.stdin.take().map(OwnedFd::from);
    let stdout = child.stdout.take().map(OwnedFd::from);
    let stderr = child.stderr.take().map(OwnedFd::from);
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
    let mut waiter = tokio::task::spawn_blocking(move || child.wait());
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
fn keep(kept: &mut Kept, frame: &ExecFrame) {
    if let ExecFrame::Stdout { data, .. } | ExecFrame::Stderr { data, .. } = frame {
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
