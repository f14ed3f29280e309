//! Scheduling policy on real workloads (issues 23 and 42; see `benches/README.md`).
//!
//! Replays the first jobs of real logs of the Parallel Workloads Archive
//! (`testdata/traces`) on two fat trees each, with and without the logs' users, and puts
//! beside hyperplan, on the same jobs in the same run, the two yardsticks: EASY backfill,
//! topology-oblivious (`sim::easy`), and a topology-aware EASY (`sim::topo_easy`: one
//! domain of the lowest tier that holds the job, the first blocked job reserved, the rest
//! backfilled around it). One log processor = one node of `cpu=8`; `timeLimit` = the
//! log's requested time, runtimes as logged; a job that fits a leaf must have one leaf
//! (hard, tier 1), and a wider one asks softly for as few leaves as it can get
//! (`hyperplan simulate --swf --topology leaf`); the topology-aware EASY asks the same.
//!
//! Environment:
//! - `POLICY_LOGS`: which logs (comma-separated names from the list in `LOGS`: `kth`,
//!   `sdsc-sp2`, `ctc-sp2`, `hpc2n`, `lanl-cm5`); all by default.
//! - `POLICY_JOBS`: jobs per log (default 2,000; the files hold 10,000, KTH all of it).
//! - `POLICY_USERS`: `both` (default), `with` or `without` (every job one user's: the
//!   order is by age).
//! - `POLICY_SHAPES`: `both` (default), `small` or `large` leaves.
//! - `POLICY_CONFIG`: planner.toml text for the hyperplan runs (experiments).
//! - `POLICY_ASK`: `leaf` (default, above), `hard` (every job hard at the lowest tier
//!   that holds it: a 40-node job in one spine, `--topology hard`) or `none`.
//! - `POLICY_SOFT_AFTER=TIME` (`12h`, seconds): hard asks turn soft after the job waited
//!   TIME (`simulate --soft-after`, Slurm's `--switches=1@TIME`); the summary's last
//!   column shows the share of leaf-sized jobs that still got one leaf.
//! - `POLICY_EXTRA`: also greedy (`reservations = 0`), soft topology and no starvation
//!   bound. `POLICY_CLASSES`: mean waits by job width.
//! - `POLICY_WORST=K`: the K longest waits under each run, each with its wait under the
//!   others: which jobs make the max.
//! - `POLICY_LEAVES=T1-T2`: at each tick from T1 to T2 (seconds of the replay), what
//!   runs in each leaf and what waits.
//! - `POLICY_DUMP=DIR`: each case's jobs and their starts and ends under every run, as
//!   CSV files in DIR.
//! - `POLICY_JITTER=K` (or `A-B`: copies A to B): EASY (oblivious) again on K copies of
//!   the jobs, each job submitted 0 or 1 s later (a fixed pseudo-random choice per copy
//!   and job; the logs' times are rounded to the second): how far EASY's own mean and
//!   max move under noise below the logs' resolution, and in how many copies both stay
//!   at or below the unshifted run's (the bar, EASY against itself). With
//!   `POLICY_JITTER_OURS`, hyperplan too, against the unshifted EASY, and copy by copy
//!   against EASY on the same copy (`sim::noise::Pairwise`; copy 0 is the log as it is:
//!   `POLICY_JITTER=0-8`).
//! - `POLICY_DIVERGE=K`: the first K jobs that start at another time than under the
//!   yardstick that asks the same (EASY with `none`), and the planner's pending jobs and
//!   reservations at the first of those times: where a gap starts.
//!
//! Run: `cargo bench --bench policy` (one core is enough: `taskset -c 0`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Instant;

use hyperplan_core::PlannerConfig;
use hyperplan_core::sim::baselines::baselines;
use hyperplan_core::sim::metrics::{Outcome, TraceMetrics, outcomes, trace_metrics};
use hyperplan_core::sim::swf::{SwfOptions, TopologyAsk, replay};
use hyperplan_core::sim::topo_easy::{TreeShape, Wide};
use hyperplan_core::testing::ClusterBuilder;
use hyperplan_shared::JobSpec;

