//! Node health checks: what each check on a node found, as the agent sends it in its
//! heartbeat and the planner keeps it per node. A check is `ok`, `degraded` (the node
//! still runs work, scored lower) or `failed` (the planner drains the node until every
//! check passes again). The agent bounds what it sends ([`MAX_CHECKS`], [`MAX_TEXT`]);
//! the planner bounds it again on receipt, as it trusts no frame.

use serde::{Deserialize, Serialize};

/// Checks one node reports at most; more are dropped (a site script cannot flood the
/// planner).
pub const MAX_CHECKS: usize = 64;
/// Bytes of a check's name, code or text at most; longer ones are cut at a character.
pub const MAX_TEXT: usize = 256;

/// What one check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckState {
    /// Healthy.
    Ok,
    /// Works, but not as it should (an IB port counting symbol errors): scored lower.
    Degraded,
    /// Broken (an IB port down, a full state disk, a site script that failed): the node
    /// is drained by health.
    Failed,
}

impl CheckState {
    /// `ok`, `degraded` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Degraded => "degraded",
            Self::Failed => "failed",
        }
    }
}

/// One check's result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckResult {
    /// Which check, and of what: `ib:mlx5_0/1`, `gpu:0`, `disk:/var/lib/hyperplan-agent`,
    /// `mount:/scratch`, `memory`, `script`.
    pub check: String,
    /// What it found.
    pub state: CheckState,
    /// A short code that stays the same while the trouble does: `ib-down`, `ib-width`,
    /// `ib-speed`, `ib-errors`; `gpu-lost`, `gpu-error`, `gpu-ecc`, `gpu-remap-failed`,
    /// `gpu-reset-needed`, `gpu-nvlink`, `gpu-fabric`, `gpu-missing`, `gpu-xid`; `disk-space`,
    /// `disk-inodes`, `disk-missing`, `disk-error`; `mount-missing`; `memory-corrupted`;
    /// `script`; `timeout`; `check-error` (a check that could not look). Empty when ok.
    /// `[health] endTasksOn` in planner.toml and alert rules match on it.
    #[serde(default)]
    pub code: String,
    /// What a person reads: `mlx5_0 port 1 width 1x (expected 4x)`.
    #[serde(default)]
    pub text: String,
}

impl CheckResult {
    /// An ok result of `check`.
    pub fn ok(check: impl Into<String>) -> Self {
        Self {
            check: check.into(),
            state: CheckState::Ok,
            code: String::new(),
            text: String::new(),
        }
    }

    /// A result that is not ok.
    pub fn bad(check: impl Into<String>, state: CheckState, code: &str, text: impl Into<String>) -> Self {
        Self {
            check: check.into(),
            state,
            code: code.to_string(),
            text: text.into(),
        }
    }

    /// `check: text` (the text alone when it already names the check), as a drain reason.
    pub fn describe(&self) -> String {
        if self.text.is_empty() {
            format!("{} {}", self.check, self.state.as_str())
        } else {
            format!("{}: {}", self.check, self.text)
        }
    }
}

/// The results as the planner keeps them: at most [`MAX_CHECKS`], each field at most
/// [`MAX_TEXT`] bytes with control characters replaced, sorted by check name, one result
/// per name (the worst wins).
pub fn bounded(mut checks: Vec<CheckResult>) -> Vec<CheckResult> {
    for c in &mut checks {
        c.check = clean(&c.check);
        c.code = clean(&c.code);
        c.text = clean(&c.text);
    }
    checks.sort_by(|a, b| a.check.cmp(&b.check).then(b.state.cmp(&a.state)));
    checks.dedup_by(|b, a| a.check == b.check);
    checks.truncate(MAX_CHECKS);
    checks
}

/// The worst state among `checks` (ok when there are none).
pub fn worst(checks: &[CheckResult]) -> CheckState {
    checks.iter().map(|c| c.state).max().unwrap_or(CheckState::Ok)
}

/// `s` cut to [`MAX_TEXT`] bytes at a character boundary, control characters as spaces.
pub fn clean(s: &str) -> String {
    let mut end = s.len().min(MAX_TEXT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_cuts_sorts_and_keeps_the_worst_of_a_name() {
        let long = "é".repeat(200);
        let checks = vec![
            CheckResult::ok("script"),
            CheckResult::bad("script", CheckState::Failed, "script", "exit 1"),
            CheckResult::bad("ib:mlx5_0/1", CheckState::Degraded, "ib-errors", long.clone()),
            CheckResult::bad("memory", CheckState::Ok, "", "a\nb"),
        ];
        let b = bounded(checks);
        let names: Vec<&str> = b.iter().map(|c| c.check.as_str()).collect();
        assert_eq!(names, ["ib:mlx5_0/1", "memory", "script"]);
        assert_eq!(b[2].state, CheckState::Failed);
        assert!(b[0].text.len() <= MAX_TEXT && b[0].text.chars().all(|c| c == 'é'));
        assert_eq!(b[1].text, "a b");
        assert_eq!(worst(&b), CheckState::Failed);
        assert_eq!(worst(&[]), CheckState::Ok);
        let many: Vec<CheckResult> = (0..100).map(|i| CheckResult::ok(format!("c{i:03}"))).collect();
        assert_eq!(bounded(many).len(), MAX_CHECKS);
    }

    #[test]
    fn a_result_reads_back_from_json_and_names_its_check_in_a_reason() {
        let r = CheckResult::bad("ib:mlx5_0/1", CheckState::Failed, "ib-width", "width 1x (expected 4x)");
        let json = serde_json::to_string(&r).unwrap_or_default();
        assert!(json.contains("\"state\":\"failed\""), "{json}");
        let back: CheckResult = serde_json::from_str(&json).unwrap_or_else(|_| CheckResult::ok("x"));
        assert_eq!(back, r);
        assert_eq!(r.describe(), "ib:mlx5_0/1: width 1x (expected 4x)");
    }
}
