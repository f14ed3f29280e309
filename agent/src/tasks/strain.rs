//! A node that cannot start tasks now: a shepherd's fork failed for want of processes or
//! memory (`EAGAIN`, `ENOMEM`: the unit's TasksMax, a user's fork bomb, `pids.max`). The
//! agent already tries such a launch again for a while; meanwhile it says so in every
//! heartbeat (`strained`), and the planner places nothing new on the node, which would
//! otherwise go on taking jobs only to fail them while it reads Ready.
//!
//! It ends when a shepherd starts again, or when a probe does: while strained, the agent
//! starts its own binary (`--version`) every [`PROBE_EVERY`] at a heartbeat, since with
//! nothing placed no launch would ever tell it the node has room again.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Between probes while strained.
pub const PROBE_EVERY: Duration = Duration::from_secs(5);

/// Whether the node is short of processes or memory for a shepherd, and why.
#[derive(Debug)]
pub struct Strain {
    /// Why, and when to probe next; `None`: not strained.
    now: Option<(String, Instant)>,
    /// The program a probe starts (the agent's own, as the shepherds are).
    probe: PathBuf,
}

impl Strain {
    pub fn new(probe: PathBuf) -> Self {
        Self { now: None, probe }
    }

    /// A shepherd could not be started: strained when it was for want of processes or
    /// memory (a refusing launcher, a missing program are other matters).
    pub fn failed(&mut self, e: &std::io::Error) {
        if !short(e) {
            return;
        }
        if self.now.is_none() {
            tracing::warn!(
                "cannot start tasks now ({e}); the planner places nothing new here until a start works again"
            );
        }
        let why = format!("cannot start a task's shepherd: {e} (short of processes or memory)");
        self.now = Some((why, Instant::now() + PROBE_EVERY));
    }

    /// A shepherd (or a probe) started: the node has room again.
    pub fn started(&mut self) {
        if self.now.take().is_some() {
            tracing::info!("tasks can start again; the planner may place here again");
        }
    }

    /// Why the node cannot start tasks, after a probe when one is due (its process, when
    /// it started, is the caller's to reap).
    pub fn check(&mut self) -> (Option<String>, Option<Child>) {
        let due = self.now.as_ref().is_some_and(|(_, at)| Instant::now() >= *at);
        let mut child = None;
        if due {
            let probe = Command::new(&self.probe)
                .arg("--version")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            match probe {
                Ok(c) => {
                    child = Some(c);
                    self.started();
                }
                Err(e) if short(&e) => self.failed(&e),
                // Another failure says nothing of room: probe again later.
                Err(_) => {
                    if let Some((_, at)) = &mut self.now {
                        *at = Instant::now() + PROBE_EVERY;
                    }
                }
            }
        }
        (self.now.as_ref().map(|(why, _)| why.clone()), child)
    }
}

/// Out of processes or memory: what passes when something ends.
fn short(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ENOMEM))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_fork_short_of_processes_strains_until_a_start_or_a_probe_works() {
        let mut s = Strain::new(PathBuf::from("/bin/true"));
        assert_eq!(s.check().0, None);
        // A launcher that is away, a missing program: not a strain.
        s.failed(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        s.failed(&std::io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(s.check().0, None);
        s.failed(&std::io::Error::from_raw_os_error(libc::EAGAIN));
        let why = s.check().0.unwrap();
        assert!(why.starts_with("cannot start a task's shepherd: "), "{why}");
        s.started();
        assert_eq!(s.check().0, None);
        // A due probe that starts ends it.
        s.failed(&std::io::Error::from_raw_os_error(libc::ENOMEM));
        s.now.as_mut().unwrap().1 = Instant::now();
        let (why, child) = s.check();
        assert_eq!(why, None);
        assert!(child.unwrap().wait().unwrap().success());
        // A probe that cannot run for another reason leaves it, to probe again later.
        let mut s = Strain::new(PathBuf::from("/nonexistent/hyperplan-agent"));
        s.failed(&std::io::Error::from_raw_os_error(libc::EAGAIN));
        s.now.as_mut().unwrap().1 = Instant::now();
        let (why, child) = s.check();
        assert!(why.is_some() && child.is_none());
        assert!(s.now.as_ref().unwrap().1 > Instant::now());
    }
}
