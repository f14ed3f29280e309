//! Reconnect delays: exponential backoff with jitter, so a thousand agents that lost the
//! same planner do not all knock again in the same instant.

use std::time::Duration;

/// Delays of `initial · 2ⁿ` capped at `max`, each scaled by a random factor in
/// `1 ± jitter` and never above `max`. [`Backoff::reset`] after a success.
#[derive(Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    jitter: f64,
    attempt: u32,
    rng: fastrand::Rng,
}

impl Backoff {
    /// The agent's defaults: 0.5 s doubling to 30 s, ±20 %.
    pub const INITIAL: Duration = Duration::from_millis(500);
    pub const MAX: Duration = Duration::from_secs(30);
    pub const JITTER: f64 = 0.2;

    pub fn new(initial: Duration, max: Duration, jitter: f64) -> Self {
        Self::with_rng(initial, max, jitter, fastrand::Rng::new())
    }

    /// With a seeded generator, for reproducible tests.
    pub fn with_rng(initial: Duration, max: Duration, jitter: f64, rng: fastrand::Rng) -> Self {
        Self {
            initial,
            max: max.max(initial),
            jitter: jitter.clamp(0.0, 1.0),
            attempt: 0,
            rng,
        }
    }

    /// The delay before the next attempt before jitter: `initial · 2ⁿ`, at most `max`.
    pub fn nominal(&self) -> Duration {
        // 2^20 · 0.5 s is far past any sane max; stop doubling there to avoid overflow.
        let factor = 1u32 << self.attempt.min(20);
        self.initial.saturating_mul(factor).min(self.max)
    }

    /// The delay to wait now; the next one doubles.
    pub fn next_delay(&mut self) -> Duration {
        let nominal = self.nominal();
        self.attempt = self.attempt.saturating_add(1);
        let factor = 1.0 + self.jitter * (2.0 * self.rng.f64() - 1.0);
        nominal.mul_f64(factor).min(self.max)
    }

    /// Failed attempts since the last reset.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }

    /// Back to `initial`: the planner answered.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(Self::INITIAL, Self::MAX, Self::JITTER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeded(seed: u64) -> Backoff {
        Backoff::with_rng(
            Backoff::INITIAL,
            Backoff::MAX,
            Backoff::JITTER,
            fastrand::Rng::with_seed(seed),
        )
    }

    #[test]
    fn nominal_doubles_to_the_cap() {
        let mut b = seeded(1);
        let mut nominals = Vec::new();
        for _ in 0..10 {
            nominals.push(b.nominal().as_millis());
            b.next_delay();
        }
        assert_eq!(
            nominals,
            [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000, 30000]
        );
        for _ in 0..100 {
            b.next_delay();
        }
        assert_eq!(b.nominal(), Backoff::MAX, "no overflow after many attempts");
    }

    #[test]
    fn every_delay_is_within_the_jitter_band_and_the_cap() {
        for seed in 0..50 {
            let mut b = seeded(seed);
            for _ in 0..12 {
                let nominal = b.nominal();
                let d = b.next_delay();
                assert!(d >= nominal.mul_f64(0.8), "{d:?} under 80% of {nominal:?}");
                assert!(d <= nominal.mul_f64(1.2), "{d:?} over 120% of {nominal:?}");
                assert!(d <= Backoff::MAX, "{d:?} over the cap");
            }
        }
    }

    #[test]
    fn jitter_spreads_the_delays() {
        let mut first = Vec::new();
        for seed in 0..200 {
            first.push(seeded(seed).next_delay());
        }
        let min = first.iter().min().copied().unwrap_or_default();
        let max = first.iter().max().copied().unwrap_or_default();
        // 200 draws from ±20 % of 500 ms: both ends of the band are reached closely.
        assert!(min < Duration::from_millis(430), "{min:?}");
        assert!(max > Duration::from_millis(570), "{max:?}");
    }

    #[test]
    fn reset_starts_over() {
        let mut b = seeded(7);
        for _ in 0..5 {
            b.next_delay();
        }
        assert_eq!(b.attempts(), 5);
        b.reset();
        assert_eq!(b.attempts(), 0);
        assert_eq!(b.nominal(), Backoff::INITIAL);
        let d = b.next_delay();
        assert!(d <= Duration::from_millis(600), "{d:?}");
    }

    #[test]
    fn no_jitter_is_exact() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(250), 0.0);
        let delays: Vec<_> = (0..4).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(delays, [100, 200, 250, 250]);
    }
}
