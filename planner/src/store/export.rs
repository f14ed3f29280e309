//! `hyperplan-planner state export FILE` / `state import FILE`: the store as JSON lines, to
//! back it up, move it to another store file (or backend), or read it. The first line
//! says what the file is, and carries fair share's usage where the store has one; every
//! other line is one job:
//!
//! ```text
//! {"hyperplan":"state","format":3,"epoch":7,"nextJobId":353,"caSha256":"AB:CD:…","usage":{"at":1795737600,"rows":[{"queue":"default","user":"alice","usage":120.0}]}}
//! {"live":true,"job":{"id":352,"owner":"alice","spec":{…},"state":{…},"tasks":[…],…}}
//! ```
//!
//! `drains` (the admins' drains of nodes, `{"nodes":[["gpu-b01",{"reason":"firmware","by":"root","since":1795737000}]]}`)
//! is optional as well.
//!
//! `usage` is optional: an export without it (older, or of a store without usage)
//! imports with no usage. A stored usage record that cannot be read is left out of the
//! export with a warning (a start would begin without it too).
//!
//! `caSha256` is the fingerprint of the CA of the cluster the jobs belong to (the store's
//! record, or the exporting planner's `ca.pem` where the store has none): an import into
//! a store of another cluster is refused, naming both, unless it is forced (`state
//! import --force`); the store then belongs to the importing cluster. An export without
//! it (older) is imported without the check.
//!
//! A meta value whose checksum does not match does not stop an export (it is how such a
//! store is saved): it is said in the log, the next job id is taken from the jobs' ids,
//! and a damaged epoch is the larger of what it says and the marker's.
//!
//! An import goes into an empty store only (move the old file aside first), checks every
//! line before it writes anything, and names the line of what it refuses: ids must be
//! from 1 to [`MAX_JOB_ID`] (2^53 − 1), and every live job must be one a start would load
//! (the checks of `Planner::restore`: one live job per name, tasks as its spec makes,
//! within `[limits]`); otherwise nothing is imported and each bad line is named.

use std::io::{BufRead, Write};

use hyperplan_core::PlannerConfig;
use hyperplan_core::jobs::ownership::MAX_JOB_ID;
use hyperplan_core::model::drain::DrainsRecord;
use hyperplan_core::model::record::JobRecord;
use hyperplan_core::model::usage::UsageRecord;
use serde::{Deserialize, Serialize};

use super::{Batch, Cluster, STORE_FORMAT, Store, StoreError};

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Header {
    hyperplan: String,
    format: u32,
    epoch: u64,
    next_job_id: u64,
    /// The fingerprint of the CA of the cluster the jobs belong to (absent: an export
    /// from before cluster records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ca_sha256: Option<String>,
    /// Fair share's usage, decoded (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    usage: Option<UsageRecord>,
    /// The nodes' drains, decoded (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    drains: Option<DrainsRecord>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    live: bool,
    job: JobRecord,
}

/// Writes every job of `store` to `out`; returns (live, ended) counts. `ours`: the
/// exporting planner's cluster, named in the export where the store records none.
pub fn export(store: &Store, out: &mut dyn Write, ours: Option<&Cluster>) -> Result<(u64, u64), StoreError> {
    let s = store.summary()?;
    for d in &s.damaged {
        tracing::warn!("{d}; exporting all the same, the next job id taken from the jobs' ids");
    }
    let ca_sha256 = match store.cluster() {
        Ok(c) => c.or_else(|| ours.map(|c| c.fingerprint.clone())),
        // Said above, with the other damage.
        Err(StoreError::MetaDamaged { .. }) => None,
        Err(e) => return Err(e),
    };
    let (live, finished) = store.all()?;
    let usage = match store.usage()? {
        None => None,
        Some(bytes) => match UsageRecord::decode(&bytes) {
            Ok(u) => Some(u),
            Err(e) => {
                tracing::warn!(
                    store = %store.at().display(),
                    "the fair-share usage record cannot be read ({e}); exporting without it"
                );
                None
            }
        },
    };
    let drains = match store.drains()? {
        None => None,
        Some(bytes) => match DrainsRecord::decode(&bytes) {
            Ok(d) => Some(d).filter(|d| !d.nodes.is_empty()),
            Err(e) => {
                tracing::warn!(
                    store = %store.at().display(),
                    "the nodes' drains record cannot be read ({e}); exporting without it"
                );
                None
            }
        },
    };
    let io = |e: std::io::Error| StoreError::Import(format!("writing the export: {e}"));
    let header = Header {
        hyperplan: "state".into(),
        format: STORE_FORMAT,
        epoch: s.epoch,
        next_job_id: s.next_id(),
        ca_sha256,
        usage,
        drains,
    };
    writeln!(out, "{}", json(&header)?).map_err(io)?;
    for (is_live, jobs) in [(true, &live), (false, &finished)] {
        for job in jobs.iter() {
            let line = Line {
                live: is_live,
                job: job.clone(),
            };
            writeln!(out, "{}", json(&line)?).map_err(io)?;
        }
    }
    out.flush().map_err(io)?;
    Ok((live.len() as u64, finished.len() as u64))
}

