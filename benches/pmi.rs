//! PMI (jobs with `mpi: pmi`): what a fence costs and how long an MPICH job takes to wire
//! up, with the real planner and four agents that probe this machine (`--pin on`, each its
//! own state directory and task cgroups), on 127.0.0.1.
//!
//! 1. **Fences of a 256-rank job over 4 agents.** Each rank is a small C program (compiled
//!    here with `gcc -O2`) that speaks PMI-1 on `PMI_FD` itself: init, its kvsname, a put
//!    of its key `k<rank>` (64 bytes) and a first fence; then `get`s of three other ranks'
//!    keys (exit 4 when one is wrong); then `FENCE_ROUNDS` (20) timed rounds of one put and
//!    one fence; then finalize. Each rank prints, per fence, the CLOCK_MONOTONIC times (one
//!    clock for the whole machine) of the start of its round, of its `barrier_in` and of
//!    its `barrier_out`. Reported: rank 0's own view of a round (put + fence), and the
//!    fence itself as the job sees it: from the last rank in to the first and to the last
//!    rank out.
//! 2. **Whole wire-up of a 64-rank MPICH job.** An MPI program (`mpicc.mpich`) records
//!    CLOCK_REALTIME at `main` and after `MPI_Init` plus one `MPI_Barrier`. Run by
//!    hyperplan (`mpi: pmi`, 16 ranks on each of the 4 agents) and by `mpiexec.hydra -n 64`
//!    on this machine, `RUNS` (3) times each. Reported (medians): wire-up = the latest
//!    rank's end of the barrier − the earliest rank's `main`; wall = `hyperplan submit
//!    --wait` from start to exit, or `mpiexec.hydra` from start to exit; launch spread =
//!    the latest rank's `main` − the earliest's.
//!
//! Every agent probes this whole machine, so a task asks for 1/64 (1/16) of a node's CPUs:
//! 64 (16) fit on each, no NUMA policy. A part whose compiler is missing is skipped, saying
//! why. At the end the agents, their tasks and their cgroups are stopped and removed, then
//! the planner.
//!
//! `cargo bench --bench pmi` (`FENCE_ROUNDS=50`, `RUNS=5` for more). Not a criterion
//! bench: it measures a running system.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];
const FENCE_RANKS: usize = 256;
const MPI_RANKS: usize = 64;

/// One rank of the fence job: PMI-1 by hand on `PMI_FD`. `argv[1]`: timed rounds.
const FENCE_C: &str = r#"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int fd, rank, size;
static char buf[4096];
static size_t have;
static char line[2048];

static long long now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void die(const char *what, const char *detail) {
    printf("rank %d: %s %s\n", rank, what, detail ? detail : "");
    fflush(stdout);
    exit(3);
}

static void send_line(const char *s) {
    size_t n = strlen(s);
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) die("write failed", strerror(errno));
        s += w;
        n -= (size_t)w;
    }
}

static char *read_line(void) {
    for (;;) {
        char *nl = memchr(buf, '\n', have);
        if (nl) {
            size_t len = (size_t)(nl - buf);
            memcpy(line, buf, len);
            line[len] = 0;
            memmove(buf, nl + 1, have - len - 1);
            have -= len + 1;
            return line;
        }
        if (have == sizeof buf) die("line too long", NULL);
        ssize_t r = read(fd, buf + have, sizeof buf - have);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) die("PMI socket closed", NULL);
        have += (size_t)r;
    }
}

/* Sends `req`, reads one line, which must start with `expect`. */
static char *request(const char *req, const char *expect) {
    send_line(req);
    char *l = read_line();
    if (strncmp(l, expect, strlen(expect)) != 0) {
        printf("rank %d: sent %s", rank, req);
        die("got", l);
    }
    return l;
}

static void value_of(int r, char *v) {
    int n = sprintf(v, "v%07d-", r);
    for (int i = n; i < 64; i++) v[i] = (char)('a' + (r + i) % 26);
    v[64] = 0;
}

