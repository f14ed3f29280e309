//! The accounting database at a year's size (issue 40): 1,000,000 ended jobs written the
//! way the planner's exporter writes them, then the questions people ask of it.
//!
//! Jobs: fixed-seed xorshift; 500 users in 25 accounts, 5 queues; ends spread evenly
//! over 365 days; 1–64 nodes of 64 cores, 0–8 GPUs, runs of 1 minute to 2 days, waits of
//! 0 s to 1 day; one task row per node. Each is a real `JobRecord` turned into rows by
//! `rows_of`, written in pages of `exporter::PAGE` (2,000) jobs per transaction with the
//! cursor, as `planner/src/accounting/exporter.rs` does.
//!
//! Measured (SQLite, the default, in a temp dir on this machine's disk):
//!
//! - `ingest`: ended jobs written per second (rows_of + the transaction);
//! - `history --user`: one user's jobs of the last 30 days (about 60 jobs);
//! - `history --account`: one account's of the last 7 days;
//! - `report usage --by user|account`: over the whole year;
//! - `report waits`: over the whole year;
//! - `report utilisation`: over the last 30 days (the tasks table, joined with the nodes').
//!
//! Each query is run 5 times; the median is reported. Run:
//! `cargo bench -p hyperplan-accounting --bench accounting --no-run`, then
//! `target/release/deps/accounting-* --bench`.
//! `ACCOUNTING_JOBS` sets the number of jobs (1,000,000), `ACCOUNTING_DB` a SQLite file to
//! keep (it must not exist yet); `ACCOUNTING_URL` (postgres://…)
//! and `ACCOUNTING_PASSWORD_FILE` run it against PostgreSQL instead.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use hyperplan_accounting::target::PostgresTarget;
use hyperplan_accounting::topology::NodeCapacity;
use hyperplan_accounting::{Cursor, Db, Target, Topology, rows_of};
use hyperplan_core::model::components::{JobPhase, TaskPhase};
use hyperplan_core::model::jobstate::Verdict;
use hyperplan_core::model::record::{JobRecord, StateRecord, TaskRecord};
use hyperplan_shared::history::{HistoryQuery, ReportKind, ReportQuery, UsageBy};
use hyperplan_shared::taskend::{TaskEnd, TaskOutcome};

const YEAR: u64 = 365 * 86_400;
/// The bench's "now": 2026-12-01T00:00:00Z (fixed: the figures do not depend on the date).
const NOW: u64 = 1_795_996_800;
const USERS: u64 = 500;
const ACCOUNTS: u64 = 25;
const QUEUES: [&str; 5] = ["default", "gpu", "long", "short", "urgent"];
const NODES: u64 = 1024;
const PAGE: usize = 2_000;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn template() -> hyperplan_shared::JobSpec {
    let text = "name: t\ntasks:\n  - name: w\n    replicas: 1\n    resources: {cpu: 64, memory: 256Gi, nvidia.com/gpu: 8}\n    command: [\"true\"]\n";
    hyperplan_shared::parse_jobs(text, std::path::Path::new("bench.yaml"))
        .unwrap()
        .remove(0)
}

fn record(rng: &mut Rng, id: u64, spec: &hyperplan_shared::JobSpec, total: u64) -> JobRecord {
    let end = NOW - YEAR + (id * YEAR) / total;
    let run = 60 + rng.below(2 * 86_400);
    let wait = rng.below(86_400);
    let start = end.saturating_sub(run);
    let submit = start.saturating_sub(wait);
    let user = rng.below(USERS);
    // Most jobs are small: 60 % one node, 25 % 2–4, 12 % 5–16, 3 % 17–64 (about 3.8 on average).
    let nodes = match rng.below(100) {
        0..60 => 1,
        60..85 => 2 + rng.below(3),
        85..97 => 5 + rng.below(12),
        _ => 17 + rng.below(48),
    };
    let mut spec = spec.clone();
    spec.name = format!("job{}", id % 997);
    spec.submit_time = submit;
    spec.queue = Some(QUEUES[(user % 5) as usize].to_string());
    spec.account = Some(format!("acct{}", user % ACCOUNTS));
    spec.tasks[0].replicas = nodes as u32;
    let gpus = rng.below(9);
    spec.tasks[0].resources.0.insert("nvidia.com/gpu".into(), gpus);
    let first = rng.below(NODES);
    let tasks = (0..nodes)
        .map(|i| TaskRecord {
            name: format!("w-{i}"),
            phase: TaskPhase::Finished,
            node: Some(format!("n{:04}", (first + i) % NODES)),
            rank: Some(i as u32),
            start_time: Some(start),
            numa: None,
            pid: Some(1000),
            start_ms: Some(start * 1000),
            end: Some(TaskEnd {
                outcome: TaskOutcome::Exited,
                exit_code: Some(if id.is_multiple_of(20) { 1 } else { 0 }),
                signal: None,
                pid: Some(1000),
                start_time_ms: Some(start * 1000),
                end_time_ms: end * 1000,
                cpu_seconds: run as f64 * 40.0,
                max_rss_bytes: 1 << 33,
                oom_killed: false,
                reason: None,
            }),
        })
        .collect();
    JobRecord {
        id,
        owner: format!("user{user}"),
        spec,
        state: StateRecord {
            phase: JobPhase::Finished,
            start_time: Some(start),
            end_time: Some(end),
            verdict: Some(if id.is_multiple_of(20) {
                Verdict::Failed
            } else {
                Verdict::Completed
            }),
            exit_code: Some(if id.is_multiple_of(20) { 1 } else { 0 }),
            reported: true,
            task_started: true,
            allocated_hyper_node: Some(format!("leaf{}", first / 16)),
            ..StateRecord::new()
        },
        tasks,
        sub_jobs: Vec::new(),
        requeued: 0,
    }
}

