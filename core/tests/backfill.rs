//! Backfill with reservations (`allocate::backfill`): a wide job blocked by running ones
//! gets the earliest room one HyperNode of its tier will have, narrow jobs start only where
//! they cannot delay it, and `[scheduler] reservations = 0` is the old greedy walk. Every
//! run checks the invariants after every tick, and that no reservation is pushed back.

use std::collections::BTreeMap;

use hyperplan_core::PlannerConfig;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, run};
use hyperplan_shared::JobSpec;
use hyperplan_shared::report::{JobReport, Report};

fn job<'a>(r: &'a Report, name: &str) -> &'a JobReport {
    r.jobs
        .iter()
        .find(|j| j.name == name)
        .unwrap_or_else(|| panic!("no job {name} in {r:#?}"))
}

fn start(r: &Report, name: &str) -> u64 {
    job(r, name)
        .start_time
        .unwrap_or_else(|| panic!("{name} never started: {:?}", job(r, name).reason))
}

fn greedy() -> PlannerConfig {
    PlannerConfig::parse("[scheduler]\nreservations = 0\n", "planner.toml").unwrap_or_else(|e| panic!("{e}"))
}

/// A job of `n` whole nodes (`cpu=8` each) that runs `runtime` seconds with time limit
/// `limit`, submitted at `at`.
fn whole(name: &str, n: u32, at: u64, runtime: u64, limit: u64) -> JobSpec {
    JobBuilder::gang(name, n, "cpu=8")
        .submit(at)
        .runtime(runtime)
        .limit(limit)
        .build()
}

/// Simulates with the invariants checked after every tick, and checks that no job starts
/// later than the first reservation it was given (estimates here are exact, and every
/// job arrives behind the others: nothing may push a reservation back).
fn run_checked(cluster: &hyperplan_shared::ClusterSpec, jobs: &[JobSpec], config: PlannerConfig) -> Report {
    let mut first: BTreeMap<String, u64> = BTreeMap::new();
    let report = hyperplan_core::sim::simulate_with(cluster, jobs, config.clone(), |planner| {
        let bad = planner.violations();
        assert!(bad.is_empty(), "invariants broken: {bad:#?}");
        for j in planner.jobs() {
            if let Some(r) = &j.reservation {
                first.entry(j.name.clone()).or_insert(r.start);
            }
        }
    });
    // The same run through the test helper agrees (the helper checks invariants too).
    assert_eq!(run(cluster, jobs, config).jobs.len(), report.jobs.len());
    for (name, reserved) in &first {
        let started = start(&report, name);
        assert!(
            started <= *reserved,
            "{name} was reserved for {reserved} but started at {started}"
        );
    }
    report
}

#[test]
fn a_wide_job_gets_its_reservation_and_only_short_jobs_slip_in_front() {
    let cluster = ClusterBuilder::flat(4).build();
    let jobs = vec![
        whole("a", 2, 0, 100, 100),
        whole("wide", 4, 1, 100, 100),
        // Would hold a node until 1002: past the wide job's reservation at 100.
        whole("long", 1, 2, 1000, 1000),
        // Ends by 53, before the reservation: backfills.
        whole("short", 1, 3, 50, 50),
    ];
    let r = run_checked(&cluster, &jobs, PlannerConfig::default());
    assert_eq!(start(&r, "a"), 0);
    assert_eq!(start(&r, "short"), 3);
    assert_eq!(start(&r, "wide"), 100);
    assert_eq!(start(&r, "long"), 200);

    // Greedy (today's walk): the long job slips in and the wide one waits for it.
    let g = run(&cluster, &jobs, greedy());
    assert_eq!(start(&g, "long"), 2);
    assert_eq!(start(&g, "wide"), 1002);
}

#[test]
fn a_job_may_start_past_a_reservation_on_nodes_it_does_not_hold() {
    // 4 nodes; `a` holds 2 until 100; the 3-node job reserves at 100 and leaves one
    // node of the four unreserved: a long 1-node job takes it now.
    let cluster = ClusterBuilder::flat(4).build();
    let jobs = vec![
        whole("a", 2, 0, 100, 100),
        whole("three", 3, 1, 100, 100),
        whole("long", 1, 2, 1000, 1000),
        whole("long2", 1, 3, 1000, 1000),
    ];
    let r = run_checked(&cluster, &jobs, PlannerConfig::default());
    assert_eq!(start(&r, "long"), 2);
    assert_eq!(start(&r, "three"), 100);
    // The second long job would take a node the reservation needs.
    assert!(start(&r, "long2") >= 200, "{:?}", job(&r, "long2"));
}

