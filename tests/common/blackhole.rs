//! A TCP relay a test can turn into a black hole: one planner reaches etcd through its
//! own relay, and a test cuts that planner off from etcd alone (its agents and clients
//! still reach it). Cut, the relay forwards nothing in either direction but keeps reading
//! and dropping what arrives, as a network that loses every packet does: the planner sees
//! no error, only silence. Its threads end when it is dropped.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// See the module.
pub struct Relay {
    /// Where it listens (`127.0.0.1:port`).
    pub addr: SocketAddr,
    cut: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
}

impl Relay {
    /// A relay to `target` on a free port of 127.0.0.1.
    pub fn start(target: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let streams: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (c, s, all) = (cut.clone(), stop.clone(), streams.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(target) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                if let Ok(mut v) = all.lock() {
                    v.extend(client.try_clone().ok());
                    v.extend(server.try_clone().ok());
                }
                pump(client.try_clone().unwrap(), server.try_clone().unwrap(), c.clone());
                pump(server, client, c.clone());
            }
        });
        Relay {
            addr,
            cut,
            stop,
            streams,
        }
    }

    /// From now on nothing passes.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }

    /// Passes again. The connections that lost bytes are closed (their streams cannot
    /// go on); new ones pass whole.
    pub fn heal(&self) {
        if let Ok(mut v) = self.streams.lock() {
            for s in v.drain(..) {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        self.cut.store(false, Ordering::SeqCst);
    }
}

/// A relay to the etcd at `endpoint` (`http://127.0.0.1:PORT`) for each of `n` planners,
/// and each planner's `[store]` section through its own relay under `prefix`.
pub fn relayed_etcd(endpoint: &str, n: usize, prefix: &str) -> (Vec<Relay>, Vec<String>) {
    let target: SocketAddr = endpoint.trim_start_matches("http://").parse().unwrap();
    let relays: Vec<Relay> = (0..n).map(|_| Relay::start(target)).collect();
    let tomls = relays
        .iter()
        .map(|r| {
            format!(
                "[store]\nbackend = \"etcd\"\nendpoints = [\"http://{}\"]\nprefix = \"{prefix}\"\n",
                r.addr
            )
        })
        .collect();
    (relays, tomls)
}

/// Copies `from` to `to` until either closes; drops what it reads while `cut`.
fn pump(mut from: TcpStream, mut to: TcpStream, cut: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if cut.load(Ordering::SeqCst) {
                continue;
            }
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees `stop`.
        let _ = TcpStream::connect(self.addr);
        if let Ok(v) = self.streams.lock() {
            for s in v.iter() {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }
}
