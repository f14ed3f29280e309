//! Noise below a log's resolution: copies of a replay's jobs, each job submitted 0 or 1 s
//! later. Job logs round submit times to the second, so every copy is the same log as far
//! as the log can tell; yet a schedule is a chain, and a one-second shift early on can
//! move a wait hours later. Replaying the copies shows how far a figure moves by chance
//! (`hyperplan simulate --swf --noise K`, `benches/policy.rs` `POLICY_JITTER`): a
//! difference between two policies inside that spread says nothing about them.

use hyperplan_shared::JobSpec;
use serde::Serialize;

use super::metrics::TraceMetrics;

/// Copy `copy` (1, 2, …) of `jobs`: each job submitted 0 or 1 s later, by a fixed
/// pseudo-random bit per copy and job position, the same on every machine. Copy 0 is the
/// jobs as they are.
pub fn shifted(jobs: &[JobSpec], copy: u64) -> Vec<JobSpec> {
    let mut out = jobs.to_vec();
    if copy == 0 {
        return out;
    }
    for (i, j) in out.iter_mut().enumerate() {
        let bit = mix(copy << 32 | (i as u64 & 0xffff_ffff)) & 1;
        j.submit_time = j.submit_time.saturating_add(bit);
    }
    out
}

/// splitmix64's finaliser: well-spread bits from a counter, with no state and no seed.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The lowest and highest mean and longest wait over several runs of the same jobs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Spread {
    /// Runs counted.
    pub runs: usize,
    /// Lowest and highest mean wait (seconds).
    pub mean_wait: [f64; 2],
    /// Lowest and highest longest wait (seconds).
    pub max_wait: [u64; 2],
}

impl Spread {
    /// The spread of `runs`' figures; `None` when there are none.
    pub fn of<'a>(runs: impl IntoIterator<Item = &'a TraceMetrics>) -> Option<Self> {
        let mut spread: Option<Self> = None;
        for m in runs {
            let s = spread.get_or_insert(Self {
                runs: 0,
                mean_wait: [m.mean_wait; 2],
                max_wait: [m.max_wait; 2],
            });
            s.runs += 1;
            s.mean_wait = [s.mean_wait[0].min(m.mean_wait), s.mean_wait[1].max(m.mean_wait)];
            s.max_wait = [s.max_wait[0].min(m.max_wait), s.max_wait[1].max(m.max_wait)];
        }
        spread
    }
}

/// Run by run, on the same jobs (the same copy), how often one schedule's mean and
/// longest wait were at or below another's: a bar such as "at or below EASY's" counted
/// over the copies instead of judged on one draw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pairwise {
    /// Runs compared.
    pub runs: usize,
    /// Runs whose mean wait was at or below the other's.
    pub mean_at_or_below: usize,
    /// Runs whose longest wait was at or below the other's.
    pub max_at_or_below: usize,
    /// Runs with both.
    pub both: usize,
}

impl Pairwise {
    /// Over `(ours, theirs)` per run.
    pub fn of<'a>(runs: impl IntoIterator<Item = (&'a TraceMetrics, &'a TraceMetrics)>) -> Self {
        let mut p = Self::default();
        for (ours, theirs) in runs {
            let mean = ours.mean_wait <= theirs.mean_wait;
            let max = ours.max_wait <= theirs.max_wait;
            p.runs += 1;
            p.mean_at_or_below += usize::from(mean);
            p.max_at_or_below += usize::from(max);
            p.both += usize::from(mean && max);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::testing::JobBuilder;

    #[test]
    fn copies_shift_some_jobs_by_one_second_the_same_way_every_time() {
        let jobs: Vec<JobSpec> = (0..1000)
            .map(|i| {
                let mut j = JobBuilder::gang(&format!("j{i}"), 1, "cpu=1").build();
                j.submit_time = 100 + i;
                j
            })
            .collect();
        assert_eq!(shifted(&jobs, 0), jobs);
        let (a, b) = (shifted(&jobs, 1), shifted(&jobs, 2));
        assert_eq!(a, shifted(&jobs, 1), "a copy is the same every time");
        let moved = |c: &[JobSpec]| {
            c.iter()
                .zip(&jobs)
                .map(|(x, j)| {
                    let d = x.submit_time - j.submit_time;
                    assert!(d <= 1, "0 or 1 s later");
                    assert_eq!((&x.name, &x.tasks), (&j.name, &j.tasks), "nothing else changes");
                    d as usize
                })
                .sum::<usize>()
        };
        // About half of the jobs move, not the same half in two copies.
        assert!((400..600).contains(&moved(&a)), "{}", moved(&a));
        assert!((400..600).contains(&moved(&b)), "{}", moved(&b));
        assert_ne!(a, b);
    }

    #[test]
    fn the_spread_is_the_lowest_and_highest_of_each_figure() {
        let m = |mean: f64, max: u64| TraceMetrics {
            mean_wait: mean,
            max_wait: max,
            ..TraceMetrics::default()
        };
        let runs = [m(10.0, 300), m(12.5, 200), m(9.0, 250)];
        assert_eq!(
            Spread::of(&runs),
            Some(Spread {
                runs: 3,
                mean_wait: [9.0, 12.5],
                max_wait: [200, 300],
            })
        );
        assert_eq!(Spread::of(&[]), None);
    }

    #[test]
    fn pairwise_counts_each_run_against_its_own_yardstick() {
        let m = |mean: f64, max: u64| TraceMetrics {
            mean_wait: mean,
            max_wait: max,
            ..TraceMetrics::default()
        };
        let ours = [m(10.0, 300), m(12.5, 200), m(9.0, 250), m(8.0, 100)];
        let easy = [m(10.0, 290), m(12.0, 200), m(9.5, 250), m(9.0, 100)];
        assert_eq!(
            Pairwise::of(ours.iter().zip(&easy)),
            Pairwise {
                runs: 4,
                mean_at_or_below: 3,
                max_at_or_below: 3,
                both: 2,
            }
        );
        assert_eq!(Pairwise::of([]), Pairwise::default());
    }
}
