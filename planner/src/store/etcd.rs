//! The etcd store, for planners that share their state: the same records as the
//! embedded store, as keys under `[store] prefix` (default `/hyperplan/`):
//!
//! - `meta/format`: a decimal number (bare, for every build to read);
//! - `meta/epoch`, `meta/nextJobId`: decimal numbers with their checksum, `41
//!   crc32c:1a2b3c4d` (store format 3, see [`super::meta`]; bare before it);
//! - `meta/caSha256`: the fingerprint of the CA of the cluster the prefix belongs to,
//!   with its checksum; created by the first planner that connects (a create-only
//!   transaction: it never replaces a value, so it needs no leader's fence), checked by
//!   every planner before it campaigns and again at its take-over;
//! - `live/<id, 20 digits>`: the record (MessagePack) of a job that has not ended;
//! - `finished/<end, 20 digits>/<id, 20 digits>`: an ended job's record;
//! - `usage`: fair share's usage (a `UsageRecord`, framed and checksummed like a job
//!   record), rewritten whole by the commit that carries it; read by a new leader at its
//!   takeover (a prefix written before fair share has none);
//! - `drains`: the admins' drains of nodes (a `DrainsRecord`), the same way;
//! - `leader`: the leader's advertised address, held by its lease ([`super::election`]).
//!
//! A start never gives an old job's id again: the next job id is the stored one, or one
//! more than the highest id of any record (live, and the keys of the ended ones) where
//! that is larger.
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
//!
//! **Every endpoint, one at a time** ([`Members`]): each endpoint gets a client of its
//! own, and a call goes to the member in use; where that member does not answer (down,
//! cut off, no quorum behind it) the call goes to the next one, and so on, so the planner
//! goes on while a quorum answers. A member that does not answer is a warning (at most
//! one per member every [`WARN_EVERY`]), not an error. (etcd-client's own client over
//! several endpoints balances calls over a tonic channel whose lazy connections report a
//! dead member's connect error to the call that picked it: every other call failed.)
//!
//! **Large states** are read in pages ([`PAGE_KEYS`] keys, fewer where records are large)
//! and one answer may be up to [`MAX_MESSAGE_BYTES`] (etcd-client's default, 4 MiB, was
//! smaller than a few thousand live jobs).

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, Identity, KvClient,
    LeaseClient, TlsOptions, Txn, TxnOp, WatchClient,
};
use hyperplan_core::model::record::JobRecord;
use tokio::sync::watch;

use super::config::{EtcdConfig, EtcdTls};
use super::meta::{self, CLUSTER_KEY, Cluster, MetaValue};
use super::{Batch, Loaded, STORE_FORMAT, StoreError, Summary};

/// A key and its value.
type KeyValue = (Vec<u8>, Vec<u8>);

/// etcd refuses transactions of more than 128 operations by default (`--max-txn-ops`).
const OPS_PER_TXN: usize = 120;

/// … and requests over 1.5 MiB (`--max-request-bytes`): a transaction carries at most
/// this many bytes of records (one larger record goes alone).
const BYTES_PER_TXN: usize = 1024 * 1024;

/// What a cluster should give itself instead of another's prefix.
const PREFIX_OWN: &str = "a [store] prefix";

/// The key (under the prefix) of fair share's usage.
const USAGE_KEY: &str = "usage";
/// The key (under the prefix) of the nodes' drains.
const DRAINS_KEY: &str = "drains";

const NO_LONGER: &str = "this planner is no longer the leader (its lease expired; another planner may lead)";

/// How long one call to etcd may take before it is an error.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest message this planner takes from etcd (gRPC's max decoding message size):
/// 64 MiB. It bounds one page of records ([`PAGE_KEYS`], [`PAGE_BYTES`]) and covers the
/// largest single record etcd stores (its `--max-request-bytes`: 1.5 MiB by default, at
/// most 10 MiB as etcd advises).
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// Reads of many keys go in pages of at most this many keys …
const PAGE_KEYS: usize = 500;

