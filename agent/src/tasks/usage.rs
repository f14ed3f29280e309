//! The CPU and memory use of running tasks, for heartbeats (the `sysinfo` crate). A
//! task's processes are those of its shepherd's session (the shepherd calls `setsid`, the
//! task and its children inherit the session), the shepherd itself left out. CPU use is
//! over the time since the previous sample, in cores (1.0 = one PU busy); the first
//! sample of a process reads 0.

use std::collections::HashMap;

use sysinfo::{ProcessRefreshKind, ProcessesToUpdate, System};

/// Use of one task's processes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Use {
    pub cpu_cores: f32,
    pub rss_bytes: u64,
}

/// Keeps the process table between samples (CPU use is a difference).
pub struct Sampler {
    system: System,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sampler")
    }
}

impl Default for Sampler {
    fn default() -> Self {
        Self { system: System::new() }
    }
}

impl Sampler {
    /// Use per shepherd pid, for the shepherds named. Reads /proc: call it off the async
    /// thread on a busy node.
    pub fn sample(&mut self, shepherds: &[u32]) -> HashMap<u32, Use> {
        let mut by_shepherd: HashMap<u32, Use> = shepherds.iter().map(|&p| (p, Use::default())).collect();
        if shepherds.is_empty() {
            return by_shepherd;
        }
        self.system.refresh_processes_specifics(
            ProcessesToUpdate::All,
            true,
            ProcessRefreshKind::nothing().with_cpu().with_memory(),
        );
        for (pid, process) in self.system.processes() {
            if process.thread_kind().is_some() {
                continue; // a thread of a process counted already
            }
            let Some(session) = process.session_id() else { continue };
            if *pid == session {
                continue; // the shepherd
            }
            if let Some(u) = by_shepherd.get_mut(&(session.as_u32())) {
                u.cpu_cores += process.cpu_usage() / 100.0;
                u.rss_bytes = u.rss_bytes.saturating_add(process.memory());
            }
        }
        by_shepherd
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_session_without_processes_uses_nothing_and_others_are_not_listed() {
        let mut s = Sampler::default();
        let got = s.sample(&[u32::MAX - 7]);
        assert_eq!(got.len(), 1);
        assert_eq!(got[&(u32::MAX - 7)], Use::default());
        assert!(s.sample(&[]).is_empty());
    }
}
