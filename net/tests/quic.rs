//! QUIC with mutual TLS on 127.0.0.1: identities on both sides, frames over a stream,
//! a certificate from another CA refused while a good connection goes on.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use hyperplan_net::certs::{self, CertPaths, UserRole};
use hyperplan_net::frame::{DEFAULT_MAX_FRAME, read_frame, write_frame};
use hyperplan_net::identity::{CertRole, Identity, peer_identity};
use hyperplan_net::messages::{AgentMessage, Hello, PlannerToAgent, Role};
use hyperplan_net::tls::{self, TlsError, TlsMaterial};

const LOOPBACK: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 0);

fn cluster(dir: &Path) {
    certs::init_ca(dir, false).unwrap();
    certs::issue_planner(dir, &[]).unwrap();
}

fn material(paths: &CertPaths) -> TlsMaterial {
    TlsMaterial::load(paths).unwrap()
}

/// Serves every connection: hello exchange, then answers one agent message per stream.
fn spawn_planner(endpoint: quinn::Endpoint) -> tokio::task::JoinHandle<Vec<Identity>> {
    tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(incoming) = endpoint.accept().await {
            let Ok(connection) = incoming.await else { continue };
            let identity = peer_identity(&connection).unwrap();
            seen.push(identity.clone());
            tokio::spawn(async move {
                while let Ok((mut send, mut recv)) = connection.accept_bi().await {
                    let hello: Hello = read_frame(&mut recv, DEFAULT_MAX_FRAME).await.unwrap().unwrap();
                    assert_eq!(hello.name, identity.name);
                    write_frame(
                        &mut send,
                        &Hello::new(Role::Planner, "hyperplan-planner"),
                        DEFAULT_MAX_FRAME,
                    )
                    .await
                    .unwrap();
                    while let Some(message) = read_frame::<AgentMessage, _>(&mut recv, DEFAULT_MAX_FRAME)
                        .await
                        .unwrap()
                    {
                        let AgentMessage::Heartbeat { seq, .. } = message else {
                            panic!("unexpected {message:?}")
                        };
                        let reply = PlannerToAgent::Registered {
                            node: hello.name.clone(),
                            heartbeat_interval_ms: seq,
                            epoch: 1,
                            fence_after_ms: None,
                        };
                        write_frame(&mut send, &reply, DEFAULT_MAX_FRAME).await.unwrap();
                    }
                    send.finish().unwrap();
                }
            });
            if seen.len() == 2 {
                break;
            }
        }
        seen
    })
}

