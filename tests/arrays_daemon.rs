//! End-to-end (issue 39, arrays and dependencies) with the real `hyperplan-planner`,
//! `hyperplan-agent` and `hyperplan` binaries on 127.0.0.1: an array of 20 with `%3`
//! never runs more than 3 elements at once and every element sees its index and writes
//! its own output file; an `afterok` / `afternotok` / `afterany` pipeline and a
//! `singleton` pair start in the right order and the branch that can never run is
//! cancelled with its reason; a `kill -9` of the planner in the middle of an array with
//! a dependency on it loses and doubles nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::ha::MACHINE;
use common::{Cluster, path_str, task_user, wait_for};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(90);

fn ok(c: &Cluster, user: &str, args: &[&str]) -> String {
    c.ok(user, args)
}

/// A planner and one Ready agent, the task user's certificate, and a work directory.
fn one_node() -> (Cluster, String, tempfile::TempDir) {
    let mut c = Cluster::start(&["n1"]);
    let user = task_user();
    c.issue_user(&user);
    c.start_agent("n1", MACHINE, &[]);
    c.wait_state("n1", "Ready", LONG);
    (c, user, work())
}

/// A work directory every user may write.
fn work() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// A one-task job of 1 CPU running `sh -c script` in `work`, with `extra` job keys.
fn job_text(name: &str, extra: &str, work: &Path, output: &str, script: &str) -> String {
    format!(
        "name: {name}\n{extra}tasks:\n  - name: t\n    replicas: 1\n    resources: {{cpu: 1}}\n    \
         workingDir: {}\n    output: {output}\n    command: [sh, -c, '{script}']\n",
        path_str(work)
    )
}

/// Every job of `user` named (an array's elements included), by name.
fn by_name(c: &Cluster, user: &str) -> std::collections::BTreeMap<String, Value> {
    c.jobs(user, &["--all"])
        .into_iter()
        .map(|j| (j["name"].as_str().unwrap().to_string(), j))
        .collect()
}

fn ended(j: &Value) -> bool {
    matches!(
        j["status"].as_str(),
        Some("completed" | "failed" | "cancelled" | "timeout" | "preempted")
    )
}

/// The largest number of elements that ran at once, as they counted themselves.
fn most_at_once(work: &Path) -> u32 {
    std::fs::read_dir(work)
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().to_string();
            name.starts_with("count.")
                .then(|| std::fs::read_to_string(e.path()).unwrap())
        })
        .flat_map(|text| {
            text.lines()
                .map(|l| l.trim().parse::<u32>().unwrap())
                .collect::<Vec<_>>()
        })
        .max()
        .unwrap_or(0)
}

/// An element's script: it counts the elements running (itself included), says what it
/// saw, runs `secs`, and leaves.
fn counting(secs: u32) -> String {
    format!(
        "i=$HYPERPLAN_ARRAY_TASK_ID; touch running.$i; ls | grep -c \"^running\\.\" >> count.$i; \
         echo \"$HYPERPLAN_ARRAY_JOB_ID $i $HYPERPLAN_ARRAY_TASK_COUNT $HYPERPLAN_ARRAY_TASK_MIN $HYPERPLAN_ARRAY_TASK_MAX\" >> seen.$i; \
         sleep {secs}; rm running.$i"
    )
}

