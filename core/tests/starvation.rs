//! `[scheduler] starvation`: a job that has waited longer than the bound goes first,
//! whatever its priority, so a stream of higher-priority jobs cannot keep a wide job out
//! for ever (issue 42). `starvationFactor`: so does a job whose (wait + limit) ÷ limit
//! reaches the factor, a short job sooner than a long one. Replays in virtual time; the
//! invariants are checked after every tick.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hyperplan_core::PlannerConfig;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, run, start_of};
use hyperplan_shared::JobSpec;
use hyperplan_shared::report::Report;

/// A wide job at 1, then a 1-node job of a higher-priority queue every 90 s for 10 h,
/// each running 400 s: on 4 nodes (room for one every 100 s) the stream alone keeps the
/// queue from ever running dry.
fn jobs() -> Vec<JobSpec> {
    let mut jobs = vec![
        JobBuilder::gang("wide", 4, "cpu=8")
            .submit(1)
            .runtime(600)
            .limit(600)
            .build(),
    ];
    for i in 0..400u64 {
        jobs.push(
            JobBuilder::gang(&format!("s{i:03}"), 1, "cpu=8")
                .submit(i * 90)
                .runtime(400)
                .limit(400)
                .queue("hot")
                .build(),
        );
    }
    jobs
}

/// Two queues: `hot` goes before `default`, whatever the jobs' ages.
const QUEUES: &str = "[[queue]]\nname = \"default\"\n\n[[queue]]\nname = \"hot\"\npriority = 10\n";

/// `scheduler` (a `[scheduler]` table) without the factor: the bound alone.
fn config(scheduler: &str) -> PlannerConfig {
    with_factor(&format!("{scheduler}\nstarvationFactor = 0"))
}

/// `scheduler` as it is: the factor at its default unless it says otherwise.
fn with_factor(scheduler: &str) -> PlannerConfig {
    PlannerConfig::parse(&format!("{scheduler}\n{QUEUES}"), "planner.toml").unwrap()
}

fn replay(scheduler: &str) -> Report {
    let cluster = ClusterBuilder::flat(4).node_resources("cpu=8").build();
    let config = config(scheduler);
    run(&cluster, &jobs(), config)
}

#[test]
fn past_the_factor_it_goes_first() {
    let cluster = ClusterBuilder::flat(4).node_resources("cpu=8").build();
    // The default factor, 3: the wide job (600 s asked, submitted at 1) starves at
    // 1,201, (1,200 + 600) ÷ 600 = 3, five hours before the bound would.
    for scheduler in [
        "[scheduler]\nreservations = 1",
        "[scheduler]\nreservations = 1\nstarvation = 0",
    ] {
        let r = run(&cluster, &jobs(), with_factor(scheduler));
        let wide = start_of(&r, "wide");
        assert!(
            (1_201..=1_201 + 400).contains(&wide),
            "{scheduler}: wide started at {wide}"
        );
    }
    let r = run(
        &cluster,
        &jobs(),
        with_factor("[scheduler]\nreservations = 1\nstarvation = 0\nstarvationFactor = 5"),
    );
    let wide = start_of(&r, "wide");
    assert!(
        (2_401..=2_401 + 400).contains(&wide),
        "factor 5: wide started at {wide}"
    );
}

/// Two wide jobs behind the stream: `long` (6,000 s asked, submitted at 1) and `short`
/// (600 s, at 2). By the factor the short one starves first (at 1,202; the long one at
/// 12,001) and goes first; by the bound alone the older one does.
#[test]
fn by_the_factor_a_short_job_starves_before_a_long_one() {
    let mut jobs = jobs();
    jobs[0] = JobBuilder::gang("long", 4, "cpu=8")
        .submit(1)
        .runtime(600)
        .limit(6_000)
        .build();
    jobs.push(
        JobBuilder::gang("short", 4, "cpu=8")
            .submit(2)
            .runtime(600)
            .limit(600)
            .build(),
    );
    let cluster = ClusterBuilder::flat(4).node_resources("cpu=8").build();
    let r = run(
        &cluster,
        &jobs,
        with_factor("[scheduler]\nreservations = 1\nstarvation = \"2h\""),
    );
    let (long, short) = (start_of(&r, "long"), start_of(&r, "short"));
    assert!((1_202..=1_202 + 400).contains(&short), "short at {short}");
    assert!(long > short, "long at {long}, short at {short}");
    let r = run(
        &cluster,
        &jobs,
        config("[scheduler]\nreservations = 1\nstarvation = \"2h\""),
    );
    let (long, short) = (start_of(&r, "long"), start_of(&r, "short"));
    assert!(long < short, "the bound alone: long at {long}, short at {short}");
}

