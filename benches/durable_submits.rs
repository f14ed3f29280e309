//! Durable submits (issue 14): acknowledged submits per second from 32 concurrent
//! clients, each on its own QUIC connection sending one job per request and waiting for
//! the answer, against the release planner with its embedded store on this machine's
//! disk. A submit is answered only once its job is committed (group commit: one
//! transaction — two `fdatasync` calls, redb's pages then its header — for all that
//! arrived while the last was written).
//!
//! Reports submits/s, latency percentiles, and the planner's commits per second from its
//! log (each commit is two `fdatasync` calls on the store file: `strace -c -f -p PID`). `cargo bench --bench durable_submits`
//! (`CLIENTS=32 PER_CLIENT=600` by default). Not a criterion bench: it measures a
//! running system.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{daemon, env_or};
use std::io::Read;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use hyperplan_net::certs::CertPaths;
use hyperplan_net::frame::{DEFAULT_MAX_FRAME, read_frame, write_frame};
use hyperplan_net::messages::{Hello, PROTOCOL_VERSION, Request, RequestCommand, Response, Role};
use hyperplan_net::tls::TlsMaterial;

/// One client: connects, then submits `n` jobs one after another; returns each latency.
async fn client(addr: SocketAddr, certs: &Path, user: &str, prefix: &str, n: usize) -> Vec<Duration> {
    let material = TlsMaterial::load(&CertPaths::user(certs, user)).unwrap();
    let endpoint = hyperplan_net::client_endpoint(hyperplan_net::tls::any_addr_for(addr), &material).unwrap();
    let connection = hyperplan_net::connect(&endpoint, addr).await.unwrap();
    let (mut send, mut recv) = connection.open_bi().await.unwrap();
    write_frame(&mut send, &Hello::new(Role::Client, user), DEFAULT_MAX_FRAME)
        .await
        .unwrap();
    let hello: Hello = read_frame(&mut recv, DEFAULT_MAX_FRAME).await.unwrap().unwrap();
    assert_eq!(hello.version, PROTOCOL_VERSION);
    let mut latencies = Vec::with_capacity(n);
    for i in 0..n {
        let text = format!(
            "name: {prefix}-{i}\ntasks:\n  - name: t\n    replicas: 1\n    resources: {{cpu: 1}}\n    command: [\"true\"]\n"
        );
        let command = RequestCommand::Submit {
            file_name: "job.yaml".into(),
            text,
            submit_dir: Some("/tmp".into()),
            hold: false,
            begin: None,
            array: None,
            dependency: None,
            account: None,
        };
        let t = Instant::now();
        write_frame(&mut send, &Request { id: i as u64, command }, DEFAULT_MAX_FRAME)
            .await
            .unwrap();
        let r: Response = read_frame(&mut recv, 1 << 24).await.unwrap().unwrap();
        latencies.push(t.elapsed());
        assert!(r.result.is_ok(), "{:?}", r.result);
    }
    connection.close(0u32.into(), b"");
    latencies
}

fn main() {
    let clients = env_or("CLIENTS", 32);
    let per_client = env_or("PER_CLIENT", 600);
    let planner_bin = daemon("hyperplan-planner", "hyperplan-planner");
    let (dir, certs, _) = common::bench_dir();
    let config = dir.path().join("planner.toml");
    std::fs::write(&config, "[limits]\nmaxJobsPerUser = 1000000\n").unwrap();
    let store = dir.path().join("state.redb");
    let log = dir.path().join("planner.log");
    let mut planner = common::planner(&planner_bin, &certs, &config, &store)
        .env("RUST_LOG", "warn,hyperplan_planner::store=info")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let addr: SocketAddr = common::listening(&mut planner).parse().unwrap();

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let mut latencies: Vec<Duration> = runtime.block_on(async {
        let mut handles = Vec::new();
        for k in 0..clients {
            let certs = certs.clone();
            handles.push(tokio::spawn(async move {
                client(addr, &certs, "bench", &format!("c{k}"), per_client).await
            }));
        }
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.await.unwrap());
        }
        all
    });
    let elapsed = started.elapsed();
    // The writer logs its commits when it stops.
    let _ = Command::new("kill").args(["-TERM", &planner.id().to_string()]).status();
    let _ = planner.wait();
    let mut text = String::new();
    std::fs::File::open(&log).unwrap().read_to_string(&mut text).unwrap();
    let commits: u64 = text
        .lines()
        .filter(|l| l.contains("store: committed"))
        .filter_map(|l| {
            l.split("commits=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    latencies.sort();
    let n = latencies.len();
    let pct = |p: f64| latencies[((n as f64 * p) as usize).min(n - 1)].as_secs_f64() * 1e3;
    println!(
        "durable submits: {n} from {clients} clients in {:.2} s: {:.0} submits/s; latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        elapsed.as_secs_f64(),
        n as f64 / elapsed.as_secs_f64(),
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
    println!(
        "store commits (two fdatasync each): {commits} in {:.2} s: {:.0} per second, {:.1} submits per commit",
        elapsed.as_secs_f64(),
        commits as f64 / elapsed.as_secs_f64(),
        n as f64 / commits.max(1) as f64
    );
}
