//! Launch latency (issue 13): from the tick that places a 64-task job to all 64 tasks
//! running, with the real planner, agents and shepherds on this machine.
//!
//! The planner logs each placement with the time of its tick; each task's `startTime` is
//! when its shepherd had exec'd it (the agent reports it). Latency = the last task's
//! start − the placing tick. Four agents with 16 synthetic PUs each take 16 tasks of one
//! CPU each (synthetic machines are not this one: the tasks run unpinned; pinning is one
//! `sched_setaffinity` per task). Each round runs `sleep 30` tasks, measures, cancels and
//! waits until the tasks have ended.
//!
//! `cargo bench --bench launch_latency` (5 rounds; `ROUNDS=10` for more; `LAUNCHER=1`:
//! shepherds started through a launcher per agent, as the shipped units do). Not a
//! criterion bench: it measures a running system.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::daemon;
use std::path::Path;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const AGENTS: usize = 4;
const TASKS: usize = 64;
const MACHINE: &str = "pack:2 numa:1(memory=34359738368) core:8 pu:1";

struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn main() {
    let rounds: usize = std::env::var("ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(5);
    // LAUNCHER=1: shepherds start through `hyperplan-agent launcher`, as the shipped units do.
    let through_launcher = std::env::var("LAUNCHER").is_ok_and(|v| v == "1");
    let planner_bin = daemon("hyperplan-planner", "hyperplan-planner");
    let agent_bin = daemon("hyperplan-agent", "hyperplan-agent");
    let cli_bin = PathBuf::from(env!("CARGO_BIN_EXE_hyperplan"));
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let user = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_string();
    let run = |args: &[&str]| {
        let out = Command::new(&cli_bin).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let c = certs.to_str().unwrap();
    run(&["certs", "init", "--dir", c]);
    for i in 0..AGENTS {
        run(&["certs", "issue", "--dir", c, "--node", &format!("n{i}")]);
    }
    run(&["certs", "issue", "--dir", c, "--user", &user, "--role", "user"]);

    let mut procs = Procs(Vec::new());
    let planner_log = dir.path().join("planner.log");
    let store = dir.path().join("state.redb");
    let mut planner = common::planner(&planner_bin, &certs, Path::new("/dev/null"), &store)
        .args(["--tick-interval", "0.2", "--heartbeat-interval", "0.5"])
        .env("RUST_LOG", "info")
        .stderr(std::fs::File::create(&planner_log).unwrap())
        .spawn()
        .unwrap();
    let addr = common::listening(&mut planner);
    procs.0.push(planner);
    for i in 0..AGENTS {
        let node = format!("n{i}");
        let mut agent = Command::new(&agent_bin);
        agent
            .args(["run", "--config", "/dev/null", "--planner", &addr, "--node", &node])
            .args(["--synthetic", MACHINE, "--cert-dir", c, "--state-dir"])
            .arg(dir.path().join(format!("state-{node}")))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join(format!("{node}.log"))).unwrap());
        if user == "root" {
            agent.arg("--allow-root");
        }
        if through_launcher {
            // A launcher per agent (each node has its own), as hyperplan-launcher.service.
            let socket = dir.path().join(format!("launcher-{node}.sock"));
            let mut launcher = Command::new(&agent_bin);
            launcher
                .args(["launcher", "--config", "/dev/null", "--socket"])
                .arg(&socket)
                .arg("--state-dir")
                .arg(dir.path().join(format!("state-{node}")))
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.path().join(format!("launcher-{node}.log"))).unwrap());
            if user == "root" {
                launcher.arg("--allow-root");
            }
            procs.0.push(launcher.spawn().unwrap());
            wait(Duration::from_secs(30), "the launcher listening", || {
                socket.exists().then_some(())
            });
            agent.arg("--launcher").arg(&socket);
        }
        procs.0.push(agent.spawn().unwrap());
    }
    let cli = |args: &[&str]| -> Output {
        Command::new(&cli_bin)
            .args(args)
            .current_dir(dir.path())
            .env("HYPERPLAN_PLANNER", &addr)
            .env("HYPERPLAN_CERT_DIR", &certs)
            .env("HYPERPLAN_USER", &user)
            .env("XDG_CONFIG_HOME", dir.path())
            .output()
            .unwrap()
    };
    let json = |args: &[&str]| -> serde_json::Value {
        let mut a = args.to_vec();
        a.extend(["--output", "json"]);
        let out = cli(&a);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    wait(Duration::from_secs(60), "agents Ready", || {
        let v = json(&["nodes"]);
        let ready = v["nodes"]
            .as_array()
            .map_or(0, |n| n.iter().filter(|n| n["state"] == "Ready").count());
        (ready == AGENTS).then_some(())
    });

    let mut latencies = Vec::new();
    for round in 0..rounds {
        let name = format!("launch-{round}");
        let file = dir.path().join(format!("{name}.yaml"));
        std::fs::write(
            &file,
            format!(
                "name: {name}\ntasks:\n  - name: t\n    replicas: {TASKS}\n    resources: {{cpu: 1, memory: 64Mi}}\n    command: [sleep, \"30\"]\n"
            ),
        )
        .unwrap();
        let out = cli(&["submit", file.to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let job = wait(Duration::from_secs(60), "all tasks running", || {
            let v = json(&["status", &name]);
            let tasks = v["jobs"][0]["tasks"].as_array().cloned().unwrap_or_default();
            // Running with its start reported (a heartbeat may show its pid before).
            let started = |t: &&serde_json::Value| t["state"] == "running" && t["startTime"].is_u64();
            (tasks.iter().filter(started).count() == TASKS).then_some(v["jobs"][0].clone())
        });
        let last_start = job["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["startTime"].as_u64())
            .max()
            .unwrap();
        let placed = placed_at_ms(&std::fs::read_to_string(&planner_log).unwrap(), &name).expect("a placed line");
        let ms = last_start.saturating_sub(placed);
        println!("round {round}: {TASKS} tasks running {ms} ms after the placing tick");
        latencies.push(ms);
        assert!(cli(&["cancel", &name, "--grace", "1s"]).status.success());
        wait(Duration::from_secs(60), "the job cancelled and its tasks ended", || {
            let v = json(&["status", &name]);
            let j = &v["jobs"][0];
            (j["status"] == "cancelled"
                && j["tasks"]
                    .as_array()
                    .is_some_and(|ts| ts.iter().all(|t| t["state"] == "killed")))
            .then_some(())
        });
    }
    latencies.sort_unstable();
    println!(
        "launch latency, {TASKS} tasks on {AGENTS} agents{}, {rounds} rounds: median {} ms, max {} ms (target 200 ms)",
        if through_launcher { " through launchers" } else { "" },
        latencies[latencies.len() / 2],
        latencies.last().unwrap()
    );
}

/// Polls `f` every 50 ms until it gives a value, for at most `limit`.
fn wait<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The Unix time (ms) of the planner's first `placed` line for `job`: the placing tick.
/// The log's timestamps are RFC 3339 UTC (`2026-11-25T07:25:24.123456Z`).
fn placed_at_ms(log: &str, job: &str) -> Option<u64> {
    let needle = format!("job=\"{job}\"");
    let needle_bare = format!("job={job} ");
    let line = log
        .lines()
        .find(|l| l.contains("placed") && (l.contains(&needle) || l.contains(&needle_bare)))?;
    let stamp = strip_ansi(line);
    let stamp = stamp.split_whitespace().next()?;
    rfc3339_ms(stamp)
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `2026-11-25T07:25:24.123456Z` → Unix milliseconds.
fn rfc3339_ms(s: &str) -> Option<u64> {
    let (date, time) = s.trim_end_matches('Z').split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|p| p.parse::<i64>());
    let (h, min, sec) = (t.next()?.ok()?, t.next()?.ok()?, t.next()?.ok()?);
    let ms: i64 = format!("{frac:0<3}")[..3].parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(((days * 86_400 + h * 3_600 + min * 60 + sec) * 1_000) + ms).ok()
}
