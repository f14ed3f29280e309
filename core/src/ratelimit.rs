//! Repeated warnings as one line with a count. A flood of bad packets, or a source that
//! says the same thing on every change, must not bury the log: the first line of a key in
//! each window is written, the rest of that window are counted and said in one line
//! ("… (repeated 41 times in the last 60 s)") when the window ends. No clock: callers pass
//! `now_ms` (the core has none; the daemon passes its monotonic clock).
//!
//! Memory is bounded: at most [`RateLimiter::MAX_KEYS`] keys are tracked; past that, keys
//! whose window ended are dropped, and a key that still finds no room is let through
//! uncounted (a log line, never unbounded growth).

use std::collections::BTreeMap;

/// Counts per key (a message without its varying parts: peer addresses, sequence numbers).
#[derive(Debug)]
pub struct RateLimiter {
    window_ms: u64,
    keys: BTreeMap<String, Window>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    start_ms: u64,
    /// Lines of this key held back since the window started.
    held: u64,
}

/// Lines held back in a window that has ended: say them once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The key: the message without its varying parts.
    pub key: String,
    /// Lines of the key held back in that window.
    pub count: u64,
    /// The window's length, in ms.
    pub window_ms: u64,
}

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (repeated {} more time(s) in {} s)",
            self.key,
            self.count,
            self.window_ms / 1000
        )
    }
}

impl RateLimiter {
    /// Most keys tracked at once; a new key past this is let through uncounted.
    pub const MAX_KEYS: usize = 1024;

    /// At most one line per key every `window_ms`.
    pub fn new(window_ms: u64) -> Self {
        Self {
            window_ms: window_ms.max(1),
            keys: BTreeMap::new(),
        }
    }

    /// Whether to write the line of `key` now: `Some(held)`, with how many lines of the
    /// key's previous window were held back and not yet said (write them with this one);
    /// `None`: counted, said later by [`RateLimiter::ended`] or the next allowed line.
    pub fn allow(&mut self, key: &str, now_ms: u64) -> Option<u64> {
        if let Some(w) = self.keys.get_mut(key) {
            if now_ms.saturating_sub(w.start_ms) < self.window_ms {
                w.held += 1;
                return None;
            }
            let held = w.held;
            *w = Window {
                start_ms: now_ms,
                held: 0,
            };
            return Some(held);
        }
        if self.keys.len() >= Self::MAX_KEYS {
            let window = self.window_ms;
            self.keys
                .retain(|_, w| w.held > 0 || now_ms.saturating_sub(w.start_ms) < window);
        }
        if self.keys.len() < Self::MAX_KEYS {
            self.keys.insert(
                key.to_string(),
                Window {
                    start_ms: now_ms,
                    held: 0,
                },
            );
        }
        Some(0)
    }

    /// Keys whose window ended with lines held back (in key order), each once; quiet keys
    /// whose window ended are forgotten.
    pub fn ended(&mut self, now_ms: u64) -> Vec<Held> {
        let window = self.window_ms;
        let mut out = Vec::new();
        self.keys.retain(|key, w| {
            if now_ms.saturating_sub(w.start_ms) < window {
                return true;
            }
            if w.held > 0 {
                out.push(Held {
                    key: key.clone(),
                    count: w.held,
                    window_ms: window,
                });
            }
            false
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_window_then_the_count() {
        let mut r = RateLimiter::new(60_000);
        let allowed = (0..10_000u64)
            .filter(|&i| r.allow("refused: TLS handshake failed", i).is_some())
            .count();
        assert_eq!(allowed, 1);
        assert_eq!(r.allow("another key", 5), Some(0), "keys are counted apart");
        assert_eq!(r.ended(59_999), vec![]);
        let held = r.ended(60_000);
        assert_eq!(
            held,
            vec![Held {
                key: "refused: TLS handshake failed".into(),
                count: 9_999,
                window_ms: 60_000
            }]
        );
        assert_eq!(
            held[0].to_string(),
            "refused: TLS handshake failed (repeated 9999 more time(s) in 60 s)"
        );
        assert_eq!(r.ended(200_000), vec![], "said once");
        assert_eq!(
            r.allow("refused: TLS handshake failed", 200_001),
            Some(0),
            "a new window"
        );
        r.allow("refused: TLS handshake failed", 200_002);
        assert_eq!(
            r.allow("refused: TLS handshake failed", 300_000),
            Some(1),
            "held lines not yet said come with the next line"
        );
    }

    #[test]
    fn memory_stays_bounded_with_ever_new_keys() {
        let mut r = RateLimiter::new(1_000);
        for i in 0..10_000u64 {
            assert_eq!(r.allow(&format!("job {i}: warning"), 0), Some(0));
        }
        assert!(r.keys.len() <= RateLimiter::MAX_KEYS);
        // Past the window, room is made again.
        assert_eq!(r.allow("late", 5_000), Some(0));
        assert!(r.keys.contains_key("late"));
    }
}
