//! Node health checks in the planner (issue 43): what a storm of health changes costs
//! the core's tick on 10,000 nodes (a fat tree of 20-node leaves, 25 leaves a spine, 20
//! spines; every node runs a one-node job and 1,000 more wait), against the same tick
//! without the storm. Four storms of 1,000 nodes each, one tick each, in this order:
//!
//! - `fail`: a check fails on 1,000 nodes: each is drained by health;
//! - `degrade`: a check turns degraded on 1,000 other nodes: each is regrouped, scored lower;
//! - `same`: the same 2,000 reports again (an agent's new link sends every result): nothing
//!   changes;
//! - `recover`: every check passes again on all 2,000 (the drained start their way back).
//!
//! And the agent's side: what one round of its built-in checks costs (the IB ports of the
//! procfs fixture tree, the state directory's file system, /proc/meminfo, GPUs without a
//! driver, and a site script `/bin/true`), as a share of one core at the default interval
//! of 60 s (wall time over 200 rounds: an upper bound on CPU time on a quiet machine).
//!
//! A harness, not a criterion bench: it prints the figures in `benches/README.md`.
//! `cargo bench --bench health` (`HEALTH_REPS`, default 10).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use hyperplan_core::sim::{SIM_OWNER, planner_for};
use hyperplan_core::testing::{ClusterBuilder, JobBuilder};
use hyperplan_core::{Event, Planner, PlannerConfig};
use hyperplan_shared::health::{CheckResult, CheckState};

const NODES: usize = 10_000;
/// Nodes per storm (`HEALTH_STORM`, default 1,000).
fn storm_size() -> usize {
    std::env::var("HEALTH_STORM")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000)
}

