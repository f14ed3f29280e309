//! The planner's durable state. The core's persist system hands over each job whose record changed
//! (`hyperplan_core::persist`); the daemon commits those records — with the planner epoch
//! and the next job id — before it acknowledges a submit or cancel, acknowledges a task's
//! start or end, or sends a `Launch` or `Kill` ([`writer`]: group commit, one transaction
//! one commit for everything that arrived while the last one was being written).
//!
//! The layout is one table per kind (see `DESIGN.md` in the repository, "Durable state"):
//! jobs that have not ended by id, ended jobs by (end time, id), and a few numbers. A
//! start reads the live table only, so it takes time in proportion to live jobs, not
//! to history; ended jobs are read for `status --all`/`--since` and deleted after
//! `[store] keepFinished`.

pub mod config;
mod election;
pub mod embedded;
pub mod etcd;
pub mod export;
pub mod meta;
pub mod writer;

use std::path::PathBuf;

use hyperplan_core::model::record::{JobRecord, Persist};

pub use config::StoreConfig;
pub use embedded::Embedded;
pub use etcd::{Etcd, HaView};
pub use meta::Cluster;

/// The planner's store: a redb file, or etcd shared with standby planners.
#[derive(Clone, Debug)]
pub enum Store {
    Embedded(Embedded),
    Etcd(Etcd),
}

impl Store {
    /// Opens the store `config` names for a planner (the embedded file for writing; etcd
    /// connected and its format checked, not yet leading).
    /// The embedded file is created only at the very first start, or with `config.init`
    /// (`--init`; see [`embedded::Create`]).
    pub fn open(config: &StoreConfig) -> Result<Self, StoreError> {
        Self::open_as(config, None)
    }

    /// [`Store::open`] for a planner of `cluster`: a store another cluster's planner
    /// wrote first is refused before anything in it changes, and one without a cluster
    /// gets `cluster`'s (see [`meta`]).
    pub fn open_as(config: &StoreConfig, cluster: Option<&Cluster>) -> Result<Self, StoreError> {
        let create = if config.init {
            embedded::Create::Init
        } else {
            embedded::Create::Start
        };
        match &config.backend {
            config::Backend::Embedded => Embedded::open_as(&config.path, create, cluster).map(Self::Embedded),
            config::Backend::Etcd(e) => Etcd::connect_as(e, cluster).map(Self::Etcd),
        }
    }

    /// For `state import`: a missing or empty embedded file begins anew.
    pub fn open_for_import(config: &StoreConfig) -> Result<Self, StoreError> {
        match &config.backend {
            config::Backend::Embedded => {
                Embedded::open_with(&config.path, embedded::Create::Import).map(Self::Embedded)
            }
            config::Backend::Etcd(e) => Etcd::connect(e).map(Self::Etcd),
        }
    }

    /// Whether the store is still the one opened (the embedded file at its path; etcd: yes).
    pub fn check_file(&self) -> Result<(), StoreError> {
        match self {
            Self::Embedded(s) => s.check_file(),
            Self::Etcd(_) => Ok(()),
        }
    }

    /// For `--check` and `state export`, beside a running planner.
    pub fn open_read_only(config: &StoreConfig) -> Result<Self, StoreError> {
        match &config.backend {
            config::Backend::Embedded => Embedded::open_read_only(&config.path).map(Self::Embedded),
            config::Backend::Etcd(e) => Etcd::connect(e).map(Self::Etcd),
        }
    }

    /// The file, or `etcd ENDPOINTS PREFIX`.
    pub fn at(&self) -> &std::path::Path {
        match self {
            Self::Embedded(s) => s.path(),
            Self::Etcd(s) => s.at(),
        }
    }

    pub fn commit(&self, batch: &Batch) -> Result<(), StoreError> {
        match self {
            Self::Embedded(s) => s.commit(batch),
            Self::Etcd(s) => s.commit(batch),
        }
    }

    pub fn finished(&self, since: u64) -> Result<Vec<JobRecord>, StoreError> {
        match self {
            Self::Embedded(s) => s.finished(since),
            Self::Etcd(s) => s.finished(since),
        }
    }

    /// At most `limit` ended jobs from `from` (end time, id) on, oldest first.
    pub fn finished_after_from(&self, from: (u64, u64), limit: usize) -> Result<Vec<JobRecord>, StoreError> {
        match self {
            Self::Embedded(s) => s.finished_after_from(from, limit),
            Self::Etcd(s) => s.finished_after_from(from, limit),
        }
    }

    pub fn purge(&self, before: u64) -> Result<u64, StoreError> {
        match self {
            Self::Embedded(s) => s.purge(before),
            Self::Etcd(s) => s.purge(before),
        }
    }

