//! End-to-end (issue 23): queues, backfill reservations and fair-share usage with the real
//! `hyperplan-planner`, `hyperplan-agent` and `hyperplan` binaries on 127.0.0.1. A job of
//! alice holds two of three nodes; bob's job that needs all three waits with a reservation
//! (its start: the holder's start + its time limit, on all three nodes); alice's short job
//! backfills beside it, her long one waits. Fair-share usage is counted, written to the
//! store every `recalcInterval`, and survives a restart of the planner on the same store,
//! as does the reservation. Once the holder ends, the wide job starts, then the long one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{Cluster, all_running, ensure_user, euid_is_root, path_str, task_user, wait_for};
use serde_json::Value;

/// 4 CPUs a node.
const MACHINE: &str = "pack:1 numa:1(memory=17179869184) core:4 pu:1";
const NODES: [&str; 3] = ["n1", "n2", "n3"];
const LONG: Duration = Duration::from_secs(30);
/// bob's tasks run as this user (created as root); without root, as "bob", whom this
/// machine need not know (his tasks then fail at once, which still shows they started).
const OTHER_USER: &str = "hyperplan-e2e2";

/// `batch` goes before `short` (queue priority comes first): bob's wide job is ahead of
/// alice's later ones, so they may only backfill.
const PLANNER_TOML: &str = r#"
[[queue]]
name = "batch"
priority = 10
weight = 1

[[queue]]
name = "short"
priority = 0
weight = 1
maxTimeLimit = "10m"

[priority]
recalcInterval = "1s"

[scheduler]
reservations = 16
"#;

/// Runs until the file `go` exists in the work directory.
const UNTIL_GO: &str = "until [ -e go ]; do sleep 0.1; done";

struct Rig {
    c: Cluster,
    /// Submits the holder, the short and the long jobs (tasks run as this user).
    alice: String,
    /// Submits the wide job.
    bob: String,
    work: tempfile::TempDir,
}

impl Rig {
    fn start() -> Rig {
        let mut c = Cluster::start_with(&NODES, Some(PLANNER_TOML));
        let alice = task_user();
        c.issue_user(&alice);
        let bob = if euid_is_root() {
            ensure_user(OTHER_USER);
            c.issue_user(OTHER_USER);
            OTHER_USER.to_string()
        } else {
            "bob".to_string()
        };
        for n in NODES {
            c.start_agent(n, MACHINE, &[]);
        }
        for n in NODES {
            c.wait_state(n, "Ready", LONG);
        }
        let work = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        Rig { c, alice, bob, work }
    }

