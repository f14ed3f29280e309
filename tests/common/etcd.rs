//! A throwaway etcd on 127.0.0.1 (Debian's `etcd-server`) for the HA tests and the
//! failover bench: its own data directory and free ports, killed (by pid) on drop.
//! [`Etcd::start`] is `None`, with the reason printed, when there is no `etcd` binary;
//! [`Etcd::start_tls`] serves TLS only and asks clients for certificates, all from one
//! test CA made with `hyperplan_net::certs`. [`Cluster::start`] runs three members
//! (`--initial-cluster`), each killed by pid and started again on demand.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Etcd {
    child: Child,
    pub endpoint: String,
    pub dir: tempfile::TempDir,
    /// With [`Etcd::start_tls`]: the CA and a client certificate (`client.pem`, `.key`).
    pub tls: Option<hyperplan_net::certs::CertPaths>,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP port nobody listens on now (the kernel's pick, released at once).
fn free_port() -> u16 {
    free_ports::<1>()[0]
}

/// `N` different TCP ports nobody listens on now: all bound at once before any is
/// released, since the kernel may hand the port it just released out again (two
/// members on one port left a 3-member cluster with 2, which lost its quorum when the
/// test killed one).
fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<std::net::TcpListener> = (0..N)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    std::array::from_fn(|i| held[i].local_addr().unwrap().port())
}

/// The `etcd` binary: `$ETCD`, or `etcd` on PATH, or Debian's /usr/bin/etcd.
fn binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ETCD") {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/bin")])
        .map(|d| d.join("etcd"))
        .find(|p| p.is_file())
}

impl Etcd {
    /// Starts etcd and waits until it accepts connections; `None` (with the reason on
    /// stderr) when etcd is not installed (`make test` installs `etcd-server`).
    pub fn start() -> Option<Etcd> {
        Self::start_with(false)
    }

    /// As [`Etcd::start`], on `https://` with `--client-cert-auth`: its certificate for
    /// 127.0.0.1 and the client's (in `tls`) come from one CA in `certs/`.
    pub fn start_tls() -> Option<Etcd> {
        Self::start_with(true)
    }