#[test]
fn without_the_bound_the_wide_job_waits_for_the_stream_to_end() {
    let r = replay("[scheduler]\nreservations = 1\nstarvation = 0");
    assert!(
        start_of(&r, "wide") >= 399 * 90,
        "wide started at {}",
        start_of(&r, "wide")
    );
}

#[test]
fn past_the_bound_it_goes_first_and_starts_once_the_running_jobs_end() {
    let r = replay("[scheduler]\nreservations = 1\nstarvation = \"2h\"");
    let wide = start_of(&r, "wide");
    // It starves from 7,201 s on; the 1-node jobs running then end within 400 s, and
    // nothing starts on their nodes meanwhile (its reservation holds them).
    assert!((7_201..=7_201 + 400).contains(&wide), "wide started at {wide}");
    // The stream goes on after it: every job ran.
    assert!(r.jobs.iter().all(|j| j.start_time.is_some()));
}

#[test]
fn the_oldest_starving_job_goes_first() {
    let mut jobs = jobs();
    jobs.push(
        JobBuilder::gang("wide2", 4, "cpu=8")
            .submit(2)
            .runtime(600)
            .limit(600)
            .build(),
    );
    let cluster = ClusterBuilder::flat(4).node_resources("cpu=8").build();
    let r = hyperplan_core::sim::simulate(
        &cluster,
        &jobs,
        config("[scheduler]\nreservations = 1\nstarvation = \"2h\""),
    );
    let (a, b) = (start_of(&r, "wide"), start_of(&r, "wide2"));
    assert!(a < b, "wide (submitted first) at {a}, wide2 at {b}");
    assert_eq!(b, a + 600, "wide2 right after wide");
}

/// The reservations go to the jobs waiting past the bound first, oldest first, and no
/// more are made for them: with `reservations = 1`, the oldest starving wide job holds
/// the one reservation while `big` runs, not the `hot` queue's job that would go first
/// without the bound, and not the second starving job.
#[test]
fn the_reservations_go_to_the_starving_jobs_first() {
    let cluster = ClusterBuilder::flat(4).node_resources("cpu=8").build();
    let wide = |name: &str, at: u64| JobBuilder::gang(name, 4, "cpu=8").submit(at).runtime(100).limit(100);
    let jobs = vec![
        JobBuilder::gang("big", 3, "cpu=8")
            .submit(0)
            .runtime(10_000)
            .limit(10_000)
            .build(),
        wide("wide1", 100).build(),
        wide("wide2", 200).build(),
        wide("urgent", 4_000).queue("hot").build(),
    ];
    let reserved = |scheduler: &str| {
        let mut reserved = std::collections::BTreeSet::new();
        hyperplan_core::sim::simulate_with(&cluster, &jobs, config(scheduler), |p| {
            let bad = p.violations();
            assert!(bad.is_empty(), "invariants broken: {bad:#?}");
            // While big runs (every wide job waits for it).
            let jobs = p.jobs();
            if jobs
                .iter()
                .any(|j| j.name == "big" && j.start_time.is_some() && j.end_time.is_none())
            {
                for j in jobs.iter().filter(|j| j.reservation.is_some()) {
                    reserved.insert(j.name.clone());
                }
            }
        });
        reserved
    };
    let r = reserved("[scheduler]\nreservations = 1\nstarvation = \"1h\"");
    assert_eq!(r.iter().collect::<Vec<_>>(), ["wide1"]);
    let r = reserved("[scheduler]\nreservations = 1\nstarvation = 0");
    assert!(r.contains("urgent") && !r.contains("wide2"), "reserved: {r:?}");
}
