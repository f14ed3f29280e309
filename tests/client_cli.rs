//! The real `hyperplan` binary against a minimal in-test planner (hyperplan-net's QUIC
//! server, certificates in a temp dir): `nodes` in JSON and as a table, a refusal with a
//! reason, a missing certificate, an unreachable planner. And `queues` against the real
//! `hyperplan-planner` (`common::Cluster`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output};

use hyperplan_net::certs::{CertPaths, UserRole, init_ca, issue_planner, issue_user};
use hyperplan_net::messages::{Hello, Request, RequestCommand, Response};
use hyperplan_net::{DEFAULT_MAX_FRAME, Role, TlsMaterial, read_frame, server_endpoint, write_frame};
use hyperplan_shared::status::{FreeTotal, NodeList, NodeState, NodeStatus};

/// How the fake planner behaves after the client's hello.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Hello back, then answer `Nodes` with [`node_list`].
    AnswerNodes,
    /// Close the connection with a reason, as the planner does when it refuses.
    Refuse,
}

const REFUSAL: &str = "hello says name \"mallory\" but the certificate names \"alice\"";

fn node_list() -> NodeList {
    let ft = |free, total| FreeTotal { free, total };
    NodeList {
        nodes: vec![
            NodeStatus {
                name: "n002".into(),
                state: NodeState::NotReady,
                labels: BTreeMap::from([("rack".into(), "r1".into())]),
                cpus: ft(0, 64),
                gpus: ft(0, 4),
                memory: ft(0, 256 << 30),
                numa_nodes: 2,
                ib_ports: ft(0, 2),
                last_heartbeat_secs: Some(40),
                running_tasks: 0,
                confinement: None,
                reason: None,
                drain: None,
                nvlink: None,
                health: Vec::new(),
            },
            NodeStatus {
                name: "n001".into(),
                state: NodeState::Ready,
                labels: BTreeMap::from([("rack".into(), "r1".into()), ("gpu".into(), "a100".into())]),
                cpus: ft(32, 64),
                gpus: ft(2, 4),
                memory: ft(128 << 30, 256 << 30),
                numa_nodes: 2,
                ib_ports: ft(2, 2),
                last_heartbeat_secs: Some(1),
                running_tasks: 2,
                confinement: Some("cgroup".into()),
                reason: None,
                drain: None,
                nvlink: None,
                health: Vec::new(),
            },
        ],
    }
}

/// Starts the fake planner on 127.0.0.1:0 in a thread; returns its address.
fn start_planner(dir: &Path, behaviour: Behaviour) -> SocketAddr {
    let material = TlsMaterial::load(&CertPaths::planner(dir)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let endpoint = server_endpoint("127.0.0.1:0".parse().unwrap(), &material).unwrap();
            tx.send(endpoint.local_addr().unwrap()).unwrap();
            while let Some(incoming) = endpoint.accept().await {
                let Ok(conn) = incoming.await else { continue };
                let Ok((mut send, mut recv)) = conn.accept_bi().await else {
                    continue;
                };
                let hello: Hello = read_frame(&mut recv, DEFAULT_MAX_FRAME).await.unwrap().unwrap();
                assert_eq!(hello.role, Role::Client);
                match behaviour {
                    Behaviour::Refuse => conn.close(3u32.into(), REFUSAL.as_bytes()),
                    Behaviour::AnswerNodes => {
                        write_frame(
                            &mut send,
                            &Hello::new(Role::Planner, "hyperplan-planner"),
                            DEFAULT_MAX_FRAME,
                        )
                        .await
                        .unwrap();
                        while let Ok(Some(request)) = read_frame::<Request, _>(&mut recv, DEFAULT_MAX_FRAME).await {
                            let result = match request.command {
                                RequestCommand::Nodes => Ok(serde_json::to_value(node_list()).unwrap()),
                                other => Err(format!("the test planner does not answer {other:?}").into()),
                            };
                            let response = Response { id: request.id, result };
                            write_frame(&mut send, &response, DEFAULT_MAX_FRAME).await.unwrap();
                        }
                    }
                }
            }
        });
    });
    rx.recv().unwrap()
}

fn certs() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    init_ca(dir.path(), false).unwrap();
    issue_planner(dir.path(), &[]).unwrap();
    issue_user(dir.path(), "alice", UserRole::User).unwrap();
    dir
}

fn hyperplan(args: &[&str], dir: &Path, planner: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hyperplan"))
        .args(args)
        .env("HYPERPLAN_PLANNER", planner)
        .env("HYPERPLAN_CERT_DIR", dir)
        .env("HYPERPLAN_USER", "alice")
        // No stray client.toml from the machine running the tests.
        .env("XDG_CONFIG_HOME", dir)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn nodes_as_json_is_the_reply_value_exactly() {
    let dir = certs();
    let addr = start_planner(dir.path(), Behaviour::AnswerNodes);
    let out = hyperplan(&["nodes", "--output", "json"], dir.path(), &addr.to_string());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed, serde_json::to_value(node_list()).unwrap());
    assert_eq!(
        text(&out.stdout),
        serde_json::to_string_pretty(&serde_json::to_value(node_list()).unwrap()).unwrap() + "\n"
    );
}

