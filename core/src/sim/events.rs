//! The clock of the trace baselines (`easy`, `topo_easy`): submissions and completions
//! in time order. Both replay a log from event to event the same way, so the order of
//! what happens at one second (completions free their nodes before that second's
//! submissions queue, and ties go by index) is written once.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::trace_job::TraceJob;

/// What is still to happen in a replay.
#[derive(Debug)]
pub(crate) struct Events {
    /// Jobs that may ever start, in queue order (submit time, then index).
    arrivals: Vec<usize>,
    /// The next of `arrivals` to enter the queue.
    next: usize,
    /// Running jobs by real end.
    ends: BinaryHeap<Reverse<(u64, usize)>>,
}

impl Events {
    /// The jobs for which `fits` holds (the others never start and block nobody).
    pub(crate) fn new(jobs: &[TraceJob], fits: impl Fn(&TraceJob) -> bool) -> Self {
        let mut arrivals: Vec<usize> = (0..jobs.len()).filter(|&i| fits(&jobs[i])).collect();
        arrivals.sort_by_key(|&i| (jobs[i].submit, i));
        Self {
            arrivals,
            next: 0,
            ends: BinaryHeap::new(),
        }
    }

    /// Job `i`, started now, really ends at `at`.
    pub(crate) fn ends_at(&mut self, at: u64, i: usize) {
        self.ends.push(Reverse((at, i)));
    }

    /// The next second at which a job ends or is submitted (`None`: nothing is left).
    /// The jobs ending then go to `ended`, those submitted then to the back of `queue`.
    /// Each call takes at least one event, so a replay ends.
    pub(crate) fn advance(&mut self, jobs: &[TraceJob], ended: &mut Vec<usize>, queue: &mut Vec<usize>) -> Option<u64> {
        let submission = self.arrivals.get(self.next).map(|&i| jobs[i].submit);
        let completion = self.ends.peek().map(|Reverse((t, _))| *t);
        let now = match (submission, completion) {
            (Some(s), Some(c)) => s.min(c),
            (Some(t), None) | (None, Some(t)) => t,
            (None, None) => return None,
        };
        while let Some(&Reverse((end, i))) = self.ends.peek()
            && end == now
        {
            self.ends.pop();
            ended.push(i);
        }
        while let Some(&i) = self.arrivals.get(self.next)
            && jobs[i].submit == now
        {
            queue.push(i);
            self.next += 1;
        }
        Some(now)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn job(submit: u64, nodes: u32) -> TraceJob {
        TraceJob {
            submit,
            nodes,
            runtime: 10,
            limit: 10,
        }
    }

    #[test]
    fn completions_and_submissions_come_in_time_order_ties_by_index() {
        let jobs = [job(5, 1), job(0, 1), job(5, 1), job(3, 9)];
        let mut ev = Events::new(&jobs, |j| j.nodes <= 4);
        let (mut ended, mut queue) = (Vec::new(), Vec::new());
        assert_eq!(ev.advance(&jobs, &mut ended, &mut queue), Some(0));
        assert_eq!(queue, [1]);
        ev.ends_at(5, 1);
        // Job 3 is too wide: never queued.
        assert_eq!(ev.advance(&jobs, &mut ended, &mut queue), Some(5));
        assert_eq!(
            (ended.as_slice(), queue.as_slice()),
            ([1].as_slice(), [1, 0, 2].as_slice())
        );
        assert_eq!(ev.advance(&jobs, &mut ended, &mut queue), None);
    }
}
