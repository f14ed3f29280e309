//! The agent's side: ask the launcher to start a task's shepherd (handing it the
//! shepherd's log and the task's PMI socket) or a step of a task (handing it the step's
//! standard input, output and error, and hearing its end). The errors are `io::Error`s
//! as a local spawn's are, so the agent treats both alike: a launcher that is not there
//! (being restarted) or slow is `ConnectionRefused` and tried again a while; the
//! launcher's own EAGAIN or ENOMEM come back as those; a refusal is `Other`, with its
//! reason.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use super::{MAX_MESSAGE, Reply, Request, Step, fds};

/// How long the launcher may take to answer (it starts a process and says its pid).
pub const REPLY_WITHIN: Duration = Duration::from_secs(5);

/// Starts the shepherd of `spec` through the launcher at `socket`; its pid.
pub fn start_shepherd(socket: &Path, spec: &Path, log: &std::fs::File, pmi: Option<RawFd>) -> io::Result<u32> {
    let request = Request {
        spec: spec.to_path_buf(),
        pmi: pmi.is_some(),
        step: None,
    };
    let descriptors: Vec<RawFd> = std::iter::once(log.as_raw_fd()).chain(pmi).collect();
    ask(socket, &request, &descriptors).map(|(pid, _)| pid)
}

/// A step running through the launcher: its pid, and where its end will be said.
#[derive(Debug)]
pub struct RunningStep {
    pub pid: u32,
    answers: BufReader<UnixStream>,
}

impl RunningStep {
    /// Blocks until the step ends; its wait status. An error when the launcher went
    /// away first (the step runs on, unheard).
    pub fn wait(mut self) -> io::Result<ExitStatus> {
        self.answers.get_ref().set_read_timeout(None)?;
        match read_reply(&mut self.answers)? {
            Reply::Exited { status } => Ok(ExitStatus::from_raw(status)),
            other => Err(io::Error::other(format!(
                "the launcher said {other:?}, not the step's end"
            ))),
        }
    }
}

/// Runs `step` as the task of `spec` through the launcher at `socket`, with `stdio` as
/// its standard input, output and error.
pub fn start_step(socket: &Path, spec: &Path, step: Step, stdio: [OwnedFd; 3]) -> io::Result<RunningStep> {
    let request = Request {
        spec: spec.to_path_buf(),
        pmi: false,
        step: Some(step),
    };
    let descriptors: Vec<RawFd> = stdio.iter().map(AsRawFd::as_raw_fd).collect();
    let (pid, answers) = ask(socket, &request, &descriptors)?;
    Ok(RunningStep { pid, answers })
}

/// Sends `request` with `descriptors`; the pid the launcher started, and the connection.
fn ask(socket: &Path, request: &Request, descriptors: &[RawFd]) -> io::Result<(u32, BufReader<UnixStream>)> {
    let unreachable = |e: io::Error| {
        io::Error::new(
            io::ErrorKind::ConnectionRefused,
            format!(
                "no launcher answers on {}: {e} (start hyperplan-launcher.service, or remove `launcher` from agent.toml)",
                socket.display()
            ),
        )
    };
    let conn = UnixStream::connect(socket).map_err(unreachable)?;
    conn.set_read_timeout(Some(REPLY_WITHIN)).map_err(unreachable)?;
    conn.set_write_timeout(Some(REPLY_WITHIN)).map_err(unreachable)?;
    let mut line = serde_json::to_vec(request).map_err(io::Error::other)?;
    line.push(b'\n');
    let sent = fds::send_with_fds(&conn, &line, descriptors).map_err(unreachable)?;
    (&conn).write_all(&line[sent..]).map_err(unreachable)?;
    let mut answers = BufReader::new(conn);
    match read_reply(&mut answers) {
        Ok(Reply::Started { pid }) if pid > 1 => Ok((pid, answers)),
        Ok(Reply::Refused { errno: Some(errno), .. }) => Err(io::Error::from_raw_os_error(errno)),
        Ok(Reply::Refused { reason, errno: None }) => Err(io::Error::other(format!("the launcher refused: {reason}"))),
        Ok(other) => Err(io::Error::other(format!("the launcher answered {other:?}"))),
        Err(e) if e.kind() == io::ErrorKind::InvalidData => Err(e),
        Err(e) => Err(unreachable(e)),
    }
}

/// The next answer line (at most [`MAX_MESSAGE`] bytes).
fn read_reply(answers: &mut BufReader<UnixStream>) -> io::Result<Reply> {
    let mut line = Vec::new();
    answers.by_ref().take(MAX_MESSAGE as u64).read_until(b'\n', &mut line)?;
    if line.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "it closed the connection without an answer",
        ));
    }
    serde_json::from_slice(line.trim_ascii_end()).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the launcher's answer is not one ({e}): {}",
                hyperplan_shared::names::shorten(&String::from_utf8_lossy(&line), 200)
            ),
        )
    })
}
