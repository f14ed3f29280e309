//! A throwaway PostgreSQL (Debian's `postgresql`, the newest of /usr/lib/postgresql/*/bin)
//! for the accounting tests: `initdb` with `--auth=scram-sha-256` and a password file in a
//! temp dir, the server on 127.0.0.1 only, on a free port, with its unix socket in that
//! temp dir and `fsync` on (the tests crash it). [`Postgres::start`] is `None`, with
//! `skipped: <reason>` printed, where it cannot run (no binaries, not root and not able to
//! run as another user). PostgreSQL refuses to run as root: as root, the temp dir belongs
//! to an unprivileged user (`postgres` where it exists, else the tests' user) and the
//! server runs as that user through `setpriv`. The server (the postmaster, in its own
//! process group) is this harness's child: [`Postgres::stop`] asks it for a fast
//! shutdown, [`Postgres::start_again`] starts it on the same data dir and port,
//! [`Postgres::kill9`] kills its whole group, and drop stops it (by pid, then group).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The superuser that `initdb` makes (`-U`).
pub const SUPERUSER: &str = "hyperplan";

/// How long a start or a stop may take before the harness gives up.
const DEADLINE: Duration = Duration::from_secs(60);

pub struct Postgres {
    /// The server binaries' directory (`initdb`, `postgres`, `pg_isready`, maybe `psql`).
    pub bin: PathBuf,
    /// Holds `data/` (the cluster), `pwfile`, `postgres.log` and the unix socket.
    pub dir: tempfile::TempDir,
    /// The port on 127.0.0.1 (kept across [`Postgres::start_again`]).
    pub port: u16,
    /// The password of [`SUPERUSER`].
    pub password: String,
    /// `Some(user)` as root: the unprivileged user that owns `dir` and runs the server.
    run_as: Option<String>,
    /// The postmaster, while it runs.
    child: Option<Child>,
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            // A fast shutdown; the whole group killed where it does not end in time.
            let _ = shutdown(child, "-INT", Duration::from_secs(20));
        }
    }
}

/// The newest /usr/lib/postgresql/<version>/bin that has `postgres` and `initdb`
/// (`$PG_BIN` first, when set).
fn bin_dir() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PG_BIN") {
        let bin = PathBuf::from(p);
        return (bin.join("postgres").is_file() && bin.join("initdb").is_file()).then_some(bin);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let version = e.file_name().to_str()?.split('.').next()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            (bin.join("postgres").is_file() && bin.join("initdb").is_file()).then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// A TCP port nobody listens on now (the kernel's pick, released at once).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A password for the superuser: random enough for a test's own server.
fn new_password() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    h.write_u32(std::process::id());
    format!("pw{:016x}", h.finish())
}

fn command_output(cmd: &mut Command) -> Result<std::process::Output, String> {
    cmd.output().map_err(|e| format!("{:?}: {e}", cmd.get_program()))
}

