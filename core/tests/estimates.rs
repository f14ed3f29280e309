//! `[scheduler] estimates = "history"`: backfill takes a job to run for the mean of its
//! owner's last two runtimes (capped by its limit) instead of its limit (issue 42; Tsafrir,
//! Etsion and Feitelson 2007). An estimate never ends a job; a job past it is counted at
//! its limit again, so the reservations behind it move; maintenance windows and the
//! reservations of starving jobs are still judged by limits. Replays in virtual time; the
//! invariants are checked after every tick.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hyperplan_core::PlannerConfig;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder};
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

fn one(name: &str, user: &str, n: u32, at: u64, runtime: u64, limit: u64) -> JobSpec {
    JobBuilder::gang(name, n, "cpu=8")
        .user(user)
        .submit(at)
        .runtime(runtime)
        .limit(limit)
        .build()
}

fn replay(config: &str, jobs: &[JobSpec]) -> Report {
    let cluster = ClusterBuilder::flat(4).node_resources("cpu=8").build();
    let config = PlannerConfig::parse(config, "planner.toml").unwrap_or_else(|e| panic!("{e}"));
    hyperplan_core::sim::simulate_with(&cluster, jobs, config, |p| {
        let bad = p.violations();
        assert!(bad.is_empty(), "invariants broken: {bad:#?}");
    })
}

/// Alice's two jobs ran 100 s each though she asks for 10,000 s; bob's `big` holds 3 of
/// the 4 nodes until 1,200, so her `wide` (4 nodes) is reserved for 1,200; then she
/// submits a 1-node job that runs `short_runs` seconds (after `wide` in the order: both
/// hers, by age).
fn jobs(short_runs: u64) -> Vec<JobSpec> {
    vec![
        one("warm1", "alice", 1, 0, 100, 10_000),
        one("warm2", "alice", 1, 0, 100, 10_000),
        one("big", "bob", 3, 200, 1_000, 1_000),
        one("wide", "alice", 4, 300, 100, 1_000),
        one("short", "alice", 1, 400, short_runs, 10_000),
    ]
}

#[test]
fn by_the_limit_the_short_job_waits_behind_the_reservation() {
    let r = replay("", &jobs(100));
    assert_eq!(start(&r, "wide"), 1_200);
    assert!(start(&r, "short") >= 1_300, "short started at {}", start(&r, "short"));
}

#[test]
fn by_its_owners_history_it_starts_in_front_and_the_reservation_holds() {
    let r = replay("[scheduler]\nestimates = \"history\"\n", &jobs(100));
    assert_eq!(start(&r, "short"), 400, "expected to end at 500, before wide's 1,200");
    assert_eq!(start(&r, "wide"), 1_200);
}

#[test]
fn a_job_past_its_estimate_runs_on_and_the_reservation_moves() {
    // Expected to run 100 s, it runs 1,500 s: nothing ends it, and wide starts when it ends.
    let r = replay("[scheduler]\nestimates = \"history\"\n", &jobs(1_500));
    assert_eq!(start(&r, "short"), 400);
    assert_eq!(job(&r, "short").end_time, Some(1_900), "not ended at its estimate");
    assert_eq!(start(&r, "wide"), 1_900);
}

#[test]
fn a_maintenance_window_is_judged_by_the_limit() {
    // All nodes are down for maintenance from 1,000 to 2,000. Alice's job would end by
    // 600 as her history says, but its limit runs past 1,000: it waits for the window.
    let config = "[scheduler]\nestimates = \"history\"\n\n[[reservation]]\nname = \"fw\"\nnodes = [\"n01\", \"n02\", \"n03\", \"n04\"]\nstart = 1000\nend = 2000\n";
    let jobs = vec![
        // Limits that end them before the window: they run at once, and make her history.
        one("warm1", "alice", 1, 0, 100, 900),
        one("warm2", "alice", 1, 0, 100, 900),
        one("late", "alice", 1, 500, 100, 10_000),
    ];
    let r = replay(config, &jobs);
    assert_eq!(start(&r, "warm1"), 0);
    assert!(start(&r, "late") >= 2_000, "late started at {}", start(&r, "late"));
}