    pub fn summary(&self) -> Result<Summary, StoreError> {
        match self {
            Self::Embedded(s) => s.summary(),
            Self::Etcd(s) => s.summary(),
        }
    }

    pub fn all(&self) -> Result<(Vec<JobRecord>, Vec<JobRecord>), StoreError> {
        match self {
            Self::Embedded(s) => s.all(),
            Self::Etcd(s) => s.all(),
        }
    }

    /// Fair share's usage as last committed, the bytes as written (`None`: none yet, or
    /// a store from before fair share). For `state export`; a start has it in [`Loaded`].
    pub fn usage(&self) -> Result<Option<Vec<u8>>, StoreError> {
        match self {
            Self::Embedded(s) => s.usage(),
            Self::Etcd(s) => s.usage(),
        }
    }

    /// The nodes' drains as last committed, the bytes as written (`None`: none yet). For
    /// `state export`; a start has them in [`Loaded`].
    pub fn drains(&self) -> Result<Option<Vec<u8>>, StoreError> {
        match self {
            Self::Embedded(s) => s.drains(),
            Self::Etcd(s) => s.drains(),
        }
    }

    /// The fingerprint of the CA of the cluster the store belongs to (`None`: none
    /// recorded yet); a damaged record is an error naming it.
    pub fn cluster(&self) -> Result<Option<String>, StoreError> {
        match self {
            Self::Embedded(s) => s.cluster(),
            Self::Etcd(s) => s.cluster(),
        }
    }

    /// Records `fingerprint` as the store's cluster, replacing what was there (`state
    /// import`; a start only ever records where there is none).
    pub fn set_cluster(&self, fingerprint: &str) -> Result<(), StoreError> {
        match self {
            Self::Embedded(s) => s.set_cluster(fingerprint),
            Self::Etcd(s) => s.set_cluster(fingerprint),
        }
    }

    pub fn set_meta(&self, epoch: u64, next_job_id: u64) -> Result<(), StoreError> {
        match self {
            Self::Embedded(s) => s.set_meta(epoch, next_job_id),
            Self::Etcd(s) => s.set_meta(epoch, next_job_id),
        }
    }

    pub fn is_empty(&self) -> Result<bool, StoreError> {
        match self {
            Self::Embedded(s) => s.is_empty(),
            Self::Etcd(s) => s.is_empty(),
        }
    }
}

/// What a start loads.
#[derive(Debug)]
pub struct Loaded {
    /// This run's epoch: one more than any before it, already committed.
    pub epoch: u64,
    pub next_job_id: u64,
    pub live: Vec<JobRecord>,
    /// Fair share's usage as last committed (a `UsageRecord`, encoded; `None`: none yet,
    /// or a store from before fair share), for `Planner::restore_usage`.
    pub usage: Option<Vec<u8>>,
    /// The nodes' drains as last committed (a `DrainsRecord`, encoded; `None`: none
    /// yet), for `Planner::restore_drains`.
    pub drains: Option<Vec<u8>>,
    /// When the newest ended job in the store ended (Unix seconds; `None`: none): the
    /// store's own idea of the time, which the purge of ended jobs does not run ahead of
    /// (a planner started with its clock days ahead deletes nothing for it).
    pub newest_end_secs: Option<u64>,
}

/// One commit's worth of changes.
#[derive(Debug, Default)]
pub struct Batch {
    pub jobs: Vec<Persist>,
    /// The core's next job id (ids of ended jobs are never given again).
    pub next_job_id: Option<u64>,
    /// Fair share's usage (a `UsageRecord`, encoded): replaces the stored one.
    pub usage: Option<std::sync::Arc<[u8]>>,
    /// The nodes' drains (a `DrainsRecord`, encoded): replaces the stored one.
    pub drains: Option<std::sync::Arc<[u8]>>,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty() && self.next_job_id.is_none() && self.usage.is_none() && self.drains.is_none()
    }

    pub fn append(&mut self, mut other: Batch) {
        self.jobs.append(&mut other.jobs);
        if other.next_job_id.is_some() {
            self.next_job_id = other.next_job_id;
        }
        if other.usage.is_some() {
            self.usage = other.usage;
        }
        if other.drains.is_some() {
            self.drains = other.drains;
        }
    }
}

/// What `--check` and `state export` report of a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub format: u32,
    /// The epoch; where it is damaged, the best guess that does not go back (the
    /// marker's, or what the damaged value says, whichever is larger).
    pub epoch: u64,
    /// The next job id as stored (1 where none is, or where it is damaged).
    pub next_job_id: u64,
    pub live: u64,
    pub finished: u64,
    /// One more than the highest job id of any record, live or ended: no id below it is
    /// ever given again, whatever `nextJobId` says.
    pub floor: u64,
    /// The meta values a start refuses (a checksum that does not match), each as the
    /// start's error says it.
    pub damaged: Vec<String>,
}

