//! `hyperplan-agent run` with several planners (`--planner a,b`: a leader and standbys),
//! against minimal planners served by this test: a standby's `NotLeader` sends the agent
//! to the leader it names (off the list too), a leader that goes away makes it try the
//! next planner of the list, and standbys that know no leader never make it spin.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hyperplan_net::certs::{self, CertPaths};
use hyperplan_net::frame::{DEFAULT_MAX_FRAME, read_frame, write_frame};
use hyperplan_net::messages::{AgentMessage, PlannerToAgent};
use hyperplan_net::tls::{self, TlsMaterial};
use tokio::sync::mpsc;

/// Generous: the machine running the tests is slow and busy.
const WAIT: Duration = Duration::from_secs(90);

/// What a test planner answers to Register: `Registered`, or `NotLeader` naming `leader`.
#[derive(Clone, Debug)]
enum Answers {
    Leader,
    Standby { leader: Option<String> },
}

#[derive(Debug, PartialEq, Eq)]
enum Event {
    /// A Register reached planner `name`.
    Register { name: &'static str },
    /// The agent closed a standby's connection after NotLeader (its close reason).
    Closed { name: &'static str, reason: String },
}

struct Planner {
    addr: SocketAddr,
    endpoint: quinn::Endpoint,
}

impl Planner {
    fn start(dir: &Path, name: &'static str, role: Answers, events: mpsc::UnboundedSender<Event>) -> Self {
        let material = TlsMaterial::load(&CertPaths::planner(dir)).unwrap();
        let endpoint = tls::server_endpoint(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), &material).unwrap();
        let addr = endpoint.local_addr().unwrap();
        let accepting = endpoint.clone();
        tokio::spawn(async move {
            while let Some(incoming) = accepting.accept().await {
                let Ok(connection) = incoming.await else { continue };
                tokio::spawn(serve(name, role.clone(), connection, events.clone()));
            }
        });
        Self { addr, endpoint }
    }

    /// Gone: every connection closed, nothing accepted any more.
    fn kill(&self) {
        self.endpoint.close(quinn::VarInt::from_u32(9), b"planner killed");
    }
}

async fn serve(name: &'static str, role: Answers, connection: quinn::Connection, events: mpsc::UnboundedSender<Event>) {
    let Some((mut send, mut recv, hello)) = common::planner_hello(&connection).await else {
        return;
    };
    let Ok(Some(AgentMessage::Register { .. })) = read_frame::<AgentMessage, _>(&mut recv, DEFAULT_MAX_FRAME).await
    else {
        return;
    };
    let _ = events.send(Event::Register { name });
    match role {
        Answers::Standby { leader } => {
            let _ = write_frame(&mut send, &PlannerToAgent::NotLeader { leader }, DEFAULT_MAX_FRAME).await;
            let closed = tokio::time::timeout(Duration::from_secs(10), connection.closed()).await;
            let reason = closed.map_or_else(|_| "still open after 10 s".to_string(), |r| r.to_string());
            let _ = events.send(Event::Closed { name, reason });
        }
        Answers::Leader => {
            let reply = PlannerToAgent::Registered {
                node: hello.name,
                heartbeat_interval_ms: 200,
                epoch: 1,
                fence_after_ms: None,
            };
            if write_frame(&mut send, &reply, DEFAULT_MAX_FRAME).await.is_err() {
                return;
            }
            // Heartbeats until the agent or the test ends the connection.
            while let Ok(Some(_)) = read_frame::<AgentMessage, _>(&mut recv, DEFAULT_MAX_FRAME).await {}
        }
    }
}

async fn next(events: &mut mpsc::UnboundedReceiver<Event>) -> Event {
    tokio::time::timeout(WAIT, events.recv())
        .await
        .expect("no event in time")
        .expect("planners stopped")
}

/// The next Register, skipping close events.
async fn next_register(events: &mut mpsc::UnboundedReceiver<Event>) -> &'static str {
    loop {
        if let Event::Register { name } = next(events).await {
            return name;
        }
    }
}

/// The agent process with `--planner planners`; its stderr lines arrive on `lines`.
struct Agent {
    child: Child,
    _state: tempfile::TempDir,
    lines: mpsc::UnboundedReceiver<String>,
}

impl Agent {
    fn spawn(dir: &Path, planners: &str) -> Self {
        let state = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_hyperplan-agent"))
            .arg("run")
            .arg("--state-dir")
            .arg(state.path())
            .args(["--planner", planners, "--node", "n1", "--reprobe-interval", "0"])
            .args(["--synthetic", "pack:1 numa:1 core:2 pu:1", "--config", "/dev/null"])
            .arg("--cert-dir")
            .arg(dir)
            .env("RUST_LOG", "hyperplan_agent=info")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let lines = common::lines(stderr);
        Self {
            child,
            _state: state,
            lines,
        }
    }

