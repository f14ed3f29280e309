//! The agent's PMI hub: every job's [`Space`] on this node, the ranks waiting in their
//! barriers, and the fences to send. It outlives links (a fence sent before a reconnect
//! goes again on the next link) and is shared by the ranks' connections ([`super::conn`])
//! and the link's session, which sends what [`Hub::take_outbox`] gives and hands in the
//! planner's `FenceDone` and `FenceFailed`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use hyperplan_net::messages::PmiFence;
use tokio::sync::{Notify, oneshot};

use super::space::{Barrier, JobShape, PutError, Space};

/// How a rank's wait in a barrier ends: `Ok` out, `Err` with why.
pub type Released = Result<(), String>;

/// One rank's PMI socket, as the task manager hands it over at launch.
#[derive(Debug)]
pub struct PmiTask {
    pub shape: JobShape,
    pub rank: u32,
    /// The agent's end of the socket pair whose other end is the task's `PMI_FD`.
    pub stream: std::os::unix::net::UnixStream,
}

struct JobEntry {
    space: Space,
    waiters: BTreeMap<u32, oneshot::Sender<Released>>,
    /// Ranks' sockets still open.
    open: u32,
}

#[derive(Default)]
struct State {
    jobs: HashMap<u64, JobEntry>,
    outbox: Vec<PmiFence>,
}

/// Shared by the link and every rank's connection.
#[derive(Clone, Default)]
pub struct Hub {
    state: Arc<Mutex<State>>,
    /// Woken when the outbox has something.
    pub wake: Arc<Notify>,
}

/// What a barrier entry gives the rank: wait on the receiver.
pub type Waiting = oneshot::Receiver<Released>;

impl Hub {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A connection that panicked holding the lock leaves consistent data (every
        // change is a single step): go on with it.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts serving a rank's socket (on the current tokio runtime).
    pub fn attach(&self, task: PmiTask) {
        let stream = match task
            .stream
            .set_nonblocking(true)
            .and_then(|()| tokio::net::UnixStream::from_std(task.stream))
        {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(job = %task.shape.job, rank = task.rank, "cannot serve the task's PMI socket: {e}");
                return;
            }
        };
        let shape = task.shape.clone();
        {
            let mut state = self.lock();
            let entry = state.jobs.entry(shape.job_id).or_insert_with(|| JobEntry {
                space: Space::new(task.shape),
                waiters: BTreeMap::new(),
                open: 0,
            });
            entry.open += 1;
        }
        tokio::spawn(super::conn::serve(self.clone(), shape, task.rank, stream));
    }

    /// A rank's socket closed: the job's space goes with its last one.
    pub fn detach(&self, job_id: u64, rank: u32) {
        let mut state = self.lock();
        if let Some(entry) = state.jobs.get_mut(&job_id) {
            entry.open = entry.open.saturating_sub(1);
            entry.waiters.remove(&rank);
            if entry.open == 0 {
                state.jobs.remove(&job_id);
            }
        }
    }

    pub fn put(&self, job_id: u64, key: &str, value: &str) -> Result<(), PutError> {
        match self.lock().jobs.get_mut(&job_id) {
            Some(e) => e.space.put(key, value),
            None => Err(PutError::Gone),
        }
    }

    pub fn get(&self, job_id: u64, key: &str) -> Option<String> {
        self.lock().jobs.get(&job_id)?.space.get(key).map(str::to_string)
    }

    /// `rank` enters its job's barrier; the receiver says when it leaves.
    pub fn barrier_in(&self, job_id: u64, rank: u32) -> Waiting {
        let (tx, rx) = oneshot::channel();
        let mut state = self.lock();
        let State { jobs, outbox } = &mut *state;
        let Some(entry) = jobs.get_mut(&job_id) else {
            let _ = tx.send(Err("the job's PMI space is gone".into()));
            return rx;
        };
        entry.waiters.insert(rank, tx);
        match entry.space.barrier_in(rank) {
            Barrier::Wait => {}
            Barrier::Send(fence) => {
                outbox.push(fence);
                self.wake.notify_one();
            }
            Barrier::Release(ranks) => release(entry, &ranks, Ok(())),
        }
        rx
    }

    /// The fences to send now.
    pub fn take_outbox(&self) -> Vec<PmiFence> {
        std::mem::take(&mut self.lock().outbox)
    }

    /// Every fence sent and not answered: what a new link sends first.
    pub fn unanswered(&self) -> Vec<PmiFence> {
        let mut state = self.lock();
        state.outbox.clear();
        let mut out: Vec<PmiFence> = state
            .jobs
            .values()
            .filter_map(|e| e.space.unanswered().cloned())
            .collect();
        out.sort_by_key(|f| (f.job_id, f.seq));
        out
    }

    /// The planner's `FenceDone`.
    pub fn done(&self, fence: PmiFence) {
        let mut state = self.lock();
        let Some(entry) = state.jobs.get_mut(&fence.job_id) else {
            return;
        };
        let seq = fence.seq;
        match entry.space.done(fence) {
            Ok(Some(ranks)) => release(entry, &ranks, Ok(())),
            Ok(None) => {}
            Err(e) => {
                if let Some(ranks) = entry.space.failed(seq) {
                    release(entry, &ranks, Err(e.to_string()));
                }
            }
        }
    }

    /// The planner's `FenceFailed`.
    pub fn failed(&self, job_id: u64, seq: u64, reason: &str) {
        let mut state = self.lock();
        let Some(entry) = state.jobs.get_mut(&job_id) else {
            return;
        };
        if let Some(ranks) = entry.space.failed(seq) {
            tracing::warn!(job = %entry.space.shape.job, job_id, seq, "a PMI fence failed: {reason}");
            release(entry, &ranks, Err(reason.to_string()));
        }
    }

    /// Jobs with an open PMI socket here.
    pub fn jobs(&self) -> usize {
        self.lock().jobs.len()
    }
}

fn release(entry: &mut JobEntry, ranks: &[u32], how: Released) {
    for rank in ranks {
        if let Some(tx) = entry.waiters.remove(rank) {
            let _ = tx.send(how.clone());
        }
    }
}