/// The daemon's allocator (`planner/src/main.rs`), so the figures are the daemon's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A log and the two fat trees (small and large leaves) of its machine's node count.
struct Log {
    name: &'static str,
    file: &'static str,
    shapes: [TreeShape; 2],
}

const fn tree(leaf: u32, per_spine: u32, spines: u32) -> TreeShape {
    TreeShape {
        leaf,
        per_spine,
        spines,
    }
}

const LOGS: &[Log] = &[
    Log {
        name: "kth",
        file: "KTH-SP2-1996-2.1-cln.swf",
        shapes: [tree(10, 5, 2), tree(25, 2, 2)],
    },
    Log {
        name: "sdsc-sp2",
        file: "SDSC-SP2-1998-4.2-cln.first10000.swf",
        shapes: [tree(16, 4, 2), tree(32, 2, 2)],
    },
    Log {
        name: "ctc-sp2",
        file: "CTC-SP2-1996-3.1-cln.first10000.swf",
        shapes: [tree(13, 13, 2), tree(26, 13, 1)],
    },
    Log {
        name: "hpc2n",
        file: "HPC2N-2002-2.2-cln.first10000.swf",
        shapes: [tree(16, 5, 3), tree(24, 5, 2)],
    },
    Log {
        name: "lanl-cm5",
        file: "LANL-CM5-1994-4.1-cln.first10000.swf",
        shapes: [tree(16, 8, 8), tree(32, 8, 4)],
    },
];

fn env_list(key: &str) -> Option<Vec<String>> {
    std::env::var(key)
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_lowercase()).collect())
}

/// A share as a percentage, rounded down: 100.00 % only when it is all.
fn share(v: Option<f64>) -> String {
    v.map_or_else(
        || "–".into(),
        |v| format!("{:.2} %", (v * 10_000.0 + 1e-6).floor() / 100.0),
    )
}

fn row(name: &str, m: &TraceMetrics, secs: f64) {
    let opt = |v: Option<f64>, pct: bool| match v {
        Some(_) if pct => share(v),
        Some(v) => format!("{v:.2}"),
        None => "–".into(),
    };
    println!(
        "| {name} | {:.0} | {} | {} | {:.1} | {:.1} % | {} | {} | {}/{} | {secs:.1} s |",
        m.mean_wait,
        m.p95_wait,
        m.max_wait,
        m.bounded_slowdown,
        m.utilisation * 100.0,
        opt(m.leaves_per_job, false),
        opt(m.leaf_sized_in_one_leaf, true),
        m.started,
        m.jobs,
    );
}

