//! The etcd store and election against a real etcd (Debian's `etcd-server`, started on
//! 127.0.0.1 by the test; skipped, saying why, when it is not installed): a leader's
//! batches larger than one etcd transaction, a standby that takes over with every record
//! and a raised epoch, a deposed leader whose writes are refused, tools refused while a
//! planner leads, a newer store format refused, and TLS with client certificates.
//! With three members: a leader that goes on committing while the member it uses is
//! killed and started again; a store given a dead endpoint beside a good one. Large
//! states (more than etcd-client's default 4 MiB message): read in pages. Fair share's
//! usage: committed behind the leader's fence, loaded by the next leader. Issue 37: a
//! prefix belongs to one cluster (its CA's fingerprint recorded there), and a planner of
//! another CA refuses it before it campaigns; a damaged meta value stops a take-over,
//! naming it; a take-over never gives an old job's id again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/common/etcd.rs"]
mod etcd;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyperplan_core::model::components::JobPhase;
use hyperplan_core::model::record::{JobRecord, Persist};
use hyperplan_planner::store::config::{EtcdConfig, EtcdTls};
use hyperplan_planner::store::{Batch, Cluster, Etcd, Loaded, STORE_FORMAT, StoreError};

fn config(e: &etcd::Etcd, prefix: &str) -> EtcdConfig {
    EtcdConfig {
        endpoints: vec![e.endpoint.clone()],
        prefix: prefix.into(),
        tls: None,
    }
}

fn record(id: u64, ended: bool) -> Persist {
    record_with_env(id, ended, 0)
}

/// A record with an environment variable of `env` bytes (0: none).
fn record_with_env(id: u64, ended: bool, env: usize) -> Persist {
    let env = if env == 0 {
        String::new()
    } else {
        format!("    env:\n      BIG: \"{}\"\n", "x".repeat(env))
    };
    let spec = hyperplan_shared::parse_jobs(
        &format!(
            "name: job-{id}\ntasks:\n  - name: t\n    replicas: 1\n    resources: {{cpu: 1}}\n    command: [\"true\"]\n{env}"
        ),
        Path::new("job.yaml"),
    )
    .unwrap()
    .remove(0);
    let mut r = JobRecord::submitted(id, "alice", spec);
    if ended {
        r.state.phase = JobPhase::Finished;
        r.state.end_time = Some(1_000 + id);
    }
    r.persist().unwrap()
}

/// Runs a blocking store call off the test's runtime.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_with_every_record_and_the_deposed_leader_cannot_write() {
    let Some(server) = etcd::Etcd::start() else { return };
    capture_log();
    // Its own name: the standby's "standing by" line names it, among every test's lines.
    let leader = "head-a-t1:7400";
    let cfg = config(&server, "/t1/");
    let a = watching(&cfg).await;
    let first = a.campaign(leader.into(), Duration::from_secs(2)).await.unwrap();
    assert_eq!((first.epoch, first.live.len()), (1, 0));
    assert!(a.view().borrow().leading);

    // 300 submits in one batch: three transactions' worth. Then 50 of them end, and
    // job 7 is journaled twice in one batch (etcd refuses a key twice in a transaction).
    let mut batch = Batch {
        jobs: (1..=300).map(|id| record(id, false)).collect(),
        next_job_id: Some(301),
        usage: None,
        drains: None,
    };
    batch.jobs.push(record(7, false));
    let a2 = a.clone();
    blocking(move || a2.commit(&batch)).await.unwrap();
    let ended = Batch {
        jobs: (1..=50).map(|id| record(id, true)).collect(),
        next_job_id: None,
        usage: None,
        drains: None,
    };
    let a2 = a.clone();
    blocking(move || a2.commit(&ended)).await.unwrap();

    // A second planner stands by: it knows the leader and does not lead.
    let (b, campaign) = standby(&cfg, "head-b:7400", Duration::from_secs(2), leader).await;
    // Once its campaign has found the key taken (or, wrongly, has taken it).
    until(Duration::from_secs(30), "the standby standing by", || {
        campaign.is_finished() || logged(&["standing by", leader])
    })
    .await;
    assert!(
        !campaign.is_finished(),
        "a standby must not lead while the leader's lease lives"
    );

    // The leader's lease is revoked behind its back (as if it had been cut off for longer
    // than the TTL): the standby leads with every record and a newer epoch.
    let mut raw = etcd_client::Client::connect([server.endpoint.as_str()], None)
        .await
        .unwrap();
    let key = raw.get("/t1/leader", None).await.unwrap();
    raw.lease_revoke(key.kvs()[0].lease()).await.unwrap();
    let taken = tokio::time::timeout(Duration::from_secs(10), campaign)
        .await
        .expect("the standby leads once the lease is gone")
        .unwrap()
        .unwrap();
    assert_eq!(taken.epoch, 2);
    assert_eq!(taken.next_job_id, 301);
    let mut ids: Vec<u64> = taken.live.iter().map(|r| r.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (51..=300).collect::<Vec<_>>());
    let b2 = b.clone();
    assert_eq!(blocking(move || b2.finished(0)).await.unwrap().len(), 50);

    // The deposed leader's next write is refused, and it knows it lost the lead.
    let a2 = a.clone();
    let refused = blocking(move || {
        a2.commit(&Batch {
            jobs: vec![record(999, false)],
            next_job_id: Some(1000),
            usage: None,
            drains: None,
        })
    })
    .await;
    assert!(
        matches!(&refused, Err(StoreError::Io { why, .. }) if why.contains("no longer the leader")),
        "{refused:?}"
    );
    assert!(a.view().borrow().lost.is_some());
    let b2 = b.clone();
    assert_eq!(blocking(move || b2.summary()).await.unwrap().live, 250);

    // Tools (state import) do not write while a planner leads.
    let tool = blocking({
        let cfg = cfg.clone();
        move || Etcd::connect(&cfg).and_then(|t| t.set_meta(1, 1))
    })
    .await;
    assert!(
        matches!(&tool, Err(StoreError::Io { why, .. }) if why.contains("a planner leads")),
        "{tool:?}"
    );

    // The new leader deletes ended jobs by age; a clean stop hands the lead over at once.
    let b2 = b.clone();
    assert_eq!(blocking(move || b2.purge(1_026)).await.unwrap(), 25);
    let b2 = b.clone();
    blocking(move || b2.resign()).await;
    assert!(raw.get("/t1/leader", None).await.unwrap().kvs().is_empty());
}

