//! Group commit: a thread of its own writes what the driver hands it. It takes everything
//! queued while the last commit was on disk and writes it as one transaction — one commit
//! for a burst of submits from many clients — and only then carries out what waited for
//! it: replies to the people who submitted or cancelled, acknowledgements of task starts
//! and ends, `Launch` and `Kill` frames to agents, in the order they were handed over.
//! The driver goes on with the next tick meanwhile; nothing it decided leaves the
//! process before it is on disk.
//!
//! A failed commit stops the planner (the reason goes to the log and to `failed`): what
//! is in memory is then ahead of the disk, and a restart from the disk is the only state
//! that was acknowledged.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use hyperplan_net::messages::{PlannerToAgent, ResponseError};
use serde_json::Value;
use tokio::sync::{mpsc as tmpsc, oneshot, watch};

use super::{Batch, Store};

/// Something that waits for a commit.
#[derive(Debug)]
pub enum After {
    Reply(
        oneshot::Sender<Result<Value, ResponseError>>,
        Result<Value, ResponseError>,
    ),
    Frame(tmpsc::UnboundedSender<PlannerToAgent>, PlannerToAgent),
}

#[derive(Debug, Default)]
pub struct Work {
    pub batch: Batch,
    pub after: Vec<After>,
    /// Delete ended jobs that ended before this (Unix seconds), before the commit. The
    /// driver decides it by its clock (the daemon's one clock): the writer has none.
    pub purge_before: Option<u64>,
}

impl Work {
    pub fn is_empty(&self) -> bool {
        self.batch.is_empty() && self.after.is_empty() && self.purge_before.is_none()
    }
}

/// The driver's end of the writer thread.
#[derive(Debug)]
pub struct Writer {
    tx: mpsc::Sender<Work>,
}

impl Writer {
    /// Starts the thread. A commit that fails sends its error on `failed`. The thread
    /// ends once every `Writer` is dropped and what was queued is written; join it so
    /// the store file is closed cleanly.
    /// `ended`: woken after each commit that ended jobs (accounting's exporter).
    pub fn spawn(
        store: Store,
        failed: watch::Sender<Option<String>>,
        metrics: crate::metrics::Metrics,
        ended: Option<mpsc::Sender<()>>,
    ) -> std::io::Result<(Self, std::thread::JoinHandle<()>)> {
        let (tx, rx) = mpsc::channel::<Work>();
        let thread = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || run(&store, &rx, &failed, &metrics, ended.as_ref()))?;
        Ok((Self { tx }, thread))
    }

    /// Hands `work` over (nothing when it is empty). After a failed commit the thread
    /// is gone and this drops the work: the planner is stopping.
    pub fn send(&self, work: Work) {
        if !work.is_empty() {
            let _ = self.tx.send(work);
        }
    }
}

/// How often the writer logs what it did (and, idle, checks that its store file is
/// still there).
const REPORT_EVERY: Duration = Duration::from_secs(10);

fn run(
    store: &Store,
    rx: &mpsc::Receiver<Work>,
    failed: &watch::Sender<Option<String>>,
    metrics: &crate::metrics::Metrics,
    ended: Option<&mpsc::Sender<()>>,
) {
    let (mut commits, mut records, mut since) = (0u64, 0u64, Instant::now());
    loop {
        let first = match rx.recv_timeout(REPORT_EVERY) {
            Ok(w) => w,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                report(&mut commits, &mut records, &mut since);
                // Idle: a store removed or replaced meanwhile stops the planner now, not
                // at the next submit.
                if let Err(e) = store.check_file() {
                    let why = e.to_string();
                    tracing::error!("store: {why}");
                    let _ = failed.send(Some(why));
                    return;
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let mut batch = first.batch;
        let mut after = first.after;
        let mut purge_before = first.purge_before;
        // Everything queued meanwhile goes into the same transaction.
        while let Ok(w) = rx.try_recv() {
            batch.append(w.batch);
            after.extend(w.after);
            purge_before = purge_before.max(w.purge_before);
        }
        if let Some(before) = purge_before {
            match store.purge(before) {
                Ok(0) => {}
                Ok(n) => tracing::info!(deleted = n, before, "store: deleted ended jobs older than keepFinished"),
                Err(e) => tracing::warn!("store: {e}"),
            }
        }
        if !batch.is_empty() {
            let _span = tracing::debug_span!("commit", jobs = batch.jobs.len()).entered();
            let began = Instant::now();
            let committed = store.commit(&batch);
            metrics.commit_duration.observe(began.elapsed().as_secs_f64());
            metrics.commit_batch.observe(batch.jobs.len() as f64);
            if let Err(e) = committed {
                let why = e.to_string();
                tracing::error!("store: {why}; stopping: nothing more is acknowledged");
                for a in after {
                    if let After::Reply(tx, _) = a {
                        let _ = tx.send(Err(ResponseError::new(format!(
                            "the planner could not save this and is stopping: {why}"
                        ))));
                    }
                }
                let _ = failed.send(Some(why));
                return;
            }
            commits += 1;
            records += batch.jobs.len() as u64;
            if let Some(wake) = ended
                && batch.jobs.iter().any(|p| !p.live)
            {
                let _ = wake.send(());
            }
        }
        for a in after {
            match a {
                After::Reply(tx, answer) => {
                    let _ = tx.send(answer);
                }
                After::Frame(tx, frame) => {
                    let _ = tx.send(frame);
                }
            }
        }
        if since.elapsed() >= REPORT_EVERY {
            report(&mut commits, &mut records, &mut since);
        }
    }
    report(&mut commits, &mut records, &mut since);
}

/// One log line per period with commits (each two `fdatasync` calls) and records written.
fn report(commits: &mut u64, records: &mut u64, since: &mut Instant) {
    if *commits > 0 {
        let secs = since.elapsed().as_secs_f64().max(1e-3);
        tracing::info!(
            commits = *commits,
            records = *records,
            commits_per_sec = format!("{:.1}", *commits as f64 / secs),
            "store: committed"
        );
    }
    *commits = 0;
    *records = 0;
    *since = Instant::now();
}
