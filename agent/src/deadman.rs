//! The node-lost fence: a node cut off from its planner stops the tasks the planner will
//! start again elsewhere, before the planner does so, so that no rank runs twice.
//!
//! The planner gives a node's restartable tasks (`onNodeLost: replace` or `requeue`,
//! `LaunchTask::fence`) up no sooner than the silence that makes a node NotReady plus
//! `nodeLostAfter` (`Registered::fence_after_ms`), and a margin, after it last heard the
//! node, counted from when it leads. The agent counts from the
//! *sending* of the last heartbeat the planner acknowledged (`HeartbeatAck`), or of the
//! registration it answered: never later than the planner last heard it, whichever way
//! the link broke. It writes the deadline — that time plus `fence_after_ms` — to
//! `STATE/fence-deadline` on every acknowledgement; each fenced task's shepherd reads it
//! every [`CHECK_EVERY`] and stops its task once the deadline has passed. The shepherds
//! do it, not the agent, so the fence holds while the agent is dead or restarting.
//!
//! Times are milliseconds since boot (`/proc/uptime`, `CLOCK_BOOTTIME`): one clock for the
//! agent and its shepherds, which a wall-clock step does not move and a suspend does.
//! No file, or one that does not parse, fences nothing: a planner that never restarts
//! tasks elsewhere (no `fence_after_ms`) has none written.

use std::collections::VecDeque;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often a fenced task's shepherd reads the deadline.
pub const CHECK_EVERY: Duration = Duration::from_millis(500);
/// From SIGTERM to SIGKILL for a fenced task: short, as the planner's margin must cover it.
pub const FENCE_GRACE: Duration = Duration::from_secs(1);
/// Heartbeats remembered for their acknowledgements (more are forgotten, oldest first).
const SENT_KEPT: usize = 64;

/// The deadline file in the agent's state directory.
pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join("fence-deadline")
}

/// Milliseconds since boot, suspend included; `None` when `/proc/uptime` cannot be read.
pub fn uptime_ms() -> Option<u64> {
    let mut text = String::new();
    std::fs::File::open("/proc/uptime")
        .ok()?
        .take(64)
        .read_to_string(&mut text)
        .ok()?;
    parse_uptime(&text)
}

/// `12345.67 54321.00` → 12345670.
fn parse_uptime(text: &str) -> Option<u64> {
    let first = text.split_whitespace().next()?;
    let (secs, frac) = first.split_once('.').unwrap_or((first, "0"));
    let secs: u64 = secs.parse().ok()?;
    let frac: String = frac.chars().chain("000".chars()).take(3).collect();
    let ms: u64 = frac.parse().ok()?;
    secs.checked_mul(1000)?.checked_add(ms)
}

/// The deadline the file holds; `None` when it is missing, unreadable or says nothing
/// usable (bounded: a FIFO or a huge file put there is not read).
pub fn read(path: &Path) -> Option<u64> {
    let bytes = crate::bounded::read_regular(path, 64).ok()?;
    std::str::from_utf8(&bytes).ok()?.trim().parse().ok()
}

/// Whether a fenced task must stop now: the deadline in `path` has passed.
pub fn expired(path: &Path) -> Option<u64> {
    let deadline = read(path)?;
    let now = uptime_ms()?;
    (now > deadline).then(|| now - deadline)
}

/// The agent's side: when the planner last heard the node, and the deadline it writes.
#[derive(Debug)]
pub struct Deadman {
    path: PathBuf,
    /// `Registered::fence_after_ms` of the planner now (`None`: no fence).
    fence_after_ms: Option<u64>,
    /// Heartbeats sent on this link and not yet acknowledged: (seq, uptime ms).
    sent: VecDeque<(u64, u64)>,
    /// The deadline last written.
    written: Option<u64>,
    /// A failed write was logged (again only after one that worked).
    said_failure: bool,
}

impl Deadman {
    pub fn new(state_dir: &Path) -> Self {
        Self {
            path: path(state_dir),
            fence_after_ms: None,
            sent: VecDeque::new(),
            written: None,
            said_failure: false,
        }
    }

