//! Preemption on a fragmented fat tree (issue 25; see `benches/README.md`).
//!
//! Cluster: `ClusterBuilder::fat_tree(&[16, 16, 8], 1)`: 2,048 nodes, 16 per leaf (128
//! leaves), 16 leaves per spine, 8 spines under one pod, every node
//! `cpu=64,memory=256Gi,nvidia.com/gpu=8`, all agents registered (a [`Rig`]). Filled with a
//! fixed-seed (xorshift) mix of low-priority jobs in the preemptible queue `lo`, in two
//! runs: `Wide`, 1–16 nodes (1: 30 %, 2–3: 25 %, 4–7: 20 %, 8–16: 25 %), and `Small`, 1–4
//! nodes (1: 40 %, 2: 30 %, 3–4: 30 %; no leaf holds a leaf-sized job). Whole-node tasks
//! (80 %) or twice as many half-node tasks (`gpu=4`), hard tier 1 (70 %) or no topology;
//! batches of 16, the clock moved 1 min–1 h between batches (their work lost differs);
//! what stays pending is cancelled. The holes are then plugged with one-task jobs and 0–3
//! nodes per leaf are freed again (one-node jobs end), so no leaf has room for the jobs
//! below.
//!
//! 1. Decisions: 50 jobs of class `urgent` (above every filler), alternately leaf-sized (16
//!    whole-node tasks) and half-leaf (8), both hard tier 1, each submitted with
//!    `[preemption] enabled = false` and looked at once by the walk, then asked
//!    `Setting::of(..).find()` under `enabled = true` (timed: that is what `preempt` runs
//!    per waiting job), then cancelled; between two, four random fillers end, four new
//!    ones are submitted, the holes plugged and 0–3 nodes per leaf freed again. Reported:
//!    victims, work lost (CPU-seconds), placement searches, decision time, and the victims
//!    over a lower bound: in a leaf, the fewest candidate jobs whose GPUs there cover what
//!    the job lacks (largest first; at least 1, since it did not fit), for the chosen
//!    leaf and the best over all 128 leaves. For the first two, what one
//!    `Setting::fits(leaf, none)` costs (a copy of the caches masked to the leaf and one
//!    search), which `find` pays once per leaf it looks in.
//! 2. Preemption to placement: preemption turned on (`reload_policy`); 10 jobs as above,
//!    each submitted and stepped; the planner's tick that preempts is timed (and an idle
//!    tick just before it), the victims' agents report their tasks' ends (SIGTERM) at the
//!    next step, and the ticks until the job is placed are counted. Each is then cancelled.
//!
//! Run: `cargo bench --bench preempt` (`PREEMPT_DECISIONS` to change the 50).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hyperplan_core::names::JobNames;
use hyperplan_core::preempt::Setting;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, Rig};
use hyperplan_core::{Command, Event, PlannerConfig};
use hyperplan_shared::JobSpec;
use hyperplan_shared::report::JobStatus;
use hyperplan_shared::taskend::{TaskEnd, TaskOutcome};

/// The daemon's allocator (`planner/src/main.rs`), so the figures are the daemon's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SEED: u64 = 20_261_201;
const PER_LEAF: usize = 16;
const NODES: usize = 2_048;
const LEAVES: usize = NODES / PER_LEAF;
const GPUS: u64 = 8;
const WHOLE: &str = "cpu=64,memory=256Gi,nvidia.com/gpu=8";
const HALF: &str = "cpu=32,memory=128Gi,nvidia.com/gpu=4";
const CONFIG: &str = r#"
[[queue]]
name = "lo"
preemptible = true
[[priorityClass]]
name = "urgent"
value = 100
preemptible = false
"#;

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

/// A running filler: its id, its tasks, and the GPUs they hold by node (0-based).
struct Filler {
    id: u64,
    tasks: Vec<String>,
    gpus: Vec<(usize, u64)>,
}

/// The fillers' widths (see the module).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mix {
    /// 1–16 nodes.
    Wide,
    /// 1–4 nodes: a leaf holds many jobs, none of them leaf-sized.
    Small,
}

struct Bench {
    rig: Rig,
    rng: Rng,
    mix: Mix,
    running: BTreeMap<String, Filler>,
    seq: usize,
}

