//! Scale harness for the planner daemon (issues 5 and 26): many simulated agents, each
//! its own QUIC connection with its own node certificate, registering a two-socket
//! machine and heartbeating every second against the real release `hyperplan-planner`.
//!
//! The agents are spread over worker processes (this binary again, started with
//! `AGENT_LOAD_WORKER=<first>:<count>:<planner addr>:<cert dir>`), each with its own
//! single-threaded tokio runtime and a few UDP endpoints its connections share. A worker
//! builds its agents' TLS configurations, says `ready`, waits for `go` on its stdin, and
//! writes a status line (heartbeats sent, registrations, failures, agents registered per
//! planner epoch) every 100 ms; it exits when its stdin closes.
//!
//! Phases, each with the planner's CPU share, its threads, VmRSS and VmHWM, the harness's
//! own CPU and the UDP drops of the planner's socket:
//! 1. first registration of all agents;
//! 2. a steady window (20 s) of heartbeats every second, with the heartbeats the workers
//!    actually sent per second and the NotReady lines in the planner's log;
//! 3. `kill -9` of the planner, a start on the same port with the same durable store,
//!    and the time until every agent registered again (at the new epoch).
//!
//! `cargo bench --bench agent_load` (10,000 agents). Environment:
//! - `AGENTS` (10000); `AGENT_LOAD_WORKERS` (one per 2,500 agents);
//! - `AGENT_LOAD_INFLIGHT`: registrations in flight per worker (0, the default: no limit,
//!   every agent at once like real agents after a planner restart);
//! - `AGENT_LOAD_WINDOW` (20 s), `AGENT_LOAD_STALL` (240 s: a phase that has not
//!   registered every agent by then reports how far it got and goes on);
//! - `PLANNER_CPUS=1` runs the planner under `taskset -c 1` (run the harness itself with
//!   `taskset -c 0`); `PLANNER_LOG` (`warn`): its RUST_LOG, its log in
//!   `target/agent_load-planner.log`;
//! - `AGENT_LOAD_RMEM_DEFAULT=<bytes>`: net.core.rmem_default for the run (the planner
//!   leaves its socket's receive buffer at that default), restored at the end.
//!
//! Node certificates are cached in `target/agent_load-certs-<N>` and reused when present.
//! Not a criterion bench: it measures a running system.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Seek, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use hyperplan_core::testing::MachineBuilder;
use hyperplan_net::certs::{CertPaths, init_ca, issue_node, issue_planner};
use hyperplan_net::messages::{AgentMessage, Hello, PlannerToAgent, Role};
use hyperplan_net::tls::{CLIENT_IDLE_TIMEOUT, KEEP_ALIVE, TlsMaterial, any_addr_for, client_config};
use hyperplan_net::{read_frame, topology_hash, write_frame};

const WORKER_ENV: &str = "AGENT_LOAD_WORKER";
/// Linux USER_HZ: the unit of utime and stime in /proc/PID/stat.
const TICKS_PER_SEC: f64 = 100.0;
/// UDP endpoints per worker; its connections are spread over them.
const ENDPOINTS_PER_WORKER: usize = 4;

fn main() {
    if let Ok(spec) = std::env::var(WORKER_ENV) {
        worker::run(&spec);
        return;
    }
    // `cargo bench` passes `--bench`; a filter argument that is not ours skips the run.
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && a != "agent_load")
    {
        return;
    }
    coordinator::run();
}

/// What the processes read from /proc.
mod sys {
    use std::collections::BTreeMap;