impl Summary {
    /// The id the next job gets: the stored one, never below [`Summary::floor`].
    pub fn next_id(&self) -> u64 {
        self.next_job_id.max(self.floor)
    }
}

/// What `--init` does, said wherever it is offered: it loses every job.
pub const INIT_FORGETS: &str = "--init starts an empty store: every job, its history and the job ids are forgotten";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "{path}: cannot open the planner's store: {why} (a damaged file: restore a backup with `hyperplan-planner state import`; or, as a last resort, {INIT_FORGETS} (the damaged file is kept aside as {path}.damaged-<unix time>))"
    )]
    Open { path: PathBuf, why: String },
    /// A 0-byte store file: not a store a planner ever committed to.
    #[error(
        "{path}: the store is empty (0 bytes): truncated, or replaced by an empty file; a start does not begin again from nothing on its own: restore a backup with `hyperplan-planner state import`; or, if no backup is left, {INIT_FORGETS} (the empty file holds nothing to keep; epochs go on above the last one)"
    )]
    Empty { path: PathBuf },
    /// No store file, but its marker says a planner kept its state there.
    #[error(
        "{path}: the store is missing, but {marker} says a planner kept its state there (it was deleted or moved): put it back, or restore a backup with `hyperplan-planner state import`; or, if it is gone for good, {INIT_FORGETS} (epochs go on above the marker's)"
    )]
    Missing { path: PathBuf, marker: PathBuf },
    /// The file a running planner commits to is no longer the one at its path.
    #[error(
        "{path}: the store file was {how} under the running planner: what it commits would be lost; stopping, nothing more is acknowledged (put the file back and start again; if it is gone for good, {INIT_FORGETS})"
    )]
    Replaced { path: PathBuf, how: String },
    /// A meta value (`epoch`, `nextJobId`, `caSha256`) whose checksum does not match.
    #[error("{path}: meta key {key} is damaged: {why}; a planner does not start on a guessed {key}: {recover}")]
    MetaDamaged {
        path: PathBuf,
        key: String,
        why: String,
        /// How to get the store back (export and import, which keep every job).
        recover: String,
    },
    /// The store belongs to another cluster (its CA's fingerprint is recorded there).
    #[error(
        "{path}: the store belongs to another cluster: the planner that first wrote it has a cluster CA with SHA-256 fingerprint {stored}, this planner's CA ({}) has {ours}; not starting, nothing there was changed (two clusters on one store would take each other's jobs and run their tasks). Give this cluster {own} of its own, or start this planner with the CA of the cluster that owns the store; if this cluster's CA was replaced on purpose, move the jobs with `hyperplan-planner state export` and `state import --force` into a new store",
        .ca_file.display()
    )]
    OtherCluster {
        path: PathBuf,
        stored: String,
        ours: String,
        ca_file: PathBuf,
        /// "a [store] prefix", or "a store file ([store] path, --store)".
        own: &'static str,
    },
    #[error("{path}: the store is in use by another process (is a planner running with it?): {why}")]
    InUse { path: PathBuf, why: String },
    #[error(
        "{path}: written by a newer hyperplan (store format {found}; this build reads format {supported} and older); run that version, or export with it and import here"
    )]
    Newer { path: PathBuf, found: u32, supported: u32 },
    #[error("{path}: {what}: {why}")]
    Corrupt { path: PathBuf, what: String, why: String },
    #[error("{path}: {doing}: {why}")]
    Io { path: PathBuf, doing: String, why: String },
    #[error("{0}")]
    Import(String),
}

/// The store format this build writes: the layout of the tables and
/// [`hyperplan_core::model::record::RECORD_FORMAT`] of the records. 1: records without a
/// checksum; 2: every record with its CRC-32C; 3: every meta value with its CRC-32C too
/// ([`meta`]). An older store is rewritten as format 3 when a planner, or an import,
/// opens it for writing (etcd: when a planner takes the lead); read-only it is read as
/// it is. A build of format 2 refuses a store of format 3 (it would write meta values
/// without their checksums).
pub const STORE_FORMAT: u32 = 3;

/// Checks `live` records as a start would load them (`Planner::restore` on a scratch
/// planner with `planner`'s limits): what it would skip, one entry per record.
pub fn unloadable(
    planner: &hyperplan_core::PlannerConfig,
    live: Vec<JobRecord>,
    next_job_id: u64,
) -> Vec<hyperplan_core::persist::restore::NotRestored> {
    let mut scratch = hyperplan_core::Planner::new(planner.clone());
    scratch.restore_each(live, next_job_id, 0)
}