/// The largest line an import reads (a job of 100,000 tasks is some tens of MB).
const MAX_LINE: u64 = 256 << 20;

/// Whose jobs an import takes (see [`import`]).
#[derive(Debug)]
pub struct Importing {
    /// The importing planner's cluster (its `ca.pem`), or why it cannot be read.
    pub ours: Result<Cluster, StoreError>,
    /// `--force`: take an export of another cluster.
    pub force: bool,
}

/// Reads `input` (named `name` in errors) into the empty `store`, checking its live jobs
/// as a start with `planner`'s limits would load them, and that the export is of the
/// store's cluster (see the module's documentation); returns the number of jobs.
pub fn import(
    store: &Store,
    input: &mut dyn BufRead,
    name: &str,
    planner: &PlannerConfig,
    importing: &Importing,
) -> Result<u64, StoreError> {
    if !store.is_empty()? {
        return Err(StoreError::Import(format!(
            "{}: the store already holds jobs; import into an empty one ({})",
            store.at().display(),
            match store {
                super::Store::Embedded(_) => "move this file aside first",
                super::Store::Etcd(_) => "a new [store] prefix, or delete this prefix's keys first",
            }
        )));
    }
    let mut lines = Vec::new();
    let mut buf = Vec::new();
    let mut n = 0usize;
    loop {
        buf.clear();
        let read = std::io::Read::take(&mut *input, MAX_LINE + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| StoreError::Import(format!("{name}: {e}")))?;
        if read == 0 {
            break;
        }
        n += 1;
        if read as u64 > MAX_LINE {
            return Err(StoreError::Import(format!(
                "{name}:{n}: the line is longer than {MAX_LINE} bytes"
            )));
        }
        let text = String::from_utf8_lossy(&buf);
        if text.trim().is_empty() {
            continue;
        }
        lines.push((n, text.into_owned()));
    }
    let Some((_, first)) = lines.first() else {
        return Err(StoreError::Import(format!(
            "{name}: empty: expected a `hyperplan-planner state export` file"
        )));
    };
    let header: Header = serde_json::from_str(first).map_err(|e| {
        StoreError::Import(format!(
            "{name}:1: expected the header of a `hyperplan-planner state export` file ({{\"hyperplan\":\"state\",…}}): {e}"
        ))
    })?;
    if header.hyperplan != "state" {
        return Err(StoreError::Import(format!(
            "{name}:1: hyperplan: expected \"state\", got {:?}",
            header.hyperplan
        )));
    }
    if header.format > STORE_FORMAT {
        return Err(StoreError::Import(format!(
            "{name}:1: format {} is newer than this build reads ({STORE_FORMAT})",
            header.format
        )));
    }
    let recorded = store.cluster()?;
    let record = check_cluster(store, name, header.ca_sha256.as_deref(), recorded.as_deref(), importing)?;
    if header.next_job_id > MAX_JOB_ID + 1 {
        return Err(StoreError::Import(format!(
            "{name}:1: nextJobId {} is above {}, one more than the largest job id",
            header.next_job_id,
            MAX_JOB_ID + 1
        )));
    }
    let mut batch = Batch::default();
    if let Some(usage) = &header.usage {
        if let Some(row) = usage.rows.iter().find(|r| !r.usage.is_finite() || r.usage < 0.0) {
            return Err(StoreError::Import(format!(
                "{name}:1: usage of user {:?} in queue {:?} is {}; usage is a number of 0 or more",
                row.user, row.queue, row.usage
            )));
        }
        let bytes = usage
            .encode()
            .map_err(|e| StoreError::Import(format!("{name}:1: usage: {e}")))?;
        batch.usage = Some(bytes.into());
    }
    if let Some(drains) = &header.drains {
        let bytes = drains
            .encode()
            .map_err(|e| StoreError::Import(format!("{name}:1: drains: {e}")))?;
        batch.drains = Some(bytes.into());
    }
    let mut next = header.next_job_id.max(1);
    let mut ids = std::collections::BTreeSet::new();
    let mut live = Vec::new();
    let mut line_of = std::collections::BTreeMap::new();
    for (line_no, text) in &lines[1..] {
        let line: Line =
            serde_json::from_str(text).map_err(|e| StoreError::Import(format!("{name}:{line_no}: {e}")))?;
        if line.live != line.job.is_live() {
            return Err(StoreError::Import(format!(
                "{name}:{line_no}: job {} says live: {} but its state is {:?}",
                line.job.id, line.live, line.job.state.phase
            )));
        }
        if !ids.insert(line.job.id) {
            return Err(StoreError::Import(format!(
                "{name}:{line_no}: job id {} appears twice",
                line.job.id
            )));
        }
        if line.job.id == 0 || line.job.id > MAX_JOB_ID {
            return Err(StoreError::Import(format!(
                "{name}:{line_no}: job {:?} has id {}; ids are from 1 to {MAX_JOB_ID} (2^53 - 1)",
                line.job.spec.name, line.job.id
            )));
        }
        next = next.max(line.job.id + 1);
        batch.jobs.push(
            line.job
                .persist()
                .map_err(|e| StoreError::Import(format!("{name}:{line_no}: {e}")))?,
        );
        if line.live {
            line_of.insert(line.job.id, *line_no);
            live.push(line.job);
        }
    }
    // What a start would skip is refused here, every such line named.
    let bad = super::unloadable(planner, live, next);
    if !bad.is_empty() {
        let lines: Vec<String> = bad
            .iter()
            .map(|b| {
                format!(
                    "{name}:{}: job {:?} (id {}): {}",
                    line_of.get(&b.id).copied().unwrap_or(0),
                    b.name,
                    b.id,
                    b.why
                )
            })
            .collect();
        return Err(StoreError::Import(format!(
            "{name}: {} job(s) a planner would not load; nothing imported:\n{}",
            bad.len(),
            lines.join("\n")
        )));
    }
    batch.next_job_id = Some(next);
    let jobs = batch.jobs.len() as u64;
    store.commit(&batch)?;
    store.set_meta(header.epoch, next)?;
    if let Some(fingerprint) = record {
        store.set_cluster(&fingerprint)?;
        if let Err(why) = &importing.ours {
            tracing::warn!(
                "{name}: this planner's CA cannot be read ({why}): the store takes the export's cluster (CA SHA-256 {fingerprint}); a planner of another CA refuses it"
            );
        }
    }
    Ok(jobs)
}