/// Sends `signal` (`-INT`, `-KILL`, …) to `target` (a pid, or `-pgid` for a group).
fn kill(signal: &str, target: &str) -> bool {
    Command::new("kill")
        .args([signal, "--", target])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Signals the postmaster `child` and waits for it to end (reaped), then kills what is
/// left of its process group (backends of a killed postmaster). `Err` when the
/// postmaster did not end within `within` (it and its group are killed then).
fn shutdown(mut child: Child, signal: &str, within: Duration) -> Result<(), String> {
    let pid = child.id().to_string();
    kill(signal, &pid);
    let start = Instant::now();
    let mut result = Ok(());
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > within {
            result = Err(format!("postgres (pid {pid}) did not stop within {within:?}"));
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The group: the postmaster's pid (it was started as its group's leader). Its
    // backends die with it (a killed postmaster's would hold its shared memory, which
    // keeps the next start from running).
    kill("-KILL", &format!("-{pid}"));
    let start = Instant::now();
    while group_alive(&pid) {
        if start.elapsed() > within {
            return Err(format!(
                "postgres's processes (group {pid}) outlived SIGKILL for {within:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    result
}

/// Whether a process of group `pgid` runs (a zombie does not).
fn group_alive(pgid: &str) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|e| {
        std::fs::read_to_string(e.path().join("stat")).is_ok_and(|s| {
            // After the command's ")": state, ppid, pgrp.
            let mut f = s.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace();
            let (state, _ppid, pgrp) = (f.next(), f.next(), f.next());
            state.is_some_and(|st| st != "Z" && st != "X") && pgrp == Some(pgid)
        })
    })
}

impl Postgres {
    /// Makes a cluster in a temp dir and starts it; `None` (with `skipped: <reason>` on
    /// stderr) where PostgreSQL cannot run here (`make deps` installs `postgresql`).
    pub fn start() -> Option<Postgres> {
        match Self::try_start() {
            Ok(pg) => Some(pg),
            Err(reason) => {
                eprintln!("skipped: {reason}");
                None
            }
        }
    }

    /// `Err(reason)` for what makes this machine unable to run PostgreSQL; panics on a
    /// server that was set up but would not start (a failure, not a skip).
    fn try_start() -> Result<Postgres, String> {
        let bin = bin_dir()
            .ok_or("no PostgreSQL in /usr/lib/postgresql/*/bin (install Debian's postgresql, or set PG_BIN)")?;
        let run_as = if super::euid_is_root() {
            let user = if Command::new("id")
                .arg("postgres")
                .output()
                .is_ok_and(|o| o.status.success())
            {
                "postgres".to_string()
            } else {
                super::ensure_user(super::TEST_USER);
                super::TEST_USER.to_string()
            };
            if !Path::new("/usr/bin/setpriv").is_file() {
                return Err("running as root and no /usr/bin/setpriv to run PostgreSQL as another user".into());
            }
            Some(user)
        } else {
            None
        };
        let dir = tempfile::Builder::new()
            .prefix("pg")
            .tempdir()
            .map_err(|e| format!("temp dir: {e}"))?;
        let password = new_password();
        let pwfile = dir.path().join("pwfile");
        std::fs::write(&pwfile, format!("{password}\n")).unwrap();
        let mut pg = Postgres {
            bin,
            dir,
            port: 0,
            password,
            run_as,
            child: None,
        };
        if let Some(user) = &pg.run_as {
            let out = command_output(
                Command::new("chown")
                    .args(["-R", &format!("{user}:")])
                    .arg(pg.dir.path()),
            )?;
            if !out.status.success() {
                return Err(format!("chown {user}: {}", String::from_utf8_lossy(&out.stderr)));
            }
        }
        let out = command_output(
            pg.command("initdb")
                .arg("-D")
                .arg(pg.data())
                .args([
                    "-U",
                    SUPERUSER,
                    "--auth=scram-sha-256",
                    "--encoding=UTF8",
                    "--no-locale",
                ])
                .arg(format!("--pwfile={}", pwfile.display())),
        )?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            if pg.run_as.is_some() && err.contains("ermission denied") {
                return Err(format!("initdb as {}: {err}", pg.run_as.as_deref().unwrap_or("?")));
            }
            panic!("initdb failed: {err}{}", String::from_utf8_lossy(&out.stdout));
        }
        // A port found free may be taken by another test before this server binds it:
        // then the server exits at start, and another port is tried.
        for attempt in 1..=5 {
            pg.port = free_port();
            pg.write_conf();
            match pg.spawn_and_wait() {
                Ok(()) => return Ok(pg),
                Err(log) => eprintln!("postgres exited at start (attempt {attempt}): {log}"),
            }
        }
        panic!("postgres would not start on a free port 5 times: {}", pg.log());
    }

    /// `program` of the server's bin dir, as the server's user, in the temp dir.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut cmd = match &self.run_as {
            Some(user) => {
                let mut c = Command::new("/usr/bin/setpriv");
                c.args([
                    &format!("--reuid={user}"),
                    &format!("--regid={user}"),
                    "--init-groups",
                    "--",
                ])
                .arg(path);
                c.env("HOME", self.dir.path()).env("USER", user).env("LOGNAME", user);
                c
            }
            None => Command::new(path),
        };
        cmd.current_dir(self.dir.path()).env_remove("PGDATA").env("LC_ALL", "C");
        cmd
    }

    /// The cluster's data directory.
    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A file with the password of [`SUPERUSER`] (one line), readable by the test.
    pub fn password_file(&self) -> PathBuf {
        self.dir.path().join("pwfile")
    }

    /// The server's log (stderr of every start, appended).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("postgres.log")).unwrap_or_default()
    }

    /// `postgres://hyperplan@127.0.0.1:PORT/postgres` (the password is not in it).
    pub fn url(&self) -> String {
        self.url_for("postgres")
    }

    /// `postgres://hyperplan@127.0.0.1:PORT/<db>`.
    pub fn url_for(&self, db: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{db}", self.port)
    }

    /// `postgres://hyperplan:PASSWORD@127.0.0.1:PORT/<db>`.
    pub fn url_with_password(&self, db: &str) -> String {
        format!("postgres://{SUPERUSER}:{}@127.0.0.1:{}/{db}", self.password, self.port)
    }

    /// Whether the server runs (started and not stopped or killed since).
    pub fn running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    /// The postmaster's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The `psql` client: next to the server's binaries, else Debian's /usr/bin/psql.
    pub fn psql_bin(&self) -> PathBuf {
        let own = self.bin.join("psql");
        if own.is_file() {
            own
        } else {
            PathBuf::from("/usr/bin/psql")
        }
    }

    /// Runs `sql` with `psql` on database `db` over TCP with the password (`-tA`: the
    /// bare values). `Err` with psql's stderr when it fails.
    pub fn psql(&self, db: &str, sql: &str) -> Result<String, String> {
        let out = Command::new(self.psql_bin())
            .args(["-X", "-tA", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1"])
            .args(["-p", &self.port.to_string(), "-U", SUPERUSER, "-d", db, "-c", sql])
            .env("PGPASSWORD", &self.password)
            .env("PGCONNECT_TIMEOUT", "10")
            .output()
            .map_err(|e| format!("psql: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Creates database `name` (owned by [`SUPERUSER`]) and returns its URL.
    pub fn create_database(&self, name: &str) -> String {
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "database name {name:?}: letters, digits and _ only"
        );
        self.psql("postgres", &format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        self.url_for(name)
    }

    /// Stops the server with a fast shutdown (what `pg_ctl stop -m fast` does: SIGINT
    /// to the postmaster) and waits until it has ended.
    pub fn stop(&mut self) {
        let child = self.child.take().expect("postgres is not running");
        shutdown(child, "-INT", DEADLINE).unwrap_or_else(|e| panic!("{e}: {}", self.log()));
    }

    /// Kills the postmaster and its backends with SIGKILL (a crash: no shutdown
    /// checkpoint), and reaps it.
    pub fn kill9(&mut self) {
        let child = self.child.take().expect("postgres is not running");
        shutdown(child, "-KILL", DEADLINE).unwrap_or_else(|e| panic!("{e}: {}", self.log()));
    }

    /// Starts the server again on the same data dir and port (after [`Postgres::stop`]
    /// or [`Postgres::kill9`]: crash recovery runs then) and waits until it accepts
    /// connections. Panics where it will not (its port taken meanwhile, say).
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "postgres is still running");
        self.spawn_and_wait()
            .unwrap_or_else(|log| panic!("postgres did not start again on port {}: {log}", self.port));
    }

    /// Appends the harness's settings to postgresql.conf (the last one of a name wins).
    fn write_conf(&self) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.data().join("postgresql.conf"))
            .unwrap();
        writeln!(
            f,
            "\n# hyperplan tests\nlisten_addresses = '127.0.0.1'\nport = {}\n\
             unix_socket_directories = '{}'\nfsync = on\nsynchronous_commit = on\n\
             full_page_writes = on\nlogging_collector = off\nmax_connections = 50\n",
            self.port,
            self.dir.path().display()
        )
        .unwrap();
    }

    /// Starts the postmaster (its own process group) and waits until `pg_isready` says
    /// it accepts connections; `Err(log)` when it exits first (its port was taken).
    fn spawn_and_wait(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("postgres.log"))
            .unwrap();
        let mut child = self
            .command("postgres")
            .arg("-D")
            .arg(self.data())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap();
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                kill("-KILL", &format!("-{}", child.id()));
                return Err(format!("exited with {status}: {}", self.log()));
            }
            if self.pid_file_ready(child.id()) && self.ready() {
                self.child = Some(child);
                return Ok(());
            }
            if start.elapsed() > DEADLINE {
                let _ = shutdown(child, "-KILL", Duration::from_secs(5));
                panic!(
                    "postgres did not accept connections within {DEADLINE:?}: {}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The data dir's postmaster.pid names `pid` and says `ready` (its 8th line): the
    /// server that answers on the port is this one, not another test's.
    fn pid_file_ready(&self, pid: u32) -> bool {
        std::fs::read_to_string(self.data().join("postmaster.pid")).is_ok_and(|s| {
            let lines: Vec<&str> = s.lines().collect();
            lines.first().is_some_and(|l| l.trim() == pid.to_string())
                && lines.get(7).is_some_and(|l| l.trim() == "ready")
        })
    }

    /// `pg_isready` on the TCP port: the server accepts connections (not starting up,
    /// not in recovery).
    fn ready(&self) -> bool {
        let isready = self.bin.join("pg_isready");
        let isready = if isready.is_file() {
            isready
        } else {
            PathBuf::from("pg_isready")
        };
        Command::new(isready)
            .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string(), "-t", "2"])
            .args(["-U", SUPERUSER, "-d", "postgres"])
            .status()
            .is_ok_and(|s| s.success())
    }
}
