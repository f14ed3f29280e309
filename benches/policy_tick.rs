//! The cost of one tick with a deep queue and reservations (issue 23).
//!
//! Scenario A (10,000 nodes): `fattree::generate` with fanout 16,32,8 (625 leaves, 20
//! spines, 3 pods, one `top`), every node `cpu=64`, none busy from outside. 10,000
//! running jobs of one whole-node task (`cpu=64`) each, submitted and placed at t=0, with
//! time limits spread from 1 h to 48 h (fixed-seed xorshift), so every node is full and
//! their expected ends differ. Then 10,000 pending jobs submitted at t=10: widths 1–64
//! whole-node tasks (log-spread: 1, 2–3, 4–7, 8–15, 16–31, 32–63, 64), topology one of
//! hard tier 1 (only when ≤ 16 wide, else hard tier 2), hard tier 2, soft, none; time
//! limits 10 min–24 h. The default `PlannerConfig` but `[scheduler] reservations = 16`
//! (the default is EASY's 1: 16 is the heavier tick a site may choose), `[priority]
//! recalcInterval = 60`. Ticks 1 s apart.
//!
//! - (a) `task_end`: one running task ends (`Event::TaskFinished`, as the simulator ends
//!   tasks) and the tick runs: room may have grown, so the reservations are worked out
//!   again and every pending job is tried again. Restored untimed afterwards: a pending
//!   job that started on the freed node is submitted again under a new name (same spec);
//!   when none did, a one-node filler in queue `filler` (priority 1: first in the order,
//!   ahead of the jobs that keep their reservations) takes the
//!   node; then one more tick, so the next repetition starts from a settled, full cluster.
//! - (b) `idle`: a tick with nothing new (no event).
//! - (d) `recalc`: the tick at which `recalcInterval` has elapsed: every job is ranked
//!   again, the order generation moves, so the reservations are worked out again and every
//!   pending job is tried again (no event).
//! - (c10k) `submit_10k`: one 1-node job (limit 1 h) submitted behind the queue at 10,000
//!   nodes; it does not fit (the cluster is full); cancelled untimed afterwards.
//!
//! Scenario C (2,048 nodes, issue 23 target 2): fat tree fanout 16,8 (128 leaves, 16
//! spines, one `top`), `cpu=64`. ~90 % of the nodes, chosen at random (fixed seed), run
//! one whole-node job each (limits 1 h–48 h, placed at t=0), the rest are free; then 200
//! pending jobs submitted at t=5 that cannot start now: 150 hard tier-2 jobs of 24–128
//! nodes and 50 hard tier-1 jobs of 16 nodes (limits 1 h–24 h). The first 16 get
//! reservations.
//!
//! - (c1) `submit_2k_fits`: one 1-node job (limit 10 min) submitted behind the reserved
//!   ones: it backfills onto a free node in the measured tick; cancelled untimed after.
//! - (c2) `submit_2k_waits`: one 16-node hard tier-1 job (limit 1 h) submitted behind
//!   the reserved ones: no leaf is free, so it waits (16 reservations are taken, it gets
//!   none); its first look includes the "could it ever run" check on the empty cluster.
//!   Cancelled untimed after.
//!
//! Every measured tick is kept clear of the `recalcInterval` boundary (an untimed tick is
//! run at the boundary first), except in (d). Only the measured tick is timed.
//!
//! Run: `cargo bench --bench policy_tick --no-run`, then
//! `taskset -c 0 target/release/deps/policy_tick-* --bench`. `POLICY_TICK_CASES` picks
//! cases (comma-separated of `a,b,d,c10k,c1,c2`; default all), `POLICY_TICK_REPS` the
//! repetitions (default 20). `POLICY_TICK_PERF_CTL=<ctl fifo>,<ack fifo>` writes
//! `enable`/`disable` to a `perf record -D -1 --control fifo:<ctl>,<ack>` around each
//! measured tick, so the profile holds the measured ticks only. `POLICY_TICK_ORDER`
//! sets `[scheduler] backfillOrder` (`shortest`, `xfactor`). `POLICY_TICK_NO_FLAT`
//! (experiment) makes the pending jobs without topology soft instead.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::time::{Duration, Instant};