int main(int argc, char **argv) {
    const char *e = getenv("PMI_FD");
    if (!e || !getenv("PMI_RANK") || !getenv("PMI_SIZE")) die("no PMI_FD, PMI_RANK or PMI_SIZE", NULL);
    fd = atoi(e);
    rank = atoi(getenv("PMI_RANK"));
    size = atoi(getenv("PMI_SIZE"));
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    char req[1100], kvs[300], v[80];

    char *l = request("cmd=init pmi_version=1 pmi_subversion=1\n", "cmd=response_to_init");
    if (!strstr(l, "rc=0")) die("init refused:", l);
    l = request("cmd=get_my_kvsname\n", "cmd=my_kvsname kvsname=");
    snprintf(kvs, sizeof kvs, "%s", l + strlen("cmd=my_kvsname kvsname="));

    long long start = now();
    value_of(rank, v);
    snprintf(req, sizeof req, "cmd=put kvsname=%s key=k%d value=%s\n", kvs, rank, v);
    request(req, "cmd=put_result rc=0");
    long long in = now();
    request("cmd=barrier_in\n", "cmd=barrier_out");
    long long out = now();
    printf("fence 0 %lld %lld %lld\n", start, in, out);

    int others[3] = {(rank + 1) % size, (rank + size / 2) % size, (rank + size - 1) % size};
    for (int i = 0; i < 3; i++) {
        char want[1200];
        value_of(others[i], v);
        snprintf(req, sizeof req, "cmd=get kvsname=%s key=k%d\n", kvs, others[i]);
        l = request(req, "cmd=get_result");
        snprintf(want, sizeof want, "cmd=get_result rc=0 value=%s", v);
        if (strcmp(l, want) != 0) {
            printf("rank %d: key k%d: got %s\n", rank, others[i], l);
            return 4;
        }
    }

    for (int r = 1; r <= rounds; r++) {
        start = now();
        snprintf(req, sizeof req, "cmd=put kvsname=%s key=f%dk%d value=x%d\n", kvs, r, rank, rank);
        request(req, "cmd=put_result rc=0");
        in = now();
        request("cmd=barrier_in\n", "cmd=barrier_out");
        out = now();
        printf("fence %d %lld %lld %lld\n", r, start, in, out);
    }
    request("cmd=finalize\n", "cmd=finalize_ack");
    printf("ok\n");
    return 0;
}
"#;

/// The MPI program: CLOCK_REALTIME at `main` and after `MPI_Init` + `MPI_Barrier`.
const WIREUP_C: &str = r#"
#include <mpi.h>
#include <stdio.h>
#include <time.h>

static long long now(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv) {
    long long entry = now();
    MPI_Init(&argc, &argv);
    MPI_Barrier(MPI_COMM_WORLD);
    long long ready = now();
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("wireup %d %d %lld %lld\n", rank, size, entry, ready);
    MPI_Finalize();
    return 0;
}
"#;

/// The planner and four agents on 127.0.0.1, the CLI pointed at them. Dropping it stops
/// the agents, their tasks and cgroups (as the tests' `Live` does), then the planner,
/// then removes the directory.
struct Cluster {
    planner: Child,
    agents: Vec<Child>,
    states: Vec<PathBuf>,
    cgroup_name: String,
    addr: String,
    certs: PathBuf,
    cli: PathBuf,
    user: String,
    /// Where jobs run and write their output.
    work: PathBuf,
    dir: tempfile::TempDir,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for node in NODES {
                let log = std::fs::read_to_string(self.dir.path().join(format!("agent-{node}.log")));
                let log = log.unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                eprintln!("--- agent {node}, last lines:");
                for l in tail.iter().rev() {
                    eprintln!("{l}");
                }
            }
        }
        for a in &mut self.agents {
            let _ = a.kill();
            let _ = a.wait();
        }
        // Shepherds leave the agent's session on purpose: stop them and their tasks.
        for state in &self.states {
            hyperplan_agent::tasks::stop::stop_all(state, Duration::from_secs(2));
        }
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        for node in NODES {
            hyperplan_agent::tasks::cgroup::v1::remove_all(
                Path::new(hyperplan_agent::tasks::cgroup::CGROUP_ROOT),
                &own,
                &format!("{}-{node}", self.cgroup_name),
            );
        }
        let _ = self.planner.kill();
        let _ = self.planner.wait();
    }
}

