//! Warnings a local user can cause at will (a refused connection, a step's output cut):
//! said at most once per interval, with how many went unsaid since, so that nobody can
//! fill the agent's log or spend its CPU on writing it.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often one kind of warning is said, at most.
pub const EVERY: Duration = Duration::from_secs(10);

/// One kind of warning's rate limit.
pub struct Said {
    every: Duration,
    state: Mutex<State>,
}

struct State {
    last: Option<Instant>,
    unsaid: u64,
}

impl Said {
    /// At most once per `every`.
    pub const fn new(every: Duration) -> Self {
        Said {
            every,
            state: Mutex::new(State { last: None, unsaid: 0 }),
        }
    }

    /// `Some(n)`: say it now (`n` went unsaid since the last time); `None`: counted, not
    /// said (log it at debug level at most).
    pub fn now(&self, at: Instant) -> Option<u64> {
        let mut s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match s.last {
            Some(last) if at.saturating_duration_since(last) < self.every => {
                s.unsaid = s.unsaid.saturating_add(1);
                None
            }
            _ => {
                s.last = Some(at);
                Some(std::mem::take(&mut s.unsaid))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn said_once_per_interval_with_the_count_of_the_unsaid() {
        let said = Said::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(said.now(t0), Some(0));
        for i in 1..=5 {
            assert_eq!(said.now(t0 + Duration::from_secs(i)), None);
        }
        assert_eq!(said.now(t0 + Duration::from_secs(10)), Some(5));
        assert_eq!(said.now(t0 + Duration::from_secs(11)), None);
        assert_eq!(said.now(t0 + Duration::from_secs(30)), Some(1));
    }
}
