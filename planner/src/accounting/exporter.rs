//! The exporter: a thread that copies ended jobs from the committed state store into
//! the accounting database, a page at a time, in the store's order (end time, id).
//!
//! - The cursor (the last end time and id written) lives in the accounting database
//!   and moves in the same transaction as the rows it covers; rows are keyed by (cluster,
//!   job id, attempt). A write cut short is written again whole; one written twice
//!   changes nothing. So a job's end reaches the database at least once and exactly once
//!   in effect, across a kill -9 of the planner, a failover (the new leader reads the
//!   cursor) and a database that is down (the store keeps the backlog: it purges no
//!   ended job the database does not have, see `Status::purge_limit`).
//! - Jobs that end in the same second may be committed in any order of their ids, so
//!   each pass reads again from the start of the cursor's second and skips the ones it
//!   wrote of that second (kept in memory). After each connect it starts ten minutes
//!   before the cursor, so that a job whose end was committed late (a new leader's clock
//!   a little behind the last one's) is not missed; writing one again changes nothing.
//! - A failing database is tried again after 1 s, doubling to a minute; the planner
//!   schedules on meanwhile and `hyperplan planners` says how far behind it is.
//! - Woken by the store's writer after a commit with ended jobs, and every few seconds.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hyperplan_accounting::{Cursor, Db, Keep, Target, Topology, rows_of};
use tokio::sync::watch;

use super::status::Status;
use crate::store::Store;

/// Ended jobs read and written per transaction.
pub const PAGE: usize = 2_000;
/// How far before the cursor a new connection starts reading again (seconds).
const LOOKBACK_SECS: u64 = 600;
/// How often it looks for ended jobs without being woken.
const POLL: Duration = Duration::from_secs(5);
/// Retry after a failure: from this, doubling, to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How often rows past `[accounting] keep` are deleted (seconds of the driver's clock).
const PURGE_EVERY_SECS: u64 = 3600;

/// What the exporter is given.
pub struct Setup {
    pub target: Target,
    pub cluster: String,
    pub keep: Keep,
    pub store: Store,
    pub status: Arc<Status>,
    /// The nodes and HyperNodes, as the driver last saw them.
    pub topology: watch::Receiver<Option<Arc<Topology>>>,
}

