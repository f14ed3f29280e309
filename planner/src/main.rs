//! `hyperplan-planner`: the planner daemon on the head node. Agents register and
//! heartbeat over QUIC with mutual TLS, people submit and ask through the same port, and
//! every tick runs the Schedule `hyperplan simulate` runs.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use hyperplan_planner::DaemonConfig;
use hyperplan_planner::config::http::listen_address;
use hyperplan_planner::config::server;
use hyperplan_planner::server::{ReloadHandle, Server, sd_notify};

/// mimalloc: every placed task allocates a little (its `Place` command, its pinning), and on
/// the daemon's long-lived heap glibc malloc costs a quarter of a tick (benches/README.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The hyperplan planner daemon.
///
/// Reads /etc/hyperplan/planner.toml (or --config); every key of its [server] section is
/// also a flag here, and flags win. Needs ca.pem, planner.pem and planner.key in the
/// certificate directory (`hyperplan certs init --dir DIR`); refuses the certificates its
/// revoked.txt names (`hyperplan certs revoke`). Prints
/// `hyperplan-planner listening on ADDR` on stdout once it serves, tells systemd READY=1
/// (Type=notify) and WATCHDOG=1 from its tick loop, and stops cleanly on SIGTERM/SIGINT.
/// SIGHUP reads every discovery source and revoked.txt again (a malformed revoked.txt
/// stops the start; on SIGHUP the previous list stays) and closes the connections of
/// certificates it now revokes; it also takes planner.toml's [[queue]], [fairshare],
/// [priority], [scheduler] and [[reservation]] again (a file that does not read, or that
/// drops a queue with live jobs, keeps the old ones and the log says why).
/// Logs go to stderr; set RUST_LOG (default `info`).
///
/// Jobs and their tasks' placements are kept in the store ([store] path, default
/// /var/lib/hyperplan/state.redb): a submit or cancel is answered only once it is on disk,
/// and a restarted planner has every job that had not ended, re-adopts the tasks its
/// agents still run and kills what they run that it does not know. `state export` and
/// `state import` copy the store to and from JSON lines.
///
/// Users: a CLI certificate's role `user` may cancel, and read the output of, its own
/// jobs, and may ask for a priority up to the default (0) but not above; role `admin` may
/// do so for every job, at any priority. With [server] privateData a user sees only their
/// own jobs.
///
/// High availability: with [store] backend = "etcd" (endpoints, prefix; https:// with
/// caFile, certFile and keyFile for TLS) several planners
/// share the state; one leads (an etcd lease of [ha] leaseTtl seconds, default 10), the
/// others stand by on their ports, answer "not the leader; the leader is …" and take
/// over when the leader dies. A leader that loses its lease stops (exit 1). Give agents
/// and the CLI every address: --planner head-1:7400,head-2:7400; `hyperplan planners`
/// shows who leads.
#[derive(Parser, Debug)]
#[command(
    version,
    after_help = "Examples:\n  hyperplan-planner --config /etc/hyperplan/planner.toml\n  \
                  hyperplan-planner --listen 127.0.0.1:7400 --cert-dir ./certs --heartbeat-interval 0.5\n  \
                  hyperplan-planner --config planner.toml --check\n  \
                  hyperplan-planner --store /var/lib/hyperplan/state.redb state export backup.jsonl"
)]
struct Args {
    /// Planner configuration (TOML; see systemd/planner.toml). Defaults apply when the
    /// default path does not exist.
    #[arg(long, value_name = "FILE", global = true)]
    config: Option<PathBuf>,
    /// UDP address to listen on [server.listen; default 0.0.0.0:7400].
    #[arg(long, value_name = "IP:PORT")]
    listen: Option<SocketAddr>,
    /// Directory with ca.pem, planner.pem, planner.key and, when certificates were
    /// revoked, revoked.txt [server.certDir; default /etc/hyperplan/certs]. ca.pem also
    /// says which cluster the store belongs to: a store (or etcd prefix) another
    /// cluster's planner wrote first is refused.
    #[arg(long, value_name = "DIR", global = true)]
    cert_dir: Option<PathBuf>,
    /// Seconds between ticks when nothing arrives, 0.01 to 60 [server.tickInterval;
    /// default 1].
    #[arg(long, value_name = "SECONDS")]
    tick_interval: Option<f64>,
    /// Seconds between agent heartbeats, 0.05 to 600 [server.heartbeatInterval; default 1].
    #[arg(long, value_name = "SECONDS")]
    heartbeat_interval: Option<f64>,
    /// Heartbeats a node may miss before it is NotReady [server.missedHeartbeats; default 3].
    #[arg(long, value_name = "N")]
    missed_heartbeats: Option<u32>,
    /// Seconds a node may be NotReady before its running tasks are lost: their resources
    /// are free again, their jobs fail (or are requeued with `requeue: true`), and if the
    /// node comes back the tasks are killed; 0.1 to 31536000 (a year)
    /// [server.nodeLostAfter; default 300].
    #[arg(long, value_name = "SECONDS")]
    node_lost_after: Option<f64>,
    /// Largest message accepted, in bytes [server.maxFrameBytes; default 16777216].
    #[arg(long, value_name = "BYTES")]
    max_frame_bytes: Option<usize>,
    /// Plain users see only their own jobs (status, explain, logs, cancel): another
    /// user's job answers as one that does not exist; admins see every job. Like
    /// Slurm's PrivateData [server.privateData; default false].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    private_data: Option<bool>,
    /// Where Prometheus scrapes /metrics over HTTP (IP:PORT; port 0 picks one, logged as
    /// "serving metrics on http://…/metrics"; "" turns it off) [metrics.listen; default
    /// 127.0.0.1:9400].
    #[arg(long, value_name = "IP:PORT")]
    metrics_listen: Option<String>,
    /// Where the read-only web view is served over HTTPS (IP:PORT; "" off) [web.listen;
    /// default off]. Holders of a user or admin certificate, or of [web] tokenFile's
    /// token, may read it.
    #[arg(long, value_name = "IP:PORT")]
    web_listen: Option<String>,
    /// The store file: jobs, placements, the epoch [store.path; default
    /// /var/lib/hyperplan/state.redb]. Created (with its directory) at the first start;
    /// beside it, FILE.created marks that a planner keeps its state there.
    #[arg(long, value_name = "FILE", global = true)]
    store: Option<PathBuf>,
    /// Begin an empty store where the store file is missing although FILE.created says
    /// one existed, is empty (0 bytes) or cannot be read (moved aside as
    /// FILE.damaged-TIME); without it such a start stops. The new store is empty: every
    /// job, its history and the job ids are forgotten (restore a backup with `state
    /// import` instead where there is one). Epochs go on above the lost store's. A good
    /// store is opened as it is.
    #[arg(long)]
    init: bool,
    /// Validate the configuration, print it resolved, read every discovery source once
    /// and say what it holds, read the store and say what it holds, then exit: 0 when all
    /// is well, 1 when a source or the store fails.
    #[arg(long)]
    check: bool,
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(clap::Subcommand, Debug)]
enum Cmd {
    /// The store as JSON lines: back it up, move it to another file, read it.
    #[command(subcommand)]
    State(StateCmd),
}

