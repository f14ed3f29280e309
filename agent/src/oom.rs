//! The OOM killer's view of the agent: the agent (and so every shepherd it starts, which
//! inherits the value) runs with the lowest `oom_score_adj`, so that when a task's
//! processes exhaust memory the kernel takes the task, not the daemon that reports it or
//! the parent that records its end. Each task goes back to 0 before exec
//! (`shepherd::exec`), the kernel's default for a user's process.

/// The agent's and shepherds' `oom_score_adj` (the kernel's minimum: never chosen).
pub const AGENT_OOM_SCORE_ADJ: i32 = -1000;

/// Lowers this process's `oom_score_adj` to [`AGENT_OOM_SCORE_ADJ`]. Needs root
/// (CAP_SYS_RESOURCE); without it the agent says so once and runs as it is.
pub fn protect_self() {
    set("/proc/self/oom_score_adj", AGENT_OOM_SCORE_ADJ);
}

fn set(path: &str, value: i32) {
    match std::fs::write(path, value.to_string()) {
        Ok(()) => tracing::debug!(value, "oom_score_adj set: the OOM killer takes tasks before the agent"),
        Err(e) => tracing::info!(
            value,
            "cannot lower the agent's oom_score_adj ({e}): under memory pressure the OOM killer may take the agent"
        ),
    }
}

/// This process's `oom_score_adj`, when readable.
pub fn current() -> Option<i32> {
    std::fs::read_to_string("/proc/self/oom_score_adj")
        .ok()?
        .trim()
        .parse()
        .ok()
}
