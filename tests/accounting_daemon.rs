//! End-to-end (issue 40, accounting) with the real `hyperplan-planner`, `hyperplan-agent`
//! and `hyperplan` binaries on 127.0.0.1, and a real database: SQLite (the default, a file
//! beside the state) and PostgreSQL (Debian's, a cluster made in a temp dir; skipped
//! with the reason where it cannot run).
//!
//! - Jobs that complete and fail, an array, a job with a step, charged to accounts of a
//!   tree: `history` shows each once with its state, exit code, account and steps, and
//!   `report usage` sums them by account.
//! - A `kill -9` of the planner while jobs end: every job is in the database once.
//! - PostgreSQL over TLS (the server's certificate checked against the cluster's CA)
//!   stopped while jobs end: the planner goes on, `hyperplan planners` says
//!   accounting is behind, and once it is back every job is written, none twice; the
//!   shipped Grafana dashboard's queries run on the tables.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::ha::MACHINE;
use common::postgres::Postgres;
use common::{Cluster, path_str, task_user, wait_for};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(90);

/// Accounts for `user`: science (their default) above physics.
fn accounts(user: &str) -> String {
    format!(
        "[[account]]\nname = \"science\"\nusers = [\"{user}\"]\ndefaultFor = [\"{user}\"]\n\n\
         [[account]]\nname = \"physics\"\nparent = \"science\"\n"
    )
}

/// A work directory every user may write.
fn work() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// A one-task job of 1 CPU running `sh -c script`, with `extra` job keys.
fn job_text(name: &str, extra: &str, work: &Path, script: &str) -> String {
    format!(
        "name: {name}\n{extra}tasks:\n  - name: t\n    replicas: 1\n    resources: {{cpu: 1}}\n    \
         workingDir: {}\n    output: /dev/null\n    command: [sh, -c, '{script}']\n",
        path_str(work)
    )
}

/// A planner reading `toml` and one Ready agent with 4 CPUs; the task user's certificate.
fn cluster(toml: &str, user: &str) -> Cluster {
    let mut c = Cluster::start_with(&["n1"], Some(toml));
    c.issue_user(user);
    c.start_agent("n1", MACHINE, &[]);
    c.wait_state("n1", "Ready", LONG);
    c
}

fn ended(j: &Value) -> bool {
    matches!(
        j["status"].as_str(),
        Some("completed" | "failed" | "cancelled" | "timeout" | "preempted")
    )
}

/// `history --output json` as `user` (admin `root` sees all): its jobs by sacct's JobID.
fn history(c: &Cluster, user: &str, extra: &[&str]) -> BTreeMap<String, Value> {
    let mut args = vec!["history", "--since", "1d", "--output", "json"];
    args.extend(extra);
    let out = c.ok(user, &args);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            let id = match (j.get("arrayJobId"), j.get("arrayIndex")) {
                (Some(a), Some(i)) => format!("{a}_{i}"),
                _ => j["jobId"].to_string(),
            };
            (id, j.clone())
        })
        .collect()
}

