//! The topology-oblivious EASY backfill baseline, and plain FCFS.
//!
//! Benchmarks replay real job logs (the Parallel Workloads Archive) and need a yardstick:
//! what the scheduler most of those machines ran would have done with the same jobs. This is
//! Lifka's EASY (the Extensible Argonne Scheduling sYstem) as the archive's papers model it:
//! a job is a count of interchangeable nodes, first come first served, and while the first
//! waiting job cannot start, later jobs may jump ahead if they do not delay it, judged by the
//! time limits users gave. It knows nothing of topology, resources or the ECS world: a small,
//! independent reference, plain Rust, so that it can be trusted when the planner is not.

use std::collections::BTreeSet;

use super::events::Events;
pub use super::trace_job::TraceJob;

/// Start time per job (same order as `jobs`); `None` for a job wider than the cluster (never starts).
pub fn easy_backfill(cluster_nodes: u32, jobs: &[TraceJob]) -> Vec<Option<u64>> {
    Sim::new(cluster_nodes, jobs, true).run()
}

/// The same without backfill: first come first served, strictly in order.
pub fn fcfs(cluster_nodes: u32, jobs: &[TraceJob]) -> Vec<Option<u64>> {
    Sim::new(cluster_nodes, jobs, false).run()
}

/// The state of one run, from event to event.
struct Sim<'a> {
    jobs: &'a [TraceJob],
    backfill: bool,
    start: Vec<Option<u64>>,
    /// Submissions and real ends (run time, cut at the limit) still to come.
    events: Events,
    /// Waiting jobs, in queue order.
    queue: Vec<usize>,
    /// Running jobs by estimated end (start + limit), as backfilling sees them.
    estimates: BTreeSet<(u64, usize)>,
    free: u32,
}

impl<'a> Sim<'a> {
    fn new(cluster_nodes: u32, jobs: &'a [TraceJob], backfill: bool) -> Self {
        Sim {
            jobs,
            backfill,
            start: vec![None; jobs.len()],
            events: Events::new(jobs, |j| j.width() <= cluster_nodes),
            queue: Vec::new(),
            estimates: BTreeSet::new(),
            free: cluster_nodes,
        }
    }

    /// From event to event until every job that fits has started and ended.
    fn run(mut self) -> Vec<Option<u64>> {
        let mut ended = Vec::new();
        while let Some(now) = self.events.advance(self.jobs, &mut ended, &mut self.queue) {
            for i in ended.drain(..) {
                self.free += self.jobs[i].width();
                self.estimates.remove(&(self.estimate(i), i));
            }
            self.schedule(now);
        }
        self.start
    }

    /// When backfilling expects running job `i` to end.
    fn estimate(&self, i: usize) -> u64 {
        self.start[i].unwrap_or_default().saturating_add(self.jobs[i].limit())
    }

    fn launch(&mut self, i: usize, now: u64) {
        let job = &self.jobs[i];
        self.start[i] = Some(now);
        self.free -= job.width();
        self.events.ends_at(now.saturating_add(job.runs()), i);
        self.estimates.insert((now.saturating_add(job.limit()), i));
    }

    /// Starts jobs from the head of the queue while the head fits; then, with backfill,
    /// later jobs that do not delay the head's reservation.
    fn schedule(&mut self, now: u64) {
        let mut k = 0;
        while let Some(&i) = self.queue.get(k)
            && self.jobs[i].width() <= self.free
        {
            self.launch(i, now);
            k += 1;
        }
        if self.backfill && k < self.queue.len() && self.free > 0 {
            let (shadow, mut extra) = self.reservation(self.jobs[self.queue[k]].width());
            for at in k + 1..self.queue.len() {
                if self.free == 0 {
                    break;
                }
                let i = self.queue[at];
                let job = self.jobs[i];
                let width = job.width();
                if width > self.free {
                    continue;
                }
                if now.saturating_add(job.limit()) <= shadow {
                    self.launch(i, now);
                } else if width <= extra {
                    extra -= width;
                    self.launch(i, now);
                }
            }
        }
        if k == self.queue.len() {
            self.queue.clear();
        } else if self.queue[k..].iter().any(|&i| self.start[i].is_some()) {
            let start = &self.start;
            self.queue.retain(|&i| start[i].is_none());
        } else {
            self.queue.drain(..k);
        }
    }

