//! The etcd store, for planners that share their state: the same records as the
//! embedded store, as keys under `[store] prefix` (default `/hyperplan/`):
//!
//! - `meta/format`, `meta/epoch`, `meta/nextJobId`: decimal numbers;
//! - `live/<id, 20 digits>`: the record (MessagePack) of a job that has not ended;
//! - `finished/<end, 20 digits>/<id, 20 digits>`: an ended job's record;
//! - `leader`: the leader's advertised address, held by its lease ([`super::election`]).
//!
//! Every write is a transaction guarded by the leader key: it commits only while the
//! `leader` key is the one this planner created (same create revision). A leader whose
//! lease expired — a standby may lead already — cannot write one more byte: the fence
//! is in etcd, not in the deposed planner's opinion of itself. Tools (`state import`)
//! write only while no planner leads.
//!
//! etcd-client is async; the store keeps a small runtime of its own so that the
//! writer thread and the driver can call it like the embedded store, and so that its
//! lease and watch go on whatever the daemon's runtime is busy with.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, Identity, TlsOptions, Txn,
    TxnOp,
};
use hyperplan_core::journal::JobRecord;
use tokio::sync::watch;

use super::config::{EtcdConfig, EtcdTls};
use super::{Batch, Loaded, STORE_FORMAT, StoreError, Summary};

/// A key and its value.
type KeyValue = (Vec<u8>, Vec<u8>);

/// etcd refuses transactions of more than 128 operations by default (`--max-txn-ops`).
const OPS_PER_TXN: usize = 120;

/// … and requests over 1.5 MiB (`--max-request-bytes`): a transaction carries at most
/// this many bytes of records (one larger record goes alone).
const BYTES_PER_TXN: usize = 1024 * 1024;

const NO_LONGER: &str = "this planner is no longer the leader (its lease expired; another planner may lead)";

/// How long one call to etcd may take before it is an error.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// What the planners sharing this prefix look like from here: kept by the watch
/// ([`Etcd::start_watch`]) and the election.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HaView {
    /// The address the leader advertises (`None`: nobody leads now).
    pub leader: Option<String>,
    /// The newest epoch in etcd.
    pub epoch: u64,
    /// This planner leads.
    pub leading: bool,
    /// Why this planner stopped leading (its lease could not be renewed, or a write
    /// found another leader's key): it must stop acting.
    pub lost: Option<String>,
}

/// The state under the prefix as the watch last saw it: what a standby takes over with.
#[derive(Debug, Default)]
pub(super) struct Warm {
    pub live: BTreeMap<u64, Vec<u8>>,
    pub format: u64,
    pub epoch: u64,
    pub next_job_id: u64,
    /// etcd's revision this copy is complete up to.
    pub revision: i64,
}

/// Who writes through a connection, and behind which fence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    /// `state import`, `--check`: writes only while no planner leads.
    Tool,
    /// A planner that has not led yet: writes nothing.
    Standby,
    /// The leader: writes while the `leader` key has this create revision.
    Leading(i64),
    /// A leader that lost its lease: writes nothing, ever again.
    Deposed,
}

/// A connection to etcd under one prefix. Cheap to clone.
#[derive(Clone)]
pub struct Etcd {
    inner: Arc<Inner>,
}

pub(super) struct Inner {
    /// Taken at drop and shut down without blocking (it may be dropped in async code).
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    pub(super) handle: tokio::runtime::Handle,
    pub(super) client: Client,
    pub(super) prefix: String,
    /// `etcd ENDPOINTS PREFIX`, where errors say the state is.
    at: PathBuf,
    /// What this connection may write (see [`Role`]).
    pub(super) role: Mutex<Role>,
    pub(super) view: watch::Sender<HaView>,
    pub(super) warm: Mutex<Warm>,
    /// The revision `warm` is complete up to, for waiting on it.
    pub(super) warm_rev: watch::Sender<i64>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.lock().ok().and_then(|mut r| r.take()) {
            rt.shutdown_background();
        }
    }
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd")
            .field("at", &self.inner.at)
            .finish_non_exhaustive()
    }
}

