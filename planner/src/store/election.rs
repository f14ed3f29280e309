//! Who leads the planners sharing an etcd prefix, and the standbys' warm copy.
//!
//! - **The watch** ([`Etcd::start_watch`]): every planner reads the live jobs and the meta
//!   keys once, then follows every change under the prefix. A standby so holds what the
//!   leader wrote, decoded at take-over only, and knows the leader's address and epoch.
//! - **The election** ([`Etcd::campaign`]): a planner grants itself a lease of
//!   `[ha] leaseTtl` and creates the `leader` key with it — a transaction that succeeds
//!   only when no such key exists. The one that succeeds leads; the others wait for the
//!   key to go (its lease expired, or the leader resigned at a clean stop) and try again.
//! - **Holding it**: the leader renews its lease every third of the TTL. When it cannot
//!   renew for two thirds of the TTL it gives the lead up itself — before the lease runs
//!   out in etcd and a standby can win — and every write is fenced by the key's create
//!   revision anyway (`super::etcd`).
//!
//! A new leader waits until its warm copy has seen its own `leader` key: every write of
//! the old leader came before that key could exist, so the copy is complete.
//!
//! Every call here goes to the member in use and, where it does not answer, to the others
//! (`Etcd::any`): one member down of three is a warning, not a lost lead. The live jobs
//! are read in pages (`Etcd::pages`), at the start and again after a failed or compacted
//! watch, and the watch asks etcd to split large answers (`fragment`).

use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, EventType, GetOptions, Txn, TxnOp, TxnOpResponse, WatchOptions};

use super::etcd::{Etcd, HaView, Role, Warm, try_another};
use super::{Loaded, StoreError, meta};

/// At most this much of a standby's report is read (node names, a line each).
const MAX_HEARD_BYTES: usize = 64 * 1024;

/// How long to wait before reading and watching again after the watch failed.
const RETRY: Duration = Duration::from_millis(500);

/// How soon a lease renewal that failed is tried again (on the next member).
const RENEW_AGAIN: Duration = Duration::from_millis(100);

/// How long the election's reads and writes try the members again before the campaign
/// starts over (it does, after a second).
const PATIENCE: Duration = Duration::from_secs(3);

