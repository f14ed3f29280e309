//! Scale harness for the planner daemon (issue 5): many simulated agents in one process,
//! each its own QUIC connection with its own node certificate, registering a two-socket
//! machine and heartbeating every second against the real `hyperplan-planner` binary.
//!
//! Reports the planner's CPU share and resident memory while the agents heartbeat, and
//! how long all agents take to register again after the planner restarts.
//!
//! `cargo bench --bench agent_load` (1,000 agents); `AGENTS=2000 cargo bench --bench
//! agent_load` for another count. Not a criterion bench: it measures a running system.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mod common;

use hyperplan_core::testing::MachineBuilder;
use hyperplan_net::certs::{CertPaths, init_ca, issue_node, issue_planner};
use hyperplan_net::messages::{AgentMessage, Hello, PlannerToAgent, Role};
use hyperplan_net::tls::{TlsMaterial, any_addr_for, client_config};
use hyperplan_net::{read_frame, topology_hash, write_frame};

/// `PLANNER_CPUS=1` runs the planner under `taskset -c 1` (run the harness itself with
/// `taskset -c 0`) so the two do not share a core.
fn start_planner(bin: &Path, certs: &Path, listen: &str) -> (Child, SocketAddr) {
    let mut cmd = match std::env::var("PLANNER_CPUS") {
        Ok(cpus) => {
            let mut c = Command::new("taskset");
            c.args(["-c", &cpus]).arg(bin);
            c
        }
        Err(_) => Command::new(bin),
    };
    let mut child = cmd
        .args(["--listen", listen, "--config", "/dev/null", "--cert-dir"])
        .arg(certs)
        .arg("--store")
        .arg(certs.with_file_name("state.redb"))
        .args(["--heartbeat-interval", "1", "--missed-heartbeats", "3"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.trim().rsplit(' ').next().unwrap().parse().unwrap();
    (child, addr)
}

/// utime + stime of `pid`, in clock ticks, and VmRSS in KiB.
fn cpu_and_rss(pid: u32) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (ticks, rss)
}

/// One simulated agent: connect, register, heartbeat every second; on any failure wait
/// half a second and start over (the real agent backs off; this wants the fastest
/// re-registration the planner allows). Counts registrations.
async fn agent(
    endpoint: quinn::Endpoint,
    config: quinn::ClientConfig,
    addr: Arc<std::sync::Mutex<SocketAddr>>,
    node: String,
    topology: hyperplan_shared::topology::NodeTopology,
    registered: Arc<AtomicUsize>,
) {
    let hash = topology_hash(&topology);
    loop {
        let target = *addr.lock().unwrap();
        let attempt = async {
            let conn = endpoint
                .connect_with(config.clone(), target, hyperplan_net::certs::PLANNER_SERVER_NAME)
                .ok()?
                .await
                .ok()?;
            let (mut send, mut recv) = conn.open_bi().await.ok()?;
            write_frame(&mut send, &Hello::new(Role::Agent, node.clone()), 1 << 24)
                .await
                .ok()?;
            let _: Hello = read_frame(&mut recv, 1 << 24).await.ok()??;
            let register = AgentMessage::Register {
                version: hyperplan_net::PROTOCOL_VERSION,
                node: node.clone(),
                labels: Default::default(),
                topology: topology.clone(),
                topology_hash: hash,
                confinement: None,
                advertise_address: None,
                epoch: 0,
            };
            write_frame(&mut send, &register, 1 << 24).await.ok()?;
            let reply: PlannerToAgent = read_frame(&mut recv, 1 << 24).await.ok()??;
            let PlannerToAgent::Registered { .. } = reply else {
                return None;
            };
            registered.fetch_add(1, Ordering::SeqCst);
            let mut seq = 0;
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                seq += 1;
                let hb = AgentMessage::Heartbeat {
                    seq,
                    load: 0.5,
                    free_memory: vec![(0, 1 << 30), (1, 1 << 30)],
                    running_tasks: vec![],
                };
                write_frame(&mut send, &hb, 1 << 24).await.ok()?;
            }
        };
        let _: Option<()> = attempt.await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument that is not ours skips the run.
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && a != "agent_load")
    {
        return;
    }
    let n: usize = std::env::var("AGENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let t = Instant::now();
    init_ca(&certs, false).unwrap();
    issue_planner(&certs, &[]).unwrap();
    let nodes: Vec<String> = (0..n).map(|i| format!("sim{i:05}")).collect();
    for node in &nodes {
        issue_node(&certs, node).unwrap();
    }
    eprintln!(
        "agent_load: {n} node certificates in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let bin = common::daemon("hyperplan-planner", "hyperplan-planner");
    let (mut planner, addr) = start_planner(&bin, &certs, "127.0.0.1:0");
    let topology = MachineBuilder::new(2, 1, 32, 2)
        .gpus_per_numa(4)
        .hcas_per_numa(2)
        .build();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let registered = Arc::new(AtomicUsize::new(0));
    let target = Arc::new(std::sync::Mutex::new(addr));
    rt.block_on(async {
        // A few UDP sockets shared by many connections, as one agent host would not do
        // but a harness may.
        let endpoints: Vec<quinn::Endpoint> = (0..8)
            .map(|_| quinn::Endpoint::client(any_addr_for(addr)).unwrap())
            .collect();
        for (i, node) in nodes.iter().enumerate() {
            let material = TlsMaterial::load(&CertPaths::node(&certs, node)).unwrap();
            let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(client_config(&material).unwrap()).unwrap();
            let mut config = quinn::ClientConfig::new(Arc::new(crypto));
            let mut transport = quinn::TransportConfig::default();
            transport.keep_alive_interval(Some(Duration::from_secs(10)));
            config.transport_config(Arc::new(transport));
            tokio::spawn(agent(
                endpoints[i % endpoints.len()].clone(),
                config,
                target.clone(),
                node.clone(),
                topology.clone(),
                registered.clone(),
            ));
        }
        let start = Instant::now();
        while registered.load(Ordering::SeqCst) < n {
            assert!(start.elapsed() < Duration::from_secs(300), "registration stalled");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!(
            "agent_load: {n} agents registered in {:.2} s (first start)",
            start.elapsed().as_secs_f64()
        );
        // Steady state: heartbeats every second.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (c0, _) = cpu_and_rss(planner.id());
        let window = Duration::from_secs(20);
        tokio::time::sleep(window).await;
        let (c1, rss) = cpu_and_rss(planner.id());
        let ticks_per_sec = 100.0; // Linux USER_HZ
        let share = (c1 - c0) as f64 / ticks_per_sec / window.as_secs_f64();
        println!(
            "agent_load: {n} agents heartbeating every 1 s: planner CPU {:.1} % of one core, RSS {:.1} MiB",
            share * 100.0,
            rss as f64 / 1024.0
        );

        // Restart the planner on the same port; the agents find it again by themselves.
        let _ = Command::new("kill").args(["-TERM", &planner.id().to_string()]).status();
        let _ = planner.wait();
        registered.store(0, Ordering::SeqCst);
        let restart = Instant::now();
        let (p2, _) = start_planner(&bin, &certs, &addr.to_string());
        planner = p2;
        let up = restart.elapsed();
        while registered.load(Ordering::SeqCst) < n {
            assert!(restart.elapsed() < Duration::from_secs(300), "re-registration stalled");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let took = restart.elapsed();
        let (ticks, _) = cpu_and_rss(planner.id());
        println!(
            "agent_load: all {n} agents re-registered {:.2} s after the planner restarted \
             (listening after {:.2} s; planner CPU meanwhile {:.0} % of one core)",
            took.as_secs_f64(),
            up.as_secs_f64(),
            ticks as f64 / 100.0 / took.as_secs_f64() * 100.0
        );
        let (_, rss) = cpu_and_rss(planner.id());
        println!("agent_load: RSS after re-registration {:.1} MiB", rss as f64 / 1024.0);
    });
    let _ = planner.kill();
    let _ = planner.wait();
}
