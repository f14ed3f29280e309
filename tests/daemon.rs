//! End-to-end: the real `hyperplan-planner`, `hyperplan-agent run` and `hyperplan` binaries
//! on 127.0.0.1 (port 0) with certificates from `hyperplan certs`. Agents register and
//! show Ready, a killed agent turns NotReady and comes back, a submitted job is placed
//! with its NUMA pinning, the planner refuses what it must (each refusal closes that one
//! connection while the rest go on), and agents re-register by themselves after a
//! planner restart.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{Cluster, wait_for};
use hyperplan_net::certs::CertPaths;
use hyperplan_net::messages::{AgentMessage, Hello, Role};
use hyperplan_net::tls::{TlsMaterial, any_addr_for, client_endpoint, connect};
use hyperplan_net::{read_frame, write_frame};

const MACHINE: &str = "pack:2 numa:1(memory=17179869184) core:4 pu:2";
const LONG: Duration = Duration::from_secs(60);

fn ready_cluster(nodes: &[&str]) -> Cluster {
    let mut c = Cluster::start(nodes);
    for (i, n) in nodes.iter().enumerate() {
        let leaf = if i < 2 { "leaf-a" } else { "leaf-b" };
        c.start_agent(
            n,
            MACHINE,
            &[("hyperplan.io/leaf", leaf), ("hyperplan.io/spine", "spine-1")],
        );
    }
    for n in nodes {
        c.wait_state(n, "Ready", LONG);
    }
    c
}

#[test]
fn agents_register_ready_and_a_killed_one_turns_not_ready_then_back() {
    let mut c = ready_cluster(&["n1", "n2", "n3"]);
    let v = c.cli_json("alice", &["nodes"]);
    let n1 = &v["nodes"][0];
    assert_eq!(n1["name"], "n1");
    assert_eq!(n1["state"], "Ready");
    assert_eq!(n1["labels"]["hyperplan.io/leaf"], "leaf-a");
    assert_eq!(n1["cpus"]["total"], 16);
    assert_eq!(n1["numaNodes"], 2);
    assert_eq!(n1["confinement"], "none", "a synthetic machine's tasks are not pinned");

    c.kill_agent("n2");
    // SIGKILL sends no goodbye: the planner notices the missed heartbeats (or the QUIC
    // idle timeout closing the link, whichever comes first) and says which.
    c.wait_state("n2", "NotReady", LONG);
    let log = c.planner_log();
    let said = log.lines().any(|l| {
        l.contains("\"n2\"")
            && ((l.contains("no heartbeat for") && l.contains("missed=3")) || l.contains("agent link closed: NotReady"))
    });
    assert!(said, "{log}");
    assert_eq!(
        c.states().iter().filter(|(_, s)| s == "Ready").count(),
        2,
        "the others stay Ready"
    );
    c.start_agent("n2", MACHINE, &[("hyperplan.io/leaf", "leaf-a")]);
    c.wait_state("n2", "Ready", LONG);
}