/// `n0042` → 41.
fn node_ix(name: &str) -> usize {
    name[1..].parse::<usize>().unwrap() - 1
}

impl Bench {
    fn new(mix: Mix, seed: u64) -> Self {
        let cluster = ClusterBuilder::fat_tree(&[PER_LEAF as u32, 16, 8], 1)
            .node_resources(WHOLE)
            .build();
        assert_eq!(cluster.nodes.len(), NODES);
        let mut config = PlannerConfig::parse(CONFIG, "bench").unwrap();
        config.preemption.enabled = false;
        let mut rig = Rig::new(config, cluster.nodes);
        rig.p.push(Event::StaticHyperNodes(cluster.hyper_nodes));
        rig.register_all();
        rig.tick();
        Self {
            rig,
            rng: Rng(seed),
            mix,
            running: BTreeMap::new(),
            seq: 0,
        }
    }

    fn name(&mut self) -> String {
        self.seq += 1;
        format!("lo-{:05}", self.seq)
    }

    /// A random low-priority job (see the module), and the GPUs of each of its tasks.
    fn random_filler(&mut self) -> (JobSpec, u64) {
        let width = match (self.mix, self.rng.range(0, 99)) {
            (Mix::Wide, 0..30) | (Mix::Small, 0..40) => 1,
            (Mix::Wide, 30..55) => self.rng.range(2, 3),
            (Mix::Wide, 55..75) => self.rng.range(4, 7),
            (Mix::Wide, _) => self.rng.range(8, 16),
            (Mix::Small, 40..70) => 2,
            (Mix::Small, _) => self.rng.range(3, 4),
        } as u32;
        let name = self.name();
        let (mut b, gpus) = if self.rng.range(0, 99) < 80 {
            (JobBuilder::gang(&name, width, WHOLE), GPUS)
        } else {
            (JobBuilder::gang(&name, 2 * width, HALF), GPUS / 2)
        };
        if self.rng.range(0, 99) < 70 {
            b = b.hard(1);
        }
        (b.queue("lo").build(), gpus)
    }

    /// Submits `specs` (with the GPUs of each task); those placed start, the others are
    /// cancelled. How many started.
    fn submit(&mut self, specs: Vec<(JobSpec, u64)>) -> usize {
        let mut ids = Vec::new();
        for (s, g) in specs {
            let name = s.name.clone();
            ids.push((name, g, self.rig.submit_as(s, "alice")));
        }
        self.rig.step();
        let mut started = 0;
        for (name, g, id) in ids {
            let job = self.rig.job(&name);
            if job.status == JobStatus::Placed {
                self.rig.start_all(&name, id);
                let gpus = job
                    .tasks
                    .iter()
                    .map(|t| (node_ix(t.node.as_deref().unwrap()), g))
                    .collect();
                let tasks = job.tasks.iter().map(|t| t.name.clone()).collect();
                self.running.insert(name, Filler { id, tasks, gpus });
                started += 1;
            } else {
                self.rig.p.push(Event::Cancel {
                    job: name,
                    grace_secs: 0,
                    by_admin: false,
                });
            }
        }
        self.rig.step();
        started
    }

    /// GPUs free on each node (fillers are all that runs).
    fn free(&self) -> Vec<u64> {
        let mut free = vec![GPUS; NODES];
        for f in self.running.values() {
            for &(n, g) in &f.gpus {
                free[n] -= g;
            }
        }
        free
    }

    /// Fills the cluster with random jobs until it is nearly full.
    fn fill(&mut self) {
        let mut idle = 0;
        while idle < 3 {
            self.rig.now += self.rng.range(60, 3_600) * 1_000;
            let specs = (0..16).map(|_| self.random_filler()).collect();
            let started = self.submit(specs);
            let free: u64 = self.free().iter().sum();
            idle = if started == 0 { idle + 1 } else { 0 };
            if free * 100 < NODES as u64 * GPUS * 3 {
                break;
            }
        }
    }

    /// One-task jobs on every hole, until none is left.
    fn plug(&mut self) {
        for _ in 0..3 {
            let free = self.free();
            let whole = free.iter().filter(|&&f| f == GPUS).count();
            let half = free.iter().filter(|&&f| f == GPUS / 2).count();
            if whole + half == 0 {
                return;
            }
            let mut specs = Vec::new();
            for _ in 0..whole {
                let name = self.name();
                specs.push((JobBuilder::gang(&name, 1, WHOLE).queue("lo").build(), GPUS));
            }
            for _ in 0..half {
                let name = self.name();
                specs.push((JobBuilder::gang(&name, 1, HALF).queue("lo").build(), GPUS / 2));
            }
            self.submit(specs);
        }
    }

