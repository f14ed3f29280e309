//! `[scheduler] keepReservations` (issue 42): a job given a reservation keeps it until it
//! starts (Maui's `RESERVATIONPOLICY HIGHEST`), so a job with a better fair share that
//! comes later waits for the next one, while a job of a higher queue still goes first;
//! off, the reservation goes to whichever blocked job is first now. Replays in virtual
//! time on one node; the invariants are checked after every tick.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hyperplan_core::PlannerConfig;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, run, start_of};
use hyperplan_shared::report::Report;

/// Two queues: `hot` goes before `default`, whatever the jobs' ages.
const QUEUES: &str = "[[queue]]\nname = \"default\"\n\n[[queue]]\nname = \"hot\"\npriority = 10\n";

/// One node. Alice's `busy` holds it until 1,000; her `next` comes at 10 and is reserved
/// at 1,000; `other` comes at 20 from Bob, who has used nothing (fair share puts him
/// ahead of Alice), in queue `other_queue`.
fn replay(scheduler: &str, other_queue: &str) -> Report {
    let one = |name: &str, user: &str, submit: u64, queue: &str| {
        JobBuilder::gang(name, 1, "cpu=8")
            .user(user)
            .queue(queue)
            .submit(submit)
            .runtime(1_000)
            .limit(1_000)
            .build()
    };
    let jobs = vec![
        one("busy", "alice", 0, "default"),
        one("next", "alice", 10, "default"),
        one("other", "bob", 20, other_queue),
    ];
    let cluster = ClusterBuilder::flat(1).node_resources("cpu=8").build();
    let config = PlannerConfig::parse(&format!("[scheduler]\n{scheduler}\n{QUEUES}"), "planner.toml").unwrap();
    run(&cluster, &jobs, config)
}

#[test]
fn a_reserved_job_keeps_its_reservation_when_a_better_fair_share_comes() {
    let r = replay("", "default");
    assert_eq!(start_of(&r, "next"), 1_000, "the default keeps it");
    assert_eq!(start_of(&r, "other"), 2_000);
}

#[test]
fn without_keeping_the_better_fair_share_takes_it() {
    let r = replay("keepReservations = false", "default");
    assert_eq!(start_of(&r, "other"), 1_000);
    assert_eq!(start_of(&r, "next"), 2_000);
}

#[test]
fn a_higher_queue_still_goes_first() {
    for keep in ["true", "false"] {
        let r = replay(&format!("keepReservations = {keep}"), "hot");
        assert_eq!(start_of(&r, "other"), 1_000, "keepReservations = {keep}");
        assert_eq!(start_of(&r, "next"), 2_000, "keepReservations = {keep}");
    }
}

#[test]
fn keep_reservations_must_be_true_or_false() {
    let e = PlannerConfig::parse("[scheduler]\nkeepReservations = \"yes\"\n", "planner.toml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "planner.toml:2:20: scheduler.keepReservations: expected true or false, got \"yes\""
    );
}

/// The rank `hyperplan status` shows is the walk's: while `next` holds its reservation,
/// it is first and Bob's `other` second, though Bob's fair share is better; without
/// keeping, Bob's job is first.
#[test]
fn the_rank_shown_is_the_walks() {
    for (keep, first) in [("true", "next"), ("false", "other")] {
        let one = |name: &str, user: &str, submit: u64| {
            JobBuilder::gang(name, 1, "cpu=8")
                .user(user)
                .submit(submit)
                .runtime(1_000)
                .limit(1_000)
                .build()
        };
        let jobs = vec![
            one("busy", "alice", 0),
            one("next", "alice", 10),
            one("other", "bob", 20),
        ];
        let cluster = ClusterBuilder::flat(1).node_resources("cpu=8").build();
        let config =
            PlannerConfig::parse(&format!("[scheduler]\nkeepReservations = {keep}\n"), "planner.toml").unwrap();
        let mut seen = None;
        hyperplan_core::sim::simulate_with(&cluster, &jobs, config, |p| {
            let reports = p.jobs();
            let rank = |name: &str| {
                reports
                    .iter()
                    .find(|j| j.name == name)
                    .and_then(|j| j.priority.as_ref())
                    .map(|p| (p.rank, p.of))
            };
            if let (Some(a), Some(b)) = (rank("next"), rank("other")) {
                seen = Some((a, b));
            }
        });
        let (next, other) = seen.expect("both waited together");
        let (want_next, want_other) = if first == "next" { (1, 2) } else { (2, 1) };
        assert_eq!(
            (next, other),
            ((want_next, 2), (want_other, 2)),
            "keepReservations = {keep}"
        );
    }
}
