//! What of the health results a heartbeat carries: every result on a link's first
//! heartbeat (the planner may be a new one, or have lost what it knew), then again
//! whenever some check's state or code changed since the last heartbeat that carried
//! them, and nothing otherwise. Only state and code count: a text that changes at every
//! run (`symbol errors +12`, then `+15`) is no news to the planner.

use hyperplan_shared::health::{self, CheckResult, CheckState};

/// What the link last sent: one per link, new (empty) at each connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    /// Each check's name, state and code as last sent; `None`: nothing sent yet.
    last: Option<Vec<(String, CheckState, String)>>,
}

/// The results to put in the heartbeat (`Some`, bounded as the planner keeps them:
/// [`health::bounded`]), or `None` when they say nothing new since `sent`, which is
/// updated.
pub fn to_send(current: Vec<CheckResult>, sent: &mut Sent) -> Option<Vec<CheckResult>> {
    let current = health::bounded(current);
    let key: Vec<(String, CheckState, String)> = current
        .iter()
        .map(|c| (c.check.clone(), c.state, c.code.clone()))
        .collect();
    if sent.last.as_ref() == Some(&key) {
        return None;
    }
    sent.last = Some(key);
    Some(current)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn width(text: &str) -> CheckResult {
        CheckResult::bad("ib:mlx5_0/1", CheckState::Failed, "ib-width", text)
    }

    #[test]
    fn the_first_heartbeat_carries_all_then_only_changes_of_state_or_code() {
        let mut sent = Sent::default();
        let all = vec![CheckResult::ok("memory"), CheckResult::ok("ib:mlx5_0/1")];
        let first = to_send(all.clone(), &mut sent);
        assert_eq!(
            first.map(|v| v.into_iter().map(|c| c.check).collect::<Vec<_>>()),
            Some(vec!["ib:mlx5_0/1".to_string(), "memory".to_string()])
        );
        assert_eq!(to_send(all, &mut sent), None, "nothing changed");
        // A change: everything again, the unchanged ones included.
        let broken = vec![CheckResult::ok("memory"), width("mlx5_0 port 1 width 1x (expected 4x)")];
        assert_eq!(to_send(broken.clone(), &mut sent).map(|v| v.len()), Some(2));
        // The text alone changing is not news.
        let reworded = vec![CheckResult::ok("memory"), width("mlx5_0 port 1 width 2x (expected 4x)")];
        assert_eq!(to_send(reworded, &mut sent), None);
        // A check that appears or goes away is.
        assert!(to_send(vec![CheckResult::ok("memory")], &mut sent).is_some());
        assert_eq!(to_send(vec![CheckResult::ok("memory")], &mut sent), None);
        // A new link starts over.
        let mut fresh = Sent::default();
        assert!(to_send(vec![CheckResult::ok("memory")], &mut fresh).is_some());
        // None at all, once, is said too (the planner learns there is nothing).
        let mut empty = Sent::default();
        assert_eq!(to_send(Vec::new(), &mut empty), Some(Vec::new()));
        assert_eq!(to_send(Vec::new(), &mut empty), None);
    }
}