/// A fair-share usage record as the core encodes it: `user` with `usage` at `at`.
fn usage(user: &str, usage: f64, at: u64) -> Arc<[u8]> {
    use hyperplan_core::model::usage::{UsageRecord, UsageRow};
    UsageRecord {
        at,
        rows: vec![UsageRow {
            queue: "default".into(),
            user: user.into(),
            usage,
        }],
        associations: Vec::new(),
        runtimes: Vec::new(),
    }
    .encode()
    .unwrap()
    .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_usage_the_leader_committed_is_loaded_by_the_next_leader() {
    let Some(server) = etcd::Etcd::start() else { return };
    let leader = "head-a-u1:7400";
    let cfg = config(&server, "/u1/");
    let a = watching(&cfg).await;
    let first = a.campaign(leader.into(), TTL).await.unwrap();
    assert_eq!(first.usage, None, "a new prefix has no usage");

    // Usage with the jobs, then replaced, then kept by a batch without it.
    let (old, new) = (usage("alice", 120.0, 1_000), usage("bob", 7.5, 2_000));
    for batch in [
        Batch {
            jobs: (1..=3).map(|id| record(id, false)).collect(),
            next_job_id: Some(4),
            usage: Some(old.clone()),
            drains: None,
        },
        Batch {
            jobs: vec![],
            next_job_id: None,
            usage: Some(new.clone()),
            drains: None,
        },
        Batch {
            jobs: vec![record(4, false)],
            next_job_id: Some(5),
            usage: None,
            drains: None,
        },
    ] {
        let a2 = a.clone();
        blocking(move || a2.commit(&batch)).await.unwrap();
    }
    let a2 = a.clone();
    assert_eq!(blocking(move || a2.usage()).await.unwrap().as_deref(), Some(&*new));

    // The next leader starts from it.
    let (b, campaign) = standby(&cfg, "head-b-u1:7400", TTL, leader).await;
    let a2 = a.clone();
    blocking(move || a2.resign()).await;
    let taken = tokio::time::timeout(Duration::from_secs(20), campaign)
        .await
        .expect("the standby leads once the leader resigned")
        .unwrap()
        .unwrap();
    assert_eq!(taken.usage.as_deref(), Some(&*new));
    assert_eq!(taken.live.len(), 4);

    // The deposed leader's usage is fenced out like its records.
    let a2 = a.clone();
    let refused = blocking(move || {
        a2.commit(&Batch {
            jobs: vec![],
            next_job_id: None,
            usage: Some(usage("mallory", 1e9, 3_000)),
            drains: None,
        })
    })
    .await;
    assert!(refused.is_err(), "{refused:?}");
    let b2 = b.clone();
    assert_eq!(blocking(move || b2.usage()).await.unwrap().as_deref(), Some(&*new));
    let b2 = b.clone();
    blocking(move || b2.resign()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_1_prefix_is_rewritten_with_checksums_at_takeover_and_then_checked() {
    let Some(server) = etcd::Etcd::start() else { return };
    let mut raw = etcd_client::Client::connect([server.endpoint.as_str()], None)
        .await
        .unwrap();
    // As an older build left it: format 1, records without checksums.
    let old = |p: &Persist| JobRecord::decode(&p.bytes).unwrap().encode_format1().unwrap();
    let (live, ended) = (record(1, false), record(2, true));
    raw.put("/t9/meta/format", "1", None).await.unwrap();
    raw.put("/t9/meta/epoch", "4", None).await.unwrap();
    raw.put("/t9/meta/nextJobId", "3", None).await.unwrap();
    raw.put(format!("/t9/live/{:020}", 1), old(&live), None).await.unwrap();
    raw.put(format!("/t9/finished/{:020}/{:020}", 1_002, 2), old(&ended), None)
        .await
        .unwrap();
    let cfg = config(&server, "/t9/");
    let a = blocking({
        let cfg = cfg.clone();
        move || Etcd::connect(&cfg)
    })
    .await
    .unwrap();
    // Read as it is before a planner leads.
    let a2 = a.clone();
    assert_eq!(blocking(move || a2.summary()).await.unwrap().format, 1);
    a.start_watch();
    let taken = a.campaign("head-a:7400".into(), Duration::from_secs(2)).await.unwrap();
    assert_eq!((taken.epoch, taken.live.len()), (5, 1));
    // Every record written again with its checksum, then the format.
    let a2 = a.clone();
    let summary = blocking(move || a2.summary()).await.unwrap();
    assert_eq!((summary.format, summary.live, summary.finished), (STORE_FORMAT, 1, 1));
    for prefix in ["/t9/live/", "/t9/finished/"] {
        let got = raw
            .get(prefix, Some(etcd_client::GetOptions::new().with_prefix()))
            .await
            .unwrap();
        for kv in got.kvs() {
            assert!(
                JobRecord::decode_checked(kv.value()).is_ok(),
                "{}",
                kv.key_str().unwrap()
            );
        }
    }
    // From now on a record without its checksum is damage, named, not an old record.
    raw.put(format!("/t9/live/{:020}", 1), old(&live), None).await.unwrap();
    let a2 = a.clone();
    let e = blocking(move || a2.summary()).await.unwrap_err().to_string();
    assert!(e.contains("live job") && e.contains("it has no checksum"), "{e}");
    let a2 = a.clone();
    blocking(move || a2.resign()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_written_by_a_newer_format_is_refused() {
    let Some(server) = etcd::Etcd::start() else { return };
    let mut raw = etcd_client::Client::connect([server.endpoint.as_str()], None)
        .await
        .unwrap();
    raw.put("/t2/meta/format", "99", None).await.unwrap();
    let cfg = config(&server, "/t2/");
    let e = blocking(move || Etcd::connect(&cfg)).await.unwrap_err();
    assert!(matches!(e, StoreError::Newer { found: 99, .. }), "{e}");
    assert!(e.to_string().contains("/t2/"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_a_planner_with_its_certificate_leads_and_the_others_are_told_why_not() {
    let Some(server) = etcd::Etcd::start_tls() else { return };
    let files = server.tls.clone().unwrap();
    let tls = |ca: &Path, identity: bool| EtcdConfig {
        tls: Some(EtcdTls {
            ca_file: ca.to_path_buf(),
            identity: identity.then(|| (files.cert.clone(), files.key.clone())),
        }),
        ..config(&server, "/tls/")
    };
    let cfg = tls(&files.ca, true);
    let a = blocking(move || Etcd::connect(&cfg)).await.unwrap();
    a.start_watch();
    let first = a.campaign("head-a:7400".into(), Duration::from_secs(2)).await.unwrap();
    assert_eq!(first.epoch, 1);
    let batch = Batch {
        jobs: (1..=3).map(|id| record(id, false)).collect(),
        next_job_id: Some(4),
        usage: None,
        drains: None,
    };
    let a2 = a.clone();
    blocking(move || a2.commit(&batch)).await.unwrap();
    let a2 = a.clone();
    assert_eq!(blocking(move || a2.summary()).await.unwrap().live, 3);

    let refused = |cfg: EtcdConfig| async move { blocking(move || Etcd::connect(&cfg).map(drop)).await.unwrap_err() };
    // No client certificate: etcd ends the handshake.
    let e = refused(tls(&files.ca, false)).await;
    assert!(e.to_string().contains("connecting with TLS"), "{e}");
    // Another CA than the one that signed etcd's certificate.
    let other = tempfile::tempdir().unwrap();
    let other_ca = hyperplan_net::certs::init_ca(other.path(), false).unwrap();
    let e = refused(tls(&other_ca.cert, true)).await;
    assert!(e.to_string().contains("connecting with TLS"), "{e}");
    // Plain HTTP to a TLS port.
    let plain = EtcdConfig {
        endpoints: vec![server.endpoint.replace("https://", "http://")],
        ..config(&server, "/tls/")
    };
    let e = refused(plain).await;
    assert!(e.to_string().contains("is etcd running there?"), "{e}");
    // A CA file that is not PEM, and one that is missing: named, with what was expected.
    let junk = other.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate").unwrap();
    let e = refused(tls(&junk, true)).await;
    assert!(
        e.to_string().contains("junk.pem") && e.to_string().contains("expected PEM"),
        "{e}"
    );
    let e = refused(tls(&other.path().join("missing.pem"), true)).await;
    assert!(e.to_string().contains("missing.pem"), "{e}");
}

fn connect(cfg: &EtcdConfig) -> Etcd {
    Etcd::connect(cfg).unwrap()
}

/// A planner's store on `cfg`, connected off the runtime, its watch started.
async fn watching(cfg: &EtcdConfig) -> Etcd {
    let cfg = cfg.clone();
    let e = blocking(move || connect(&cfg)).await;
    e.start_watch();
    e
}

/// A standby on `cfg` campaigning as `me` with `ttl`: its store and its campaign, once
/// it knows `leader` leads.
async fn standby(
    cfg: &EtcdConfig,
    me: &str,
    ttl: Duration,
    leader: &str,
) -> (Etcd, tokio::task::JoinHandle<Result<Loaded, StoreError>>) {
    let b = watching(cfg).await;
    let campaign = {
        let (b, me) = (b.clone(), me.to_string());
        tokio::spawn(async move { b.campaign(me, ttl).await })
    };
    b.view()
        .wait_for(|v| v.leader.as_deref() == Some(leader))
        .await
        .unwrap();
    (b, campaign)
}

/// The planner crate's log lines (every test's of this binary), from [`capture_log`] on.
static LOG: Mutex<String> = Mutex::new(String::new());

struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOG.lock().unwrap().push_str(&String::from_utf8_lossy(buf));
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sends the planner crate's info lines to [`LOG`] (once per binary; the store logs on
/// its own runtime's threads, so only a global subscriber sees them).
fn capture_log() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("hyperplan_planner=info"))
            .with_ansi(false)
            .with_writer(|| LogWriter)
            .try_init();
    });
}

/// Whether a captured line holds every one of `parts`.
fn logged(parts: &[&str]) -> bool {
    LOG.lock().unwrap().lines().any(|l| parts.iter().all(|p| l.contains(p)))
}

/// Polls `done` every 20 ms until it holds; panics with `what` after `within`.
async fn until(within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < within, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How many `live/` keys member `endpoint` holds under `prefix` (0 while it does not answer).
async fn live_keys(endpoint: &str, prefix: &str) -> i64 {
    let Ok(mut c) = etcd_client::Client::connect([endpoint], None).await else {
        return 0;
    };
    let options = etcd_client::GetOptions::new().with_prefix().with_count_only();
    match tokio::time::timeout(Duration::from_secs(2), c.get(format!("{prefix}live/"), Some(options))).await {
        Ok(Ok(r)) => r.count(),
        _ => 0,
    }
}

/// The leaders' lease: 4 s, so a leader steps down after 2.7 s without a renewal. Killing
/// the member etcd's lead sits on costs an election; with 2 s (1.3 s) a run beside the
/// other tests of this file once outlasted it, and the leader rightly stepped down.
const TTL: Duration = Duration::from_secs(4);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_three_members_the_leader_goes_on_committing_while_one_is_killed_and_restarted() {
    let Some(mut cluster) = etcd::Cluster::start() else {
        return;
    };
    let cfg = EtcdConfig {
        endpoints: cluster.endpoints.clone(),
        prefix: "/q/".into(),
        tls: None,
    };
    let a = watching(&cfg).await;
    a.campaign("head-a:7400".into(), TTL).await.unwrap();
    let (b, campaign) = standby(&cfg, "head-b:7400", TTL, "head-a:7400").await;

    // The leader commits batch after batch of 10 submits until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let committed = Arc::new(AtomicU64::new(0));
    let committer = std::thread::spawn({
        let (a, stop, committed) = (a.clone(), stop.clone(), committed.clone());
        move || -> Result<u64, StoreError> {
            let mut next = 1;
            while !stop.load(Ordering::Relaxed) {
                a.commit(&Batch {
                    jobs: (next..next + 10).map(|id| record(id, false)).collect(),
                    next_job_id: Some(next + 10),
                    usage: None,
                    drains: None,
                })?;
                next += 10;
                committed.store(next - 1, Ordering::Relaxed);
            }
            Ok(next - 1)
        }
    });
    let count = || committed.load(Ordering::Relaxed);
    until(Duration::from_secs(30), "100 jobs committed", || count() >= 100).await;

    // Member 0, the one both planners use first, is killed: the leader goes on
    // committing for longer than its lease (renewed through the others), the standby
    // does not lead.
    cluster.kill(0);
    let (killed, at_kill) = (Instant::now(), count());
    until(
        Duration::from_secs(30),
        "commits go on for 3 × the TTL with member 0 dead",
        || committer.is_finished() || (count() >= at_kill + 100 && killed.elapsed() >= TTL * 3),
    )
    .await;
    assert!(
        !committer.is_finished(),
        "the committer stopped: {:?}",
        committer.join()
    );
    let v = a.view().borrow().clone();
    assert!(v.leading && v.lost.is_none(), "{v:?}");
    assert!(!campaign.is_finished(), "the standby must not lead");

    // Member 0 comes back and catches up; the leader goes on.
    let restarted = Instant::now();
    let mut cluster = blocking(move || {
        cluster.restart(0);
        cluster
    })
    .await;
    let at_restart = count();
    until(Duration::from_secs(30), "50 more jobs after the restart", || {
        count() >= at_restart + 50
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let total = committer.join().unwrap().unwrap();
    let start = Instant::now();
    while live_keys(&cluster.endpoints[0], "/q/").await != total as i64 {
        assert!(start.elapsed() < Duration::from_secs(30), "member 0 did not catch up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "{total} jobs committed; member 0 dead {:.1} s, back and caught up in {:.1} s",
        (restarted - killed).as_secs_f64(),
        restarted.elapsed().as_secs_f64()
    );

    // Member 1 is killed too late to matter for quorum (0 and 2 answer): the leader
    // resigns, the standby leads with every job.
    cluster.kill(1);
    let a2 = a.clone();
    blocking(move || a2.resign()).await;
    let taken = tokio::time::timeout(Duration::from_secs(20), campaign)
        .await
        .expect("the standby leads once the leader resigned")
        .unwrap()
        .unwrap();
    assert_eq!(taken.live.len() as u64, total);
    assert_eq!(taken.next_job_id, total + 1);
    let b2 = b.clone();
    blocking(move || {
        b2.commit(&Batch {
            jobs: vec![record(total + 1, false)],
            next_job_id: Some(total + 2),
            usage: None,
            drains: None,
        })
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_given_a_dead_endpoint_beside_a_good_one_starts_and_works() {
    let Some(server) = etcd::Etcd::start() else { return };
    for (n, endpoints) in [
        vec![server.endpoint.clone(), etcd::dead_endpoint()],
        vec![etcd::dead_endpoint(), server.endpoint.clone()],
    ]
    .into_iter()
    .enumerate()
    {
        let cfg = EtcdConfig {
            endpoints,
            prefix: format!("/dead{n}/"),
            tls: None,
        };
        let a = blocking(move || Etcd::connect(&cfg)).await.unwrap();
        a.start_watch();
        let first = a.campaign("head-a:7400".into(), TTL).await.unwrap();
        assert_eq!(first.epoch, 1);
        let a2 = a.clone();
        blocking(move || {
            a2.commit(&Batch {
                jobs: (1..=3).map(|id| record(id, false)).collect(),
                next_job_id: Some(4),
                usage: None,
                drains: None,
            })
        })
        .await
        .unwrap();
        let a2 = a.clone();
        assert_eq!(blocking(move || a2.summary()).await.unwrap().live, 3);
        let a2 = a.clone();
        blocking(move || a2.resign()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_pages_through_more_live_records_than_one_message_holds() {
    let Some(server) = etcd::Etcd::start() else { return };
    let cfg = config(&server, "/big/");
    let a = watching(&cfg).await;
    a.campaign("head-a:7400".into(), TTL).await.unwrap();

    // 20,000 small submits, then 300 with a 16 KB environment (4.8 MB of those alone).
    let started = Instant::now();
    let (small, large) = (20_000u64, 300u64);
    let a2 = a.clone();
    let bytes = blocking(move || {
        let mut bytes = 0;
        for from in (1..=small).step_by(2_000) {
            let jobs: Vec<_> = (from..from + 2_000).map(|id| record(id, false)).collect();
            bytes += jobs.iter().map(|p| p.bytes.len()).sum::<usize>();
            a2.commit(&Batch {
                jobs,
                next_job_id: Some(from + 2_000),
                usage: None,
                drains: None,
            })
            .unwrap();
        }
        let jobs: Vec<_> = (small + 1..=small + large)
            .map(|id| record_with_env(id, false, 16 * 1024))
            .collect();
        let large_bytes = jobs.iter().map(|p| p.bytes.len()).sum::<usize>();
        assert!(large_bytes > 4 << 20, "{large_bytes}");
        a2.commit(&Batch {
            jobs,
            next_job_id: Some(small + large + 1),
            usage: None,
            drains: None,
        })
        .unwrap();
        bytes + large_bytes
    })
    .await;
    let written = started.elapsed();

    // A planner that starts now loads them all (its first read pages) and takes over.
    let started = Instant::now();
    let (b, campaign) = standby(&cfg, "head-b:7400", TTL, "head-a:7400").await;
    let loaded = started.elapsed();
    let a2 = a.clone();
    blocking(move || a2.resign()).await;
    let taken = tokio::time::timeout(Duration::from_secs(60), campaign)
        .await
        .expect("the standby leads")
        .unwrap()
        .unwrap();
    assert_eq!(taken.live.len() as u64, small + large);
    assert!(taken.live.iter().any(|r| r.id == small + large));
    assert_eq!(taken.next_job_id, small + large + 1);
    let b2 = b.clone();
    let summary = blocking(move || b2.summary()).await.unwrap();
    assert_eq!(summary.live, small + large);
    eprintln!(
        "{} records, {:.1} MiB: written in {:.1} s, a standby's first read in {:.1} s, took over in {:.1} s",
        small + large,
        bytes as f64 / f64::from(1 << 20),
        written.as_secs_f64(),
        loaded.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

/// A cluster CA and the planner's certificate, in a directory of their own.
fn cluster_certs() -> (tempfile::TempDir, Cluster) {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let ca = hyperplan_net::certs::init_ca(&certs, false).unwrap();
    hyperplan_net::certs::issue_planner(&certs, &[]).unwrap();
    let cluster = Cluster::from_ca_file(&ca.cert).unwrap();
    (dir, cluster)
}

/// A planner daemon's configuration on `cfg` with the certificates in `dir`/certs.
fn daemon(cfg: &EtcdConfig, dir: &Path) -> hyperplan_planner::DaemonConfig {
    let mut d = hyperplan_planner::DaemonConfig::default();
    d.server.listen = "127.0.0.1:0".parse().unwrap();
    d.server.cert_dir = dir.join("certs");
    d.store.backend = hyperplan_planner::store::config::Backend::Etcd(cfg.clone());
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planner_of_another_cluster_refuses_the_prefix_before_it_campaigns() {
    let Some(server) = etcd::Etcd::start() else { return };
    let cfg = config(&server, "/shared/");
    let (dir_a, a) = cluster_certs();
    let (dir_b, b) = cluster_certs();
    assert_ne!(a.fingerprint, b.fingerprint);

    // Cluster A's planner: the prefix is A's from its start on; it leads and has jobs.
    let bound = {
        let config = daemon(&cfg, dir_a.path());
        blocking(move || hyperplan_planner::server::Server::bind(config).map(drop)).await
    };
    assert!(bound.is_ok(), "{bound:?}");
    let leader = blocking({
        let (cfg, a) = (cfg.clone(), a.clone());
        move || Etcd::connect_as(&cfg, Some(&a)).unwrap()
    })
    .await;
    leader.start_watch();
    let first = leader.campaign("head-a:7400".into(), TTL).await.unwrap();
    let l2 = leader.clone();
    blocking(move || {
        l2.commit(&Batch {
            jobs: (1..=3).map(|id| record(id, false)).collect(),
            next_job_id: Some(4),
            usage: None,
            drains: None,
        })
    })
    .await
    .unwrap();
    let mut raw = etcd_client::Client::connect([server.endpoint.as_str()], None)
        .await
        .unwrap();
    let recorded = raw.get("/shared/meta/caSha256", None).await.unwrap();
    let recorded = recorded.kvs()[0].value_str().unwrap().to_string();
    assert!(
        recorded.starts_with(&format!("{} crc32c:", a.fingerprint)),
        "{recorded}"
    );

    // Cluster B's planner, on the same prefix by mistake, while A leads and after A's
    // leader is gone (the issue's case): refused, saying why, and it never campaigns.
    for a_leads in [true, false] {
        if !a_leads {
            let l2 = leader.clone();
            blocking(move || l2.resign()).await;
        }
        let config = daemon(&cfg, dir_b.path());
        let e = blocking(move || hyperplan_planner::server::Server::bind(config).map(drop))
            .await
            .unwrap_err();
        assert!(
            matches!(
                &e,
                hyperplan_planner::server::ServerError::Store(StoreError::OtherCluster { .. })
            ),
            "{e}"
        );
        let e = e.to_string();
        let at = format!("etcd {} /shared/", server.endpoint);
        assert!(
            e.starts_with(&format!("{at}: the store belongs to another cluster")),
            "{e}"
        );
        assert!(e.contains(&a.fingerprint) && e.contains(&b.fingerprint), "{e}");
        assert!(e.contains(&b.ca_file.display().to_string()), "{e}");
        assert!(e.contains("a [store] prefix of its own"), "{e}");
        // Nothing touched: A's record, jobs and epoch; no leader key unless A's.
        let got = raw.get("/shared/meta/caSha256", None).await.unwrap();
        assert_eq!(got.kvs()[0].value_str().unwrap(), recorded);
        assert_eq!(live_keys(&server.endpoint, "/shared/").await, 3);
        let leader_key = raw.get("/shared/leader", None).await.unwrap();
        match leader_key.kvs().first() {
            Some(kv) => assert_eq!(kv.value_str().unwrap(), "head-a:7400"),
            None => assert!(!a_leads),
        }
        let tool = blocking({
            let cfg = cfg.clone();
            move || Etcd::connect(&cfg).unwrap().summary().unwrap()
        })
        .await;
        assert_eq!((tool.epoch, tool.live), (first.epoch, 3));
    }

    // The store level says the same to a standby of B; A's planners still start.
    let e = blocking({
        let (cfg, b) = (cfg.clone(), b.clone());
        move || Etcd::connect_as(&cfg, Some(&b)).map(drop).unwrap_err()
    })
    .await;
    assert!(matches!(e, StoreError::OtherCluster { .. }), "{e}");
    let again = blocking({
        let (cfg, a) = (cfg.clone(), a.clone());
        move || Etcd::connect_as(&cfg, Some(&a)).unwrap()
    })
    .await;
    again.start_watch();
    let taken = again.campaign("head-a2:7400".into(), TTL).await.unwrap();
    assert_eq!((taken.epoch, taken.live.len()), (first.epoch + 1, 3));
    blocking(move || again.resign()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_without_a_cluster_gets_the_first_planners_and_a_take_over_checks_it_again() {
    let Some(server) = etcd::Etcd::start() else { return };
    let mut raw = etcd_client::Client::connect([server.endpoint.as_str()], None)
        .await
        .unwrap();
    // As a build before cluster records left it: format 2, bare numbers.
    raw.put("/c2/meta/format", "2", None).await.unwrap();
    raw.put("/c2/meta/epoch", "4", None).await.unwrap();
    raw.put("/c2/meta/nextJobId", "2", None).await.unwrap();
    raw.put(format!("/c2/live/{:020}", 1), record(1, false).bytes.to_vec(), None)
        .await
        .unwrap();
    let cfg = config(&server, "/c2/");
    let (_dir_a, a) = cluster_certs();
    let (_dir_b, b) = cluster_certs();
    // A's first planner records A; B's is refused from then on.
    let a_store = blocking({
        let (cfg, a) = (cfg.clone(), a.clone());
        move || Etcd::connect_as(&cfg, Some(&a)).unwrap()
    })
    .await;
    let a2 = a_store.clone();
    assert_eq!(
        blocking(move || a2.cluster()).await.unwrap().as_deref(),
        Some(a.fingerprint.as_str())
    );
    let b_store = blocking({
        let (cfg, b) = (cfg.clone(), b.clone());
        move || Etcd::connect_as(&cfg, Some(&b)).map(drop).unwrap_err()
    })
    .await;
    assert!(matches!(b_store, StoreError::OtherCluster { .. }), "{b_store}");

    // A's take-over writes the old prefix's meta values again with their checksums.
    a_store.start_watch();
    let taken = a_store.campaign("head-a:7400".into(), TTL).await.unwrap();
    assert_eq!((taken.epoch, taken.next_job_id, taken.live.len()), (5, 2, 1));
    for key in ["epoch", "nextJobId"] {
        let got = raw.get(format!("/c2/meta/{key}"), None).await.unwrap();
        let v = got.kvs()[0].value_str().unwrap();
        assert!(v.contains(" crc32c:"), "{key}: {v}");
    }
    let got = raw.get("/c2/meta/format", None).await.unwrap();
    assert_eq!(got.kvs()[0].value_str().unwrap(), STORE_FORMAT.to_string());
    let a2 = a_store.clone();
    blocking(move || a2.resign()).await;

    // A prefix whose record changes under a standby (here B's, replaced by A's): its
    // take-over checks again, refuses and gives the lead back.
    let cfg3 = config(&server, "/c3/");
    let b_standby = blocking({
        let (cfg3, b) = (cfg3.clone(), b.clone());
        move || Etcd::connect_as(&cfg3, Some(&b)).unwrap()
    })
    .await;
    let a_record = raw.get("/c2/meta/caSha256", None).await.unwrap();
    raw.put("/c3/meta/caSha256", a_record.kvs()[0].value().to_vec(), None)
        .await
        .unwrap();
    b_standby.start_watch();
    let e = b_standby.campaign("head-b:7400".into(), TTL).await.unwrap_err();
    assert!(matches!(e, StoreError::OtherCluster { .. }), "{e}");
    assert!(
        raw.get("/c3/leader", None).await.unwrap().kvs().is_empty(),
        "it resigned"
    );
    assert!(
        raw.get("/c3/meta/epoch", None).await.unwrap().kvs().is_empty(),
        "no epoch written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_meta_value_stops_the_take_over_and_ids_never_go_back() {
    let Some(server) = etcd::Etcd::start() else { return };
    let mut raw = etcd_client::Client::connect([server.endpoint.as_str()], None)
        .await
        .unwrap();
    let cfg = config(&server, "/m1/");
    let a = watching(&cfg).await;
    a.campaign("head-a:7400".into(), TTL).await.unwrap();
    let a2 = a.clone();
    blocking(move || {
        a2.commit(&Batch {
            jobs: vec![record(40, false), record(41, true)],
            next_job_id: Some(42),
            usage: None,
            drains: None,
        })
    })
    .await
    .unwrap();
    let a2 = a.clone();
    blocking(move || a2.resign()).await;
    let stored = raw.get("/m1/meta/nextJobId", None).await.unwrap();
    let stored = stored.kvs()[0].value_str().unwrap().to_string();
    assert!(stored.starts_with("42 crc32c:"), "{stored}");

    // One bit: 42 → 10, its checksum as it was.
    raw.put("/m1/meta/nextJobId", stored.replacen("42", "10", 1), None)
        .await
        .unwrap();
    let b = watching(&cfg).await;
    let e = b.campaign("head-b:7400".into(), TTL).await.unwrap_err();
    assert!(
        matches!(&e, StoreError::MetaDamaged { key, .. } if key == "nextJobId"),
        "{e}"
    );
    let e = e.to_string();
    assert!(e.contains("meta key nextJobId is damaged: checksum mismatch"), "{e}");
    assert!(
        e.contains("state export") && e.contains("etcdctl del --prefix /m1/"),
        "{e}"
    );
    assert!(
        raw.get("/m1/leader", None).await.unwrap().kvs().is_empty(),
        "it resigned"
    );
    // --check and export read it all the same: the damage named, the next id above the jobs'.
    let b2 = b.clone();
    let summary = blocking(move || b2.summary()).await.unwrap();
    assert_eq!(summary.damaged.len(), 1, "{summary:?}");
    assert_eq!(summary.next_id(), 42);

    // Bare (a prefix of format 2 damaged before it had checksums): no checksum to
    // find it, but the take-over's floor does not give job 41's id again.
    raw.put("/m1/meta/format", "2", None).await.unwrap();
    raw.put("/m1/meta/epoch", "3", None).await.unwrap();
    raw.put("/m1/meta/nextJobId", "10", None).await.unwrap();
    let c = watching(&cfg).await;
    let taken = c.campaign("head-c:7400".into(), TTL).await.unwrap();
    assert_eq!(taken.next_job_id, 42, "above ended job 41");
    let got = raw.get("/m1/meta/nextJobId", None).await.unwrap();
    assert!(got.kvs()[0].value_str().unwrap().starts_with("42 crc32c:"));
    blocking(move || c.resign()).await;
}
