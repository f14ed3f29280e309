//! `[scheduler] backfillOrder` (issue 42): once the reservations are made, which of the
//! jobs after them takes a hole two could use. Replays in virtual time on four nodes;
//! the invariants are checked after every tick, and the reserved job starts on time in
//! every order.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hyperplan_core::PlannerConfig;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, run, start_of};
use hyperplan_shared::JobSpec;
use hyperplan_shared::report::Report;

fn job(name: &str, nodes: u32, submit: u64, runtime: u64) -> JobSpec {
    JobBuilder::gang(name, nodes, "cpu=8")
        .submit(submit)
        .runtime(runtime)
        .limit(runtime)
        .build()
}

/// Three nodes busy until 1,000 and one until 50; `wide` (all four) is reserved at
/// 1,000. At 50 one node frees, and two waiting jobs could use it before 1,000: `long`
/// (900 s, waiting since 2) and `short` (100 s, waiting since `short_at`). Whichever goes
/// first, the other no longer ends before 1,000 and waits for `wide`. The starvation
/// factor is off: the orders are the subject, not who starves.
fn replay(order: &str, short_at: u64) -> Report {
    let jobs = vec![
        job("r1", 3, 0, 1_000),
        job("r2", 1, 0, 50),
        job("wide", 4, 1, 1_000),
        job("long", 1, 2, 900),
        job("short", 1, short_at, 100),
    ];
    let cluster = ClusterBuilder::flat(4).node_resources("cpu=8").build();
    let config = PlannerConfig::parse(
        &format!("[scheduler]\nreservations = 1\nbackfillOrder = \"{order}\"\nstarvationFactor = 0\n"),
        "planner.toml",
    )
    .unwrap();
    let r = run(&cluster, &jobs, config);
    assert_eq!(start_of(&r, "wide"), 1_000, "{order}: the reservation is kept");
    r
}

/// Which of the two took the hole at 50.
fn first(r: &Report) -> &'static str {
    match (start_of(r, "long"), start_of(r, "short")) {
        (50, s) if s > 1_000 => "long",
        (l, 50) if l > 1_000 => "short",
        other => panic!("neither took the hole alone: {other:?}"),
    }
}

#[test]
fn priority_backfills_in_the_queues_order_the_older_job_first() {
    assert_eq!(first(&replay("priority", 40)), "long");
}

#[test]
fn shortest_backfills_the_shorter_job_first() {
    assert_eq!(first(&replay("shortest", 40)), "short");
    assert_eq!(first(&replay("shortest", 49)), "short");
}

#[test]
fn xfactor_weighs_the_wait_against_the_run() {
    // At 50: `long` (48 + 900) / 900 = 1.053. `short` from 40: (10 + 100) / 100 = 1.1,
    // it goes first; from 49: (1 + 100) / 100 = 1.01, `long` goes first.
    assert_eq!(first(&replay("xfactor", 40)), "short");
    assert_eq!(first(&replay("xfactor", 49)), "long");
}