async fn heartbeat_exchange(connection: &quinn::Connection, node: &str, seqs: std::ops::Range<u64>) {
    let (mut send, mut recv) = connection.open_bi().await.unwrap();
    write_frame(&mut send, &Hello::new(Role::Agent, node), DEFAULT_MAX_FRAME)
        .await
        .unwrap();
    let hello: Hello = read_frame(&mut recv, DEFAULT_MAX_FRAME).await.unwrap().unwrap();
    assert_eq!(hello.role, Role::Planner);
    for seq in seqs {
        let beat = AgentMessage::Heartbeat {
            seq,
            load: 0.5,
            free_memory: vec![(0, 1 << 30)],
            running_tasks: vec![],
            ports_in_use: vec![],
            strained: None,
            health: None,
        };
        write_frame(&mut send, &beat, DEFAULT_MAX_FRAME).await.unwrap();
        let reply: PlannerToAgent = read_frame(&mut recv, DEFAULT_MAX_FRAME).await.unwrap().unwrap();
        assert_eq!(
            reply,
            PlannerToAgent::Registered {
                node: node.into(),
                heartbeat_interval_ms: seq,
                epoch: 1,
                fence_after_ms: None,
            }
        );
    }
    send.finish().unwrap();
    assert!(
        read_frame::<PlannerToAgent, _>(&mut recv, DEFAULT_MAX_FRAME)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn mutual_identities_and_frames_over_a_stream() {
    let dir = tempfile::tempdir().unwrap();
    cluster(dir.path());
    certs::issue_node(dir.path(), "n001").unwrap();
    certs::issue_user(dir.path(), "alice", UserRole::Admin).unwrap();

    let server = tls::server_endpoint(LOOPBACK, &material(&CertPaths::planner(dir.path()))).unwrap();
    let addr = server.local_addr().unwrap();
    let planner = spawn_planner(server.clone());

    let agent = tls::client_endpoint(tls::any_addr_for(addr), &material(&CertPaths::node(dir.path(), "n001"))).unwrap();
    let connection = tls::connect(&agent, addr).await.unwrap();
    assert_eq!(
        peer_identity(&connection).unwrap(),
        Identity {
            name: "hyperplan-planner".into(),
            role: CertRole::Planner
        }
    );
    heartbeat_exchange(&connection, "n001", 0..3).await;

    let client = tls::client_endpoint(
        tls::any_addr_for(addr),
        &material(&CertPaths::user(dir.path(), "alice")),
    )
    .unwrap();
    let alice = tls::connect(&client, addr).await.unwrap();
    assert_eq!(peer_identity(&alice).unwrap().role, CertRole::Planner);

    let seen = tokio::time::timeout(Duration::from_secs(10), planner)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        seen,
        vec![
            Identity {
                name: "n001".into(),
                role: CertRole::Agent
            },
            Identity {
                name: "alice".into(),
                role: CertRole::Admin
            },
        ]
    );
    assert_eq!(CertRole::Admin.wire_role(), Role::Client);
    connection.close(0u32.into(), b"done");
    alice.close(0u32.into(), b"done");
    server.close(0u32.into(), b"done");
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_refused_while_a_good_connection_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    cluster(dir.path());
    certs::issue_node(dir.path(), "good").unwrap();
    let rogue = tempfile::tempdir().unwrap();
    certs::init_ca(rogue.path(), false).unwrap();
    certs::issue_node(rogue.path(), "evil").unwrap();

    let server = tls::server_endpoint(LOOPBACK, &material(&CertPaths::planner(dir.path()))).unwrap();
    let addr = server.local_addr().unwrap();
    let accepted = std::sync::Arc::new(tokio::sync::Mutex::new(Vec::new()));
    let refused = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let accept_loop = {
        let (server, accepted, refused) = (server.clone(), accepted.clone(), refused.clone());
        tokio::spawn(async move {
            while let Some(incoming) = server.accept().await {
                match incoming.await {
                    Ok(connection) => {
                        accepted.lock().await.push(peer_identity(&connection).unwrap());
                        tokio::spawn(async move {
                            while let Ok((mut send, mut recv)) = connection.accept_bi().await {
                                tokio::spawn(async move {
                                    while let Ok(Some(m)) = read_frame::<Hello, _>(&mut recv, DEFAULT_MAX_FRAME).await {
                                        write_frame(&mut send, &m, DEFAULT_MAX_FRAME).await.unwrap();
                                    }
                                });
                            }
                        });
                    }
                    Err(_) => {
                        refused.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            }
        })
    };

    // The good agent connects first and keeps a stream open across the refusal.
    let good_endpoint =
        tls::client_endpoint(tls::any_addr_for(addr), &material(&CertPaths::node(dir.path(), "good"))).unwrap();
    let good = tls::connect(&good_endpoint, addr).await.unwrap();
    let (mut send, mut recv) = good.open_bi().await.unwrap();
    let echo = |n: u32| Hello {
        version: n,
        role: Role::Agent,
        name: "good".into(),
    };
    write_frame(&mut send, &echo(1), DEFAULT_MAX_FRAME).await.unwrap();
    assert_eq!(
        read_frame::<Hello, _>(&mut recv, DEFAULT_MAX_FRAME).await.unwrap(),
        Some(echo(1))
    );

    // The rogue trusts our planner's CA (so only the server's check can stop it) but
    // presents a certificate from its own CA.
    let mut rogue_material = material(&CertPaths::node(rogue.path(), "evil"));
    rogue_material.ca = material(&CertPaths::planner(dir.path())).ca;
    let rogue_endpoint = tls::client_endpoint(tls::any_addr_for(addr), &rogue_material).unwrap();
    let connection = tokio::time::timeout(Duration::from_secs(10), tls::connect(&rogue_endpoint, addr))
        .await
        .unwrap();
    if let Ok(connection) = connection {
        // TLS 1.3: the client may finish before the server has checked its certificate;
        // then the first stream operation fails and the close reason says why.
        let exchange = async {
            let (mut send, mut recv) = connection.open_bi().await.map_err(|e| e.to_string())?;
            write_frame(&mut send, &echo(9), DEFAULT_MAX_FRAME)
                .await
                .map_err(|e| e.to_string())?;
            read_frame::<Hello, _>(&mut recv, DEFAULT_MAX_FRAME)
                .await
                .map_err(|e| e.to_string())
        };
        let outcome = tokio::time::timeout(Duration::from_secs(10), exchange).await.unwrap();
        assert!(outcome.is_err(), "the rogue got through: {outcome:?}");
        let reason = connection
            .close_reason()
            .expect("the rogue's connection is closed")
            .to_string();
        eprintln!("rogue refused: {reason}");
        assert!(
            reason.contains("handshake") || reason.contains("certificate"),
            "{reason}"
        );
    }

    // The good connection is untouched.
    for n in 2..5 {
        write_frame(&mut send, &echo(n), DEFAULT_MAX_FRAME).await.unwrap();
        assert_eq!(
            read_frame::<Hello, _>(&mut recv, DEFAULT_MAX_FRAME).await.unwrap(),
            Some(echo(n))
        );
    }
    assert_eq!(refused.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(
        *accepted.lock().await,
        vec![Identity {
            name: "good".into(),
            role: CertRole::Agent
        }]
    );

    good.close(0u32.into(), b"done");
    server.close(0u32.into(), b"done");
    accept_loop.abort();
}

#[tokio::test]
async fn a_client_refuses_a_planner_from_another_ca() {
    let dir = tempfile::tempdir().unwrap();
    cluster(dir.path());
    certs::issue_node(dir.path(), "n1").unwrap();
    let other = tempfile::tempdir().unwrap();
    cluster(other.path());

    let server = tls::server_endpoint(LOOPBACK, &material(&CertPaths::planner(other.path()))).unwrap();
    let addr = server.local_addr().unwrap();
    let serve = tokio::spawn({
        let server = server.clone();
        async move {
            while let Some(incoming) = server.accept().await {
                let _ = incoming.await;
            }
        }
    });
    let agent = tls::client_endpoint(tls::any_addr_for(addr), &material(&CertPaths::node(dir.path(), "n1"))).unwrap();
    let result = tokio::time::timeout(Duration::from_secs(10), tls::connect(&agent, addr))
        .await
        .unwrap();
    let err = result.unwrap_err();
    assert!(matches!(err, TlsError::Handshake { .. }), "{err}");
    server.close(0u32.into(), b"done");
    serve.abort();
}

#[tokio::test]
async fn the_planner_certificate_is_no_client_certificate() {
    // Issued for server authentication only: a stolen planner key cannot pose as a peer.
    let dir = tempfile::tempdir().unwrap();
    cluster(dir.path());
    let server = tls::server_endpoint(LOOPBACK, &material(&CertPaths::planner(dir.path()))).unwrap();
    let addr = server.local_addr().unwrap();
    let accepted = tokio::spawn({
        let server = server.clone();
        async move { server.accept().await.unwrap().await.is_ok() }
    });
    let client = tls::client_endpoint(tls::any_addr_for(addr), &material(&CertPaths::planner(dir.path()))).unwrap();
    if let Ok(connection) = tls::connect(&client, addr).await {
        let _ = tokio::time::timeout(Duration::from_secs(10), connection.closed())
            .await
            .unwrap();
    }
    assert!(
        !tokio::time::timeout(Duration::from_secs(10), accepted)
            .await
            .unwrap()
            .unwrap()
    );
    server.close(0u32.into(), b"done");
}

#[test]
fn loading_names_the_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let err = TlsMaterial::load(&CertPaths::node(dir.path(), "n1")).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("ca.pem") && message.contains("cluster CA certificate"),
        "{message}"
    );

    cluster(dir.path());
    std::fs::create_dir_all(dir.path().join("nodes")).unwrap();
    std::fs::write(dir.path().join("nodes/n1.pem"), "not pem").unwrap();
    let message = TlsMaterial::load(&CertPaths::node(dir.path(), "n1"))
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("nodes/n1.pem") && message.contains("holds no certificate"),
        "{message}"
    );
}
