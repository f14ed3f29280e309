//! The planner daemon: a QUIC (mutual TLS) server in front of the very Schedule the
//! simulator runs. Connections authenticate ([`handshake`]), agents register and
//! heartbeat ([`agent`]), people ask ([`client`]); everything they say becomes a message
//! to the one task that owns the `Planner` ([`driver`]), which ticks on a timer and as
//! soon as something arrives, hands the core the links' comings and goings and their
//! heartbeats (the core marks silent nodes NotReady), and sends `Launch` to agents.
//!
//! A refusal ([`link::refuse`]: certificate, name, version, a malformed, oversized or
//! out-of-order frame) is a log line with the peer address and closes that connection only.
//! A revoked certificate ([`revoked`]) is refused at the handshake, and a connection
//! whose certificate a reloaded list revokes is closed.

mod agent;
mod client;
mod credential;
mod driver;
mod exec;
mod fence;
mod groups;
mod handshake;
pub(crate) mod inbox;
mod isolation;
mod launch;
mod link;
mod logs;
mod policy;
pub(crate) mod quiet;
mod revoked;
mod standby;
mod submission;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyperplan_net::certs::CertPaths;
use hyperplan_net::revocation::{RevocationError, RevocationList};
use hyperplan_net::tls::{TlsMaterial, server_endpoint};
use tokio::sync::{mpsc, watch};

use crate::config::DaemonConfig;
use crate::store::{Loaded, Store};
pub use inbox::ToCore;

/// Application close codes (hyperplan-net's, shared by every daemon).
pub use hyperplan_net::hello::close;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Tls(#[from] hyperplan_net::TlsError),
    #[error("cannot read the local address of the QUIC endpoint: {0}")]
    LocalAddr(std::io::Error),
    #[error(transparent)]
    Revocation(#[from] RevocationError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("cannot start the store's writer thread: {0}")]
    Writer(std::io::Error),
    /// A commit failed: the planner stops (what it acknowledged is on disk).
    #[error("the store failed: {0}")]
    StoreFailed(String),
    /// The leader lost its lease (etcd): it stops acting; started again, it stands by.
    #[error("{0}; stopping (started again, this planner stands by)")]
    LostLead(String),
    /// No agent reaches this leader while a standby hears them: it resigned its lease
    /// (see `isolation`); started again, it stands by.
    #[error("{0}; resigned, stopping (started again, this planner stands by)")]
    HandedOver(String),
}

/// A bound planner: the endpoint is listening, nothing is served yet.
pub struct Server {
    endpoint: quinn::Endpoint,
    config: DaemonConfig,
    reload: watch::Sender<u64>,
    /// `revoked.txt` in the certificate directory, and the list read from it.
    revoked_path: PathBuf,
    revoked: watch::Sender<Arc<RevocationList>>,
    /// The open store and what it held (`None` with etcd: loaded when this one leads).
    store: Store,
    loaded: Option<Loaded>,
    /// Where agents and people reach this planner: what standbys name as the leader.
    advertise: String,
    /// Prometheus's metrics (`[metrics]`), shared with the log's span timing.
    metrics: crate::metrics::Metrics,
    /// The driver's channel while this planner leads: what a scrape asks.
    leading: watch::Sender<Option<mpsc::UnboundedSender<ToCore>>>,
    /// The planner's certificate and key, for the web view's TLS.
    material: TlsMaterial,
}

/// Makes every discovery source and the revocation list read their input again now
/// (what SIGHUP does).
#[derive(Clone, Debug)]
pub struct ReloadHandle(watch::Sender<u64>);

impl ReloadHandle {
    pub fn reload(&self) {
        self.0.send_modify(|n| *n += 1);
    }
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("listen", &self.config.server.listen)
            .finish()
    }
}