    /// Ends `name`'s tasks (exit 0 for a filler's end, SIGTERM for a victim's).
    fn end(&mut self, name: &str, signaled: bool) {
        let f = self.running.remove(name).unwrap();
        for t in &f.tasks {
            let end = if signaled {
                TaskEnd {
                    outcome: TaskOutcome::Signaled,
                    signal: Some(15),
                    ..TaskEnd::default()
                }
            } else {
                TaskEnd {
                    exit_code: Some(0),
                    ..TaskEnd::default()
                }
            };
            self.rig.ended(name, f.id, t, end);
        }
    }

    /// Frees 0–3 nodes per leaf: one-node whole jobs there end.
    fn open(&mut self) {
        let mut by_leaf: Vec<Vec<String>> = vec![Vec::new(); LEAVES];
        for (name, f) in &self.running {
            if let [(n, g)] = f.gpus[..]
                && g == GPUS
            {
                by_leaf[n / PER_LEAF].push(name.clone());
            }
        }
        for mut names in by_leaf {
            let r = self.rng.range(0, 3) as usize;
            for _ in 0..r.min(names.len()) {
                let k = self.rng.range(0, names.len() as u64 - 1) as usize;
                let name = names.swap_remove(k);
                self.end(&name, false);
            }
        }
        self.rig.step();
    }

    /// Four random fillers end and four new ones come, then the holes are plugged and a
    /// few nodes per leaf freed again.
    fn churn(&mut self) {
        for _ in 0..4 {
            let names: Vec<&String> = self.running.keys().collect();
            let k = self.rng.range(0, names.len() as u64 - 1) as usize;
            let name = names[k].clone();
            self.end(&name, false);
        }
        self.rig.now += self.rng.range(60, 600) * 1_000;
        self.rig.step();
        let specs = (0..4).map(|_| self.random_filler()).collect();
        self.submit(specs);
        self.plug();
        self.open();
    }

    /// [`Rig::step`] with only the planner's tick timed (not the heartbeats pushed before
    /// it nor the invariants checked after it).
    fn timed_step(&mut self) -> (Vec<Command>, Duration) {
        let rig = &mut self.rig;
        rig.now += 1_000;
        for n in &rig.linked {
            rig.p.push(Event::Heartbeat {
                node: n.clone(),
                at_ms: rig.now,
            });
        }
        let start = Instant::now();
        let cmds = rig.p.tick_millis(rig.now);
        let took = start.elapsed();
        assert!(rig.p.violations().is_empty());
        (cmds, took)
    }

    /// Cancels a job of this bench's own (not a filler) and reports its tasks' ends.
    fn remove(&mut self, name: &str, id: u64) {
        self.rig.p.push(Event::Cancel {
            job: name.into(),
            grace_secs: 0,
            by_admin: false,
        });
        self.rig.step();
        let tasks: Vec<String> = self
            .rig
            .job(name)
            .tasks
            .iter()
            .filter(|t| t.node.is_some())
            .map(|t| t.name.clone())
            .collect();
        for t in tasks {
            let end = TaskEnd {
                outcome: TaskOutcome::Cancelled,
                signal: Some(15),
                ..TaskEnd::default()
            };
            self.rig.ended(name, id, &t, end);
        }
        self.rig.step();
    }

