//! End-to-end: the planner's state survives it. Real `hyperplan-planner`, `hyperplan-agent`
//! and `hyperplan` binaries on 127.0.0.1: the planner is killed with SIGKILL while a client
//! submits job after job, and started again on the same store and port; running tasks
//! go on (same pids), are adopted again, and nothing is placed on their nodes twice. Agents
//! that run tasks a planner does not know have them killed; a task's end sent while the
//! planner was down counts once it is back. A damaged store stops the start, saying why.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Cluster, alive, all_running, bin, path_str, pids, task_user, wait_for};
use serde_json::Value;

const MACHINE: &str = "pack:1 numa:1(memory=17179869184) core:4 pu:1";
const LONG: Duration = Duration::from_secs(60);

/// A cluster whose agents run tasks for `user`, in a world-writable work directory.
struct Rig {
    c: Cluster,
    user: String,
    work: tempfile::TempDir,
}

impl Rig {
    fn start(nodes: &[&str]) -> Rig {
        let mut c = Cluster::start(nodes);
        let user = task_user();
        c.issue_user(&user);
        for n in nodes {
            c.start_agent(n, MACHINE, &[]);
        }
        for n in nodes {
            c.wait_state(n, "Ready", LONG);
        }
        let work = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        Rig { c, user, work }
    }

    fn job(&self, name: &str, replicas: u32, cpu: u32, script: &str) -> std::path::PathBuf {
        self.c.job_file(name, replicas, cpu, self.work.path(), script)
    }

    fn submit(&self, file: &std::path::Path) -> std::process::Output {
        self.c.cli(&self.user, &["submit", path_str(file)])
    }

    fn jobs(&self, args: &[&str]) -> Vec<Value> {
        self.c.jobs(&self.user, args)
    }

    fn job_status(&self, name: &str) -> Value {
        self.jobs(&[name]).remove(0)
    }

    /// Waits until the job runs with all its tasks started.
    fn wait_running(&self, name: &str) -> Value {
        wait_for(LONG, &format!("{name} running, every task started"), || {
            let j = self.job_status(name);
            all_running(&j).then_some(j)
        })
    }

    fn wait_status(&self, name: &str, status: &str) -> Value {
        wait_for(LONG, &format!("{name} {status}"), || {
            let j = self.job_status(name);
            (j["status"] == status).then_some(j)
        })
    }

    /// SIGKILL, then a new planner on the same store and port.
    fn crash_and_restart(&mut self) {
        let addr = self.c.addr.clone();
        self.c.signal_planner("KILL");
        let _ = self.c.planner.take().unwrap().wait();
        self.c.start_planner(&addr);
        assert_eq!(self.c.addr, addr);
    }
}

/// How a pending job's reason starts while it waits for agents to register after a
/// restart (agents known from the store, or others that may still come).
const AWAITING_AGENTS: &str = "waiting for ";

/// The script of a task that says it started (one line per start in `started-<task>`)
/// and runs until the file `go` exists.
const UNTIL_GO: &str = "echo $$ >> started-$HYPERPLAN_TASK; until [ -e go ]; do sleep 0.1; done";

