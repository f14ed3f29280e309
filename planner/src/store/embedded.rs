//! The embedded store: one redb file (checksummed pages, copy-on-write; a commit is two
//! `fdatasync` calls, its pages then its header), the default. Tables:
//!
//! - `meta`: `format`, `epoch`, `nextJobId`, each with its checksum under `KEY.crc32c`
//!   (store format 3, see [`super::meta`]);
//! - `live`: job id → record (MessagePack), the jobs that have not ended: all a start reads;
//! - `finished`: (end time, job id) → record: ranges for `--since`, and the purge after
//!   `keepFinished` deletes from the front;
//! - `usage`: `fairshare` → fair share's usage (a `UsageRecord`, framed and checksummed
//!   like a job record), rewritten whole in the commit that carries it. A store written
//!   before fair share has no such table: no usage. The table needs no new store format:
//!   a build before it never opens it (it reads its own tables by name), and this one
//!   reads its absence as "none yet".
//! - `nodes`: `drains` → the admins' drains of nodes (a `DrainsRecord`), the same way.
//! - `cluster`: `caSha256` → the fingerprint of the CA of the cluster the store belongs
//!   to, with its checksum (`AB:CD:… crc32c:…`): written by the first planner that opens
//!   the store; a planner of another CA refuses the store before it changes anything.
//!
//! A file that is not a store, a torn or damaged one (redb finds a bad checksum and falls
//! back to the last good commit; what cannot be recovered is an error), or one written by
//! a newer format is refused with the file named: the planner does not start on guesses.
//! Every record carries its own CRC-32C (store format 2, see `hyperplan_core::persist`):
//! a byte changed inside a record is an error naming the job at start, `--check` and
//! `state export`; so does every meta value (format 3): a damaged one stops a start,
//! naming the key. A file of an older format is read as it is, and rewritten as format 3
//! in one transaction when it is opened for writing.
//!
//! Job ids: a start goes on from the stored `nextJobId`, but never from below one more
//! than the highest id of any record, live or ended (it reads the ended jobs' keys for
//! it): a wrong `nextJobId` never gives an old job's id again.
//!
//! The marker: beside the store, `<file>.created` (`state.redb.created`) says that a
//! planner kept its state in `<file>`, and the last epoch it started with. A start
//! creates the store only when neither exists (the very first start); a store that is
//! missing while its marker exists, or a 0-byte store, stops the start unless it is
//! told `--init` (then a new, empty store begins — every job, its history and the job
//! ids are forgotten —, its epochs above the marker's, and a damaged file is moved
//! aside as `<file>.damaged-<unix time>`). A running planner
//! checks after every commit, and every few seconds, that its path still names the
//! file it opened: a store removed or replaced under it stops it before it
//! acknowledges anything more.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyperplan_core::model::record::JobRecord;
use redb::{
    Builder, ConcurrencyMode, Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition,
};

use super::meta::{self, CLUSTER_KEY, CRC_SUFFIX, Cluster, MetaValue};
use super::{Batch, Loaded, STORE_FORMAT, StoreError, Summary};

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// The cluster the store belongs to (see the module's documentation).
const CLUSTER: TableDefinition<&str, &str> = TableDefinition::new("cluster");
const LIVE: TableDefinition<u64, &[u8]> = TableDefinition::new("live");
const FINISHED: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("finished");
const USAGE: TableDefinition<&str, &[u8]> = TableDefinition::new("usage");
/// The one key of [`USAGE`].
const USAGE_KEY: &str = "fairshare";
const NODES: TableDefinition<&str, &[u8]> = TableDefinition::new("nodes");
/// The key of [`NODES`] that holds the drains.
const DRAINS_KEY: &str = "drains";

/// An open store file: the planner's (it writes), or a reader's (`--check`,
/// `state export`, which may run beside the planner).
#[derive(Clone)]
pub struct Embedded {
    reader: Arc<dyn ReadableDatabase + Send + Sync>,
    writer: Option<Arc<Database>>,
    path: PathBuf,
    /// Every record must carry its checksum (a store of format 2 or later).
    checked: bool,
    /// Every meta value must carry its checksum (a store of format 3 or later).
    meta_checked: bool,
    /// A reader's store whose `format` is damaged (read as this build's format): said
    /// by [`Embedded::summary`].
    format_damaged: Option<String>,
    /// A writer's file, (device, inode): its path must go on naming it.
    identity: Option<(u64, u64)>,
}

/// How a writer's open takes a store file that is missing, empty or unreadable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Create {
    /// A planner's start: a new store only where none ever was (no file, no marker).
    Start,
    /// `--init`: a missing or empty file begins anew, an unreadable one is moved aside
    /// first; a good store is opened as it is.
    Init,
    /// `state import` (which fills it): a missing or empty file begins anew; an
    /// unreadable one is refused.
    Import,
}

/// The marker beside the store (see the module's documentation).
pub fn marker_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".created");
    path.with_file_name(name)
}

/// The last epoch the marker recorded, if it exists and says one.
fn marker_epoch(marker: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(marker).ok()?;
    text.lines().find_map(|l| l.strip_prefix("epoch ")?.trim().parse().ok())
}

/// A missing store whose marker exists, or a 0-byte store, is refused.
fn refuse_lost(path: &Path) -> Result<(), StoreError> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let marker = marker_path(path);
            if marker.exists() {
                return Err(StoreError::Missing {
                    path: path.to_path_buf(),
                    marker,
                });
            }
            Ok(())
        }
        Ok(m) if m.is_file() && m.len() == 0 => Err(StoreError::Empty {
            path: path.to_path_buf(),
        }),
        _ => Ok(()),
    }
}

