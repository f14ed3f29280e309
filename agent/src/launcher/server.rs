//! `hyperplan-agent launcher`: the daemon. One thread, no runtime: it sleeps in `poll` on
//! its socket and a `signalfd` (SIGCHLD, SIGTERM, SIGINT, SIGHUP blocked), answers each
//! connection at once (a request is one line; a client that does not send it within
//! [`REQUEST_WITHIN`] is dropped), and reaps the shepherds it started when SIGCHLD says
//! one ended. Stopping it stops only it: each shepherd leads its own session and goes on
//! (`KillMode=process` in its unit), as after an agent restart.

#![allow(unsafe_code)]

use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::check::{self, Rules};
use super::fds;
use super::{MAX_MESSAGE, Reply, Request};

/// How long a client may take to send its request or read the answer.
pub const REQUEST_WITHIN: Duration = Duration::from_secs(2);

/// The shepherd's environment: nothing of the launcher's (its unit's `NOTIFY_SOCKET`,
/// `INVOCATION_ID`, …); a task's is its spec's alone.
const SHEPHERD_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How the launcher runs.
#[derive(Clone, Debug)]
pub struct Options {
    pub socket: PathBuf,
    /// The agent's state directory: the only place specs are taken from.
    pub state_dir: PathBuf,
    /// Tasks may run as root (the node's `allowRoot`).
    pub allow_root: bool,
    /// The program started as `PROGRAM shepherd --spec FILE` (this executable).
    pub shepherd: PathBuf,
}

/// Why the launcher cannot run.
#[derive(Debug, thiserror::Error)]
pub enum LauncherError {
    #[error("the socket {path}: {why}")]
    Socket { path: PathBuf, why: String },
    /// The cause is in the message (not a `source`), so a chain printer says it once.
    #[error("the state directory {path}: {why} (set --state-dir, or stateDir in agent.toml, to the agent's)")]
    StateDir { path: PathBuf, why: String },
    #[error("cannot set up signals: {0}")]
    Signals(io::Error),
    #[error("waiting for a request or a signal: {0}")]
    Poll(io::Error),
}

/// Runs the launcher until SIGTERM or SIGINT; the socket is removed on the way out.
pub fn run(opts: &Options) -> Result<(), LauncherError> {
    let state_err = |e: io::Error| LauncherError::StateDir {
        path: opts.state_dir.clone(),
        why: match std::fs::metadata(&opts.state_dir) {
            Ok(m) if !m.is_dir() => "it exists and is not a directory".to_string(),
            _ => e.to_string(),
        },
    };
    crate::tasks::runner::make_state_dir(&opts.state_dir).map_err(state_err)?;
    let state_dir = std::fs::canonicalize(&opts.state_dir).map_err(state_err)?;
    let rules = Rules {
        state_dir,
        allow_root: opts.allow_root,
        owner: crate::shepherd::current_euid(),
    };
    let signals = SignalFd::block().map_err(LauncherError::Signals)?;
    let listener = bind(&opts.socket)?;
    tracing::info!(
        socket = %opts.socket.display(),
        state_dir = %rules.state_dir.display(),
        allow_root = rules.allow_root,
        "launcher ready: tasks' shepherds start from here"
    );
    if let Err(e) = hyperplan_net::notify::notify("READY=1") {
        tracing::warn!("cannot notify systemd: {e}");
    }
    let mut children: Vec<Child> = Vec::new();
    let stopped = loop {
        let (request, signal) = wait(&listener, &signals).map_err(LauncherError::Poll)?;
        let mut stop = None;
        if signal {
            for s in signals.take() {
                match s {
                    libc::SIGTERM | libc::SIGINT => stop = Some(s),
                    libc::SIGHUP => {
                        tracing::info!("SIGHUP: nothing to reload (the launcher reads its options at start)")
                    }
                    _ => {} // SIGCHLD: reaped below
                }
            }
        }
        if request {
            accept_all(&listener, &rules, &opts.shepherd, &mut children);
        }
        children.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
        if let Some(s) = stop {
            break s;
        }
    };
    if let Err(e) = std::fs::remove_file(&opts.socket) {
        tracing::warn!(socket = %opts.socket.display(), "cannot remove the socket: {e}");
    }
    tracing::info!(
        signal = stopped,
        running = children.len(),
        "launcher stopping; the shepherds it started go on in their own sessions"
    );
    Ok(())
}

