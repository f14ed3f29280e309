//! `hyperplan-agent run` against a minimal planner served by this test (hyperplan-net,
//! certificates in a temp dir, 127.0.0.1 port 0): hellos and Register with the node's
//! name and topology, heartbeats at the interval the planner named, reconnection after
//! the planner drops the connection, SIGHUP without and with a machine change, systemd
//! notifications, and a clean SIGTERM exit. (Tasks: `run_tasks.rs`.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyperplan_net::certs::{self, CertPaths};
use hyperplan_net::frame::{DEFAULT_MAX_FRAME, read_frame, write_frame};
use hyperplan_net::messages::{
    AgentMessage, Confinement, Hello, PROTOCOL_VERSION, PlannerToAgent, Role, topology_hash,
};
use hyperplan_net::tls::{self, TlsMaterial};
use tokio::sync::mpsc;

/// Generous: the machine running the tests is slow and busy.
const WAIT: Duration = Duration::from_secs(90);
const SYNTHETIC: &str = "pack:2 numa:2 core:4 pu:2";
const HEARTBEAT_MS: u64 = 200;
const XML_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/hwloc-xml");

#[derive(Debug)]
enum Event {
    Hello {
        conn: usize,
        hello: Hello,
    },
    Message {
        conn: usize,
        message: Box<AgentMessage>,
        at: Instant,
    },
    Closed {
        conn: usize,
        reason: String,
    },
}

/// A planner that speaks just enough: hellos, Registered with [`HEARTBEAT_MS`], and
/// every agent message reported as an [`Event`].
struct Planner {
    addr: SocketAddr,
    events: mpsc::UnboundedReceiver<Event>,
    connections: Arc<Mutex<Vec<quinn::Connection>>>,
}

impl Planner {
    fn start(dir: &Path, addr: SocketAddr) -> Self {
        let material = TlsMaterial::load(&CertPaths::planner(dir)).unwrap();
        let endpoint = tls::server_endpoint(addr, &material).unwrap();
        let addr = endpoint.local_addr().unwrap();
        let (tx, events) = mpsc::unbounded_channel();
        let connections = Arc::new(Mutex::new(Vec::new()));
        let conns = connections.clone();
        tokio::spawn(async move {
            while let Some(incoming) = endpoint.accept().await {
                let Ok(connection) = incoming.await else { continue };
                let conn = {
                    let mut all = conns.lock().unwrap();
                    all.push(connection.clone());
                    all.len() - 1
                };
                tokio::spawn(serve(conn, connection, tx.clone()));
            }
        });
        Self {
            addr,
            events,
            connections,
        }
    }

    async fn next(&mut self) -> Event {
        tokio::time::timeout(WAIT, self.events.recv())
            .await
            .expect("no event from the agent in time")
            .expect("planner stopped")
    }

    /// The next agent message, skipping nothing: the caller sees every one.
    async fn message(&mut self) -> (usize, AgentMessage, Instant) {
        loop {
            match self.next().await {
                Event::Message { conn, message, at } => return (conn, *message, at),
                Event::Closed { .. } => {}
                other => panic!("expected a message, got {other:?}"),
            }
        }
    }

    /// Waits for a new connection's hello and Register; returns them.
    async fn registration(&mut self) -> (usize, Hello, AgentMessage) {
        let (conn, hello) = loop {
            match self.next().await {
                Event::Hello { conn, hello } => break (conn, hello),
                Event::Closed { .. } | Event::Message { .. } => {}
            }
        };
        let (c, register, _) = self.message().await;
        assert_eq!(c, conn);
        assert!(matches!(register, AgentMessage::Register { .. }), "{register:?}");
        (conn, hello, register)
    }