#[test]
fn a_reservation_takes_room_that_frees_later_and_leaves_free_room_to_backfill() {
    // 8 nodes. `a` holds 2 until 10, `b` 4 until 100, `c` 2 until 1000. At 11 the wide
    // job waits for 4 nodes: at 100 it could have the two `a` left free (first by name)
    // or `b`'s four. Reserved on `b`'s, the two free now stay free for the long job, as
    // EASY's "extra nodes" would.
    let cluster = ClusterBuilder::flat(8).build();
    let jobs = vec![
        whole("a", 2, 0, 10, 10),
        whole("b", 4, 0, 100, 100),
        whole("c", 2, 0, 1000, 1000),
        whole("wide", 4, 11, 100, 100),
        whole("long", 2, 12, 1000, 1000),
    ];
    let r = run_checked(&cluster, &jobs, PlannerConfig::default());
    assert_eq!(start(&r, "wide"), 100);
    assert_eq!(start(&r, "long"), 12, "{:?}", job(&r, "long"));
    let mut wide = job(&r, "wide").tasks.iter().map(|t| t.node.clone()).collect::<Vec<_>>();
    let mut b = job(&r, "b").tasks.iter().map(|t| t.node.clone()).collect::<Vec<_>>();
    wide.sort();
    b.sort();
    assert_eq!(wide, b, "the wide job runs where `b` ran");
}

#[test]
fn a_reservation_that_needs_some_free_room_takes_no_more_of_it_than_it_must() {
    // 8 nodes. `a` holds 2 until 10, `b` 3 until 100, `c` 3 until 1000. At 100 the wide
    // job has `b`'s three and one of the two free now: the other is the long job's.
    let cluster = ClusterBuilder::flat(8).build();
    let jobs = vec![
        whole("a", 2, 0, 10, 10),
        whole("b", 3, 0, 100, 100),
        whole("c", 3, 0, 1000, 1000),
        whole("wide", 4, 11, 100, 100),
        whole("long", 1, 12, 1000, 1000),
        whole("long2", 1, 13, 1000, 1000),
    ];
    let r = run_checked(&cluster, &jobs, PlannerConfig::default());
    assert_eq!(start(&r, "wide"), 100);
    assert_eq!(start(&r, "long"), 12, "{:?}", job(&r, "long"));
    assert!(start(&r, "long2") >= 200, "{:?}", job(&r, "long2"));
}

#[test]
fn the_reservation_is_inside_one_leaf_and_backfill_uses_the_other() {
    // Two leaves of 4 nodes. Leaf 1 is busy until 100 (3 nodes), leaf 2 until 500 (2
    // nodes). A 4-node job that must stay in one leaf reserves leaf 1 at 100; a long
    // 2-node job that must stay in one leaf fits in leaf 2's free nodes now, and does.
    let cluster = ClusterBuilder::fat_tree(&[4], 2).build();
    let jobs = vec![
        JobBuilder::gang("leaf1-busy", 3, "cpu=8")
            .hard(1)
            .submit(0)
            .runtime(100)
            .limit(100)
            .build(),
        JobBuilder::gang("leaf2-busy", 2, "cpu=8")
            .hard(1)
            .submit(0)
            .runtime(500)
            .limit(500)
            .build(),
        JobBuilder::gang("wide", 4, "cpu=8")
            .hard(1)
            .submit(1)
            .runtime(100)
            .limit(100)
            .build(),
        JobBuilder::gang("side", 2, "cpu=8")
            .hard(1)
            .submit(2)
            .runtime(1000)
            .limit(1000)
            .build(),
    ];
    let r = run_checked(&cluster, &jobs, PlannerConfig::default());
    assert_eq!(start(&r, "wide"), 100);
    assert_eq!(start(&r, "side"), 2);
    let leaf = |name: &str| -> Vec<String> {
        let mut l: Vec<String> = job(&r, name)
            .tasks
            .iter()
            .filter_map(|t| t.hyper_nodes.first().cloned())
            .collect();
        l.sort();
        l.dedup();
        l
    };
    assert_eq!(leaf("wide").len(), 1);
    assert_eq!(leaf("side").len(), 1);
    assert_eq!(leaf("wide"), leaf("leaf1-busy"));
    assert_eq!(leaf("side"), leaf("leaf2-busy"));
}