    /// The fewest victims any preemption needs for `need` GPUs: per leaf, the fewest
    /// candidates whose GPUs there cover what it lacks (at least 1). (best over leaves,
    /// by leaf).
    fn bound(&self, need: u64, candidates: &[String]) -> (usize, Vec<Option<usize>>) {
        let free = self.free();
        let mut held: Vec<Vec<u64>> = vec![Vec::new(); LEAVES];
        for c in candidates {
            let mut per_leaf: BTreeMap<usize, u64> = BTreeMap::new();
            for &(n, g) in &self.running[c].gpus {
                *per_leaf.entry(n / PER_LEAF).or_default() += g;
            }
            for (l, g) in per_leaf {
                held[l].push(g);
            }
        }
        let by_leaf: Vec<Option<usize>> = (0..LEAVES)
            .map(|l| {
                let room: u64 = free[l * PER_LEAF..(l + 1) * PER_LEAF].iter().sum();
                let mut lack = need.saturating_sub(room);
                let mut h = held[l].clone();
                h.sort_unstable_by(|a, b| b.cmp(a));
                let mut k = 0;
                for g in h {
                    if lack == 0 {
                        break;
                    }
                    lack = lack.saturating_sub(g);
                    k += 1;
                }
                (lack == 0).then_some(k.max(1))
            })
            .collect();
        (by_leaf.iter().flatten().copied().min().unwrap_or(0), by_leaf)
    }
}

/// One decision's figures.
struct Decision {
    victims: usize,
    work: u64,
    searches: usize,
    took: Duration,
    /// Of which `find` (the rest: `Setting::of`).
    find: Duration,
    chosen_bound: usize,
    best_bound: usize,
}

fn stats(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    (mean, v[v.len() / 2], v[v.len() - 1])
}

fn table(label: &str, ds: &[Decision]) {
    if ds.is_empty() {
        return;
    }
    let col = |f: &dyn Fn(&Decision) -> f64| stats(&mut ds.iter().map(f).collect::<Vec<_>>());
    let rows: [(&str, (f64, f64, f64), usize); 8] = [
        ("victims", col(&|d| d.victims as f64), 1),
        (
            "victims / bound (chosen leaf)",
            col(&|d| d.victims as f64 / d.chosen_bound as f64),
            2,
        ),
        (
            "victims / bound (best leaf)",
            col(&|d| d.victims as f64 / d.best_bound as f64),
            2,
        ),
        ("work lost (CPU-h)", col(&|d| d.work as f64 / 3_600.0), 0),
        ("placement searches", col(&|d| d.searches as f64), 0),
        ("decision (ms)", col(&|d| d.took.as_secs_f64() * 1e3), 2),
        ("of which find (ms)", col(&|d| d.find.as_secs_f64() * 1e3), 2),
        ("bound (best leaf)", col(&|d| d.best_bound as f64), 1),
    ];
    println!("\n{label}: {} decisions\n", ds.len());
    println!("| | mean | p50 | max |\n|---|---|---|---|");
    for (name, (mean, p50, max), p) in rows {
        println!("| {name} | {mean:.p$} | {p50:.p$} | {max:.p$} |");
    }
    let at_bound = ds.iter().filter(|d| d.victims == d.best_bound).count();
    println!("\nat the best leaf's bound: {at_bound} of {}", ds.len());
}

/// The `i`-th job that may preempt: leaf-sized (even) or half-leaf (odd), hard tier 1.
fn preemptor(i: usize) -> (String, u32) {
    let width = if i.is_multiple_of(2) {
        PER_LEAF as u32
    } else {
        PER_LEAF as u32 / 2
    };
    (format!("big-{i:03}"), width)
}

