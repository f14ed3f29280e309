//! A throwaway etcd on 127.0.0.1 (Debian's `etcd-server`) for the HA tests and the
//! failover bench: its own data directory and free ports, killed (by pid) on drop.
//! [`Etcd::start`] is `None`, with the reason printed, when there is no `etcd` binary;
//! [`Etcd::start_tls`] serves TLS only and asks clients for certificates, all from one
//! test CA made with `hyperplan_net::certs`.

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
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
        let (client, peer) = (free_port(), free_port());
        let scheme = if tls { "https" } else { "http" };
        let endpoint = format!("{scheme}://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = std::fs::File::create(dir.path().join("etcd.log")).unwrap();
        let mut command = Command::new(bin);
        let mut client_files = None;
        if tls {
            let certs = dir.path().join("certs");
            let ca = init_ca(&certs, false).unwrap();
            let server = issue_planner(&certs, &[]).unwrap();
            let node = issue_node(&certs, "client").unwrap();
            command
                .arg("--cert-file")
                .arg(&server.cert)
                .arg("--key-file")
                .arg(&server.key)
                .arg("--trusted-ca-file")
                .arg(&ca.cert)
                .arg("--client-cert-auth");
            client_files = Some(hyperplan_net::certs::CertPaths {
                ca: ca.cert,
                cert: node.cert,
                key: node.key,
            });
        }
        let child = command
            .args(["--name", "test", "--data-dir"])
            .arg(dir.path().join("data"))
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
        let etcd = Etcd {
            child,
            endpoint,
            dir,
            tls: client_files,
        };
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", client)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "etcd did not listen within 30 s: {}",
                etcd.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(etcd)
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

/// A UDP port nobody uses now, for a planner that must be on the list before it starts.
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