#[test]
fn a_planner_killed_while_jobs_are_submitted_loses_no_acknowledged_job_and_keeps_its_tasks() {
    let mut rig = Rig::start(&["n1", "n2"]);
    // One task of 1 CPU on each node (4 each): the queued jobs below (4 CPUs) wait for them.
    let long = rig.job("long", 2, 3, UNTIL_GO);
    assert!(rig.submit(&long).status.success());
    let before = rig.wait_running("long");
    let before_pids = pids(&before);
    assert_eq!(before_pids.len(), 2);
    let placed_on: BTreeMap<String, String> = before["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                t["node"].as_str().unwrap().to_string(),
            )
        })
        .collect();

    // A client submits job after job; a submit that fails for want of a planner is tried
    // again, and "exists" then means the first try was written before the crash.
    let files: Vec<_> = (0..1000).map(|i| rig.job(&format!("q{i:04}"), 1, 4, "true")).collect();
    let acked = Arc::new(std::sync::Mutex::new(Vec::<usize>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let client = {
        let (acked, stop) = (acked.clone(), stop.clone());
        let (addr, certs, dir, user) = (
            rig.c.addr.clone(),
            rig.c.certs(),
            rig.c.dir.path().to_path_buf(),
            rig.user.clone(),
        );
        std::thread::spawn(move || {
            let mut written_before_crash = Vec::new();
            for (i, f) in files.iter().enumerate() {
                loop {
                    if stop.load(Ordering::SeqCst) {
                        return written_before_crash;
                    }
                    let out = Command::new(common::hyperplan_bin())
                        .args(["submit", path_str(f)])
                        .current_dir(&dir)
                        .env("HYPERPLAN_PLANNER", &addr)
                        .env("HYPERPLAN_CERT_DIR", &certs)
                        .env("HYPERPLAN_USER", &user)
                        .env("XDG_CONFIG_HOME", &dir)
                        .output()
                        .unwrap();
                    let err = String::from_utf8_lossy(&out.stderr);
                    if out.status.success() {
                        acked.lock().unwrap().push(i);
                        break;
                    }
                    if err.contains("exists") {
                        written_before_crash.push(i);
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            written_before_crash
        })
    };
    wait_for(LONG, "100 acknowledged submits", || {
        (acked.lock().unwrap().len() >= 100).then_some(())
    });
    rig.crash_and_restart();
    wait_for(LONG * 3, "the client's last submit", || {
        client.is_finished().then_some(())
    });
    stop.store(true, Ordering::SeqCst);
    let written_before_crash = client.join().unwrap();
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 990, "acknowledged {}", acked.len());

    // Every acknowledged job is there, once; so is every job written before the crash.
    let jobs = rig.jobs(&["--all"]);
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for j in &jobs {
        *count.entry(j["name"].as_str().unwrap().to_string()).or_default() += 1;
    }
    for i in acked.iter().chain(&written_before_crash) {
        assert_eq!(count.get(&format!("q{i:04}")), Some(&1), "q{i:04}: {count:?}");
    }
    assert!(count.values().all(|&n| n == 1), "a job twice: {count:?}");
    let ids: std::collections::BTreeSet<u64> = jobs.iter().map(|j| j["id"].as_u64().unwrap()).collect();
    assert_eq!(ids.len(), jobs.len(), "ids are unique");

    // The running tasks were not disturbed: same pids, alive, started once, adopted.
    let after = rig.wait_running("long");
    assert_eq!(pids(&after), before_pids);
    for pid in &before_pids {
        assert!(alive(*pid), "pid {pid} survived the planner");
    }
    for t in after["tasks"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        assert_eq!(t["node"].as_str(), placed_on.get(name).map(String::as_str));
        assert_eq!(t["state"], "running");
        let starts = std::fs::read_to_string(rig.work.path().join(format!("started-{name}"))).unwrap();
        assert_eq!(starts.lines().count(), 1, "{name} started once: {starts}");
    }
    // Nothing is placed on the nodes `long` holds: every queued job still waits, once the
    // planner has tried each with both agents back (until then its reason is that it waits
    // for them). It tries again only when room is given back or the nodes change: neither
    // happens until `long` ends.
    wait_for(LONG, "every queued job tried with both agents back", || {
        rig.jobs(&["--all"])
            .iter()
            .filter(|j| j["name"].as_str().unwrap().starts_with('q') && j["status"] == "pending")
            .all(|j| j["reason"].as_str().is_some_and(|r| !r.starts_with(AWAITING_AGENTS)))
            .then_some(())
    });
    let placed: Vec<String> = rig
        .jobs(&["--all"])
        .iter()
        .filter(|j| j["name"].as_str().unwrap().starts_with('q') && j["status"] != "pending")
        .map(|j| format!("{} {}", j["name"], j["status"]))
        .collect();
    assert!(placed.is_empty(), "placed beside long's tasks: {placed:?}");
    // Once `long` ends, the queue moves.
    std::fs::write(rig.work.path().join("go"), "").unwrap();
    rig.wait_status("long", "completed");
    wait_for(LONG, "a queued job ran", || {
        rig.jobs(&["--all"])
            .iter()
            .any(|j| j["status"] == "completed" && j["name"] != "long")
            .then_some(())
    });
    assert!(!rig.c.planner_log().contains("panicked"));
}

#[test]
fn submit_wait_waits_through_a_restart_for_a_job_whose_agents_are_not_back_yet() {
    let mut rig = Rig::start(&["n1", "n2"]);
    let addr = rig.c.addr.clone();
    // `long` holds one whole node; `wide` needs both, and waits for it.
    let long = rig.job("long", 1, 4, UNTIL_GO);
    assert!(rig.submit(&long).status.success());
    let busy = rig.wait_running("long")["tasks"][0]["node"]
        .as_str()
        .unwrap()
        .to_string();
    let idle = if busy == "n1" { "n2" } else { "n1" };
    let wide = rig.job("wide", 2, 4, "true");
    let mut waiter = rig
        .c
        .cli_command(&rig.user, &["submit", "--wait", path_str(&wide)])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(LONG, "wide submitted, pending", || {
        rig.jobs(&["--all"])
            .into_iter()
            .find(|j| j["name"] == "wide" && j["status"] == "pending")
    });
    // The planner dies; meanwhile the idle node's agent goes too. The new planner knows
    // `long`'s node from the store, not the idle one.
    rig.c.signal_planner("KILL");
    let _ = rig.c.planner.take().unwrap().wait();
    rig.c.kill_agent(idle);
    rig.c.start_planner(&addr);
    rig.c.wait_state(&busy, "Ready", LONG);
    // With only `long`'s node back, `wide` could never run yet: it waits, saying why,
    // and so does its `submit --wait`.
    let j = wait_for(LONG, "wide waiting for the agents", || {
        let j = rig.job_status("wide");
        j["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("waiting for agents to register after the planner restarted"))
            .then_some(j)
    });
    assert_eq!(j["status"], "pending", "{j}");
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(rig.job_status("wide")["status"], "pending");
        assert!(waiter.try_wait().unwrap().is_none(), "submit --wait ended");
    }
    // The agent comes back, `long` ends: `wide` runs, and `submit --wait` ends with it.
    rig.c.start_agent(idle, MACHINE, &[]);
    rig.c.wait_state(idle, "Ready", LONG);
    std::fs::write(rig.work.path().join("go"), "").unwrap();
    rig.wait_status("long", "completed");
    let out = wait_for(LONG, "submit --wait to end", || waiter.try_wait().unwrap());
    let mut said = String::new();
    use std::io::Read;
    waiter.stderr.take().unwrap().read_to_string(&mut said).unwrap();
    assert!(out.success(), "{out:?}: {said}");
    assert!(said.contains("job wide (id 2): completed"), "{said}");
    assert!(!rig.c.planner_log().contains("rejected"), "{}", rig.c.planner_log());
}

#[test]
fn unknown_tasks_are_killed_and_an_end_sent_while_the_planner_was_down_counts() {
    let mut rig = Rig::start(&["n1"]);
    let addr = rig.c.addr.clone();
    // A planner on a new, empty store (same epoch: the first): the node's running task
    // is unknown to it, and is killed.
    let orphan = rig.job("orphan", 1, 1, UNTIL_GO);
    assert!(rig.submit(&orphan).status.success());
    let pid = pids(&rig.wait_running("orphan"))[0];
    rig.c.signal_planner("KILL");
    let _ = rig.c.planner.take().unwrap().wait();
    std::fs::rename(rig.c.store(), rig.c.dir.path().join("old.redb")).unwrap();
    // With its marker: the store is moved aside on purpose (else the start refuses the
    // missing store without --init).
    std::fs::rename(
        rig.c.dir.path().join("state.redb.created"),
        rig.c.dir.path().join("old.redb.created"),
    )
    .unwrap();
    rig.c.start_planner(&addr);
    wait_for(LONG, "the unknown task killed", || (!alive(pid)).then_some(()));
    assert!(rig.c.planner_log().contains("orphan"), "{}", rig.c.planner_log());

    // The planner dies while a task runs; meanwhile the task ends. Its end waits on the
    // node's disk and counts once the planner is back.
    let quick = rig.job("quick", 1, 1, UNTIL_GO);
    assert!(rig.submit(&quick).status.success());
    let j = rig.wait_running("quick");
    let pid = pids(&j)[0];
    rig.c.signal_planner("KILL");
    let _ = rig.c.planner.take().unwrap().wait();
    std::fs::write(rig.work.path().join("go"), "").unwrap();
    wait_for(LONG, "the task ended", || (!alive(pid)).then_some(()));
    rig.c.start_planner(&addr);
    let j = rig.wait_status("quick", "completed");
    assert_eq!(j["exitCode"], 0);
    assert_eq!(pids(&j), vec![pid]);

    // Ended before this start: on disk only, found by name and by --since.
    rig.c.stop_planner();
    rig.c.start_planner(&addr);
    let j = rig.job_status("quick");
    assert_eq!(
        (j["status"].as_str(), j["exitCode"].as_i64()),
        (Some("completed"), Some(0)),
        "{j}"
    );
    assert_eq!(j["tasks"][0]["pid"].as_u64(), Some(pid));
    let recent: Vec<String> = rig
        .jobs(&["--since", "1h"])
        .iter()
        .map(|j| j["name"].to_string())
        .collect();
    assert!(recent.contains(&"\"quick\"".to_string()), "{recent:?}");
}

#[test]
fn a_damaged_store_stops_the_start_naming_the_file_and_check_says_what_it_found() {
    let mut c = Cluster::start(&[]);
    // A store with a job in it.
    c.write(
        "one.yaml",
        "name: one\ntasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 1}\n",
    );
    assert!(c.cli("alice", &["submit", "one.yaml"]).status.success());
    c.stop_planner();
    let store = c.store();
    let check = |path: &std::path::Path| {
        Command::new(bin("hyperplan-planner"))
            .args(["--config", "/dev/null", "--check", "--store"])
            .arg(path)
            .output()
            .unwrap()
    };
    let out = check(&store);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("1 live job(s)"), "{stdout}");

    // Export, then import into a new file: the same job.
    let export = c.dir.path().join("backup.jsonl");
    let out = Command::new(bin("hyperplan-planner"))
        .args(["--config", "/dev/null", "--store"])
        .arg(&store)
        .args(["state", "export"])
        .arg(&export)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&export).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.lines().nth(1).unwrap().contains("\"name\":\"one\""), "{text}");
    let copy = c.dir.path().join("copy.redb");
    let import = |file: &std::path::Path| {
        Command::new(bin("hyperplan-planner"))
            .args(["--config", "/dev/null", "--store"])
            .arg(&copy)
            .args(["state", "import"])
            .arg(file)
            .output()
            .unwrap()
    };
    let out = import(&export);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&check(&copy).stdout).contains("1 live job(s)"));
    // A second import into a store that has jobs is refused; so is a bad line, by number.
    let out = import(&export);
    assert!(String::from_utf8_lossy(&out.stderr).contains("already holds jobs"));
    let bad = c.write(
        "bad.jsonl",
        &format!("{}\n{{\"live\": true}}\n", text.lines().next().unwrap()),
    );
    std::fs::remove_file(&copy).unwrap();
    let err = String::from_utf8_lossy(&import(&bad).stderr).into_owned();
    assert!(err.contains("bad.jsonl:2:"), "{err}");

    // Damaged files: the start stops with the file named, and so does --check.
    let bytes = std::fs::read(&store).unwrap();
    let garbage = c.write("garbage.redb", "this is not a database\n");
    let truncated = c.dir.path().join("truncated.redb");
    std::fs::write(&truncated, &bytes[..bytes.len() / 3]).unwrap();
    for damaged in [&garbage, &truncated] {
        let out = Command::new(bin("hyperplan-planner"))
            .args(["--listen", "127.0.0.1:0", "--config", "/dev/null", "--cert-dir"])
            .arg(c.certs())
            .arg("--store")
            .arg(damaged)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(path_str(damaged)), "{err}");
        assert!(!err.contains("panicked"), "{err}");
        let out = check(damaged);
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stdout).contains("FAILING"));
    }
}
