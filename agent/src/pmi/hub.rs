//! The agent's PMI hub: every job's [`Space`] on this node, the ranks waiting in their
//! barriers, and the fences to send. It outlives links (a fence sent before a reconnect
//! goes again on the next link) and is shared by the ranks' connections ([`super::conn`])
//! and the link's session, which sends what [`Hub::take_outbox`] gives and hands in the
//! planner's `FenceDone` and `FenceFailed`.
//!
//! Bounded per node and per user as well as per job: what each space holds
//! ([`Space::bytes`]) counts to the node's total and to its job's user's (the tasks'
//! uid), and a put, or a fence's answer, past [`Bounds`] is refused as one past the job's
//! own bound is: one user's jobs cannot take the node's memory. A job's space goes with
//! its last rank's socket, and then its memory goes back to the system: glibc keeps what
//! is freed in its arenas, and the agent kept six ended jobs' 350 MB.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use hyperplan_net::messages::PmiFence;
use tokio::sync::{Notify, oneshot};

use super::space::{Barrier, JobShape, PutError, Refusal, Room, Space};

/// How a rank's wait in a barrier ends: `Ok` out, `Err` with why.
pub type Released = Result<(), BarrierError>;

/// Why a barrier failed.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum BarrierError {
    /// The job's space went before the rank entered.
    #[error("the job's PMI space is gone")]
    Gone,
    /// The fence's answer did not fit here.
    #[error(transparent)]
    Here(PutError),
    /// The planner failed the fence (`FenceFailed`), with its reason.
    #[error("{0}")]
    Planner(String),
}

/// The most all jobs' spaces hold on a node (as [`Space::bytes`] counts): what PMI may
/// cost the agent at most, whoever runs there. A job's own bound
/// ([`super::space::MAX_SPACE_BYTES`]) stays; with these defaults its user's is nearer.
pub const NODE_BYTES: usize = 64 << 20;
/// The most one user's jobs' spaces hold on a node: a quarter of [`NODE_BYTES`], so
/// that no user's jobs leave others without; room for the business cards of a job of
/// ~50,000 ranks (MPICH's, ~200 bytes each, with [`super::space::PAIR_OVERHEAD`]).
pub const USER_BYTES: usize = 16 << 20;
/// An ended job's space at least this large gives its memory back to the system
/// (`malloc_trim`, a few ms for tens of MiB); smaller ones are left to the allocator.
const TRIM_AFTER: usize = 1 << 20;

/// What the spaces on this node may hold together, and per user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub node: usize,
    pub user: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            node: NODE_BYTES,
            user: USER_BYTES,
        }
    }
}

/// One rank's PMI socket, as the task manager hands it over at launch.
#[derive(Debug)]
pub struct PmiTask {
    pub shape: JobShape,
    pub rank: u32,
    /// The task's user, whose bound its job's space counts to.
    pub uid: u32,
    /// The agent's end of the socket pair whose other end is the task's `PMI_FD`.
    pub stream: std::os::unix::net::UnixStream,
}

struct JobEntry {
    space: Space,
    waiters: BTreeMap<u32, oneshot::Sender<Released>>,
    /// Ranks' sockets still open.
    open: u32,
    /// The job's user (of its first task here).
    uid: u32,
    /// A put was refused by the node's or the user's bound (logged once per job).
    refused: bool,
}

#[derive(Default)]
struct State {
    jobs: HashMap<hyperplan_shared::ids::JobId, JobEntry>,
    outbox: Vec<PmiFence>,
    /// What all spaces hold: the sum of their [`Space::bytes`].
    bytes: usize,
    /// The same by user; a user holding nothing has no entry.
    by_user: HashMap<u32, usize>,
}

impl State {
    /// The room the bounds leave a space of `uid`'s, and the bound nearer to full.
    fn room(&self, bounds: Bounds, uid: u32) -> Room {
        let node = bounds.node.saturating_sub(self.bytes);
        let user = bounds.user.saturating_sub(self.by_user.get(&uid).copied().unwrap_or(0));
        if user <= node {
            Room {
                bytes: user,
                refusal: Refusal::User { limit: bounds.user },
            }
        } else {
            Room {
                bytes: node,
                refusal: Refusal::Node { limit: bounds.node },
            }
        }
    }

    /// Runs `change` on job `job_id`'s entry (with its room and the outbox) and counts
    /// what its space holds after; `None` when the job has no space here.
    fn change<R>(
        &mut self,
        bounds: Bounds,
        job_id: hyperplan_shared::ids::JobId,
        change: impl FnOnce(&mut JobEntry, Room, &mut Vec<PmiFence>) -> R,
    ) -> Option<R> {
        let uid = self.jobs.get(&job_id)?.uid;
        let room = self.room(bounds, uid);
        let entry = self.jobs.get_mut(&job_id)?;
        let before = entry.space.bytes();
        let out = change(entry, room, &mut self.outbox);
        let after = entry.space.bytes();
        self.count(uid, before, after);
        Some(out)
    }