/// Why the watch or a campaign stopped; both log it and start over.
#[derive(Debug, thiserror::Error)]
enum HaError {
    #[error("reading the live jobs: {0}")]
    LiveJobs(#[source] etcd_client::Error),
    #[error(transparent)]
    Etcd(#[from] etcd_client::Error),
    #[error("cancelled ({reason}; compacted at {compacted})")]
    Cancelled { reason: String, compacted: i64 },
    #[error("the watch ended")]
    WatchEnded,
    #[error("poisoned")]
    Poisoned,
}

impl Etcd {
    /// Starts following the prefix (the warm copy, the leader's address, the epoch).
    pub fn start_watch(&self) {
        let me = self.clone();
        self.inner().handle.spawn(async move {
            loop {
                if let Err(e) = me.follow().await {
                    tracing::warn!(at = %me.at().display(), "etcd watch: {e}; reading again");
                }
                tokio::time::sleep(RETRY).await;
            }
        });
    }

    /// One read of the live jobs and meta keys, then the watch from there, until it fails.
    async fn follow(&self) -> Result<(), HaError> {
        let inner = self.inner();
        let live_from = self.key("live/");
        let live_to = {
            let mut end = live_from.clone().into_bytes();
            if let Some(last) = end.last_mut() {
                *last += 1; // '/' + 1
            }
            end
        };
        let (live, rev) = self
            .pages(live_from.into_bytes(), live_to, false)
            .await
            .map_err(HaError::LiveJobs)?;
        let at = |key: String, prefix: bool| {
            let mut options = GetOptions::new().with_revision(rev);
            if prefix {
                options = options.with_prefix();
            }
            self.any(PATIENCE, move |mut c| {
                let (key, options) = (key.clone(), options.clone());
                async move { c.kv.get(key, Some(options)).await }
            })
        };
        let meta = at(self.key("meta/"), true).await?;
        let leader = at(self.key("leader"), false).await?;
        {
            let mut warm = Warm {
                revision: rev,
                ..Warm::default()
            };
            for (k, v) in &live {
                self.apply(&mut warm, k, Some(v));
            }
            for kv in meta.kvs() {
                self.apply(&mut warm, kv.key(), Some(kv.value()));
            }
            *inner.warm.lock().map_err(|_| HaError::Poisoned)? = warm;
        }
        self.publish(leader.kvs().first().map(|kv| kv.value()));
        inner.warm_rev.send_replace(rev);
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(rev + 1)
            .with_fragment();
        let mut stream = self
            .any(PATIENCE, |mut c| {
                let (key, options) = (self.key(""), options.clone());
                async move { c.watch.watch(key, Some(options)).await }
            })
            .await?;
        while let Some(resp) = stream.message().await? {
            if resp.canceled() {
                return Err(HaError::Cancelled {
                    reason: resp.cancel_reason().to_string(),
                    compacted: resp.compact_revision(),
                });
            }
            // The events' own revisions, not the answer's header: a watch that catches up
            // (or an answer split in fragments) has a header newer than what it brought.
            let mut newest = 0;
            {
                let mut warm = inner.warm.lock().map_err(|_| HaError::Poisoned)?;
                for ev in resp.events() {
                    let Some(kv) = ev.kv() else { continue };
                    newest = newest.max(kv.mod_revision());
                    let value = (ev.event_type() == EventType::Put).then(|| kv.value());
                    if kv.key() == self.key("leader").as_bytes() {
                        self.publish(value);
                    }
                    self.apply(&mut warm, kv.key(), value);
                }
                warm.revision = warm.revision.max(newest);
            }
            inner.warm_rev.send_if_modified(|r| {
                let grew = newest > *r;
                *r = (*r).max(newest);
                grew
            });
        }
        Err(HaError::WatchEnded)
    }

    /// One key's new value (`None`: deleted) into the warm copy.
    fn apply(&self, warm: &mut Warm, key: &[u8], value: Option<&[u8]>) {
        let Some(rest) = std::str::from_utf8(key)
            .ok()
            .and_then(|k| k.strip_prefix(&*self.inner().prefix))
        else {
            return;
        };
        if let Some(id) = rest.strip_prefix("live/").and_then(|i| i.parse::<u64>().ok()) {
            match value {
                Some(v) => warm.live.insert(id, v.to_vec()),
                None => warm.live.remove(&id),
            };
        } else if let Some(name) = rest.strip_prefix("meta/") {
            // As written: checked at the take-over, against the format then known.
            let bytes = value.map(<[u8]>::to_vec);
            match name {
                "format" => warm.format = value.and_then(|v| self.number(name, v).ok()).unwrap_or(0),
                "epoch" => {
                    let n = value.and_then(meta::number_part).unwrap_or(0);
                    warm.epoch = bytes;
                    self.inner()
                        .view
                        .send_if_modified(|v| std::mem::replace(&mut v.epoch, n) != n);
                }
                "nextJobId" => warm.next_job_id = bytes,
                meta::CLUSTER_KEY => warm.cluster = bytes,
                _ => {}
            }
        } else if let Some(standby) = rest.strip_prefix("standby/") {
            let heard = value.map(|v| {
                String::from_utf8_lossy(&v[..v.len().min(MAX_HEARD_BYTES)])
                    .lines()
                    .filter(|n| !n.is_empty())
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            });
            self.inner().view.send_modify(|v| match heard {
                Some(nodes) => {
                    v.standbys_hear.insert(standby.to_string(), (Instant::now(), nodes));
                }
                None => {
                    v.standbys_hear.remove(standby);
                }
            });
        }
    }

    /// A standby says which nodes' agents came to it in the last while, sent on to the
    /// leader (`standby/<advertise>`, one node name a line; empty: none). In the
    /// background, once: a report lost is followed by the next.
    pub fn report_heard(&self, advertise: &str, nodes: &[String]) {
        let key = self.key(&format!("standby/{advertise}"));
        let mut value = nodes.join("\n");
        value.truncate(MAX_HEARD_BYTES);
        let me = self.clone();
        self.inner().handle.spawn(async move {
            let put = me.any(PATIENCE, |mut c| {
                let (key, value) = (key.clone(), value.clone());
                async move { c.kv.put(key, value, None).await }
            });
            if let Err(e) = put.await {
                tracing::debug!("etcd: cannot say which agents came to this standby: {e}");
            }
        });
    }

    /// The leader's address as the `leader` key says (`None`: deleted).
    fn publish(&self, value: Option<&[u8]>) {
        let leader = value.map(|v| String::from_utf8_lossy(v).into_owned());
        self.inner().view.send_if_modified(|v| {
            let changed = v.leader != leader;
            v.leader.clone_from(&leader);
            changed
        });
    }

    /// Waits until this planner leads, then returns the state to serve with (the epoch
    /// raised). `advertise` is what the `leader` key holds: where standbys send agents
    /// and people. Call [`Etcd::start_watch`] first.
    pub async fn campaign(&self, advertise: String, ttl: Duration) -> Result<Loaded, StoreError> {
        if let Ok(mut r) = self.inner().role.lock() {
            *r = Role::Standby;
        }
        let me = self.clone();
        let at = self.at().to_path_buf();
        let io = move |doing: &str, e: String| StoreError::Io {
            path: at.clone(),
            doing: doing.into(),
            why: e,
        };
        // etcd away for a while is no reason for a standby to stop: it tries again.
        let won = self
            .inner()
            .handle
            .spawn(async move {
                loop {
                    match me.win(advertise.clone(), ttl).await {
                        Ok(rev) => return rev,
                        Err(e) => {
                            tracing::warn!(at = %me.at().display(), "campaigning for the lead: {e}; trying again in 1 s");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                }
            })
            .await
            .map_err(|e| io("campaigning", e.to_string()))?;
        // Complete once the copy has seen our own key: the old leader's writes are older.
        let mut rev = self.inner().warm_rev.subscribe();
        rev.wait_for(|r| *r >= won)
            .await
            .map_err(|e| StoreError::Import(format!("the etcd watch stopped: {e}")))?;
        let loaded = self.take_over();
        if loaded.is_err() {
            self.resign();
        }
        loaded
    }

    /// Lease, then the `leader` key, retried until it is ours; keeps the lease alive for
    /// as long as this process lives. Returns the key's create revision.
    async fn win(&self, advertise: String, ttl: Duration) -> Result<i64, HaError> {
        let inner = self.inner();
        let key = self.key("leader");
        let ttl_secs = i64::try_from(ttl.as_secs()).unwrap_or(10).max(2);
        loop {
            let lease = self
                .any(PATIENCE, |mut c| async move { c.lease.grant(ttl_secs, None).await })
                .await?
                .id();
            let alive = tokio::sync::watch::Sender::new(true);
            let keeper = self.clone();
            let mut alive_rx = alive.subscribe();
            inner
                .handle
                .spawn(async move { keeper.keep_alive(lease, ttl, alive).await });
            loop {
                if !*alive_rx.borrow() {
                    break; // the lease is gone: a new one
                }
                let txn = Txn::new()
                    .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(
                        key.clone(),
                        advertise.clone(),
                        Some(etcd_client::PutOptions::new().with_lease(lease)),
                    )])
                    .or_else([TxnOp::get(key.clone(), None)]);
                let resp = self
                    .any(PATIENCE, |mut c| {
                        let txn = txn.clone();
                        async move { c.kv.txn(txn).await }
                    })
                    .await?;
                let rev = resp.header().map_or(0, |h| h.revision());
                let found = resp.op_responses().into_iter().find_map(|r| match r {
                    TxnOpResponse::Get(g) => g.kvs().first().map(|kv| {
                        (
                            String::from_utf8_lossy(kv.value()).into_owned(),
                            kv.lease(),
                            kv.create_revision(),
                        )
                    }),
                    _ => None,
                });
                // A try that etcd applied but whose answer was lost, tried again on
                // another member: the key is there with our lease, and it is ours.
                let won = match &found {
                    _ if resp.succeeded() => Some(rev),
                    Some((_, l, created)) if *l == lease => Some(*created),
                    _ => None,
                };
                if let Some(rev) = won {
                    *inner.role.lock().map_err(|_| HaError::Poisoned)? = Role::Leading(rev);
                    inner.view.send_modify(|v| {
                        v.leading = true;
                        v.lost = None;
                        v.leader = Some(advertise.clone());
                    });
                    tracing::info!(at = %self.at().display(), lease, revision = rev, "leading");
                    return Ok(rev);
                }
                let current = found.map(|(leader, ..)| leader);
                tracing::info!(leader = current.as_deref().unwrap_or("?"), "standing by");
                // Wait for the key to go (or our lease to die), then try again.
                let options = WatchOptions::new().with_start_revision(rev + 1);
                let mut stream = self
                    .any(PATIENCE, |mut c| {
                        let (key, options) = (key.clone(), options.clone());
                        async move { c.watch.watch(key, Some(options)).await }
                    })
                    .await?;
                loop {
                    tokio::select! {
                        m = stream.message() => match m {
                            Ok(Some(r)) if r.events().iter().any(|e| e.event_type() == EventType::Delete) => break,
                            Ok(Some(r)) if r.canceled() => break,
                            Ok(Some(_)) => {}
                            Ok(None) | Err(_) => break,
                        },
                        _ = alive_rx.changed() => break,
                    }
                }
            }
        }
    }

    /// Renews `lease` every third of `ttl`, on the member in use and, where it does not
    /// answer, on the next one at once. Gives the lead up (and says so on `alive`) only
    /// when no renewal succeeded for two thirds of the TTL, or when etcd says it expired.
    async fn keep_alive(&self, lease: i64, ttl: Duration, alive: tokio::sync::watch::Sender<bool>) {
        let members = &self.inner().members;
        let period = ttl / 3;
        let give_up = ttl * 2 / 3;
        // When the last renewal etcd answered was *sent*: etcd renewed the lease no
        // earlier, so it runs at least a TTL from there. Every wait below ends by
        // `last_ok + give_up`, so the lead is given up on time even while a call hangs.
        let mut last_ok = Instant::now();
        let mut stream = None;
        let left = |last_ok: Instant| give_up.saturating_sub(last_ok.elapsed());
        let why = loop {
            // A campaign that failed dropped its end: this lease is nobody's now.
            if alive.is_closed() && !self.inner().role.lock().is_ok_and(|r| matches!(*r, Role::Leading(_))) {
                let revoke = self.any(Duration::ZERO, |mut c| async move { c.lease.revoke(lease).await });
                let _ = tokio::time::timeout(period, revoke).await;
                return;
            }
            if stream.is_none() && !left(last_ok).is_zero() {
                let open = self.any_at(Duration::ZERO, |mut c| async move { c.lease.keep_alive(lease).await });
                match tokio::time::timeout(period.min(left(last_ok)), open).await {
                    Ok(Ok((i, (keeper, answers)))) => stream = Some((i, keeper, answers)),
                    Ok(Err(e)) if try_another(&e) => {} // each member said why (`any_at`)
                    Ok(Err(e)) => tracing::warn!("etcd lease {lease}: {e}"),
                    Err(_) => members.trouble(members.current(), "no answer to a lease renewal"),
                }
            }
            let mut renewed = false;
            if let Some((i, keeper, answers)) = stream.as_mut()
                && !left(last_ok).is_zero()
            {
                let sent = Instant::now();
                let answer = tokio::time::timeout(period.min(left(last_ok)), async {
                    keeper.keep_alive().await?;
                    answers.message().await
                })
                .await;
                let trouble = match answer {
                    Ok(Ok(Some(r))) if r.ttl() > 0 => {
                        last_ok = sent;
                        renewed = true;
                        None
                    }
                    Ok(Ok(Some(_))) => break "its lease expired in etcd".to_string(),
                    Ok(Ok(None)) => Some("its lease renewals ended".to_string()),
                    Ok(Err(e)) => Some(e.to_string()),
                    Err(_) => Some("no answer to a lease renewal".to_string()),
                };
                if let Some(why) = trouble {
                    members.trouble(*i, &why);
                    stream = None;
                }
            }
            if left(last_ok).is_zero() {
                break format!(
                    "its lease could not be renewed for {:.1} s (etcd unreachable?)",
                    last_ok.elapsed().as_secs_f64()
                );
            }
            // Renewed: again in a third of the TTL; not: again at once, on the next member.
            let pause = if renewed { period } else { RENEW_AGAIN };
            tokio::time::sleep(pause.min(left(last_ok))).await;
        };
        tracing::error!(lease, "the lead is lost: {why}");
        self.lose(&format!("lost the lead: {why}"));
        // No longer leading: if etcd answers again (a change of its own leader, a member
        // back), the lease given up goes at once, and a standby need not wait it out.
        let revoke = self.any(Duration::ZERO, |mut c| async move { c.lease.revoke(lease).await });
        if let Ok(Ok(_)) = tokio::time::timeout(period, revoke).await {
            tracing::info!(lease, "revoked the lease given up: a standby may lead at once");
        }
        let _ = alive.send(false);
    }

    /// Gives the lead up now (a clean stop): the lease and the `leader` key go, and a
    /// standby takes over without waiting for the lease to run out.
    pub fn resign(&self) {
        let lease_of_key = {
            let me = self.clone();
            let key = self.key("leader");
            let ours = match self.inner().role.lock().map(|r| *r) {
                Ok(Role::Leading(rev)) => Some(rev),
                _ => None,
            };
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            self.inner().handle.spawn(async move {
                let mut out = None;
                let get = me.any(Duration::ZERO, |mut c| {
                    let key = key.clone();
                    async move { c.kv.get(key, None).await }
                });
                if let Some(rev) = ours
                    && let Ok(Ok(g)) = tokio::time::timeout(Duration::from_secs(2), get).await
                    && let Some(kv) = g.kvs().first()
                    && kv.create_revision() == rev
                {
                    let lease = kv.lease();
                    out = Some(lease);
                    let revoke = me.any(Duration::ZERO, |mut c| async move { c.lease.revoke(lease).await });
                    let _ = tokio::time::timeout(Duration::from_secs(2), revoke).await;
                }
                let _ = tx.send(out);
            });
            rx.recv_timeout(Duration::from_secs(5)).ok().flatten()
        };
        if let Some(lease) = lease_of_key {
            tracing::info!(lease, "resigned the lead");
        }
        if let Ok(mut r) = self.inner().role.lock() {
            *r = Role::Deposed;
        }
        self.inner().view.send_modify(|v: &mut HaView| v.leading = false);
    }
}
