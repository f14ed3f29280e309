//! A randomized fault run (issue 25), as Jepsen does for databases. Two planners on etcd
//! (each reaching it through its own relay, `tests/common/blackhole.rs`), four agents in
//! network namespaces (`tests/common/netns.rs`). A client submits, cancels and looks at
//! the jobs while a seeded schedule of faults plays: kill -9 of the leader, kill -9 of an
//! agent, a node cut off and healed (shorter and longer than `nodeLostAfter`), the leader
//! cut off from etcd. Planners that exit are started again, as systemd would. Afterwards
//! a checker reads the whole history and proves:
//!
//! - every acknowledged submit is present exactly once, with the id it was given;
//! - no task of a job ran twice at once (each task holds a lock while it runs): the
//!   node-lost fence stops a cut-off node's tasks of `replace` and `requeue` jobs before
//!   the planner starts them elsewhere, so for those no overlap at all is allowed; the
//!   only overlap allowed is of a `fail` job's task on a node cut off at the time (never
//!   started again: only a job of the same name could, and names are not reused here);
//! - no PU was given twice (every look at the jobs: the running tasks of a node hold
//!   disjoint CPUs);
//! - every process of every job is gone once all have ended (cancelled ones included).
//!
//! `NEMESIS_SEED` replays a schedule (the seed is printed), `NEMESIS_SECS` sets how long
//! faults play (20 s here; the long run is `NEMESIS_SECS=600 cargo test --release --test
//! nemesis -- --nocapture`). Root, iproute2 and etcd: without them it skips, saying why.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::blackhole::{Relay, relayed_etcd};
use common::etcd::Etcd;
use common::ha::{Client, MACHINE, Planners};
use common::netns::Fabric;
use common::{alive, wait_for};
use serde_json::Value;

const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];
/// A node NotReady this long is lost, and its fenced tasks 5 s later (cuts last 2 s or
/// long enough for both: [`LONG_CUT`]).
const LOST_AFTER: u64 = 5;
/// Past NotReady (3 s), `nodeLostAfter` and the fence margin (5 s), with 3 s to spare.
const LONG_CUT: u64 = 3 + LOST_AFTER + 5 + 3;
const LONG: Duration = Duration::from_secs(180);

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// xorshift64*: the schedule's only source of chance.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// What the client did, and what it was told.
#[derive(Debug, Clone)]
enum Op {
    Submit { name: String, id: Option<u64> },
    Cancel { name: String, acked: bool },
}

/// Everything the checker reads.
#[derive(Default)]
struct History {
    ops: Vec<Op>,
    /// Jobs submitted with `onNodeLost: fail`: the only ones not fenced.
    unfenced: BTreeSet<String>,
    /// (when, node) a cut began and when it healed.
    cuts: Vec<(String, u64, u64)>,
    /// Looks at the jobs that found a PU given twice, in words.
    pu_twice: Vec<String>,
    faults: Vec<String>,
}

/// The CLI's answer as JSON, or `None` when it failed (a planner was down: normal here).
fn json(client: &Client, args: &[&str]) -> Option<Value> {
    let out = client.run(&[args, &["--output", "json"]].concat());
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
}

/// A task that runs `secs` seconds under a lock of its own (job, task): a second instance
/// running at once finds the lock taken and says so, naming the holder's node.
fn job_yaml(name: &str, work: &Path, tasks: u32, cpu: u32, secs: u64, on_node_lost: &str) -> String {
    let w = work.display();
    let lock = format!("{w}/locks/$HYPERPLAN_JOB.$HYPERPLAN_TASK");
    let script = format!(
        "exec 9>>{lock}; if flock -n 9; then echo $HYPERPLAN_NODE > {lock}.holder; \
         echo start $HYPERPLAN_JOB $HYPERPLAN_TASK $$ $HYPERPLAN_NODE >> {w}/history.log; sleep {secs}; \
         else echo double $HYPERPLAN_JOB $HYPERPLAN_TASK $$ $HYPERPLAN_NODE $(date +%s%3N) $(cat {lock}.holder) \
         >> {w}/history.log; fi"
    );
    format!(
        "name: {name}\nonNodeLost: {on_node_lost}\ntasks:\n  - name: t\n    replicas: {tasks}\n    \
         topologyPolicy: single-numa-node\n    resources: {{cpu: {cpu}}}\n    workingDir: {w}\n    \
         output: /dev/null\n    command: [sh, -c, \"{script}\"]\n"
    )
}