impl Server {
    /// Loads the planner's certificates from `server.cert_dir` and binds `server.listen`
    /// (port 0 picks one; see [`Server::local_addr`]). Call inside a tokio runtime.
    pub fn bind(config: DaemonConfig) -> Result<Self, ServerError> {
        // ssh-like: a readable key, a writable directory or another party's certificate
        // (an agent's as planner.pem) stops the start with the file named.
        let material = TlsMaterial::load_for(
            &CertPaths::planner(&config.server.cert_dir),
            &[hyperplan_net::CertRole::Planner],
        )?;
        let revoked_path = RevocationList::path(&config.server.cert_dir);
        let revoked = watch::Sender::new(Arc::new(revoked::load(&revoked_path)?));
        // The state before the port: a store that cannot be read, or that belongs to
        // another cluster (another CA), stops the start before anything in it changes.
        let ca_file = CertPaths::planner(&config.server.cert_dir).ca;
        let cluster = match material.ca.first() {
            Some(ca) => Some(crate::store::Cluster::of_ca(ca.as_ref(), &ca_file)?),
            None => None,
        };
        let store = Store::open_as(&config.store, cluster.as_ref())?;
        let loaded = match &store {
            Store::Embedded(s) => Some(s.load()?),
            Store::Etcd(e) => {
                e.start_watch();
                None
            }
        };
        let endpoint = server_endpoint(config.server.listen, &material)?;
        let local = endpoint.local_addr().map_err(ServerError::LocalAddr)?;
        let advertise = config.store.ha.advertise.clone().unwrap_or_else(|| advertised(local));
        Ok(Self {
            endpoint,
            config,
            reload: watch::Sender::new(0),
            revoked_path,
            revoked,
            store,
            loaded,
            advertise,
            metrics: crate::metrics::Metrics::new(),
            leading: watch::Sender::new(None),
            material,
        })
    }

