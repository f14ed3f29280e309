//! How a task ended, as its agent reports it (`TaskFinished`) and the planner keeps it:
//! one type for the agent, the wire and the core, so an exit code or a signal means the
//! same thing everywhere.

use serde::{Deserialize, Serialize};

/// How a task ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TaskOutcome {
    /// It exited by itself (`exit_code`, 0 or not).
    #[default]
    Exited,
    /// A signal hyperplan did not send ended it (`signal`): a crash, an OOM kill, a user.
    Signaled,
    /// The job's time limit: SIGTERM, then SIGKILL after the grace period.
    Timeout,
    /// Killed on purpose: a cancel, or another task of its job failed.
    Cancelled,
    /// It never ran (`reason`: unknown user, root refused, exec or chdir failed, …).
    Failed,
    /// Its node was NotReady for longer than `[server] nodeLostAfter`: the planner gave
    /// it up (a node that comes back has it killed).
    Lost,
}

impl TaskOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskOutcome::Exited => "exited",
            TaskOutcome::Signaled => "signaled",
            TaskOutcome::Timeout => "timeout",
            TaskOutcome::Cancelled => "cancelled",
            TaskOutcome::Failed => "failed",
            TaskOutcome::Lost => "lost",
        }
    }
}

/// A task's end with its figures. Times are Unix milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskEnd {
    pub outcome: TaskOutcome,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// The task's pid on its node (its process group); `None` when none was started.
    pub pid: Option<u32>,
    pub start_time_ms: Option<u64>,
    pub end_time_ms: u64,
    /// User plus system CPU time.
    pub cpu_seconds: f64,
    /// Peak resident memory.
    pub max_rss_bytes: u64,
    /// Its cgroup counted an OOM kill.
    pub oom_killed: bool,
    /// Why it failed before it ran, or was lost.
    pub reason: Option<String>,
}

impl TaskEnd {
    /// Ended well: exited 0.
    pub fn succeeded(&self) -> bool {
        self.outcome == TaskOutcome::Exited && self.exit_code == Some(0)
    }

    /// The exit code a shell would show: the code, or 128 + the signal; 1 for a task that
    /// never ran or was lost.
    pub fn shell_code(&self) -> i32 {
        match (self.exit_code, self.signal) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            (None, None) => 1,
        }
    }
}

/// `SIGTERM` for 15; `signal N` for what has no name here.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        _ => return format!("signal {signal}"),
    };
    name.to_string()
}

/// Signals a job may choose to be warned with before it is preempted (its checkpoint
/// hook): a name (`USR1`, `SIGUSR1`, any case) or a number; what stops or cannot be
/// caught (`KILL`, `STOP`) is refused.
pub fn warning_signal(text: &str) -> Option<i32> {
    let t = text.trim();
    if let Ok(n) = t.parse::<i32>() {
        return (1..=31).contains(&n).then_some(n).filter(|n| ![9, 19].contains(n));
    }
    let upper = t.to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    let n = match bare {
        "HUP" => 1,
        "INT" => 2,
        "QUIT" => 3,
        "ABRT" => 6,
        "USR1" => 10,
        "USR2" => 12,
        "ALRM" => 14,
        "TERM" => 15,
        "CONT" => 18,
        "XCPU" => 24,
        "WINCH" => 28,
        "URG" => 23,
        _ => return None,
    };
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warning_signals_by_name_or_number() {
        assert_eq!(warning_signal("USR1"), Some(10));
        assert_eq!(warning_signal("sigusr2"), Some(12));
        assert_eq!(warning_signal(" 15 "), Some(15));
        assert_eq!(warning_signal("KILL"), None);
        assert_eq!(warning_signal("9"), None);
        assert_eq!(warning_signal("0"), None);
        assert_eq!(warning_signal("64"), None);
        assert_eq!(warning_signal("SIGFOO"), None);
    }

    #[test]
    fn exit_codes_as_a_shell_shows_them() {
        let end = |exit_code, signal| TaskEnd {
            exit_code,
            signal,
            ..TaskEnd::default()
        };
        assert_eq!(end(Some(3), None).shell_code(), 3);
        assert_eq!(end(None, Some(9)).shell_code(), 137);
        assert_eq!(end(None, None).shell_code(), 1);
        assert!(end(Some(0), None).succeeded());
        assert!(!end(Some(1), None).succeeded());
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(40), "signal 40");
    }
}