    /// The next `n` heartbeats on `conn` (seq, arrival); any other message fails.
    async fn heartbeats(&mut self, conn: usize, n: usize) -> Vec<(u64, Instant, AgentMessage)> {
        let mut beats = Vec::new();
        while beats.len() < n {
            let (c, message, at) = self.message().await;
            assert_eq!(c, conn, "message on another connection: {message:?}");
            let AgentMessage::Heartbeat { seq, .. } = &message else {
                panic!("expected a heartbeat, got {message:?}")
            };
            beats.push((*seq, at, message.clone()));
        }
        beats
    }

    async fn closed(&mut self, conn: usize) -> String {
        loop {
            if let Event::Closed { conn: c, reason } = self.next().await
                && c == conn
            {
                return reason;
            }
        }
    }

    fn connection(&self, conn: usize) -> quinn::Connection {
        self.connections.lock().unwrap()[conn].clone()
    }
}

async fn serve(conn: usize, connection: quinn::Connection, tx: mpsc::UnboundedSender<Event>) {
    let closed = |connection: &quinn::Connection, what: String| Event::Closed {
        conn,
        reason: connection.close_reason().map_or(what, |r| r.to_string()),
    };
    let Ok((mut send, mut recv)) = connection.accept_bi().await else {
        let _ = tx.send(closed(&connection, "no stream".into()));
        return;
    };
    let hello: Hello = match read_frame(&mut recv, DEFAULT_MAX_FRAME).await {
        Ok(Some(hello)) => hello,
        other => {
            let _ = tx.send(closed(&connection, format!("{other:?}")));
            return;
        }
    };
    let name = hello.name.clone();
    let _ = tx.send(Event::Hello { conn, hello });
    let ours = Hello::new(Role::Planner, "hyperplan-planner");
    write_frame(&mut send, &ours, DEFAULT_MAX_FRAME).await.unwrap();
    loop {
        match read_frame::<AgentMessage, _>(&mut recv, DEFAULT_MAX_FRAME).await {
            Ok(Some(message)) => {
                let register = matches!(message, AgentMessage::Register { .. });
                let _ = tx.send(Event::Message {
                    conn,
                    message: Box::new(message),
                    at: Instant::now(),
                });
                if register {
                    let reply = PlannerToAgent::Registered {
                        node: name.clone(),
                        heartbeat_interval_ms: HEARTBEAT_MS,
                        epoch: 1,
                        fence_after_ms: None,
                    };
                    if write_frame(&mut send, &reply, DEFAULT_MAX_FRAME).await.is_err() {
                        return;
                    }
                }
            }
            Ok(None) => {
                let _ = tx.send(closed(&connection, "stream ended".into()));
                break;
            }
            Err(e) => {
                let _ = tx.send(closed(&connection, e.to_string()));
                break;
            }
        }
    }
}

fn cluster(dir: &Path, nodes: &[&str]) {
    certs::init_ca(dir, false).unwrap();
    certs::issue_planner(dir, &[]).unwrap();
    for node in nodes {
        certs::issue_node(dir, node).unwrap();
    }
}

/// The agent process; its stderr lines arrive on `lines`. Killed when dropped.
struct Agent {
    child: Option<Child>,
    /// Its state directory (no task runs in these tests).
    _state: tempfile::TempDir,
    lines: mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
}

