//! Queues, fair share and the multifactor order (`queues`, `fairshare`, `order`): quota
//! borrowing up to a queue's limit, `maxPerUser`, `maxRunningJobs`, queue priority, the
//! order after usage, refusals at admission, and a reload. Every run checks the
//! invariants after every tick.

#![allow(clippy::unwrap_used)]

use hyperplan_core::PlannerConfig;
use hyperplan_core::sim::planner_for;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, run};
use hyperplan_shared::report::{JobReport, JobStatus, Report};

fn job<'a>(r: &'a Report, name: &str) -> &'a JobReport {
    r.jobs
        .iter()
        .find(|j| j.name == name)
        .unwrap_or_else(|| panic!("no job {name} in {r:#?}"))
}

fn cfg(text: &str) -> PlannerConfig {
    PlannerConfig::parse(text, "planner.toml").unwrap_or_else(|e| panic!("{e}"))
}

/// One task of `cpu` cores for `secs` seconds in queue `q` by `user`, submitted at `at`.
fn one(name: &str, q: &str, user: &str, cpu: u32, at: u64, secs: u64) -> hyperplan_shared::JobSpec {
    JobBuilder::gang(name, 1, &format!("cpu={cpu}"))
        .queue(q)
        .user(user)
        .submit(at)
        .runtime(secs)
        .limit(secs)
        .build()
}

const TWO_QUEUES: &str = r#"
[[queue]]
name = "a"
quota = { cpu = 16 }
limit = { cpu = 24 }
[[queue]]
name = "b"
quota = { cpu = 16 }
"#;

#[test]
fn a_queue_borrows_idle_quota_up_to_its_limit_and_no_further() {
    let cluster = ClusterBuilder::flat(4).node_resources("cpu=8").build();
    let jobs: Vec<_> = (1..=4)
        .map(|i| one(&format!("a{i}"), "a", "alice", 8, 0, 100))
        .collect();
    let r = run(&cluster, &jobs, cfg(TWO_QUEUES));
    // 24 of 32 cores: its quota of 16 and 8 borrowed from b's idle quota.
    for n in ["a1", "a2", "a3"] {
        assert_eq!(job(&r, n).start_time, Some(0), "{n}");
    }
    assert_eq!(job(&r, "a4").start_time, Some(100));
    // While it waited, it said why.
    let mut planner = planner_for(&cluster, cfg(TWO_QUEUES));
    for j in &jobs {
        hyperplan_core::sim::submit::submit(&mut planner, j.clone(), "alice");
    }
    planner.tick(0);
    let a4 = planner.job("a4").unwrap_or_else(|| panic!("a4"));
    assert_eq!(a4.status, JobStatus::Pending);
    assert_eq!(
        a4.reason.as_deref(),
        Some("queue a would use cpu 32 of its limit 24 (in use 24, the job asks 8)")
    );
    assert!(a4.reservation.is_none(), "a job held by its queue holds no reservation");
    let queues = planner.queues();
    let a = &queues.queues[1];
    assert_eq!((a.name.as_str(), a.running_jobs, a.pending_jobs), ("a", 3, 1));
    assert_eq!(a.used.get("cpu"), Some(&24_000));
    assert_eq!(a.borrowed.get("cpu"), Some(&8_000));
}

#[test]
fn one_user_is_held_at_max_per_user_while_another_runs() {
    let cluster = ClusterBuilder::flat(4).node_resources("cpu=8").build();
    let config = cfg("[[queue]]\nname = \"shared\"\nmaxPerUser = { cpu = 8 }\n");
    let jobs = vec![
        one("alice-1", "shared", "alice", 8, 0, 100),
        one("alice-2", "shared", "alice", 8, 1, 100),
        one("bob-1", "shared", "bob", 8, 2, 100),
    ];
    let r = run(&cluster, &jobs, config);
    assert_eq!(job(&r, "alice-1").start_time, Some(0));
    assert_eq!(job(&r, "bob-1").start_time, Some(2));
    assert_eq!(job(&r, "alice-2").start_time, Some(100));
}