    /// A planner registered the node; `register_sent_ms` is when the registration it
    /// answered was sent.
    pub fn registered(&mut self, register_sent_ms: Option<u64>, fence_after_ms: Option<u64>) {
        self.sent.clear();
        self.fence_after_ms = fence_after_ms;
        // Written anew even when earlier: a planner started with a shorter nodeLostAfter
        // gives the node's tasks up sooner, and the fence must hold to its time.
        self.written = None;
        match (fence_after_ms, register_sent_ms) {
            (Some(_), Some(at)) => self.heard(at),
            // A planner that restarts nothing elsewhere: nothing to fence.
            (None, _) => self.clear(),
            (Some(_), None) => {}
        }
    }

    /// Heartbeat `seq` goes out now.
    pub fn sending(&mut self, seq: u64) {
        if let Some(now) = uptime_ms() {
            if self.sent.len() >= SENT_KEPT {
                self.sent.pop_front();
            }
            self.sent.push_back((seq, now));
        }
    }

    /// The planner acknowledged heartbeat `seq`.
    pub fn acknowledged(&mut self, seq: u64) {
        let Some(i) = self.sent.iter().position(|&(s, _)| s == seq) else {
            return;
        };
        let at = self.sent[i].1;
        // Earlier ones can no longer say anything newer.
        self.sent.drain(..=i);
        self.heard(at);
    }

    fn heard(&mut self, at: u64) {
        let Some(after) = self.fence_after_ms else { return };
        let deadline = at.saturating_add(after);
        if self.written.is_some_and(|w| w >= deadline) {
            return;
        }
        match crate::shepherd::layout::write_replace(&self.path, format!("{deadline}\n").as_bytes()) {
            Ok(()) => {
                self.written = Some(deadline);
                self.said_failure = false;
            }
            Err(e) if !self.said_failure => {
                self.said_failure = true;
                tracing::error!(
                    "cannot write the node-lost fence's deadline {}: {e} (fenced tasks stop at the last one written)",
                    self.path.display()
                );
            }
            Err(_) => {}
        }
    }

    fn clear(&mut self) {
        match std::fs::remove_file(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("cannot remove {}: {e}", self.path.display()),
        }
        self.written = None;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn uptime_reads_as_milliseconds() {
        assert_eq!(parse_uptime("12345.67 54321.00\n"), Some(12_345_670));
        assert_eq!(parse_uptime("7 1"), Some(7_000));
        assert_eq!(parse_uptime("7.1234 1"), Some(7_123));
        assert_eq!(parse_uptime(""), None);
        assert_eq!(parse_uptime("x.5"), None);
        assert!(uptime_ms().is_some_and(|ms| ms > 0));
    }

    #[test]
    fn the_deadline_follows_the_newest_acknowledged_heartbeat() {
        let dir = tempfile::tempdir().unwrap();
        let mut d = Deadman::new(dir.path());
        let file = path(dir.path());
        d.registered(Some(1_000), Some(30_000));
        assert_eq!(read(&file), Some(31_000));
        d.sending(1);
        d.sending(2);
        let sent_2 = d.sent.back().unwrap().1;
        d.acknowledged(2);
        assert_eq!(read(&file), Some(sent_2 + 30_000));
        // An old acknowledgement (or an unknown one) moves nothing back.
        d.acknowledged(1);
        d.acknowledged(99);
        assert_eq!(read(&file), Some(sent_2 + 30_000));
        assert_eq!(expired(&file), None, "not yet");
        // A planner with a shorter fence: the earlier deadline is written.
        d.registered(Some(sent_2 + 1), Some(1_000));
        assert_eq!(read(&file), Some(sent_2 + 1_001));
        // A planner without a fence: no file, nothing fenced.
        d.registered(Some(5), None);
        assert_eq!(read(&file), None);
    }

    #[test]
    fn a_deadline_in_the_past_has_expired_and_garbage_fences_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let file = path(dir.path());
        std::fs::write(&file, "1\n").unwrap();
        assert!(expired(&file).is_some());
        std::fs::write(&file, "soon\n").unwrap();
        assert_eq!(expired(&file), None);
        std::fs::write(&file, "9".repeat(100)).unwrap();
        assert_eq!(expired(&file), None, "too long: not read");
        std::fs::remove_file(&file).unwrap();
        assert_eq!(expired(&file), None);
    }
}