/// … and of about this many bytes: the next page's key limit follows the sizes of the
/// records read so far (and halves where an answer was larger than
/// [`MAX_MESSAGE_BYTES`]).
const PAGE_BYTES: usize = 4 << 20;

/// How long a leader's write tries the members again (one round after another) before
/// it is an error; it stops sooner when the lead is lost (its lease could not be renewed
/// for two thirds of the TTL, `super::election`).
const WRITE_PATIENCE: Duration = Duration::from_secs(15);

/// At most one warning per member this often about it not answering.
const WARN_EVERY: Duration = Duration::from_secs(30);

/// gRPC status codes (tonic's `Code`) of a call that a member did not answer, or that
/// another member may answer: cancelled (our timeout), unknown (the connection broke),
/// deadline exceeded, resource exhausted ("too many requests"), aborted, unavailable
/// (connect error, no leader, leader changed, request timed out).
const TRY_ANOTHER: [i32; 6] = [1, 2, 4, 8, 10, 14];

/// Whether another member (or the same one a little later) may answer this call.
pub(super) fn try_another(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => TRY_ANOTHER.contains(&(s.code() as i32)),
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        _ => false,
    }
}

/// An answer larger than [`MAX_MESSAGE_BYTES`] (tonic: "decoded message length too large").
fn too_large(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s) if s.message().contains("message length too large"))
}

/// A read at a revision etcd compacted away meanwhile.
pub(super) fn compacted(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s) if s.message().contains("compacted"))
}

/// One member's clients (each over its own connection).
#[derive(Clone)]
pub(super) struct Conn {
    pub(super) kv: KvClient,
    pub(super) watch: WatchClient,
    pub(super) lease: LeaseClient,
}

/// The members this planner was given, and the one calls go to first.
pub(super) struct Members {
    endpoints: Vec<String>,
    conns: Vec<Conn>,
    current: AtomicUsize,
    /// When each member's trouble was last logged.
    warned: Mutex<Vec<Option<Instant>>>,
}

impl Members {
    /// Clients for every endpoint; none connects yet (a member that is down now does not
    /// stop a start).
    async fn connect(endpoints: &[String], options: &ConnectOptions) -> Result<Self, etcd_client::Error> {
        let mut conns = Vec::with_capacity(endpoints.len());
        for e in endpoints {
            let c = Client::connect([e.as_str()], Some(options.clone())).await?;
            conns.push(Conn {
                kv: c.kv_client().max_decoding_message_size(MAX_MESSAGE_BYTES),
                watch: c.watch_client().max_decoding_message_size(MAX_MESSAGE_BYTES),
                lease: c.lease_client(),
            });
        }
        if conns.is_empty() {
            return Err(etcd_client::Error::InvalidArgs("no endpoints".into()));
        }
        Ok(Self {
            endpoints: endpoints.to_vec(),
            warned: Mutex::new(vec![None; conns.len()]),
            conns,
            current: AtomicUsize::new(0),
        })
    }

    /// The member calls go to first.
    pub(super) fn current(&self) -> usize {
        self.current.load(Ordering::Relaxed)
    }

    /// Member `i` did not answer: the next one is in use from now on (unless another
    /// call moved on already), with a warning at most every [`WARN_EVERY`].
    pub(super) fn trouble(&self, i: usize, why: &str) {
        let n = self.conns.len();
        let _ = self
            .current
            .compare_exchange(i, (i + 1) % n, Ordering::Relaxed, Ordering::Relaxed);
        let due = self.warned.lock().is_ok_and(|mut w| {
            let due = w[i].is_none_or(|t| t.elapsed() >= WARN_EVERY);
            if due {
                w[i] = Some(Instant::now());
            }
            due
        });
        if due && n > 1 {
            tracing::warn!(
                member = %self.endpoints[i],
                "etcd member does not answer ({why}); going on with the other {} (no other warning about it for {} s)",
                n - 1,
                WARN_EVERY.as_secs()
            );
        } else if due {
            tracing::warn!(member = %self.endpoints[i], "etcd does not answer ({why})");
        }
    }
}

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
    /// What each standby (by the address it advertises) last said of the agents it
    /// sends to the leader (`standby/<address>`), and when this planner read it: agents
    /// that cannot reach the leader come to the standbys (see `server::isolation`).
    pub standbys_hear: BTreeMap<String, (std::time::Instant, Vec<String>)>,
}