    fn start_with(tls: bool) -> Option<Etcd> {
        use hyperplan_net::certs::{init_ca, issue_node, issue_planner};
        let Some(bin) = binary() else {
            eprintln!("SKIPPED: no etcd binary (install Debian's etcd-server, or set ETCD=/path/to/etcd)");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let mut client_files = None;
        let mut tls_args: Vec<std::ffi::OsString> = Vec::new();
        if tls {
            let certs = dir.path().join("certs");
            let ca = init_ca(&certs, false).unwrap();
            let server = issue_planner(&certs, &[]).unwrap();
            let node = issue_node(&certs, "client").unwrap();
            tls_args.extend(["--cert-file".into(), server.cert.into_os_string()]);
            tls_args.extend(["--key-file".into(), server.key.into_os_string()]);
            tls_args.extend(["--trusted-ca-file".into(), ca.cert.clone().into_os_string()]);
            tls_args.push("--client-cert-auth".into());
            client_files = Some(hyperplan_net::certs::CertPaths {
                ca: ca.cert,
                cert: node.cert,
                key: node.key,
            });
        }
        let scheme = if tls { "https" } else { "http" };
        // A port found free may be taken by another test's etcd before this one binds
        // it: then this etcd exits, and a new pair of ports is tried. Ready means its
        // own log says so (a port that answers may be someone else's).
        for attempt in 1..=5 {
            let [client, peer] = free_ports::<2>();
            let endpoint = format!("{scheme}://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let data = dir.path().join(format!("data-{attempt}"));
            let log = std::fs::File::create(dir.path().join("etcd.log")).unwrap();
            let child = Command::new(&bin)
                .args(&tls_args)
                .args(["--name", "test", "--data-dir"])
                .arg(&data)
                .args(["--listen-client-urls", &endpoint, "--advertise-client-urls", &endpoint])
                .args([
                    "--listen-peer-urls",
                    &peer_url,
                    "--initial-advertise-peer-urls",
                    &peer_url,
                ])
                .args(["--initial-cluster", &format!("test={peer_url}")])
                // Leases of 2 s need etcd's own timers well below that.
                .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap();
            let mut child = child;
            let log_path = dir.path().join("etcd.log");
            let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
            let start = Instant::now();
            loop {
                if log().contains("ready to serve client requests") && TcpStream::connect(("127.0.0.1", client)).is_ok()
                {
                    return Some(Etcd {
                        child,
                        endpoint,
                        dir,
                        tls: client_files,
                    });
                }
                if child.try_wait().unwrap().is_some() {
                    break; // its ports were taken: another pair
                }
                if start.elapsed() > Duration::from_secs(30) {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("etcd did not listen within 30 s: {}", log());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            eprintln!("etcd exited at start (attempt {attempt}): {}", log());
        }
        panic!("etcd would not start on free ports 5 times");
    }

    /// The `[store]` section of a planner on this etcd under `prefix` (with its TLS
    /// files when it serves TLS).
    pub fn store_toml(&self, prefix: &str) -> String {
        let mut text = format!(
            "[store]\nbackend = \"etcd\"\nendpoints = [\"{}\"]\nprefix = \"{prefix}\"\n",
            self.endpoint
        );
        if let Some(t) = &self.tls {
            text += &format!(
                "caFile = \"{}\"\ncertFile = \"{}\"\nkeyFile = \"{}\"\n",
                t.ca.display(),
                t.cert.display(),
                t.key.display()
            );
        }
        text
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }
}

/// Three etcd members on 127.0.0.1, each with its own data directory and free ports;
/// every member still running is killed (by pid) on drop.
pub struct Cluster {
    members: Vec<Member>,
    /// `http://127.0.0.1:PORT` of each member, in order.
    pub endpoints: Vec<String>,
    pub dir: tempfile::TempDir,
    bin: PathBuf,
    initial_cluster: String,
}

struct Member {
    name: String,
    client: u16,
    peer_url: String,
    child: Option<Child>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(mut c) = m.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

impl Cluster {
    /// Starts three members and waits until the cluster has a leader; `None` (with the
    /// reason on stderr) when etcd is not installed.
    pub fn start() -> Option<Cluster> {
        let Some(bin) = binary() else {
            eprintln!("SKIPPED: no etcd binary (install Debian's etcd-server, or set ETCD=/path/to/etcd)");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let ports = free_ports::<6>();
        let members: Vec<Member> = (0..3)
            .map(|i| Member {
                name: format!("m{i}"),
                client: ports[2 * i],
                peer_url: format!("http://127.0.0.1:{}", ports[2 * i + 1]),
                child: None,
            })
            .collect();
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            endpoints: members
                .iter()
                .map(|m| format!("http://127.0.0.1:{}", m.client))
                .collect(),
            members,
            dir,
            bin,
            initial_cluster,
        };
        for i in 0..3 {
            cluster.spawn(i);
        }
        for i in 0..3 {
            cluster.wait_healthy(i);
        }
        Some(cluster)
    }

    fn spawn(&mut self, i: usize) {
        let m = &self.members[i];
        let url = format!("http://127.0.0.1:{}", m.client);
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{}.log", m.name)))
            .unwrap();
        // A restarted member finds its data directory and ignores the initial-cluster
        // flags (it rejoins as the member it was).
        let child = Command::new(&self.bin)
            .args(["--name", &m.name, "--data-dir"])
            .arg(self.dir.path().join(&m.name))
            .args(["--listen-client-urls", &url, "--advertise-client-urls", &url])
            .args([
                "--listen-peer-urls",
                &m.peer_url,
                "--initial-advertise-peer-urls",
                &m.peer_url,
            ])
            .args(["--initial-cluster", &self.initial_cluster])
            .args([
                "--initial-cluster-state",
                "new",
                "--initial-cluster-token",
                "hyperplan-test",
            ])
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.members[i].child = Some(child);
    }

    /// Kills member `i` (SIGKILL, by pid) and reaps it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts member `i` again on its data directory and waits until it is healthy (it has
    /// rejoined the cluster and knows its leader).
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
        self.wait_healthy(i);
    }

    /// Whether member `i` says it is healthy (`GET /health`: it knows a leader).
    pub fn healthy(&self, i: usize) -> bool {
        use std::io::{Read, Write};
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.members[i].client)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        if s.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .is_err()
        {
            return false;
        }
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        answer.contains("\"health\":\"true\"")
    }

    fn wait_healthy(&mut self, i: usize) {
        let start = Instant::now();
        while !self.healthy(i) {
            // A member that exited (its port taken by someone else after all) is not
            // waited for: the answer on its port would be another's.
            let exited = self.members[i].child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            assert!(exited.is_none(), "etcd member {i} exited ({exited:?}): {}", self.log(i));
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "etcd member {i} was not healthy within 30 s: {}",
                self.log(i)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{}.log", self.members[i].name))).unwrap_or_default()
    }

    /// The `[store]` section of a planner on this cluster under `prefix`: every member's
    /// endpoint, in order.
    pub fn store_toml(&self, prefix: &str) -> String {
        let endpoints = self
            .endpoints
            .iter()
            .map(|e| format!("\"{e}\""))
            .collect::<Vec<_>>()
            .join(", ");
        format!("[store]\nbackend = \"etcd\"\nendpoints = [{endpoints}]\nprefix = \"{prefix}\"\n")
    }
}

/// An `http://` endpoint where nobody listens (a member that is down).
pub fn dead_endpoint() -> String {
    format!("http://127.0.0.1:{}", free_port())
}

/// A UDP port nobody uses now, for a planner that must be on the list before it starts.
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
