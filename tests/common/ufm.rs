//! A stand-in for NVIDIA UFM's REST API on 127.0.0.1: `GET /ufmRest/resources/ports`
//! with basic auth (`admin:123456`, UFM's factory default), answering as the test says
//! at that moment: the port list, an HTTP status, garbage, or nothing at all (hang).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `admin:123456` in base64.
const AUTH: &str = "Basic YWRtaW46MTIzNDU2";
pub const CREDENTIALS: &str = "admin:123456\n";

#[derive(Clone, Debug)]
pub enum Reply {
    Ports(Vec<u8>),
    Status(u16),
    Hang,
}

pub struct MockUfm {
    /// `http://127.0.0.1:PORT` (the endpoint, without the REST path).
    pub endpoint: String,
    reply: Arc<Mutex<Reply>>,
    /// Requests being hung up on right now.
    hanging: Arc<AtomicUsize>,
}

impl MockUfm {
    pub fn start(reply: Reply) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let reply = Arc::new(Mutex::new(reply));
        let hanging = Arc::new(AtomicUsize::new(0));
        let (shared, counter) = (reply.clone(), hanging.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let r = shared.lock().unwrap().clone();
                let counter = counter.clone();
                std::thread::spawn(move || answer(stream, r, &counter));
            }
        });
        Self {
            endpoint,
            reply,
            hanging,
        }
    }

    pub fn set(&self, reply: Reply) {
        *self.reply.lock().unwrap() = reply;
    }

    /// How many requests it is hanging up on at this moment.
    pub fn hanging(&self) -> usize {
        self.hanging.load(Ordering::SeqCst)
    }
}

fn answer(mut stream: TcpStream, reply: Reply, hanging: &AtomicUsize) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 65536 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&request);
    let path_ok = head.starts_with("GET /ufmRest/resources/ports ");
    let auth_ok = head
        .lines()
        .any(|l| l.to_ascii_lowercase().starts_with("authorization:") && l[14..].trim() == AUTH);
    let (status, body) = match reply {
        Reply::Hang => {
            hanging.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_secs(30));
            hanging.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        _ if !path_ok => (404, b"not found".to_vec()),
        _ if !auth_ok => (401, b"{\"error\": \"unauthorized\"}".to_vec()),
        Reply::Status(code) => (code, b"{\"error\": \"internal\"}".to_vec()),
        Reply::Ports(body) => (200, body),
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(&body);
}