use hyperplan_core::allocate::backfill::Reservations;
use hyperplan_core::order::OrderState;
use hyperplan_core::sim::{SIM_OWNER, planner_for};
use hyperplan_core::testing::JobBuilder;
use hyperplan_core::{Command, Event, Planner, PlannerConfig};
use hyperplan_shared::fattree::{self, FatTreeParams};
use hyperplan_shared::quantity::parse_resource_list;
use hyperplan_shared::{ClusterSpec, JobSpec, Resources};

/// The daemon's allocator (`planner/src/main.rs`), so the figures are the daemon's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SEED: u64 = 20_261_123;
const NODE: &str = "cpu=64";
const HOUR: u64 = 3_600;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut s = self.0;
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        self.0 = s;
        s
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// A running task the bench may end.
#[derive(Clone, Debug)]
struct Running {
    job: String,
    task: String,
    index: u32,
    limit: u64,
}

/// `perf record --control` fifos, when `POLICY_TICK_PERF_CTL` names them.
struct Perf {
    ctl: File,
    ack: BufReader<File>,
}

impl Perf {
    fn from_env() -> Option<Self> {
        let v = std::env::var("POLICY_TICK_PERF_CTL").ok()?;
        let (ctl, ack) = v.split_once(',').expect("POLICY_TICK_PERF_CTL=<ctl fifo>,<ack fifo>");
        let ctl = std::fs::OpenOptions::new().write(true).open(ctl).expect("ctl fifo");
        let ack = BufReader::new(File::open(ack).expect("ack fifo"));
        Some(Self { ctl, ack })
    }

    fn send(&mut self, cmd: &str) {
        writeln!(self.ctl, "{cmd}").unwrap();
        self.ctl.flush().unwrap();
        let mut line = String::new();
        self.ack.read_line(&mut line).unwrap();
    }
}

/// The planner, its clock and what the bench keeps track of.
struct Bench {
    planner: Planner,
    now: u64,
    running: Vec<Running>,
    /// Pending jobs by name, to submit an equivalent one when one starts.
    pending: HashMap<String, JobSpec>,
    seq: u64,
    perf: Option<Perf>,
}

/// One measured tick: its time and what it did.
struct Sample {
    took: Duration,
    placed_tasks: usize,
    placed_jobs: Vec<String>,
    recomputed: bool,
    cmds: Vec<Command>,
}

impl Bench {
    fn reservations(&self) -> (u64, usize) {
        let r = self.planner.world_for_tests().resource::<Reservations>();
        (r.generation, r.list.len() - r.windows)
    }

    /// The next time `rank` works every job out again.
    fn next_recalc(&self) -> u64 {
        let w = self.planner.world_for_tests();
        let every = w.resource::<PlannerConfig>().priority.recalc_interval.max(1);
        w.resource::<OrderState>().recalc_at.map_or(0, |t| t + every)
    }

    /// An untimed tick one second on; returns its commands.
    fn step(&mut self) -> Vec<Command> {
        self.now += 1;
        let cmds = self.planner.tick(self.now);
        self.note(&cmds);
        cmds
    }

    /// Keeps the next tick (at `now + 1`) clear of the recalculation: when it would be
    /// due, an untimed tick runs it first.
    fn clear_of_recalc(&mut self) {
        while self.now + 1 >= self.next_recalc() {
            self.step();
        }
    }

    /// The measured tick, one second on.
    fn measured(&mut self) -> Sample {
        let (gen0, _) = self.reservations();
        self.now += 1;
        if let Some(p) = &mut self.perf {
            p.send("enable");
        }
        let start = Instant::now();
        let cmds = self.planner.tick(self.now);
        let took = start.elapsed();
        if let Some(p) = &mut self.perf {
            p.send("disable");
        }
        let placed_jobs = self.note(&cmds);
        let placed_tasks = cmds.iter().filter(|c| matches!(c, Command::Place(_))).count();
        let (gen1, _) = self.reservations();
        Sample {
            took,
            placed_tasks,
            placed_jobs,
            recomputed: gen1 != gen0,
            cmds,
        }
    }

    /// Books what a tick placed (running from now on; no longer pending) and fails on a
    /// rejection. Returns the names of the pending jobs it started.
    fn note(&mut self, cmds: &[Command]) -> Vec<String> {
        let mut started = Vec::new();
        for c in cmds {
            match c {
                Command::Place(p) => {
                    let job = p.job().to_string();
                    if self.pending.contains_key(&job) && !started.contains(&job) {
                        started.push(job.clone());
                    }
                    self.running.push(Running {
                        job,
                        task: p.task.to_string(),
                        index: p.index,
                        limit: p.spec.run.time_limit.unwrap_or(HOUR),
                    });
                }
                Command::Reject { job, reason } => panic!("job {job} rejected: {reason}"),
                _ => {}
            }
        }
        started
    }