impl std::fmt::Debug for Embedded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedded")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Embedded {
    /// Opens the store at `path` for this planner alone, as a start does: created (with
    /// its directory) only when there never was one (see [`Create::Start`]).
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with(path, Create::Start)
    }

    /// Opens the store at `path` for this planner alone; `create` says what a missing,
    /// empty or unreadable file becomes.
    pub fn open_with(path: &Path, create: Create) -> Result<Self, StoreError> {
        Self::open_as(path, create, None)
    }

    /// [`Embedded::open_with`] for a planner of `cluster`: a store of another cluster is
    /// refused before anything in it changes; one without a cluster gets this one.
    pub fn open_as(path: &Path, create: Create, cluster: Option<&Cluster>) -> Result<Self, StoreError> {
        let io = |doing: String, e: std::io::Error| StoreError::Io {
            path: path.to_path_buf(),
            doing,
            why: e.to_string(),
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| io(format!("creating its directory {}", dir.display()), e))?;
        }
        match (refuse_lost(path), create) {
            (Ok(()), _) | (Err(StoreError::Missing { .. }), Create::Init | Create::Import) => {}
            (Err(StoreError::Empty { .. }), Create::Init | Create::Import) => {
                // Nothing was ever committed to it: nothing to keep.
                std::fs::remove_file(path).map_err(|e| io("removing the empty file".into(), e))?;
            }
            (Err(e), _) => return Err(e),
        }
        // One writer; readers may follow it.
        let db = match guarded(path, |b| b.create(path)) {
            Ok(db) => db,
            Err(Retry::No(StoreError::Open { why, .. })) if create == Create::Init => {
                let aside = aside_path(path);
                std::fs::rename(path, &aside).map_err(|e| io(format!("moving it aside to {}", aside.display()), e))?;
                tracing::warn!(
                    store = %path.display(),
                    aside = %aside.display(),
                    "--init: the store cannot be read ({why}); moved it aside, beginning an empty store (every job, its history and the job ids are forgotten)"
                );
                guarded(path, |b| b.create(path)).map_err(|r| r.error(path))?
            }
            Err(r) => return Err(r.error(path)),
        };
        let fresh = db_is_new(&db);
        let db = Arc::new(db);
        let meta = std::fs::metadata(path).map_err(|e| io("reading its metadata".into(), e))?;
        let mut store = Self {
            reader: db.clone(),
            writer: Some(db),
            path: path.to_path_buf(),
            checked: true,
            meta_checked: false,
            format_damaged: None,
            identity: Some((meta.dev(), meta.ino())),
        };
        // Another cluster's store: refused before the format, the epoch or a record changes.
        let recorded = match cluster {
            Some(ours) => meta::check_cluster(
                path,
                store.cluster_value()?,
                ours,
                "a store file ([store] path, --store)",
                &store.recover(),
            )?,
            None => None,
        };
        store.check_format()?;
        let marker = marker_path(path);
        if fresh && let Some(last) = marker_epoch(&marker) {
            // A new store where one was lost: its epochs go on above the lost one's, so
            // agents never take orders of an epoch given before.
            if store.meta("epoch")?.unwrap_or(0) < last {
                store.write_meta(&[("epoch", last)], "writing its epoch")?;
            }
        }
        store.write_marker(store.meta("epoch")?.unwrap_or(0))?;
        if let Some(ours) = cluster
            && recorded.is_none()
        {
            store.set_cluster(&ours.fingerprint)?;
            if fresh {
                tracing::info!(store = %path.display(), ca = %ours.fingerprint, "a new store: it belongs to the cluster of this CA");
            } else {
                tracing::info!(
                    store = %path.display(),
                    ca = %ours.fingerprint,
                    "the store had no cluster recorded (written before cluster records): recorded this planner's CA; from now on a planner of another CA refuses it"
                );
            }
        }
        Ok(store)
    }

    /// How to get a store with a damaged meta value back, keeping every job.
    fn recover(&self) -> String {
        let p = self.path.display();
        format!(
            "its jobs are intact: `hyperplan-planner --store {p} state export FILE` writes them out (the next job id taken from their ids where it is damaged), then move {p} aside and `hyperplan-planner --store {p} state import FILE` makes a new store of them (epochs going on above {}'s); or restore a backup with `state import`",
            marker_path(&self.path).display()
        )
    }

    /// Opens an existing store to read it, beside a planner that may be writing it.
    pub fn open_read_only(path: &Path) -> Result<Self, StoreError> {
        refuse_lost(path)?;
        if !path.exists() {
            return Err(StoreError::Io {
                path: path.to_path_buf(),
                doing: "opening it".into(),
                why: "no such file (set [store] path, or --store)".into(),
            });
        }
        check_length(path)?;
        let db = match guarded(path, |b| b.open_read_only(path)) {
            Ok(db) => db,
            // Left by a planner that did not close it (killed, or the machine went down):
            // recovery writes, so it takes the writer's open — which a running planner
            // would refuse, saying so.
            Err(Retry::Repair) => return Self::open(path),
            Err(Retry::No(e)) => return Err(e),
        };
        let mut store = Self {
            reader: Arc::new(db),
            writer: None,
            path: path.to_path_buf(),
            checked: true,
            meta_checked: false,
            format_damaged: None,
            identity: None,
        };
        // A damaged format (its checksum says a build of format 3 or later wrote it): read
        // as this build's, so that `state export` can still save the jobs.
        let format = match store.meta_value("format")? {
            MetaValue::Absent => None,
            MetaValue::Good(f) | MetaValue::Damaged { raw: Some(f), .. } if f > u64::from(STORE_FORMAT) => Some(f),
            MetaValue::Good(f) => Some(f),
            MetaValue::Damaged { why, .. } => {
                store.format_damaged = Some(meta::damaged(path, "format", &why, &store.recover()).to_string());
                Some(u64::from(STORE_FORMAT))
            }
        };
        if let Some(f) = format
            && f > u64::from(STORE_FORMAT)
        {
            return Err(StoreError::Newer {
                path: path.to_path_buf(),
                found: u32::try_from(f).unwrap_or(u32::MAX),
                supported: STORE_FORMAT,
            });
        }
        // Format 1 (not yet opened by this build's planner): records without checksums;
        // before format 3, meta values without theirs.
        store.checked = format.is_none_or(|f| f >= 2);
        store.meta_checked = format.is_none_or(|f| f >= 3);
        Ok(store)
    }

    /// Whether `path` still names the file this writer opened: a store removed, moved
    /// or replaced under a running planner is an error (nothing more may be
    /// acknowledged: what it commits would not be in the store a restart reads).
    pub fn check_file(&self) -> Result<(), StoreError> {
        let Some(id) = self.identity else { return Ok(()) };
        let how = match std::fs::metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == id => return Ok(()),
            Ok(_) => "replaced by another file".to_string(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => "removed (or moved away)".to_string(),
            Err(e) => format!("made unreadable ({e})"),
        };
        Err(StoreError::Replaced {
            path: self.path.clone(),
            how,
        })
    }

    /// Writes the marker (see the module's documentation) with `epoch`: atomically, and
    /// on disk before this returns.
    fn write_marker(&self, epoch: u64) -> Result<(), StoreError> {
        let marker = marker_path(&self.path);
        let name = self.path.file_name().unwrap_or_default().to_string_lossy();
        let text = format!(
            "# hyperplan-planner: a planner keeps its state in {name} beside this file. While this file\n\
             # exists, a planner refuses to start without {name} (it was lost); `hyperplan-planner --init`\n\
             # starts an empty store (every job, its history and the job ids are forgotten), its epochs\n\
             # above this one.\n\
             epoch {epoch}\n"
        );
        let tmp = marker.with_extension("created.tmp");
        let io = |doing: &str, e: std::io::Error| StoreError::Io {
            path: marker.clone(),
            doing: doing.into(),
            why: e.to_string(),
        };
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp).map_err(|e| io("writing the store's marker", e))?;
            f.write_all(text.as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(|e| io("writing the store's marker", e))?;
        }
        std::fs::rename(&tmp, &marker).map_err(|e| io("writing the store's marker", e))?;
        if let Some(dir) = marker.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| io("syncing its directory", e))?;
        }
        Ok(())
    }

    /// Writes meta values, each with its checksum, in one transaction.
    fn write_meta(&self, values: &[(&str, u64)], doing: &str) -> Result<(), StoreError> {
        let e = self.err(doing);
        let txn = self.rw()?.begin_write().map_err(|x| e(x.into()))?;
        {
            let mut meta = txn.open_table(META).map_err(|x| e(x.into()))?;
            for &(k, v) in values {
                put_meta(&mut meta, k, v).map_err(|x| e(x.into()))?;
            }
        }
        txn.commit().map_err(|x| e(x.into()))?;
        self.check_file()
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
            why: match e {
                redb::Error::Io(io) => io_why(&io),
                other => other.to_string(),
            },
        }
    }

    /// A new file gets the format; an old one must not be newer than this build, and one
    /// of an older format is rewritten as this one (every record and meta value with its
    /// checksum).
    fn check_format(&mut self) -> Result<(), StoreError> {
        let found = match self.meta_value("format")? {
            // A newer build may keep its format as it likes: said as newer, not damaged.
            MetaValue::Damaged { raw: Some(f), .. } if f > u64::from(STORE_FORMAT) => Some(f),
            other => other.strict("format", &self.path, &self.recover())?,
        };
        match found {
            Some(f) if f > u64::from(STORE_FORMAT) => Err(StoreError::Newer {
                path: self.path.clone(),
                found: u32::try_from(f).unwrap_or(u32::MAX),
                supported: STORE_FORMAT,
            }),
            Some(f) if f == u64::from(STORE_FORMAT) => {
                self.meta_checked = true;
                Ok(())
            }
            Some(f) => self.migrate(f),
            None => {
                let txn = self
                    .rw()?
                    .begin_write()
                    .map_err(|e| self.err("writing its format")(e.into()))?;
                {
                    let mut meta = txn
                        .open_table(META)
                        .map_err(|e| self.err("writing its format")(e.into()))?;
                    put_meta(&mut meta, "format", u64::from(STORE_FORMAT))
                        .map_err(|e| self.err("writing its format")(e.into()))?;
                    txn.open_table(LIVE)
                        .map_err(|e| self.err("writing its format")(e.into()))?;
                    txn.open_table(FINISHED)
                        .map_err(|e| self.err("writing its format")(e.into()))?;
                }
                txn.commit().map_err(|e| self.err("writing its format")(e.into()))?;
                self.meta_checked = true;
                Ok(())
            }
        }
    }

    /// Format 1 or 2 → 3, in one transaction: from format 1, every record read as
    /// written (no checksum) and written again with its checksum; every meta value
    /// written again with its checksum (as it is: the start's floor on job ids covers a
    /// `nextJobId` damaged before it had one); then the format.
    fn migrate(&mut self, from: u64) -> Result<(), StoreError> {
        let doing = format!("rewriting it from store format {from} to {STORE_FORMAT}");
        let e = self.err(&doing);
        let txn = self.rw()?.begin_write().map_err(|x| e(x.into()))?;
        let mut n = 0usize;
        if from < 2 {
            let mut live = txn.open_table(LIVE).map_err(|x| e(x.into()))?;
            let mut rows = Vec::new();
            for row in live.iter().map_err(|x| e(x.into()))? {
                let (k, v) = row.map_err(|x| e(x.into()))?;
                rows.push((k.value(), self.reencode(&format!("live job {}", k.value()), v.value())?));
            }
            for (k, v) in &rows {
                live.insert(*k, v.as_slice()).map_err(|x| e(x.into()))?;
            }
            n += rows.len();
            let mut finished = txn.open_table(FINISHED).map_err(|x| e(x.into()))?;
            let mut rows = Vec::new();
            for row in finished.iter().map_err(|x| e(x.into()))? {
                let (k, v) = row.map_err(|x| e(x.into()))?;
                let k = k.value();
                rows.push((k, self.reencode(&format!("ended job {}", k.1), v.value())?));
            }
            for (k, v) in &rows {
                finished.insert(*k, v.as_slice()).map_err(|x| e(x.into()))?;
            }
            n += rows.len();
        }
        {
            let mut meta = txn.open_table(META).map_err(|x| e(x.into()))?;
            for key in ["epoch", "nextJobId"] {
                let value = meta.get(key).map_err(|x| e(x.into()))?.map(|v| v.value());
                if let Some(v) = value {
                    put_meta(&mut meta, key, v).map_err(|x| e(x.into()))?;
                }
            }
            put_meta(&mut meta, "format", u64::from(STORE_FORMAT)).map_err(|x| e(x.into()))?;
        }
        txn.commit().map_err(|x| e(x.into()))?;
        drop(e);
        self.meta_checked = true;
        tracing::info!(store = %self.path.display(), records = n, "store: rewrote format {from} as {STORE_FORMAT} (every record and meta value checksummed)");
        Ok(())
    }

    fn reencode(&self, what: &str, bytes: &[u8]) -> Result<Vec<u8>, StoreError> {
        let rec = JobRecord::decode(bytes).map_err(|x| StoreError::Corrupt {
            path: self.path.clone(),
            what: format!("{what} cannot be read"),
            why: x.to_string(),
        })?;
        rec.encode().map_err(|x| StoreError::Corrupt {
            path: self.path.clone(),
            what: format!("{what} cannot be written again"),
            why: x.to_string(),
        })
    }

    /// A meta value a start may use: a damaged one is an error naming its key.
    fn meta(&self, key: &str) -> Result<Option<u64>, StoreError> {
        self.meta_value(key)?.strict(key, &self.path, &self.recover())
    }

    /// A meta value and its checksum (`KEY.crc32c`), checked: required from format 3
    /// on (`format` itself: wherever it has one, for builds before it read it bare).
    fn meta_value(&self, key: &str) -> Result<MetaValue<u64>, StoreError> {
        let e = self.err("reading its meta table");
        let txn = self.reader.begin_read().map_err(|x| e(x.into()))?;
        let meta = match txn.open_table(META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(MetaValue::Absent),
            Err(x) => return Err(e(x.into())),
        };
        let value = meta.get(key).map_err(|x| e(x.into()))?.map(|v| v.value());
        let sum = meta
            .get(format!("{key}{CRC_SUFFIX}").as_str())
            .map_err(|x| e(x.into()))?
            .map(|v| v.value());
        Ok(meta::check_number(
            key,
            value,
            sum,
            self.meta_checked && key != "format",
        ))
    }

    /// The cluster record (see the module's documentation), checked.
    fn cluster_value(&self) -> Result<MetaValue<String>, StoreError> {
        let e = self.err("reading its cluster");
        let txn = self.reader.begin_read().map_err(|x| e(x.into()))?;
        let table = match txn.open_table(CLUSTER) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(MetaValue::Absent),
            Err(x) => return Err(e(x.into())),
        };
        let got = table.get(CLUSTER_KEY).map_err(|x| e(x.into()))?;
        Ok(got.map_or(MetaValue::Absent, |v| {
            meta::check_text(CLUSTER_KEY, v.value().as_bytes(), true)
        }))
    }

    /// The fingerprint of the CA of the cluster the store belongs to (`None`: none yet).
    pub fn cluster(&self) -> Result<Option<String>, StoreError> {
        self.cluster_value()?.strict(CLUSTER_KEY, &self.path, &self.recover())
    }

    /// Records the store's cluster (with its checksum), replacing what was there.
    pub fn set_cluster(&self, fingerprint: &str) -> Result<(), StoreError> {
        let e = self.err("recording its cluster");
        let txn = self.rw()?.begin_write().map_err(|x| e(x.into()))?;
        {
            let mut table = txn.open_table(CLUSTER).map_err(|x| e(x.into()))?;
            table
                .insert(CLUSTER_KEY, meta::seal(CLUSTER_KEY, fingerprint).as_str())
                .map_err(|x| e(x.into()))?;
        }
        txn.commit().map_err(|x| e(x.into()))?;
        self.check_file()
    }

    /// Loads the live jobs and fair share's usage, and raises the epoch (committed
    /// before this returns: two starts never share an epoch). The next job id is the
    /// stored one, or one more than the highest id of any record where that is larger;
    /// a damaged `epoch` or `nextJobId` is an error naming it.
    pub fn load(&self) -> Result<Loaded, StoreError> {
        let e = self.err("reading its live jobs");
        let (live, usage, drains, floor, newest_end_secs) = {
            let txn = self.reader.begin_read().map_err(|x| e(x.into()))?;
            let table = txn.open_table(LIVE).map_err(|x| e(x.into()))?;
            let mut live = Vec::with_capacity(table.len().unwrap_or(0) as usize);
            let mut floor = 1u64;
            for row in table.iter().map_err(|x| e(x.into()))? {
                let (k, v) = row.map_err(|x| e(x.into()))?;
                floor = floor.max(k.value().saturating_add(1));
                live.push(self.decode(&format!("live job {}", k.value()), v.value())?);
            }
            // The ended jobs' keys only (their records are not decoded), in end order.
            let ended = txn.open_table(FINISHED).map_err(|x| e(x.into()))?;
            let mut newest_end_secs = None;
            for row in ended.iter().map_err(|x| e(x.into()))? {
                let (k, _) = row.map_err(|x| e(x.into()))?;
                let (end, id) = k.value();
                floor = floor.max(id.saturating_add(1));
                newest_end_secs = newest_end_secs.max(Some(end));
            }
            let usage = self.blob_in(&txn, USAGE, USAGE_KEY, "reading its fair-share usage")?;
            (
                live,
                usage,
                self.blob_in(&txn, NODES, DRAINS_KEY, "reading its nodes' drains")?,
                floor,
                newest_end_secs,
            )
        };
        let epoch = self.meta("epoch")?.unwrap_or(0).saturating_add(1);
        let stored = self.meta("nextJobId")?.unwrap_or(1);
        let next_job_id = stored.max(floor);
        if next_job_id > stored {
            tracing::warn!(
                store = %self.path.display(),
                "nextJobId {stored} is not above the highest job id in the store ({}): new jobs get ids from {next_job_id} on, never an old job's",
                floor - 1
            );
            self.write_meta(
                &[("epoch", epoch), ("nextJobId", next_job_id)],
                "writing its epoch and next job id",
            )?;
        } else {
            self.write_meta(&[("epoch", epoch)], "writing its epoch")?;
        }
        self.write_marker(epoch)?;
        Ok(Loaded {
            epoch,
            next_job_id,
            live,
            usage,
            drains,
            newest_end_secs,
        })
    }

    /// Fair share's usage as last committed (`None`: none yet, or a store from before
    /// fair share); the bytes as written, checked by whoever decodes them.
    pub fn usage(&self) -> Result<Option<Vec<u8>>, StoreError> {
        self.blob(USAGE, USAGE_KEY, "reading its fair-share usage")
    }

    /// The nodes' drains as last committed (`None`: none yet, or a store from before
    /// drains); the bytes as written.
    pub fn drains(&self) -> Result<Option<Vec<u8>>, StoreError> {
        self.blob(NODES, DRAINS_KEY, "reading its nodes' drains")
    }

    fn blob(&self, table: TableDefinition<&str, &[u8]>, key: &str, doing: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let e = self.err(doing);
        let txn = self.reader.begin_read().map_err(|x| e(x.into()))?;
        self.blob_in(&txn, table, key, doing)
    }

    /// One record of a table of one-record keys; a table that does not exist (a store
    /// from before it) has none.
    fn blob_in(
        &self,
        txn: &redb::ReadTransaction,
        table: TableDefinition<&str, &[u8]>,
        key: &str,
        doing: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let e = self.err(doing);
        let table = match txn.open_table(table) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(x) => return Err(e(x.into())),
        };
        Ok(table.get(key).map_err(|x| e(x.into()))?.map(|v| v.value().to_vec()))
    }

    fn decode(&self, what: &str, bytes: &[u8]) -> Result<JobRecord, StoreError> {
        let decoded = if self.checked {
            JobRecord::decode_checked(bytes)
        } else {
            JobRecord::decode(bytes)
        };
        decoded.map_err(|x| StoreError::Corrupt {
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
                put_meta(&mut meta, "nextJobId", next).map_err(|x| e(x.into()))?;
            }
            // In the same transaction as the jobs: a commit is all or nothing.
            if let Some(usage) = &batch.usage {
                let mut table = txn.open_table(USAGE).map_err(|x| e(x.into()))?;
                table.insert(USAGE_KEY, &**usage).map_err(|x| e(x.into()))?;
            }
            if let Some(drains) = &batch.drains {
                let mut table = txn.open_table(NODES).map_err(|x| e(x.into()))?;
                table.insert(DRAINS_KEY, &**drains).map_err(|x| e(x.into()))?;
            }
        }
        txn.commit().map_err(|x| e(x.into()))?;
        // Committed, but to the file at our path? Not acknowledged otherwise.
        self.check_file()
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

    /// At most `limit` ended jobs from `from` (end time, id) on, in key order: a page of
    /// what accounting has not written yet.
    pub fn finished_after_from(&self, from: (u64, u64), limit: usize) -> Result<Vec<JobRecord>, StoreError> {
        let e = self.err("reading its ended jobs");
        let txn = self.reader.begin_read().map_err(|x| e(x.into()))?;
        let table = txn.open_table(FINISHED).map_err(|x| e(x.into()))?;
        let mut out = Vec::new();
        for row in table.range(from..).map_err(|x| e(x.into()))?.take(limit) {
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

    /// Numbers for `--check` and `state export`; every record is read (and so checked)
    /// on the way. A damaged meta value is not an error here: it is said in
    /// [`Summary::damaged`] (a start refuses it), and the export goes on without it.
    pub fn summary(&self) -> Result<Summary, StoreError> {
        let e = self.err("reading it");
        let txn = self.reader.begin_read().map_err(|x| e(x.into()))?;
        let mut floor = 1u64;
        let live = txn.open_table(LIVE).map_err(|x| e(x.into()))?;
        for row in live.iter().map_err(|x| e(x.into()))? {
            let (k, v) = row.map_err(|x| e(x.into()))?;
            floor = floor.max(k.value().saturating_add(1));
            self.decode(&format!("live job {}", k.value()), v.value())?;
        }
        let finished = txn.open_table(FINISHED).map_err(|x| e(x.into()))?;
        for row in finished.iter().map_err(|x| e(x.into()))? {
            let (k, v) = row.map_err(|x| e(x.into()))?;
            floor = floor.max(k.value().1.saturating_add(1));
            self.decode(&format!("ended job {}", k.value().1), v.value())?;
        }
        let mut damaged: Vec<String> = self.format_damaged.iter().cloned().collect();
        let mut say =
            |key: &str, why: &str| damaged.push(meta::damaged(&self.path, key, why, &self.recover()).to_string());
        let epoch = match self.meta_value("epoch")? {
            MetaValue::Absent => 0,
            MetaValue::Good(v) => v,
            MetaValue::Damaged { why, raw } => {
                say("epoch", &why);
                // Epochs must not go back: the larger of the marker's and what it says.
                raw.unwrap_or(0)
                    .max(marker_epoch(&marker_path(&self.path)).unwrap_or(0))
            }
        };
        let next_job_id = match self.meta_value("nextJobId")? {
            MetaValue::Absent => 1,
            MetaValue::Good(v) => v,
            MetaValue::Damaged { why, .. } => {
                say("nextJobId", &why);
                1
            }
        };
        if let MetaValue::Damaged { why, .. } = self.cluster_value()? {
            say(CLUSTER_KEY, &why);
        }
        // A damaged format is said already (`format_damaged`; a writer's open refuses it).
        let format = match self.meta_value("format")? {
            MetaValue::Absent => 0,
            MetaValue::Good(f) => f,
            MetaValue::Damaged { .. } => u64::from(STORE_FORMAT),
        };
        Ok(Summary {
            format: u32::try_from(format).unwrap_or(u32::MAX),
            epoch,
            next_job_id,
            live: live.len().map_err(|x| e(x.into()))?,
            finished: finished.len().map_err(|x| e(x.into()))?,
            floor,
            damaged,
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

    /// Sets the numbers `state import` brings (the epoch never goes below the store's:
    /// a new store where one was lost starts above the lost one's).
    pub fn set_meta(&self, epoch: u64, next_job_id: u64) -> Result<(), StoreError> {
        let epoch = epoch.max(self.meta("epoch")?.unwrap_or(0));
        self.write_meta(
            &[("epoch", epoch), ("nextJobId", next_job_id)],
            "writing its meta table",
        )?;
        self.write_marker(epoch)
    }

    /// Whether the store holds any job.
    pub fn is_empty(&self) -> Result<bool, StoreError> {
        let s = self.summary()?;
        Ok(s.live == 0 && s.finished == 0)
    }
}

/// An I/O error in words that say what to do: a read-only file system and a file cut
/// short are common and have their own advice.
fn io_why(io: &std::io::Error) -> String {
    if io.kind() == std::io::ErrorKind::ReadOnlyFilesystem {
        format!(
            "{io}: the planner writes its store (mount it read-write, or set [store] path / --store to a writable place; --check and `state export` read it as it is)"
        )
    } else if io.kind() == std::io::ErrorKind::UnexpectedEof {
        format!(
            "{io}: the file ends before its data does, it was cut short (a partial copy, a disk that filled): restore a backup with `hyperplan-planner state import`; or, as a last resort, {} (the file is kept aside as FILE.damaged-<unix time>)",
            super::INIT_FORGETS
        )
    } else {
        io.to_string()
    }
}

/// The length redb's header says a cleanly closed file has, when it says (`None`: not a
/// redb file, or one left open, whose recovery recomputes its layout from the length).
/// redb's own read-only open does not compare it with the file, though its writer does:
/// without this, `--check` and `state export` pass a file cut short that a start
/// refuses. The header (redb 4, `tree_store/page_store/header.rs`): the magic number,
/// the god byte at 9 (bit 2: recovery required), then u32s at 12 (page size), 16 (region
/// header pages), 20 (region data pages), 24 (full regions), 28 (data pages of the
/// trailing region); regions follow a one-page super-header.
fn stored_length(header: &[u8]) -> Option<u64> {
    const MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];
    const RECOVERY_REQUIRED: u8 = 2;
    if header.len() < 32 || header[..9] != MAGIC || header[9] & RECOVERY_REQUIRED != 0 {
        return None;
    }
    let u32_at = |at: usize| {
        u64::from(u32::from_le_bytes([
            header[at],
            header[at + 1],
            header[at + 2],
            header[at + 3],
        ]))
    };
    let (page, region_header, region_data, full, trailing) =
        (u32_at(12), u32_at(16), u32_at(20), u32_at(24), u32_at(28));
    let full_len = region_header.checked_add(region_data)?.checked_mul(page)?;
    let trailing_len = if trailing > 0 {
        region_header.checked_add(trailing)?.checked_mul(page)?
    } else {
        0
    };
    page.checked_add(full.checked_mul(full_len)?)?.checked_add(trailing_len)
}

/// A cleanly closed store shorter than its header says is refused, naming both lengths.
fn check_length(path: &Path) -> Result<(), StoreError> {
    use std::io::Read;
    let Ok(mut file) = std::fs::File::open(path) else {
        return Ok(()); // the open that follows says why
    };
    let mut header = [0u8; 32];
    if file.read_exact(&mut header).is_err() {
        return Ok(());
    }
    let (Some(stored), Ok(meta)) = (stored_length(&header), file.metadata()) else {
        return Ok(());
    };
    if meta.len() < stored {
        return Err(StoreError::Open {
            path: path.to_path_buf(),
            why: format!(
                "the file was cut short: {} bytes where its header says {stored} (a partial copy, a disk that filled)",
                meta.len()
            ),
        });
    }
    Ok(())
}

/// Where `--init` moves an unreadable store: `<file>.damaged-<unix seconds>`.
fn aside_path(path: &Path) -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".damaged-{secs}"));
    path.with_file_name(name)
}

/// Writes `value` under `key` in the meta table, with its checksum under `KEY.crc32c`.
fn put_meta(table: &mut redb::Table<&str, u64>, key: &str, value: u64) -> Result<(), redb::StorageError> {
    table.insert(key, value)?;
    table.insert(format!("{key}{CRC_SUFFIX}").as_str(), meta::number_crc(key, value))?;
    Ok(())
}

/// A database no planner has written to yet (no meta table).
fn db_is_new(db: &Database) -> bool {
    db.begin_read()
        .is_ok_and(|t| matches!(t.open_table(META), Err(redb::TableError::TableDoesNotExist(_))))
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
        // An error of the system (read-only, no space, a failing disk), not of the file's
        // contents: it may be perfect, and moving it aside would be wrong.
        redb::DatabaseError::Storage(redb::StorageError::Io(io)) if io.raw_os_error().is_some() => StoreError::Io {
            path: path.to_path_buf(),
            doing: "opening it to write".into(),
            why: io_why(&io),
        },
        other => StoreError::Open {
            path: path.to_path_buf(),
            why: format!("not a hyperplan store, or damaged: {other}"),
        },
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use hyperplan_core::model::record::Persist;
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
                usage: None,
                drains: None,
            })
            .unwrap();
            s.commit(&Batch {
                jobs: vec![persist(&a, false, 100)],
                next_job_id: None,
                usage: None,
                drains: None,
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
                finished: 0,
                floor: 3,
                damaged: vec![],
            }
        );
    }

    #[test]
    fn a_store_cut_short_anywhere_is_refused_by_the_readers_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        {
            let s = Embedded::open(&path).unwrap();
            s.commit(&Batch {
                jobs: vec![persist(&record(1, "a"), true, 0)],
                next_job_id: Some(2),
                usage: None,
                drains: None,
            })
            .unwrap();
        }
        let whole = std::fs::read(&path).unwrap();
        assert_eq!(
            stored_length(&whole),
            Some(whole.len() as u64),
            "closed cleanly, as long as it says"
        );
        assert!(Embedded::open_read_only(&path).is_ok());
        // Every cut, from one byte to all but the header: --check and export refuse it as
        // a start does (the data the cut took is not always data a reader touches).
        let cut = dir.path().join("cut.redb");
        for keep in [whole.len() - 1, whole.len() - 100, whole.len() / 2, 4096, 32] {
            std::fs::write(&cut, &whole[..keep]).unwrap();
            let e = Embedded::open_read_only(&cut)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains("cut short"), "{keep}: {e}");
        }
        // What is not a redb header says nothing.
        assert_eq!(stored_length(b"not a store at all, not one bit of it"), None);
        assert_eq!(stored_length(&whole[..20]), None);
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
                e.contains("newer hyperplan (store format 99; this build reads format 3"),
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
            usage: None,
            drains: None,
        })
        .unwrap();
        let e = s.load().unwrap_err().to_string();
        assert!(e.contains("state.redb: live job 7 cannot be read"), "{e}");
    }

    #[test]
    fn a_flipped_byte_in_a_record_is_an_error_naming_the_job_everywhere() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        {
            let s = Embedded::open(&path).unwrap();
            s.load().unwrap();
            s.commit(&Batch {
                jobs: vec![persist(&record(7, "flipme"), true, 0)],
                next_job_id: Some(8),
                usage: None,
                drains: None,
            })
            .unwrap();
        }
        let mut bytes = std::fs::read(&path).unwrap();
        let mut flipped = 0;
        for i in 0..bytes.len().saturating_sub(5) {
            if &bytes[i..i + 5] == b"alice" {
                bytes[i + 4] ^= 0x0a; // alice -> alico
                flipped += 1;
            }
        }
        assert!(flipped > 0);
        std::fs::write(&path, &bytes).unwrap();
        let ro = Embedded::open_read_only(&path).unwrap();
        for e in [ro.summary().unwrap_err(), ro.all().unwrap_err()] {
            let e = e.to_string();
            assert!(
                e.contains("state.redb: live job 7 cannot be read: checksum mismatch"),
                "{e}"
            );
        }
        drop(ro);
        let e = Embedded::open(&path).unwrap().load().unwrap_err().to_string();
        assert!(e.contains("live job 7 cannot be read: checksum mismatch"), "{e}");
    }

    /// A store as the build before format 2 wrote it: bare records, format 1.
    fn format1_store(path: &Path, live: &JobRecord, ended: &JobRecord) {
        let s = Embedded::open(path).unwrap();
        let txn = s.rw().unwrap().begin_write().unwrap();
        {
            let mut meta = txn.open_table(META).unwrap();
            meta.insert("format", 1).unwrap();
            for key in ["format", "epoch", "nextJobId"] {
                meta.remove(format!("{key}{CRC_SUFFIX}").as_str()).unwrap();
            }
            drop(meta);
            let old = live.encode_format1().unwrap();
            txn.open_table(LIVE).unwrap().insert(live.id, old.as_slice()).unwrap();
            let old = ended.encode_format1().unwrap();
            txn.open_table(FINISHED)
                .unwrap()
                .insert((5, ended.id), old.as_slice())
                .unwrap();
        }
        txn.commit().unwrap();
    }

    #[test]
    fn a_format_1_store_is_read_as_it_is_and_rewritten_with_checksums_when_opened_to_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let (a, b) = (record(1, "a"), record(2, "b"));
        format1_store(&path, &a, &b);
        {
            let ro = Embedded::open_read_only(&path).unwrap();
            assert_eq!(ro.all().unwrap(), (vec![a.clone()], vec![b.clone()]));
            assert_eq!(ro.summary().unwrap().format, 1);
        }
        let s = Embedded::open(&path).unwrap();
        assert_eq!(s.summary().unwrap().format, STORE_FORMAT);
        assert_eq!(s.load().unwrap().live, vec![a.clone()]);
        assert_eq!(s.finished(0).unwrap(), vec![b]);
        // From now on a record without its checksum is damage, not an old record.
        s.commit(&Batch {
            jobs: vec![Persist {
                bytes: a.encode_format1().unwrap().into(),
                ..persist(&a, true, 0)
            }],
            next_job_id: None,
            usage: None,
            drains: None,
        })
        .unwrap();
        let e = s.summary().unwrap_err().to_string();
        assert!(e.contains("live job 1 cannot be read: it has no checksum"), "{e}");
    }

    #[test]
    fn an_empty_file_or_a_store_gone_while_its_marker_stays_is_refused_unless_init() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        // The first start creates the store and its marker.
        {
            let s = Embedded::open(&path).unwrap();
            assert_eq!(s.load().unwrap().epoch, 1);
            assert_eq!(s.load().unwrap().epoch, 2);
        }
        assert!(marker_path(&path).exists());
        std::fs::write(&path, b"").unwrap();
        for e in [
            Embedded::open(&path).unwrap_err(),
            Embedded::open_read_only(&path).unwrap_err(),
        ] {
            let e = e.to_string();
            assert!(
                e.starts_with(&format!("{}: the store is empty (0 bytes)", path.display())),
                "{e}"
            );
            assert!(e.contains(super::super::INIT_FORGETS), "{e}");
        }
        std::fs::remove_file(&path).unwrap();
        for e in [
            Embedded::open(&path).unwrap_err(),
            Embedded::open_read_only(&path).unwrap_err(),
        ] {
            let e = e.to_string();
            assert!(
                e.starts_with(&format!("{}: the store is missing, but", path.display())),
                "{e}"
            );
            assert!(e.contains("state.redb.created"), "{e}");
            assert!(e.contains(super::super::INIT_FORGETS), "{e}");
        }
        // --init begins again, its epochs above the lost store's.
        {
            let s = Embedded::open_with(&path, Create::Init).unwrap();
            assert_eq!(s.load().unwrap().epoch, 3);
        }
        // An unreadable file: refused; --init moves it aside.
        std::fs::write(&path, b"this is not a store").unwrap();
        let e = Embedded::open(&path).unwrap_err().to_string();
        assert!(e.contains(super::super::INIT_FORGETS), "{e}");
        assert!(
            e.contains(&format!("kept aside as {}.damaged-<unix time>", path.display())),
            "{e}"
        );
        let e = Embedded::open_with(&path, Create::Import).unwrap_err().to_string();
        assert!(e.contains("cannot open"), "{e}");
        {
            let s = Embedded::open_with(&path, Create::Init).unwrap();
            assert_eq!(s.load().unwrap().epoch, 4);
        }
        let aside: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("state.redb.damaged-"))
            .collect();
        assert_eq!(aside.len(), 1);
        assert_eq!(std::fs::read(aside[0].path()).unwrap(), b"this is not a store");
        // A good store: --init changes nothing.
        let s = Embedded::open_with(&path, Create::Init).unwrap();
        assert_eq!(s.load().unwrap().epoch, 5);
    }

    #[test]
    fn a_store_removed_or_replaced_under_the_writer_fails_the_next_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let s = Embedded::open(&path).unwrap();
        s.load().unwrap();
        let batch = || Batch {
            jobs: vec![persist(&record(1, "a"), true, 0)],
            next_job_id: Some(2),
            usage: None,
            drains: None,
        };
        s.commit(&batch()).unwrap();
        std::fs::remove_file(&path).unwrap();
        let e = s.commit(&batch()).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: the store file was removed", path.display())),
            "{e}"
        );
        assert!(s.check_file().is_err());
        std::fs::write(&path, b"").unwrap();
        let e = s.check_file().unwrap_err().to_string();
        assert!(e.contains("replaced by another file"), "{e}");
    }

    /// A usage record as the core encodes it.
    fn usage(user: &str, value: f64, at: u64) -> Arc<[u8]> {
        use hyperplan_core::model::usage::{UsageRecord, UsageRow};
        UsageRecord {
            at,
            rows: vec![UsageRow {
                queue: "default".into(),
                user: user.into(),
                usage: value,
            }],
            associations: Vec::new(),
            runtimes: Vec::new(),
        }
        .encode()
        .unwrap()
        .into()
    }

    #[test]
    fn usage_is_committed_with_the_jobs_replaced_by_the_next_and_kept_by_a_commit_without() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let first = usage("alice", 120.0, 1_000);
        {
            let s = Embedded::open(&path).unwrap();
            assert_eq!(s.load().unwrap().usage, None);
            s.commit(&Batch {
                jobs: vec![persist(&record(1, "a"), true, 0)],
                next_job_id: Some(2),
                usage: Some(first.clone()),
                drains: Some(Arc::from(&b"drains"[..])),
            })
            .unwrap();
        }
        {
            let s = Embedded::open(&path).unwrap();
            let loaded = s.load().unwrap();
            assert_eq!(loaded.usage.as_deref(), Some(&*first), "read back after a reopen");
            assert_eq!(loaded.drains.as_deref(), Some(&b"drains"[..]), "the drains too");
            assert_eq!(loaded.live.len(), 1);
        }
        // Beside a running planner, --check and export read it too.
        let ro = Embedded::open_read_only(&path).unwrap();
        assert_eq!(ro.usage().unwrap().as_deref(), Some(&*first));
        drop(ro);
        let second = usage("bob", 30.5, 2_000);
        {
            let s = Embedded::open(&path).unwrap();
            s.commit(&Batch {
                jobs: vec![],
                next_job_id: None,
                usage: Some(second.clone()),
                drains: None,
            })
            .unwrap();
            assert_eq!(s.usage().unwrap().as_deref(), Some(&*second), "replaced");
            s.commit(&Batch {
                jobs: vec![persist(&record(2, "b"), true, 0)],
                next_job_id: Some(3),
                usage: None,
                drains: None,
            })
            .unwrap();
        }
        let s = Embedded::open(&path).unwrap();
        let loaded = s.load().unwrap();
        assert_eq!(
            loaded.usage.as_deref(),
            Some(&*second),
            "kept by a commit without usage"
        );
        assert_eq!(loaded.live.len(), 2);
        assert_eq!(s.summary().unwrap().live, 2);
    }

    #[test]
    fn a_store_from_before_fair_share_has_no_usage_table_and_loads_with_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let a = record(1, "a");
        {
            let s = Embedded::open(&path).unwrap();
            s.commit(&Batch {
                jobs: vec![persist(&a, true, 0)],
                next_job_id: Some(2),
                usage: None,
                drains: None,
            })
            .unwrap();
            // As a build before fair share left it: no `usage` table at all.
            let txn = s.reader.begin_read().unwrap();
            assert!(matches!(
                txn.open_table(USAGE),
                Err(redb::TableError::TableDoesNotExist(_))
            ));
        }
        {
            let ro = Embedded::open_read_only(&path).unwrap();
            assert_eq!(ro.usage().unwrap(), None);
            assert_eq!(ro.summary().unwrap().live, 1);
            assert_eq!(ro.all().unwrap().0, vec![a.clone()]);
        }
        let s = Embedded::open(&path).unwrap();
        let loaded = s.load().unwrap();
        assert_eq!((loaded.usage, loaded.live), (None, vec![a]));
        assert_eq!(s.summary().unwrap().format, STORE_FORMAT, "no new format for it");
    }

    #[test]
    fn a_second_planner_on_one_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let _first = Embedded::open(&path).unwrap();
        let e = Embedded::open(&path).unwrap_err().to_string();
        assert!(e.contains("in use by another process"), "{e}");
    }

    /// What a flipped bit in a meta value looks like to the store: `key` holds `value`,
    /// its checksum is the one written for what it held before.
    pub(crate) fn flip_meta(path: &Path, key: &str, value: u64) {
        let db = Database::create(path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(META).unwrap().insert(key, value).unwrap();
        txn.commit().unwrap();
    }

    /// A store as a build of format 2 left it: meta values without checksums.
    fn as_format_2(path: &Path) {
        let db = Database::create(path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut meta = txn.open_table(META).unwrap();
            meta.insert("format", 2).unwrap();
            for key in ["format", "epoch", "nextJobId"] {
                meta.remove(format!("{key}{CRC_SUFFIX}").as_str()).unwrap();
            }
        }
        txn.delete_table(CLUSTER).unwrap();
        txn.commit().unwrap();
    }

    fn cluster(name: &str) -> Cluster {
        Cluster {
            fingerprint: meta::fingerprint(name.as_bytes()).unwrap(),
            ca_file: PathBuf::from(format!("/etc/{name}/ca.pem")),
        }
    }

    #[test]
    fn a_store_of_another_cluster_is_refused_before_anything_in_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let (a, b) = (cluster("cluster-a"), cluster("cluster-b"));
        {
            let s = Embedded::open_as(&path, Create::Start, Some(&a)).unwrap();
            assert_eq!(s.cluster().unwrap().as_deref(), Some(a.fingerprint.as_str()));
            s.load().unwrap();
            s.commit(&Batch {
                jobs: vec![persist(&record(1, "a"), true, 0)],
                next_job_id: Some(2),
                usage: None,
                drains: None,
            })
            .unwrap();
        }
        // Cluster A's planner again: fine.
        drop(Embedded::open_as(&path, Create::Start, Some(&a)).unwrap());
        // Cluster B's planner (and with --init too): refused, saying why and what to do.
        for create in [Create::Start, Create::Init] {
            let e = Embedded::open_as(&path, create, Some(&b)).unwrap_err();
            assert!(matches!(e, StoreError::OtherCluster { .. }), "{e}");
            let e = e.to_string();
            assert!(
                e.starts_with(&format!("{}: the store belongs to another cluster", path.display())),
                "{e}"
            );
            assert!(e.contains(&a.fingerprint) && e.contains(&b.fingerprint), "{e}");
            assert!(e.contains("/etc/cluster-b/ca.pem"), "{e}");
            assert!(e.contains("a store file ([store] path, --store) of its own"), "{e}");
        }
        // Nothing changed: the epoch, the job, the cluster.
        let ro = Embedded::open_read_only(&path).unwrap();
        let s = ro.summary().unwrap();
        assert_eq!((s.epoch, s.live, s.next_job_id), (1, 1, 2));
        assert_eq!(ro.cluster().unwrap().as_deref(), Some(a.fingerprint.as_str()));
    }

    #[test]
    fn a_store_from_before_cluster_records_gets_the_first_planners_cluster() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        drop(Embedded::open(&path).unwrap());
        as_format_2(&path);
        let (a, b) = (cluster("cluster-a"), cluster("cluster-b"));
        assert_eq!(Embedded::open_read_only(&path).unwrap().cluster().unwrap(), None);
        drop(Embedded::open_as(&path, Create::Start, Some(&a)).unwrap());
        assert_eq!(
            Embedded::open_read_only(&path).unwrap().cluster().unwrap().as_deref(),
            Some(a.fingerprint.as_str())
        );
        assert!(matches!(
            Embedded::open_as(&path, Create::Start, Some(&b)),
            Err(StoreError::OtherCluster { .. })
        ));
    }

    #[test]
    fn a_flipped_meta_value_stops_the_start_naming_the_key_and_how_to_recover() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        {
            let s = Embedded::open(&path).unwrap();
            s.load().unwrap();
            s.commit(&Batch {
                jobs: vec![persist(&record(41, "a"), true, 0)],
                next_job_id: Some(42),
                usage: None,
                drains: None,
            })
            .unwrap();
        }
        // The flip: 41 → 9 (here the next id, 42 → 10).
        flip_meta(&path, "nextJobId", 42 ^ 32);
        let e = Embedded::open(&path).unwrap().load().unwrap_err();
        assert!(
            matches!(&e, StoreError::MetaDamaged { key, .. } if key == "nextJobId"),
            "{e}"
        );
        let e = e.to_string();
        assert!(
            e.starts_with(&format!(
                "{}: meta key nextJobId is damaged: checksum mismatch",
                path.display()
            )),
            "{e}"
        );
        assert!(
            e.contains("state export FILE") && e.contains("state import FILE"),
            "{e}"
        );
        assert!(!e.contains("--init"), "export and import keep every job: {e}");
        // --check (the summary) says the same, and does not fail to read the jobs.
        let s = Embedded::open_read_only(&path).unwrap().summary().unwrap();
        assert_eq!(s.damaged.len(), 1, "{s:?}");
        assert!(s.damaged[0].contains("meta key nextJobId is damaged"), "{s:?}");
        assert_eq!((s.floor, s.next_id()), (42, 42));
        // The epoch's too (1 → 0: an export takes the marker's, never a lower one).
        flip_meta(&path, "epoch", 0);
        let e = Embedded::open(&path).and_then(|s| s.load()).unwrap_err().to_string();
        assert!(e.contains("meta key epoch is damaged"), "{e}");
        // A damaged format stops a writer's open, not an export.
        flip_meta(&path, "format", 3 ^ 1);
        let e = Embedded::open(&path).unwrap_err().to_string();
        assert!(e.contains("meta key format is damaged"), "{e}");
        let s = Embedded::open_read_only(&path).unwrap().summary().unwrap();
        assert_eq!(s.damaged.len(), 3, "{s:?}");
        assert_eq!(s.epoch, 1, "the marker's, never below it: {s:?}");
    }

    #[test]
    fn the_next_job_id_never_goes_below_the_highest_id_of_any_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let ended = record(41, "old");
        {
            let s = Embedded::open(&path).unwrap();
            s.load().unwrap();
            s.commit(&Batch {
                jobs: vec![persist(&record(5, "a"), true, 0), persist(&ended, false, 100)],
                next_job_id: Some(42),
                usage: None,
                drains: None,
            })
            .unwrap();
        }
        // Damaged before it had a checksum (a format-2 store): 42 → 10, below an ended
        // job's id. The upgrade keeps the value; the start's floor does not take it.
        as_format_2(&path);
        flip_meta(&path, "nextJobId", 10);
        let s = Embedded::open(&path).unwrap();
        assert_eq!(s.summary().unwrap().format, STORE_FORMAT);
        let loaded = s.load().unwrap();
        assert_eq!(loaded.next_job_id, 42, "above ended job 41");
        assert_eq!(s.summary().unwrap().next_job_id, 42, "written back with the epoch");
        drop(s);
        // From now on it has its checksum: the next flip is damage, named.
        flip_meta(&path, "nextJobId", 3);
        let e = Embedded::open(&path).unwrap().load().unwrap_err().to_string();
        assert!(e.contains("meta key nextJobId is damaged"), "a checksum now: {e}");
    }

    #[test]
    fn a_format_2_store_is_read_as_it_is_and_gets_meta_checksums_when_opened_to_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        {
            let s = Embedded::open(&path).unwrap();
            assert_eq!(s.load().unwrap().epoch, 1);
            s.commit(&Batch {
                jobs: vec![persist(&record(1, "a"), true, 0)],
                next_job_id: Some(2),
                usage: None,
                drains: None,
            })
            .unwrap();
        }
        as_format_2(&path);
        {
            let ro = Embedded::open_read_only(&path).unwrap();
            let s = ro.summary().unwrap();
            assert_eq!((s.format, s.epoch, s.next_job_id), (2, 1, 2));
            assert!(s.damaged.is_empty(), "no checksums yet is not damage: {s:?}");
        }
        let s = Embedded::open(&path).unwrap();
        let loaded = s.load().unwrap();
        assert_eq!((loaded.epoch, loaded.next_job_id), (2, 2));
        assert_eq!(s.summary().unwrap().format, STORE_FORMAT);
        let txn = s.reader.begin_read().unwrap();
        let meta = txn.open_table(META).unwrap();
        for (key, value) in [("format", u64::from(STORE_FORMAT)), ("epoch", 2), ("nextJobId", 2)] {
            assert_eq!(
                meta.get(format!("{key}{CRC_SUFFIX}").as_str())
                    .unwrap()
                    .map(|v| v.value()),
                Some(meta::number_crc(key, value)),
                "{key}"
            );
        }
    }
}