#[test]
fn max_running_jobs_holds_the_rest() {
    let cluster = ClusterBuilder::flat(4).node_resources("cpu=8").build();
    let config = cfg("[[queue]]\nname = \"one\"\nmaxRunningJobs = 1\n");
    let jobs = vec![one("x", "one", "alice", 1, 0, 50), one("y", "one", "bob", 1, 0, 50)];
    let r = run(&cluster, &jobs, config);
    let mut starts = [job(&r, "x").start_time, job(&r, "y").start_time];
    starts.sort();
    assert_eq!(starts, [Some(0), Some(50)]);
}

#[test]
fn a_higher_priority_queue_goes_first() {
    let cluster = ClusterBuilder::flat(1).node_resources("cpu=8").build();
    let config = cfg("[[queue]]\nname = \"hi\"\npriority = 10\n[[queue]]\nname = \"lo\"\n");
    let jobs = vec![
        one("busy", "lo", "carol", 8, 0, 100),
        one("lo-job", "lo", "alice", 8, 1, 100),
        one("hi-job", "hi", "bob", 8, 2, 100),
    ];
    let r = run(&cluster, &jobs, config);
    assert_eq!(job(&r, "hi-job").start_time, Some(100));
    assert_eq!(job(&r, "lo-job").start_time, Some(200));
}

#[test]
fn after_usage_the_lighter_user_goes_first() {
    // Alice has used the node for 1,000 s when it frees; her second job came before
    // Bob's, but Bob has used nothing: fair share puts him first. (With the default
    // `keepReservations`, Alice's job keeps the reservation it got at 10: see
    // `keep_reservations.rs`; with the default `starvationFactor`, both 100 s jobs
    // starve long before 1,000 and go oldest first: see `starvation.rs`.)
    let cluster = ClusterBuilder::flat(1).node_resources("cpu=8").build();
    let jobs = vec![
        one("alice-long", "default", "alice", 8, 0, 1000),
        one("alice-next", "default", "alice", 8, 10, 100),
        one("bob-first", "default", "bob", 8, 20, 100),
    ];
    let r = run(
        &cluster,
        &jobs,
        cfg("[scheduler]\nkeepReservations = false\nstarvationFactor = 0\n"),
    );
    assert_eq!(job(&r, "bob-first").start_time, Some(1000));
    assert_eq!(job(&r, "alice-next").start_time, Some(1100));
    // Without fair share (weight 0) it is first come, first served.
    let fifo = run(
        &cluster,
        &jobs,
        cfg("[priority]\nweightFairshare = 0\n[scheduler]\nkeepReservations = false\n"),
    );
    assert_eq!(job(&fifo, "alice-next").start_time, Some(1000));
}

#[test]
fn status_shows_the_factors_and_the_rank() {
    let cluster = ClusterBuilder::flat(1).node_resources("cpu=8").build();
    let mut planner = planner_for(&cluster, PlannerConfig::default());
    for j in [
        one("alice-long", "default", "alice", 8, 0, 1000),
        one("alice-next", "default", "alice", 8, 0, 100),
        one("bob-first", "default", "bob", 8, 0, 100),
    ] {
        hyperplan_core::sim::submit::submit(&mut planner, j.clone(), j.user.as_deref().unwrap_or("sim"));
    }
    planner.tick(0);
    planner.tick(600);
    let bob = planner
        .job("bob-first")
        .and_then(|j| j.priority)
        .unwrap_or_else(|| panic!("bob's priority"));
    let alice = planner
        .job("alice-next")
        .and_then(|j| j.priority)
        .unwrap_or_else(|| panic!("alice's priority"));
    // Alice's job got the reservation at 0 (nobody had used anything; it came first) and
    // keeps it: the rank is the walk's order, though bob's score is higher now (see
    // keep_reservations.rs).
    assert_eq!((alice.rank, alice.of), (1, 2));
    assert_eq!((bob.rank, bob.of), (2, 2));
    // Bob has used nothing in the queue: his factor is the queue's among queues (the one
    // queue has used all there was to use: 2^-1). Alice has used it all with a share of
    // a half (two users): 2^-2 of that.
    assert_eq!(bob.fairshare, 0.5);
    assert_eq!(alice.fairshare, 0.125);
    assert!(bob.score > alice.score);
    assert_eq!(
        planner.job("alice-next").and_then(|j| j.queue).as_deref(),
        Some("default")
    );
}