/// An export of another cluster than the store's (its record, or else the importing
/// planner's CA) is refused unless forced, naming both. Returns the cluster to record in
/// a store that has none: the importing planner's, or where its CA cannot be read the
/// export's (a planner of another CA then refuses the store at its start, naming both).
fn check_cluster(
    store: &Store,
    name: &str,
    theirs: Option<&str>,
    recorded: Option<&str>,
    importing: &Importing,
) -> Result<Option<String>, StoreError> {
    let (ours, whose) = match (recorded, &importing.ours) {
        (Some(fp), _) => (
            fp.to_string(),
            format!("the cluster recorded in {}", store.at().display()),
        ),
        (None, Ok(c)) => (
            c.fingerprint.clone(),
            format!("this planner's CA ({})", c.ca_file.display()),
        ),
        (None, Err(_)) => return Ok(theirs.map(str::to_string)),
    };
    let record = recorded.is_none().then(|| ours.clone());
    match theirs {
        // An export from before cluster records: nothing to compare.
        None => Ok(record),
        Some(theirs) if theirs == ours => Ok(record),
        Some(theirs) if importing.force => {
            tracing::warn!(
                "{name}: --force: importing the export of another cluster (CA SHA-256 {theirs}) into the store of {whose} ({ours})"
            );
            Ok(record)
        }
        Some(theirs) => Err(StoreError::Import(format!(
            "{name}:1: the export is of another cluster: its caSha256 is {theirs}, and {whose} has the SHA-256 fingerprint {ours}; nothing imported (another cluster's jobs would run on this cluster's nodes). Import this cluster's export (or check --cert-dir), or pass --force to import it anyway: the jobs then belong to this cluster"
        ))),
    }
}