#[test]
fn nodes_as_a_table() {
    let dir = certs();
    let addr = start_planner(dir.path(), Behaviour::AnswerNodes);
    // Flags beat the environment: the env points nowhere useful.
    let out = Command::new(env!("CARGO_BIN_EXE_hyperplan"))
        .args(["nodes", "--planner", &addr.to_string(), "--user", "alice"])
        .arg("--cert-dir")
        .arg(dir.path())
        .env("HYPERPLAN_PLANNER", "127.0.0.1:1")
        .env("HYPERPLAN_USER", "nobody")
        .env("XDG_CONFIG_HOME", dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    insta::assert_snapshot!(text(&out.stdout), @r"
    NAME  STATE     CPUS   GPUS  MEMORY       NUMA  IB   CONFINE  LABELS
    n001  Ready     32/64  2/4   128Gi/256Gi  2     2/2  cgroup   gpu=a100,rack=r1
    n002  NotReady  0/64   0/4   0/256Gi      2     0/2  -        rack=r1

    2 nodes: 1 ready, 1 not ready
    ");
}

#[test]
fn planner_error_reply_is_the_message_and_exit_1() {
    let dir = certs();
    let addr = start_planner(dir.path(), Behaviour::AnswerNodes);
    let out = hyperplan(&["cancel", "job-x"], dir.path(), &addr.to_string());
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("hyperplan: the test planner does not answer Cancel"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn refusal_reason_is_printed_and_exit_1() {
    let dir = certs();
    let addr = start_planner(dir.path(), Behaviour::Refuse);
    let out = hyperplan(&["nodes"], dir.path(), &addr.to_string());
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!("hyperplan: planner at {addr} closed the connection: {REFUSAL}\n")
    );
}

#[test]
fn missing_certificate_names_the_file_and_the_command() {
    let dir = certs();
    let out = hyperplan(&["nodes", "--user", "bob"], dir.path(), "127.0.0.1:1");
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(&dir.path().join("users/bob.pem").display().to_string()),
        "{err}"
    );
    assert!(err.contains("hyperplan certs issue --user bob --role user"), "{err}");
}

#[test]
fn unreachable_planner_names_the_address() {
    let dir = certs();
    // A bound UDP socket that never answers: the client waits out its connect timeout.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let out = hyperplan(&["status"], dir.path(), &addr.to_string());
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("cannot reach the planner at {addr} within 5 s")),
        "{err}"
    );
}

/// Issue 23: `hyperplan queues` against the real planner: `default` first, then the
/// `[[queue]]` of planner.toml, readable by any user, as JSON and as a table.
#[test]
fn queues_lists_the_default_queue_and_the_configured_ones() {
    let c = common::Cluster::start_with(
        &[],
        Some("[[queue]]\nname = \"gpu\"\npriority = 10\nweight = 2\nquota = { cpu = 4 }\nmaxTimeLimit = \"2d\"\n"),
    );
    let v = c.cli_json("bob", &["queues"]);
    let queues = v["queues"].as_array().unwrap();
    let names: Vec<&str> = queues.iter().filter_map(|q| q["name"].as_str()).collect();
    assert_eq!(names, ["default", "gpu"], "{v}");
    assert_eq!(queues[0]["pendingJobs"], 0, "{v}");
    assert_eq!(queues[1]["priority"], 10, "{v}");
    assert_eq!(queues[1]["quota"]["cpu"], 4000, "{v}");
    assert_eq!(queues[1]["maxTimeLimit"], 2 * 86_400, "{v}");
    let out = c.cli("alice", &["queues"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.starts_with("NAME "), "{table}");
    assert!(table.contains("\ndefault ") && table.contains("\ngpu "), "{table}");
    assert!(table.contains("gpu: time limit default none, max 2d"), "{table}");
}

#[test]
fn each_binary_says_a_cause_once() {
    // A message that carries its cause inline and also names it as its source must not
    // print it twice, nor the file twice.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.toml");
    let runs = [
        (
            common::bin("hyperplan-planner"),
            vec!["--config".to_string(), missing.display().to_string()],
        ),
        (
            common::bin("hyperplan-agent"),
            vec![
                "probe".to_string(),
                "--gpu-fabric".to_string(),
                missing.display().to_string(),
            ],
        ),
    ];
    for (bin, args) in runs {
        let out = std::process::Command::new(&bin)
            .args(&args)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{}: {err}", bin.display());
        assert_eq!(err.matches("os error 2").count(), 1, "{}: {err}", bin.display());
        assert_eq!(err.matches("missing.toml").count(), 1, "{}: {err}", bin.display());
        assert!(err.contains("cannot read"), "{}: {err}", bin.display());
    }
}