/// The CA and, where given, this planner's certificate and key, read from their files.
fn tls_options(tls: &EtcdTls) -> Result<TlsOptions, StoreError> {
    let mut options = TlsOptions::new().ca_certificate(Certificate::from_pem(read_pem(&tls.ca_file)?));
    if let Some((cert, key)) = &tls.identity {
        options = options.identity(Identity::from_pem(read_pem(cert)?, read_pem(key)?));
    }
    Ok(options)
}

/// Longer than any certificate chain or key: a file this long is not one.
const MAX_PEM_BYTES: u64 = 1 << 20;

/// A PEM file named in `[store]` (a certificate or a key): read whole, or an error
/// naming the file.
fn read_pem(path: &Path) -> Result<Vec<u8>, StoreError> {
    let err = |why: String| StoreError::Io {
        path: path.to_path_buf(),
        doing: "reading a PEM file for TLS to etcd".into(),
        why,
    };
    let file = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_PEM_BYTES + 1), &mut bytes)
        .map_err(|e| err(e.to_string()))?;
    if bytes.len() as u64 > MAX_PEM_BYTES {
        return Err(err(format!(
            "longer than {MAX_PEM_BYTES} bytes: not a certificate or a key"
        )));
    }
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(err("expected PEM (a \"-----BEGIN …\" block)".into()));
    }
    Ok(bytes)
}

/// An error and its sources, `a: b: c` (tonic's transport errors say little alone:
/// the certificate problem is in a source).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