/// One JSON line.
fn json<T: Serialize>(v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Import(format!("encoding the export: {e}")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::store::Embedded;
    use hyperplan_shared::parse_jobs;

    fn record(id: u64, name: &str, replicas: u32) -> JobRecord {
        let spec = parse_jobs(
            &format!("name: {name}\ntasks:\n  - name: t\n    replicas: {replicas}\n    resources: {{cpu: 1}}\n"),
            std::path::Path::new("job.yaml"),
        )
        .unwrap()
        .remove(0);
        JobRecord::submitted(id, "alice", spec)
    }

    /// An importing planner whose CA cannot be read: exports without a cluster only.
    fn any() -> Importing {
        Importing {
            ours: Err(StoreError::Io {
                path: "ca.pem".into(),
                doing: "reading the cluster CA certificate".into(),
                why: "none in this test".into(),
            }),
            force: false,
        }
    }

    fn cluster(name: &str) -> Cluster {
        Cluster {
            fingerprint: crate::store::meta::fingerprint(name.as_bytes()).unwrap(),
            ca_file: std::path::PathBuf::from(format!("/etc/{name}/ca.pem")),
        }
    }

    fn file(jobs: &[JobRecord]) -> String {
        let mut text = String::from("{\"hyperplan\":\"state\",\"format\":2,\"epoch\":3,\"nextJobId\":1}\n");
        for j in jobs {
            text.push_str(
                &json(&Line {
                    live: true,
                    job: j.clone(),
                })
                .unwrap(),
            );
            text.push('\n');
        }
        text
    }

    fn import_into(dir: &std::path::Path, jobs: &[JobRecord]) -> (Store, Result<u64, StoreError>) {
        let store = Store::Embedded(Embedded::open(&dir.join("state.redb")).unwrap());
        let text = file(jobs);
        let r = import(
            &store,
            &mut text.as_bytes(),
            "in.jsonl",
            &PlannerConfig::default(),
            &any(),
        );
        (store, r)
    }

    fn usage_record() -> UsageRecord {
        use hyperplan_core::model::usage::UsageRow;
        let row = |user: &str, usage| UsageRow {
            queue: "default".into(),
            user: user.into(),
            usage,
        };
        UsageRecord {
            at: 1_795_737_600,
            rows: vec![row("alice", 120.5), row("bob", 0.25)],
            associations: Vec::new(),
            runtimes: Vec::new(),
        }
    }

    fn drains_record() -> DrainsRecord {
        use hyperplan_core::model::drain::Drain;
        DrainsRecord {
            nodes: vec![(
                "gpu-b01".into(),
                Drain {
                    reason: Some("firmware".into()),
                    by: "root".into(),
                    since: 1_795_737_000,
                    by_health: false,
                },
            )],
            removed: vec!["gpu-b09".into()],
        }
    }

    #[test]
    fn an_export_carries_the_usage_and_its_import_restores_it() {
        let dir = tempfile::tempdir().unwrap();
        let from = Store::Embedded(Embedded::open(&dir.path().join("from.redb")).unwrap());
        from.commit(&Batch {
            jobs: vec![record(1, "a", 1).persist().unwrap()],
            next_job_id: Some(2),
            usage: Some(usage_record().encode().unwrap().into()),
            drains: Some(drains_record().encode().unwrap().into()),
        })
        .unwrap();
        let mut out = Vec::new();
        assert_eq!(export(&from, &mut out, None).unwrap(), (1, 0));
        let text = String::from_utf8(out).unwrap();
        let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(header["usage"]["rows"][0]["user"], "alice", "{header}");
        assert_eq!(header["usage"]["rows"][0]["usage"], 120.5, "{header}");

        let to = Store::Embedded(Embedded::open(&dir.path().join("to.redb")).unwrap());
        let n = import(&to, &mut text.as_bytes(), "in.jsonl", &PlannerConfig::default(), &any()).unwrap();
        assert_eq!(n, 1);
        let bytes = to.usage().unwrap().expect("usage imported");
        assert_eq!(UsageRecord::decode(&bytes).unwrap(), usage_record());
        let bytes = to.drains().unwrap().expect("drains imported");
        assert_eq!(DrainsRecord::decode(&bytes).unwrap(), drains_record());
        // And out again, the same.
        let mut again = Vec::new();
        export(&to, &mut again, None).unwrap();
        assert_eq!(String::from_utf8(again).unwrap().lines().next(), text.lines().next());
    }

    #[test]
    fn an_export_without_usage_imports_with_none_and_bad_usage_is_refused() {
        // As a build before fair share wrote it: no `usage` in the header.
        let dir = tempfile::tempdir().unwrap();
        let (store, r) = import_into(dir.path(), &[record(1, "a", 1)]);
        assert_eq!(r.unwrap(), 1);
        assert_eq!(store.usage().unwrap(), None);
        let mut out = Vec::new();
        export(&store, &mut out, None).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(!text.lines().next().unwrap().contains("usage"), "{text}");

        let dir = tempfile::tempdir().unwrap();
        let store = Store::Embedded(Embedded::open(&dir.path().join("state.redb")).unwrap());
        let text = "{\"hyperplan\":\"state\",\"format\":2,\"epoch\":3,\"nextJobId\":1,\"usage\":{\"at\":5,\"rows\":[{\"queue\":\"default\",\"user\":\"eve\",\"usage\":-1.0}]}}\n";
        let e = import(
            &store,
            &mut text.as_bytes(),
            "in.jsonl",
            &PlannerConfig::default(),
            &any(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("in.jsonl:1: usage of user \"eve\" in queue \"default\" is -1"),
            "{e}"
        );
        assert_eq!(store.usage().unwrap(), None, "nothing imported");
    }

    #[test]
    fn ids_at_the_top_of_the_range_are_refused() {
        for id in [u64::MAX, MAX_JOB_ID + 1, 0] {
            let dir = tempfile::tempdir().unwrap();
            let (store, r) = import_into(dir.path(), &[record(1, "a", 1), record(id, "b", 1)]);
            let e = r.unwrap_err().to_string();
            assert!(
                e.contains(&format!("in.jsonl:3: job \"b\" has id {id}; ids are from 1 to")),
                "{e}"
            );
            assert!(store.is_empty().unwrap());
        }
        let dir = tempfile::tempdir().unwrap();
        let (store, r) = import_into(dir.path(), &[record(MAX_JOB_ID, "top", 1)]);
        assert_eq!(r.unwrap(), 1);
        assert_eq!(store.summary().unwrap().next_job_id, MAX_JOB_ID + 1);
    }

    #[test]
    fn records_a_start_would_not_load_are_refused_each_named() {
        let dir = tempfile::tempdir().unwrap();
        let mut short = record(4, "short", 3);
        short.tasks.truncate(1);
        let huge = record(5, "huge", 1);
        let mut huge = huge;
        huge.spec.tasks[0].replicas = 1_000_000_000;
        let (store, r) = import_into(
            dir.path(),
            &[
                record(1, "twin", 1),
                record(2, "twin", 1),
                record(3, "fine", 1),
                short,
                huge,
            ],
        );
        let e = r.unwrap_err().to_string();
        assert!(e.contains("3 job(s) a planner would not load; nothing imported"), "{e}");
        assert!(
            e.contains("in.jsonl:3: job \"twin\" (id 2): a job of that name is already loaded"),
            "{e}"
        );
        assert!(
            e.contains("in.jsonl:5: job \"short\" (id 4): its spec makes 3 tasks, its record has 1"),
            "{e}"
        );
        assert!(
            e.contains(
                "in.jsonl:6: job \"huge\" (id 5): its spec makes 1000000000 tasks, more than [limits] maxTasksPerJob"
            ),
            "{e}"
        );
        assert!(store.is_empty().unwrap());
    }

    #[test]
    fn an_export_names_its_cluster_and_another_clusters_store_refuses_it_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (cluster("cluster-a"), cluster("cluster-b"));
        let from = Store::Embedded(
            Embedded::open_as(
                &dir.path().join("a.redb"),
                crate::store::embedded::Create::Start,
                Some(&a),
            )
            .unwrap(),
        );
        from.commit(&Batch {
            jobs: vec![record(1, "a", 1).persist().unwrap()],
            next_job_id: Some(2),
            usage: None,
            drains: None,
        })
        .unwrap();
        let mut out = Vec::new();
        export(&from, &mut out, Some(&b)).unwrap();
        let text = String::from_utf8(out).unwrap();
        let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(
            header["caSha256"],
            a.fingerprint.as_str(),
            "the store's, not the exporter's"
        );

        // Into a store of cluster B (B's planner imports): refused, both named.
        let to = Store::Embedded(Embedded::open(&dir.path().join("b.redb")).unwrap());
        let by_b = Importing {
            ours: Ok(b.clone()),
            force: false,
        };
        let e = import(&to, &mut text.as_bytes(), "a.jsonl", &PlannerConfig::default(), &by_b)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("a.jsonl:1: the export is of another cluster"), "{e}");
        assert!(e.contains(&a.fingerprint) && e.contains(&b.fingerprint), "{e}");
        assert!(e.contains("/etc/cluster-b/ca.pem") && e.contains("--force"), "{e}");
        assert!(to.is_empty().unwrap(), "nothing imported");
        // A store that records B refuses it even where the importer's CA is unknown.
        to.set_cluster(&b.fingerprint).unwrap();
        let e = import(&to, &mut text.as_bytes(), "a.jsonl", &PlannerConfig::default(), &any())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("the cluster recorded in {}", to.at().display())),
            "{e}"
        );
        // Where the importer's CA is unknown, the new store takes the export's cluster
        // (B's planner then refuses it at its start).
        let unknown = Store::Embedded(Embedded::open(&dir.path().join("c.redb")).unwrap());
        import(
            &unknown,
            &mut text.as_bytes(),
            "a.jsonl",
            &PlannerConfig::default(),
            &any(),
        )
        .unwrap();
        assert_eq!(unknown.cluster().unwrap().as_deref(), Some(a.fingerprint.as_str()));

        // Forced: imported, and the store stays B's.
        let forced = Importing { force: true, ..by_b };
        assert_eq!(
            import(&to, &mut text.as_bytes(), "a.jsonl", &PlannerConfig::default(), &forced).unwrap(),
            1
        );
        assert_eq!(to.cluster().unwrap().as_deref(), Some(b.fingerprint.as_str()));
        // The same cluster's export needs no force, and the new store is that cluster's.
        let same = Store::Embedded(Embedded::open(&dir.path().join("a2.redb")).unwrap());
        let by_a = Importing {
            ours: Ok(a.clone()),
            force: false,
        };
        assert_eq!(
            import(&same, &mut text.as_bytes(), "a.jsonl", &PlannerConfig::default(), &by_a).unwrap(),
            1
        );
        assert_eq!(same.cluster().unwrap().as_deref(), Some(a.fingerprint.as_str()));
    }

    #[test]
    fn a_store_with_a_damaged_next_job_id_exports_with_the_next_id_above_its_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        {
            let s = Embedded::open(&path).unwrap();
            s.load().unwrap();
            s.commit(&Batch {
                jobs: vec![
                    record(40, "a", 1).persist().unwrap(),
                    record(41, "b", 1).persist().unwrap(),
                ],
                next_job_id: Some(42),
                usage: None,
                drains: None,
            })
            .unwrap();
        }
        crate::store::embedded::tests::flip_meta(&path, "nextJobId", 42 ^ 32);
        let store = Store::open_read_only(&crate::store::StoreConfig {
            path: path.clone(),
            ..Default::default()
        })
        .unwrap();
        let s = store.summary().unwrap();
        assert_eq!(s.damaged.len(), 1, "{s:?}");
        assert!(s.damaged[0].contains("meta key nextJobId is damaged"), "{s:?}");
        let mut out = Vec::new();
        export(&store, &mut out, None).unwrap();
        let text = String::from_utf8(out).unwrap();
        let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(header["nextJobId"], 42, "{header}");
        drop(store);
        // Moved aside and imported: a store a planner starts on, ids going on from 42.
        std::fs::rename(&path, dir.path().join("state.redb.old")).unwrap();
        let fresh = Store::Embedded(Embedded::open_with(&path, crate::store::embedded::Create::Import).unwrap());
        import(
            &fresh,
            &mut text.as_bytes(),
            "in.jsonl",
            &PlannerConfig::default(),
            &any(),
        )
        .unwrap();
        let Store::Embedded(e) = fresh else { unreachable!() };
        assert_eq!(e.load().unwrap().next_job_id, 42);
    }
}