/// The state under the prefix as the watch last saw it: what a standby takes over with.
/// The meta values are kept as written, checked at the take-over (with the format).
#[derive(Debug, Default)]
pub(super) struct Warm {
    pub live: BTreeMap<u64, Vec<u8>>,
    pub format: u64,
    pub epoch: Option<Vec<u8>>,
    pub next_job_id: Option<Vec<u8>>,
    /// `meta/caSha256`.
    pub cluster: Option<Vec<u8>>,
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
    pub(super) members: Members,
    pub(super) prefix: String,
    /// `etcd ENDPOINTS PREFIX`, where errors say the state is.
    at: PathBuf,
    /// The cluster of the planner that connected (`None`: a tool, or a test): the prefix
    /// must belong to it, at the start and at the take-over.
    cluster: Option<Cluster>,
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
        Self::connect_as(config, None)
    }

    /// [`Etcd::connect`] for a planner of `cluster`: a prefix another cluster's planner
    /// wrote first is refused (nothing there changes); one without a cluster gets this
    /// one, recorded before this returns.
    pub fn connect_as(config: &EtcdConfig, cluster: Option<&Cluster>) -> Result<Self, StoreError> {
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
        let endpoints = config.endpoints.clone();
        let members = wait(&handle, async move { Members::connect(&endpoints, &options).await })
            .map_err(|e| io(doing, error_chain(&e)))?;
        let etcd = Self {
            inner: Arc::new(Inner {
                runtime: Mutex::new(Some(runtime)),
                handle,
                members,
                prefix: config.prefix.clone(),
                at,
                cluster: cluster.cloned(),
                role: Mutex::new(Role::Tool),
                view: watch::Sender::new(HaView::default()),
                warm: Mutex::new(Warm::default()),
                warm_rev: watch::Sender::new(0),
            }),
        };
        // The clients connect lazily: the first call is where a refused handshake shows
        // (and where a member that is down is passed over for the next one).
        let format = etcd.format().map_err(|e| match e {
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
        if let Some(ours) = cluster {
            etcd.claim(ours, format == 0)?;
        }
        Ok(etcd)
    }

    /// The prefix for `ours`: its cluster record created where there is none (one
    /// transaction, create-only), or checked against ours.
    fn claim(&self, ours: &Cluster, new_prefix: bool) -> Result<(), StoreError> {
        let key = self.key(&format!("meta/{CLUSTER_KEY}"));
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                meta::seal(CLUSTER_KEY, &ours.fingerprint),
                None,
            )])
            .or_else([TxnOp::get(key, None)]);
        let me = self.clone();
        let done = self
            .call(async move {
                me.any(Duration::ZERO, |mut c| {
                    let txn = txn.clone();
                    async move { c.kv.txn(txn).await }
                })
                .await
            })
            .map_err(self.io("reading its cluster"))?;
        if done.succeeded() {
            if new_prefix {
                tracing::info!(at = %self.inner.at.display(), ca = %ours.fingerprint, "a new prefix: it belongs to the cluster of this CA");
            } else {
                tracing::info!(
                    at = %self.inner.at.display(),
                    ca = %ours.fingerprint,
                    "the prefix had no cluster recorded (written before cluster records): recorded this planner's CA; from now on a planner of another CA refuses it"
                );
            }
            return Ok(());
        }
        let found = done.op_responses().into_iter().find_map(|r| match r {
            etcd_client::TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value().to_vec()),
            _ => None,
        });
        let stored = found.map_or(MetaValue::Absent, |v| meta::check_text(CLUSTER_KEY, &v, true));
        meta::check_cluster(&self.inner.at, stored, ours, PREFIX_OWN, &self.recover()).map(drop)
    }

    /// How to get a prefix with a damaged meta value back, keeping every job.
    fn recover(&self) -> String {
        format!(
            "its jobs are intact: stop every planner of this prefix, `hyperplan-planner --config planner.toml state export FILE` writes them out (the next job id taken from their ids where it is damaged), delete the prefix's keys (`etcdctl del --prefix {}`), then `hyperplan-planner --config planner.toml state import FILE`; or restore a backup with `state import`",
            self.inner.prefix
        )
    }

    /// The cluster record's value, checked (`Absent`: none yet).
    fn cluster_value(&self) -> Result<MetaValue<String>, StoreError> {
        let got = self.blob_within(&format!("meta/{CLUSTER_KEY}"), "reading its cluster", Duration::ZERO)?;
        Ok(got.map_or(MetaValue::Absent, |v| meta::check_text(CLUSTER_KEY, &v, true)))
    }

    /// The fingerprint of the CA of the cluster the prefix belongs to (`None`: none yet).
    pub fn cluster(&self) -> Result<Option<String>, StoreError> {
        self.cluster_value()?
            .strict(CLUSTER_KEY, &self.inner.at, &self.recover())
    }

    /// Records the prefix's cluster, replacing what was there (`state import`: only
    /// while no planner leads).
    pub fn set_cluster(&self, fingerprint: &str) -> Result<(), StoreError> {
        let op = TxnOp::put(
            self.key(&format!("meta/{CLUSTER_KEY}")),
            meta::seal(CLUSTER_KEY, fingerprint),
            None,
        );
        self.write("recording its cluster", vec![(vec![op], 0)], None)
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

    /// Runs `op` on the member in use and, where it does not answer ([`try_another`]),
    /// on the others in turn; round after round (with a pause growing to 1 s) until
    /// `patience` is over. The member that answered is the one in use from then on.
    /// Returns which member answered; the last error when none did.
    pub(super) async fn any_at<T, Fut>(
        &self,
        patience: Duration,
        op: impl Fn(Conn) -> Fut,
    ) -> Result<(usize, T), etcd_client::Error>
    where
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let m = &self.inner.members;
        let n = m.conns.len();
        let deadline = Instant::now() + patience;
        let mut pause = Duration::from_millis(50);
        loop {
            let first = m.current.load(Ordering::Relaxed);
            let mut last = None;
            for k in 0..n {
                let i = (first + k) % n;
                match op(m.conns[i].clone()).await {
                    Ok(v) => {
                        m.current.store(i, Ordering::Relaxed);
                        return Ok((i, v));
                    }
                    Err(e) if try_another(&e) => {
                        m.trouble(i, &error_chain(&e));
                        last = Some(e);
                    }
                    Err(e) => return Err(e),
                }
            }
            let e = last.unwrap_or_else(|| etcd_client::Error::InvalidArgs("no endpoints".into()));
            if Instant::now() + pause > deadline || !self.patient() {
                return Err(e);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// As [`Etcd::any_at`], without saying which member answered.
    pub(super) async fn any<T, Fut>(
        &self,
        patience: Duration,
        op: impl Fn(Conn) -> Fut,
    ) -> Result<T, etcd_client::Error>
    where
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.any_at(patience, op).await.map(|(_, v)| v)
    }

    /// Whether trying again is worth it: not once the lead is lost.
    fn patient(&self) -> bool {
        !matches!(self.role(), Role::Deposed)
    }

    /// `meta/format` (0: none yet).
    fn format(&self) -> Result<u64, StoreError> {
        self.meta_bare("format")
    }

    /// A meta value and its checksum, checked (required from format 3 on).
    fn meta_read(&self, name: &str, format: u64) -> Result<MetaValue<u64>, StoreError> {
        let got = self.blob_within(&format!("meta/{name}"), "reading meta", Duration::ZERO)?;
        Ok(got.map_or(MetaValue::Absent, |v| meta::check_number_text(name, &v, format >= 3)))
    }

    /// A bare number under `meta/` (0: none).
    fn meta_bare(&self, name: &str) -> Result<u64, StoreError> {
        let key = self.key(&format!("meta/{name}"));
        let me = self.clone();
        let got = self
            .call(async move {
                me.any(Duration::ZERO, |mut c| {
                    let key = key.clone();
                    async move { c.kv.get(key, None).await }
                })
                .await
            })
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

    /// A record under a prefix of `format`: from format 2 on, every record carries its
    /// checksum, and one without it is damage, not an old record.
    fn decode(&self, what: &str, bytes: &[u8], format: u64) -> Result<JobRecord, StoreError> {
        let decoded = if format >= 2 {
            JobRecord::decode_checked(bytes)
        } else {
            JobRecord::decode(bytes)
        };
        decoded.map_err(|x| StoreError::Corrupt {
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
            // A leader tries the other members, and again, while it leads: a transaction
            // that may have been applied already applies the same puts and deletes again,
            // behind the same fence.
            let patience = if matches!(self.role(), Role::Leading(_)) {
                WRITE_PATIENCE
            } else {
                Duration::ZERO
            };
            let me = self.clone();
            let done = self
                .call(async move {
                    me.any(patience, |mut c| {
                        let txn = txn.clone();
                        async move { c.kv.txn(txn).await }
                    })
                    .await
                })
                .map_err(self.io(doing))?;
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
        // Behind the same fence as the records (a deposed leader cannot write it), in the
        // batch's last transaction.
        if let Some(usage) = &batch.usage {
            groups.push((vec![TxnOp::put(self.key(USAGE_KEY), usage.to_vec(), None)], usage.len()));
        }
        if let Some(drains) = &batch.drains {
            groups.push((
                vec![TxnOp::put(self.key(DRAINS_KEY), drains.to_vec(), None)],
                drains.len(),
            ));
        }
        let next = batch.next_job_id.map(|n| {
            TxnOp::put(
                self.key("meta/nextJobId"),
                meta::seal("nextJobId", &n.to_string()),
                None,
            )
        });
        self.write("committing", groups, next)
    }

    /// Fair share's usage as last committed, the bytes as written (`None`: none yet, or a
    /// prefix written before fair share).
    pub fn usage(&self) -> Result<Option<Vec<u8>>, StoreError> {
        self.blob_within(USAGE_KEY, "reading its fair-share usage", Duration::ZERO)
    }

    /// The nodes' drains as last committed (`None`: none yet).
    pub fn drains(&self) -> Result<Option<Vec<u8>>, StoreError> {
        self.blob_within(DRAINS_KEY, "reading its nodes' drains", Duration::ZERO)
    }

    /// One key's value, trying the members again for `patience`.
    fn blob_within(&self, key: &str, doing: &str, patience: Duration) -> Result<Option<Vec<u8>>, StoreError> {
        let key = self.key(key);
        let me = self.clone();
        let got = self
            .call(async move {
                me.any(patience, |mut c| {
                    let key = key.clone();
                    async move { c.kv.get(key, None).await }
                })
                .await
            })
            .map_err(self.io(doing))?;
        Ok(got.kvs().first().map(|kv| kv.value().to_vec()))
    }

    /// Keys and values from `from` up to (not including) `to`, all at one revision (read
    /// in pages: [`Etcd::pages`]).
    fn range(&self, doing: &str, from: String, to: String) -> Result<Vec<KeyValue>, StoreError> {
        let me = self.clone();
        let (kvs, _) = self
            .call(async move { me.pages(from.into_bytes(), to.into_bytes(), false).await })
            .map_err(self.io(doing))?;
        Ok(kvs)
    }

    /// Every key and value from `from` up to (not including) `to`, and the revision they
    /// are all of: pages of at most [`PAGE_KEYS`] keys and about [`PAGE_BYTES`] bytes,
    /// each read at the first page's revision (started again at a newer one where etcd
    /// compacted that away meanwhile). `keys_only`: the values are left out.
    pub(super) async fn pages(
        &self,
        from: Vec<u8>,
        to: Vec<u8>,
        keys_only: bool,
    ) -> Result<(Vec<KeyValue>, i64), etcd_client::Error> {
        let mut restarts = 0;
        'again: loop {
            let mut out: Vec<KeyValue> = Vec::new();
            let (mut start, mut rev, mut limit, mut bytes) = (from.clone(), 0, PAGE_KEYS, 0usize);
            loop {
                let mut options = GetOptions::new().with_range(to.clone()).with_limit(limit as i64);
                if keys_only {
                    options = options.with_keys_only();
                }
                if rev > 0 {
                    options = options.with_revision(rev);
                }
                let got = self
                    .any(Duration::ZERO, |mut c| {
                        let (start, options) = (start.clone(), options.clone());
                        async move { c.kv.get(start, Some(options)).await }
                    })
                    .await;
                let page = match got {
                    Ok(page) => page,
                    Err(e) if too_large(&e) && limit > 1 => {
                        limit /= 2;
                        continue;
                    }
                    Err(e) if compacted(&e) && rev > 0 && restarts < 3 => {
                        restarts += 1;
                        continue 'again;
                    }
                    Err(e) => return Err(e),
                };
                if rev == 0 {
                    rev = page.header().map_or(0, |h| h.revision());
                }
                for kv in page.kvs() {
                    bytes += kv.key().len() + kv.value().len();
                    out.push((kv.key().to_vec(), kv.value().to_vec()));
                }
                let Some((last, _)) = out.last().filter(|_| page.more() && !page.kvs().is_empty()) else {
                    return Ok((out, rev));
                };
                start = last.clone();
                start.push(0);
                limit = (PAGE_BYTES / (bytes / out.len()).max(1)).clamp(1, PAGE_KEYS);
            }
        }
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
        let format = self.format()?;
        let from = self.key(&format!("finished/{since:020}/"));
        let to = Self::end_of(&self.key("finished/"));
        self.range("reading its ended jobs", from, to)?
            .iter()
            .map(|(k, v)| self.decode(&format!("ended job {}", String::from_utf8_lossy(k)), v, format))
            .collect()
    }

    /// At most `limit` ended jobs from `from` (end time, id) on, in key order: a page of
    /// what accounting has not written yet.
    pub fn finished_after_from(&self, from: (u64, u64), limit: usize) -> Result<Vec<JobRecord>, StoreError> {
        let format = self.format()?;
        let from = self.key(&format!("finished/{:020}/{:020}", from.0, from.1));
        let to = Self::end_of(&self.key("finished/"));
        let me = self.clone();
        let got = self
            .call(async move {
                me.any(Duration::ZERO, |mut c| {
                    let options = GetOptions::new().with_range(to.clone()).with_limit(limit as i64);
                    let from = from.clone();
                    async move { c.kv.get(from, Some(options)).await }
                })
                .await
            })
            .map_err(self.io("reading its ended jobs"))?;
        got.kvs()
            .iter()
            .map(|kv| {
                self.decode(
                    &format!("ended job {}", String::from_utf8_lossy(kv.key())),
                    kv.value(),
                    format,
                )
            })
            .collect()
    }

    /// How many keys there are from `from` up to (not including) `to`.
    fn count(&self, doing: &str, from: String, to: String) -> Result<u64, StoreError> {
        let me = self.clone();
        let got = self
            .call(async move {
                me.any(Duration::ZERO, |mut c| {
                    let options = GetOptions::new().with_range(to.clone()).with_count_only();
                    let from = from.clone();
                    async move { c.kv.get(from, Some(options)).await }
                })
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
        let format = self.format()?;
        let from = self.key("live/");
        let to = Self::end_of(&from);
        self.range("reading its live jobs", from, to)?
            .iter()
            .map(|(k, v)| self.decode(&format!("live job {}", String::from_utf8_lossy(k)), v, format))
            .collect()
    }

    /// Numbers for `--check` and `state export`; every record is read (and so checked)
    /// on the way. A damaged meta value is said in [`Summary::damaged`], not an error.
    pub fn summary(&self) -> Result<Summary, StoreError> {
        let (live, finished) = self.all()?;
        let format = self.format()?;
        let floor = live
            .iter()
            .chain(&finished)
            .map(|r| r.id.saturating_add(1))
            .fold(1, u64::max);
        let mut damaged = Vec::new();
        let mut say = |key: &str, why: &str| {
            damaged.push(meta::damaged(&self.inner.at, key, why, &self.recover()).to_string());
        };
        let epoch = match self.meta_read("epoch", format)? {
            MetaValue::Absent => 0,
            MetaValue::Good(v) => v,
            MetaValue::Damaged { why, raw } => {
                say("epoch", &why);
                raw.unwrap_or(0)
            }
        };
        let next_job_id = match self.meta_read("nextJobId", format)? {
            MetaValue::Absent => 1,
            MetaValue::Good(v) => v.max(1),
            MetaValue::Damaged { why, .. } => {
                say("nextJobId", &why);
                1
            }
        };
        if let MetaValue::Damaged { why, .. } = self.cluster_value()? {
            say(CLUSTER_KEY, &why);
        }
        Ok(Summary {
            format: u32::try_from(format).unwrap_or(u32::MAX),
            epoch,
            next_job_id,
            live: live.len() as u64,
            finished: finished.len() as u64,
            floor,
            damaged,
        })
    }

    /// One more than the highest id of the ended jobs (1: none), and when the newest of
    /// them ended (`finished/<end secs>/<id>`), from their keys alone.
    fn finished_floor(&self) -> Result<(u64, Option<u64>), StoreError> {
        let from = self.key("finished/");
        let to = Self::end_of(&from);
        let me = self.clone();
        let (keys, _) = self
            .call(async move { me.pages(from.into_bytes(), to.into_bytes(), true).await })
            .map_err(self.io("reading its ended jobs' keys"))?;
        let (mut floor, mut newest) = (1, None);
        for (k, _) in &keys {
            let Some(key) = std::str::from_utf8(k).ok() else {
                continue;
            };
            let mut parts = key.rsplit('/');
            if let Some(id) = parts.next().and_then(|id| id.parse::<u64>().ok()) {
                floor = floor.max(id.saturating_add(1));
            }
            newest = newest.max(parts.next().and_then(|end| end.parse::<u64>().ok()));
        }
        Ok((floor, newest))
    }

    /// Every record, live then ended (for `state export`).
    pub fn all(&self) -> Result<(Vec<JobRecord>, Vec<JobRecord>), StoreError> {
        Ok((self.live()?, self.finished(0)?))
    }

    /// Sets the numbers `state import` brings (only while no planner leads).
    pub fn set_meta(&self, epoch: u64, next_job_id: u64) -> Result<(), StoreError> {
        let ops = vec![
            TxnOp::put(self.key("meta/epoch"), meta::seal("epoch", &epoch.to_string()), None),
            TxnOp::put(
                self.key("meta/nextJobId"),
                meta::seal("nextJobId", &next_job_id.to_string()),
                None,
            ),
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
    /// (and written behind the fence with the next job id, never below the records' ids,
    /// and the format: an older prefix's meta values get their checksums here), the
    /// cluster checked (and recorded where none is). A damaged meta value, or another
    /// cluster's record, is an error (the campaign resigns).
    pub(super) fn take_over(&self) -> Result<Loaded, StoreError> {
        let (records, epoch, next_raw, cluster_raw, format) = {
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
            (
                records,
                warm.epoch.clone(),
                warm.next_job_id.clone(),
                warm.cluster.clone(),
                warm.format,
            )
        };
        let (at, recover) = (&self.inner.at, self.recover());
        let number = |key: &str, raw: Option<Vec<u8>>| {
            raw.map_or(MetaValue::Absent, |v| meta::check_number_text(key, &v, format >= 3))
                .strict(key, at, &recover)
        };
        let epoch = number("epoch", epoch)?.unwrap_or(0).saturating_add(1);
        let stored_next = number("nextJobId", next_raw)?.unwrap_or(1).max(1);
        let unrecorded = match &self.inner.cluster {
            Some(ours) => {
                let stored = cluster_raw.map_or(MetaValue::Absent, |v| meta::check_text(CLUSTER_KEY, &v, true));
                meta::check_cluster(at, stored, ours, PREFIX_OWN, &recover)?.is_none()
            }
            None => false,
        };
        let live = records
            .iter()
            .map(|(id, bytes)| self.decode(&format!("live job {id}"), bytes, format))
            .collect::<Result<Vec<_>, _>>()?;
        if format == 1 {
            self.migrate(&live)?;
        }
        let (ended_floor, newest_end_secs) = self.finished_floor()?;
        let floor = live.iter().map(|r| r.id.saturating_add(1)).fold(ended_floor, u64::max);
        let next_job_id = stored_next.max(floor);
        if next_job_id > stored_next {
            tracing::warn!(
                at = %at.display(),
                "nextJobId {stored_next} is not above the highest job id under the prefix ({}): new jobs get ids from {next_job_id} on, never an old job's",
                floor - 1
            );
        }
        let mut ops = vec![
            TxnOp::put(self.key("meta/epoch"), meta::seal("epoch", &epoch.to_string()), None),
            TxnOp::put(
                self.key("meta/nextJobId"),
                meta::seal("nextJobId", &next_job_id.to_string()),
                None,
            ),
            TxnOp::put(self.key("meta/format"), STORE_FORMAT.to_string(), None),
        ];
        if let Some(ours) = self.inner.cluster.as_ref().filter(|_| unrecorded) {
            ops.push(TxnOp::put(
                self.key(&format!("meta/{CLUSTER_KEY}")),
                meta::seal(CLUSTER_KEY, &ours.fingerprint),
                None,
            ));
        }
        self.write("writing its epoch", vec![(ops, 0)], None)?;
        // Read from etcd, not from the warm copy (which keeps jobs and numbers only): our
        // fence is up, so the old leader's last usage is the one there.
        let usage = self.blob_within(USAGE_KEY, "reading its fair-share usage", WRITE_PATIENCE)?;
        let drains = self.blob_within(DRAINS_KEY, "reading its nodes' drains", WRITE_PATIENCE)?;
        Ok(Loaded {
            epoch,
            next_job_id,
            live,
            usage,
            drains,
            newest_end_secs,
        })
    }
}

impl Etcd {
    /// Format 1 to 2 at a leader's takeover: every record (`live`, already read, and the
    /// ended ones) written again with its checksum, behind the leader's fence, before the
    /// format says 2. A takeover cut short leaves format 1 and records of both kinds,
    /// which format 1 reads; the next takeover finishes the work.
    fn migrate(&self, live: &[JobRecord]) -> Result<(), StoreError> {
        let from = self.key("finished/");
        let ended = self.range("reading its ended jobs", from.clone(), Self::end_of(&from))?;
        let encode = |r: &JobRecord| {
            r.encode().map_err(|e| StoreError::Corrupt {
                path: self.inner.at.clone(),
                what: format!("job {} cannot be written again", r.id),
                why: e.to_string(),
            })
        };
        let mut groups = Vec::with_capacity(live.len() + ended.len());
        for r in live {
            let bytes = encode(r)?;
            let size = bytes.len();
            groups.push((vec![TxnOp::put(self.live_key(r.id), bytes, None)], size));
        }
        for (key, old) in &ended {
            let r = self.decode(&format!("ended job {}", String::from_utf8_lossy(key)), old, 1)?;
            let bytes = encode(&r)?;
            let size = bytes.len();
            groups.push((vec![TxnOp::put(key.clone(), bytes, None)], size));
        }
        tracing::info!(
            live = live.len(),
            ended = ended.len(),
            "store format 1: writing every record again with its checksum (format 2)"
        );
        self.write("writing its records with checksums (format 2)", groups, None)
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