    /// utime + stime of `pid` (or "self"), in clock ticks.
    pub fn ticks(pid: &str) -> u64 {
        stat_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default())
    }

    fn stat_ticks(stat: &str) -> u64 {
        let after = stat.rsplit(')').next().unwrap_or("");
        let f: Vec<&str> = after.split_whitespace().collect();
        f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
            + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
    }

    /// A field of /proc/PID/status in KiB (VmRSS, VmHWM).
    pub fn status_kib(pid: u32, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// Every thread of `pid`: "name/tid" → ticks.
    pub fn threads(pid: u32) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return out;
        };
        for task in dir.filter_map(|e| e.ok()) {
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            let name = stat
                .split_once('(')
                .and_then(|(_, r)| r.rsplit_once(')'))
                .map_or("?", |(n, _)| n);
            let tid = task.file_name().to_string_lossy().into_owned();
            out.insert(format!("{name}/{tid}"), stat_ticks(&stat));
        }
        out
    }

    /// Udp RcvbufErrors and InErrors of this network namespace (/proc/net/snmp).
    pub fn udp_errors() -> (u64, u64) {
        let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
        let rows: Vec<&str> = snmp.lines().filter(|l| l.starts_with("Udp:")).collect();
        let (Some(names), Some(values)) = (rows.first(), rows.get(1)) else {
            return (0, 0);
        };
        let field = |name: &str| {
            let i = names.split_whitespace().position(|n| n == name)?;
            values.split_whitespace().nth(i)?.parse().ok()
        };
        (field("RcvbufErrors").unwrap_or(0), field("InErrors").unwrap_or(0))
    }

    /// The drops counter of every IPv4 UDP socket, by local port (/proc/net/udp).
    pub fn udp_drops() -> BTreeMap<u16, u64> {
        let table = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
        let mut out = BTreeMap::new();
        for line in table.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let port = f
                .get(1)
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            let drops = f.get(12).and_then(|d| d.parse::<u64>().ok());
            if let (Some(port), Some(drops)) = (port, drops) {
                *out.entry(port).or_default() += drops;
            }
        }
        out
    }

    /// A sysctl under /proc/sys, e.g. "net/core/rmem_max".
    pub fn sysctl(name: &str) -> String {
        std::fs::read_to_string(format!("/proc/sys/{name}"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "?".into())
    }

    /// "Max open files" of `pid` (soft/hard).
    pub fn nofile(pid: &str) -> String {
        let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap_or_default();
        limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                format!("{}/{}", f.get(3).unwrap_or(&"?"), f.get(4).unwrap_or(&"?"))
            })
            .unwrap_or_else(|| "?".into())
    }
}

/// The simulated agents of one worker process.
mod worker {
    use super::*;

    /// What a worker's agents did, written to its stdout every 100 ms.
    #[derive(Default)]
    struct Stats {
        heartbeats: AtomicU64,
        registrations: AtomicU64,
        failures: AtomicU64,
        lost: AtomicU64,
        /// Agents registered now, by the epoch of the planner that registered them.
        by_epoch: Mutex<BTreeMap<u64, i64>>,
        /// The first few failure reasons, for stderr.
        told: AtomicU64,
    }

    impl Stats {
        fn line(&self) -> String {
            let epochs: Vec<String> = self
                .by_epoch
                .lock()
                .unwrap()
                .iter()
                .filter(|(_, c)| **c != 0)
                .map(|(e, c)| format!("{e}:{c}"))
                .collect();
            format!(
                "status {} {} {} {} {}",
                self.heartbeats.load(Ordering::Relaxed),
                self.registrations.load(Ordering::Relaxed),
                self.failures.load(Ordering::Relaxed),
                self.lost.load(Ordering::Relaxed),
                if epochs.is_empty() {
                    "-".into()
                } else {
                    epochs.join(",")
                }
            )
        }

        fn tell(&self, node: &str, what: &str) {
            if self.told.fetch_add(1, Ordering::Relaxed) < 5 {
                eprintln!("agent_load worker: {node}: {what}");
            }
        }
    }

