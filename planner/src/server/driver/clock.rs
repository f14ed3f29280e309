//! The daemon's one clock: what the core is told the time is (`now_ms`), what the
//! discovery pollers stamp their reads with, and when the driver ticks next.

#[cfg(test)]
use std::sync::Arc;
#[cfg(test)]
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Unix milliseconds when the clock started plus monotonic time since: monotonic, so a
/// wall-clock step can neither make every node look silent nor keep a dead one Ready;
/// Unix-based, so job times read as dates; milliseconds, because agents may heartbeat
/// more than once a second. A virtual clock (tests) moves only when told.
#[derive(Clone, Debug)]
pub struct Clock(Source);

#[derive(Clone, Debug)]
enum Source {
    Real {
        start: Instant,
        start_unix_ms: u64,
    },
    #[cfg(test)]
    Virtual(Arc<AtomicU64>),
}

impl Clock {
    /// The real clock, from now.
    pub fn real() -> Self {
        let unix = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        Self(Source::Real {
            start: Instant::now(),
            start_unix_ms: u64::try_from(unix.as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// A clock that reads `start_ms` until [`Clock::advance`] moves it.
    #[cfg(test)]
    pub fn virtual_at(start_ms: u64) -> Self {
        Self(Source::Virtual(Arc::new(AtomicU64::new(start_ms))))
    }

    /// Moves a virtual clock on (a real one ignores it).
    #[cfg(test)]
    pub fn advance(&self, by: std::time::Duration) {
        if let Source::Virtual(ms) = &self.0 {
            ms.fetch_add(u64::try_from(by.as_millis()).unwrap_or(u64::MAX), Ordering::SeqCst);
        }
    }

    /// Unix milliseconds.
    pub fn now_ms(&self) -> u64 {
        match &self.0 {
            Source::Real { start, start_unix_ms } => {
                let since = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
                start_unix_ms.saturating_add(since)
            }
            #[cfg(test)]
            Source::Virtual(ms) => ms.load(Ordering::SeqCst),
        }
    }

    /// Unix seconds.
    pub fn now_secs(&self) -> u64 {
        self.now_ms() / 1000
    }
}