/// The client: submits while fewer than 8 jobs are live, cancels one now and then, and
/// at every look checks that no node gives a PU to two running tasks.
fn client_loop(client: Client, work: std::path::PathBuf, seed: u64, stop: Arc<AtomicBool>, h: Arc<Mutex<History>>) {
    let mut rng = Rng(seed ^ 0x9E37_79B9_7F4A_7C15);
    let mut n = 0u32;
    while !stop.load(Ordering::SeqCst) {
        let Some(v) = json(&client, &["status"]) else { continue };
        let jobs = v["jobs"].as_array().cloned().unwrap_or_default();
        let mut used: BTreeMap<(String, u32), String> = BTreeMap::new();
        for j in &jobs {
            for t in j["tasks"].as_array().into_iter().flatten() {
                let running = matches!(t["state"].as_str(), Some("running" | "starting"));
                let (Some(node), Some(cpus)) = (t["node"].as_str(), t["cpus"].as_str()) else {
                    continue;
                };
                if !running {
                    continue;
                }
                for cpu in hyperplan_shared::cpulist::parse_cpu_list(cpus).unwrap_or_default() {
                    let who = format!(
                        "{}/{}",
                        j["name"].as_str().unwrap_or("?"),
                        t["name"].as_str().unwrap_or("?")
                    );
                    if let Some(other) = used.insert((node.to_string(), cpu), who.clone()) {
                        h.lock()
                            .unwrap()
                            .pu_twice
                            .push(format!("{node} PU {cpu}: {other} and {who}"));
                    }
                }
            }
        }
        let live = jobs
            .iter()
            .filter(|j| matches!(j["status"].as_str(), Some("pending" | "placed" | "running")))
            .count();
        if live < 8 {
            let name = format!("j{n}");
            n += 1;
            let lost = ["replace", "requeue", "fail"][rng.below(3) as usize];
            let yaml = job_yaml(
                &name,
                &work,
                1 + rng.below(2) as u32,
                1 + rng.below(2) as u32,
                1 + rng.below(4),
                lost,
            );
            let file = work.join(format!("{name}.yaml"));
            std::fs::write(&file, yaml).unwrap();
            if lost == "fail" {
                h.lock().unwrap().unfenced.insert(name.clone());
            }
            let out = client.run(&["submit", "--output", "json", file.to_str().unwrap()]);
            let id = out
                .status
                .success()
                .then(|| serde_json::from_slice::<Value>(&out.stdout).ok())
                .flatten()
                .and_then(|v| v["ids"][0].as_u64());
            h.lock().unwrap().ops.push(Op::Submit { name, id });
        }
        if rng.below(5) == 0 {
            let acked: Vec<String> = h
                .lock()
                .unwrap()
                .ops
                .iter()
                .filter_map(|o| match o {
                    Op::Submit { name, id: Some(_) } => Some(name.clone()),
                    _ => None,
                })
                .collect();
            if !acked.is_empty() {
                let name = acked[rng.below(acked.len() as u64) as usize].clone();
                let out = client.run(&["cancel", &name]);
                h.lock().unwrap().ops.push(Op::Cancel {
                    name,
                    acked: out.status.success(),
                });
            }
        }
    }
}

