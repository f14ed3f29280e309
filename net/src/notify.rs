//! systemd service notification (`sd_notify`) without libsystemd and without unsafe:
//! one datagram per state change to the socket in `$NOTIFY_SOCKET`, and the watchdog
//! period from `$WATCHDOG_USEC`.
//!
//! Both daemons call [`notify`] with `READY=1` (listening / registered), `STATUS=...`,
//! `WATCHDOG=1` (from their main loop, at [`watchdog_interval`]) and `STOPPING=1`.
//! Outside systemd (no `$NOTIFY_SOCKET`) every call is a no-op.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// Environment variable naming the service manager's notification socket.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";
/// Environment variable holding the watchdog timeout in microseconds.
pub const WATCHDOG_USEC: &str = "WATCHDOG_USEC";
/// Environment variable naming the process the watchdog applies to.
pub const WATCHDOG_PID: &str = "WATCHDOG_PID";

/// Sends `state` (e.g. `READY=1`, `STATUS=registered with p:7443`, newline-separated
/// assignments allowed) to `$NOTIFY_SOCKET`. `Ok(false)` when the variable is unset
/// (not started by systemd, or `Type=` is not `notify`): nothing to tell.
pub fn notify(state: &str) -> io::Result<bool> {
    match std::env::var_os(NOTIFY_SOCKET) {
        Some(socket) if !socket.is_empty() => notify_to(&socket, state).map(|()| true),
        _ => Ok(false),
    }
}

/// Sends `state` to the socket named `socket` in `$NOTIFY_SOCKET` syntax: a path, or
/// `@name` for a Linux abstract socket. Separate from [`notify`] so tests can aim it at
/// their own socket without touching the process environment.
///
/// Never blocks: the daemons call it from their async loops, and a manager whose queue
/// is full (it is not reading) gets a `WouldBlock` error rather than a stalled daemon.
pub fn notify_to(socket: &OsStr, state: &str) -> io::Result<()> {
    let sock = UnixDatagram::unbound()?;
    sock.set_nonblocking(true)?;
    let bytes = socket.as_bytes();
    let sent = if let Some(name) = bytes.strip_prefix(b"@") {
        send_abstract(&sock, name, state.as_bytes())?
    } else if bytes.starts_with(b"/") {
        sock.send_to(state.as_bytes(), socket)?
    } else {
        // systemd ≥ 256 can also hand out `vsock:` addresses, for VMs; not us.
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("unsupported {NOTIFY_SOCKET} address {:?}", socket.to_string_lossy()),
        ));
    };
    if sent != state.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("notification truncated: {sent} of {} bytes sent", state.len()),
        ));
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn send_abstract(sock: &UnixDatagram, name: &[u8], bytes: &[u8]) -> io::Result<usize> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
    sock.send_to_addr(bytes, &addr)
}

#[cfg(not(target_os = "linux"))]
fn send_abstract(_sock: &UnixDatagram, _name: &[u8], _bytes: &[u8]) -> io::Result<usize> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "abstract unix sockets exist on Linux only",
    ))
}

/// How often to send `WATCHDOG=1`: half of `$WATCHDOG_USEC` (as `sd_watchdog_enabled`
/// recommends, so one late ping is not fatal), or `None` when systemd set no watchdog
/// for this process (`$WATCHDOG_PID` names another one).
pub fn watchdog_interval() -> Option<Duration> {
    let usec = std::env::var(WATCHDOG_USEC).ok();
    let pid = std::env::var(WATCHDOG_PID).ok();
    watchdog_interval_from(usec.as_deref(), pid.as_deref(), std::process::id())
}

/// [`watchdog_interval`] from explicit variable values, for tests. A value that does
/// not parse (or a zero timeout) means no watchdog, as in libsystemd.
pub fn watchdog_interval_from(usec: Option<&str>, pid: Option<&str>, our_pid: u32) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|&u| u > 0)?;
    if let Some(pid) = pid {
        let pid: u32 = pid.trim().parse().ok()?;
        if pid != our_pid {
            return None;
        }
    }
    Some(Duration::from_micros(usec / 2))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn receive(sock: &UnixDatagram) -> String {
        sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 512];
        let n = sock.recv(&mut buf).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn sends_to_a_path_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let server = UnixDatagram::bind(&path).unwrap();
        notify_to(path.as_os_str(), "READY=1").unwrap();
        notify_to(path.as_os_str(), "STATUS=registered with p:7443\nWATCHDOG=1").unwrap();
        assert_eq!(receive(&server), "READY=1");
        assert_eq!(receive(&server), "STATUS=registered with p:7443\nWATCHDOG=1");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn sends_to_an_abstract_socket() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("hyperplan-notify-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let server = UnixDatagram::bind_addr(&addr).unwrap();
        notify_to(OsStr::new(&format!("@{name}")), "STOPPING=1").unwrap();
        assert_eq!(receive(&server), "STOPPING=1");
    }

    #[test]
    fn a_full_queue_is_an_error_not_a_stall() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let _server = UnixDatagram::bind(&path).unwrap();
        // Nobody reads: the queue fills (a few datagrams on Linux) and then sends fail.
        let failed = (0..10_000).find_map(|_| notify_to(path.as_os_str(), "WATCHDOG=1").err());
        assert_eq!(failed.map(|e| e.kind()), Some(io::ErrorKind::WouldBlock));
    }

    #[test]
    fn a_missing_socket_or_odd_address_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(notify_to(dir.path().join("absent.sock").as_os_str(), "READY=1").is_err());
        let err = notify_to(OsStr::new("vsock:2:1234"), "READY=1").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::Unsupported);
    }

    #[test]
    fn watchdog_is_half_the_timeout_for_our_pid_only() {
        let half = Some(Duration::from_secs(15));
        assert_eq!(watchdog_interval_from(Some("30000000"), None, 42), half);
        assert_eq!(watchdog_interval_from(Some("30000000"), Some("42"), 42), half);
        assert_eq!(watchdog_interval_from(Some("30000000"), Some("43"), 42), None);
        assert_eq!(watchdog_interval_from(Some("30000000"), Some("x"), 42), None);
        assert_eq!(watchdog_interval_from(None, Some("42"), 42), None);
        assert_eq!(watchdog_interval_from(Some("0"), None, 42), None);
        assert_eq!(watchdog_interval_from(Some("soon"), None, 42), None);
    }
}