    /// `first:count:ip:port:cert dir`.
    pub fn run(spec: &str) {
        let mut f = spec.splitn(5, ':');
        let first: usize = f.next().unwrap().parse().unwrap();
        let count: usize = f.next().unwrap().parse().unwrap();
        let addr: SocketAddr = format!("{}:{}", f.next().unwrap(), f.next().unwrap()).parse().unwrap();
        let certs = PathBuf::from(f.next().unwrap());
        let inflight: usize = common::env_or("AGENT_LOAD_INFLIGHT", 0);

        // `go` on stdin starts the agents; end of file (the harness ended, however it
        // ended) ends this process.
        let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let mut go = Some(go_tx);
            for line in std::io::stdin().lock().lines() {
                match line {
                    Ok(l) if l.trim() == "go" => {
                        if let Some(tx) = go.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            std::process::exit(0);
        });

        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut ports = Vec::new();
            let endpoints: Vec<quinn::Endpoint> = (0..ENDPOINTS_PER_WORKER)
                .map(|_| {
                    let socket = std::net::UdpSocket::bind(any_addr_for(addr)).unwrap();
                    // The most net.core.rmem_max allows: a worker's socket carries a
                    // thousand connections' handshakes at once.
                    let state = quinn::udp::UdpSocketState::new((&socket).into()).unwrap();
                    let _ = state.set_recv_buffer_size((&socket).into(), 16 << 20);
                    ports.push(socket.local_addr().unwrap().port());
                    let runtime = quinn::default_runtime().unwrap();
                    quinn::Endpoint::new(quinn::EndpointConfig::default(), None, socket, runtime).unwrap()
                })
                .collect();
            let topology = Arc::new(
                MachineBuilder::new(2, 1, 32, 2)
                    .gpus_per_numa(4)
                    .hcas_per_numa(2)
                    .build(),
            );
            let hash = topology_hash(&topology);
            let mut transport = quinn::TransportConfig::default();
            // The real agent's transport (`hyperplan_net::tls::client_endpoint`).
            transport.max_idle_timeout(quinn::IdleTimeout::try_from(CLIENT_IDLE_TIMEOUT).ok());
            transport.keep_alive_interval(Some(KEEP_ALIVE));
            let transport = Arc::new(transport);
            let agents: Vec<(String, quinn::ClientConfig)> = (first..first + count)
                .map(|i| {
                    let node = node_name(i);
                    let material = TlsMaterial::load(&CertPaths::node(&certs, &node)).unwrap();
                    let crypto =
                        quinn::crypto::rustls::QuicClientConfig::try_from(client_config(&material).unwrap()).unwrap();
                    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
                    config.transport_config(transport.clone());
                    (node, config)
                })
                .collect();
            let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
            println!("ready {}", ports.join(","));
            if go_rx.await.is_err() {
                return;
            }
            let stats = Arc::new(Stats::default());
            let gate = (inflight > 0).then(|| Arc::new(tokio::sync::Semaphore::new(inflight)));
            for (i, (node, config)) in agents.into_iter().enumerate() {
                tokio::spawn(agent(
                    endpoints[i % endpoints.len()].clone(),
                    config,
                    addr,
                    node,
                    topology.clone(),
                    hash,
                    stats.clone(),
                    gate.clone(),
                ));
            }
            let mut out = std::io::stdout();
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if writeln!(out, "{}", stats.line()).and_then(|()| out.flush()).is_err() {
                    std::process::exit(0);
                }
            }
        });
    }

    /// One simulated agent: connect, register, heartbeat every second; when the link
    /// fails, wait about half a second and start over (the real agent backs off; this
    /// wants the fastest re-registration the planner allows).
    #[allow(clippy::too_many_arguments)]
    async fn agent(
        endpoint: quinn::Endpoint,
        config: quinn::ClientConfig,
        addr: SocketAddr,
        node: String,
        topology: Arc<hyperplan_shared::topology::NodeTopology>,
        hash: u64,
        stats: Arc<Stats>,
        gate: Option<Arc<tokio::sync::Semaphore>>,
    ) {
        // A different retry delay per agent (400–600 ms), so retries do not come in waves.
        let jitter = node
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
            % 200;
        loop {
            let permit = match &gate {
                Some(g) => Some(g.clone().acquire_owned().await.unwrap()),
                None => None,
            };
            let attempt = async {
                let conn = endpoint
                    .connect_with(config.clone(), addr, hyperplan_net::certs::PLANNER_SERVER_NAME)
                    .map_err(|e| format!("connect: {e}"))?
                    .await
                    .map_err(|e| format!("handshake: {e}"))?;
                let (mut send, mut recv) = conn.open_bi().await.map_err(|e| format!("open: {e}"))?;
                write_frame(&mut send, &Hello::new(Role::Agent, node.clone()), 1 << 24)
                    .await
                    .map_err(|e| format!("hello: {e}"))?;
                let _: Hello = read_frame(&mut recv, 1 << 24)
                    .await
                    .map_err(|e| format!("hello reply: {e}"))?
                    .ok_or("no hello reply")?;
                let register = AgentMessage::Register {
                    version: hyperplan_net::PROTOCOL_VERSION,
                    node: node.clone(),
                    labels: Default::default(),
                    topology: (*topology).clone(),
                    topology_hash: hash,
                    confinement: None,
                    advertise_address: None,
                    epoch: 0,
                };
                write_frame(&mut send, &register, 1 << 24)
                    .await
                    .map_err(|e| format!("register: {e}"))?;
                let reply: Option<PlannerToAgent> = read_frame(&mut recv, 1 << 24)
                    .await
                    .map_err(|e| format!("registered: {e}"))?;
                match reply {
                    Some(PlannerToAgent::Registered { epoch, .. }) => Ok((conn, send, recv, epoch)),
                    other => Err(format!("expected Registered, got {other:?}")),
                }
            };
            let result: Result<_, String> = attempt.await;
            drop(permit);
            match result {
                Ok((conn, mut send, _recv, epoch)) => {
                    stats.registrations.fetch_add(1, Ordering::Relaxed);
                    *stats.by_epoch.lock().unwrap().entry(epoch).or_default() += 1;
                    // `_recv` stays open: dropping it would tell the planner to stop sending.
                    let closed = conn.closed();
                    tokio::pin!(closed);
                    let start = tokio::time::Instant::now() + Duration::from_secs(1);
                    let mut tick = tokio::time::interval_at(start, Duration::from_secs(1));
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    let mut seq = 0;
                    loop {
                        tokio::select! {
                            _ = &mut closed => break,
                            _ = tick.tick() => {
                                seq += 1;
                                let hb = AgentMessage::Heartbeat {
                                    seq,
                                    load: 0.5,
                                    free_memory: vec![(0, 1 << 30), (1, 1 << 30)],
                                    running_tasks: vec![],
                                    ports_in_use: vec![],
                                    strained: None,
                                    health: None,
                                };
                                if write_frame(&mut send, &hb, 1 << 24).await.is_err() {
                                    break;
                                }
                                stats.heartbeats.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    *stats.by_epoch.lock().unwrap().entry(epoch).or_default() -= 1;
                    stats.lost.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    stats.failures.fetch_add(1, Ordering::Relaxed);
                    stats.tell(&node, &e);
                }
            }
            tokio::time::sleep(Duration::from_millis(400 + jitter)).await;
        }
    }
}

fn node_name(i: usize) -> String {
    format!("sim{i:05}")
}

/// The harness: certificates, the planner, the workers, the phases and their figures.
mod coordinator {
    use super::*;

    /// The latest status line of one worker.
    #[derive(Clone, Default)]
    struct WorkerStatus {
        heartbeats: u64,
        registrations: u64,
        failures: u64,
        lost: u64,
        by_epoch: BTreeMap<u64, i64>,
    }

    struct Worker {
        child: Child,
        stdin: Option<ChildStdin>,
        ports: Vec<u16>,
        status: Arc<Mutex<WorkerStatus>>,
    }

    /// Every child this harness started; all are killed (SIGKILL, by pid) and reaped when
    /// it ends, panics included. They also carry PR_SET_PDEATHSIG: killed with us.
    #[derive(Default)]
    struct Children {
        planner: Option<Child>,
        workers: Vec<Worker>,
        /// A sysctl to restore: path and old value.
        restore: Option<(String, String)>,
    }

    impl Drop for Children {
        fn drop(&mut self) {
            for w in &mut self.workers {
                drop(w.stdin.take());
                let _ = w.child.kill();
                let _ = w.child.wait();
            }
            if let Some(p) = &mut self.planner {
                let _ = p.kill();
                let _ = p.wait();
            }
            if let Some((path, old)) = self.restore.take() {
                let _ = std::fs::write(&path, &old);
                eprintln!("agent_load: restored {path} to {old}");
            }
        }
    }

    /// The child dies with this thread (the main thread: it spawns every child).
    fn die_with_parent(cmd: &mut Command) {
        use std::os::unix::process::CommandExt;
        let parent = std::process::id() as i32;
        // SAFETY: prctl and getppid are async-signal-safe and touch no memory of ours;
        // the closure allocates nothing.
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
    }

    fn target_dir() -> PathBuf {
        // target/release/deps/agent_load-HASH
        let exe = std::env::current_exe().unwrap();
        exe.ancestors().nth(3).unwrap().to_path_buf()
    }

    /// The CA, the planner's and `n` node certificates: cached in
    /// `target/agent_load-certs-N` (complete once `complete` exists), issued on every core.
    fn certificates(n: usize) -> PathBuf {
        let dir = target_dir().join(format!("agent_load-certs-{n}"));
        let certs = dir.join("certs");
        if dir.join("complete").exists() {
            eprintln!(
                "agent_load: reusing {n} node certificates from {} (remove it to issue new ones)",
                dir.display()
            );
            return certs;
        }
        let _ = std::fs::remove_dir_all(&dir);
        let t = Instant::now();
        init_ca(&certs, false).unwrap();
        issue_planner(&certs, &[]).unwrap();
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        std::thread::scope(|s| {
            for t in 0..threads {
                let certs = &certs;
                s.spawn(move || {
                    for i in (t..n).step_by(threads) {
                        issue_node(certs, &node_name(i)).unwrap();
                    }
                });
            }
        });
        std::fs::write(dir.join("complete"), n.to_string()).unwrap();
        eprintln!(
            "agent_load: issued {n} node certificates in {:.1} s on {threads} threads, cached in {}",
            t.elapsed().as_secs_f64(),
            dir.display()
        );
        certs
    }

    /// The planner on `listen` with the durable store `store`; its log appended to `log`.
    fn start_planner(bin: &Path, certs: &Path, store: &Path, log: &Path, listen: &str) -> (Child, SocketAddr) {
        let mut cmd = match std::env::var("PLANNER_CPUS") {
            Ok(cpus) => {
                let mut c = Command::new("taskset");
                c.args(["-c", &cpus]).arg(bin);
                c
            }
            Err(_) => Command::new(bin),
        };
        let log = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
        cmd.args(["--listen", listen, "--config", "/dev/null", "--cert-dir"])
            .arg(certs)
            .arg("--store")
            .arg(store)
            .args(["--heartbeat-interval", "1", "--missed-heartbeats", "3"])
            .env(
                "RUST_LOG",
                std::env::var("PLANNER_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        die_with_parent(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap_or_else(|_| panic!("unexpected first line from the planner: {line:?}"));
        (child, addr)
    }

    fn start_worker(first: usize, count: usize, addr: SocketAddr, certs: &Path) -> Worker {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.env(WORKER_ENV, format!("{first}:{count}:{addr}:{}", certs.display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        die_with_parent(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut ready = String::new();
        out.read_line(&mut ready).unwrap();
        let ports = ready
            .trim()
            .strip_prefix("ready ")
            .unwrap_or_else(|| panic!("worker {first}: expected ready, got {ready:?}"))
            .split(',')
            .map(|p| p.parse().unwrap())
            .collect();
        let status = Arc::new(Mutex::new(WorkerStatus::default()));
        let shared = status.clone();
        std::thread::spawn(move || {
            for line in out.lines() {
                let Ok(line) = line else { break };
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.len() != 6 || f[0] != "status" {
                    continue;
                }
                let by_epoch = f[5]
                    .split(',')
                    .filter_map(|p| p.split_once(':'))
                    .filter_map(|(e, c)| Some((e.parse().ok()?, c.parse().ok()?)))
                    .collect();
                *shared.lock().unwrap() = WorkerStatus {
                    heartbeats: f[1].parse().unwrap_or(0),
                    registrations: f[2].parse().unwrap_or(0),
                    failures: f[3].parse().unwrap_or(0),
                    lost: f[4].parse().unwrap_or(0),
                    by_epoch,
                };
            }
        });
        Worker {
            child,
            stdin,
            ports,
            status,
        }
    }

    /// The workers' statuses summed.
    fn total(workers: &[Worker]) -> WorkerStatus {
        let mut t = WorkerStatus::default();
        for w in workers {
            let s = w.status.lock().unwrap().clone();
            t.heartbeats += s.heartbeats;
            t.registrations += s.registrations;
            t.failures += s.failures;
            t.lost += s.lost;
            for (e, c) in s.by_epoch {
                *t.by_epoch.entry(e).or_default() += c;
            }
        }
        t
    }

    /// Agents registered now with a planner of epoch > `after`, and the newest epoch.
    fn registered_after(workers: &[Worker], after: u64) -> (usize, u64) {
        let t = total(workers);
        let n = t.by_epoch.range(after + 1..).map(|(_, c)| *c).sum::<i64>().max(0) as usize;
        (n, t.by_epoch.keys().next_back().copied().unwrap_or(0))
    }

    /// CPU ticks of the planner, its threads, the workers and this process at one moment.
    struct Snapshot {
        at: Instant,
        planner: u64,
        threads: BTreeMap<String, u64>,
        harness: u64,
        status: WorkerStatus,
        rcvbuf_errors: u64,
        drops: BTreeMap<u16, u64>,
    }

    fn snapshot(planner: u32, workers: &[Worker]) -> Snapshot {
        let harness = workers
            .iter()
            .map(|w| sys::ticks(&w.child.id().to_string()))
            .sum::<u64>()
            + sys::ticks("self");
        Snapshot {
            at: Instant::now(),
            planner: sys::ticks(&planner.to_string()),
            threads: sys::threads(planner),
            harness,
            status: total(workers),
            rcvbuf_errors: sys::udp_errors().0,
            drops: sys::udp_drops(),
        }
    }

    /// What happened between two snapshots, as lines of the report.
    fn between(
        name: &str,
        a: &Snapshot,
        b: &Snapshot,
        planner: u32,
        planner_port: u16,
        worker_ports: &[u16],
    ) -> Vec<String> {
        let secs = b.at.duration_since(a.at).as_secs_f64();
        let pct = |ticks: u64| ticks as f64 / TICKS_PER_SEC / secs * 100.0;
        let mut threads: Vec<(String, u64)> = b
            .threads
            .iter()
            .map(|(t, v)| (t.clone(), v.saturating_sub(a.threads.get(t).copied().unwrap_or(0))))
            .filter(|(_, d)| *d > 0)
            .collect();
        threads.sort_by_key(|t| std::cmp::Reverse(t.1));
        let threads: Vec<String> = threads
            .iter()
            .take(6)
            .map(|(t, d)| format!("{t} {:.0} %", pct(*d)))
            .collect();
        let drop_delta = |port: u16| {
            b.drops
                .get(&port)
                .copied()
                .unwrap_or(0)
                .saturating_sub(a.drops.get(&port).copied().unwrap_or(0))
        };
        let worker_drops: u64 = worker_ports.iter().map(|p| drop_delta(*p)).sum();
        vec![
            format!(
                "{name}: {secs:.1} s; planner CPU {:.1} % of one core ({:.1} CPU-s), VmRSS {:.1} MiB, VmHWM {:.1} MiB; harness CPU {:.1} % of one core",
                pct(b.planner.saturating_sub(a.planner)),
                b.planner.saturating_sub(a.planner) as f64 / TICKS_PER_SEC,
                sys::status_kib(planner, "VmRSS:") as f64 / 1024.0,
                sys::status_kib(planner, "VmHWM:") as f64 / 1024.0,
                pct(b.harness.saturating_sub(a.harness)),
            ),
            format!("{name}: planner threads: {}", threads.join(", ")),
            format!(
                "{name}: heartbeats sent {:.0}/s; registrations {}, failed attempts {}, links lost {}; UDP drops: planner socket {}, worker sockets {}, RcvbufErrors (all sockets) {}",
                b.status.heartbeats.saturating_sub(a.status.heartbeats) as f64 / secs,
                b.status.registrations.saturating_sub(a.status.registrations),
                b.status.failures.saturating_sub(a.status.failures),
                b.status.lost.saturating_sub(a.status.lost),
                drop_delta(planner_port),
                worker_drops,
                b.rcvbuf_errors.saturating_sub(a.rcvbuf_errors),
            ),
        ]
    }

    /// Waits until `n` agents are registered with a planner of epoch > `after`, or `stall`
    /// passed: the time, the times to 50/90/99 % and how many got there.
    fn wait_registered(
        workers: &[Worker],
        n: usize,
        after: u64,
        since: Instant,
        stall: Duration,
        lost_base: Option<u64>,
    ) -> (Duration, Vec<String>, usize, u64) {
        let mut marks = Vec::new();
        let fractions = [0.5, 0.9, 0.99];
        let mut next = 0;
        // After a restart: when the agents noticed (their links failed).
        let mut lost_marks = Vec::new();
        let mut lost_next = 0;
        let mut last_print = Instant::now();
        loop {
            let (got, epoch) = registered_after(workers, after);
            if let Some(base) = lost_base {
                let lost = total(workers).lost.saturating_sub(base);
                // quinn sends at most one stateless reset per 20 ms: a few agents learn
                // of the restart from it, the others when their link idles out.
                let fractions = [0.01, 0.1, 0.5, 1.0];
                while lost_next < fractions.len() && lost as f64 >= fractions[lost_next] * n as f64 {
                    lost_marks.push(format!(
                        "{:.0} % of the old links lost at {:.2} s",
                        fractions[lost_next] * 100.0,
                        since.elapsed().as_secs_f64()
                    ));
                    lost_next += 1;
                }
            }
            while next < fractions.len() && got as f64 >= fractions[next] * n as f64 {
                marks.push(format!(
                    "{:.0} % at {:.2} s",
                    fractions[next] * 100.0,
                    since.elapsed().as_secs_f64()
                ));
                next += 1;
            }
            if got >= n || since.elapsed() >= stall {
                marks.extend(lost_marks);
                return (since.elapsed(), marks, got, epoch);
            }
            if last_print.elapsed() >= Duration::from_secs(10) {
                eprintln!(
                    "agent_load: {got} of {n} registered after {:.0} s",
                    since.elapsed().as_secs_f64()
                );
                last_print = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Lines of the planner's log from `offset` on with `word`, and the new offset.
    fn log_lines(log: &Path, offset: u64, word: &str) -> (usize, u64) {
        let Ok(mut f) = std::fs::File::open(log) else {
            return (0, offset);
        };
        let _ = f.seek(std::io::SeekFrom::Start(offset));
        let mut text = String::new();
        let _ = f.read_to_string(&mut text);
        (
            text.lines().filter(|l| l.contains(word)).count(),
            offset + text.len() as u64,
        )
    }

    pub fn run() {
        let n: usize = common::env_or("AGENTS", 10_000);
        let workers_n: usize = common::env_or("AGENT_LOAD_WORKERS", n.div_ceil(2500).max(1));
        let window = Duration::from_secs(common::env_or("AGENT_LOAD_WINDOW", 20));
        let stall = Duration::from_secs(common::env_or("AGENT_LOAD_STALL", 240));
        let inflight: usize = common::env_or("AGENT_LOAD_INFLIGHT", 0);
        let mut children = Children::default();
        let mut report: Vec<String> = Vec::new();

        if let Ok(bytes) = std::env::var("AGENT_LOAD_RMEM_DEFAULT") {
            let path = "/proc/sys/net/core/rmem_default".to_string();
            let old = sys::sysctl("net/core/rmem_default");
            std::fs::write(&path, bytes.trim()).unwrap();
            eprintln!(
                "agent_load: net.core.rmem_default {old} -> {} for this run",
                bytes.trim()
            );
            children.restore = Some((path, old));
        }
        let limits = format!(
            "limits: open files {} (soft/hard); net.core.rmem_max {}, rmem_default {}, wmem_default {}; the planner's UDP socket keeps rmem_default, the workers' ask for 16 MiB (capped at rmem_max)",
            sys::nofile("self"),
            sys::sysctl("net/core/rmem_max"),
            sys::sysctl("net/core/rmem_default"),
            sys::sysctl("net/core/wmem_default"),
        );
        eprintln!("agent_load: {limits}");

        let certs = certificates(n);
        let run_dir = tempfile::tempdir_in(target_dir()).unwrap();
        let store = run_dir.path().join("state.redb");
        let log = target_dir().join("agent_load-planner.log");
        let _ = std::fs::remove_file(&log);
        let bin = common::daemon("hyperplan-planner", "hyperplan-planner");

        let t = Instant::now();
        let (planner, addr) = start_planner(&bin, &certs, &store, &log, "127.0.0.1:0");
        eprintln!(
            "agent_load: planner {} (pid {}) listening on {addr} after {:.2} s",
            bin.display(),
            planner.id(),
            t.elapsed().as_secs_f64()
        );
        let mut pid = planner.id();
        children.planner = Some(planner);
        let port = addr.port();

        // Workers: each builds its agents' TLS configurations, then says ready.
        let t = Instant::now();
        let per = n.div_ceil(workers_n);
        for w in 0..workers_n {
            let first = w * per;
            let count = per.min(n.saturating_sub(first));
            if count > 0 {
                children.workers.push(start_worker(first, count, addr, &certs));
            }
        }
        let workers = &children.workers;
        let worker_ports: Vec<u16> = workers.iter().flat_map(|w| w.ports.clone()).collect();
        eprintln!(
            "agent_load: {} worker processes ready ({} agents each, {ENDPOINTS_PER_WORKER} UDP endpoints each, {}) in {:.1} s",
            workers.len(),
            per,
            if inflight == 0 {
                "no limit on registrations in flight".to_string()
            } else {
                format!("at most {inflight} registrations in flight per worker")
            },
            t.elapsed().as_secs_f64()
        );
        report.push(format!("{n} agents in {} worker processes, {limits}", workers.len()));

        // Phase 1: every agent registers.
        let a = snapshot(pid, workers);
        let start = Instant::now();
        for w in &children.workers {
            let mut stdin = w.stdin.as_ref().unwrap();
            writeln!(stdin, "go").unwrap();
        }
        let workers = &children.workers;
        let (took, marks, got, epoch1) = wait_registered(workers, n, 0, start, stall, None);
        let b = snapshot(pid, workers);
        report.push(if got >= n {
            format!(
                "first registration: all {n} agents registered in {:.2} s ({})",
                took.as_secs_f64(),
                marks.join(", ")
            )
        } else {
            format!(
                "first registration: STALLED, {got} of {n} registered after {:.0} s ({})",
                took.as_secs_f64(),
                marks.join(", ")
            )
        });
        report.extend(between("  registration", &a, &b, pid, port, &worker_ports));
        let (not_ready, _) = log_lines(&log, 0, "NotReady");
        report.push(format!(
            "  registration: NotReady lines in the planner's log {not_ready} (registered agents not heard for 3 s)"
        ));

        // Phase 2: heartbeats every second.
        std::thread::sleep(Duration::from_secs(3));
        let (_, mut log_at) = log_lines(&log, 0, "");
        let a = snapshot(pid, workers);
        eprintln!("agent_load: steady window of {} s begins", window.as_secs());
        let mut per_second = Vec::new();
        let mut last = a.status.heartbeats;
        while a.at.elapsed() < window {
            std::thread::sleep(Duration::from_secs(1));
            let now = total(workers).heartbeats;
            per_second.push(now - last);
            last = now;
        }
        let b = snapshot(pid, workers);
        let (not_ready, at) = log_lines(&log, log_at, "NotReady");
        log_at = at;
        let (still, _) = registered_after(workers, 0);
        report.push(format!(
            "steady, heartbeats every 1 s: {still} of {n} agents registered at the end; heartbeats sent per second min {} / max {}; NotReady lines in the planner's log {not_ready}",
            per_second.iter().min().unwrap_or(&0),
            per_second.iter().max().unwrap_or(&0),
        ));
        report.extend(between("  steady", &a, &b, pid, port, &worker_ports));

        // Phase 3: kill -9, start again on the same port with the same store.
        let a = snapshot(pid, workers);
        eprintln!("agent_load: kill -9 of the planner (pid {pid})");
        let killed = Instant::now();
        let mut old = children.planner.take().unwrap();
        old.kill().unwrap(); // SIGKILL
        let _ = old.wait();
        let (planner, _) = start_planner(&bin, &certs, &store, &log, &addr.to_string());
        let up = killed.elapsed();
        pid = planner.id();
        children.planner = Some(planner);
        let workers = &children.workers;
        // The new planner's ticks and its socket's drops start from zero.
        let mut a = Snapshot {
            planner: 0,
            threads: BTreeMap::new(),
            ..a
        };
        a.drops.remove(&port);
        let (took, marks, got, epoch2) = wait_registered(workers, n, epoch1, killed, stall, Some(a.status.lost));
        let b = snapshot(pid, workers);
        let (not_ready, _) = log_lines(&log, log_at, "NotReady");
        report.push(if got >= n {
            format!(
                "kill -9 and restart: all {n} agents registered again {:.2} s after the kill (epoch {epoch1} -> {epoch2}; listening again after {:.2} s; {}); NotReady lines since {not_ready}",
                took.as_secs_f64(),
                up.as_secs_f64(),
                marks.join(", ")
            )
        } else {
            format!(
                "kill -9 and restart: STALLED, {got} of {n} registered again after {:.0} s (listening again after {:.2} s; {})",
                took.as_secs_f64(),
                up.as_secs_f64(),
                marks.join(", ")
            )
        });
        report.extend(between("  re-registration", &a, &b, pid, port, &worker_ports));

        println!();
        for line in &report {
            println!("agent_load: {line}");
        }
        println!("agent_load: planner log: {}", log.display());
        drop(children);
    }
}
