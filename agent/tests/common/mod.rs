//! What the agent's black-box tests share: its stderr as lines, a fake planner's side of
//! the opening (one stream, hellos both ways), and a plain HTTP/1.1 request (`/metrics`).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::ChildStderr;

use hyperplan_net::frame::{DEFAULT_MAX_FRAME, read_frame, write_frame};
use hyperplan_net::messages::{Hello, Role};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// The agent's stderr, line by line (echoed to the test's own stderr).
pub fn lines(stderr: ChildStderr) -> mpsc::UnboundedReceiver<String> {
    let (tx, lines) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("agent: {line}");
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

/// The planner's side of the opening: the agent's stream and hello, then ours. `None`
/// when the agent went away first.
pub async fn planner_hello(connection: &quinn::Connection) -> Option<(quinn::SendStream, quinn::RecvStream, Hello)> {
    let (mut send, mut recv) = connection.accept_bi().await.ok()?;
    let hello = read_frame::<Hello, _>(&mut recv, DEFAULT_MAX_FRAME).await.ok()??;
    let ours = Hello::new(Role::Planner, "hyperplan-planner");
    write_frame(&mut send, &ours, DEFAULT_MAX_FRAME).await.ok()?;
    Some((send, recv, hello))
}

/// An HTTP answer: status code, headers (lower-case names), body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// `METHOD path` to `addr` over HTTP/1.1, the connection closed after the answer.
pub async fn http(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<Answer> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text.as_str(), ""));
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Ok(Answer {
        status,
        headers,
        body: body.to_string(),
    })
}

/// The address in the agent's "serving metrics on http://ADDR/metrics" log line.
pub fn metrics_addr(line: &str) -> Option<SocketAddr> {
    let rest = line.split("serving metrics on http://").nth(1)?;
    rest.split("/metrics").next()?.parse().ok()
}