/// Makes the socket: its directory (0700) when missing, a stale socket of a launcher
/// that died removed, the socket 0600. Another launcher answering there is an error.
fn bind(path: &Path) -> Result<UnixListener, LauncherError> {
    let err = |why: String| LauncherError::Socket {
        path: path.to_path_buf(),
        why,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| err(format!("cannot create its directory: {e}")))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(err("another launcher listens there".into()));
            }
            std::fs::remove_file(path).map_err(|e| err(format!("cannot remove the stale socket: {e}")))?;
        }
        Ok(_) => {
            return Err(err(
                "it exists and is not a socket: remove it or choose another --socket".into(),
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e.to_string())),
    }
    let listener = UnixListener::bind(path).map_err(|e| err(format!("cannot listen: {e}")))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| err(format!("cannot make it root's alone: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| err(format!("cannot make it non-blocking: {e}")))?;
    Ok(listener)
}

/// Answers every connection waiting.
fn accept_all(listener: &UnixListener, rules: &Rules, shepherd: &Path, children: &mut Vec<Child>) {
    loop {
        match listener.accept() {
            Ok((conn, _)) => {
                if let Some(child) = serve(conn, rules, shepherd) {
                    children.push(child);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                // EMFILE and the like: said, and tried again at the next wake-up.
                tracing::warn!("cannot accept a connection: {e}");
                return;
            }
        }
    }
}

/// What a request started.
enum Started {
    /// A shepherd, reaped by the main loop.
    Shepherd(Child),
    /// A step, waited for by a thread of its own, which says its end on the connection.
    Step(Child),
}

/// One connection: the request read and answered; the shepherd started, if any (a
/// step's connection goes to the thread that waits for it).
pub fn serve(conn: UnixStream, rules: &Rules, shepherd: &Path) -> Option<Child> {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(REQUEST_WITHIN));
    let _ = conn.set_write_timeout(Some(REQUEST_WITHIN));
    match handle(&conn, rules, shepherd) {
        Ok(Started::Shepherd(child)) => {
            tracing::info!(shepherd = child.id(), "started a shepherd");
            answer(&conn, &Reply::Started { pid: child.id() });
            Some(child)
        }
        Ok(Started::Step(mut child)) => {
            let pid = child.id();
            tracing::info!(pid, "started a step");
            answer(&conn, &Reply::Started { pid });
            let waiter = std::thread::Builder::new().name("step".into()).spawn(move || {
                use std::os::unix::process::ExitStatusExt;
                match child.wait() {
                    Ok(status) => answer(
                        &conn,
                        &Reply::Exited {
                            status: status.into_raw(),
                        },
                    ),
                    Err(e) => tracing::warn!(pid, "cannot wait for the step: {e}"),
                }
            });
            if let Err(e) = waiter {
                // The agent hears no end and kills the step's group when its caller goes.
                tracing::warn!(pid, "cannot start a thread to wait for the step: {e}");
            }
            None
        }
        Err((reason, errno)) => {
            tracing::warn!("refused a request: {reason}");
            answer(&conn, &Reply::Refused { reason, errno });
            None
        }
    }
}

/// Writes `reply` as a line. A shepherd runs all the same when the agent cannot hear
/// it: the agent finds it by its pid file.
fn answer(conn: &UnixStream, reply: &Reply) {
    let mut line = serde_json::to_vec(reply).unwrap_or_default();
    line.push(b'\n');
    let mut writer = conn;
    if let Err(e) = writer.write_all(&line) {
        tracing::warn!("cannot answer the agent: {e}");
    }
}

/// Checks the peer and the request and starts the shepherd or the step; else why not
/// (and the error number, when starting it failed).
fn handle(conn: &UnixStream, rules: &Rules, shepherd: &Path) -> Result<Started, (String, Option<i32>)> {
    let (uid, pid) = fds::peer(conn).map_err(|e| (format!("cannot tell who is asking: {e}"), None))?;
    if uid != rules.owner {
        return Err((
            format!(
                "only uid {} (the agent) may ask for shepherds; pid {pid} runs as uid {uid}",
                rules.owner
            ),
            None,
        ));
    }
    let (bytes, descriptors) = read_request(conn).map_err(|e| (format!("reading the request: {e}"), None))?;
    let request: Request =
        serde_json::from_slice(&bytes).map_err(|e| (format!("the request is not one: {e}"), None))?;
    let expected = request.descriptors();
    if descriptors.len() != expected {
        let which = match (&request.step, request.pmi) {
            (Some(_), _) => "the step's standard input, output and error",
            (None, true) => "the shepherd's log and the PMI socket",
            (None, false) => "the shepherd's log",
        };
        return Err((
            format!(
                "the request brought {} descriptor(s), expected {expected} ({which})",
                descriptors.len()
            ),
            None,
        ));
    }
    let spec = check::check(rules, &request.spec).map_err(|e| (e.to_string(), None))?;
    if let Some(step) = &request.step {
        let dir = crate::shepherd::TaskDir::new(&spec.state_dir, &spec.job, spec.job_id, &spec.task);
        let task = format!("{}/{}", spec.job, spec.task);
        let prepared =
            crate::shepherd::step::prepare(&dir, &task, &step.argv, step.shell, &step.user, rules.allow_root)
                .map_err(|reason| (reason.to_string(), None))?;
        let [stdin, stdout, stderr]: [OwnedFd; 3] = descriptors
            .try_into()
            .map_err(|_| ("three descriptors expected".to_string(), None))?;
        let child = prepared
            .spawn_with(stdin, stdout, stderr)
            .map_err(|reason| (reason.to_string(), None))?;
        return Ok(Started::Step(child));
    }
    check::pmi_matches(&spec, &request.spec, request.pmi).map_err(|e| (e.to_string(), None))?;
    let mut descriptors = descriptors.into_iter();
    let (Some(log), pmi) = (descriptors.next(), descriptors.next()) else {
        return Err(("no log descriptor".into(), None));
    };
    let pmi = match pmi.map(above_stdio).transpose() {
        Ok(p) => p,
        Err(e) => return Err((format!("cannot keep the PMI socket: {e}"), e.raw_os_error())),
    };
    let mut command = Command::new(shepherd);
    command
        .arg("shepherd")
        .arg("--spec")
        .arg(&request.spec)
        .env_clear()
        .env("PATH", SHEPHERD_PATH)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log));
    if let Some(fd) = &pmi {
        let raw = fd.as_raw_fd();
        command.arg("--pmi-fd").arg(raw.to_string());
        // SAFETY: the closure makes one async-signal-safe fcntl on a descriptor this
        // process holds open (`pmi`) until after the spawn.
        unsafe {
            command.pre_exec(move || fds::keep_on_exec(raw));
        }
    }
    let child = command.spawn().map_err(|e| {
        (
            format!("cannot start the shepherd {}: {e}", shepherd.display()),
            e.raw_os_error(),
        )
    })?;
    drop(pmi); // the shepherd has its own copy
    Ok(Started::Shepherd(child))
}

