//! The agent's side: ask the launcher to start a task's shepherd, handing it the
//! shepherd's log and the task's PMI socket. The errors are `io::Error`s as a local
//! spawn's are, so the agent treats both alike: a launcher that is not there (being
//! restarted) or slow is `ConnectionRefused` and tried again a while; the launcher's own
//! EAGAIN or ENOMEM come back as those; a refusal is `Other`, with its reason.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use super::{MAX_MESSAGE, Reply, Request, fds};

/// How long the launcher may take to answer (it starts a process and says its pid).
pub const REPLY_WITHIN: Duration = Duration::from_secs(5);

/// Starts the shepherd of `spec` through the launcher at `socket`; its pid.
pub fn start_shepherd(socket: &Path, spec: &Path, log: &std::fs::File, pmi: Option<RawFd>) -> io::Result<u32> {
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
    let request = Request {
        spec: spec.to_path_buf(),
        pmi: pmi.is_some(),
    };
    let mut line = serde_json::to_vec(&request).map_err(io::Error::other)?;
    line.push(b'\n');
    let descriptors: Vec<RawFd> = std::iter::once(log.as_raw_fd()).chain(pmi).collect();
    let sent = fds::send_with_fds(&conn, &line, &descriptors).map_err(unreachable)?;
    (&conn).write_all(&line[sent..]).map_err(unreachable)?;
    let mut answer = Vec::new();
    (&conn)
        .take(MAX_MESSAGE as u64)
        .read_to_end(&mut answer)
        .map_err(unreachable)?;
    let text = answer.split(|&b| b == b'\n').next().unwrap_or_default();
    match serde_json::from_slice::<Reply>(text) {
        Ok(Reply::Started { pid }) if pid > 1 => Ok(pid),
        Ok(Reply::Started { pid }) => Err(io::Error::other(format!("the launcher answered pid {pid}"))),
        Ok(Reply::Refused { errno: Some(errno), .. }) => Err(io::Error::from_raw_os_error(errno)),
        Ok(Reply::Refused { reason, errno: None }) => Err(io::Error::other(format!("the launcher refused: {reason}"))),
        Err(_) if answer.is_empty() => Err(unreachable(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "it closed the connection without an answer",
        ))),
        Err(e) => Err(io::Error::other(format!(
            "the launcher's answer is not one ({e}): {}",
            hyperplan_shared::names::shorten(&String::from_utf8_lossy(text), 200)
        ))),
    }
}