fn reps() -> usize {
    std::env::var("HEALTH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// 10,000 nodes, each running a one-node job, and 1,000 one-node jobs waiting; ticked
/// until quiet.
fn planner() -> (Planner, Vec<String>, u64) {
    let cluster = ClusterBuilder::fat_tree(&[20, 25], 20).node_resources("cpu=64").build();
    assert_eq!(cluster.nodes.len(), NODES);
    let names: Vec<String> = cluster.nodes.iter().map(|n| n.name.clone()).collect();
    let mut p = planner_for(&cluster, PlannerConfig::default());
    for i in 0..NODES {
        let job = JobBuilder::gang(&format!("run-{i}"), 1, "cpu=64").build();
        hyperplan_core::sim::submit::submit(&mut p, job, SIM_OWNER);
    }
    let mut now = 1;
    p.tick(now);
    for i in 0..1_000 {
        let job = JobBuilder::gang(&format!("wait-{i}"), 1, "cpu=64").build();
        hyperplan_core::sim::submit::submit(&mut p, job, SIM_OWNER);
    }
    for _ in 0..3 {
        now += 1;
        p.tick(now);
    }
    (p, names, now)
}

fn storm(p: &mut Planner, nodes: &[String], state: Option<CheckState>) {
    for n in nodes {
        let check = match state {
            None => CheckResult::ok("ib:mlx5_0/1"),
            Some(s) => CheckResult::bad("ib:mlx5_0/1", s, "ib-width", "mlx5_0 port 1 width 1x (expected 4x)"),
        };
        p.push(Event::NodeChecks {
            node: n.clone(),
            checks: vec![check, CheckResult::ok("disk:/var/lib/hyperplan-agent")],
        });
    }
}

/// One round of every built-in check (and a site script), wall time per round, per kind:
/// an upper bound on the CPU time on a quiet machine (the script's wait for its child
/// included).
fn agent_checks() {
    use hyperplan_agent::config::HealthSection;
    use hyperplan_agent::health::{Context, HealthOptions};
    let state = tempfile::tempdir().unwrap();
    let sysfs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/sysfs/procfs/fixtures/sys");
    let section = HealthSection {
        script: Some(vec!["/bin/true".into()]),
        ..HealthSection::default()
    };
    let opts = HealthOptions::from_section(&section, state.path(), &sysfs).unwrap();
    let interval = opts.interval;
    let rounds = 200u32;
    let ctx = Context::detached();
    let mut total = Duration::ZERO;
    println!();
    println!("agent: one round of each check, wall time ({rounds} rounds, an upper bound on CPU time)");
    println!(
        "| check | per round (µs) | share of a core every {} s |",
        interval.as_secs()
    );
    println!("|---|---|---|");
    for mut s in opts.checks() {
        let results = s.check.run(&ctx).len();
        let t = Instant::now();
        for _ in 0..rounds {
            s.check.run(&ctx);
        }
        let per = t.elapsed() / rounds;
        total += per;
        let every = s.interval.as_secs_f64();
        println!(
            "| `{}` ({results} results) | {:.1} | {:.5} % |",
            s.check.kind(),
            per.as_secs_f64() * 1e6,
            per.as_secs_f64() / every * 100.0
        );
    }
    println!(
        "| all | {:.1} | {:.5} % |",
        total.as_secs_f64() * 1e6,
        total.as_secs_f64() / interval.as_secs_f64() * 100.0
    );
}

fn main() {
    if std::env::var("HEALTH_AGENT_ONLY").is_ok() {
        agent_checks();
        return;
    }
    // `HEALTH_PROFILE=N`: one setup, then N ticks that each fail or recover one node, for
    // a profiler to see the tick alone.
    if let Some(n) = std::env::var("HEALTH_PROFILE").ok().and_then(|v| v.parse::<u32>().ok()) {
        let (mut p, names, mut now) = planner();
        let t = Instant::now();
        for k in 0..n {
            let state = (k % 2 == 0).then_some(CheckState::Degraded);
            storm(&mut p, &names[..1], state);
            now += 1;
            p.tick(now);
        }
        println!("{n} ticks: {:.2} ms each", ms(t.elapsed()) / f64::from(n.max(1)));
        return;
    }
    // `HEALTH_PROFILE_FAIL=1`: one setup, then ten failure storms, each on 1,000 nodes
    // not drained yet, for a profiler started after the setup (`perf record -D`).
    if std::env::var("HEALTH_PROFILE_FAIL").is_ok() {
        let t = Instant::now();
        let (mut p, names, mut now) = planner();
        println!("setup: {:.0} ms", ms(t.elapsed()));
        for k in 0..10 {
            let failing: Vec<String> = names.iter().skip(k).step_by(10).cloned().collect();
            storm(&mut p, &failing, Some(CheckState::Failed));
            now += 1;
            let t = Instant::now();
            p.tick(now);
            println!("storm {k}: {:.2} ms", ms(t.elapsed()));
        }
        // Not dropped: a profile of the storms alone.
        std::mem::forget(p);
        return;
    }
    let mut quiet = Vec::new();
    let mut runs: [(&str, Vec<f64>); 4] = [
        ("fail", Vec::new()),
        ("degrade", Vec::new()),
        ("same", Vec::new()),
        ("recover", Vec::new()),
    ];
    for _ in 0..reps() {
        let (mut p, names, mut now) = planner();
        // Every 10th node fails, the next ones turn degraded: spread over every leaf.
        let failing: Vec<String> = names.iter().step_by(10).take(storm_size()).cloned().collect();
        let degrading: Vec<String> = names.iter().skip(1).step_by(10).take(storm_size()).cloned().collect();
        now += 1;
        let t = Instant::now();
        p.tick(now);
        quiet.push(ms(t.elapsed()));
        let mut tick = |p: &mut Planner| {
            now += 1;
            let t = Instant::now();
            p.tick(now);
            ms(t.elapsed())
        };
        storm(&mut p, &failing, Some(CheckState::Failed));
        runs[0].1.push(tick(&mut p));
        storm(&mut p, &degrading, Some(CheckState::Degraded));
        runs[1].1.push(tick(&mut p));
        storm(&mut p, &failing, Some(CheckState::Failed));
        storm(&mut p, &degrading, Some(CheckState::Degraded));
        runs[2].1.push(tick(&mut p));
        storm(&mut p, &failing, None);
        storm(&mut p, &degrading, None);
        runs[3].1.push(tick(&mut p));
        let drained = p.nodes().iter().filter(|n| n.drain.is_some()).count();
        assert_eq!(drained, storm_size(), "the failed nodes stay drained until returnAfter");
    }
    let q = median(quiet);
    println!(
        "10,000 nodes, 10,000 jobs running, 1,000 waiting; median of {} runs",
        reps()
    );
    println!("| tick | median (ms) | over a quiet tick (ms) |");
    println!("|---|---|---|");
    println!("| quiet (nothing arrives) | {q:.2} | – |");
    for (name, v) in runs {
        let m = median(v);
        println!("| `{name}`: 1,000 nodes' results | {m:.2} | {:.2} |", m - q);
    }
    agent_checks();
}