    fn submit(&mut self, spec: JobSpec) {
        hyperplan_core::sim::submit::submit(&mut self.planner, spec, SIM_OWNER);
    }

    fn submit_pending(&mut self, spec: JobSpec) {
        self.pending.insert(spec.name.clone(), spec.clone());
        self.submit(spec);
    }

    fn fresh_name(&mut self, base: &str) -> String {
        self.seq += 1;
        format!("{base}-r{:05}", self.seq)
    }
}

fn cluster(nodes: u32, fanout: &[u32], busy: f64) -> ClusterSpec {
    let params = FatTreeParams {
        nodes,
        fanout: fanout.to_vec(),
        node_resources: parse_resource_list(NODE).expect("node resources"),
        busy,
        seed: SEED,
        prefix: "node".to_string(),
    };
    fattree::generate(&params).expect("fat tree")
}

fn running_job(name: &str, limit: u64) -> JobSpec {
    JobBuilder::gang(name, 1, NODE).limit(limit).build()
}

/// The default config with 16 reservations (the heavier tick; the default is 1),
/// `backfillOrder` from `POLICY_TICK_ORDER` when set, and a queue `filler` that goes
/// before `default` (for the restore of case (a)).
fn sixteen() -> PlannerConfig {
    let order = std::env::var("POLICY_TICK_ORDER").map_or(String::new(), |o| format!("backfillOrder = \"{o}\"\n"));
    let queues = "[[queue]]\nname = \"default\"\n\n[[queue]]\nname = \"filler\"\npriority = 1\n";
    PlannerConfig::parse(
        &format!("[scheduler]\nreservations = 16\n{order}\n{queues}"),
        "policy_tick",
    )
    .expect("a valid config")
}

/// Scenario A: 10,000 full nodes, 10,000 pending jobs, 16 reservations.
fn scenario_a(rng: &mut Rng, perf: Option<Perf>) -> Bench {
    let t = Instant::now();
    let spec = cluster(10_000, &[16, 32, 8], 0.0);
    let mut b = Bench {
        planner: planner_for(&spec, sixteen()),
        now: 0,
        running: Vec::new(),
        pending: HashMap::new(),
        seq: 0,
        perf,
    };
    for i in 0..10_000 {
        let limit = rng.range(HOUR, 48 * HOUR);
        b.submit(running_job(&format!("run-{i:05}"), limit));
    }
    let cmds = b.planner.tick(0);
    b.note(&cmds);
    assert_eq!(b.running.len(), 10_000, "every running job placed");
    eprintln!("A: 10,000 running jobs placed at t=0 ({:.1?})", t.elapsed());
    let t = Instant::now();
    b.now = 10;
    // `POLICY_TICK_NO_FLAT`: the jobs without topology become soft (an experiment: what
    // the flat path's node scan costs).
    let no_flat = std::env::var("POLICY_TICK_NO_FLAT").is_ok();
    let mut classes = [0usize; 4];
    for i in 0..10_000 {
        let k = rng.next() % 7;
        let base = 1u64 << k;
        let width = (base + rng.next() % base).min(64) as u32;
        let limit = rng.range(600, 24 * HOUR);
        let mut jb = JobBuilder::gang(&format!("pend-{i:05}"), width, NODE)
            .limit(limit)
            .submit(10);
        let class = match rng.next() % 4 {
            0 if width <= 16 => 0,
            0 | 1 => 1,
            2 => 2,
            _ if no_flat => 2,
            _ => 3,
        };
        classes[class] += 1;
        jb = match class {
            0 => jb.hard(1),
            1 => jb.hard(2),
            2 => jb.soft(),
            _ => jb,
        };
        b.submit_pending(jb.build());
    }
    eprintln!(
        "A: pending jobs: {} hard tier 1, {} hard tier 2, {} soft, {} without topology",
        classes[0], classes[1], classes[2], classes[3]
    );
    let cmds = b.planner.tick(b.now);
    assert!(b.note(&cmds).is_empty(), "nothing starts on the full cluster");
    b.step();
    let (_, reserved) = b.reservations();
    eprintln!(
        "A: 10,000 pending jobs submitted at t=10, first look {:.1?}; {reserved} reservations",
        t.elapsed()
    );
    assert_eq!(reserved, 16);
    b
}

