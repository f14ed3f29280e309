//! The embedded store: one redb file (checksummed pages, copy-on-write; a commit is two
//! `fdatasync` calls, its pages then its header), the default. Tables:
//!
//! - `meta`: `format`, `epoch`, `nextJobId`;
//! - `live`: job id → record (MessagePack), the jobs that have not ended: all a start reads;
//! - `finished`: (end time, job id) → record: ranges for `--since`, and the purge after
//!   `keepFinished` deletes from the front.
//!
//! A file that is not a store, a torn or damaged one (redb finds a bad checksum and falls
//! back to the last good commit; what cannot be recovered is an error), or one written by
//! a newer format is refused with the file named: the planner does not start on guesses.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyperplan_core::journal::JobRecord;
use redb::{
    Builder, ConcurrencyMode, Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition,
};

use super::{Batch, Loaded, STORE_FORMAT, StoreError, Summary};

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const LIVE: TableDefinition<u64, &[u8]> = TableDefinition::new("live");
const FINISHED: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("finished");

/// An open store file: the planner's (it writes), or a reader's (`--check`,
/// `state export`, which may run beside the planner).
#[derive(Clone)]
pub struct Embedded {
    reader: Arc<dyn ReadableDatabase + Send + Sync>,
    writer: Option<Arc<Database>>,
    path: PathBuf,
}

