//! Where copying ended jobs into the accounting database stands, shared by the exporter
//! (which writes it), the driver (its clock in, how far the store may purge out, and
//! `hyperplan planners`) and `/metrics`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use hyperplan_accounting::Cursor;
use hyperplan_shared::status::AccountingInfo;

#[derive(Debug, Default)]
struct Inner {
    written: Option<Cursor>,
    /// The end of the oldest ended job read from the store and not yet written.
    oldest_unwritten: Option<u64>,
    jobs_written: u64,
    error: Option<String>,
    failing_since: Option<u64>,
}

/// The exporter's progress.
#[derive(Debug, Default)]
pub struct Status {
    database: String,
    inner: Mutex<Inner>,
    /// The driver's clock (Unix seconds), set at each commit it hands over: the
    /// exporter's only idea of the time (retention, how far behind).
    now_secs: AtomicU64,
}

impl Status {
    pub fn new(database: String) -> Self {
        Self {
            database,
            ..Self::default()
        }
    }

    pub fn database(&self) -> &str {
        &self.database
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The driver's clock now.
    pub fn set_now(&self, secs: u64) {
        self.now_secs.store(secs, Ordering::Relaxed);
    }

    pub fn now(&self) -> u64 {
        self.now_secs.load(Ordering::Relaxed)
    }

    /// The database said how far it has: at a connect, and after each write.
    pub(crate) fn written(&self, cursor: Cursor, jobs: u64, more: Option<u64>) {
        let mut i = self.lock();
        i.written = Some(cursor);
        i.jobs_written += jobs;
        i.oldest_unwritten = more;
        i.error = None;
        i.failing_since = None;
    }

    /// Ended jobs wait for the database, the oldest ended at `end`.
    pub(crate) fn waiting(&self, end: u64) {
        let mut i = self.lock();
        if i.oldest_unwritten.is_none_or(|o| end < o) {
            i.oldest_unwritten = Some(end);
        }
    }

    pub(crate) fn failed(&self, why: String) {
        let now = self.now();
        let mut i = self.lock();
        i.failing_since.get_or_insert(now);
        i.error = Some(why);
    }

    /// Whether the last try failed.
    pub fn is_failing(&self) -> bool {
        self.lock().error.is_some()
    }

    /// Up to which end time ended jobs are in the database, so the store may delete them
    /// (`None`: nothing known to be written: the store keeps every ended job).
    pub fn purge_limit(&self) -> Option<u64> {
        self.lock().written.map(|c| c.end_time)
    }

    /// For `hyperplan planners`.
    pub fn info(&self) -> AccountingInfo {
        let now = self.now();
        let i = self.lock();
        AccountingInfo {
            database: self.database.clone(),
            written_until: i.written.map(|c| c.end_time),
            behind_secs: i.oldest_unwritten.map_or(0, |o| now.saturating_sub(o)),
            written: i.jobs_written,
            error: i.error.clone(),
            failing_since: i.failing_since,
        }
    }
}