    /// A space of `uid`'s went from `before` bytes to `after`.
    fn count(&mut self, uid: u32, before: usize, after: usize) {
        self.bytes = self.bytes.saturating_sub(before).saturating_add(after);
        let user = self.by_user.entry(uid).or_default();
        *user = user.saturating_sub(before).saturating_add(after);
        if *user == 0 {
            self.by_user.remove(&uid);
        }
    }
}

/// Shared by the link and every rank's connection.
#[derive(Clone, Default)]
pub struct Hub {
    state: Arc<Mutex<State>>,
    bounds: Bounds,
    /// Woken when the outbox has something.
    pub wake: Arc<Notify>,
}

/// What a barrier entry gives the rank: wait on the receiver.
pub type Waiting = oneshot::Receiver<Released>;

impl Hub {
    /// A hub whose spaces are bounded by `bounds` (a default hub: [`Bounds::default`]).
    pub fn new(bounds: Bounds) -> Hub {
        Hub {
            bounds,
            ..Hub::default()
        }
    }

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
                uid: task.uid,
                refused: false,
            });
            entry.open += 1;
        }
        tokio::spawn(super::conn::serve(self.clone(), shape, task.rank, stream));
    }

    /// A rank's socket closed: the job's space goes with its last one, and with a large
    /// one the memory it held.
    pub fn detach(&self, job_id: hyperplan_shared::ids::JobId, rank: u32) {
        let gone = {
            let mut state = self.lock();
            let Some(entry) = state.jobs.get_mut(&job_id) else {
                return;
            };
            entry.open = entry.open.saturating_sub(1);
            entry.waiters.remove(&rank);
            if entry.open > 0 {
                return;
            }
            let gone = state.jobs.remove(&job_id);
            if let Some(entry) = &gone {
                state.count(entry.uid, entry.space.bytes(), 0);
            }
            // Its fence waiting for a link: nobody is left to answer.
            state.outbox.retain(|f| f.job_id != job_id);
            // A burst of jobs leaves no large empty table behind.
            if state.jobs.capacity() > 4 * state.jobs.len().max(16) {
                state.jobs.shrink_to_fit();
            }
            if state.by_user.capacity() > 4 * state.by_user.len().max(16) {
                state.by_user.shrink_to_fit();
            }
            gone
        };
        // Freed outside the lock: the other jobs' ranks go on meanwhile.
        let Some(entry) = gone else { return };
        let held = entry.space.bytes();
        drop(entry);
        if held >= TRIM_AFTER {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn_blocking(give_back)),
                Err(_) => give_back(),
            }
        }
    }

    pub fn put(&self, job_id: hyperplan_shared::ids::JobId, key: &str, value: &str) -> Result<(), PutError> {
        let put = self.lock().change(self.bounds, job_id, |entry, room, _| {
            let put = entry.space.put(key, value, room);
            if let Err(e @ (PutError::UserFull { .. } | PutError::NodeFull { .. })) = &put
                && !entry.refused
            {
                entry.refused = true;
                let job = &entry.space.shape.job;
                tracing::warn!(job = %job, job_id = %job_id, uid = entry.uid, "PMI put refused (said once per job): {e}");
            }
            put
        });
        put.unwrap_or(Err(PutError::Gone))
    }

    pub fn get(&self, job_id: hyperplan_shared::ids::JobId, key: &str) -> Option<String> {
        self.lock().jobs.get(&job_id)?.space.get(key).map(str::to_string)
    }

    /// `rank` enters its job's barrier; the receiver says when it leaves.
    pub fn barrier_in(&self, job_id: hyperplan_shared::ids::JobId, rank: u32) -> Waiting {
        let (tx, rx) = oneshot::channel();
        let mut tx = Some(tx);
        let wake = &self.wake;
        self.lock().change(self.bounds, job_id, |entry, _, outbox| {
            if let Some(tx) = tx.take() {
                entry.waiters.insert(rank, tx);
            }
            match entry.space.barrier_in(rank) {
                Barrier::Wait => {}
                Barrier::Send(fence) => {
                    outbox.push(fence);
                    wake.notify_one();
                }
                Barrier::Release(ranks) => release(entry, &ranks, Ok(())),
            }
        });
        if let Some(tx) = tx {
            let _ = tx.send(Err(BarrierError::Gone));
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

    /// The planner's `FenceDone`; past a bound the fence fails here.
    pub fn done(&self, fence: PmiFence) {
        let job_id = fence.job_id;
        self.lock().change(self.bounds, job_id, |entry, room, _| {
            let seq = fence.seq;
            match entry.space.done(fence, room) {
                Ok(Some(ranks)) => release(entry, &ranks, Ok(())),
                Ok(None) => {}
                Err(e) => {
                    if let Some(ranks) = entry.space.failed(seq) {
                        tracing::warn!(job = %entry.space.shape.job, job_id = %job_id, seq, uid = entry.uid, "a PMI fence failed here: {e}");
                        release(entry, &ranks, Err(BarrierError::Here(e)));
                    }
                }
            }
        });
    }

    /// The planner's `FenceFailed`.
    pub fn failed(&self, job_id: hyperplan_shared::ids::JobId, seq: u64, reason: &str) {
        self.lock().change(self.bounds, job_id, |entry, _, _| {
            if let Some(ranks) = entry.space.failed(seq) {
                tracing::warn!(job = %entry.space.shape.job, job_id = %job_id, seq, "a PMI fence failed: {reason}");
                release(entry, &ranks, Err(BarrierError::Planner(reason.to_string())));
            }
        });
    }

    /// Jobs with an open PMI socket here.
    pub fn jobs(&self) -> usize {
        self.lock().jobs.len()
    }

    /// What all jobs' spaces hold here ([`Space::bytes`]): `/metrics`'
    /// `hyperplan_agent_pmi_bytes`.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// What the spaces of `uid`'s jobs hold here.
    pub fn user_bytes(&self, uid: u32) -> usize {
        self.lock().by_user.get(&uid).copied().unwrap_or(0)
    }
}

/// Gives the memory freed by an ended job's space back to the system: glibc keeps freed
/// memory in its arenas (each thread's) and returns only what lies at a heap's top.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn give_back() {
    // SAFETY: malloc_trim takes no pointer; it walks glibc's own arenas, each under its
    // lock, and releases whole free pages only.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Other allocators return what they free on their own terms.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn give_back() {}

fn release(entry: &mut JobEntry, ranks: &[u32], how: Released) {
    for rank in ranks {
        if let Some(tx) = entry.waiters.remove(rank) {
            let _ = tx.send(how.clone());
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::net::UnixStream;

    use super::super::space::{MAX_SPACE_BYTES, charge};
    use super::*;

    fn shape(job_id: hyperplan_shared::ids::JobId, local: &[u32], nodes: u32) -> JobShape {
        JobShape {
            job: format!("j{job_id}"),
            job_id,
            size: 4,
            local: local.iter().copied().collect(),
            nodes,
            mapping: String::new(),
        }
    }

    /// Attaches rank `rank` of `shape` for `uid`; the task's end, to close.
    fn attach(hub: &Hub, shape: JobShape, rank: u32, uid: u32) -> UnixStream {
        let (ours, theirs) = UnixStream::pair().unwrap();
        hub.attach(PmiTask {
            shape,
            rank,
            uid,
            stream: ours,
        });
        theirs
    }

    /// Puts distinct 100-byte values into `job_id` until refused: the refusal.
    fn fill(hub: &Hub, job_id: hyperplan_shared::ids::JobId) -> PutError {
        let value = "v".repeat(100);
        for i in 0..1_000_000 {
            if let Err(e) = hub.put(job_id, &format!("k{i}"), &value) {
                return e;
            }
        }
        panic!("never refused");
    }

    /// Lets the connections run until `done` (see `conn`'s tests).
    async fn until(mut done: impl FnMut() -> bool) {
        for _ in 0..1_000_000 {
            if done() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("the connections never got there");
    }

    #[tokio::test]
    async fn a_user_s_jobs_share_the_user_s_bound_and_all_users_the_node_s() {
        let bounds = Bounds {
            node: 100_000,
            user: 40_000,
        };
        let hub = Hub::new(bounds);
        let _a = attach(&hub, shape(1.into(), &[0], 1), 0, 1000);
        let _b = attach(&hub, shape(2.into(), &[0], 1), 0, 1000);
        let _c = attach(&hub, shape(3.into(), &[0], 1), 0, 1001);
        let _d = attach(&hub, shape(4.into(), &[0], 1), 0, 1002);
        assert_eq!(fill(&hub, 1.into()), PutError::UserFull { limit: 40_000 });
        let held = hub.user_bytes(1000);
        assert!(
            held <= 40_000 && held + 2 * charge("k0", &"v".repeat(100)) > 40_000,
            "{held}"
        );
        // The user's other job has no room left; nothing was kept.
        assert_eq!(
            hub.put(2.into(), "x", &"v".repeat(100)),
            Err(PutError::UserFull { limit: 40_000 })
        );
        assert_eq!(hub.user_bytes(1000), held);
        assert_eq!(hub.get(2.into(), "x"), None);
        // Another user has its own, until the node is full.
        assert_eq!(fill(&hub, 3.into()), PutError::UserFull { limit: 40_000 });
        assert_eq!(fill(&hub, 4.into()), PutError::NodeFull { limit: 100_000 });
        assert!(hub.bytes() <= 100_000);
        assert_eq!(
            hub.bytes(),
            hub.user_bytes(1000) + hub.user_bytes(1001) + hub.user_bytes(1002)
        );
        // A fence lets the part go: the same user puts again. Its job's own bound is
        // still there under roomy node and user bounds.
        hub.barrier_in(1.into(), 0).await.unwrap().unwrap();
        assert!(hub.user_bytes(1000) < held);
        let roomy = Hub::new(Bounds {
            node: usize::MAX,
            user: usize::MAX,
        });
        let _e = attach(&roomy, shape(5.into(), &[0], 1), 0, 1000);
        let mut i = 0u32;
        let refused = loop {
            if let Err(e) = roomy.put(5.into(), &format!("k{i}"), &"v".repeat(1000)) {
                break e;
            }
            i += 1;
            if i.is_multiple_of(1000) {
                roomy.barrier_in(5.into(), 0).await.unwrap().unwrap();
            }
        };
        assert_eq!(refused, PutError::Full);
        assert!(roomy.bytes() <= MAX_SPACE_BYTES);
    }

    #[tokio::test]
    async fn a_job_s_space_and_what_it_held_go_with_its_last_rank() {
        let hub = Hub::new(Bounds {
            node: 8 << 20,
            user: 4 << 20,
        });
        let a = attach(&hub, shape(1.into(), &[0, 1], 1), 0, 1000);
        let b = attach(&hub, shape(1.into(), &[0, 1], 1), 1, 1000);
        let other = attach(&hub, shape(2.into(), &[0], 1), 0, 1001);
        // Past TRIM_AFTER: its end gives the memory back too.
        assert_eq!(fill(&hub, 1.into()), PutError::UserFull { limit: 4 << 20 });
        hub.put(2.into(), "k", "v").unwrap();
        let theirs = hub.user_bytes(1001);
        assert!(hub.user_bytes(1000) > TRIM_AFTER);
        drop(a);
        until(|| hub.lock().jobs.get(&1.into()).is_some_and(|e| e.open == 1)).await;
        assert_eq!(hub.get(1.into(), "k0"), Some("v".repeat(100)), "a rank is left");
        drop(b);
        until(|| hub.jobs() == 1).await;
        assert_eq!(hub.user_bytes(1000), 0);
        assert_eq!(hub.bytes(), theirs, "only the other job's");
        assert_eq!(hub.put(1.into(), "k", "v"), Err(PutError::Gone));
        // The user's next job has the whole bound again.
        let _c = attach(&hub, shape(3.into(), &[0], 1), 0, 1000);
        assert_eq!(fill(&hub, 3.into()), PutError::UserFull { limit: 4 << 20 });
        drop(other);
        until(|| hub.jobs() == 1).await;
        assert_eq!(hub.bytes(), hub.user_bytes(1000));
    }

    #[tokio::test]
    async fn an_answer_past_the_user_s_bound_fails_the_fence_here() {
        let hub = Hub::new(Bounds {
            node: 1 << 20,
            user: 10_000,
        });
        let _a = attach(&hub, shape(1.into(), &[0], 2), 0, 1000);
        hub.put(1.into(), "bc-0", "here").unwrap();
        let waiting = hub.barrier_in(1.into(), 0);
        let [fence] = <[PmiFence; 1]>::try_from(hub.take_outbox()).unwrap();
        let held = hub.bytes();
        assert_eq!(held, 2 * charge("bc-0", "here"), "the value and the part out");
        let mut all = fence.clone();
        for i in 1..100 {
            all.pairs.push((format!("bc-{i}"), "v".repeat(200)));
        }
        hub.done(all);
        let why = waiting.await.unwrap().unwrap_err().to_string();
        assert!(why.contains("user") && why.contains("10000"), "{why}");
        // Nothing of the answer is kept; the part out is let go.
        assert_eq!(hub.get(1.into(), "bc-1"), None);
        assert_eq!(hub.bytes(), charge("bc-0", "here"));
        assert_eq!(hub.unanswered(), []);
    }
}