#[derive(clap::Subcommand, Debug)]
enum StateCmd {
    /// Write every job of the store to FILE (`-` for stdout): a header line, then one
    /// job per line. Works beside a running planner.
    Export {
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Read FILE (`-` for stdin), written by `state export`, into an empty store (move
    /// the old store file aside first). Nothing is written unless every line is good.
    /// An export of another cluster (its caSha256, the fingerprint of its CA, is not the
    /// one the store records, or else not ca.pem's in --cert-dir) is refused unless
    /// --force.
    Import {
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Import an export of another cluster all the same (its CA's fingerprint differs
        /// from this store's or this planner's): the jobs then belong to this cluster.
        #[arg(long)]
        force: bool,
    },
}

const DEFAULT_CONFIG: &str = "/etc/hyperplan/planner.toml";

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hyperplan-planner: {}", hyperplan_shared::error::chain_line(e.chain()));
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    // The log's filter is the log's alone: the tick's spans are timed for /metrics
    // whatever RUST_LOG says.
    let metrics = hyperplan_planner::metrics::Metrics::new();
    {
        use tracing_subscriber::Layer;
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        let log = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
            );
        let spans = hyperplan_planner::metrics::spans::SpanTimes(metrics.clone()).with_filter(
            tracing_subscriber::filter::filter_fn(hyperplan_planner::metrics::spans::timed),
        );
        tracing_subscriber::registry().with(log).with(spans).init();
    }
    let args = Args::parse();
    let mut config = match &args.config {
        Some(p) => DaemonConfig::load(p)?,
        None if std::path::Path::new(DEFAULT_CONFIG).exists() => {
            DaemonConfig::load(std::path::Path::new(DEFAULT_CONFIG))?
        }
        None => DaemonConfig::default(),
    };
    let s = &mut config.server;
    if let Some(v) = args.listen {
        s.listen = v;
    }
    if let Some(v) = args.cert_dir {
        s.cert_dir = v;
    }
    if let Some(v) = args.tick_interval {
        s.tick_interval = server::TICK_INTERVAL
            .check(v)
            .map_err(|e| anyhow::anyhow!("--tick-interval: {e}"))?;
    }
    if let Some(v) = args.heartbeat_interval {
        s.heartbeat_interval = server::HEARTBEAT_INTERVAL
            .check(v)
            .map_err(|e| anyhow::anyhow!("--heartbeat-interval: {e}"))?;
    }
    if let Some(v) = args.missed_heartbeats {
        anyhow::ensure!(v > 0, "--missed-heartbeats: expected at least 1");
        s.missed_heartbeats = v;
    }
    if let Some(v) = args.node_lost_after {
        s.node_lost_after = server::NODE_LOST_AFTER
            .check(v)
            .map_err(|e| anyhow::anyhow!("--node-lost-after: {e}"))?;
    }
    if let Some(v) = args.private_data {
        s.private_data = v;
    }
    if let Some(v) = args.store {
        config.store.path = v;
    }
    if let Some(v) = &args.metrics_listen {
        config.metrics.listen = listen_address(v).map_err(|e| anyhow::anyhow!("--metrics-listen: {e}"))?;
    }
    if let Some(v) = &args.web_listen {
        config.web.listen = listen_address(v).map_err(|e| anyhow::anyhow!("--web-listen: {e}"))?;
    }
    config.store.init = args.init;
    if let Some(Cmd::State(cmd)) = &args.command {
        return state(&config, cmd);
    }
    let s = &mut config.server;
    if let Some(v) = args.max_frame_bytes {
        anyhow::ensure!(
            (1024..=1 << 30).contains(&v),
            "--max-frame-bytes: expected 1024 to 1073741824"
        );
        s.max_frame_bytes = v;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    if args.check {
        println!("{config:#?}");
        let failed = runtime.block_on(check_sources(&config));
        runtime.shutdown_timeout(std::time::Duration::from_millis(500));
        let store = check_store(&config);
        anyhow::ensure!(
            failed == 0,
            "the configuration is valid, but {failed} discovery source(s) cannot be read (see above)"
        );
        return store;
    }
    let served = runtime.block_on(async move {
        let server = Server::bind(config)
            .context("starting the planner")?
            .with_metrics(metrics);
        let addr = server.local_addr()?;
        println!("hyperplan-planner listening on {addr}");
        sd_notify(&format!("READY=1\nSTATUS=listening on {addr}"));
        tracing::info!(%addr, "listening");
        tokio::spawn(reload_on_sighup(server.reload_handle()));
        server.run(shutdown_signal()).await?;
        anyhow::Ok(())
    });
    // A discovery poll may be blocked in a slow UFM or a long ibnetdiscover: do not wait
    // for it (its command is killed with its handle).
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    served
}

/// `--check`: what the store holds (every record is read, its checksum checked, and
/// every live job checked as a start would load it) and whose cluster it is, or why it
/// cannot be read. A store file that never existed is fine: the planner creates it; one
/// whose marker says it existed is not.
fn check_store(config: &DaemonConfig) -> anyhow::Result<()> {
    use hyperplan_planner::store::{Store, config::Backend, embedded::marker_path};
    let store = &config.store;
    let at = store.describe();
    if store.backend == Backend::Embedded && !store.path.exists() && !marker_path(&store.path).exists() {
        println!("store {at}: none yet (created at start)");
        return Ok(());
    }
    let read = Store::open_read_only(store).and_then(|s| Ok((s.summary()?, s.all()?.0, s.cluster())));
    match read {
        Ok((s, live, cluster)) => {
            let ours = our_cluster(config);
            let bad = hyperplan_planner::store::unloadable(&config.planner, live, s.next_id());
            let mut failing = bad.len() + s.damaged.len();
            for d in &s.damaged {
                println!("store {at}: FAILING: {d}");
            }
            match (cluster, &ours) {
                (Ok(Some(fp)), Ok(c)) if fp == c.fingerprint => {
                    println!("store {at}: cluster: CA SHA-256 {fp} (this planner's ca.pem: the same)");
                }
                (Ok(Some(fp)), Ok(c)) => {
                    failing += 1;
                    println!(
                        "store {at}: FAILING: the store belongs to another cluster: its CA SHA-256 {fp}, this planner's ca.pem ({}) {}; a start refuses it",
                        c.ca_file.display(),
                        c.fingerprint
                    );
                }
                (Ok(Some(fp)), Err(why)) => {
                    println!("store {at}: cluster: CA SHA-256 {fp} (this planner's ca.pem cannot be read: {why})");
                }
                (Ok(None), Ok(c)) => println!(
                    "store {at}: cluster: none recorded yet (the next start records this planner's CA, SHA-256 {})",
                    c.fingerprint
                ),
                (Ok(None), Err(why)) => {
                    println!("store {at}: cluster: none recorded yet (this planner's ca.pem cannot be read: {why})");
                }
                // Said with the damaged meta values.
                (Err(hyperplan_planner::store::StoreError::MetaDamaged { .. }), _) => {}
                (Err(e), _) => {
                    failing += 1;
                    println!("store {at}: FAILING: {e}");
                }
            }
            // (Where `nextJobId` is damaged, its line above says so.)
            if s.next_job_id < s.floor && s.damaged.is_empty() {
                println!(
                    "store {at}: next job id {} is not above the highest job id in the store ({}): a start goes on from {}",
                    s.next_job_id,
                    s.floor - 1,
                    s.floor
                );
            }
            if failing == 0 {
                println!(
                    "store {at}: ok: format {}, epoch {}, {} live job(s), {} ended job(s), next job id {}",
                    s.format,
                    s.epoch,
                    s.live,
                    s.finished,
                    s.next_id()
                );
                return Ok(());
            }
            if bad.is_empty() {
                return Err(anyhow::anyhow!("a planner would not start on this store (see above)"));
            }
            println!("store {at}: FAILING: {} live job(s) a start would not load:", bad.len());
            for b in &bad {
                println!("  {b}");
            }
            Err(anyhow::anyhow!(
                "the store holds jobs a planner would not load (see above)"
            ))
        }
        Err(e) => {
            println!("store {at}: FAILING: {e}");
            Err(anyhow::anyhow!("the store cannot be read (see above)"))
        }
    }
}

/// The cluster of this planner's ca.pem ([server] certDir, --cert-dir), or why not.
fn our_cluster(
    config: &DaemonConfig,
) -> Result<hyperplan_planner::store::Cluster, hyperplan_planner::store::StoreError> {
    let ca = hyperplan_net::certs::CertPaths::planner(&config.server.cert_dir).ca;
    hyperplan_planner::store::Cluster::from_ca_file(&ca)
}

/// `state export` / `state import`.
fn state(config: &DaemonConfig, cmd: &StateCmd) -> anyhow::Result<()> {
    use hyperplan_planner::store::{Store, export};
    let at = config.store.describe();
    match cmd {
        StateCmd::Export { file } => {
            let store = Store::open_read_only(&config.store)?;
            let ours = our_cluster(config).ok();
            let (live, ended) = if file.as_os_str() == "-" {
                export::export(&store, &mut std::io::stdout().lock(), ours.as_ref())?
            } else {
                let mut out = std::io::BufWriter::new(
                    std::fs::File::create(file).with_context(|| format!("creating {}", file.display()))?,
                );
                export::export(&store, &mut out, ours.as_ref())?
            };
            eprintln!(
                "exported {live} live and {ended} ended job(s) from {at} to {}",
                file.display()
            );
        }
        StateCmd::Import { file, force } => {
            let store = Store::open_for_import(&config.store)?;
            let name = file.display().to_string();
            let importing = export::Importing {
                ours: our_cluster(config),
                force: *force,
            };
            let jobs = if file.as_os_str() == "-" {
                export::import(&store, &mut std::io::stdin().lock(), &name, &config.planner, &importing)?
            } else {
                let f = std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?;
                export::import(
                    &store,
                    &mut std::io::BufReader::new(f),
                    &name,
                    &config.planner,
                    &importing,
                )?
            };
            eprintln!("imported {jobs} job(s) from {name} into {at}");
        }
    }
    Ok(())
}

/// `--check`: one line per discovery source; returns how many failed.
async fn check_sources(config: &DaemonConfig) -> usize {
    if config.discovery.nvlink_off {
        println!("discovery nvlink: off");
    } else {
        println!("discovery nvlink: HyperNodes from the NVLink domains agents report");
    }
    if !config.discovery.label.is_empty() {
        let types: Vec<&String> = config.discovery.label.keys().collect();
        println!("discovery label: from node labels, types {types:?}");
    }
    let mut failed = 0;
    for s in &config.discovery.sources {
        let head = format!(
            "discovery {} ({} {}, every {})",
            s.name,
            s.spec.kind().as_str(),
            s.spec.target(),
            hyperplan_fabric::ufm::config::HumanDuration(s.interval)
        );
        match hyperplan_planner::discovery::check(s.clone()).await {
            Ok(summary) => println!("{head}: ok: {summary}"),
            Err(e) => {
                failed += 1;
                println!("{head}: FAILING: {e}");
            }
        }
    }
    failed
}

/// SIGHUP (`systemctl reload hyperplan-planner`): read every discovery source, the
/// revocation list and planner.toml's policy sections again now.
async fn reload_on_sighup(handle: ReloadHandle) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::error!(
            "cannot install the SIGHUP handler; discovery sources are read on their interval only, \
             the revocation list only at start"
        );
        return;
    };
    while hup.recv().await.is_some() {
        tracing::info!("SIGHUP: reading every discovery source, the revocation list and the policy again");
        handle.reload();
    }
}

/// SIGTERM (systemd stop) or SIGINT (Ctrl-C).
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::error!("cannot install signal handlers; stop with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM"),
        _ = int.recv() => tracing::info!("SIGINT"),
    }
}