#[test]
fn jobs_for_a_missing_queue_or_over_its_time_limit_are_rejected_saying_why() {
    let cluster = ClusterBuilder::flat(1).node_resources("cpu=8").build();
    let config = cfg("[[queue]]\nname = \"short\"\nmaxTimeLimit = \"1h\"\ndefaultTimeLimit = \"10m\"\n");
    let jobs = vec![
        JobBuilder::gang("nowhere", 1, "cpu=1").queue("gpu").build(),
        JobBuilder::gang("long", 1, "cpu=1").queue("short").limit(7200).build(),
        JobBuilder::gang("defaulted", 1, "cpu=1")
            .queue("short")
            .runtime(10_000)
            .build(),
    ];
    let r = run(&cluster, &jobs, config);
    assert_eq!(job(&r, "nowhere").status, JobStatus::Rejected);
    assert_eq!(
        job(&r, "nowhere").reason.as_deref(),
        Some("job nowhere: queue \"gpu\" does not exist; queues: default, short")
    );
    assert_eq!(job(&r, "long").status, JobStatus::Rejected);
    assert_eq!(
        job(&r, "long").reason.as_deref(),
        Some("job long: timeLimit 2h is above queue \"short\"'s maxTimeLimit of 1h")
    );
    // The queue's default limit ends it at 10 minutes, not after its 10,000 s.
    assert_eq!(job(&r, "defaulted").end_time, Some(600));
    // The simulator checks who may use a queue as the planner would.
    let config = cfg("[[queue]]\nname = \"mine\"\nusers = [\"alice\"]\n");
    let jobs = vec![
        JobBuilder::gang("by-alice", 1, "cpu=1")
            .queue("mine")
            .user("alice")
            .build(),
        JobBuilder::gang("by-bob", 1, "cpu=1").queue("mine").user("bob").build(),
    ];
    let r = run(&cluster, &jobs, config);
    assert_eq!(job(&r, "by-alice").status, JobStatus::Placed);
    assert_eq!(
        job(&r, "by-bob").reason.as_deref(),
        Some("job by-bob: user bob may not submit to queue \"mine\"; it takes users alice")
    );
}

#[test]
fn a_reload_renumbers_queues_and_refuses_to_drop_one_in_use() {
    let cluster = ClusterBuilder::flat(2).node_resources("cpu=8").build();
    let mut planner = planner_for(&cluster, cfg(TWO_QUEUES));
    hyperplan_core::sim::submit::submit(&mut planner, one("in-b", "b", "bob", 8, 0, 1000), "bob");
    planner.tick(0);
    let without_b = cfg("[[queue]]\nname = \"a\"\n");
    let e = planner.reload_policy(&without_b).unwrap_err();
    assert_eq!(
        e.to_string(),
        "queue \"b\" is not in the new configuration but still has 1 live job(s) (e.g. in-b); keeping the old queues until they end or are cancelled"
    );
    assert_eq!(planner.queues().queues.len(), 3, "the old queues stay");
    // A new queue ahead of b in name order: b is renumbered, its use follows it.
    let more = cfg("[[queue]]\nname = \"a\"\n[[queue]]\nname = \"aa\"\n[[queue]]\nname = \"b\"\nlimit = { cpu = 8 }\n");
    planner.reload_policy(&more).unwrap_or_else(|e| panic!("{e}"));
    planner.tick(1);
    let q = planner.queues();
    let names: Vec<&str> = q.queues.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, ["default", "a", "aa", "b"]);
    assert_eq!(q.queues[3].used.get("cpu"), Some(&8000));
    assert_eq!(q.queues[3].running_jobs, 1);
    // Its new limit holds: a second job in b waits.
    hyperplan_core::sim::submit::submit(&mut planner, one("in-b-2", "b", "bob", 8, 2, 10), "bob");
    planner.tick(2);
    assert_eq!(planner.job("in-b-2").map(|j| j.status), Some(JobStatus::Pending));
    assert!(planner.violations().is_empty(), "{:?}", planner.violations());
}