/// Scenario C: 2,048 nodes, ~90 % running one job each, 200 pending with 16 reservations.
fn scenario_c(rng: &mut Rng, perf: Option<Perf>) -> Bench {
    let spec = cluster(2_048, &[16, 8], 0.9);
    let busy: Vec<bool> = spec.nodes.iter().map(|n| n.used == n.resources).collect();
    // First only the nodes meant to run a job are free, so the running jobs land there.
    let mut first = spec.clone();
    for (n, &b) in first.nodes.iter_mut().zip(&busy) {
        n.used = if b { Resources::new() } else { n.resources.clone() };
    }
    let mut b = Bench {
        planner: planner_for(&first, sixteen()),
        now: 0,
        running: Vec::new(),
        pending: HashMap::new(),
        seq: 0,
        perf,
    };
    let count = busy.iter().filter(|x| **x).count();
    for i in 0..count {
        let limit = rng.range(HOUR, 48 * HOUR);
        b.submit(running_job(&format!("run-{i:05}"), limit));
    }
    let cmds = b.planner.tick(0);
    b.note(&cmds);
    assert_eq!(b.running.len(), count, "every running job placed");
    // Then the other nodes are free.
    for (n, &x) in spec.nodes.iter().zip(&busy) {
        if !x {
            let mut n = n.clone();
            n.used = Resources::new();
            b.planner.push(Event::NodeUp(n));
        }
    }
    b.step();
    b.now = 5;
    for i in 0..200 {
        let limit = rng.range(HOUR, 24 * HOUR);
        let jb = if i % 4 == 3 {
            JobBuilder::gang(&format!("pend-{i:05}"), 16, NODE).hard(1)
        } else {
            JobBuilder::gang(&format!("pend-{i:05}"), rng.range(24, 128) as u32, NODE).hard(2)
        };
        b.submit_pending(jb.limit(limit).submit(5).build());
    }
    let cmds = b.planner.tick(b.now);
    let started = b.note(&cmds);
    b.step();
    b.step();
    let (_, reserved) = b.reservations();
    eprintln!(
        "C: 2,048 nodes, {count} running, 200 pending submitted at t=5 ({} started at once), {reserved} reservations",
        started.len()
    );
    assert_eq!(reserved, 16);
    b
}

/// (a): one running task ends; the measured tick; then the state is restored.
fn task_end(b: &mut Bench, rng: &mut Rng, reps: usize) -> Vec<Sample> {
    let mut out = Vec::new();
    for _ in 0..reps {
        b.clear_of_recalc();
        // A whole-node running task, any of them.
        let victim = b.running.swap_remove((rng.next() % b.running.len() as u64) as usize);
        b.planner.push(Event::TaskFinished {
            job: victim.job.clone(),
            task: victim.task.clone(),
            index: victim.index,
        });
        let s = b.measured();
        // Restore: the jobs that started wait again (as new jobs of the same spec); the
        // node nobody took gets a filler.
        for name in &s.placed_jobs {
            let mut spec = b.pending.remove(name).expect("a pending job");
            spec.name = b.fresh_name(&spec.name);
            b.submit_pending(spec);
        }
        if s.placed_tasks == 0 {
            let name = b.fresh_name("filler");
            b.submit(
                JobBuilder::gang(&name, 1, NODE)
                    .limit(victim.limit)
                    .submit(0)
                    .queue("filler")
                    .build(),
            );
            let cmds = b.step();
            assert!(
                cmds.iter().any(|c| matches!(c, Command::Place(p) if p.job() == name)),
                "the filler takes the freed node"
            );
        }
        b.step();
        out.push(s);
    }
    out
}

/// (b): ticks with nothing new.
fn idle(b: &mut Bench, reps: usize) -> Vec<Sample> {
    (0..reps)
        .map(|_| {
            b.clear_of_recalc();
            let s = b.measured();
            assert_eq!(s.placed_tasks, 0);
            s
        })
        .collect()
}

/// (d): the tick at which the order is worked out again.
fn recalc(b: &mut Bench, reps: usize) -> Vec<Sample> {
    (0..reps)
        .map(|_| {
            b.now = b.now.max(b.next_recalc() - 1);
            let s = b.measured();
            assert_eq!(s.placed_tasks, 0);
            b.step();
            s
        })
        .collect()
}