fn topology() -> Topology {
    Topology {
        nodes: (0..NODES)
            .map(|i| NodeCapacity {
                name: format!("n{i:04}"),
                cpus: 64.0,
                gpus: 8,
                memory: 512 << 30,
                hypernodes: vec![(format!("leaf{}", i / 16), 1), (format!("spine{}", i / 128), 2)],
            })
            .collect(),
    }
}

fn median(mut d: Vec<Duration>) -> Duration {
    d.sort();
    d[d.len() / 2]
}

fn timed<T>(name: &str, mut f: impl FnMut() -> T, describe: impl Fn(&T) -> String) {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..5 {
        let t = Instant::now();
        last = Some(f());
        times.push(t.elapsed());
    }
    let m = median(times);
    println!(
        "{name:<32} {:>9.1} ms   {}",
        m.as_secs_f64() * 1000.0,
        describe(&last.unwrap())
    );
}

fn main() {
    let total: u64 = std::env::var("ACCOUNTING_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let target = match std::env::var("ACCOUNTING_URL") {
        Ok(url) => Target::Postgres(PostgresTarget {
            url,
            password_file: std::env::var_os("ACCOUNTING_PASSWORD_FILE").map(Into::into),
            ca_file: None,
        }),
        Err(_) => Target::Sqlite {
            path: std::env::var_os("ACCOUNTING_DB").map_or_else(|| dir.path().join("accounting.db"), Into::into),
        },
    };
    // A kept file that exists already: its rows are asked, nothing is written.
    let reuse = matches!(&target, Target::Sqlite { path } if path.exists());
    let mut db = Db::open(&target).unwrap();
    println!("{} ended jobs into {}", total, db.describe());
    let topo = topology();
    db.set_topology("bench", &topo).unwrap();
    let spec = template();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut writing = Duration::ZERO;
    let mut converting = Duration::ZERO;
    let mut id = 1;
    while id <= total && !reuse {
        let page: Vec<JobRecord> = (id..(id + PAGE as u64).min(total + 1))
            .map(|i| record(&mut rng, i, &spec, total))
            .collect();
        let t = Instant::now();
        let tiers = topo.tiers();
        let rows: Vec<_> = page.iter().map(|r| rows_of(r, &tiers)).collect();
        converting += t.elapsed();
        let last = page.last().unwrap();
        let t = Instant::now();
        db.write(
            "bench",
            &rows,
            Cursor {
                end_time: last.ended_at(),
                job_id: last.id,
            },
        )
        .unwrap();
        writing += t.elapsed();
        id += PAGE as u64;
    }
    let took = writing + converting;
    println!(
        "{:<32} {:>9.0} jobs/s   ({} jobs in {:.1} s, of which rows_of {:.1} s; making the records not counted)",
        "ingest",
        total as f64 / took.as_secs_f64(),
        total,
        took.as_secs_f64(),
        converting.as_secs_f64()
    );
    let q = |users: Vec<String>, accounts: Vec<String>, since: u64| HistoryQuery {
        users,
        accounts,
        since: Some(since),
        ..HistoryQuery::default()
    };
    timed(
        "history --user (30 days)",
        || {
            db.history("bench", &q(vec!["user7".into()], vec![], NOW - 30 * 86_400))
                .unwrap()
        },
        |h| format!("{} jobs", h.jobs.len()),
    );
    timed(
        "history --account (7 days)",
        || {
            db.history("bench", &q(vec![], vec!["acct3".into()], NOW - 7 * 86_400))
                .unwrap()
        },
        |h| format!("{} jobs", h.jobs.len()),
    );
    timed(
        "history --job NAME (a year)",
        || {
            let mut h = q(vec![], vec![], NOW - YEAR);
            h.jobs = vec!["job42".into()];
            db.history("bench", &h).unwrap()
        },
        |h| format!("{} jobs", h.jobs.len()),
    );
    let report = |kind, by, since| ReportQuery {
        kind,
        by,
        since,
        until: NOW,
        users: Vec::new(),
    };
    for (name, by) in [
        ("report usage --by user", UsageBy::User),
        ("report usage --by account", UsageBy::Account),
    ] {
        timed(
            &format!("{name} (a year)"),
            || db.report("bench", &report(ReportKind::Usage, by, NOW - YEAR)).unwrap(),
            |r| {
                format!(
                    "{} rows, {:.0} cpu-hours",
                    r.usage.len(),
                    r.usage.iter().map(|u| u.cpu_hours).sum::<f64>()
                )
            },
        );
    }
    timed(
        "report waits (a year)",
        || {
            db.report("bench", &report(ReportKind::Waits, UsageBy::User, NOW - YEAR))
                .unwrap()
        },
        |r| format!("{} rows", r.waits.len()),
    );
    timed(
        "report utilisation (30 days)",
        || {
            db.report(
                "bench",
                &report(ReportKind::Utilisation, UsageBy::User, NOW - 30 * 86_400),
            )
            .unwrap()
        },
        |r| format!("{} rows", r.utilisation.len()),
    );
    if let Target::Sqlite { path } = &target {
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        println!("database file: {:.0} MiB", size as f64 / (1 << 20) as f64);
    }
}