    /// The metrics this planner counts into (the ones `main` times the tick's spans
    /// with), instead of its own.
    pub fn with_metrics(mut self, metrics: crate::metrics::Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// For a signal handler: re-read every discovery source and the revocation list now.
    pub fn reload_handle(&self) -> ReloadHandle {
        ReloadHandle(self.reload.clone())
    }

    pub fn local_addr(&self) -> Result<SocketAddr, ServerError> {
        self.endpoint.local_addr().map_err(ServerError::LocalAddr)
    }

    /// This run's epoch (raised from the store's at bind); `None` for a planner that
    /// has not led yet (etcd).
    pub fn epoch(&self) -> Option<u64> {
        self.loaded.as_ref().map(|l| l.epoch)
    }

    /// Where agents and people reach this planner (`[ha] advertise`, or the listen address).
    pub fn advertise(&self) -> &str {
        &self.advertise
    }

    /// Serves the port as a standby until this planner leads (its state loaded and the
    /// epoch raised), `shutdown` completes (`None`), or etcd fails.
    async fn stand_by(
        &self,
        etcd: &crate::store::Etcd,
        shutdown: &mut (impl std::future::Future<Output = ()> + Unpin),
    ) -> Option<Result<Loaded, ServerError>> {
        let (to_core, from_conns) = mpsc::unbounded_channel();
        let responder = tokio::spawn(standby::respond(
            from_conns,
            etcd.view(),
            self.config.store.describe(),
            self.advertise.clone(),
            etcd.clone(),
        ));
        tracing::info!(advertise = %self.advertise, at = %etcd.at().display(), "standing by");
        sd_notify("STATUS=standing by");
        let accept = accept_loop(
            self.endpoint.clone(),
            to_core,
            self.revoked.subscribe(),
            self.config.server.max_frame_bytes,
        );
        // The unit's watchdog wants pings from a standby too (the tick loop is not running).
        let watchdog = async {
            match hyperplan_net::notify::watchdog_interval() {
                Some(every) => loop {
                    tokio::time::sleep(every).await;
                    sd_notify("WATCHDOG=1");
                },
                None => std::future::pending().await,
            }
        };
        let outcome = tokio::select! {
            () = accept => None,
            () = watchdog => None,
            () = shutdown => None,
            won = etcd.campaign(self.advertise.clone(), self.config.store.ha.lease_ttl) => Some(won.map_err(ServerError::from)),
        };
        responder.abort();
        outcome
    }

    /// Serves until `shutdown` completes, then closes every connection ("planner
    /// stopping") and waits briefly for the peers to hear it. A failed commit stops it
    /// with [`ServerError::StoreFailed`].
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) -> Result<(), ServerError> {
        let mut shutdown = std::pin::pin!(shutdown);
        // The HTTP endpoints serve a standby too (metrics say it stands by).
        let (stop_http, http_stopping) = watch::channel(false);
        let _stop_http = StopOnDrop(stop_http);
        if let Some(listen) = self.config.metrics.listen {
            crate::metrics::serve::spawn(
                listen,
                self.metrics.clone(),
                self.leading.subscribe(),
                http_stopping.clone(),
            )
            .await;
        }
        if let Some(listen) = self.config.web.listen {
            crate::web::spawn(
                listen,
                &self.material,
                self.config.web.token_file.as_deref(),
                self.leading.subscribe(),
                http_stopping.clone(),
            )
            .await;
        }
        let loaded = match self.loaded.take() {
            Some(l) => l,
            None => {
                let Store::Etcd(etcd) = self.store.clone() else {
                    unreachable!("only etcd starts without its state")
                };
                match self.stand_by(&etcd, &mut shutdown).await {
                    Some(Ok(l)) => {
                        sd_notify(&format!("STATUS=leading (epoch {})", l.epoch));
                        l
                    }
                    Some(Err(e)) => return Err(e),
                    None => {
                        self.endpoint
                            .close(quinn::VarInt::from_u32(close::SHUTDOWN), b"planner stopping");
                        return Ok(());
                    }
                }
            }
        };
        let (to_core, from_conns) = mpsc::unbounded_channel();
        let (failed_tx, mut failed) = watch::channel(None::<String>);
        let (accounting, exporter) = self.start_accounting().map_err(ServerError::Writer)?.unzip();
        let (writer, writer_thread) = crate::store::writer::Writer::spawn(
            self.store.clone(),
            failed_tx,
            self.metrics.clone(),
            exporter.as_ref().map(crate::accounting::Exporter::waker),
        )
        .map_err(ServerError::Writer)?;
        let start = driver::Start {
            store: self.store.clone(),
            loaded,
            writer,
            advertise: self.advertise.clone(),
            describe: self.config.store.describe(),
            metrics: self.metrics.clone(),
            accounting,
        };
        self.leading.send_replace(Some(to_core.clone()));
        let (stopping, stop_driver) = watch::channel(false);
        let driver = tokio::spawn(driver::run(self.config.clone(), from_conns, start, stop_driver));
        let sink = {
            let to_core = to_core.clone();
            move |p| to_core.send(ToCore::Discovered(p)).is_ok()
        };
        crate::discovery::spawn(&self.config.discovery.sources, &sink, &self.reload.subscribe());
        if let Some(path) = &self.config.path {
            policy::spawn_reloader(self.reload.subscribe(), path.clone(), to_core.clone());
        }
        let revoked = self.revoked.subscribe();
        revoked::spawn_reloader(self.reload.subscribe(), self.revoked_path.clone(), self.revoked);
        let max_frame = self.config.server.max_frame_bytes;
        let endpoint = self.endpoint.clone();
        let accept = accept_loop(endpoint, to_core.clone(), revoked, max_frame);
        let lost_lead = async {
            match &self.store {
                Store::Etcd(e) => {
                    let mut view = e.view();
                    match view.wait_for(|v| v.lost.is_some()).await {
                        Ok(v) => v.lost.clone().unwrap_or_default(),
                        Err(_) => std::future::pending().await,
                    }
                }
                Store::Embedded(_) => std::future::pending().await,
            }
        };
        let isolated = async {
            match &self.store {
                Store::Etcd(e) => {
                    let after = isolation::after(self.config.server.health().silent_after());
                    isolation::watch(to_core.clone(), e.view(), self.advertise.clone(), after).await
                }
                Store::Embedded(_) => std::future::pending().await,
            }
        };
        let store_failed = async {
            loop {
                if let Some(why) = failed.borrow_and_update().clone() {
                    return why;
                }
                if failed.changed().await.is_err() {
                    // The writer ended without a failure (it stops with the driver).
                    std::future::pending::<()>().await;
                }
            }
        };
        let mut outcome = Ok(());
        tokio::select! {
            () = accept => {}
            () = &mut shutdown => {}
            why = store_failed => outcome = Err(ServerError::StoreFailed(why)),
            why = lost_lead => outcome = Err(ServerError::LostLead(why)),
            why = isolated => {
                tracing::error!("{why}");
                outcome = Err(ServerError::HandedOver(why));
            }
        }
        tracing::info!("planner stopping");
        sd_notify("STOPPING=1");
        // First the driver: nothing the closing links cause is decided any more.
        stopping.send_replace(true);
        self.leading.send_replace(None);
        self.endpoint
            .close(quinn::VarInt::from_u32(close::SHUTDOWN), b"planner stopping");
        drop(to_core);
        let _ = tokio::time::timeout(Duration::from_secs(2), self.endpoint.wait_idle()).await;
        driver.abort();
        // The driver's end drops the last `Writer`: the thread writes what is queued and
        // closes the file (a clean close spares the next start a recovery).
        let _ = driver.await;
        let _ = tokio::task::spawn_blocking(move || writer_thread.join()).await;
        // Then accounting: what the last commit ended is written, unless its database is down.
        if let Some(e) = exporter {
            let _ = tokio::task::spawn_blocking(move || e.stop()).await;
        }
        // A clean stop, or a leader no agent reaches, hands the lead over at once instead
        // of after the lease.
        if let (Store::Etcd(e), Ok(()) | Err(ServerError::HandedOver(_))) = (&self.store, &outcome) {
            let e = e.clone();
            let _ = tokio::task::spawn_blocking(move || e.resign()).await;
        }
        outcome
    }
}

