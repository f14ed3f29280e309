//! Untrusted hwloc XML is loaded in a child process. libhwloc 2.9 crashes (SIGSEGV) on
//! some slightly malformed exports (an object without `complete_cpuset`), and a crash
//! cannot be caught: it would take the agent daemon (into a systemd restart loop), the
//! probe or `simulate` with it. The child is the same executable run again with
//! [`CHILD_ARG`]; it loads the file and writes the result (the probe is serializable) to
//! its stdout. A crash there becomes an error naming the file.
//!
//! A binary opts in by calling [`serve_or_enable`] first thing in `main`. Where nothing
//! did (tests, other embedders) the XML is loaded in-process, as before.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use hyperplan_shared::topology::NodeTopology;
use serde::{Deserialize, Serialize};

use super::ProbeError;
use super::hwloc::{HwlocSource, probe_hwloc};

/// The first argument that makes a binary the XML loader instead of itself.
pub const CHILD_ARG: &str = "__hyperplan-load-hwloc-xml";

/// How long the loader may take: real exports load in well under a second.
const LOAD_TIMEOUT: Duration = Duration::from_secs(60);

/// The most a loader may write: the probe of a 16,384-PU machine is a few MB.
const MAX_REPLY: u64 = 256 << 20;

/// The executable that serves [`CHILD_ARG`], once a binary said it does.
static LOADER: OnceLock<PathBuf> = OnceLock::new();

/// What the loader writes to its stdout.
#[derive(Serialize, Deserialize)]
enum Reply {
    Topology(Box<NodeTopology>),
    /// hwloc refused the file ([`ProbeError::Xml`]'s message).
    Refused(String),
    /// The machine is too large ([`ProbeError::TooLarge`]'s message).
    TooLarge(String),
}

/// Call first thing in `main`. Run as the loader (`BINARY __hyperplan-load-hwloc-xml
/// FILE`): loads FILE, writes the reply, exits. Otherwise: this executable becomes the
/// loader for the XML this process probes.
pub fn serve_or_enable() {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() == Some(OsStr::new(CHILD_ARG)) {
        let code = match args.next() {
            Some(path) => serve(Path::new(&path)),
            None => 2,
        };
        std::process::exit(code);
    }
    if let Ok(exe) = std::env::current_exe() {
        let _ = LOADER.set(exe);
    }
}

/// The loader: exit 0 with a reply on stdout, nonzero when it cannot write one.
fn serve(path: &Path) -> i32 {
    let reply = match probe_hwloc(HwlocSource::XmlFile(path)) {
        Ok(topology) => Reply::Topology(Box::new(topology)),
        Err(ProbeError::TooLarge { message, .. }) => Reply::TooLarge(message),
        Err(ProbeError::Xml { message, .. }) => Reply::Refused(message),
        Err(other) => Reply::Refused(other.to_string()),
    };
    match serde_json::to_writer(std::io::stdout().lock(), &reply) {
        Ok(()) => 0,
        Err(_) => 3,
    }
}

/// Loads an hwloc XML export, in a child process when this binary serves one.
pub(crate) fn load_xml(path: &Path) -> Result<NodeTopology, ProbeError> {
    match LOADER.get() {
        Some(exe) => load_in_child(exe, path),
        None => probe_hwloc(HwlocSource::XmlFile(path)),
    }
}

fn load_in_child(exe: &Path, path: &Path) -> Result<NodeTopology, ProbeError> {
    let err = |message: String| ProbeError::Xml {
        path: path.to_path_buf(),
        message,
    };
    let mut child = Command::new(exe)
        .arg(CHILD_ARG)
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| err(format!("cannot start the loader {}: {e}", exe.display())))?;
    let stdout = child.stdout.take().map(|s| reader(s, MAX_REPLY));
    let stderr = child.stderr.take().map(|s| reader(s, 64 << 10));
    let status = wait(&mut child, LOAD_TIMEOUT);
    let stdout = stdout.and_then(|h| h.join().ok()).unwrap_or_default();
    let stderr = stderr.and_then(|h| h.join().ok()).unwrap_or_default();
    let status = match status {
        Ok(Some(status)) => status,
        Ok(None) => {
            return Err(err(format!(
                "hwloc did not finish loading it in {} s",
                LOAD_TIMEOUT.as_secs()
            )));
        }
        Err(e) => return Err(err(format!("waiting for the loader: {e}"))),
    };
    if !status.success() {
        return Err(err(failure(status, &stderr)));
    }
    match serde_json::from_slice::<Reply>(&stdout) {
        Ok(Reply::Topology(topology)) => Ok(*topology),
        Ok(Reply::Refused(message)) => Err(err(message)),
        Ok(Reply::TooLarge(message)) => Err(ProbeError::TooLarge {
            origin: path.display().to_string(),
            message,
        }),
        Err(e) => Err(err(format!("the loader's reply does not read: {e}"))),
    }
}

/// Why the loader ended without a reply.
fn failure(status: ExitStatus, stderr: &[u8]) -> String {
    let said = String::from_utf8_lossy(stderr);
    let said = said.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
    let said = if said.is_empty() {
        String::new()
    } else {
        format!(" (it said: {})", said.trim())
    };
    match status.signal() {
        Some(signal) => format!(
            "libhwloc crashed loading it ({}){said}: the file is malformed (expected a complete \
             lstopo export: every object with its cpuset and complete_cpuset)",
            signal_name(signal)
        ),
        None => format!("the loader failed ({status}){said}"),
    }
}

fn signal_name(signal: i32) -> String {
    match signal {
        9 => "SIGKILL, perhaps out of memory".to_owned(),
        n => hyperplan_shared::taskend::signal_name(n),
    }
}

/// Reads a pipe to its end on a thread, keeping at most `limit` bytes.
fn reader(pipe: impl Read + Send + 'static, limit: u64) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut pipe = pipe;
        let _ = pipe.by_ref().take(limit).read_to_end(&mut out);
        // Drain the rest so the child never blocks on a full pipe.
        let _ = std::io::copy(&mut pipe, &mut std::io::sink());
        out
    })
}

/// Waits for the child at most `timeout`; past it, kills it (by its pid, through
/// `Child::kill`) and reaps it. `Ok(None)`: it was killed.
fn wait(child: &mut std::process::Child, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            child.kill()?;
            child.wait()?;
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