impl std::fmt::Debug for Embedded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedded")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Embedded {
    /// Opens (or creates, with its directory) the store at `path` for this planner alone.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Io {
                path: path.to_path_buf(),
                doing: format!("creating its directory {}", dir.display()),
                why: e.to_string(),
            })?;
        }
        // One writer; readers may follow it.
        let db = Arc::new(guarded(path, |b| b.create(path)).map_err(|r| r.error(path))?);
        let store = Self {
            reader: db.clone(),
            writer: Some(db),
            path: path.to_path_buf(),
        };
        store.check_format()?;
        Ok(store)
    }

    /// Opens an existing store to read it, beside a planner that may be writing it.
    pub fn open_read_only(path: &Path) -> Result<Self, StoreError> {
        if !path.exists() {
            return Err(StoreError::Io {
                path: path.to_path_buf(),
                doing: "opening it".into(),
                why: "no such file (set [store] path, or --store)".into(),
            });
        }
        let db = match guarded(path, |b| b.open_read_only(path)) {
            Ok(db) => db,
            // Left by a planner that did not close it (killed, or the machine went down):
            // recovery writes, so it takes the writer's open — which a running planner
            // would refuse, saying so.
            Err(Retry::Repair) => return Self::open(path),
            Err(Retry::No(e)) => return Err(e),
        };
        let store = Self {
            reader: Arc::new(db),
            writer: None,
            path: path.to_path_buf(),
        };
        if let Some(f) = store.meta("format")?
            && f > u64::from(STORE_FORMAT)
        {
            return Err(StoreError::Newer {
                path: path.to_path_buf(),
                found: u32::try_from(f).unwrap_or(u32::MAX),
                supported: STORE_FORMAT,
            });
        }
        Ok(store)
    }

    fn rw(&self) -> Result<&Database, StoreError> {
        self.writer.as_deref().ok_or_else(|| StoreError::Io {
            path: self.path.clone(),
            doing: "writing".into(),
            why: "opened read-only".into(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, doing: &str) -> impl Fn(redb::Error) -> StoreError + '_ {
        let doing = doing.to_string();
        move |e| StoreError::Io {
            path: self.path.clone(),
            doing: doing.clone(),
            why: e.to_string(),
        }
    }

    /// A new file gets the format; an old one must not be newer than this build.
    fn check_format(&self) -> Result<(), StoreError> {
        let found = self.meta("format")?;
        match found {
            Some(f) if f > u64::from(STORE_FORMAT) => Err(StoreError::Newer {
                path: self.path.clone(),
                found: u32::try_from(f).unwrap_or(u32::MAX),
                supported: STORE_FORMAT,
            }),
            Some(_) => Ok(()),
            None => {
                let txn = self
                    .rw()?
                    .begin_write()
                    .map_err(|e| self.err("writing its format")(e.into()))?;
                {
                    let mut meta = txn
                        .open_table(META)
                        .map_err(|e| self.err("writing its format")(e.into()))?;
                    meta.insert("format", u64::from(STORE_FORMAT))
                        .map_err(|e| self.err("writing its format")(e.into()))?;
                    txn.open_table(LIVE)
                        .map_err(|e| self.err("writing its format")(e.into()))?;
                    txn.open_table(FINISHED)
                        .map_err(|e| self.err("writing its format")(e.into()))?;
                }
                txn.commit().map_err(|e| self.err("writing its format")(e.into()))
            }
        }
    }

    fn meta(&self, key: &str) -> Result<Option<u64>, StoreError> {
        let e = self.err("reading its meta table");
        let txn = self.reader.begin_read().map_err(|x| e(x.into()))?;
        let meta = match txn.open_table(META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(x) => return Err(e(x.into())),
        };
        Ok(meta.get(key).map_err(|x| e(x.into()))?.map(|v| v.value()))
    }

    /// Loads the live jobs and raises the epoch (committed before this returns: two
    /// starts never share an epoch).
    pub fn load(&self) -> Result<Loaded, StoreError> {
        let e = self.err("reading its live jobs");
        let live = {
            let txn = self.reader.begin_read().map_err(|x| e(x.into()))?;
            let table = txn.open_table(LIVE).map_err(|x| e(x.into()))?;
            let mut live = Vec::with_capacity(table.len().unwrap_or(0) as usize);
            for row in table.iter().map_err(|x| e(x.into()))? {
                let (k, v) = row.map_err(|x| e(x.into()))?;
                live.push(self.decode(&format!("live job {}", k.value()), v.value())?);
            }
            live
        };
        let epoch = self.meta("epoch")?.unwrap_or(0).saturating_add(1);
        let next_job_id = self.meta("nextJobId")?.unwrap_or(1);
        let e = self.err("writing its epoch");
        let txn = self.rw()?.begin_write().map_err(|x| e(x.into()))?;
        {
            let mut meta = txn.open_table(META).map_err(|x| e(x.into()))?;
            meta.insert("epoch", epoch).map_err(|x| e(x.into()))?;
        }
        txn.commit().map_err(|x| e(x.into()))?;
        Ok(Loaded {
            epoch,
            next_job_id,
            live,
        })
    }

    fn decode(&self, what: &str, bytes: &[u8]) -> Result<JobRecord, StoreError> {
        JobRecord::decode(bytes).map_err(|x| StoreError::Corrupt {
            path: self.path.clone(),
            what: format!("{what} cannot be read"),
            why: x.to_string(),
        })
    }

    /// Writes a batch in one transaction (one commit: two `fdatasync` calls).
    pub fn commit(&self, batch: &Batch) -> Result<(), StoreError> {
        let e = self.err("committing");
        let txn = self.rw()?.begin_write().map_err(|x| e(x.into()))?;
        {
            let mut live = txn.open_table(LIVE).map_err(|x| e(x.into()))?;
            let mut finished = txn.open_table(FINISHED).map_err(|x| e(x.into()))?;
            for p in &batch.jobs {
                if p.live {
                    live.insert(p.id, &*p.bytes).map_err(|x| e(x.into()))?;
                } else {
                    live.remove(p.id).map_err(|x| e(x.into()))?;
                    finished
                        .insert((p.ended_at, p.id), &*p.bytes)
                        .map_err(|x| e(x.into()))?;
                }
            }
            if let Some(next) = batch.next_job_id {
                let mut meta = txn.open_table(META).map_err(|x| e(x.into()))?;
                meta.insert("nextJobId", next).map_err(|x| e(x.into()))?;
            }
        }
        txn.commit().map_err(|x| e(x.into()))
    }

    /// Ended jobs that ended at or after `since` (Unix seconds), oldest first.
    pub fn finished(&self, since: u64) -> Result<Vec<JobRecord>, StoreError> {
        let e = self.err("reading its ended jobs");
        let txn = self.reader.begin_read().map_err(|x| e(x.into()))?;
        let table = txn.open_table(FINISHED).map_err(|x| e(x.into()))?;
        let mut out = Vec::new();
        for row in table.range((since, 0)..).map_err(|x| e(x.into()))? {
            let (k, v) = row.map_err(|x| e(x.into()))?;
            out.push(self.decode(&format!("ended job {}", k.value().1), v.value())?);
        }
        Ok(out)
    }

    /// Deletes the ended jobs that ended before `before` (Unix seconds); how many.
    pub fn purge(&self, before: u64) -> Result<u64, StoreError> {
        let e = self.err("deleting old ended jobs");
        let txn = self.rw()?.begin_write().map_err(|x| e(x.into()))?;
        let mut n = 0;
        {
            let mut table = txn.open_table(FINISHED).map_err(|x| e(x.into()))?;
            table
                .retain_in((0, 0)..(before, 0), |_, _| {
                    n += 1;
                    false
                })
                .map_err(|x| e(x.into()))?;
        }
        txn.commit().map_err(|x| e(x.into()))?;
        Ok(n)
    }

    /// Numbers for `--check`; every record is read (and so checked) on the way.
    pub fn summary(&self) -> Result<Summary, StoreError> {
        let e = self.err("reading it");
        let txn = self.reader.begin_read().map_err(|x| e(x.into()))?;
        let live = txn.open_table(LIVE).map_err(|x| e(x.into()))?;
        for row in live.iter().map_err(|x| e(x.into()))? {
            let (k, v) = row.map_err(|x| e(x.into()))?;
            self.decode(&format!("live job {}", k.value()), v.value())?;
        }
        let finished = txn.open_table(FINISHED).map_err(|x| e(x.into()))?;
        for row in finished.iter().map_err(|x| e(x.into()))? {
            let (k, v) = row.map_err(|x| e(x.into()))?;
            self.decode(&format!("ended job {}", k.value().1), v.value())?;
        }
        Ok(Summary {
            format: u32::try_from(self.meta("format")?.unwrap_or(0)).unwrap_or(u32::MAX),
            epoch: self.meta("epoch")?.unwrap_or(0),
            next_job_id: self.meta("nextJobId")?.unwrap_or(1),
            live: live.len().map_err(|x| e(x.into()))?,
            finished: finished.len().map_err(|x| e(x.into()))?,
        })
    }

    /// Every record, live then ended (for `state export`).
    pub fn all(&self) -> Result<(Vec<JobRecord>, Vec<JobRecord>), StoreError> {
        let e = self.err("reading it");
        let txn = self.reader.begin_read().map_err(|x| e(x.into()))?;
        let mut live = Vec::new();
        for row in txn
            .open_table(LIVE)
            .map_err(|x| e(x.into()))?
            .iter()
            .map_err(|x| e(x.into()))?
        {
            let (k, v) = row.map_err(|x| e(x.into()))?;
            live.push(self.decode(&format!("live job {}", k.value()), v.value())?);
        }
        drop(txn);
        Ok((live, self.finished(0)?))
    }

    /// Sets the numbers `state import` brings.
    pub fn set_meta(&self, epoch: u64, next_job_id: u64) -> Result<(), StoreError> {
        let e = self.err("writing its meta table");
        let txn = self.rw()?.begin_write().map_err(|x| e(x.into()))?;
        {
            let mut meta = txn.open_table(META).map_err(|x| e(x.into()))?;
            meta.insert("epoch", epoch).map_err(|x| e(x.into()))?;
            meta.insert("nextJobId", next_job_id).map_err(|x| e(x.into()))?;
        }
        txn.commit().map_err(|x| e(x.into()))
    }

    /// Whether the store holds any job.
    pub fn is_empty(&self) -> Result<bool, StoreError> {
        let s = self.summary()?;
        Ok(s.live == 0 && s.finished == 0)
    }
}

/// Why an open failed: for good, or because the file needs the repair a writer does.
enum Retry {
    Repair,
    No(StoreError),
}

impl Retry {
    fn error(self, path: &Path) -> StoreError {
        match self {
            Retry::No(e) => e,
            Retry::Repair => StoreError::Open {
                path: path.to_path_buf(),
                why: "the file needs a repair, and it was not repaired".into(),
            },
        }
    }
}

/// Opens with `open` (single writer, readers following it). redb checks its own
/// invariants with debug assertions: a damaged file must be an error, never a crash.
fn guarded<T>(path: &Path, open: impl FnOnce(&Builder) -> Result<T, redb::DatabaseError>) -> Result<T, Retry> {
    let mut builder = Builder::new();
    builder.set_concurrency_mode(ConcurrencyMode::SingleWriter);
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| open(&builder))) {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(redb::DatabaseError::RepairAborted)) => Err(Retry::Repair),
        Ok(Err(e)) => Err(Retry::No(open_error(path, e))),
        Err(_) => Err(Retry::No(StoreError::Open {
            path: path.to_path_buf(),
            why: "the file is damaged (the store's own checks failed)".into(),
        })),
    }
}