#[test]
fn a_starving_jobs_reservation_is_judged_by_the_limit() {
    // wide starves from 3,900 on (starvation 1 h after its submit at 300, while big
    // holds 3 nodes until 10,200); alice's job at 4,000 would end by 4,100 as her
    // history says, but its limit runs past wide's reservation: it waits. (The factor
    // is off: by it wide would starve at 2,300.)
    let config = "[scheduler]\nestimates = \"history\"\nstarvation = \"1h\"\nstarvationFactor = 0\n";
    let jobs = vec![
        one("warm1", "alice", 1, 0, 100, 10_000),
        one("warm2", "alice", 1, 0, 100, 10_000),
        one("big", "bob", 3, 200, 10_000, 10_000),
        one("wide", "bob", 4, 300, 100, 1_000),
        one("short", "alice", 1, 4_000, 100, 10_000),
    ];
    let r = replay(config, &jobs);
    assert_eq!(start(&r, "wide"), 10_200);
    assert!(start(&r, "short") >= 10_300, "short started at {}", start(&r, "short"));
    // Without the bound the same job goes in front on its estimate.
    let r = replay(
        "[scheduler]\nestimates = \"history\"\nstarvation = 0\nstarvationFactor = 0\n",
        &jobs,
    );
    assert_eq!(start(&r, "short"), 4_000);
    assert_eq!(start(&r, "wide"), 10_200);
}

/// The history is kept with fair share's usage in the store: a planner restarted from
/// that record plans with alice's runtimes at once, so her short job starts in front of
/// her reserved wide one; restarted without it, the job waits behind the reservation.
#[test]
fn the_history_survives_a_restart() {
    use hyperplan_core::model::runtimes::RuntimeHistory;
    use hyperplan_core::model::usage::UsageRecord;
    use hyperplan_core::queues::Users;
    use hyperplan_core::testing::Rig;
    use hyperplan_shared::report::JobStatus;

    let config = || {
        PlannerConfig::parse(
            "[scheduler]\nestimates = \"history\"\n[priority]\nrecalcInterval = \"1s\"\n",
            "planner.toml",
        )
        .unwrap()
    };
    let nodes = ClusterBuilder::flat(4).node_resources("cpu=8").build().nodes;
    let mut rig = Rig::new(config(), nodes).persisting();
    rig.register_all();
    rig.tick();
    // Alice's two jobs run 100 s each of the 10,000 s they ask for.
    let ids: Vec<(u64, &str)> = ["warm1", "warm2"]
        .into_iter()
        .map(|n| (rig.submit_as(one(n, "alice", 1, 0, 100, 10_000), "alice"), n))
        .collect();
    rig.step();
    for &(id, name) in &ids {
        rig.start_all(name, id);
    }
    for _ in 0..100 {
        rig.step();
    }
    for &(_, name) in &ids {
        rig.exit_all(name, 0);
    }
    let stored = rig.usage_written(3);
    let record = UsageRecord::decode(&stored).unwrap();
    assert_eq!(record.runtimes.len(), 1, "{record:?}");
    let row = &record.runtimes[0];
    assert_eq!(row.user, "alice");
    assert!((99..=101).contains(&row.last), "{row:?}");
    assert!(row.before.is_some_and(|b| (99..=101).contains(&b)), "{row:?}");

    for restore in [true, false] {
        let (mut next, warnings) = rig.restarted(config(), 1_000);
        assert!(warnings.is_empty(), "{warnings:?}");
        if restore {
            next.p.restore_usage(&stored).unwrap();
        }
        next.register_all();
        next.tick();
        let w = next.p.world_for_tests();
        let predicted = w
            .resource::<Users>()
            .find("alice")
            .and_then(|u| w.resource::<RuntimeHistory>().predict(u));
        assert_eq!(predicted.is_some(), restore, "{predicted:?}");
        // Bob's job holds 3 of the 4 nodes for 1,000 s; alice's wide job is reserved
        // for its end; then her 1-node job, 10,000 s asked.
        let big = next.submit_as(one("big", "bob", 3, 0, 1_000, 1_000), "bob");
        next.step();
        next.start_all("big", big);
        next.submit_as(one("wide", "alice", 4, 0, 100, 1_000), "alice");
        next.step();
        assert!(next.job("wide").reservation.is_some(), "{:?}", next.job("wide"));
        next.submit_as(one("short", "alice", 1, 0, 100, 10_000), "alice");
        next.step();
        let short = next.job("short");
        if restore {
            assert_eq!(
                short.status,
                JobStatus::Placed,
                "expected to run 100 s: {:?}",
                short.reason
            );
        } else {
            assert_eq!(short.status, JobStatus::Pending, "by its limit it would hold wide back");
        }
    }
}