    /// A job file: `replicas` tasks of `cpu` each in `queue`, with `time_limit`.
    fn job(&self, name: &str, queue: &str, time_limit: &str, replicas: u32, cpu: u32, script: &str) -> PathBuf {
        self.c.write(
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\nqueue: {queue}\ntimeLimit: {time_limit}\ntasks:\n  - name: t\n    \
                 replicas: {replicas}\n    resources: {{cpu: {cpu}}}\n    workingDir: {}\n    \
                 output: /dev/null\n    command: [sh, -c, '{script}']\n",
                path_str(self.work.path())
            ),
        )
    }

    fn submit(&self, user: &str, file: &std::path::Path) {
        let out = self.c.cli(user, &["submit", path_str(file)]);
        assert!(
            out.status.success(),
            "submit {}: {}\nplanner log:\n{}",
            file.display(),
            String::from_utf8_lossy(&out.stderr),
            self.c.planner_log()
        );
    }

    fn status(&self, user: &str, name: &str) -> Value {
        self.c.jobs(user, &[name]).remove(0)
    }

    fn wait_status(&self, user: &str, name: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
        wait_for(LONG, &format!("{name} {what}"), || {
            let j = self.status(user, name);
            ok(&j).then_some(j)
        })
    }

    /// `hyperplan queues --output json`: `user`'s entry in `queue`, if any.
    fn user_share(&self, queue: &str, user: &str) -> Option<Value> {
        let v = self.c.cli_json(&self.alice, &["queues"]);
        let q = v["queues"].as_array()?.iter().find(|q| q["name"] == queue)?.clone();
        q["users"].as_array()?.iter().find(|u| u["user"] == user).cloned()
    }

    /// `user`'s usage in `queue` as the store holds it now (`state export`).
    fn stored_usage(&self, queue: &str, user: &str) -> Option<f64> {
        let file = self.work.path().join("usage-export.jsonl");
        let _ = std::fs::remove_file(&file);
        let out = std::process::Command::new(common::bin("hyperplan-planner"))
            .arg("--store")
            .arg(self.c.store())
            .args(["state", "export"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "state export: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(&file).unwrap();
        let header: Value = serde_json::from_str(text.lines().next()?).unwrap();
        let rows = header["usage"]["rows"].as_array()?;
        rows.iter()
            .find(|r| r["queue"] == queue && r["user"] == user)
            .and_then(|r| r["usage"].as_f64())
    }

    fn usage(&self, queue: &str, user: &str) -> f64 {
        self.user_share(queue, user)
            .and_then(|u| u["usage"].as_f64())
            .unwrap_or(0.0)
    }
}

/// A pending job's reservation: (start, nodes).
fn reservation(j: &Value) -> Option<(u64, Vec<String>)> {
    let r = &j["reservation"];
    let start = r["start"].as_u64()?;
    let nodes = r["nodes"]
        .as_array()?
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect();
    Some((start, nodes))
}

/// How the planner is stopped before it is started again on the same store.
#[derive(Clone, Copy, Debug)]
enum Stop {
    /// SIGTERM, and a clean exit.
    Graceful,
    /// SIGKILL.
    Kill,
}

#[test]
fn reservation_backfill_and_usage_survive_a_graceful_restart() {
    scenario(Stop::Graceful);
}

#[test]
fn reservation_backfill_and_usage_survive_a_crash() {
    scenario(Stop::Kill);
}

/// alice's holder on two nodes, bob's wide job reserved on all three, alice's short job
/// backfilled and her long one held back; usage counted; the planner restarted (`stop`)
/// on the same store: usage and the reservation are still there, the long job still
/// waits; once the holder ends the wide job starts, then the long one.
fn scenario(stop: Stop) {
    let began = Instant::now();
    let mut rig = Rig::start();
    let (alice, bob) = (rig.alice.clone(), rig.bob.clone());

    // alice holds two of the three nodes (all 4 CPUs of each), until told to end.
    rig.submit(&alice, &rig.job("hold", "batch", "40s", 2, 4, UNTIL_GO));
    let hold = rig.wait_status(&alice, "hold", "running, every task started", all_running);
    let hold_start = hold["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["startTime"].as_u64().expect("a started task has a startTime"))
        .max()
        .unwrap()
        / 1000;

    // bob's job needs all three nodes: it waits, with a reservation at the holder's
    // start + its time limit, on every node.
    rig.submit(&bob, &rig.job("wide", "batch", "20s", 3, 4, "true"));
    let wide = rig.wait_status(&bob, "wide", "pending with a reservation", |j| {
        j["status"] == "pending" && reservation(j).is_some()
    });
    let (start, nodes) = reservation(&wide).unwrap();
    assert_eq!(nodes, NODES, "{wide}");
    assert!(
        (hold_start + 39..=hold_start + 42).contains(&start),
        "reservation at {start}, the holder started at {hold_start} with 40 s: {wide}"
    );
    assert_eq!(wide["queue"], "batch", "{wide}");
    assert_eq!(wide["priority"]["queuePriority"], 10, "{wide}");

    // alice's short job (ends before the reservation) backfills on the free node; her
    // long one (ends well after it, and it holds every node) waits, though it would fit.
    rig.submit(&alice, &rig.job("short", "short", "10s", 1, 2, "sleep 2"));
    rig.wait_status(&alice, "short", "running (or done)", |j| {
        j["status"] == "running" || j["status"] == "completed"
    });
    rig.submit(&alice, &rig.job("long", "short", "5m", 1, 2, UNTIL_GO));
    // Tried (it has a reason), and still waiting once the short job gave its room back.
    rig.wait_status(&alice, "long", "tried", |j| j["reason"].is_string());
    rig.wait_status(&alice, "short", "completed", |j| j["status"] == "completed");
    let long = rig.wait_status(&alice, "long", "tried after the short job ended", |j| {
        j["reason"].is_string()
    });
    assert_eq!(long["status"], "pending", "long started across the reservation: {long}");
    assert_eq!(long["queue"], "short", "{long}");
    let wide = rig.status(&bob, "wide");
    assert_eq!(wide["status"], "pending", "{wide}");
    assert_eq!(reservation(&wide), Some((start, nodes.clone())), "{wide}");
    let (wide_rank, long_rank) = (
        wide["priority"]["rank"].as_u64().unwrap(),
        long["priority"]["rank"].as_u64().unwrap(),
    );
    assert!(wide_rank < long_rank, "wide {wide_rank}, long {long_rank}");
    assert_eq!(long["priority"]["of"], 2, "{long}");

    // Usage: alice's holder counts in `batch`, her ended short job in `short`.
    wait_for(LONG, "alice's usage in batch", || {
        (rig.usage("batch", &alice) > 0.0).then_some(())
    });
    let short_usage = wait_for(LONG, "alice's usage in short", || {
        let u = rig.usage("short", &alice);
        (u > 0.0).then_some(u)
    });
    // Written to the store every recalcInterval (1 s): wait until the stored record holds
    // the short job's final usage (read with `state export` beside the running planner).
    wait_for(LONG, "alice's final usage in short in the store", || {
        rig.stored_usage("short", &alice)
            .filter(|u| (u - short_usage).abs() <= short_usage * 1e-4)
    });
    let batch_usage = rig.usage("batch", &alice);
    let short_usage_before = rig.usage("short", &alice);
    // Seconds after the short job gave its room back, the long one still waits.
    let long = rig.status(&alice, "long");
    assert_eq!(long["status"], "pending", "long started across the reservation: {long}");
    assert!(
        (short_usage_before - short_usage).abs() < 0.5,
        "usage of an ended job does not grow: {short_usage} then {short_usage_before}"
    );

    // Restart the planner on the same store and address; agents come back by themselves.
    let addr = rig.c.addr.clone();
    match stop {
        Stop::Graceful => rig.c.stop_planner(),
        Stop::Kill => {
            rig.c.signal_planner("KILL");
            let _ = rig.c.planner.take().unwrap().wait();
        }
    }
    // What the old planner said (start_planner starts a new log): a graceful stop must
    // not place anything on its way out.
    let log_before = rig.c.planner_log();
    rig.c.start_planner(&addr);
    assert_eq!(rig.c.addr, addr);

    // Usage was loaded, not reset: the ended short job's stays what it was; the holder's
    // goes on from what was written (its 8 CPUs add 8 a second; written at most ~2 s
    // before the stop).
    let after = wait_for(
        Duration::from_secs(5),
        "alice's usage in short after the restart",
        || {
            let u = rig.usage("short", &alice);
            (u > 0.0).then_some(u)
        },
    );
    assert!(
        (after - short_usage_before).abs() <= 0.05 * short_usage_before + 0.5,
        "alice's usage in short: {short_usage_before} before the restart, {after} after"
    );
    let batch_after = rig.usage("batch", &alice);
    assert!(
        batch_after >= batch_usage - 8.0 * 3.0,
        "alice's usage in batch: {batch_usage} before the restart, {batch_after} after"
    );

    // Stopping, the old planner placed nothing (its agents' links closing are no reason
    // to walk again and hand the reserved room to a job behind).
    let stopping = log_before
        .lines()
        .skip_while(|l| !l.contains("SIGTERM"))
        .filter(|l| l.contains(" placed "))
        .collect::<Vec<_>>();
    assert!(
        stopping.is_empty(),
        "placed while stopping: {stopping:#?}\nplanner log before the restart:\n{log_before}"
    );

    // The stored reservation is shown at once, and nothing took its nodes meanwhile.
    let wide = rig.status(&bob, "wide");
    let long = rig.status(&alice, "long");
    let log = format!("{log_before}--- restarted ---\n{}", rig.c.planner_log());
    assert_eq!(wide["status"], "pending", "{wide}");
    assert_eq!(
        reservation(&wide),
        Some((start, nodes.clone())),
        "the stored reservation, at once after the restart: {wide}\nlong: {long}\nplanner log:\n{log}"
    );
    assert_eq!(
        long["status"], "pending",
        "long started across the reservation around the restart: {long}\nplanner log:\n{log}"
    );

    for n in NODES {
        rig.c.wait_state(n, "Ready", LONG);
    }
    let hold = rig.status(&alice, "hold");
    assert!(all_running(&hold), "the holder runs on after the restart: {hold}");
    // Once the planner has walked again with every agent back: still pending, reserved
    // on the same nodes, no later; the long job still waits.
    let wide = rig.wait_status(&bob, "wide", "reserved again with every agent back", |j| {
        j["reason"].as_str().is_some_and(|r| !r.starts_with("waiting for ")) && reservation(j).is_some()
    });
    let long = rig.status(&alice, "long");
    let log = format!("{log_before}--- restarted ---\n{}", rig.c.planner_log());
    assert_eq!(wide["status"], "pending", "{wide}");
    let (start2, nodes2) = reservation(&wide).unwrap();
    assert_eq!(nodes2, nodes, "{wide}");
    assert!(
        start2 <= start,
        "reserved at {start2} after the restart, {start} before: {wide}\nlong: {long}\nplanner log:\n{log}"
    );
    assert_eq!(long["status"], "pending", "{long}\nplanner log:\n{log}");

    // The holder ends: the wide job starts, then the long one.
    std::fs::write(rig.work.path().join("go"), "").unwrap();
    rig.wait_status(&alice, "hold", "completed", |j| j["status"] == "completed");
    let wide = rig.wait_status(&bob, "wide", "started", |j| j["status"] != "pending");
    assert!(wide["startTime"].is_u64(), "{wide}");
    let long = rig.wait_status(&alice, "long", "ended", |j| {
        j["status"] == "completed" || j["status"] == "failed"
    });
    assert_eq!(long["status"], "completed", "{long}");

    // Nothing is left to cancel; cancel whatever is, to be sure.
    for (user, name) in [(&alice, "hold"), (&bob, "wide"), (&alice, "long")] {
        let j = rig.status(user, name);
        if j["status"] == "pending" || j["status"] == "running" {
            assert!(rig.c.cli(user, &["cancel", name]).status.success());
        }
    }
    assert!(!rig.c.planner_log().contains("panicked"), "{}", rig.c.planner_log());
    eprintln!("policy_daemon ({stop:?} restart): {:?}", began.elapsed());
}
