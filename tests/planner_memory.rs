//! End-to-end, issue 38 ("the planner's memory"): real `hyperplan-planner`,
//! `hyperplan-agent run` and `hyperplan` binaries on 127.0.0.1. Large jobs the cluster can
//! never hold are rejected without keeping an entity (or a stored record) per replica,
//! so many of them neither grow the planner nor its store, and `hyperplan status` still
//! answers; and a status answer larger than one frame comes in pages the CLI joins, for
//! many jobs as for one job of many tasks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Cluster, path_str};

const MACHINE: &str = "pack:2 numa:1(memory=17179869184) core:4 pu:2";
const LONG: Duration = Duration::from_secs(60);

/// The planner's resident memory, in bytes.
fn rss(c: &Cluster) -> u64 {
    let pid = c.planner.as_ref().unwrap().id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

fn submit(c: &Cluster, user: &str, file: &str, text: &str) {
    let p = c.write(file, text);
    let v = c.cli_json(user, &["submit", path_str(&p)]);
    assert!(v["submitted"].as_array().is_some_and(|s| !s.is_empty()), "{v}");
}

#[test]
fn many_rejected_jobs_of_100000_replicas_leave_no_memory_behind_and_status_answers() {
    let mut c = Cluster::start(&["n1"]);
    c.start_agent("n1", MACHINE, &[]);
    c.wait_state("n1", "Ready", LONG);
    let huge =
        |i: u32| format!("name: huge-{i:02}\ntasks:\n  - name: t\n    replicas: 100000\n    resources: {{cpu: 1}}\n");
    submit(&c, "alice", "huge-00.yaml", &huge(0));
    let wait_rejected = |name: &str| {
        common::wait_for(LONG, &format!("{name} rejected"), || {
            let j = c.jobs("alice", &[name]);
            (j[0]["status"] == "rejected").then_some(())
        });
    };
    wait_rejected("huge-00");
    // After the first, the planner has made (and let go of) 100,000 tasks once.
    let first = rss(&c);
    for i in 1..16 {
        submit(&c, "alice", &format!("huge-{i:02}.yaml"), &huge(i));
        wait_rejected(&format!("huge-{i:02}"));
    }
    let grown = rss(&c).saturating_sub(first);
    eprintln!(
        "planner: {} MB after the first job, {} MB more after 15 others",
        first >> 20,
        grown >> 20
    );
    // Each job kept 100,000 task entities before (some 40 MB each, 600 MB for these).
    assert!(grown < 150 << 20, "the planner grew by {} MB", grown >> 20);
    // Every job is listed, rejected, saying why, and with no task.
    let jobs = c.jobs("alice", &[]);
    assert_eq!(jobs.len(), 16, "{jobs:?}");
    for j in &jobs {
        assert_eq!(j["status"], "rejected", "{j}");
        let reason = j["reason"].as_str().unwrap_or("");
        assert!(reason.contains("even on the empty cluster"), "{reason}");
        assert_eq!(j["tasks"].as_array().map(Vec::len), Some(0), "{j}");
    }
    let table = c.cli("alice", &["status"]);
    assert!(table.status.success(), "{}", String::from_utf8_lossy(&table.stderr));
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("huge-15") && table.contains("16 rejected"), "{table}");
    // The store holds each job's spec, not 100,000 task records per job (some 8 MB).
    let store = std::fs::metadata(c.store()).unwrap().len();
    eprintln!("store: {} KB", store >> 10);
    assert!(store < 32 << 20, "the store is {} MB", store >> 20);
    // A rejected job waits for the cluster to change (and counts among its owner's jobs
    // that have not ended) until it is cancelled.
    c.cli_json("alice", &["cancel", "huge-00"]);
    assert_eq!(c.jobs("alice", &["huge-00"])[0]["status"], "cancelled");
}

#[test]
fn a_status_answer_larger_than_a_frame_comes_in_pages() {
    // Frames of 64 KiB, and a default queue that may use 1 CPU: every job below waits
    // (pending, its tasks in the world), none is placed; no agent is needed.
    let c = Cluster::start_with(
        &[],
        Some("[server]\nmaxFrameBytes = 65536\n\n[[queue]]\nname = \"default\"\nlimit = { cpu = 1 }\n"),
    );
    let mut many = String::new();
    for i in 0..400 {
        many.push_str(&format!(
            "- {{name: j-{i:03}, tasks: [{{name: t, replicas: 1, resources: {{cpu: 2}}}}]}}\n"
        ));
    }
    submit(&c, "alice", "many.yaml", &many);
    submit(
        &c,
        "bob",
        "wide.yaml",
        "name: wide\ntasks:\n  - name: t\n    replicas: 3000\n    resources: {cpu: 2}\n",
    );
    // Some 250 KB of jobs and 300 KB of `wide`'s tasks, in frames of 64 KiB.
    let jobs = c.jobs("alice", &[]);
    assert_eq!(jobs.len(), 401);
    let mut names: Vec<&str> = jobs.iter().map(|j| j["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), 401, "each job once");
    let wide = jobs.iter().find(|j| j["name"] == "wide").unwrap();
    assert_eq!(wide["status"], "pending", "{}", wide["reason"]);
    let tasks = wide["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 3000, "every task, in order");
    assert!(
        tasks
            .iter()
            .enumerate()
            .all(|(i, t)| t["name"].as_str() == Some(format!("t-{i}").as_str())),
        "the tasks in their order"
    );
    // One job of many tasks asked for by name, and the tables.
    let one = c.jobs("bob", &["wide"]);
    assert_eq!(one[0]["tasks"].as_array().map(Vec::len), Some(3000));
    for args in [&["status"][..], &["status", "wide"], &["status", "--all"]] {
        let out = c.cli("alice", args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("wide"), "{args:?}: {text}");
    }
    let table = String::from_utf8_lossy(&c.cli("alice", &["status"]).stdout).into_owned();
    assert!(table.contains("j-399") && table.contains("401 pending"), "{table}");
    assert!(
        c.planner_log()
            .lines()
            .all(|l| !l.contains("larger than the largest frame"))
    );
}