impl Cluster {
    fn start() -> Cluster {
        let planner_bin = common::daemon("hyperplan-planner", "hyperplan-planner");
        let agent_bin = common::daemon("hyperplan-agent", "hyperplan-agent");
        let (dir, certs, cli) = common::bench_dir();
        let user = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
            .unwrap()
            .trim()
            .to_string();
        let c = certs.to_str().unwrap();
        let mut issue = vec![vec!["certs", "issue", "--dir", c, "--user", &user, "--role", "user"]];
        for node in NODES {
            issue.push(vec!["certs", "issue", "--dir", c, "--node", node]);
        }
        for args in issue {
            let out = Command::new(&cli).args(&args).output().unwrap();
            assert!(
                out.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        let mut planner = common::planner(
            &planner_bin,
            &certs,
            Path::new("/dev/null"),
            &dir.path().join("state.redb"),
        )
        .args(["--tick-interval", "0.2", "--heartbeat-interval", "0.5"])
        .env("RUST_LOG", "info")
        .stderr(std::fs::File::create(dir.path().join("planner.log")).unwrap())
        .spawn()
        .unwrap();
        let addr = common::listening(&mut planner);
        let cgroup_name = format!("hp-bench-pmi-{}", std::process::id());
        let mut cluster = Cluster {
            planner,
            agents: Vec::new(),
            states: Vec::new(),
            cgroup_name,
            addr,
            certs,
            cli,
            user,
            work,
            dir,
        };
        for node in NODES {
            let state = cluster.dir.path().join(format!("state-{node}"));
            let mut agent = Command::new(&agent_bin);
            agent
                .args([
                    "run",
                    "--config",
                    "/dev/null",
                    "--planner",
                    &cluster.addr,
                    "--node",
                    node,
                ])
                .arg("--cert-dir")
                .arg(&cluster.certs)
                .args(["--pin", "on", "--state-dir"])
                .arg(&state)
                .args(["--cgroup-name", &format!("{}-{node}", cluster.cgroup_name)])
                .env("RUST_LOG", "info")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(cluster.dir.path().join(format!("agent-{node}.log"))).unwrap());
            if cluster.user == "root" {
                agent.arg("--allow-root");
            }
            cluster.states.push(state);
            cluster.agents.push(agent.spawn().unwrap());
        }
        wait(Duration::from_secs(60), "four agents Ready", || {
            let v = cluster.json(&["nodes"]);
            let ready = v["nodes"]
                .as_array()
                .map_or(0, |n| n.iter().filter(|n| n["state"] == "Ready").count());
            (ready == NODES.len()).then_some(())
        });
        cluster
    }

    fn cli_command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.cli);
        c.args(args)
            .current_dir(self.dir.path())
            .env("HYPERPLAN_PLANNER", &self.addr)
            .env("HYPERPLAN_CERT_DIR", &self.certs)
            .env("HYPERPLAN_USER", &self.user)
            .env("XDG_CONFIG_HOME", self.dir.path())
            .env_remove("RUST_LOG");
        c
    }

    fn cli(&self, args: &[&str]) -> Output {
        self.cli_command(args).output().unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.extend(["--output", "json"]);
        let out = self.cli(&a);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn status(&self, job: &str) -> Value {
        self.json(&["status", job])["jobs"][0].clone()
    }

    /// The CPUs of the smallest node, in millicores (`nodes` says whole CPUs).
    fn node_millicores(&self) -> u64 {
        let v = self.json(&["nodes"]);
        v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|n| n["cpus"]["total"].as_u64())
            .min()
            .unwrap()
            * 1000
    }

    /// Writes the job file of `replicas` ranks of `cpu_m` millicores running `command`.
    fn job_file(&self, name: &str, replicas: usize, cpu_m: u64, command: &[&str]) -> PathBuf {
        let argv: Vec<String> = command.iter().map(|a| format!("\"{a}\"")).collect();
        let body = format!(
            "name: {name}\nmpi: pmi\ntimeLimit: 300\ntasks:\n  - name: r\n    replicas: {replicas}\n    \
             resources: {{cpu: {cpu_m}m}}\n    workingDir: {}\n    command: [{}]\n",
            self.work.display(),
            argv.join(", ")
        );
        let file = self.dir.path().join(format!("{name}.yaml"));
        std::fs::write(&file, body).unwrap();
        file
    }

    /// `hyperplan submit --wait FILE` in the background; meanwhile checks (every second,
    /// not to disturb the ranks) that all `replicas` tasks were placed within a minute,
    /// one `per_node` on each agent. Returns the CLI's output and its wall time.
    fn submit_wait(&self, name: &str, file: &Path, replicas: usize, per_node: usize) -> (Output, Duration) {
        let start = Instant::now();
        let child = self
            .cli_command(&["submit", "--wait", file.to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let waiter = {
            let done = done.clone();
            std::thread::spawn(move || {
                let out = child.wait_with_output().unwrap();
                let took = start.elapsed();
                done.store(true, std::sync::atomic::Ordering::SeqCst);
                (out, took)
            })
        };
        let mut placed = false;
        while !placed {
            std::thread::sleep(Duration::from_secs(1));
            let j = self.status(name);
            let tasks = j["tasks"].as_array().cloned().unwrap_or_default();
            let mut per: BTreeMap<String, usize> = BTreeMap::new();
            for t in &tasks {
                if let Some(n) = t["node"].as_str() {
                    *per.entry(n.to_string()).or_default() += 1;
                }
            }
            if per.values().sum::<usize>() == replicas {
                assert!(
                    per.len() == NODES.len() && per.values().all(|&n| n == per_node),
                    "{name}: expected {per_node} tasks on each of {} nodes, placed {per:?}",
                    NODES.len()
                );
                placed = true;
            } else if done.load(std::sync::atomic::Ordering::SeqCst) {
                break;
            } else if start.elapsed() > Duration::from_secs(60) {
                let _ = self.cli(&["cancel", name, "--grace", "1s"]);
                panic!(
                    "{name}: {} of {replicas} tasks placed after 60 s (status {}, reason {}); nodes:\n{}",
                    per.values().sum::<usize>(),
                    j["status"],
                    j["reason"],
                    String::from_utf8_lossy(&self.cli(&["nodes"]).stdout)
                );
            }
        }
        let (out, took) = waiter.join().unwrap();
        if !out.status.success() {
            let j = self.status(name);
            let mut failed = String::new();
            for t in j["tasks"].as_array().into_iter().flatten() {
                if t["exitCode"].as_i64().is_some_and(|c| c != 0) || t["signal"].is_i64() {
                    let task = t["name"].as_str().unwrap_or("?");
                    failed.push_str(&format!("{task}: {t}\n{}\n", self.output(name, task)));
                    if failed.len() > 4000 {
                        break;
                    }
                }
            }
            panic!(
                "{name}: submit --wait failed ({:?}): {}\n{failed}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        (out, took)
    }

    fn output(&self, job: &str, task: &str) -> String {
        std::fs::read_to_string(self.work.join(format!("hyperplan-{job}-{task}.out"))).unwrap_or_default()
    }

    /// Every task's output of `job` (`replicas` tasks `r-0`…), concatenated.
    fn outputs(&self, job: &str, replicas: usize) -> String {
        (0..replicas).map(|i| self.output(job, &format!("r-{i}"))).collect()
    }
}

/// Polls `f` every 100 ms until it gives a value, for at most `limit`.
fn wait<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `compiler -O2 -o DIR/NAME DIR/NAME.c`; `Err(why)` when the compiler is not there.
fn compile(compiler: &str, source: &str, dir: &Path, name: &str) -> Result<PathBuf, String> {
    if Command::new(compiler).arg("--version").output().is_err() {
        return Err(format!("{compiler} is not installed"));
    }
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, source).unwrap();
    let exe = dir.join(name);
    let out = Command::new(compiler)
        .arg("-O2")
        .arg("-o")
        .arg(&exe)
        .arg(&c)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{compiler}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(exe)
}

/// The nearest-rank percentile `p` (0–1] of `v`, sorted here.
fn pct(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let i = ((p * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
    s[i]
}

fn ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

/// The load averages (1, 5, 15 minutes): other work on these cores shows in the figures.
fn loadavg() -> String {
    let l = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// `nproc` and the CPU model.
fn machine() -> String {
    let nproc = Command::new("nproc")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("nproc {nproc}, {model}")
}

/// What part 1 measured, in ms.
struct Fences {
    rounds: usize,
    /// Rank 0's put + fence, per timed round.
    rank0: Vec<f64>,
    /// Last rank into the barrier → first rank out, per timed round.
    in_first_out: Vec<f64>,
    /// Last rank in → last rank out, per timed round.
    in_last_out: Vec<f64>,
    /// The first fence: rank 0's view, last in → last out, and the spread of the ranks'
    /// arrivals (first rank in → last rank in).
    first_rank0: f64,
    first_in_first_out: f64,
    first_in_last_out: f64,
    first_arrivals: f64,
}

fn fences(cluster: &Cluster, exe: &Path, rounds: usize) -> Fences {
    let node_m = cluster.node_millicores();
    let cpu_m = node_m / (FENCE_RANKS / NODES.len()) as u64;
    let name = "fence-256";
    let file = cluster.job_file(name, FENCE_RANKS, cpu_m, &[exe.to_str().unwrap(), &rounds.to_string()]);
    eprintln!("pmi: fence job, {FENCE_RANKS} ranks of {cpu_m}m CPU ({node_m}m per node), {rounds} timed rounds");
    let (_, took) = cluster.submit_wait(name, &file, FENCE_RANKS, FENCE_RANKS / NODES.len());
    eprintln!("pmi: fence job done in {:.2} s", took.as_secs_f64());
    // rank → round → (start, in, out)
    let mut times: BTreeMap<usize, BTreeMap<usize, (i64, i64, i64)>> = BTreeMap::new();
    let mut ok = 0;
    for i in 0..FENCE_RANKS {
        let out = cluster.output(name, &format!("r-{i}"));
        let mut rank_times = BTreeMap::new();
        for line in out.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            match w.as_slice() {
                ["fence", r, s, i, o] => {
                    rank_times.insert(
                        r.parse().unwrap(),
                        (s.parse().unwrap(), i.parse().unwrap(), o.parse().unwrap()),
                    );
                }
                ["ok"] => ok += 1,
                _ => panic!("r-{i}: unexpected line {line:?}"),
            }
        }
        assert_eq!(rank_times.len(), rounds + 1, "r-{i}: {out}");
        times.insert(i, rank_times);
    }
    assert_eq!(ok, FENCE_RANKS, "every rank finalized");
    // Task r-i is rank i only by habit: take rank 0 from the status.
    let j = cluster.status(name);
    let rank0_task = j["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["rank"] == 0)
        .and_then(|t| t["name"].as_str())
        .and_then(|n| n.strip_prefix("r-"))
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap();
    let round = |r: usize| {
        let rows: Vec<(i64, i64, i64)> = times.values().map(|t| t[&r]).collect();
        let first_in = rows.iter().map(|t| t.1).min().unwrap();
        let last_in = rows.iter().map(|t| t.1).max().unwrap();
        let first_out = rows.iter().map(|t| t.2).min().unwrap();
        let last_out = rows.iter().map(|t| t.2).max().unwrap();
        let (s0, _, o0) = times[&rank0_task][&r];
        (
            ms(o0 - s0),
            ms(first_out - last_in),
            ms(last_out - last_in),
            ms(last_in - first_in),
        )
    };
    let mut f = Fences {
        rounds,
        rank0: Vec::new(),
        in_first_out: Vec::new(),
        in_last_out: Vec::new(),
        first_rank0: 0.0,
        first_in_first_out: 0.0,
        first_in_last_out: 0.0,
        first_arrivals: 0.0,
    };
    (
        f.first_rank0,
        f.first_in_first_out,
        f.first_in_last_out,
        f.first_arrivals,
    ) = round(0);
    for r in 1..=rounds {
        let (a, b, c, _) = round(r);
        f.rank0.push(a);
        f.in_first_out.push(b);
        f.in_last_out.push(c);
    }
    f
}

/// One wire-up run, in ms.
struct Run {
    /// The latest rank done with `MPI_Init` + `MPI_Barrier` − the earliest rank's `main`.
    wireup: f64,
    /// The launcher's (`hyperplan submit --wait`, `mpiexec.hydra`) start to exit.
    wall: f64,
    /// The latest rank's `main` − the earliest's: how spread out the launch was.
    spread: f64,
}

/// A run's wire-up and spread from the programs' lines; `wall` as given.
fn run_of(text: &str, wall: Duration) -> Run {
    let mut rows = Vec::new();
    for line in text.lines() {
        if let ["wireup", rank, size, entry, ready] = line.split_whitespace().collect::<Vec<_>>().as_slice() {
            assert_eq!(size.parse::<usize>().unwrap(), MPI_RANKS, "{line}");
            rows.push((
                rank.parse::<usize>().unwrap(),
                entry.parse::<i64>().unwrap(),
                ready.parse::<i64>().unwrap(),
            ));
        }
    }
    let mut ranks: Vec<usize> = rows.iter().map(|r| r.0).collect();
    ranks.sort_unstable();
    ranks.dedup();
    assert_eq!(ranks.len(), MPI_RANKS, "every rank reported once:\n{text}");
    let first = rows.iter().map(|r| r.1).min().unwrap();
    let last_entry = rows.iter().map(|r| r.1).max().unwrap();
    let last = rows.iter().map(|r| r.2).max().unwrap();
    Run {
        wireup: ms(last - first),
        wall: wall.as_secs_f64() * 1e3,
        spread: ms(last_entry - first),
    }
}

fn hyperplan_wireup(cluster: &Cluster, exe: &Path, run: usize) -> Run {
    let node_m = cluster.node_millicores();
    let cpu_m = node_m / (MPI_RANKS / NODES.len()) as u64;
    let name = format!("wireup-{run}");
    let file = cluster.job_file(&name, MPI_RANKS, cpu_m, &[exe.to_str().unwrap()]);
    let (_, took) = cluster.submit_wait(&name, &file, MPI_RANKS, MPI_RANKS / NODES.len());
    run_of(&cluster.outputs(&name, MPI_RANKS), took)
}

fn hydra_wireup(exe: &Path) -> Run {
    let start = Instant::now();
    let out = Command::new("timeout")
        .args(["-k", "5", "300", "mpiexec.hydra", "-n", &MPI_RANKS.to_string()])
        .arg(exe)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "mpiexec.hydra: {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    run_of(&String::from_utf8_lossy(&out.stdout), took)
}

fn median(v: &[f64]) -> f64 {
    pct(v, 0.5)
}

fn list(v: &[f64]) -> String {
    v.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(", ")
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument that is not ours skips the run.
    if std::env::args().skip(1).any(|a| !a.starts_with('-') && a != "pmi") {
        return;
    }
    let rounds: usize = common::env_or("FENCE_ROUNDS", 20);
    let runs: usize = common::env_or("RUNS", 3);
    let machine = machine();
    let load_before = loadavg();
    eprintln!("pmi: on {machine}, load average {load_before}");
    let cluster = Cluster::start();
    let bin = cluster.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();

    let fence = match compile("gcc", FENCE_C, &bin, "pmi_fence") {
        Ok(exe) => Some(fences(&cluster, &exe, rounds)),
        Err(why) => {
            println!("pmi: fences skipped: {why}");
            None
        }
    };

    let mut wireup: Option<(Vec<Run>, Option<Vec<Run>>)> = None;
    match compile("mpicc.mpich", WIREUP_C, &bin, "wireup") {
        Err(why) => println!("pmi: MPICH wire-up skipped: {why} (apt-get install mpich libmpich-dev)"),
        Ok(exe) => {
            let hydra = Command::new("mpiexec.hydra").arg("--version").output().is_ok();
            if !hydra {
                println!("pmi: the mpiexec.hydra runs skipped: mpiexec.hydra is not installed");
            }
            let (mut hp, mut hy) = (Vec::new(), Vec::new());
            for run in 0..runs {
                let r = hyperplan_wireup(&cluster, &exe, run);
                eprintln!(
                    "pmi: run {run}: hyperplan wire-up {:.0} ms, wall {:.0} ms, launch spread {:.0} ms",
                    r.wireup, r.wall, r.spread
                );
                hp.push(r);
                if hydra {
                    let r = hydra_wireup(&exe);
                    eprintln!(
                        "pmi: run {run}: mpiexec.hydra wire-up {:.0} ms, wall {:.0} ms, launch spread {:.0} ms",
                        r.wireup, r.wall, r.spread
                    );
                    hy.push(r);
                }
            }
            wireup = Some((hp, hydra.then_some(hy)));
        }
    }
    drop(cluster);

    println!();
    println!("PMI on {machine}; planner and 4 agents on 127.0.0.1, each probing this machine");
    println!("load average before {load_before}, after {}", loadavg());
    if let Some(f) = &fence {
        println!();
        println!(
            "fences, {FENCE_RANKS} ranks over 4 agents (64 each), {} timed rounds of put + fence:",
            f.rounds
        );
        println!("| | median | p90 | first fence |");
        println!("|---|---|---|---|");
        println!(
            "| rank 0: its put + fence | {:.2} ms | {:.2} ms | {:.2} ms |",
            median(&f.rank0),
            pct(&f.rank0, 0.9),
            f.first_rank0
        );
        println!(
            "| last rank in → last rank out | {:.2} ms | {:.2} ms | {:.2} ms |",
            median(&f.in_last_out),
            pct(&f.in_last_out, 0.9),
            f.first_in_last_out
        );
        println!(
            "| last rank in → first rank out | {:.2} ms | {:.2} ms | {:.2} ms |",
            median(&f.in_first_out),
            pct(&f.in_first_out, 0.9),
            f.first_in_first_out
        );
        println!(
            "first fence: the ranks entered it over {:.1} ms (first rank in → last rank in)",
            f.first_arrivals
        );
    }
    if let Some((hp, hy)) = &wireup {
        println!();
        println!("MPICH wire-up, {MPI_RANKS} ranks (main → MPI_Init + MPI_Barrier done), medians of {runs} runs:");
        println!("| | wire-up | wall | launch spread | runs (wire-up / wall, ms) |");
        println!("|---|---|---|---|---|");
        let row = |what: &str, v: &[Run]| {
            let w: Vec<f64> = v.iter().map(|r| r.wireup).collect();
            let t: Vec<f64> = v.iter().map(|r| r.wall).collect();
            let s: Vec<f64> = v.iter().map(|r| r.spread).collect();
            println!(
                "| {what} | {:.0} ms | {:.0} ms | {:.0} ms | {} / {} |",
                median(&w),
                median(&t),
                median(&s),
                list(&w),
                list(&t)
            );
        };
        row("hyperplan, `mpi: pmi`, 4 agents × 16", hp);
        if let Some(hy) = hy {
            row("`mpiexec.hydra -n 64`", hy);
        }
    }
}