    /// The head's reservation: the shadow time (the first estimated end at which `need`
    /// nodes are free) and the extra nodes free then beyond `need`.
    fn reservation(&self, need: u32) -> (u64, u32) {
        let mut avail = self.free;
        let mut ends = self.estimates.iter().peekable();
        while let Some(&(end, i)) = ends.next() {
            avail += self.jobs[i].width();
            if avail >= need {
                // Every job that ends at the shadow time frees its nodes then.
                while let Some(&&(same, j)) = ends.peek()
                    && same == end
                {
                    avail += self.jobs[j].width();
                    ends.next();
                }
                return (end, avail - need);
            }
        }
        // Not reached: the head fits the cluster, so it fits once everything has ended.
        (u64::MAX, 0)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    fn job(submit: u64, nodes: u32, runtime: u64, limit: u64) -> TraceJob {
        TraceJob {
            submit,
            nodes,
            runtime,
            limit,
        }
    }

    #[test]
    fn a_wide_job_keeps_its_reservation_and_a_short_narrow_one_backfills() {
        let jobs = [job(0, 2, 100, 100), job(1, 4, 50, 50), job(2, 1, 10, 50)];
        // The 4-node job waits for the first (shadow 100, no extra nodes); the 1-node job
        // ends by 52, before the shadow time, so it starts at once.
        assert_eq!(easy_backfill(4, &jobs), [Some(0), Some(100), Some(2)]);
        // FCFS keeps it behind the wide job.
        assert_eq!(fcfs(4, &jobs), [Some(0), Some(100), Some(150)]);
    }

    #[test]
    fn a_long_narrow_job_may_not_delay_the_head() {
        // Ending at 202 it would hold a node past the shadow time (100), when the head needs all 4.
        let jobs = [job(0, 2, 100, 100), job(1, 4, 50, 50), job(2, 1, 10, 200)];
        assert_eq!(easy_backfill(4, &jobs), [Some(0), Some(100), Some(150)]);
        assert_eq!(fcfs(4, &jobs), [Some(0), Some(100), Some(150)]);
    }

    #[test]
    fn a_long_narrow_job_may_use_the_extra_nodes_only() {
        // The head needs 3 of the 4 nodes free at 100: one extra node. The first long job
        // takes it; the second would delay the head and waits.
        let jobs = [
            job(0, 2, 100, 100),
            job(1, 3, 50, 50),
            job(2, 1, 200, 200),
            job(3, 1, 200, 200),
        ];
        assert_eq!(easy_backfill(4, &jobs), [Some(0), Some(100), Some(2), Some(150)]);
        assert_eq!(fcfs(4, &jobs), [Some(0), Some(100), Some(100), Some(150)]);
    }

    #[test]
    fn every_job_ending_at_the_shadow_time_counts_for_the_extra_nodes() {
        // Two 2-node jobs both end at 100: the head needs 3 of the 6 nodes free then, which
        // leaves 3 extra, enough for the long 2-node job to start at once.
        let jobs = [
            job(0, 2, 100, 100),
            job(0, 2, 100, 100),
            job(1, 3, 50, 50),
            job(2, 2, 500, 500),
        ];
        assert_eq!(easy_backfill(6, &jobs), [Some(0), Some(0), Some(100), Some(2)]);
    }

    #[test]
    fn the_head_starts_when_jobs_really_end_not_at_their_estimate() {
        // The first job asks for 100 s but ends at 30; the 1-node job was backfilled at 2
        // against the shadow time 100 (ending by 92) and keeps running until 82.
        let jobs = [job(0, 2, 30, 100), job(1, 3, 50, 50), job(2, 1, 80, 90)];
        assert_eq!(easy_backfill(4, &jobs), [Some(0), Some(30), Some(2)]);
    }

    #[test]
    fn a_job_past_its_limit_is_killed_at_it() {
        let jobs = [job(0, 4, 500, 100), job(0, 4, 10, 0), job(0, 1, 5, 10)];
        // Limit 0 counts as 1: the second job runs 1 s.
        assert_eq!(easy_backfill(4, &jobs), [Some(0), Some(100), Some(101)]);
    }

    #[test]
    fn completions_free_nodes_before_jobs_start_at_the_same_time() {
        let jobs = [
            job(0, 4, 100, 100),
            job(100, 4, 10, 10),
            job(100, 1, 0, 5),
            job(110, 4, 1, 1),
        ];
        assert_eq!(easy_backfill(4, &jobs), [Some(0), Some(100), Some(110), Some(110)]);
    }

    #[test]
    fn a_job_wider_than_the_cluster_never_starts_and_blocks_nobody() {
        let jobs = [job(0, 2, 10, 10), job(1, 5, 10, 10), job(2, 2, 10, 10), job(3, 1, 1, 1)];
        for starts in [easy_backfill(4, &jobs), fcfs(4, &jobs)] {
            assert_eq!(starts, [Some(0), None, Some(2), Some(10)]);
        }
        assert_eq!(easy_backfill(0, &jobs), [None; 4]);
        assert!(easy_backfill(4, &[]).is_empty());
    }

    #[test]
    fn queue_order_is_submit_time_then_index() {
        let jobs = [job(5, 4, 10, 10), job(0, 4, 10, 10), job(5, 4, 10, 10)];
        assert_eq!(fcfs(4, &jobs), [Some(10), Some(0), Some(20)]);
    }

    #[test]
    fn huge_times_saturate_instead_of_overflowing() {
        let jobs = [job(u64::MAX - 1, 1, u64::MAX, u64::MAX), job(u64::MAX, 1, 1, 1)];
        assert_eq!(easy_backfill(1, &jobs), [Some(u64::MAX - 1), Some(u64::MAX)]);
    }

    /// Every start at or after its submission, and never more nodes busy than there are
    /// (ends before starts at the same second).
    fn check_schedule(cluster: u32, jobs: &[TraceJob], starts: &[Option<u64>]) {
        let mut events = Vec::new();
        for (job, start) in jobs.iter().zip(starts) {
            match start {
                // A job that runs 0 s holds its nodes for no time.
                Some(s) if job.runs() == 0 => assert!(*s >= job.submit),
                Some(s) => {
                    assert!(*s >= job.submit);
                    events.push((s + job.runs(), 0, job.width()));
                    events.push((*s, 1, job.width()));
                }
                None => assert!(job.width() > cluster),
            }
        }
        events.sort_unstable();
        let mut busy = 0u32;
        for (_, kind, width) in events {
            if kind == 0 {
                busy -= width;
            } else {
                busy += width;
                assert!(busy <= cluster);
            }
        }
    }

    /// The same rules, the slow way: every second, over and over until nothing changes,
    /// from the whole state.
    fn reference(cluster: u32, jobs: &[TraceJob], backfill: bool) -> Vec<Option<u64>> {
        let n = jobs.len();
        let mut start: Vec<Option<u64>> = vec![None; n];
        let mut done = vec![false; n];
        let horizon = jobs.iter().map(|j| j.submit).max().unwrap_or(0) + jobs.iter().map(|j| j.runs()).sum::<u64>();
        for t in 0..=horizon {
            loop {
                let mut changed = false;
                for i in 0..n {
                    if let Some(s) = start[i]
                        && !done[i]
                        && s + jobs[i].runs() <= t
                    {
                        done[i] = true;
                        changed = true;
                    }
                }
                let running = |start: &[Option<u64>]| -> Vec<usize> {
                    (0..n).filter(|&i| start[i].is_some() && !done[i]).collect()
                };
                let mut free = cluster - running(&start).iter().map(|&i| jobs[i].width()).sum::<u32>();
                let mut queue: Vec<usize> = (0..n)
                    .filter(|&i| start[i].is_none() && jobs[i].submit <= t && jobs[i].width() <= cluster)
                    .collect();
                queue.sort_by_key(|&i| (jobs[i].submit, i));
                let mut k = 0;
                while k < queue.len() && jobs[queue[k]].width() <= free {
                    start[queue[k]] = Some(t);
                    free -= jobs[queue[k]].width();
                    changed = true;
                    k += 1;
                }
                if backfill && k < queue.len() {
                    let need = jobs[queue[k]].width();
                    let mut ends: Vec<(u64, u32)> = running(&start)
                        .iter()
                        .map(|&i| (start[i].unwrap() + jobs[i].limit(), jobs[i].width()))
                        .collect();
                    ends.sort_unstable();
                    let mut avail = free;
                    let mut shadow = 0;
                    for (end, width) in &ends {
                        if avail >= need && *end > shadow {
                            break;
                        }
                        avail += width;
                        shadow = *end;
                    }
                    let mut extra = avail - need;
                    for &i in &queue[k + 1..] {
                        let (width, limit) = (jobs[i].width(), jobs[i].limit());
                        if width <= free && (t + limit <= shadow || width <= extra) {
                            if t + limit > shadow {
                                extra -= width;
                            }
                            start[i] = Some(t);
                            free -= width;
                            changed = true;
                        }
                    }
                }
                if !changed {
                    break;
                }
            }
        }
        start
    }

    fn small_jobs() -> impl Strategy<Value = Vec<TraceJob>> {
        proptest::collection::vec(
            (0u64..20, 0u32..7, 0u64..12, 0u64..14).prop_map(|(s, n, r, l)| job(s, n, r, l)),
            0..12,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]
        #[test]
        fn matches_the_slow_reference(cluster in 1u32..6, jobs in small_jobs()) {
            for backfill in [true, false] {
                let fast = if backfill { easy_backfill(cluster, &jobs) } else { fcfs(cluster, &jobs) };
                check_schedule(cluster, &jobs, &fast);
                prop_assert_eq!(&fast, &reference(cluster, &jobs, backfill), "backfill {}", backfill);
            }
        }
    }

    /// The KTH SP2 log (100 nodes, 1 processor a node), as the benches read it.
    fn kth_jobs(max_jobs: Option<usize>) -> Vec<TraceJob> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/traces/KTH-SP2-1996-2.1-cln.swf"
        );
        let log = hyperplan_shared::swf::load_swf_file(std::path::Path::new(path), max_jobs).unwrap();
        log.jobs
            .iter()
            .filter_map(|j| {
                let runtime = j.runtime?;
                Some(job(j.submit, j.procs?, runtime, j.requested_time.unwrap_or(runtime)))
            })
            .collect()
    }

    #[test]
    fn the_kth_log_replays_within_the_cluster_and_backfill_cuts_the_waits() {
        let jobs = kth_jobs(None);
        assert_eq!(jobs.len(), 28_475);
        let easy = easy_backfill(100, &jobs);
        let plain = fcfs(100, &jobs);
        for starts in [&easy, &plain] {
            check_schedule(100, &jobs, starts);
            assert!(starts.iter().all(Option::is_some));
        }
        // FCFS starts jobs in queue order.
        let mut order: Vec<usize> = (0..jobs.len()).collect();
        order.sort_by_key(|&i| (jobs[i].submit, i));
        assert!(order.windows(2).all(|w| plain[w[0]] <= plain[w[1]]));
        let mean_wait = |starts: &[Option<u64>]| {
            let total: u64 = jobs.iter().zip(starts).map(|(j, s)| s.unwrap() - j.submit).sum();
            total / jobs.len() as u64
        };
        let (easy_wait, fcfs_wait) = (mean_wait(&easy), mean_wait(&plain));
        assert!(easy_wait < fcfs_wait, "EASY {easy_wait} s, FCFS {fcfs_wait} s");
    }
}