impl Etcd {
    /// Connects to the endpoints and checks the store format there. Blocks (up to a few
    /// seconds when etcd is not there).
    pub fn connect(config: &EtcdConfig) -> Result<Self, StoreError> {
        let at = PathBuf::from(format!("etcd {} {}", config.endpoints.join(","), config.prefix));
        let io = |doing: &str, why: String| StoreError::Io {
            path: at.clone(),
            doing: doing.to_string(),
            why,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("etcd")
            .enable_all()
            .build()
            .map_err(|e| io("starting its client", e.to_string()))?;
        let handle = runtime.handle().clone();
        let endpoints = config.endpoints.clone();
        let mut options = ConnectOptions::new()
            .with_connect_timeout(CALL_TIMEOUT)
            .with_timeout(CALL_TIMEOUT)
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2));
        if let Some(tls) = &config.tls {
            options = options.with_tls(tls_options(tls)?);
        }
        let doing = match &config.tls {
            None => "connecting (is etcd running there?)",
            Some(EtcdTls { identity: Some(_), .. }) => {
                "connecting with TLS (is etcd running there, with a certificate signed by [store] caFile's CA, trusting the CA of certFile?)"
            }
            Some(EtcdTls { identity: None, .. }) => {
                "connecting with TLS, without a client certificate (is etcd running there, with a certificate signed by [store] caFile's CA? where etcd runs with --client-cert-auth, set certFile and keyFile)"
            }
        };
        let client = wait(&handle, async move { Client::connect(endpoints, Some(options)).await })
            .map_err(|e| io(doing, error_chain(&e)))?;
        let etcd = Self {
            inner: Arc::new(Inner {
                runtime: Mutex::new(Some(runtime)),
                handle,
                client,
                prefix: config.prefix.clone(),
                at,
                role: Mutex::new(Role::Tool),
                view: watch::Sender::new(HaView::default()),
                warm: Mutex::new(Warm::default()),
                warm_rev: watch::Sender::new(0),
            }),
        };
        // The client connects lazily: the first call is where a refused handshake shows.
        let format = etcd.meta_value("format").map_err(|e| match e {
            StoreError::Io { path, why, .. } => StoreError::Io {
                path,
                doing: doing.to_string(),
                why,
            },
            other => other,
        })?;
        if format > u64::from(STORE_FORMAT) {
            return Err(StoreError::Newer {
                path: etcd.inner.at.clone(),
                found: u32::try_from(format).unwrap_or(u32::MAX),
                supported: STORE_FORMAT,
            });
        }
        Ok(etcd)
    }

    pub fn at(&self) -> &Path {
        &self.inner.at
    }

    pub(super) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// The leader, the epoch, and whether this planner leads (or lost the lead).
    pub fn view(&self) -> watch::Receiver<HaView> {
        self.inner.view.subscribe()
    }

    pub(super) fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.inner.prefix)
    }

    fn io(&self, doing: &str) -> impl Fn(etcd_client::Error) -> StoreError + '_ {
        let doing = doing.to_string();
        move |e| StoreError::Io {
            path: self.inner.at.clone(),
            doing: doing.clone(),
            why: error_chain(&e),
        }
    }

    /// Runs `fut` on the store's runtime and waits for it (from any thread or task).
    fn call<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
    ) -> Result<T, etcd_client::Error> {
        wait(&self.inner.handle, fut)
    }

    fn meta_value(&self, name: &str) -> Result<u64, StoreError> {
        let mut c = self.inner.client.clone();
        let key = self.key(&format!("meta/{name}"));
        let got = self
            .call(async move { c.get(key, None).await })
            .map_err(self.io("reading meta"))?;
        match got.kvs().first() {
            None => Ok(0),
            Some(kv) => self.number(&format!("meta/{name}"), kv.value()),
        }
    }

    pub(super) fn number(&self, what: &str, v: &[u8]) -> Result<u64, StoreError> {
        std::str::from_utf8(v)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| StoreError::Corrupt {
                path: self.inner.at.clone(),
                what: format!("{what} cannot be read"),
                why: "expected a decimal number".into(),
            })
    }

    fn decode(&self, what: &str, bytes: &[u8]) -> Result<JobRecord, StoreError> {
        JobRecord::decode(bytes).map_err(|x| StoreError::Corrupt {
            path: self.inner.at.clone(),
            what: format!("{what} cannot be read"),
            why: x.to_string(),
        })
    }

    fn role(&self) -> Role {
        self.inner.role.lock().map_or(Role::Deposed, |r| *r)
    }

    /// The write fence: our leader key while we lead, no leader key for tools; a standby
    /// or a deposed leader writes nothing.
    fn fence(&self, doing: &str) -> Result<Compare, StoreError> {
        let rev = match self.role() {
            Role::Tool => 0,
            Role::Leading(rev) => rev,
            role @ (Role::Standby | Role::Deposed) => {
                return Err(StoreError::Io {
                    path: self.inner.at.clone(),
                    doing: doing.to_string(),
                    why: if role == Role::Deposed {
                        NO_LONGER.to_string()
                    } else {
                        "a standby does not write".to_string()
                    },
                });
            }
        };
        Ok(Compare::create_revision(self.key("leader"), CompareOp::Equal, rev))
    }

    /// Runs `groups` of operations in transactions of at most [`OPS_PER_TXN`] operations,
    /// each behind the fence; a group is never split. `first` goes into every
    /// transaction (the next job id: never behind a record).
    fn write(&self, doing: &str, groups: Vec<(Vec<TxnOp>, usize)>, first: Option<TxnOp>) -> Result<(), StoreError> {
        let mut chunks: Vec<Vec<TxnOp>> = Vec::new();
        let mut current: Vec<TxnOp> = Vec::new();
        let mut bytes = 0;
        for (g, size) in groups {
            if !current.is_empty() && (current.len() + g.len() > OPS_PER_TXN || bytes + size > BYTES_PER_TXN) {
                chunks.push(std::mem::take(&mut current));
                bytes = 0;
            }
            bytes += size;
            current.extend(g);
        }
        chunks.push(current);
        for mut chunk in chunks {
            chunk.extend(first.clone());
            if chunk.is_empty() {
                continue;
            }
            let txn = Txn::new().when([self.fence(doing)?]).and_then(chunk);
            let mut c = self.inner.client.clone();
            let done = self.call(async move { c.txn(txn).await }).map_err(self.io(doing))?;
            if !done.succeeded() {
                let why = if matches!(self.role(), Role::Leading(_)) {
                    NO_LONGER.to_string()
                } else {
                    "a planner leads: stop every planner of this prefix first".to_string()
                };
                self.lose(&why);
                return Err(StoreError::Io {
                    path: self.inner.at.clone(),
                    doing: doing.to_string(),
                    why,
                });
            }
        }
        Ok(())
    }

    /// Marks the lead as lost (the daemon stops acting on it).
    pub(super) fn lose(&self, why: &str) {
        let was_leading = self.inner.role.lock().is_ok_and(|mut r| {
            let leading = matches!(*r, Role::Leading(_));
            if leading {
                *r = Role::Deposed;
            }
            leading
        });
        if was_leading {
            self.inner.view.send_modify(|v| {
                v.leading = false;
                v.lost.get_or_insert_with(|| why.to_string());
            });
        }
    }

    fn live_key(&self, id: u64) -> String {
        self.key(&format!("live/{id:020}"))
    }

    /// Writes a batch: one transaction per [`OPS_PER_TXN`] operations, each fenced.
    pub fn commit(&self, batch: &Batch) -> Result<(), StoreError> {
        // etcd refuses a key twice in one transaction: a job's last record wins (the
        // embedded store's later insert overwrites the same way).
        let mut seen = std::collections::HashSet::with_capacity(batch.jobs.len());
        let mut last: Vec<_> = batch.jobs.iter().rev().filter(|p| seen.insert(p.id)).collect();
        last.reverse();
        let mut groups = Vec::with_capacity(last.len());
        for p in last {
            let ops = if p.live {
                vec![TxnOp::put(self.live_key(p.id), p.bytes.to_vec(), None)]
            } else {
                // Both in one transaction: an ended job is never in neither place.
                vec![
                    TxnOp::delete(self.live_key(p.id), None),
                    TxnOp::put(
                        self.key(&format!("finished/{:020}/{:020}", p.ended_at, p.id)),
                        p.bytes.to_vec(),
                        None,
                    ),
                ]
            };
            groups.push((ops, p.bytes.len()));
        }
        let next = batch
            .next_job_id
            .map(|n| TxnOp::put(self.key("meta/nextJobId"), n.to_string(), None));
        self.write("committing", groups, next)
    }

    /// Keys and values from `from` up to (not including) `to`.
    fn range(&self, doing: &str, from: String, to: String) -> Result<Vec<KeyValue>, StoreError> {
        let mut c = self.inner.client.clone();
        let got = self
            .call(async move { c.get(from, Some(GetOptions::new().with_range(to))).await })
            .map_err(self.io(doing))?;
        Ok(got
            .kvs()
            .iter()
            .map(|kv| (kv.key().to_vec(), kv.value().to_vec()))
            .collect())
    }

    /// The end of the range of keys starting with `prefix` (its last byte + 1).
    fn end_of(prefix: &str) -> String {
        let mut end = prefix.to_string();
        end.pop();
        end.push('0'); // '/' + 1
        end
    }

    /// Ended jobs that ended at or after `since` (Unix seconds), oldest first.
    pub fn finished(&self, since: u64) -> Result<Vec<JobRecord>, StoreError> {
        let from = self.key(&format!("finished/{since:020}/"));
        let to = Self::end_of(&self.key("finished/"));
        self.range("reading its ended jobs", from, to)?
            .iter()
            .map(|(k, v)| self.decode(&format!("ended job {}", String::from_utf8_lossy(k)), v))
            .collect()
    }

    /// How many keys there are from `from` up to (not including) `to`.
    fn count(&self, doing: &str, from: String, to: String) -> Result<u64, StoreError> {
        let mut c = self.inner.client.clone();
        let got = self
            .call(async move {
                c.get(from, Some(GetOptions::new().with_range(to).with_count_only()))
                    .await
            })
            .map_err(self.io(doing))?;
        Ok(u64::try_from(got.count()).unwrap_or(0))
    }

    /// Deletes the ended jobs that ended before `before`; how many.
    pub fn purge(&self, before: u64) -> Result<u64, StoreError> {
        let from = self.key("finished/");
        let to = self.key(&format!("finished/{before:020}/"));
        let count = self.count("counting old ended jobs", from.clone(), to.clone())?;
        if count > 0 {
            let op = TxnOp::delete(from, Some(DeleteOptions::new().with_range(to)));
            self.write("deleting old ended jobs", vec![(vec![op], 0)], None)?;
        }
        Ok(count)
    }

    fn live(&self) -> Result<Vec<JobRecord>, StoreError> {
        let from = self.key("live/");
        let to = Self::end_of(&from);
        self.range("reading its live jobs", from, to)?
            .iter()
            .map(|(k, v)| self.decode(&format!("live job {}", String::from_utf8_lossy(k)), v))
            .collect()
    }

    /// Numbers for `--check`; every record is read (and so checked) on the way.
    pub fn summary(&self) -> Result<Summary, StoreError> {
        let (live, finished) = self.all()?;
        Ok(Summary {
            format: u32::try_from(self.meta_value("format")?).unwrap_or(u32::MAX),
            epoch: self.meta_value("epoch")?,
            next_job_id: self.meta_value("nextJobId")?.max(1),
            live: live.len() as u64,
            finished: finished.len() as u64,
        })
    }

    /// Every record, live then ended (for `state export`).
    pub fn all(&self) -> Result<(Vec<JobRecord>, Vec<JobRecord>), StoreError> {
        Ok((self.live()?, self.finished(0)?))
    }

    /// Sets the numbers `state import` brings (only while no planner leads).
    pub fn set_meta(&self, epoch: u64, next_job_id: u64) -> Result<(), StoreError> {
        let ops = vec![
            TxnOp::put(self.key("meta/epoch"), epoch.to_string(), None),
            TxnOp::put(self.key("meta/nextJobId"), next_job_id.to_string(), None),
            TxnOp::put(self.key("meta/format"), STORE_FORMAT.to_string(), None),
        ];
        self.write("writing its meta keys", vec![(ops, 0)], None)
    }

    /// Whether the prefix holds any job.
    pub fn is_empty(&self) -> Result<bool, StoreError> {
        let kind = |k: &str| self.count("counting its jobs", self.key(k), Self::end_of(&self.key(k)));
        Ok(kind("live/")? == 0 && kind("finished/")? == 0)
    }

    /// The warm copy as a start's state: the live records decoded, the epoch raised
    /// (and written behind the fence), the format written when it is new.
    pub(super) fn take_over(&self) -> Result<Loaded, StoreError> {
        let (records, epoch, next_job_id) = {
            let warm = self
                .inner
                .warm
                .lock()
                .map_err(|_| StoreError::Import("the warm copy is poisoned".into()))?;
            if warm.format > u64::from(STORE_FORMAT) {
                return Err(StoreError::Newer {
                    path: self.inner.at.clone(),
                    found: u32::try_from(warm.format).unwrap_or(u32::MAX),
                    supported: STORE_FORMAT,
                });
            }
            let records: Vec<(u64, Vec<u8>)> = warm.live.iter().map(|(k, v)| (*k, v.clone())).collect();
            (records, warm.epoch.saturating_add(1), warm.next_job_id.max(1))
        };
        let live = records
            .iter()
            .map(|(id, bytes)| self.decode(&format!("live job {id}"), bytes))
            .collect::<Result<Vec<_>, _>>()?;
        let ops = vec![
            TxnOp::put(self.key("meta/epoch"), epoch.to_string(), None),
            TxnOp::put(self.key("meta/format"), STORE_FORMAT.to_string(), None),
        ];
        self.write("writing its epoch", vec![(ops, 0)], None)?;
        Ok(Loaded {
            epoch,
            next_job_id,
            live,
        })
    }
}

/// Runs `fut` on `handle` and blocks this thread until it is done. Safe from inside
/// another runtime's task: the waiting is a plain channel receive, the work runs on the
/// store's own thread.
fn wait<T: Send + 'static>(
    handle: &tokio::runtime::Handle,
    fut: impl Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
) -> Result<T, etcd_client::Error> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    handle.spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv().unwrap_or_else(|_| {
        Err(etcd_client::Error::IoError(std::io::Error::other(
            "the etcd client stopped",
        )))
    })
}