#[test]
fn a_seeded_schedule_of_faults_loses_no_acknowledged_job_and_runs_nothing_twice() {
    let seed: u64 = std::env::var("NEMESIS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(25);
    let secs: u64 = std::env::var("NEMESIS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let fabric = match Fabric::new(&NODES) {
        Ok(f) => f,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    let Some(etcd) = Etcd::start() else { return };
    println!("nemesis: seed {seed}, {secs} s of faults (NEMESIS_SEED={seed} replays it)");
    let (relays, tomls) = relayed_etcd(&etcd.endpoint, 2, "/nemesis/");
    let namespaces: Vec<(String, String)> = NODES.iter().map(|n| (n.to_string(), fabric.ns(n))).collect();
    let mut ha = Planners::start_on(
        &fabric.planner_addr(),
        etcd,
        &tomls,
        3,
        "",
        &NODES,
        &namespaces,
        &["--node-lost-after", &LOST_AFTER.to_string()],
    );
    ha.start_agents();
    let work = ha.work.path().to_path_buf();
    std::fs::create_dir_all(work.join("locks")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(work.join("locks"), std::fs::Permissions::from_mode(0o777)).unwrap();

    let history = Arc::new(Mutex::new(History::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let client = {
        let (c, w, s, h) = (ha.client(), work.clone(), stop.clone(), history.clone());
        std::thread::spawn(move || client_loop(c, w, seed, s, h))
    };

    // The schedule: a fault every 2-4 s, each undone after its own time. The waits are
    // the schedule itself (what the faults last), not waits for something to happen.
    let mut rng = Rng(seed);
    let began = Instant::now();
    let supervise = |ha: &mut Planners<Etcd>, relays: &[Relay]| {
        for (i, relay) in relays.iter().enumerate() {
            if ha.exited(i).is_some() {
                relay.heal();
                ha.start_planner(i);
            }
        }
    };
    while began.elapsed() < Duration::from_secs(secs) {
        let leader = ha.leading();
        let fault = rng.below(4);
        let note = match (fault, leader) {
            (0, Some(l)) => {
                ha.kill_planner(l);
                std::thread::sleep(Duration::from_millis(500 + rng.below(1500)));
                ha.start_planner(l);
                format!("kill -9 leader planner {l}")
            }
            (1, _) => {
                let node = NODES[rng.below(4) as usize];
                ha.c.kill_agent(node);
                std::thread::sleep(Duration::from_millis(500 + rng.below(2000)));
                ha.c.start_agent(node, MACHINE, &[]);
                format!("kill -9 agent {node}")
            }
            (2, _) => {
                let node = NODES[rng.below(4) as usize];
                let long = rng.below(2) == 0;
                let from = now_ms();
                fabric.cut(node);
                std::thread::sleep(Duration::from_secs(if long { LONG_CUT } else { 2 }));
                fabric.heal(node);
                history.lock().unwrap().cuts.push((node.to_string(), from, now_ms()));
                format!("cut {node} for {} s", if long { LONG_CUT } else { 2 })
            }
            (3, Some(l)) => {
                relays[l].cut();
                wait_for(LONG, "the leader cut off from etcd exits", || ha.exited(l));
                relays[l].heal();
                ha.start_planner(l);
                format!("cut leader planner {l} off etcd")
            }
            _ => "nothing (no leader to fault)".to_string(),
        };
        supervise(&mut ha, &relays);
        println!("nemesis {:>5.1} s: {note}", began.elapsed().as_secs_f64());
        history.lock().unwrap().faults.push(note);
        std::thread::sleep(Duration::from_millis(2000 + rng.below(2000)));
    }
    stop.store(true, Ordering::SeqCst);
    client.join().unwrap();
    supervise(&mut ha, &relays);

    // Quiet: every job ends (the longest runs 4 s; lost ones are requeued or fail).
    let client = ha.client();
    let h = history.lock().unwrap();
    let acked: BTreeMap<String, u64> = h
        .ops
        .iter()
        .filter_map(|o| match o {
            Op::Submit { name, id: Some(id) } => Some((name.clone(), *id)),
            _ => None,
        })
        .collect();
    let tried: BTreeSet<String> = h
        .ops
        .iter()
        .filter_map(|o| match o {
            Op::Submit { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect();
    let all = wait_for(LONG, "every job ended", || {
        let v = json(&client, &["status", "--all"])?;
        let jobs = v["jobs"].as_array()?.clone();
        jobs.iter()
            .all(|j| !matches!(j["status"].as_str(), Some("pending" | "placed" | "running")))
            .then_some(jobs)
    });

    // 1. Every acknowledged submit exactly once, with its id; nothing nobody submitted.
    let mut bad: Vec<String> = Vec::new();
    for (name, id) in &acked {
        let v = json(&client, &["status", "--all", name]);
        let found: Vec<u64> = v
            .as_ref()
            .and_then(|v| v["jobs"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter(|j| j["name"] == name.as_str())
            .filter_map(|j| j["id"].as_u64())
            .collect();
        if found != [*id] {
            bad.push(format!("acknowledged {name} (id {id}) is there as {found:?}"));
        }
    }
    for j in &all {
        let name = j["name"].as_str().unwrap_or("?");
        if !tried.contains(name) {
            bad.push(format!("{name} is there but was never submitted"));
        }
    }
    // 2. No task twice at once; a `fail` job's with an old instance on a node cut off then
    // (killed when its link returned, within a few seconds) is the only exception.
    let log = std::fs::read_to_string(work.join("history.log")).unwrap_or_default();
    for line in log.lines().filter(|l| l.starts_with("double ")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (at, holder) = (f.get(5).and_then(|t| t.parse::<u64>().ok()), f.get(6).copied());
        let unfenced = f.get(1).is_some_and(|job| h.unfenced.contains(*job));
        let explained = unfenced
            && at.zip(holder).is_some_and(|(at, holder)| {
                h.cuts
                    .iter()
                    .any(|(node, from, to)| node == holder && *from <= at && at <= to + 10_000)
            });
        if !explained {
            bad.push(format!("ran twice at once: {line}"));
        }
    }
    // 3. No PU given twice.
    bad.extend(h.pu_twice.iter().cloned());
    // 4. Every process gone, those of cancelled jobs first among them.
    let cancelled: BTreeSet<&str> = h
        .ops
        .iter()
        .filter_map(|o| match o {
            Op::Cancel { name, acked: true } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    let mut of_cancelled = 0;
    for line in log.lines().filter(|l| l.starts_with("start ")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let Some(pid) = f.get(3).and_then(|p| p.parse::<u64>().ok()) else {
            continue;
        };
        let gone = || (!alive(pid) || is_other(pid)).then_some(());
        if gone().is_none() {
            // Ended jobs' processes may still be on their way out: a little while.
            let end = Instant::now() + Duration::from_secs(30);
            while gone().is_none() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        if gone().is_none() {
            bad.push(format!("a process of an ended job still runs: {line}"));
        }
        if f.get(1).is_some_and(|j| cancelled.contains(j)) {
            of_cancelled += 1;
        }
    }
    let starts = log.lines().filter(|l| l.starts_with("start ")).count();
    let cancels = cancelled.len();
    println!(
        "nemesis: {} faults; {} submits ({} acknowledged), {cancels} jobs cancelled ({of_cancelled} of the task starts theirs), {starts} task starts, {} double runs explained by cuts",
        h.faults.len(),
        tried.len(),
        acked.len(),
        log.lines().filter(|l| l.starts_with("double ")).count()
    );
    assert!(
        bad.is_empty(),
        "seed {seed}: {bad:#?}\nfaults: {:#?}\n{}",
        h.faults,
        ha.logs()
    );
    assert!(!acked.is_empty(), "no submit was acknowledged: {:#?}", h.ops);
}

/// Whether `pid` is now some other process than a task (a reused pid): its command line
/// is not `sh -c exec 9>>…`.
fn is_other(pid: u64) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| !String::from_utf8_lossy(&c).contains("flock -n 9"))
}
