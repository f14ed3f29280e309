//! The etcd store and election against a real etcd (Debian's `etcd-server`, started on
//! 127.0.0.1 by the test; skipped, saying why, when it is not installed): a leader's
//! batches larger than one etcd transaction, a standby that takes over with every record
//! and a raised epoch, a deposed leader whose writes are refused, tools refused while a
//! planner leads, a newer store format refused, and TLS with client certificates.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/common/etcd.rs"]
mod etcd;

use std::path::Path;
use std::time::Duration;

use hyperplan_core::components::JobPhase;
use hyperplan_core::journal::{JobRecord, Persist};
use hyperplan_planner::store::config::{EtcdConfig, EtcdTls};
use hyperplan_planner::store::{Batch, Etcd, StoreError};

fn config(e: &etcd::Etcd, prefix: &str) -> EtcdConfig {
    EtcdConfig {
        endpoints: vec![e.endpoint.clone()],
        prefix: prefix.into(),
        tls: None,
    }
}

fn record(id: u64, ended: bool) -> Persist {
    let spec = hyperplan_shared::parse_jobs(
        &format!(
            "name: job-{id}\ntasks:\n  - name: t\n    replicas: 1\n    resources: {{cpu: 1}}\n    command: [\"true\"]\n"
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
    let cfg = config(&server, "/t1/");
    let a = blocking({
        let cfg = cfg.clone();
        move || Etcd::connect(&cfg)
    })
    .await
    .unwrap();
    a.start_watch();
    let first = a.campaign("head-a:7400".into(), Duration::from_secs(2)).await.unwrap();
    assert_eq!((first.epoch, first.live.len()), (1, 0));
    assert!(a.view().borrow().leading);

    // 300 submits in one batch: three transactions' worth. Then 50 of them end, and
    // job 7 is journaled twice in one batch (etcd refuses a key twice in a transaction).
    let mut batch = Batch {
        jobs: (1..=300).map(|id| record(id, false)).collect(),
        next_job_id: Some(301),
    };
    batch.jobs.push(record(7, false));
    let a2 = a.clone();
    blocking(move || a2.commit(&batch)).await.unwrap();
    let ended = Batch {
        jobs: (1..=50).map(|id| record(id, true)).collect(),
        next_job_id: None,
    };
    let a2 = a.clone();
    blocking(move || a2.commit(&ended)).await.unwrap();

    // A second planner stands by: it knows the leader and does not lead.
    let b = blocking({
        let cfg = cfg.clone();
        move || Etcd::connect(&cfg)
    })
    .await
    .unwrap();
    b.start_watch();
    let campaign = {
        let b = b.clone();
        tokio::spawn(async move { b.campaign("head-b:7400".into(), Duration::from_secs(2)).await })
    };
    let mut view = b.view();
    view.wait_for(|v| v.leader.as_deref() == Some("head-a:7400"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
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