/// One line of the summary: hyperplan against both yardsticks on one log, tree and
/// user setting.
struct Verdict {
    case: String,
    easy: TraceMetrics,
    topo: TraceMetrics,
    ours: TraceMetrics,
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let jobs: usize = std::env::var("POLICY_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let wanted = env_list("POLICY_LOGS");
    let users: &[bool] = match std::env::var("POLICY_USERS").as_deref() {
        Ok("with") => &[true],
        Ok("without") => &[false],
        _ => &[true, false],
    };
    let shapes: &[usize] = match std::env::var("POLICY_SHAPES").as_deref() {
        Ok("small") => &[0],
        Ok("large") => &[1],
        _ => &[0, 1],
    };
    let ours = match std::env::var("POLICY_CONFIG") {
        Ok(text) => PlannerConfig::parse(&text, "POLICY_CONFIG").unwrap(),
        Err(_) => PlannerConfig::default(),
    };
    let extra = std::env::var("POLICY_EXTRA").is_ok();
    let ask = match std::env::var("POLICY_ASK").as_deref() {
        Ok("hard") => TopologyAsk::Hard,
        Ok("none") => TopologyAsk::None,
        _ => TopologyAsk::Leaf,
    };
    let mut verdicts = Vec::new();
    for log in LOGS {
        if wanted.as_ref().is_some_and(|w| !w.iter().any(|n| n == log.name)) {
            continue;
        }
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/traces")
            .join(log.file);
        let swf = hyperplan_shared::swf::load_swf_file(&path, Some(jobs)).unwrap();
        for &k in shapes {
            let shape = log.shapes[k];
            for &with_users in users {
                verdicts.push(one(log, &swf, shape, with_users, &ours, extra, ask));
            }
        }
    }
    println!(
        "\nSummary ({ask:?} topology): hyperplan against EASY (oblivious) and topology-aware EASY, mean / max wait in seconds\n"
    );
    println!(
        "| log, tree, users | EASY | topology-aware EASY | hyperplan | mean ≤ EASY | max ≤ EASY | leaf-sized jobs in one leaf |"
    );
    println!("|---|---|---|---|---|---|---|");
    for v in &verdicts {
        let mark = |ok: bool| if ok { "yes" } else { "**no**" };
        println!(
            "| {} | {:.0} / {} | {:.0} / {} | {:.0} / {} | {} ({:+.1} %) | {} ({:+.1} %) | {} |",
            v.case,
            v.easy.mean_wait,
            v.easy.max_wait,
            v.topo.mean_wait,
            v.topo.max_wait,
            v.ours.mean_wait,
            v.ours.max_wait,
            mark(v.ours.mean_wait <= v.easy.mean_wait),
            (v.ours.mean_wait / v.easy.mean_wait.max(1e-9) - 1.0) * 100.0,
            mark(v.ours.max_wait <= v.easy.max_wait),
            (v.ours.max_wait as f64 / v.easy.max_wait.max(1) as f64 - 1.0) * 100.0,
            share(v.ours.leaf_sized_in_one_leaf),
        );
    }
}

/// Every run of one log on one tree, with or without its users.
fn one(
    log: &Log,
    swf: &hyperplan_shared::swf::SwfLog,
    shape: TreeShape,
    with_users: bool,
    ours: &PlannerConfig,
    extra: bool,
    ask: TopologyAsk,
) -> Verdict {
    let cluster = ClusterBuilder::fat_tree(&[shape.leaf, shape.per_spine], shape.spines)
        .node_resources("cpu=8")
        .build();
    let nodes = shape.nodes();
    let soft_after = std::env::var("POLICY_SOFT_AFTER")
        .ok()
        .map(|t| hyperplan_shared::timelimit::parse_time_limit(&t).unwrap());
    let mk = |topology| {
        let opts = SwfOptions {
            topology,
            soft_after,
            ..SwfOptions::default()
        };
        let mut r = replay(swf, &cluster, &opts).unwrap();
        if !with_users {
            for j in &mut r.jobs {
                j.user = None;
            }
        }
        r
    };
    let asked = mk(ask);
    let wide = match ask {
        TopologyAsk::Leaf => Wide::Anywhere,
        _ => Wide::OneDomain,
    };
    let case = format!(
        "{}, {} nodes in leaves of {}, {}",
        log.name,
        nodes,
        shape.leaf,
        if with_users { "users" } else { "no users" }
    );
    println!(
        "\n{} ({} jobs read, {} replayed, {} skipped): {nodes} nodes, {} per leaf, {} leaves per spine, {} spines, {}\n",
        log.file,
        swf.jobs.len(),
        asked.jobs.len(),
        asked.skipped.len(),
        shape.leaf,
        shape.per_spine,
        shape.spines,
        if with_users {
            "with the log's users"
        } else {
            "without users (order by age)"
        },
    );
    println!(
        "| run | mean wait (s) | p95 wait (s) | max wait (s) | bounded slowdown | utilisation | leaves per multi-node job | leaf-sized jobs in one leaf | started | time |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let sim = |name: &str, jobs: &[JobSpec], cfg: PlannerConfig| {
        let t = Instant::now();
        let report = hyperplan_core::sim::simulate(&cluster, jobs, cfg);
        let secs = t.elapsed().as_secs_f64();
        let oc = outcomes(&report);
        let m = trace_metrics(&oc, nodes, shape.leaf);
        row(name, &m, secs);
        if std::env::var("POLICY_CLASSES").is_ok() {
            classes(
                name,
                &oc.iter()
                    .zip(jobs)
                    .map(|(o, j)| (o.clone(), j.replicas()))
                    .collect::<Vec<_>>(),
            );
        }
        (m, oc)
    };
    let t = Instant::now();
    let base = baselines(&asked.jobs, &cluster, shape.leaf, wide);
    let base_secs = t.elapsed().as_secs_f64();
    let (topo_shape, topo, topo_outcomes) = base.topology_aware.expect("a regular fat tree");
    assert_eq!(topo_shape, shape, "the tree read back from the cluster");
    let (easy, easy_outcomes) = (base.easy, base.easy_outcomes);
    row("EASY, topology-oblivious", &easy, base_secs);
    row("EASY, topology-aware", &topo, base_secs);
    if let Some(copies) = std::env::var("POLICY_JITTER")
        .ok()
        .and_then(|v| match v.split_once('-') {
            Some((a, b)) => Some(a.parse::<u64>().ok()?..=b.parse().ok()?),
            None => Some(1..=v.parse().ok()?),
        })
    {
        let ours_too = std::env::var("POLICY_JITTER_OURS").is_ok().then_some((&cluster, ours));
        jitter(copies, &case, &asked.jobs, &easy, ours_too, |jobs| {
            baselines(jobs, &cluster, shape.leaf, wide).easy
        });
    }
    if std::env::var("POLICY_CLASSES").is_ok() {
        classes(
            "easy",
            &easy_outcomes.iter().map(|o| (o.clone(), o.nodes)).collect::<Vec<_>>(),
        );
        classes(
            "topology-aware easy",
            &topo_outcomes.iter().map(|o| (o.clone(), o.nodes)).collect::<Vec<_>>(),
        );
    }
    if extra {
        let mut greedy = ours.clone();
        greedy.scheduler.reservations = 0;
        sim("greedy (reservations = 0)", &asked.jobs, greedy);
        sim("hyperplan, soft", &mk(TopologyAsk::Soft).jobs, ours.clone());
        let mut unbounded = ours.clone();
        unbounded.scheduler.starvation = 0;
        unbounded.scheduler.starvation_factor = 0;
        sim("hyperplan, no starvation bound", &asked.jobs, unbounded);
    }
    let (m, ours_outcomes) = sim("hyperplan", &asked.jobs, ours.clone());
    if let Ok(k) = std::env::var("POLICY_WORST") {
        worst(
            k.parse().unwrap_or(5),
            &asked.jobs,
            [
                ("hyperplan", &ours_outcomes),
                ("easy", &easy_outcomes),
                ("topology-aware easy", &topo_outcomes),
            ],
        );
    }
    if let Some((from, to)) = std::env::var("POLICY_LEAVES")
        .ok()
        .and_then(|w| {
            w.split_once('-')
                .map(|(a, b)| (a.parse::<u64>().ok(), b.parse::<u64>().ok()))
        })
        .and_then(|(a, b)| a.zip(b))
    {
        leaves(&cluster, &asked.jobs, ours.clone(), from, to);
    }
    if let Ok(dir) = std::env::var("POLICY_DUMP") {
        dump(
            &Path::new(&dir).join(format!(
                "{}-{}-{}.csv",
                log.name,
                shape.leaf,
                if with_users { "users" } else { "nousers" }
            )),
            &asked.jobs,
            [&ours_outcomes, &easy_outcomes, &topo_outcomes],
        );
    }
    if let Ok(k) = std::env::var("POLICY_DIVERGE") {
        let report = hyperplan_core::sim::simulate(&cluster, &asked.jobs, ours.clone());
        let oc = outcomes(&report);
        // Against the yardstick that asks as hyperplan's jobs ask.
        let easy_outcomes = if ask == TopologyAsk::None {
            &easy_outcomes
        } else {
            &topo_outcomes
        };
        let mut order: Vec<usize> = (0..oc.len()).collect();
        order.sort_by_key(|&i| (easy_outcomes[i].start, i));
        let first: Vec<usize> = order
            .into_iter()
            .filter(|&i| oc[i].start != easy_outcomes[i].start)
            .take(k.parse().unwrap_or(5))
            .collect();
        if let Some(t) = first.first().and_then(|&i| easy_outcomes[i].start) {
            // The planner's view just after its tick at the first divergence's time.
            let upto = (first[0] + 200).min(asked.jobs.len());
            hyperplan_core::sim::simulate_with(&cluster, &asked.jobs[..upto], ours.clone(), |p| {
                let now = p
                    .world_for_tests()
                    .resource::<hyperplan_core::model::tick::Now>()
                    .secs();
                if now != t {
                    return;
                }
                let idle: std::collections::BTreeSet<String> = p
                    .nodes()
                    .into_iter()
                    .filter(|n| n.running_tasks == 0)
                    .map(|n| n.name)
                    .collect();
                println!("at {now}: free nodes {}", idle.len());
                for j in p.jobs() {
                    if let Some(r) = &j.reservation {
                        let on_idle = r.nodes.iter().filter(|n| idle.contains(*n)).count();
                        let limits: std::collections::BTreeMap<&str, u64> = asked
                            .jobs
                            .iter()
                            .map(|j| (j.name.as_str(), j.run.time_limit.unwrap_or(0)))
                            .collect();
                        let freed: usize = p
                            .jobs()
                            .iter()
                            .filter(|x| x.start_time.is_some() && x.end_time.is_none_or(|e| e > now))
                            .filter(|x| x.start_time.unwrap() + limits[x.name.as_str()] <= r.start)
                            .map(|x| x.tasks.len())
                            .sum();
                        println!(
                            "  reservation {} at {}: {} nodes, {on_idle} of them idle now; {freed} nodes free by then",
                            j.name,
                            r.start,
                            r.nodes.len()
                        );
                    }
                }
                for j in p.jobs() {
                    if matches!(j.status, hyperplan_shared::report::JobStatus::Pending) {
                        println!(
                            "  pending {} n={} submit={} score={:?} reason={:?} resv={:?}",
                            j.name,
                            j.tasks.len(),
                            j.submit_time,
                            j.priority.as_ref().map(|p| p.score),
                            j.reason,
                            j.reservation.as_ref().map(|r| (r.start, r.nodes.len()))
                        );
                    } else if j.start_time.is_some() && j.end_time.is_none_or(|e| e > now) {
                        let on: Vec<String> = j.tasks.iter().filter_map(|t| t.node.clone()).collect();
                        println!(
                            "  running {} n={} start={:?} end={:?} on {}",
                            j.name,
                            j.tasks.len(),
                            j.start_time,
                            j.end_time,
                            on.join(",")
                        );
                    }
                }
            });
        }
        let longest = |o: &[Outcome]| {
            (0..o.len())
                .filter_map(|i| Some((o[i].start? - o[i].submit, i)))
                .max()
                .map(|(w, i)| {
                    format!(
                        "{} ({} nodes, limit {:?}, user {:?}) waited {w}",
                        asked.jobs[i].name, o[i].nodes, asked.jobs[i].run.time_limit, asked.jobs[i].user
                    )
                })
        };
        println!(
            "longest wait: ours {:?}; yardstick {:?}",
            longest(&oc),
            longest(easy_outcomes)
        );
        for i in first {
            println!(
                "diverge: {} nodes={} submit={} limit={:?} runtime={:?} easy={:?} topo={:?} ours={:?}",
                asked.jobs[i].name,
                oc[i].nodes,
                oc[i].submit,
                asked.jobs[i].run.time_limit,
                asked.jobs[i].tasks[0].runtime,
                easy_outcomes[i].start,
                topo_outcomes[i].start,
                oc[i].start
            );
        }
    }
    Verdict {
        case,
        easy,
        topo,
        ours: m,
    }
}

/// At each tick from `from` to `to`: each leaf's running jobs (name:nodes there) and
/// the jobs waiting with their widths, to see how backfill fills the leaves.
fn leaves(cluster: &hyperplan_shared::ClusterSpec, jobs: &[JobSpec], cfg: PlannerConfig, from: u64, to: u64) {
    let upto = jobs.iter().position(|j| j.submit_time > to).unwrap_or(jobs.len());
    hyperplan_core::sim::simulate_with(cluster, &jobs[..upto], cfg, |p| {
        let now = p
            .world_for_tests()
            .resource::<hyperplan_core::model::tick::Now>()
            .secs();
        if now < from || now > to {
            return;
        }
        let mut by_leaf: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        let mut waiting = Vec::new();
        for j in p.jobs() {
            match j.status {
                hyperplan_shared::report::JobStatus::Pending => waiting.push(format!(
                    "{}:{}{}",
                    j.name,
                    j.tasks.len(),
                    if j.reservation.is_some() { "R" } else { "" }
                )),
                _ if j.start_time.is_some() && j.end_time.is_none_or(|e| e > now) => {
                    let mut here: std::collections::BTreeMap<String, u32> = Default::default();
                    for t in &j.tasks {
                        if let Some(l) = t.hyper_nodes.first() {
                            *here.entry(l.clone()).or_default() += 1;
                        }
                    }
                    for (l, n) in here {
                        by_leaf.entry(l).or_default().push(format!("{}:{n}", j.name));
                    }
                }
                _ => {}
            }
        }
        println!("t={now}");
        for (l, v) in by_leaf {
            println!("  {l}: {}", v.join(" "));
        }
        println!("  waiting: {}", waiting.join(" "));
    });
}

/// `POLICY_JITTER` (see the module): EASY on the `copies` of `jobs`, each job 0 or 1 s
/// later; the ratios to the unshifted EASY's mean and max, and how many copies meet the
/// issue's bar against it. `ours`: hyperplan on the same copies too.
fn jitter(
    copies: std::ops::RangeInclusive<u64>,
    case: &str,
    jobs: &[JobSpec],
    easy: &TraceMetrics,
    ours: Option<(&hyperplan_shared::ClusterSpec, &PlannerConfig)>,
    run_easy: impl Fn(&[JobSpec]) -> TraceMetrics,
) {
    let mut easy_r = Vec::new();
    let mut ours_r = Vec::new();
    let mut pairs = Vec::new();
    for copy in copies {
        let shifted = hyperplan_core::sim::noise::shifted(jobs, copy);
        let ratio = |m: &TraceMetrics| {
            (
                m.mean_wait / easy.mean_wait.max(1e-9),
                m.max_wait as f64 / easy.max_wait.max(1) as f64,
            )
        };
        let easy_m = run_easy(&shifted);
        easy_r.push(ratio(&easy_m));
        if let Some((cluster, cfg)) = ours {
            let report = hyperplan_core::sim::simulate(cluster, &shifted, cfg.clone());
            let oc = outcomes(&report);
            let nodes = u32::try_from(cluster.nodes.len()).unwrap_or(u32::MAX);
            let ours_m = trace_metrics(&oc, nodes, 1);
            ours_r.push(ratio(&ours_m));
            pairs.push((ours_m, easy_m));
        }
    }
    let show = |name: &str, r: &[(f64, f64)]| {
        if r.is_empty() {
            return;
        }
        let lo = |f: fn(&(f64, f64)) -> f64| r.iter().map(f).fold(f64::INFINITY, f64::min);
        let hi = |f: fn(&(f64, f64)) -> f64| r.iter().map(f).fold(0.0, f64::max);
        let pass = r.iter().filter(|(a, b)| *a <= 1.0 && *b <= 1.0).count();
        println!(
            "jitter | {case} | {name} | mean {:.3}–{:.3} | max {:.3}–{:.3} | both ≤ EASY in {pass} of {} | {} (* both ≤)",
            lo(|x| x.0),
            hi(|x| x.0),
            lo(|x| x.1),
            hi(|x| x.1),
            r.len(),
            r.iter()
                .map(|(a, b)| format!("{a:.4}/{b:.4}{}", if *a <= 1.0 && *b <= 1.0 { "*" } else { "" }))
                .collect::<Vec<_>>()
                .join(" "),
        );
    };
    show("EASY, 0–1 s later", &easy_r);
    show("hyperplan, 0–1 s later", &ours_r);
    if !pairs.is_empty() {
        let p = hyperplan_core::sim::noise::Pairwise::of(pairs.iter().map(|(o, e)| (o, e)));
        println!(
            "jitter | {case} | hyperplan against EASY on the same copy | mean ≤ in {} of {} | max ≤ in {} | both in {}",
            p.mean_at_or_below, p.runs, p.max_at_or_below, p.both
        );
    }
}

/// One line per job: its ask and its start and end under hyperplan, EASY and the
/// topology-aware EASY, for a look with other tools.
fn dump(path: &Path, jobs: &[JobSpec], runs: [&[Outcome]; 3]) {
    let mut text =
        String::from("job,nodes,user,submit,limit,runtime,start,end,easy_start,easy_end,topo_start,topo_end\n");
    let t = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
    for (i, j) in jobs.iter().enumerate() {
        let [o, e, p] = runs.map(|r| &r[i]);
        text += &format!(
            "{},{},{},{},{},{},{},{},{},{},{},{}\n",
            j.name,
            o.nodes,
            j.user.as_deref().unwrap_or(""),
            o.submit,
            t(j.run.time_limit),
            t(j.tasks[0].runtime),
            t(o.start),
            t(o.end),
            t(e.start),
            t(e.end),
            t(p.start),
            t(p.end)
        );
    }
    std::fs::write(path, text).unwrap();
}

/// The `k` longest waits under each run, each with its wait under the others.
fn worst(k: usize, jobs: &[JobSpec], runs: [(&str, &[Outcome]); 3]) {
    let wait = |o: &Outcome| o.start.map(|s| s - o.submit);
    for (name, oc) in runs {
        let mut by: Vec<(u64, usize)> = (0..oc.len()).filter_map(|i| Some((wait(&oc[i])?, i))).collect();
        by.sort_by(|a, b| b.cmp(a));
        for &(w, i) in by.iter().take(k) {
            let others: Vec<String> = runs.iter().map(|(n, o)| format!("{n} {:?}", wait(&o[i]))).collect();
            println!(
                "worst under {name}: {} ({} nodes, limit {:?}, runtime {:?}, user {:?}, submit {}) waited {w}; {}",
                jobs[i].name,
                oc[i].nodes,
                jobs[i].run.time_limit,
                jobs[i].tasks[0].runtime,
                jobs[i].user,
                oc[i].submit,
                others.join(", ")
            );
        }
    }
}

fn classes(name: &str, jobs: &[(Outcome, u32)]) {
    let bounds = [(1, 1), (2, 10), (11, 50), (51, 100)];
    let mut line = format!("{name}:");
    for (lo, hi) in bounds {
        let w: Vec<u64> = jobs
            .iter()
            .filter(|(_, n)| *n >= lo && *n <= hi)
            .filter_map(|(o, _)| o.start.map(|s| s - o.submit))
            .collect();
        let sum: u64 = w.iter().sum();
        line += &format!(
            " [{lo}-{hi}] n={} mean={:.0} total={}",
            w.len(),
            sum as f64 / w.len().max(1) as f64,
            sum
        );
    }
    println!("{line}");
}