impl Server {
    /// Accounting's exporter and reader, for a planner that leads (`None` with
    /// `[accounting] enabled = false`).
    fn start_accounting(&self) -> std::io::Result<Option<(driver::Accounting, crate::accounting::Exporter)>> {
        let config = &self.config.accounting;
        if !config.enabled {
            return Ok(None);
        }
        let target = config.target_beside(&self.config.store.path);
        let status = std::sync::Arc::new(crate::accounting::Status::new(target.describe()));
        let (topology, topology_rx) = watch::channel(None);
        let exporter = crate::accounting::Exporter::spawn(crate::accounting::exporter::Setup {
            target: target.clone(),
            cluster: config.cluster.clone(),
            keep: config.keep,
            store: self.store.clone(),
            status: status.clone(),
            topology: topology_rx,
        })?;
        let reader = crate::accounting::Reader::spawn(target, config.cluster.clone(), status.clone())?;
        tracing::info!(
            database = status.database(),
            cluster = config.cluster,
            "accounting: ended jobs are copied there"
        );
        Ok(Some((
            driver::Accounting {
                status,
                topology,
                reader,
            },
            exporter,
        )))
    }
}

/// Sends `true` when dropped: the HTTP endpoints stop with `run`, however it returns.
struct StopOnDrop(watch::Sender<bool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}

/// Accepts connections and hands each to the handshake, until the endpoint closes.
async fn accept_loop(
    endpoint: quinn::Endpoint,
    to_core: mpsc::UnboundedSender<ToCore>,
    revoked: revoked::Shared,
    max_frame: usize,
) {
    let mut next_id = 0u64;
    while let Some(incoming) = endpoint.accept().await {
        next_id += 1;
        tokio::spawn(handshake::serve(
            incoming,
            next_id,
            to_core.clone(),
            revoked.clone(),
            max_frame,
        ));
    }
}

/// The address to advertise when `[ha] advertise` is not set: the listen address, or
/// this host's name with the port when it listens on every address.
fn advertised(local: SocketAddr) -> String {
    if local.ip().is_unspecified() {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| hyperplan_shared::names::is_host_or_ip(h))
            .unwrap_or_else(|| "localhost".into());
        format!("{host}:{}", local.port())
    } else {
        local.to_string()
    }
}

/// Tells systemd (when it started us with `Type=notify`); a failure is only logged.
pub fn sd_notify(state: &str) {
    if let Err(e) = hyperplan_net::notify::notify(state) {
        tracing::debug!("sd_notify {state}: {e}");
    }
}