#[test]
fn an_array_of_twenty_with_a_limit_of_three_runs_three_at_a_time_and_each_sees_its_index() {
    let (c, user, w) = one_node();
    let file = c.write(
        "sweep.yaml",
        &job_text("sweep", "array: \"1-20%3\"\n", w.path(), "out-%A-%a.txt", &counting(1)),
    );
    let out = ok(&c, &user, &["submit", path_str(&file)]);
    assert!(out.contains("sweep"), "{out}");
    // `status` folds the array into one line until asked to expand it.
    let table = ok(&c, &user, &["status"]);
    assert!(table.contains("sweep[1-20%3]"), "{table}");
    assert!(!table.contains("sweep[7]"), "{table}");
    let expanded = ok(&c, &user, &["status", "--expand"]);
    assert!(expanded.contains("sweep[7]"), "{expanded}");
    // `explain` of an array is about its first waiting element.
    let explained = ok(&c, &user, &["explain", "sweep"]);
    assert!(explained.contains("sweep["), "{explained}");
    let jobs = wait_for(LONG * 2, "every element ended", || {
        let jobs = by_name(&c, &user);
        (jobs.len() == 20 && jobs.values().all(ended)).then_some(jobs)
    });
    assert!(jobs.values().all(|j| j["status"] == "completed"), "{jobs:#?}");
    let array_id = jobs["sweep[1]"]["id"].as_u64().unwrap();
    for i in 1..=20u64 {
        let j = &jobs[&format!("sweep[{i}]")];
        assert_eq!(j["id"].as_u64().unwrap(), array_id + i - 1, "ids follow");
        let seen = std::fs::read_to_string(w.path().join(format!("seen.{i}"))).unwrap();
        assert_eq!(
            seen.trim(),
            format!("{array_id} {i} 20 1 20"),
            "element {i} ran once and saw its index"
        );
        let output = w.path().join(format!("out-{array_id}-{i}.txt"));
        assert!(output.exists(), "{output:?}");
    }
    let most = most_at_once(w.path());
    assert!(most <= 3, "{most} elements ran at once");
    assert!(most >= 2, "the limit is used ({most})");
    // Ended jobs can be cancelled no more; a cancel of some elements of an ended array
    // is accepted and changes nothing.
    let out = c.cli(&user, &["cancel", "sweep[3-5]"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_pipeline_runs_in_order_and_its_failure_branch_is_cancelled_with_the_reason() {
    let (c, user, w) = one_node();
    let stamp = |name: &str, secs: u32| format!("date +%s%N > {name}.start; sleep {secs}; date +%s%N > {name}.end");
    let text = [
        job_text("prep", "", w.path(), "/dev/null", &stamp("prep", 2)),
        job_text(
            "train",
            "dependsOn: [\"afterok:prep\"]\n",
            w.path(),
            "/dev/null",
            &stamp("train", 0),
        ),
        job_text(
            "on-failure",
            "dependsOn: [\"afternotok:prep\"]\n",
            w.path(),
            "/dev/null",
            &stamp("on-failure", 0),
        ),
        job_text(
            "cleanup",
            "dependsOn: afterany:prep\n",
            w.path(),
            "/dev/null",
            &stamp("cleanup", 0),
        ),
    ]
    .join("---\n");
    let file = c.write("pipeline.yaml", &text);
    ok(&c, &user, &["submit", path_str(&file)]);
    let train = wait_for(LONG, "train waits for prep", || {
        let j = by_name(&c, &user).remove("train")?;
        j["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("Dependency: afterok:prep"))
            .then_some(j)
    });
    assert_eq!(train["status"], "pending", "{train}");
    let explain = ok(&c, &user, &["explain", "train"]);
    assert!(explain.contains("Dependency: afterok:prep"), "{explain}");
    // Two singletons of one name: the second gets a name of its own and waits for the
    // first to end.
    let nightly = job_text(
        "nightly",
        "",
        w.path(),
        "/dev/null",
        &stamp("nightly-$HYPERPLAN_JOB", 2),
    );
    let nightly = c.write("nightly.yaml", &nightly);
    ok(&c, &user, &["submit", "--dependency", "singleton", path_str(&nightly)]);
    let second = ok(&c, &user, &["submit", "--dependency", "singleton", path_str(&nightly)]);
    let jobs = wait_for(LONG, "everything ended", || {
        let jobs = by_name(&c, &user);
        (jobs.len() == 6 && jobs.values().all(ended)).then_some(jobs)
    });
    let read = |name: &str, what: &str| -> u128 {
        std::fs::read_to_string(w.path().join(format!("{name}.{what}")))
            .unwrap_or_else(|e| panic!("{name}.{what}: {e}"))
            .trim()
            .parse()
            .unwrap()
    };
    assert_eq!(jobs["prep"]["status"], "completed");
    assert_eq!(jobs["train"]["status"], "completed");
    assert_eq!(jobs["cleanup"]["status"], "completed");
    assert!(read("train", "start") >= read("prep", "end"), "train after prep");
    assert!(read("cleanup", "start") >= read("prep", "end"), "cleanup after prep");
    assert_eq!(jobs["on-failure"]["status"], "cancelled");
    assert!(
        jobs["on-failure"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("Dependency never met: afternotok:prep (completed); cancelled"),
        "{}",
        jobs["on-failure"]
    );
    assert!(
        !w.path().join("on-failure.start").exists(),
        "the failure branch never ran"
    );
    let renamed: Vec<&String> = jobs.keys().filter(|n| n.starts_with("nightly.")).collect();
    assert_eq!(renamed.len(), 1, "{second} {jobs:#?}");
    assert!(
        read(&format!("nightly-{}", renamed[0]), "start") >= read("nightly-nightly", "end"),
        "one nightly at a time"
    );
}

#[test]
fn a_planner_killed_in_the_middle_of_an_array_with_a_dependency_loses_and_doubles_nothing() {
    let (mut c, user, w) = one_node();
    let text = [
        job_text("work", "array: \"1-6%2\"\n", w.path(), "/dev/null", &counting(2)),
        job_text(
            "merge",
            "dependsOn: [\"afterok:work\"]\n",
            w.path(),
            "/dev/null",
            "ls seen.* | wc -l >> merged",
        ),
    ]
    .join("---\n");
    let file = c.write("work.yaml", &text);
    ok(&c, &user, &["submit", path_str(&file)]);
    wait_for(LONG, "two elements running", || {
        let jobs = by_name(&c, &user);
        let running = jobs.values().filter(|j| j["status"] == "running").count();
        (running == 2).then_some(())
    });
    let addr = c.addr.clone();
    c.signal_planner("KILL");
    let _ = c.planner.take().unwrap().wait();
    c.start_planner(&addr);
    let jobs = wait_for(LONG * 2, "every job ended", || {
        let jobs = by_name(&c, &user);
        (jobs.len() == 7 && jobs.values().all(ended)).then_some(jobs)
    });
    assert!(jobs.values().all(|j| j["status"] == "completed"), "{jobs:#?}");
    for i in 1..=6 {
        let seen = std::fs::read_to_string(w.path().join(format!("seen.{i}"))).unwrap();
        assert_eq!(seen.lines().count(), 1, "element {i} ran exactly once: {seen}");
    }
    let merged = std::fs::read_to_string(w.path().join("merged")).unwrap();
    assert_eq!(merged.trim(), "6", "merge ran once, after all six");
    let most = most_at_once(w.path());
    assert!(most <= 2, "{most} elements ran at once across the restart");
}