#[test]
fn a_pending_job_shows_its_expected_start_and_nodes() {
    let cluster = ClusterBuilder::flat(4).build();
    let jobs = vec![whole("a", 3, 0, 100, 100), whole("wide", 4, 1, 100, 100)];
    let mut seen = None;
    hyperplan_core::sim::simulate_with(&cluster, &jobs, PlannerConfig::default(), |planner| {
        if let Some(w) = planner.jobs().into_iter().find(|j| j.name == "wide")
            && let Some(r) = w.reservation
        {
            seen.get_or_insert(r);
        }
    });
    let r = seen.unwrap_or_else(|| panic!("the wide job never had a reservation"));
    assert_eq!(r.start, 100);
    assert_eq!(r.nodes.len(), 4);
}

#[test]
fn jobs_without_a_time_limit_are_counted_as_never_ending() {
    // `forever` has no limit: no reservation can count on its node, so the wide job has
    // none; a later job with a limit still starts where it fits.
    let cluster = ClusterBuilder::flat(4).build();
    let jobs = vec![
        JobBuilder::gang("forever", 1, "cpu=8").submit(0).runtime(300).build(),
        whole("wide", 4, 1, 100, 100),
        whole("small", 1, 2, 50, 50),
    ];
    let r = run_checked(&cluster, &jobs, PlannerConfig::default());
    assert_eq!(start(&r, "small"), 2);
    assert_eq!(start(&r, "wide"), 300);
    assert!(job(&r, "wide").reservation.is_none());
}

