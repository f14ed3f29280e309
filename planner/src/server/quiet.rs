//! The daemon's warnings through one [`RateLimiter`]: a flood of bad packets or a
//! discovery source repeating itself on every change writes one line per kind per
//! minute, then one line with how many more there were. Keys are the message without the
//! peer, so a thousand peers failing the same way are one kind.

use std::sync::{LazyLock, Mutex};
use std::time::Instant;

use hyperplan_core::ratelimit::RateLimiter;

/// One line per kind of warning in this window.
const WINDOW_MS: u64 = 60_000;

static LIMITER: LazyLock<(Instant, Mutex<RateLimiter>)> =
    LazyLock::new(|| (Instant::now(), Mutex::new(RateLimiter::new(WINDOW_MS))));

fn now_ms() -> u64 {
    u64::try_from(LIMITER.0.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Whether to write the warning of kind `key` now: `Some(held)` with how many of its
/// kind were held back before it (say them with it).
pub fn allow(key: &str) -> Option<u64> {
    let now = now_ms();
    match LIMITER.1.lock() {
        Ok(mut l) => l.allow(key, now),
        Err(_) => Some(0), // a poisoned lock must not silence the log
    }
}

/// `(…; N more like it held back)` after a line, when some were.
pub fn more(held: u64) -> String {
    if held == 0 {
        String::new()
    } else {
        format!(" ({held} more like it in the last {} s)", WINDOW_MS / 1000)
    }
}

/// Says the counts of windows that ended (the driver calls it every tick).
pub fn flush() {
    let now = now_ms();
    let ended = match LIMITER.1.lock() {
        Ok(mut l) => l.ended(now),
        Err(_) => Vec::new(),
    };
    for held in ended {
        tracing::warn!("{held}");
    }
}

/// `tracing::warn!` through the limiter: `key` is the kind, the rest is the line.
macro_rules! warn_limited {
    ($key:expr, $($arg:tt)+) => {
        if let Some(held) = $crate::server::quiet::allow(&$key) {
            let more = $crate::server::quiet::more(held);
            tracing::warn!($($arg)+);
            if !more.is_empty() {
                tracing::warn!("{}{more}", $key);
            }
        }
    };
}
pub(crate) use warn_limited;