/// The driver's (and the writer's) end of the exporter.
#[derive(Debug)]
pub struct Exporter {
    wake: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Exporter {
    pub fn spawn(setup: Setup) -> std::io::Result<Self> {
        let (wake, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("accounting".into())
            .spawn(move || run(setup, &rx))?;
        Ok(Self { wake, thread })
    }

    /// A sender that wakes it (the store's writer, after a commit with ended jobs).
    pub fn waker(&self) -> mpsc::Sender<()> {
        self.wake.clone()
    }

    /// Stops it once every waker is dropped: it writes what it can without waiting for a
    /// database that is down, then ends.
    pub fn stop(self) {
        drop(self.wake);
        let _ = self.thread.join();
    }
}

/// Why a pass stopped.
#[derive(Debug, thiserror::Error)]
enum PassError {
    #[error(transparent)]
    Db(#[from] hyperplan_accounting::AccountingError),
    #[error("reading ended jobs: {0}")]
    Store(#[from] crate::store::StoreError),
}

struct State {
    setup: Setup,
    db: Option<Db>,
    cursor: Option<Cursor>,
    /// The ids written that ended in the cursor's second (see the module's documentation).
    written_in_second: std::collections::BTreeSet<u64>,
    /// The topology last written, to write it again only when it changes.
    topology_written: Option<Arc<Topology>>,
    next_purge: u64,
}

fn run(setup: Setup, wake: &mpsc::Receiver<()>) {
    let mut s = State {
        setup,
        db: None,
        cursor: None,
        written_in_second: std::collections::BTreeSet::new(),
        topology_written: None,
        next_purge: 0,
    };
    let mut backoff = FIRST_BACKOFF;
    let mut retry_at: Option<Instant> = None;
    let mut last_logged: Option<String> = None;
    loop {
        // Wait to be woken, for the poll, or for the retry after a failure.
        let wait = retry_at.map_or(POLL, |at| at.saturating_duration_since(Instant::now()));
        let stopping = match wake.recv_timeout(wait) {
            Ok(()) => {
                while wake.try_recv().is_ok() {}
                false
            }
            Err(mpsc::RecvTimeoutError::Timeout) => false,
            Err(mpsc::RecvTimeoutError::Disconnected) => true,
        };
        if retry_at.is_some_and(|at| Instant::now() < at) && !stopping {
            continue;
        }
        if stopping && s.db.is_none() {
            break; // never wait for a database that is down to stop
        }
        match s.pass() {
            Ok(()) => {
                retry_at = None;
                backoff = FIRST_BACKOFF;
                if last_logged.take().is_some() {
                    tracing::info!(database = s.setup.status.database(), "accounting: writing again");
                }
            }
            Err(e) => {
                let why = e.to_string();
                s.db = None;
                s.setup.status.failed(why.clone());
                // How far behind: the oldest ended job after what was last written.
                if let Some(c) = s.cursor
                    && let Ok(page) = s
                        .setup
                        .store
                        .finished_after_from((c.end_time, c.job_id.saturating_add(1)), 1)
                    && let Some(first) = page.first()
                {
                    s.setup.status.waiting(first.ended_at());
                }
                // Said once per kind of failure, not at every retry.
                if last_logged.as_deref() != Some(why.as_str()) {
                    tracing::warn!(
                        "accounting: {why}; ended jobs wait in the state store, tried again in up to {} s",
                        MAX_BACKOFF.as_secs()
                    );
                    last_logged = Some(why);
                }
                retry_at = Some(Instant::now() + backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
        if stopping {
            break;
        }
    }
}

impl State {
    /// Connects if need be, then writes every ended job after the cursor, a page per
    /// transaction, and the topology and retention when due.
    fn pass(&mut self) -> Result<(), PassError> {
        let status = Arc::clone(&self.setup.status);
        if self.db.is_none() {
            let mut db = Db::open(&self.setup.target)?;
            let cursor = db.cursor(&self.setup.cluster)?.unwrap_or_default();
            // Read again from before it (see the module's documentation).
            self.cursor = Some(Cursor {
                end_time: cursor.end_time.saturating_sub(LOOKBACK_SECS),
                job_id: 0,
            });
            self.written_in_second.clear();
            status.written(cursor, 0, None);
            self.db = Some(db);
            self.topology_written = None;
        }
        let Some(db) = self.db.as_mut() else { return Ok(()) };
        let topology = self.setup.topology.borrow().clone();
        if let Some(t) = &topology
            && self
                .topology_written
                .as_ref()
                .is_none_or(|w| !Arc::ptr_eq(w, t) && **w != **t)
        {
            db.set_topology(&self.setup.cluster, t)?;
            self.topology_written = Some(Arc::clone(t));
        }
        let tiers = topology.as_deref().map(Topology::tiers).unwrap_or_default();
        // From the start of the cursor's second: ids of one second are not in commit order.
        let mut at = (self.cursor.unwrap_or_default().end_time, 0u64);
        loop {
            let page = self.setup.store.finished_after_from(at, PAGE)?;
            let Some(last) = page.last() else { break };
            at = (last.ended_at(), last.id.saturating_add(1));
            let full = page.len() == PAGE;
            let cursor = self.cursor.unwrap_or_default();
            let new: Vec<_> = page
                .iter()
                .filter(|r| !(r.ended_at() == cursor.end_time && self.written_in_second.contains(&r.id)))
                .collect();
            if let Some(first) = new.first() {
                status.waiting(first.ended_at());
                let next = Cursor {
                    end_time: last.ended_at(),
                    job_id: last.id,
                };
                let rows: Vec<_> = new.iter().map(|r| rows_of(r, &tiers)).collect();
                db.write(&self.setup.cluster, &rows, next)?;
                if next.end_time != cursor.end_time {
                    self.written_in_second.clear();
                }
                self.written_in_second
                    .extend(new.iter().filter(|r| r.ended_at() == next.end_time).map(|r| r.id));
                self.cursor = Some(next);
                // A full page: more wait, ended at or after this one's last.
                status.written(next, new.len() as u64, full.then_some(next.end_time));
            }
            if !full {
                break;
            }
        }
        let now = status.now();
        if !self.setup.keep.is_forever() && now >= self.next_purge && now > 0 {
            db.purge(&self.setup.cluster, &self.setup.keep, now)?;
            self.next_purge = now + PURGE_EVERY_SECS;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use hyperplan_accounting::sql::{Kind, Sql};
    use hyperplan_core::model::components::JobPhase;
    use hyperplan_core::model::jobstate::Verdict;
    use hyperplan_core::model::record::JobRecord;

    use super::*;
    use crate::store::{Batch, Embedded};

    fn ended(id: u64, end: u64) -> JobRecord {
        let spec = hyperplan_shared::parse_jobs(
            &format!("name: j{id}\ntasks:\n  - name: t\n    replicas: 1\n    resources: {{cpu: 1}}\n"),
            std::path::Path::new("j.yaml"),
        )
        .unwrap()
        .remove(0);
        let mut r = JobRecord::at_submit(id, "alice", spec);
        r.state.phase = JobPhase::Finished;
        r.state.verdict = Some(Verdict::Completed);
        r.state.start_time = Some(end - 10);
        r.state.end_time = Some(end);
        r
    }

    struct Rig {
        _dir: tempfile::TempDir,
        store: Store,
        state: State,
        db: Target,
    }

    impl Rig {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::Embedded(Embedded::open(&dir.path().join("state.redb")).unwrap());
            let db = Target::Sqlite {
                path: dir.path().join("accounting.db"),
            };
            let (_, topology) = watch::channel(None);
            let state = State {
                setup: Setup {
                    target: db.clone(),
                    cluster: "c".into(),
                    keep: Keep::default(),
                    store: store.clone(),
                    status: Arc::new(Status::new(db.describe())),
                    topology,
                },
                db: None,
                cursor: None,
                written_in_second: Default::default(),
                topology_written: None,
                next_purge: 0,
            };
            Self {
                _dir: dir,
                store,
                state,
                db,
            }
        }

        fn commit(&self, records: &[JobRecord]) {
            let batch = Batch {
                jobs: records.iter().map(|r| r.persist().unwrap()).collect(),
                ..Batch::default()
            };
            self.store.commit(&batch).unwrap();
        }

        fn ids(&self) -> Vec<i64> {
            let mut db = Db::open(&self.db).unwrap();
            db.query(&Sql::new("SELECT job_id FROM jobs ORDER BY job_id"), &[Kind::Int])
                .unwrap()
                .into_iter()
                .map(|r| r[0].as_i64().unwrap())
                .collect()
        }
    }

    #[test]
    fn jobs_of_one_second_committed_out_of_id_order_are_all_written() {
        let mut rig = Rig::new();
        rig.commit(&[ended(2, 100)]);
        rig.state.pass().unwrap();
        assert_eq!(rig.ids(), vec![2]);
        // Job 1 ended in the same second, committed after job 2 was written.
        rig.commit(&[ended(1, 100)]);
        rig.state.pass().unwrap();
        rig.commit(&[ended(3, 101)]);
        rig.state.pass().unwrap();
        assert_eq!(rig.ids(), vec![1, 2, 3]);
        let info = rig.state.setup.status.info();
        assert_eq!(info.written, 3, "each written once: {info:?}");
        assert_eq!(info.written_until, Some(101));
    }

    #[test]
    fn a_backlog_larger_than_a_page_is_written_in_pages_and_a_new_exporter_doubles_nothing() {
        let mut rig = Rig::new();
        let records: Vec<JobRecord> = (1..=(PAGE as u64 * 2 + 10)).map(|i| ended(i, 1000 + i / 7)).collect();
        rig.commit(&records);
        rig.state.pass().unwrap();
        assert_eq!(rig.ids().len(), records.len());
        // A restart (a new exporter reads the cursor and looks back): nothing twice.
        rig.state.db = None;
        rig.state.pass().unwrap();
        assert_eq!(rig.ids().len(), records.len());
        assert_eq!(
            rig.state.setup.status.purge_limit(),
            Some(1000 + records.len() as u64 / 7)
        );
    }
}
