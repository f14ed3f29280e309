//! The planners an agent may register with (`--planner a:7400,b:7400`: a leader and its
//! standbys) and which one to try next: [`parse_list`] reads the list, [`Rotation`]
//! picks the address of each attempt from how the last one ended.
//!
//! - A standby's `NotLeader` naming the leader: the leader next (an address not on the
//!   list too, once per `NotLeader`); naming none (an election is under way): the next
//!   address on the list. Either is retried soon ([`Retry::Soon`]), unless that address
//!   already answered `NotLeader` in this round (a whole round of the list got only
//!   `NotLeader`, or standbys point at each other): then the run loop backs off
//!   ([`Retry::Backoff`]) and a new round starts, so it never spins.
//! - Any other end (unreachable, timed out, refused, a session that ended: its planner
//!   is likely gone): the next address on the list, after the usual backoff.

use std::collections::BTreeSet;

use hyperplan_shared::names::is_host_port;

/// Why a `planner` list is unusable; the caller names where the list came from.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ListError {
    #[error("no planner address given")]
    Empty,
    #[error("{list:?} has an empty entry (expected HOST:PORT or HOST:PORT,HOST:PORT,…)")]
    EmptyEntry { list: String },
    #[error("{entry:?} is not HOST:PORT (a host name or IP address, a colon, a port number)")]
    NotHostPort { entry: String },
}

/// `a:7400` or `a:7400, b:7400`: the addresses in order, trimmed. Every entry must be
/// `HOST:PORT` (`[v6]:PORT` for an IPv6 address): the agent resolves it again at each
/// attempt, so a name that does not resolve yet is fine, but a missing port never works.
pub fn parse_list(text: &str) -> Result<Vec<String>, ListError> {
    if text.trim().is_empty() {
        return Err(ListError::Empty);
    }
    let mut list = Vec::new();
    for entry in text.split(',').map(str::trim) {
        if entry.is_empty() {
            return Err(ListError::EmptyEntry { list: text.to_string() });
        }
        if !is_host_port(entry) {
            return Err(ListError::NotHostPort {
                entry: entry.to_string(),
            });
        }
        list.push(entry.to_string());
    }
    Ok(list)
}

/// How long to wait before the next attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Soon (a standby pointed elsewhere): [`super::NOT_LEADER_RETRY`].
    Soon,
    /// After the growing, jittered [`super::Backoff`].
    Backoff,
}

/// Which planner to try: an index into the list, or a leader a standby named that is not
/// on it (tried once). Pure: the run loop tells it how each attempt ended.
#[derive(Clone, Debug)]
pub struct Rotation {
    list: Vec<String>,
    index: usize,
    /// A leader named by a standby and not on the list: the next attempt's address.
    detour: Option<String>,
    /// The addresses (lower case) that answered `NotLeader` in this round: since the last
    /// registration, other failure or back-off.
    refused: BTreeSet<String>,
}

impl Rotation {
    /// Starts at the first address. `list` must not be empty ([`parse_list`] makes sure).
    pub fn new(list: Vec<String>) -> Self {
        debug_assert!(!list.is_empty());
        Self {
            list,
            index: 0,
            detour: None,
            refused: BTreeSet::new(),
        }
    }

    /// The address to try now.
    pub fn current(&self) -> &str {
        match &self.detour {
            Some(leader) => leader,
            None => self.list.get(self.index).map_or("", String::as_str),
        }
    }

    /// The current planner registered us: a later `NotLeader` starts a new round.
    pub fn registered(&mut self) {
        self.refused.clear();
    }

    /// The current planner is a standby; `leader` is the one it names. Moves to the
    /// leader (or, with none, to the next address on the list) and says how soon: soon,
    /// unless that address already answered `NotLeader` in this round or the round has
    /// had more refusals than the list has entries (then back off and start a new round).
    pub fn not_leader(&mut self, leader: Option<&str>) -> Retry {
        self.refused.insert(self.current().to_ascii_lowercase());
        self.detour = None;
        match leader {
            Some(leader) => match self.list.iter().position(|a| same_address(a, leader)) {
                Some(i) => self.index = i,
                None => self.detour = Some(leader.trim().to_string()),
            },
            None => self.advance(),
        }
        let next = self.current().to_ascii_lowercase();
        if self.refused.contains(&next) || self.refused.len() > self.list.len() {
            self.refused.clear();
            Retry::Backoff
        } else {
            Retry::Soon
        }
    }

    /// The attempt failed or the session ended for any other reason: the next address on
    /// the list (after a detour: the one after the entry that named it).
    pub fn failed(&mut self) -> Retry {
        self.detour = None;
        self.refused.clear();
        self.advance();
        Retry::Backoff
    }

    fn advance(&mut self) {
        self.index = (self.index + 1) % self.list.len().max(1);
    }
}