fn open_error(path: &Path, e: redb::DatabaseError) -> StoreError {
    match e {
        redb::DatabaseError::DatabaseAlreadyOpen | redb::DatabaseError::LockProtocolMismatch => StoreError::InUse {
            path: path.to_path_buf(),
            why: e.to_string(),
        },
        redb::DatabaseError::UpgradeRequired(v) => StoreError::Open {
            path: path.to_path_buf(),
            why: format!("it is in redb's old file format {v}, which this build does not read"),
        },
        redb::DatabaseError::Storage(redb::StorageError::Io(io))
            if io.kind() == std::io::ErrorKind::PermissionDenied =>
        {
            StoreError::Io {
                path: path.to_path_buf(),
                doing: "opening it".into(),
                why: format!("{io} (run as the planner's user, or set [store] path / --store)"),
            }
        }
        other => StoreError::Open {
            path: path.to_path_buf(),
            why: format!("not a hyperplan store, or damaged: {other}"),
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use hyperplan_core::journal::Persist;
    use hyperplan_shared::parse_jobs;

    fn record(id: u64, name: &str) -> JobRecord {
        let spec = parse_jobs(
            &format!("name: {name}\ntasks:\n  - name: t\n    replicas: 2\n    resources: {{cpu: 1}}\n    command: [\"true\"]\n"),
            Path::new("job.yaml"),
        )
        .unwrap()
        .remove(0);
        JobRecord::submitted(id, "alice", spec)
    }

    fn persist(rec: &JobRecord, live: bool, ended_at: u64) -> Persist {
        Persist {
            id: rec.id,
            live,
            ended_at,
            bytes: rec.encode().unwrap().into(),
        }
    }

    #[test]
    fn records_move_from_live_to_finished_and_epochs_rise() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/state.redb");
        let a = record(1, "a");
        let b = record(2, "b");
        {
            let s = Embedded::open(&path).unwrap();
            assert_eq!(s.load().unwrap().epoch, 1);
            s.commit(&Batch {
                jobs: vec![persist(&a, true, 0), persist(&b, true, 0)],
                next_job_id: Some(3),
            })
            .unwrap();
            s.commit(&Batch {
                jobs: vec![persist(&a, false, 100)],
                next_job_id: None,
            })
            .unwrap();
        }
        let s = Embedded::open(&path).unwrap();
        let loaded = s.load().unwrap();
        assert_eq!((loaded.epoch, loaded.next_job_id), (2, 3));
        assert_eq!(loaded.live, vec![b]);
        assert_eq!(s.finished(0).unwrap(), vec![a.clone()]);
        assert_eq!(s.finished(101).unwrap(), vec![]);
        assert_eq!(s.purge(100).unwrap(), 0);
        assert_eq!(s.purge(101).unwrap(), 1);
        assert_eq!(
            s.summary().unwrap(),
            Summary {
                format: STORE_FORMAT,
                epoch: 2,
                next_job_id: 3,
                live: 1,
                finished: 0
            }
        );
    }

    #[test]
    fn a_store_of_a_newer_format_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        {
            let s = Embedded::open(&path).unwrap();
            let txn = s.rw().unwrap().begin_write().unwrap();
            txn.open_table(META).unwrap().insert("format", 99).unwrap();
            txn.commit().unwrap();
        }
        for e in [
            Embedded::open(&path).unwrap_err(),
            Embedded::open_read_only(&path).unwrap_err(),
        ] {
            let e = e.to_string();
            assert!(e.starts_with(&path.display().to_string()), "{e}");
            assert!(
                e.contains("newer hyperplan (store format 99; this build reads format 1"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_record_that_cannot_be_read_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let s = Embedded::open(&path).unwrap();
        let mut p = persist(&record(7, "a"), true, 0);
        p.bytes = b"\x93garbage".to_vec().into();
        s.commit(&Batch {
            jobs: vec![p],
            next_job_id: None,
        })
        .unwrap();
        let e = s.load().unwrap_err().to_string();
        assert!(e.contains("state.redb: live job 7 cannot be read"), "{e}");
    }

    #[test]
    fn a_second_planner_on_one_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let _first = Embedded::open(&path).unwrap();
        let e = Embedded::open(&path).unwrap_err().to_string();
        assert!(e.contains("in use by another process"), "{e}");
    }
}