impl Agent {
    fn spawn(cert_dir: &Path, planner: SocketAddr, node: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        let state = tempfile::tempdir().unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_hyperplan-agent"));
        command
            .arg("run")
            .arg("--state-dir")
            .arg(state.path())
            .arg("--planner")
            .arg(planner.to_string())
            .arg("--cert-dir")
            .arg(cert_dir)
            .arg("--node")
            .arg(node)
            .args(args)
            .env("RUST_LOG", "hyperplan_agent=info")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let lines = common::lines(stderr);
        Self {
            child: Some(child),
            _state: state,
            lines,
            seen: Vec::new(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for a log line containing `needle` (lines before it are kept in `seen`).
    async fn log(&mut self, needle: &str) -> String {
        let found = tokio::time::timeout(WAIT, async {
            while let Some(line) = self.lines.recv().await {
                self.seen.push(line.clone());
                if line.contains(needle) {
                    return Some(line);
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(line)) => line,
            _ => panic!("no log line with {needle:?}; saw:\n{}", self.seen.join("\n")),
        }
    }

    async fn exit(&mut self) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        let waited = tokio::time::timeout(WAIT, tokio::task::spawn_blocking(move || child.wait()))
            .await
            .expect("the agent did not exit in time");
        waited.unwrap().unwrap()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Receives systemd notifications the agent sends to `$NOTIFY_SOCKET`, draining the
/// socket all along as systemd does.
struct Notifications {
    path: PathBuf,
    received: mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
}

impl Notifications {
    fn bind(dir: &Path) -> Self {
        let path = dir.join("notify.sock");
        let socket = tokio::net::UnixDatagram::bind(&path).unwrap();
        let (tx, received) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while let Ok(n) = socket.recv(&mut buf).await {
                if tx.send(String::from_utf8_lossy(&buf[..n]).to_string()).is_err() {
                    break;
                }
            }
        });
        Self {
            path,
            received,
            seen: Vec::new(),
        }
    }

    async fn wait_for(&mut self, wanted: &str) {
        if self.seen.iter().any(|s| s == wanted) {
            return;
        }
        let found = tokio::time::timeout(WAIT, async {
            while let Some(text) = self.received.recv().await {
                self.seen.push(text.clone());
                if text == wanted {
                    return;
                }
            }
        })
        .await;
        assert!(found.is_ok(), "no {wanted:?} notification; saw {:?}", self.seen);
    }
}

fn loopback() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
}

fn register_fields(register: &AgentMessage) -> (&str, &std::collections::BTreeMap<String, String>, u64) {
    let AgentMessage::Register {
        version,
        node,
        labels,
        topology,
        topology_hash: hash,
        confinement,
        advertise_address,
        epoch,
    } = register
    else {
        panic!("not a Register: {register:?}")
    };
    assert_eq!(*version, PROTOCOL_VERSION);
    // Every agent here describes its machine (--synthetic, --hwloc-xml): not pinned.
    assert_eq!(*confinement, Some(Confinement::None));
    // No advertiseAddress: the planner uses the address the connection comes from.
    assert_eq!(*advertise_address, None);
    // A fresh state directory: no planner obeyed yet; after a reconnect, this stub's 1.
    assert!(*epoch <= 1, "epoch {epoch}");
    assert_eq!(*hash, topology_hash(topology), "Register's hash is its topology's");
    (node, labels, *hash)
}

#[tokio::test]
async fn registers_heartbeats_reconnects_and_stops() {
    let dir = tempfile::tempdir().unwrap();
    cluster(dir.path(), &["n001"]);
    let mut planner = Planner::start(dir.path(), loopback());
    let mut notifications = Notifications::bind(dir.path());
    let notify_path = notifications.path.to_string_lossy().to_string();
    let mut agent = Agent::spawn(
        dir.path(),
        planner.addr,
        "n001",
        &[
            "--synthetic",
            SYNTHETIC,
            "--label",
            "rack=r1",
            "--reprobe-interval",
            "0",
        ],
        &[("NOTIFY_SOCKET", &notify_path), ("WATCHDOG_USEC", "400000")],
    );

    // Hello, then Register with the node's name, labels and the synthetic machine.
    let (conn, hello, register) = planner.registration().await;
    assert_eq!(hello, Hello::new(Role::Agent, "n001"));
    let (node, labels, hash) = register_fields(&register);
    assert!(
        matches!(register, AgentMessage::Register { epoch: 0, .. }),
        "none obeyed yet"
    );
    assert_eq!(node, "n001");
    assert_eq!(labels.get("rack").map(String::as_str), Some("r1"));
    let AgentMessage::Register { topology, .. } = &register else {
        unreachable!()
    };
    assert_eq!(topology.numa_nodes.len(), 4, "pack:2 numa:2");
    assert_eq!(topology.numa_nodes.iter().map(|n| n.cpus.len()).sum::<usize>(), 32);
    assert_eq!(topology.hostname, "n001", "a described machine takes the node's name");

    // Heartbeats 1, 2, … at the planner's 200 ms, with free memory per NUMA node.
    let beats = planner.heartbeats(conn, 6).await;
    assert_eq!(beats.iter().map(|b| b.0).collect::<Vec<_>>(), [1, 2, 3, 4, 5, 6]);
    let span = beats[5].1 - beats[0].1;
    // Five periods of 200 ms; the bounds leave room for a loaded machine's scheduling.
    assert!(span >= Duration::from_millis(5 * HEARTBEAT_MS * 7 / 10), "{span:?}");
    assert!(span < Duration::from_secs(30), "{span:?}");
    let AgentMessage::Heartbeat {
        free_memory,
        running_tasks,
        ..
    } = &beats[0].2
    else {
        unreachable!()
    };
    assert_eq!(free_memory.len(), 4);
    assert!(running_tasks.is_empty());

    // A described machine: tasks would run unpinned, and the agent says so.
    agent.log("tasks are not pinned").await;

    // systemd: ready once registered, status, watchdog pings.
    notifications.wait_for("READY=1").await;
    notifications
        .wait_for(&format!("STATUS=registered with {}", planner.addr))
        .await;
    notifications.wait_for("WATCHDOG=1").await;

    // SIGHUP on an unchanged machine: a re-probe, and no TopologyChanged after it.
    agent.signal("HUP");
    agent.log("re-probed: topology unchanged").await;
    planner.heartbeats(conn, 3).await;

    // The planner drops the connection: the agent says why and registers again.
    planner
        .connection(conn)
        .close(quinn::VarInt::from_u32(7), b"planner restarting");
    let line = agent.log("planner link down").await;
    assert!(line.contains("planner restarting"), "{line}");
    let (conn2, hello2, register2) = planner.registration().await;
    assert_ne!(conn2, conn);
    assert_eq!(hello2.name, "n001");
    assert_eq!(register_fields(&register2).2, hash, "same machine, same hash");
    // It says the epoch it has obeyed since: the stub planner's.
    assert!(
        matches!(register2, AgentMessage::Register { epoch: 1, .. }),
        "{register2:?}"
    );
    let again = planner.heartbeats(conn2, 2).await;
    assert_eq!(again[0].0, 1, "sequence starts over on a new connection");

    // SIGTERM: exit 0, the connection closed with code 0 "agent stopping", STOPPING=1.
    agent.signal("TERM");
    let status = agent.exit().await;
    assert!(status.success(), "{status:?}");
    let reason = planner.closed(conn2).await;
    assert!(reason.contains("agent stopping (code 0)"), "{reason}");
    notifications.wait_for("STOPPING=1").await;
}

#[tokio::test]
async fn sighup_sends_topology_changed_only_when_the_machine_changed() {
    let dir = tempfile::tempdir().unwrap();
    cluster(dir.path(), &["n002"]);
    let xml = dir.path().join("machine.xml");
    std::fs::copy(Path::new(XML_DIR).join("xml__16em64t-4s2c2t.xml"), &xml).unwrap();
    let mut planner = Planner::start(dir.path(), loopback());
    let xml_arg = xml.to_string_lossy().to_string();
    let mut agent = Agent::spawn(
        dir.path(),
        planner.addr,
        "n002",
        &["--hwloc-xml", &xml_arg, "--reprobe-interval", "0"],
        &[],
    );
    let (conn, _, register) = planner.registration().await;
    let (_, _, hash) = register_fields(&register);
    planner.heartbeats(conn, 1).await;

    agent.signal("HUP");
    agent.log("re-probed: topology unchanged").await;
    planner.heartbeats(conn, 2).await;

    // Another machine in the same file: the next SIGHUP sends it.
    let other = dir.path().join("other.xml");
    std::fs::copy(Path::new(XML_DIR).join("linux__40intel64-2g2n4c+pci.xml"), &other).unwrap();
    std::fs::rename(&other, &xml).unwrap();
    agent.signal("HUP");
    agent.log("re-probed: topology changed").await;
    let changed = loop {
        let (c, message, _) = planner.message().await;
        assert_eq!(c, conn);
        match message {
            AgentMessage::Heartbeat { .. } => {}
            AgentMessage::TopologyChanged {
                topology,
                topology_hash: new_hash,
            } => break (topology, new_hash),
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_ne!(changed.1, hash);
    assert_eq!(changed.1, topology_hash(&changed.0));
    agent.signal("TERM");
    assert!(agent.exit().await.success());
}

#[tokio::test]
async fn keeps_trying_until_the_planner_appears() {
    let dir = tempfile::tempdir().unwrap();
    cluster(dir.path(), &["n003"]);
    // A port nobody listens on yet.
    let addr = std::net::UdpSocket::bind(loopback()).unwrap().local_addr().unwrap();
    let mut agent = Agent::spawn(
        dir.path(),
        addr,
        "n003",
        &["--synthetic", "pack:1 numa:1 core:2 pu:1"],
        &[],
    );
    agent.log("planner link down").await;
    let mut planner = Planner::start(dir.path(), addr);
    let (_, hello, _) = planner.registration().await;
    assert_eq!(hello.name, "n003");
    agent.signal("INT");
    assert!(agent.exit().await.success());
}

#[tokio::test]
async fn a_missing_certificate_is_a_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    cluster(dir.path(), &[]);
    let output = Command::new(env!("CARGO_BIN_EXE_hyperplan-agent"))
        .args([
            "run",
            "--planner",
            "127.0.0.1:9",
            "--node",
            "ghost",
            "--synthetic",
            SYNTHETIC,
        ])
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--cert-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("certificates for node ghost"), "{stderr}");
    assert!(stderr.contains("ghost.pem"), "{stderr}");
}

#[tokio::test]
async fn a_malformed_xml_is_an_error_at_start_and_a_warning_on_reprobe() {
    let dir = tempfile::tempdir().unwrap();
    cluster(dir.path(), &["n004"]);
    // An object without complete_cpuset: libhwloc 2.9 crashes on it (SIGSEGV).
    let good = std::fs::read_to_string(Path::new(XML_DIR).join("xml__16em64t-4s2c2t.xml")).unwrap();
    let pu = good.find("<object type=\"PU\"").unwrap();
    let start = pu + good[pu..].find(" complete_cpuset=\"").unwrap();
    let end = start + 1 + good[start + 1..].find("\" ").unwrap() + 1;
    let mut bad = good.clone();
    bad.replace_range(start..end, "");
    let xml = dir.path().join("machine.xml");
    let xml_arg = xml.to_string_lossy().to_string();

    // At start: a startup error naming the file, not a crash (no systemd restart loop).
    std::fs::write(&xml, &bad).unwrap();
    let mut agent = Agent::spawn(dir.path(), loopback(), "n004", &["--hwloc-xml", &xml_arg], &[]);
    agent.log(&xml_arg).await;
    let status = agent.exit().await;
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), None, "crashed");
    assert_eq!(status.code(), Some(1));

    // On a re-probe: a warning, and the agent goes on with the last good topology.
    std::fs::write(&xml, &good).unwrap();
    let mut planner = Planner::start(dir.path(), loopback());
    let mut agent = Agent::spawn(
        dir.path(),
        planner.addr,
        "n004",
        &["--hwloc-xml", &xml_arg, "--reprobe-interval", "0"],
        &[],
    );
    let (conn, _, _) = planner.registration().await;
    std::fs::write(&xml, &bad).unwrap();
    agent.signal("HUP");
    let line = agent.log("re-probe failed").await;
    assert!(line.contains(&xml_arg) && line.contains("crashed"), "{line}");
    planner.heartbeats(conn, 2).await;
    agent.signal("TERM");
    assert!(agent.exit().await.success());
}

/// The health checks' results in heartbeats: none until every check ran once, then all
/// of them once, then only when a check's state or code changes, and all again on a new
/// connection.
#[tokio::test]
async fn heartbeats_carry_health_results_first_then_changes() {
    use hyperplan_shared::health::{CheckResult, CheckState};

    let dir = tempfile::tempdir().unwrap();
    cluster(dir.path(), &["n005"]);
    let healthy = dir.path().join("healthy");
    // An empty sysfs: no InfiniBand port of the machine running the test moves a result.
    let sys = dir.path().join("sys-empty");
    std::fs::create_dir(&sys).unwrap();
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "sysfsRoot = \"{}\"\n[health]\ninterval = 1\ngpu = false\nmounts = [\"/nonexistent/hyperplan-mount\"]\n\
             script = [\"/bin/sh\", \"-c\", \"test -e {} || {{ echo 'ERROR: nhc: broken'; exit 1; }}\"]\n",
            sys.display(),
            healthy.display()
        ),
    )
    .unwrap();
    let mut planner = Planner::start(dir.path(), loopback());
    let config_arg = config.to_string_lossy().to_string();
    let mut agent = Agent::spawn(
        dir.path(),
        planner.addr,
        "n005",
        &[
            "--synthetic",
            SYNTHETIC,
            "--reprobe-interval",
            "0",
            "--config",
            &config_arg,
        ],
        &[],
    );
    let health_of = |message: &AgentMessage| match message {
        AgentMessage::Heartbeat { health, .. } => health.clone(),
        other => panic!("expected a heartbeat, got {other:?}"),
    };
    let find = |checks: &[CheckResult], name: &str| checks.iter().find(|c| c.check == name).cloned();
    let (conn, _, _) = planner.registration().await;
    agent.log("health checks start").await;
    // The first heartbeat with results has them all.
    let first = loop {
        let beat = planner.heartbeats(conn, 1).await.remove(0);
        if let Some(h) = health_of(&beat.2) {
            break h;
        }
    };
    let mount = find(&first, "mount:/nonexistent/hyperplan-mount").unwrap();
    assert_eq!(
        (mount.state, mount.code.as_str()),
        (CheckState::Failed, "mount-missing")
    );
    let script = find(&first, "script").unwrap();
    assert_eq!(
        (script.state, script.text.as_str()),
        (CheckState::Failed, "ERROR: nhc: broken")
    );
    assert!(first.iter().any(|c| c.check.starts_with("disk:")), "{first:?}");
    assert!(find(&first, "memory").is_some(), "{first:?}");
    // Nothing changed: the next heartbeats carry none (checks run every second meanwhile).
    for beat in planner.heartbeats(conn, 8).await {
        assert_eq!(health_of(&beat.2), None, "seq {}", beat.0);
    }
    // The script passes now: the next results say so, with everything else again.
    std::fs::write(&healthy, b"").unwrap();
    let changed = loop {
        let beat = planner.heartbeats(conn, 1).await.remove(0);
        if let Some(h) = health_of(&beat.2) {
            break h;
        }
    };
    assert_eq!(find(&changed, "script"), Some(CheckResult::ok("script")));
    assert_eq!(changed.len(), first.len());
    // A new connection: everything on its first heartbeat.
    planner
        .connection(conn)
        .close(quinn::VarInt::from_u32(7), b"planner restarting");
    let (conn2, _, _) = planner.registration().await;
    let beat = planner.heartbeats(conn2, 1).await.remove(0);
    let again = health_of(&beat.2).unwrap_or_default();
    assert_eq!(again.len(), first.len(), "{again:?}");
    agent.signal("TERM");
    assert!(agent.exit().await.success());
}