/// The same `HOST:PORT`, ignoring the host's case (DNS names are case-insensitive).
fn same_address(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rotation(list: &[&str]) -> Rotation {
        Rotation::new(list.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn one_address_parses_as_before() {
        assert_eq!(parse_list("head-1:7400"), Ok(vec!["head-1:7400".to_string()]));
        assert_eq!(parse_list(" 10.0.0.1:7443 "), Ok(vec!["10.0.0.1:7443".to_string()]));
        assert_eq!(parse_list("[::1]:7400"), Ok(vec!["[::1]:7400".to_string()]));
    }

    #[test]
    fn lists_allow_spaces_around_commas() {
        assert_eq!(
            parse_list("a:7400,b:7400 , c.example:7401"),
            Ok(vec!["a:7400".into(), "b:7400".into(), "c.example:7401".into()])
        );
    }

    #[test]
    fn empty_entries_and_addresses_without_ports_are_refused() {
        assert_eq!(parse_list(""), Err(ListError::Empty));
        assert_eq!(parse_list("  "), Err(ListError::Empty));
        for list in ["a:7400,,b:7400", "a:7400,", ",a:7400", "a:7400, ,b:7400"] {
            assert_eq!(
                parse_list(list),
                Err(ListError::EmptyEntry { list: list.into() }),
                "{list}"
            );
        }
        for entry in [
            "head-1",
            "head-1:",
            ":7400",
            "head-1:http",
            "::1:7400",
            "[::1]",
            "a b:7400",
            "h:70000",
        ] {
            assert_eq!(
                parse_list(&format!("a:1,{entry}")),
                Err(ListError::NotHostPort { entry: entry.into() }),
                "{entry}"
            );
        }
        let message = parse_list("a:1,,b:2").err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(
            message,
            "\"a:1,,b:2\" has an empty entry (expected HOST:PORT or HOST:PORT,HOST:PORT,…)"
        );
    }

    #[test]
    fn a_single_address_is_tried_again_after_backoff() {
        let mut r = rotation(&["a:1"]);
        assert_eq!(r.current(), "a:1");
        assert_eq!(r.failed(), Retry::Backoff);
        assert_eq!(r.current(), "a:1");
    }

    #[test]
    fn failures_and_ended_sessions_move_on_in_order() {
        let mut r = rotation(&["a:1", "b:1", "c:1"]);
        let mut tried = vec![r.current().to_string()];
        for _ in 0..4 {
            assert_eq!(r.failed(), Retry::Backoff);
            tried.push(r.current().to_string());
        }
        assert_eq!(tried, ["a:1", "b:1", "c:1", "a:1", "b:1"]);
        // A session with b ended (b was killed): c first.
        r.registered();
        r.failed();
        assert_eq!(r.current(), "c:1");
    }

    #[test]
    fn a_standby_naming_a_listed_leader_sends_us_there_soon() {
        let mut r = rotation(&["a:1", "b:1", "c:1"]);
        assert_eq!(r.not_leader(Some("C:1")), Retry::Soon);
        assert_eq!(r.current(), "c:1");
        // c leads; when it dies, the next after it.
        r.registered();
        r.failed();
        assert_eq!(r.current(), "a:1");
    }

    #[test]
    fn a_leader_not_on_the_list_is_tried_once() {
        let mut r = rotation(&["a:1", "b:1"]);
        assert_eq!(r.not_leader(Some("x:9")), Retry::Soon);
        assert_eq!(r.current(), "x:9");
        // x is unreachable: back to the list, after a.
        assert_eq!(r.failed(), Retry::Backoff);
        assert_eq!(r.current(), "b:1");
        // Named again by the next NotLeader: tried again.
        assert_eq!(r.not_leader(Some("x:9")), Retry::Soon);
        assert_eq!(r.current(), "x:9");
        // x registered us, then went away: the list again.
        r.registered();
        r.failed();
        assert_eq!(r.current(), "a:1");
    }

    #[test]
    fn no_leader_yet_walks_the_list_then_backs_off() {
        let mut r = rotation(&["a:1", "b:1", "c:1"]);
        let mut seen = Vec::new();
        for _ in 0..6 {
            let retry = r.not_leader(None);
            seen.push((r.current().to_string(), retry));
        }
        use Retry::{Backoff, Soon};
        assert_eq!(
            seen,
            [
                ("b:1".into(), Soon),
                ("c:1".into(), Soon),
                ("a:1".into(), Backoff),
                ("b:1".into(), Soon),
                ("c:1".into(), Soon),
                ("a:1".into(), Backoff),
            ]
        );
    }

    #[test]
    fn standbys_pointing_at_each_other_never_spin() {
        // a says b leads, b says a leads (both stale): a back-off every round.
        let mut r = rotation(&["a:1", "b:1", "c:1"]);
        let mut retries = Vec::new();
        for _ in 0..8 {
            let leader = if r.current() == "a:1" { "b:1" } else { "a:1" };
            retries.push(r.not_leader(Some(leader)));
        }
        let soon_in_a_row = retries
            .split(|r| *r == Retry::Backoff)
            .map(<[Retry]>::len)
            .max()
            .unwrap_or(0);
        assert!(soon_in_a_row <= 3, "{retries:?}");
        assert!(retries.contains(&Retry::Backoff), "{retries:?}");
        // A standby naming itself, alone on the list: back off every time.
        let mut alone = rotation(&["a:1"]);
        assert_eq!(alone.not_leader(Some("a:1")), Retry::Backoff);
        assert_eq!(alone.not_leader(Some("a:1")), Retry::Backoff);
        // Off-list leaders that keep naming others: bounded as well.
        let mut off = rotation(&["a:1"]);
        assert_eq!(off.not_leader(Some("x:1")), Retry::Soon);
        assert_eq!(off.not_leader(Some("y:1")), Retry::Backoff);
        assert_eq!(off.current(), "y:1");
    }

    #[test]
    fn another_failure_starts_a_new_round() {
        let mut r = rotation(&["a:1", "b:1"]);
        assert_eq!(r.not_leader(None), Retry::Soon);
        assert_eq!(r.failed(), Retry::Backoff); // b unreachable
        assert_eq!(r.current(), "a:1");
        assert_eq!(r.not_leader(None), Retry::Soon, "a new round");
    }
}