/// Waits until `history` holds `n` jobs.
fn history_of(c: &Cluster, n: usize) -> BTreeMap<String, Value> {
    let start = std::time::Instant::now();
    loop {
        let out = c.cli("root", &["history", "--since", "1d", "--output", "json", "--steps"]);
        if out.status.success() {
            let h = history(c, "root", &["--steps"]);
            if h.len() >= n {
                return h;
            }
        }
        assert!(
            start.elapsed() < LONG,
            "timed out waiting for {n} jobs in the accounting database; history said: {}\nplanner log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            c.planner_log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Every job `user` has (ended ones included) has ended.
fn wait_all_ended(c: &Cluster, user: &str, n: usize) {
    wait_for(LONG * 2, &format!("{n} jobs ended"), || {
        let jobs = c.jobs(user, &["--all"]);
        (jobs.len() >= n && jobs.iter().all(ended)).then_some(())
    });
}

#[test]
fn sqlite_history_and_reports_count_every_job_once_across_a_kill_9() {
    let user = task_user();
    let w = work();
    let mut c = cluster(&accounts(&user), &user);
    let text = [
        job_text("fine", "", w.path(), "sleep 1"),
        job_text("broken", "", w.path(), "exit 3"),
        job_text("sweep", "array: \"1-3\"\naccount: physics\n", w.path(), "true"),
        job_text("stepped", "", w.path(), "while [ ! -e go ]; do sleep 0.1; done"),
    ]
    .join("---\n");
    let file = c.write("jobs.yaml", &text);
    c.ok(&user, &["submit", path_str(&file)]);
    wait_for(LONG, "stepped running", || {
        let jobs = c.jobs(&user, &["stepped"]);
        (jobs.first().is_some_and(|j| j["status"] == "running")).then_some(())
    });
    let out = c.cli(&user, &["exec", "stepped", "--", "sh", "-c", "exit 4"]);
    assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(w.path().join("go"), "").unwrap();
    wait_all_ended(&c, &user, 6);
    let h = history_of(&c, 6);
    let by_name: BTreeMap<&str, &Value> = h.values().map(|j| (j["name"].as_str().unwrap(), j)).collect();
    assert_eq!(by_name["fine"]["state"], "COMPLETED", "{h:#?}");
    assert_eq!(by_name["fine"]["exitCode"], 0);
    assert_eq!(by_name["fine"]["account"], "science");
    assert_eq!(by_name["fine"]["user"], user.as_str());
    assert_eq!(by_name["fine"]["nodelist"], "n1");
    assert!(by_name["fine"]["coreSeconds"].as_f64().unwrap() >= 1.0, "{h:#?}");
    assert_eq!(by_name["broken"]["state"], "FAILED");
    assert_eq!(by_name["broken"]["exitCode"], 3);
    for i in 1..=3 {
        let e = by_name[format!("sweep[{i}]").as_str()];
        assert_eq!(e["account"], "physics");
        assert_eq!(e["arrayIndex"], i);
        assert_eq!(e["state"], "COMPLETED");
    }
    let steps = by_name["stepped"]["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1, "{h:#?}");
    assert_eq!(steps[0]["step"], 0);
    assert_eq!(steps[0]["exitCode"], 4);

    // Usage by account: physics has the three elements, science the rest.
    let out = c.ok(
        "root",
        &[
            "report", "usage", "--by", "account", "--since", "1d", "--output", "json",
        ],
    );
    let r: Value = serde_json::from_str(&out).unwrap();
    let usage: BTreeMap<&str, u64> = r["usage"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| (u["key"].as_str().unwrap(), u["jobs"].as_u64().unwrap()))
        .collect();
    assert_eq!(usage.get("physics"), Some(&3), "{r:#}");
    assert_eq!(usage.get("science"), Some(&3), "{r:#}"); // fine, broken, stepped

    // A kill -9 while a burst of jobs ends: each is in the database once.
    let burst: Vec<String> = (0..12)
        .map(|i| job_text(&format!("burst{i}"), "", w.path(), "sleep 0.3"))
        .collect();
    let file = c.write("burst.yaml", &burst.join("---\n"));
    c.ok(&user, &["submit", path_str(&file)]);
    wait_for(LONG, "some of the burst ended", || {
        let jobs = c.jobs(&user, &["--all"]);
        (jobs.iter().filter(|j| ended(j)).count() >= 8).then_some(())
    });
    let addr = c.addr.clone();
    c.signal_planner("KILL");
    let _ = c.planner.take().unwrap().wait();
    c.start_planner(&addr);
    wait_all_ended(&c, &user, 18);
    let h = history_of(&c, 18);
    assert_eq!(h.len(), 18, "{h:#?}");
    let db = hyperplan_accounting::Target::Sqlite {
        path: c.dir.path().join("accounting.db"),
    };
    let mut db = hyperplan_accounting::Db::open(&db).unwrap();
    use hyperplan_accounting::sql::{Kind, Sql};
    let count = |db: &mut hyperplan_accounting::Db, sql: &str| {
        db.query(&Sql::new(sql), &[Kind::Int]).unwrap()[0][0].as_i64().unwrap()
    };
    assert_eq!(count(&mut db, "SELECT COUNT(*) FROM jobs"), 18);
    assert_eq!(count(&mut db, "SELECT COUNT(DISTINCT job_id) FROM jobs"), 18);
    assert_eq!(count(&mut db, "SELECT COUNT(*) FROM tasks"), 18);
    assert_eq!(count(&mut db, "SELECT COUNT(*) FROM steps"), 1);
}

/// Makes the (stopped) server serve TLS with the cluster's planner certificate.
fn serve_tls(pg: &Postgres, certs: &Path) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let data = pg.data();
    let owner = std::fs::metadata(&data).unwrap();
    for (from, to) in [("planner.pem", "server.pem"), ("planner.key", "server.key")] {
        let dest = data.join(to);
        std::fs::copy(certs.join(from), &dest).unwrap();
        std::os::unix::fs::chown(&dest, Some(owner.uid()), Some(owner.gid())).unwrap();
        std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    use std::io::Write;
    let mut conf = std::fs::OpenOptions::new()
        .append(true)
        .open(data.join("postgresql.conf"))
        .unwrap();
    writeln!(
        conf,
        "ssl = on\nssl_cert_file = 'server.pem'\nssl_key_file = 'server.key'"
    )
    .unwrap();
}

#[test]
fn postgres_stopped_for_a_while_loses_and_doubles_nothing() {
    let Some(mut pg) = Postgres::start() else { return };
    let url = pg.create_database("acct");
    let user = task_user();
    let w = work();
    // TLS: the server shows the cluster's planner certificate (valid for 127.0.0.1); the
    // planner checks it against the cluster's CA (relative to planner.toml's directory).
    let toml = format!(
        "{}\n[accounting]\nurl = \"{url}?sslmode=require\"\npasswordFile = \"{}\"\ncaFile = \"certs/ca.pem\"\n\
         cluster = \"e2e\"\n",
        accounts(&user),
        pg.password_file().display()
    );
    let mut c = Cluster::prepare(&["n1"], Some(&toml));
    pg.stop();
    serve_tls(&pg, &c.certs());
    pg.start_again();
    c.start_planner("127.0.0.1:0");
    c.issue_user(&user);
    c.start_agent("n1", MACHINE, &[]);
    c.wait_state("n1", "Ready", LONG);

    let first: Vec<String> = (0..3)
        .map(|i| job_text(&format!("a{i}"), "", w.path(), "true"))
        .collect();
    c.ok(&user, &["submit", path_str(&c.write("a.yaml", &first.join("---\n")))]);
    wait_all_ended(&c, &user, 3);
    history_of(&c, 3);
    // The planner's connections are TLS ones.
    let planner =
        "FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = 'hyperplan-planner'";
    let tls = pg
        .psql(
            "acct",
            &format!("SELECT COUNT(*), COUNT(*) FILTER (WHERE s.ssl) {planner}"),
        )
        .unwrap();
    let (all, ssl) = tls.split_once('|').unwrap();
    assert!(all != "0" && all == ssl, "the planner's connections (all|tls): {tls}");

    // PostgreSQL goes away; jobs go on ending.
    pg.stop();
    let second: Vec<String> = (0..5)
        .map(|i| job_text(&format!("b{i}"), "", w.path(), "true"))
        .collect();
    c.ok(&user, &["submit", path_str(&c.write("b.yaml", &second.join("---\n")))]);
    wait_all_ended(&c, &user, 8);
    let planners: Value = serde_json::from_str(&c.ok("root", &["planners", "--output", "json"])).unwrap();
    let acct = &planners["planners"][0]["accounting"];
    wait_for(LONG, "planners says accounting fails", || {
        let p: Value = serde_json::from_str(&c.ok("root", &["planners", "--output", "json"])).unwrap();
        p["planners"][0]["accounting"]["error"].is_string().then_some(())
    });
    assert!(
        acct["database"].as_str().unwrap().starts_with("postgres://"),
        "{planners:#}"
    );
    let out = c.cli("root", &["history", "--since", "1d", "--output", "json"]);
    assert!(!out.status.success(), "history with the database down fails");

    pg.start_again();
    let h = history_of(&c, 8);
    assert_eq!(h.len(), 8, "{h:#?}");
    let rows = pg
        .psql(
            "acct",
            "SELECT COUNT(*), COUNT(DISTINCT job_id) FROM jobs WHERE cluster = 'e2e'",
        )
        .unwrap();
    assert_eq!(rows, "8|8");
    // Every report reads PostgreSQL's types right.
    for kind in ["usage", "utilisation", "waits"] {
        let out = c.ok("root", &["report", kind, "--since", "1d", "--output", "json"]);
        let r: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(r["kind"], kind, "{r:#}");
    }
    let waits: Value =
        serde_json::from_str(&c.ok("root", &["report", "waits", "--since", "1d", "--output", "json"])).unwrap();
    assert_eq!(waits["waits"][0]["jobs"], 8, "{waits:#}");
    // The shipped Grafana dashboard's queries run on these tables and find the jobs.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/grafana-accounting.json");
    let dash: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for p in dash["panels"].as_array().unwrap() {
        let sql = p["targets"][0]["rawSql"]
            .as_str()
            .unwrap()
            .replace("$cluster", "e2e")
            .replace("$__unixEpochFilter(end_time)", "end_time BETWEEN 0 AND 4102444800");
        let out = pg
            .psql("acct", &sql)
            .unwrap_or_else(|e| panic!("panel {}: {e}", p["title"]));
        assert!(!out.is_empty(), "panel {} finds the jobs", p["title"]);
    }
    wait_for(LONG, "planners says accounting is up to date", || {
        let p: Value = serde_json::from_str(&c.ok("root", &["planners", "--output", "json"])).unwrap();
        let a = &p["planners"][0]["accounting"];
        (a["error"].is_null() && a["behindSecs"] == 0).then_some(())
    });
}