    /// Waits for a retry `at_least` away (a backoff that has grown); panics after more
    /// than `max_tries` refused tries without one (the agent spins).
    async fn backoff_of_at_least(&mut self, at_least: Duration, max_tries: usize) {
        let mut tries = 0;
        loop {
            let line = self.log("planner link down").await;
            tries += 1;
            let retry_ms = line
                .split_whitespace()
                .find_map(|f| f.strip_prefix("retry_in_ms="))
                .and_then(|v| v.parse::<u128>().ok())
                .unwrap_or_else(|| panic!("no retry_in_ms in {line:?}"));
            if retry_ms >= at_least.as_millis() {
                return;
            }
            assert!(
                tries < max_tries,
                "{tries} tries, none followed by a backoff of {at_least:?}"
            );
        }
    }

    async fn log(&mut self, needle: &str) -> String {
        let found = tokio::time::timeout(WAIT, async {
            while let Some(line) = self.lines.recv().await {
                if line.contains(needle) {
                    return Some(line);
                }
            }
            None
        })
        .await;
        found
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("no log line with {needle:?}"))
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn cluster(dir: &Path) {
    certs::init_ca(dir, false).unwrap();
    certs::issue_planner(dir, &[]).unwrap();
    certs::issue_node(dir, "n1").unwrap();
}

#[tokio::test]
async fn a_standby_sends_the_agent_to_the_leader_it_names() {
    let dir = tempfile::tempdir().unwrap();
    cluster(dir.path());
    let (tx, mut events) = mpsc::unbounded_channel();
    let leader = Planner::start(dir.path(), "leader", Answers::Leader, tx.clone());
    let standby = Planner::start(
        dir.path(),
        "standby",
        Answers::Standby {
            leader: Some(leader.addr.to_string()),
        },
        tx,
    );
    // Only the standby is listed: the leader it names is tried all the same.
    let mut agent = Agent::spawn(dir.path(), &standby.addr.to_string());
    assert_eq!(next_register(&mut events).await, "standby");
    let line = agent.log("planner link down").await;
    assert!(
        line.contains(&format!("{} is a standby; the leader is {}", standby.addr, leader.addr)),
        "{line}"
    );
    assert!(line.contains("retry_in_ms=200"), "soon, not after the backoff: {line}");
    assert!(line.contains(&format!("next={}", leader.addr)), "{line}");
    // The agent closes the standby's connection itself, cleanly.
    let mut saw = Vec::new();
    loop {
        match next(&mut events).await {
            Event::Closed {
                name: "standby",
                reason,
            } => {
                assert!(reason.contains("is a standby") && reason.contains("code 0"), "{reason}");
                break;
            }
            other => saw.push(other),
        }
    }
    if !saw.contains(&Event::Register { name: "leader" }) {
        assert_eq!(next_register(&mut events).await, "leader");
    }
    let line = agent.log("registered").await;
    assert!(line.contains(&format!("planner={}", leader.addr)), "{line}");
}

#[tokio::test]
async fn when_the_leader_goes_the_agent_tries_the_next_planner() {
    let dir = tempfile::tempdir().unwrap();
    cluster(dir.path());
    let (tx, mut events) = mpsc::unbounded_channel();
    let first = Planner::start(dir.path(), "first", Answers::Leader, tx.clone());
    let second = Planner::start(dir.path(), "second", Answers::Leader, tx);
    let mut agent = Agent::spawn(dir.path(), &format!("{}, {}", first.addr, second.addr));
    assert_eq!(next_register(&mut events).await, "first");
    agent.log("registered").await;
    first.kill();
    let line = agent.log("planner link down").await;
    assert!(line.contains(&format!("planner={}", first.addr)), "{line}");
    assert!(line.contains(&format!("next={}", second.addr)), "{line}");
    assert_eq!(next_register(&mut events).await, "second");
    let line = agent.log("registered").await;
    assert!(line.contains(&format!("planner={}", second.addr)), "{line}");
}

#[tokio::test]
async fn standbys_without_a_leader_never_make_it_spin() {
    let dir = tempfile::tempdir().unwrap();
    cluster(dir.path());
    let (tx, mut events) = mpsc::unbounded_channel();
    let a = Planner::start(dir.path(), "a", Answers::Standby { leader: None }, tx.clone());
    let b = Planner::start(dir.path(), "b", Answers::Standby { leader: None }, tx);
    let mut agent = Agent::spawn(dir.path(), &format!("{},{}", a.addr, b.addr));
    assert_eq!(next_register(&mut events).await, "a");
    assert_eq!(next_register(&mut events).await, "b", "no leader: the next on the list");
    // 200 ms after each first refusal of a round, the growing backoff after a whole round
    // (0.5, 1, 2 s, ±20 %): the fourth round's backoff (4 s) comes about 4 s in, after a
    // handful of registrations, not hundreds.
    agent.backoff_of_at_least(Duration::from_secs(3), 14).await;
    let mut registers = 2;
    while let Ok(event) = events.try_recv() {
        if matches!(event, Event::Register { .. }) {
            registers += 1;
        }
    }
    assert!((3..=14).contains(&registers), "{registers} registrations in about 4 s");
}