/// (c): one job submitted behind the reserved ones; cancelled untimed afterwards.
fn submit_one(b: &mut Bench, reps: usize, make: impl Fn(&str, u64) -> JobSpec, placed: bool) -> Vec<Sample> {
    let mut out = Vec::new();
    for _ in 0..reps {
        b.clear_of_recalc();
        let name = b.fresh_name("one");
        b.submit(make(&name, b.now + 1));
        let s = b.measured();
        let got = s.cmds.iter().any(|c| matches!(c, Command::Place(p) if p.job() == name));
        assert_eq!(got, placed, "job {name} placed: {got}, expected {placed}");
        b.planner.push(Event::Cancel {
            job: name,
            grace_secs: 0,
            by_admin: false,
        });
        b.step();
        b.step();
        b.running.retain(|r| !r.job.starts_with("one-"));
        out.push(s);
    }
    out
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Median and p90 (nearest rank) in ms.
fn stats(samples: &[Sample]) -> (f64, f64, f64, f64) {
    let mut v: Vec<f64> = samples.iter().map(|s| ms(s.took)).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    let p90 = v[((n as f64 * 0.9).ceil() as usize).max(1) - 1];
    (median, p90, v[0], v[n - 1])
}

fn row(case: &str, samples: &[Sample], target: Option<f64>) {
    if samples.is_empty() {
        return;
    }
    let (median, p90, min, max) = stats(samples);
    let recomputed = samples.iter().filter(|s| s.recomputed).count();
    let placed: usize = samples.iter().map(|s| s.placed_tasks).sum();
    let verdict = match target {
        Some(t) if p90 <= t => format!("≤ {t} ms: met"),
        Some(t) if median <= t => format!("≤ {t} ms: median only"),
        Some(t) => format!("≤ {t} ms: NOT met"),
        None => "–".into(),
    };
    println!(
        "| {case} | {} | {median:.3} | {p90:.3} | {min:.3} | {max:.3} | {recomputed}/{} | {placed} | {verdict} |",
        samples.len(),
        samples.len()
    );
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let reps: usize = std::env::var("POLICY_TICK_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let cases: HashSet<String> = std::env::var("POLICY_TICK_CASES")
        .unwrap_or_else(|_| "a,b,d,c10k,c1,c2".into())
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    let want = |c: &str| cases.contains(c);
    let mut perf = Perf::from_env();
    let mut rng = Rng(SEED | 1);
    let mut rows: Vec<(&str, Vec<Sample>, Option<f64>)> = Vec::new();
    if ["a", "b", "d", "c10k"].iter().any(|c| want(c)) {
        let mut a = scenario_a(&mut rng, perf.take());
        if want("b") {
            rows.push(("(b) idle, 10k", idle(&mut a, reps), None));
        }
        if want("a") {
            rows.push(("(a) one task ends, 10k", task_end(&mut a, &mut rng, reps), Some(50.0)));
        }
        if want("d") {
            rows.push(("(d) recalcInterval tick, 10k", recalc(&mut a, reps), None));
        }
        if want("c10k") {
            let make = |name: &str, t: u64| JobBuilder::gang(name, 1, NODE).limit(HOUR).submit(t).build();
            rows.push((
                "(c10k) submit 1-node job, full 10k",
                submit_one(&mut a, reps, make, false),
                None,
            ));
        }
        perf = a.perf.take();
        let (_, reserved) = a.reservations();
        eprintln!(
            "A at the end: {reserved} reservations, {} running tasks",
            a.running.len()
        );
    }
    if want("c1") || want("c2") {
        let mut c = scenario_c(&mut rng, perf.take());
        if want("c1") {
            let make = |name: &str, t: u64| JobBuilder::gang(name, 1, NODE).limit(600).submit(t).build();
            rows.push((
                "(c1) submit 1-node job that fits, 2k",
                submit_one(&mut c, reps, make, true),
                Some(0.5),
            ));
        }
        if want("c2") {
            let make = |name: &str, t: u64| JobBuilder::gang(name, 16, NODE).hard(1).limit(HOUR).submit(t).build();
            rows.push((
                "(c2) submit 16-node tier-1 job that waits, 2k",
                submit_one(&mut c, reps, make, false),
                Some(0.5),
            ));
        }
    }
    println!();
    println!("| case | n | median ms | p90 ms | min ms | max ms | reservations recomputed | tasks placed | target |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (case, samples, target) in &rows {
        row(case, samples, *target);
    }
}