#[test]
fn no_job_runs_into_a_maintenance_window() {
    // n01 is down for maintenance from 100 to 200. A job that would still run at 100
    // never gets it; one that ends before 100 may; after 200 it is free again.
    let cluster = ClusterBuilder::flat(2).build();
    let config = PlannerConfig::parse(
        "[[reservation]]\nname = \"fw\"\nnodes = [\"n01\"]\nstart = 100\nend = 200\n",
        "planner.toml",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let jobs = vec![
        whole("long", 1, 0, 500, 500),
        whole("short", 1, 1, 50, 50),
        whole("late", 1, 60, 50, 50),
    ];
    let r = run_checked(&cluster, &jobs, config);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    let node = |n: &str| job(&r, n).tasks[0].node.clone().unwrap_or_default();
    assert_eq!(node("long"), "n02");
    assert_eq!((start(&r, "short"), node("short")), (1, "n01".to_string()));
    // At 60 n01 is idle, but the job would still run when the window opens.
    assert_eq!((start(&r, "late"), node("late")), (200, "n01".to_string()));
}

mod property {
    use proptest::prelude::*;

    use super::*;

    /// (nodes, cpu per task, runtime = limit, submit, hard leaf or not)
    type Shape = (u32, u32, u64, u64, bool);

    fn shapes() -> impl Strategy<Value = Vec<Shape>> {
        proptest::collection::vec(
            (
                1u32..7,
                prop_oneof![Just(4u32), Just(8)],
                1u64..200,
                0u64..300,
                any::<bool>(),
            ),
            2..24,
        )
    }

    /// The jobs of the property: `j00`, `j01`, … of `shapes`, on two leaves of four
    /// nodes, without fair share, and without the starvation factor: a job that starves
    /// goes ahead of one reserved before it, on purpose (`starvation.rs`), and every job
    /// here is short enough to starve by it within the run.
    fn check(shapes: &[Shape]) -> Report {
        let cluster = ClusterBuilder::fat_tree(&[4], 2).build();
        let jobs: Vec<JobSpec> = shapes
            .iter()
            .enumerate()
            .map(|(i, &(n, cpu, secs, at, leaf))| {
                let b = JobBuilder::gang(
                    &format!("j{i:02}"),
                    n.min(if leaf { 4 } else { 8 }),
                    &format!("cpu={cpu}"),
                )
                .submit(at)
                .runtime(secs)
                .limit(secs);
                if leaf { b.hard(1).build() } else { b.build() }
            })
            .collect();
        let config = PlannerConfig::parse(
            "[priority]\nweightFairshare = 0\n[scheduler]\nstarvationFactor = 0\n",
            "planner.toml",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        run_checked(&cluster, &jobs, config)
    }

    /// A random run of 2026-12-05: j09 was reserved for 215 but started at 275. At 174
    /// j09 (3 tasks in one leaf, 71 s) is reserved n07 and n08 at 215, around j05's
    /// reservation at 275 (a task on n07 among others). At 214 j10 (one task, 61 s) takes
    /// half of n07: it ends at 275, so it delays neither. At 215 j09 was checked with j05's
    /// reservation taken from n07's room of now, j10 still on it: no room, so it waited
    /// for 275. It starts at 215 when the room is counted at the time each reservation
    /// begins (`backfill::reserve::start_in_time`).
    #[test]
    fn a_job_backfilled_before_a_later_reservation_does_not_push_an_earlier_one_back() {
        let r = check(&[
            (4, 4, 91, 24, false),
            (3, 8, 19, 6, false),
            (4, 8, 15, 24, true),
            (3, 4, 61, 101, false),
            (3, 8, 100, 26, false),
            (6, 4, 1, 115, false),
            (4, 4, 145, 26, false),
            (4, 4, 146, 26, false),
            (1, 8, 106, 25, false),
            (3, 4, 71, 174, true),
            (1, 4, 61, 214, true),
            (1, 4, 46, 2, false),
        ]);
        assert!(r.jobs.iter().all(|j| j.start_time.is_some()), "every job ran");
    }

    proptest! {
        // A fixed seed: the same 48 cases every run (CI must not pass or fail by chance).
        // A random run of 2026-12-05 found a case where a reserved job started 60 s late:
        // fixed, and kept as a case of its own (above).
        #![proptest_config(ProptestConfig {
            cases: 48,
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x5eed_b0f1),
            ..ProptestConfig::default()
        })]

        /// With estimates equal to runtimes and jobs in arrival order (no fair share to
        /// reorder them), no job starts later than the first reservation it was given,
        /// and the invariants hold after every tick.
        #[test]
        fn no_reserved_job_starts_later_than_its_reservation(shapes in shapes()) {
            let r = check(&shapes);
            prop_assert!(r.jobs.iter().all(|j| j.start_time.is_some()), "every job ran");
        }
    }
}

#[test]
fn explain_names_the_reservation_that_keeps_a_job_off_room_it_could_use() {
    let cluster = ClusterBuilder::fat_tree(&[4], 1).build();
    let mut planner = hyperplan_core::sim::planner_for(&cluster, PlannerConfig::default());
    for j in [
        whole("a", 2, 0, 100, 100),
        whole("wide", 4, 0, 100, 100),
        whole("long", 1, 0, 1000, 1000),
    ] {
        hyperplan_core::sim::submit::submit(&mut planner, j, "sim");
    }
    planner.tick(2);
    let e = planner.explain("long").unwrap_or_else(|| panic!("no explanation"));
    let verdicts: Vec<&str> = e.candidates.iter().map(|c| c.verdict.as_str()).collect();
    assert_eq!(
        verdicts,
        [
            "room for the 1 tasks needed now, but 4 of its nodes are reserved for job wide, starting in 1m40s; this job's timeLimit 16m40s would run past it"
        ]
    );
}

#[test]
fn a_maintenance_window_naming_an_unknown_node_is_a_warning() {
    let cluster = ClusterBuilder::flat(2).build();
    let config = PlannerConfig::parse(
        "[[reservation]]\nname = \"fw\"\nnodes = [\"n1\"]\nstart = 100\nend = 200\n",
        "planner.toml",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let r = run(&cluster, &[whole("a", 1, 0, 10, 10)], config);
    assert_eq!(
        r.warnings,
        ["maintenance window fw: node \"n1\" is not a node the planner knows"]
    );
}