/// Fills the cluster with `mix`, then measures `decisions` decisions and 10 preemptions
/// to placement.
fn scenario(mix: Mix, seed: u64, decisions: usize) {
    let t0 = Instant::now();
    let mut b = Bench::new(mix, seed);
    b.fill();
    b.plug();
    b.open();
    let free: u64 = b.free().iter().filter(|&&f| f == GPUS).count() as u64;
    println!(
        "\n## Fillers {mix:?}: {} running on {NODES} nodes ({LEAVES} leaves of {PER_LEAF}), {free} nodes free (set-up {:.1} s)",
        b.running.len(),
        t0.elapsed().as_secs_f64()
    );

    // 1. Decisions.
    let mut on = b.rig.p.world_for_tests().resource::<PlannerConfig>().clone();
    on.preemption.enabled = true;
    let (mut leaf, mut half) = (Vec::new(), Vec::new());
    let mut fit = 0;
    for i in 0..decisions {
        if i > 0 {
            b.churn();
        }
        let (name, width) = preemptor(i);
        let spec = JobBuilder::gang(&name, width, WHOLE).hard(1).class("urgent").build();
        let id = b.rig.submit_as(spec, "bob");
        b.rig.step();
        if b.rig.job(&name).status != JobStatus::Pending {
            fit += 1;
            b.rig.start_all(&name, id);
            b.remove(&name, id);
            continue;
        }
        let world = b.rig.p.world_for_tests();
        let e = world.resource::<JobNames>().0[name.as_str()];
        let start = Instant::now();
        let setting = Setting::of(world, e, &on).unwrap();
        let set_up = start.elapsed();
        let found = setting.find();
        let took = start.elapsed();
        if i < 2 {
            // What one question to the search costs: a copy of the caches with every node
            // outside the leaf masked, and one placement search.
            let hns = setting.hyper_nodes();
            let start = Instant::now();
            for &h in &hns {
                std::hint::black_box(setting.fits(h, &[]));
            }
            println!(
                "{name}: Setting::fits(leaf, none) {:.0} µs each ({} leaves)",
                start.elapsed().as_secs_f64() * 1e6 / hns.len() as f64,
                hns.len()
            );
        }
        let found = found.expect("a low-priority leaf can always be emptied");
        let candidates: Vec<String> = setting.candidates().into_iter().map(|c| c.1).collect();
        let index = b.rig.p.index();
        let hn = &index.hns[found.hn.ix()].name;
        let chosen: usize = hn.strip_prefix("leaf-").unwrap().parse::<usize>().unwrap() - 1;
        let (best_bound, by_leaf) = b.bound(u64::from(width) * GPUS, &candidates);
        let d = Decision {
            victims: found.key.0,
            work: found.key.1,
            searches: found.searches,
            took,
            find: took - set_up,
            chosen_bound: by_leaf[chosen].unwrap(),
            best_bound,
        };
        assert!(d.victims >= d.best_bound, "{name}: below the bound");
        if width == PER_LEAF as u32 {
            leaf.push(d);
        } else {
            half.push(d);
        }
        b.remove(&name, id);
    }
    table("Leaf-sized (16 nodes, hard tier 1)", &leaf);
    table("Half-leaf (8 nodes, hard tier 1)", &half);
    if fit > 0 {
        println!("\n({fit} preemptors fit without preempting: not counted)");
    }

    // 2. Preemption to placement.
    b.rig.p.reload_policy(&on).unwrap();
    println!("\nPreemption to placement (victims' ends reported at the next step)\n");
    println!(
        "| job | victims | idle tick before (ms) | preempting tick (ms) | ticks to placed |\n|---|---|---|---|---|"
    );
    let mut ticks_all = Vec::new();
    for i in decisions..decisions + 10 {
        b.churn();
        let (name, width) = preemptor(i);
        let spec = JobBuilder::gang(&name, width, WHOLE).hard(1).class("urgent").build();
        let (_, idle) = b.timed_step();
        let id = b.rig.submit_as(spec, "bob");
        let (cmds, tick) = b.timed_step();
        let victims: Vec<String> = cmds
            .iter()
            .filter_map(|c| match c {
                Command::Preempted { victim, by, .. } if *by == name => Some(victim.clone()),
                _ => None,
            })
            .collect();
        if victims.is_empty() {
            b.rig.start_all(&name, id);
            b.remove(&name, id);
            continue;
        }
        for v in &victims {
            b.end(v, true);
        }
        let mut ticks = 0;
        while b.rig.job(&name).status != JobStatus::Placed {
            b.rig.step();
            ticks += 1;
            assert!(ticks < 100, "{name} not placed after its victims ended");
        }
        ticks_all.push(ticks as f64);
        println!(
            "| {name} ({width} nodes) | {} | {:.1} | {:.1} | {ticks} |",
            victims.len(),
            idle.as_secs_f64() * 1e3,
            tick.as_secs_f64() * 1e3
        );
        b.rig.start_all(&name, id);
        b.remove(&name, id);
    }
    let (mean, p50, max) = stats(&mut ticks_all);
    println!("\nticks from the preemption to the placement: mean {mean:.1}, p50 {p50}, max {max}");
    println!("\n{mix:?}: {:.1} s", t0.elapsed().as_secs_f64());
}

fn main() {
    let decisions: usize = std::env::var("PREEMPT_DECISIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let t0 = Instant::now();
    scenario(Mix::Wide, SEED, decisions);
    scenario(Mix::Small, SEED + 1, decisions);
    println!("\ntotal {:.1} s", t0.elapsed().as_secs_f64());
}
