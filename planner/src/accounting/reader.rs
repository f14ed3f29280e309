//! The reader: a thread with its own connection to the accounting database that answers
//! `history` and `report`, so that a long report neither stalls the driver nor the
//! exporter (SQLite's write-ahead log lets it read while the exporter writes).

use std::sync::Arc;
use std::sync::mpsc;

use hyperplan_accounting::{Db, Target};
use hyperplan_net::messages::ResponseError;
use hyperplan_shared::history::{HistoryQuery, ReportQuery};
use serde_json::Value;
use tokio::sync::oneshot;

use super::status::Status;

/// Questions waiting at most; more are refused "for now" (a flood of `history` must not
/// grow memory without bound).
const QUEUE: usize = 64;

/// One question and where its answer goes.
#[derive(Debug)]
pub enum Ask {
    History(HistoryQuery, oneshot::Sender<Result<Value, ResponseError>>),
    Report(ReportQuery, oneshot::Sender<Result<Value, ResponseError>>),
}

/// The driver's end of the reader.
#[derive(Debug, Clone)]
pub struct Reader {
    tx: mpsc::SyncSender<Ask>,
}

impl Reader {
    pub fn spawn(target: Target, cluster: String, status: Arc<Status>) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        std::thread::Builder::new()
            .name("accounting-reader".into())
            .spawn(move || run(&target, &cluster, &status, &rx))?;
        Ok(Self { tx })
    }

    /// Hands `ask` over; when too many wait, answers it at once, "for now".
    pub fn ask(&self, ask: Ask) {
        if let Err(mpsc::TrySendError::Full(a) | mpsc::TrySendError::Disconnected(a)) = self.tx.try_send(ask) {
            let reply = match a {
                Ask::History(_, r) | Ask::Report(_, r) => r,
            };
            let _ = reply.send(Err(ResponseError::for_now(
                "the accounting database is busy with other questions",
            )));
        }
    }
}

fn run(target: &Target, cluster: &str, status: &Status, rx: &mpsc::Receiver<Ask>) {
    let mut db: Option<Db> = None;
    while let Ok(ask) = rx.recv() {
        if db.is_none() {
            match Db::open(target) {
                Ok(d) => db = Some(d),
                Err(e) => {
                    let reply = match ask {
                        Ask::History(_, r) | Ask::Report(_, r) => r,
                    };
                    let _ = reply.send(Err(ResponseError::for_now(e)));
                    continue;
                }
            }
        }
        let Some(d) = db.as_mut() else { continue };
        let (answer, reply) = match ask {
            Ask::History(q, reply) => (
                d.history(cluster, &q).map(|mut h| {
                    h.behind_secs = Some(status.info().behind_secs).filter(|&b| b > 0);
                    serde_json::to_value(&h)
                }),
                reply,
            ),
            Ask::Report(q, reply) => (d.report(cluster, &q).map(|r| serde_json::to_value(&r)), reply),
        };
        let answer = match answer {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(ResponseError::new(format!("the answer cannot be encoded: {e}"))),
            Err(e) => {
                db = None; // connect again for the next question
                Err(ResponseError::for_now(e))
            }
        };
        let _ = reply.send(answer);
    }
}
