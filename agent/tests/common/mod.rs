//! What the agent's black-box tests share: its stderr as lines, and a fake planner's
//! side of the opening (one stream, hellos both ways).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::ChildStderr;

use hyperplan_net::frame::{DEFAULT_MAX_FRAME, read_frame, write_frame};
use hyperplan_net::messages::{Hello, Role};
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