#[test]
fn a_submitted_job_is_placed_with_its_pinning_and_users_own_their_jobs() {
    let c = ready_cluster(&["n1", "n2"]);
    let jobs = c.write(
        "jobs.yaml",
        "name: pinned\ntasks:\n  - name: w\n    replicas: 2\n    topologyPolicy: single-numa-node\n    resources: {cpu: 4, memory: 1Gi}\n    command: [\"/bin/true\"]\n",
    );
    let v = c.cli_json("alice", &["submit", common::path_str(&jobs)]);
    assert_eq!(v["submitted"], serde_json::json!(["pinned"]));
    // Placed, then run (alice is no user on this machine: her tasks fail at once).
    let job = wait_for(LONG, "the job placed", || {
        let v = c.cli_json("alice", &["status", "pinned"]);
        let j = v["jobs"][0].clone();
        (j["status"] != "pending").then_some(j)
    });
    for t in job["tasks"].as_array().unwrap() {
        assert!(t["node"].is_string(), "{t}");
        assert_eq!(t["numaNodes"].as_array().unwrap().len(), 1, "{t}");
        assert!(t["cpus"].as_str().unwrap().contains('-'), "{t}");
        // No workingDir: the directory `hyperplan submit` ran in.
        assert_eq!(t["workingDir"].as_str(), Some(c.dir_str().as_str()), "{t}");
    }
    // A relative workingDir starts there; an absolute one stands.
    let dirs = c.write(
        "dirs.yaml",
        "name: dirs\ntasks:\n  - {name: rel, replicas: 1, resources: {cpu: 1}, workingDir: runs/a}\n  - {name: abs, replicas: 1, resources: {cpu: 1}, workingDir: /scratch/x}\n",
    );
    c.cli_json("alice", &["submit", common::path_str(&dirs)]);
    let v = c.cli_json("alice", &["status", "dirs"]);
    let by_name = |n: &str| {
        v["jobs"][0]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == n)
            .map(|t| t["workingDir"].clone())
    };
    assert_eq!(by_name("rel-0"), Some(format!("{}/runs/a", c.dir_str()).into()), "{v}");
    assert_eq!(by_name("abs-0"), Some("/scratch/x".into()), "{v}");
    // A job that runs, by a user this machine has.
    let user = common::task_user();
    c.issue_user(&user);
    let held = c.write(
        "held.yaml",
        "name: held\ntasks:\n  - name: w\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: /tmp\n    output: /dev/null\n    command: [sleep, \"60\"]\n",
    );
    c.cli_json(&user, &["submit", common::path_str(&held)]);
    // The same name again, while it runs, is refused with the owner named.
    let out = c.cli("bob", &["submit", common::path_str(&held)]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("submitted by {user}")), "{err}");
    // bob may not cancel it; root (admin) may.
    let out = c.cli("bob", &["cancel", "held"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("belongs to {user}")), "{err}");
    assert!(c.planner_log().contains("refused: cancel of another user's job"));
    let v = c.cli_json("root", &["cancel", "held", "--grace", "1s"]);
    assert_eq!(v["cancelled"], "held");
    // hypernodes and explain answer too.
    let tree = c.cli_json("alice", &["hypernodes"]);
    assert!(tree["hyperNodes"].is_array(), "{tree}");
    let ex = c.cli_json("alice", &["explain", "pinned"]);
    assert_eq!(ex["job"]["name"], "pinned");
}

/// A raw connection with `paths`' certificate: the handshake done, one stream open.
async fn raw(addr: SocketAddr, paths: &CertPaths) -> (quinn::Connection, quinn::SendStream, quinn::RecvStream) {
    let material = TlsMaterial::load(paths).unwrap();
    let endpoint = client_endpoint(any_addr_for(addr), &material).unwrap();
    let conn = connect(&endpoint, addr).await.unwrap();
    let (send, recv) = conn.open_bi().await.unwrap();
    (conn, send, recv)
}

/// Waits for the planner to close `conn` and returns its reason.
async fn closed_reason(conn: &quinn::Connection) -> String {
    let err = tokio::time::timeout(Duration::from_secs(20), conn.closed())
        .await
        .expect("closed in time");
    match err {
        quinn::ConnectionError::ApplicationClosed(c) => String::from_utf8_lossy(&c.reason).into_owned(),
        other => format!("{other}"),
    }
}