/// The request line and the descriptors that came with it (at most [`fds::MAX_FDS`]
/// over the whole request, and [`MAX_MESSAGE`] bytes).
fn read_request(conn: &UnixStream) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut bytes = Vec::new();
    let mut all = Vec::new();
    let mut buf = vec![0u8; 4096];
    loop {
        let (n, fds) = fds::recv_with_fds(conn, &mut buf)?;
        all.extend(fds);
        if all.len() > fds::MAX_FDS {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "too many descriptors"));
        }
        bytes.extend_from_slice(&buf[..n]);
        if let Some(end) = bytes.iter().position(|&b| b == b'\n') {
            bytes.truncate(end);
            return Ok((bytes, all));
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the connection ended before a whole line",
            ));
        }
        if bytes.len() > MAX_MESSAGE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("longer than {MAX_MESSAGE} bytes"),
            ));
        }
    }
}

/// `fd` itself, or a copy numbered 3 or above: descriptors 0 to 2 are the shepherd's
/// standard input, output and error (a launcher started with them closed receives low
/// numbers).
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor we then own alone.
    let copy = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if copy < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `copy` is a fresh descriptor owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(copy) })
}

/// Waits for a connection (`.0`) or a signal (`.1`).
fn wait(listener: &UnixListener, signals: &SignalFd) -> io::Result<(bool, bool)> {
    let mut polled = [
        libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: signals.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: `polled` is an array of two valid pollfd, alive for the call.
        let rc = unsafe { libc::poll(polled.as_mut_ptr(), 2, -1) };
        if rc >= 0 {
            return Ok((polled[0].revents != 0, polled[1].revents != 0));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The launcher's signals, blocked and read from a descriptor. A child's mask is
/// cleared again by `Command` before exec.
struct SignalFd {
    fd: OwnedFd,
}

impl SignalFd {
    fn block() -> io::Result<SignalFd> {
        // The shepherd's set: SIGCHLD, SIGTERM, SIGINT and SIGHUP.
        let signals = crate::shepherd::supervise::block_signals()?;
        let set = signals.set();
        // SAFETY: -1 asks for a new descriptor for the valid `set`.
        let fd: RawFd = unsafe { libc::signalfd(-1, set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor owned by nothing else.
        Ok(SignalFd {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// The signals pending now.
    fn take(&self) -> Vec<i32> {
        let mut out = Vec::new();
        loop {
            // SAFETY: an all-zero signalfd_siginfo is valid; read fills it.
            let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
            let size = std::mem::size_of::<libc::signalfd_siginfo>();
            // SAFETY: `info` is a writable buffer of `size` bytes.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    (&mut info as *mut libc::signalfd_siginfo).cast(),
                    size,
                )
            };
            if n != size as isize {
                return out;
            }
            out.push(info.ssi_signo as i32);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_file_where_the_socket_goes_is_refused_and_a_stale_socket_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("run/launcher.sock");
        let listener = bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = std::fs::metadata(path.parent().unwrap()).unwrap().permissions().mode() & 0o777;
        assert_eq!(dir_mode, 0o700);
        // Another launcher there is not replaced.
        let e = bind(&path).unwrap_err().to_string();
        assert!(e.contains("another launcher listens there"), "{e}");
        // The socket of one that died is.
        drop(listener);
        bind(&path).unwrap();
        let file = tmp.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let e = bind(&file).unwrap_err().to_string();
        assert!(e.contains("is not a socket"), "{e}");
    }

    #[test]
    fn requests_without_their_descriptors_or_too_long_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let rules = Rules {
            state_dir: std::fs::canonicalize(tmp.path()).unwrap(),
            allow_root: false,
            owner: crate::shepherd::current_euid(),
        };
        let ask = |bytes: &[u8], fds: &[RawFd]| {
            let (a, b) = UnixStream::pair().unwrap();
            fds::send_with_fds(&a, bytes, fds).unwrap();
            let _ = a.shutdown(std::net::Shutdown::Write);
            assert!(serve(b, &rules, Path::new("/bin/false")).is_none());
            let mut answer = String::new();
            io::Read::read_to_string(&mut &a, &mut answer).unwrap();
            answer
        };
        let no_fd = ask(b"{\"spec\": \"/x/spec.json\"}\n", &[]);
        assert!(no_fd.contains("brought 0 descriptor(s), expected 1"), "{no_fd}");
        let log = tempfile::tempfile().unwrap();
        let not_json = ask(b"start everything\n", &[log.as_raw_fd()]);
        assert!(not_json.contains("the request is not one"), "{not_json}");
        let outside = ask(b"{\"spec\": \"/etc/passwd\"}\n", &[log.as_raw_fd()]);
        assert!(outside.contains("is not STATE/tasks"), "{outside}");
        let unended = ask(b"{\"spec\": ", &[log.as_raw_fd()]);
        assert!(unended.contains("before a whole line"), "{unended}");
        let huge = ask(&vec![b'x'; MAX_MESSAGE + 4096], &[]);
        assert!(huge.contains("longer than"), "{huge}");
    }
}