#[test]
fn refusals_close_only_the_offending_connection() {
    let c = ready_cluster(&["n1", "n2"]);
    let addr: SocketAddr = c.addr.parse().unwrap();
    let certs = c.certs();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // An agent whose Register names another node than its certificate.
        let (conn, mut send, mut recv) = raw(addr, &CertPaths::node(&certs, "n1")).await;
        write_frame(&mut send, &Hello::new(Role::Agent, "n1"), 1 << 20)
            .await
            .unwrap();
        let _: Option<Hello> = read_frame(&mut recv, 1 << 20).await.unwrap();
        let topology = hyperplan_shared::topology::NodeTopology::default();
        let register = AgentMessage::Register {
            version: hyperplan_net::PROTOCOL_VERSION,
            node: "n2".into(),
            labels: Default::default(),
            topology_hash: hyperplan_net::topology_hash(&topology),
            topology,
            confinement: None,
            advertise_address: None,
            epoch: 0,
        };
        write_frame(&mut send, &register, 1 << 20).await.unwrap();
        let reason = closed_reason(&conn).await;
        assert!(reason.contains("certificate is for node \"n1\""), "{reason}");

        // A Hello with a version this planner does not speak.
        let (conn, mut send, _recv) = raw(addr, &CertPaths::user(&certs, "alice")).await;
        let mut hello = Hello::new(Role::Client, "alice");
        hello.version = 99;
        write_frame(&mut send, &hello, 1 << 20).await.unwrap();
        let reason = closed_reason(&conn).await;
        assert!(reason.contains("version 99"), "{reason}");

        // A Hello naming someone else.
        let (conn, mut send, _recv) = raw(addr, &CertPaths::user(&certs, "alice")).await;
        write_frame(&mut send, &Hello::new(Role::Client, "root"), 1 << 20)
            .await
            .unwrap();
        let reason = closed_reason(&conn).await;
        assert!(reason.contains("certificate names \"alice\""), "{reason}");

        // Garbage instead of a frame.
        let (conn, mut send, _recv) = raw(addr, &CertPaths::user(&certs, "alice")).await;
        send.write_all(&[0, 0, 0, 3, 0xc1, 0xc1, 0xc1]).await.unwrap();
        let reason = closed_reason(&conn).await;
        assert!(reason.contains("expected Hello"), "{reason}");

        // A frame larger than the maximum (declared 1 GiB).
        let (conn, mut send, _recv) = raw(addr, &CertPaths::user(&certs, "alice")).await;
        send.write_all(&(1u32 << 30).to_be_bytes()).await.unwrap();
        let reason = closed_reason(&conn).await;
        assert!(reason.contains("1073741824"), "{reason}");

        // Out of order: a heartbeat before Register.
        let (conn, mut send, mut recv) = raw(addr, &CertPaths::node(&certs, "n2")).await;
        write_frame(&mut send, &Hello::new(Role::Agent, "n2"), 1 << 20)
            .await
            .unwrap();
        let _: Option<Hello> = read_frame(&mut recv, 1 << 20).await.unwrap();
        let hb = AgentMessage::Heartbeat {
            seq: 1,
            load: 0.0,
            free_memory: vec![],
            running_tasks: vec![],
            ports_in_use: vec![],
            strained: None,
            health: None,
        };
        write_frame(&mut send, &hb, 1 << 20).await.unwrap();
        let reason = closed_reason(&conn).await;
        assert!(reason.contains("expected Register first"), "{reason}");
    });

    // A certificate from another cluster's CA: the TLS handshake fails.
    let other = common::foreign_user_certs();
    let out = common::nodes_with_certs(&c.addr, other.path());
    assert!(!out.status.success(), "a foreign certificate must be refused");
    wait_for(LONG, "the TLS refusal logged", || {
        c.planner_log().contains("refused: TLS handshake failed").then_some(())
    });
    // Every refusal left the planner and the agents alone.
    let states = c.states();
    assert!(states.iter().all(|(_, s)| s == "Ready"), "{states:?}");
    let log = c.planner_log();
    assert!(log.matches("refused:").count() >= 6, "{log}");
}

#[test]
fn agents_re_register_after_a_planner_restart() {
    let mut c = ready_cluster(&["n1", "n2"]);
    let addr = c.addr.clone();
    c.stop_planner();
    // Same address, new process: the agents keep trying and come back on their own.
    c.start_planner(&addr);
    for n in ["n1", "n2"] {
        c.wait_state(n, "Ready", LONG);
    }
}
