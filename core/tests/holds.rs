//! Holds and begin times (issue 39): a held job, or one whose begin time has not come,
//! is never placed, preempts no one and gets no reservation, and says why; it starts
//! once released or at its time (virtual clock); an admin's hold its owner cannot
//! release; a hold survives a restart. Invariants are checked after every tick.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hyperplan_core::PlannerConfig;
use hyperplan_core::caller::Caller;
use hyperplan_core::model::reason::{NoFit, Reason, ReasonKind};
use hyperplan_core::requests::hold::HoldError;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, Rig};
use hyperplan_shared::report::JobStatus;
use hyperplan_shared::taskend::{TaskEnd, TaskOutcome};

/// Two nodes of 8 CPUs, registered, the daemon's planner (records written).
fn rig() -> Rig {
    Rig::flat_ready(2)
}

/// `blocker`: both nodes whole for 100 s (a time limit, so others get reservations).
fn block(rig: &mut Rig) -> u64 {
    rig.run(JobBuilder::gang("blocker", 2, "cpu=8").limit(100).build())
}

/// Every task of `job` exits 0 now.
fn finish(rig: &mut Rig, job: &str, id: u64) {
    let tasks: Vec<String> = rig.job(job).tasks.iter().map(|t| t.name.clone()).collect();
    for t in tasks {
        let end = TaskEnd {
            outcome: TaskOutcome::Exited,
            exit_code: Some(0),
            ..TaskEnd::default()
        };
        rig.ended(job, id, &t, end);
    }
}

fn reason(rig: &Rig, job: &str) -> Option<String> {
    rig.job(job).reason
}

/// `hyperplan_pending_jobs`: pending jobs by the kind of their reason (`Reason::kind`).
#[test]
fn pending_jobs_are_counted_by_the_kind_of_their_reason() {
    let mut rig = rig();
    block(&mut rig);
    rig.submit_as(JobBuilder::gang("held", 1, "cpu=4").hold().build(), "alice");
    let later = rig.now / 1000 + 3600;
    rig.submit_as(JobBuilder::gang("later", 1, "cpu=4").begin(later).build(), "alice");
    rig.submit_as(JobBuilder::gang("waits", 1, "cpu=4").build(), "alice");
    rig.step();
    assert_eq!(rig.reason("held").map(|r| r.kind()), Some(ReasonKind::Held));
    assert_eq!(rig.reason("waits").and_then(|r| r.no_fit()), Some(NoFit::Resource));
    let pending: Vec<(&str, u64)> = rig.p.gauges().pending.into_iter().collect();
    assert_eq!(pending, [("held", 2), ("resources", 1)]);
}

#[test]
fn a_held_job_is_skipped_and_starts_after_release() {
    let mut rig = rig();
    rig.submit_as(JobBuilder::gang("held", 1, "cpu=4").hold().build(), "alice");
    rig.submit_as(JobBuilder::gang("free", 1, "cpu=4").build(), "alice");
    for _ in 0..3 {
        rig.step();
    }
    assert_eq!(rig.job("held").status, JobStatus::Pending);
    assert_eq!(reason(&rig, "held").as_deref(), Some("held by alice"));
    assert_eq!(rig.job("free").status, JobStatus::Placed);
    assert_eq!(
        rig.p.explain("held").map(|e| e.job.reason),
        Some(Some("held by alice".to_string()))
    );
    // Another user may neither release nor hold it.
    assert!(matches!(
        rig.p.release(&["held".into()], Caller::user("bob")),
        Err(HoldError::NotOwner { .. })
    ));
    rig.p.release(&["held".into()], Caller::user("alice")).unwrap();
    rig.step();
    assert_eq!(rig.job("held").status, JobStatus::Placed, "{:?}", reason(&rig, "held"));
    // A running job cannot be held.
    assert!(matches!(
        rig.p.hold(&["held".into()], Caller::user("alice")),
        Err(HoldError::NotPending { .. })
    ));
}

#[test]
fn an_admins_hold_is_not_the_owners_to_release() {
    let mut rig = rig();
    let blocker = block(&mut rig);
    rig.submit_as(JobBuilder::gang("wide", 2, "cpu=8").limit(50).build(), "alice");
    rig.step();
    assert_eq!(rig.job("wide").status, JobStatus::Pending);
    rig.p.hold(&["wide".into()], Caller::admin("root")).unwrap();
    rig.step();
    assert_eq!(reason(&rig, "wide").as_deref(), Some("held by an admin (root)"));
    let refused = rig.p.release(&["wide".into()], Caller::user("alice")).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "job wide is held by an admin (root); only an admin may release it"
    );
    // Its owner's own hold on top does not make it theirs.
    rig.p.hold(&["wide".into()], Caller::user("alice")).unwrap();
    rig.step();
    assert_eq!(reason(&rig, "wide").as_deref(), Some("held by an admin (root)"));
    finish(&mut rig, "blocker", blocker);
    for _ in 0..3 {
        rig.step();
    }
    assert_eq!(rig.job("wide").status, JobStatus::Pending, "room, but held");
    rig.p.release(&["wide".into()], Caller::admin("root")).unwrap();
    rig.step();
    assert_eq!(rig.job("wide").status, JobStatus::Placed, "{:?}", reason(&rig, "wide"));
}

#[test]
fn a_job_with_a_begin_time_starts_at_its_time() {
    let mut rig = rig();
    let begin = rig.now / 1000 + 30;
    rig.submit_as(JobBuilder::gang("later", 1, "cpu=4").begin(begin).build(), "alice");
    rig.step();
    assert_eq!(rig.reason("later"), Some(Reason::Begins(begin)));
    let why = reason(&rig, "later").unwrap();
    assert!(why.starts_with("begins 1970-01-01T00:00:"), "{why}");
    while rig.now / 1000 < begin {
        assert_eq!(rig.job("later").status, JobStatus::Pending, "at {} s", rig.now / 1000);
        rig.step();
    }
    rig.step();
    let job = rig.job("later");
    assert_eq!(job.status, JobStatus::Placed, "{:?}", job.reason);
    assert!(job.start_time.is_some_and(|s| s >= begin), "{:?}", job.start_time);
}

#[test]
fn held_and_future_jobs_get_no_reservation() {
    let mut rig = rig();
    block(&mut rig);
    let begin = rig.now / 1000 + 10_000;
    rig.submit_as(JobBuilder::gang("held", 2, "cpu=8").limit(50).hold().build(), "alice");
    rig.submit_as(
        JobBuilder::gang("later", 2, "cpu=8").limit(50).begin(begin).build(),
        "alice",
    );
    rig.submit_as(JobBuilder::gang("next", 2, "cpu=8").limit(50).build(), "alice");
    for _ in 0..3 {
        rig.step();
    }
    assert!(rig.job("next").reservation.is_some(), "the control job is reserved for");
    assert_eq!(rig.job("held").reservation, None);
    assert_eq!(rig.job("later").reservation, None);
    // A job reserved for that is held loses its reservation.
    rig.p.hold(&["next".into()], Caller::user("alice")).unwrap();
    rig.step();
    assert_eq!(rig.job("next").reservation, None);
    assert_eq!(reason(&rig, "next").as_deref(), Some("held by alice"));
}

#[test]
fn a_hold_and_a_begin_time_survive_a_restart() {
    let mut rig = rig();
    let begin = rig.now / 1000 + 3600;
    block(&mut rig);
    rig.submit_as(JobBuilder::gang("held", 1, "cpu=4").build(), "alice");
    rig.step();
    rig.p.hold(&["held".into()], Caller::admin("root")).unwrap();
    rig.submit_as(JobBuilder::gang("later", 1, "cpu=4").begin(begin).build(), "alice");
    rig.step();
    let (mut back, warnings) = rig.restarted(PlannerConfig::default(), 5_000);
    assert!(warnings.is_empty(), "{warnings:?}");
    back.register_all();
    for _ in 0..3 {
        back.step();
    }
    assert_eq!(back.job("held").status, JobStatus::Pending);
    assert_eq!(reason(&back, "held").as_deref(), Some("held by an admin (root)"));
    assert_eq!(back.job("later").status, JobStatus::Pending);
    assert!(matches!(back.reason("later"), Some(Reason::Begins(_))));
    assert!(back.p.release(&["held".into()], Caller::user("alice")).is_err());
}

#[test]
fn held_and_future_jobs_preempt_no_one() {
    const CONFIG: &str = "[[queue]]\nname = \"lo\"\npreemptible = true\n\
                          [[priorityClass]]\nname = \"urgent\"\nvalue = 100\npreemptible = false\n";
    let config = PlannerConfig::parse(CONFIG, "planner.toml").unwrap();
    let mut rig = Rig::new(config, ClusterBuilder::flat(2).build().nodes).persisting();
    rig.register_all();
    rig.tick();
    rig.run(JobBuilder::gang("low", 2, "cpu=8").queue("lo").build());
    let later = rig.now / 1000 + 10_000;
    let urgent = |name: &str| JobBuilder::gang(name, 2, "cpu=8").class("urgent");
    rig.submit_as(urgent("held").hold().build(), "bob");
    rig.submit_as(urgent("later").begin(later).build(), "bob");
    let preempted = |cmds: &[hyperplan_core::Command]| {
        cmds.iter()
            .any(|c| matches!(c, hyperplan_core::Command::Preempted { .. }))
    };
    for _ in 0..3 {
        assert!(!preempted(&rig.step()));
    }
    assert_eq!(rig.job("low").status, JobStatus::Running);
    assert_eq!(rig.job("held").preempting, None);
    // Released, it preempts as any urgent job would.
    rig.p.release(&["held".into()], Caller::user("bob")).unwrap();
    let mut steps = 0;
    while !preempted(&rig.step()) {
        steps += 1;
        assert!(steps < 3, "not preempted once released: {:?}", rig.job("held").reason);
    }
}

#[test]
fn under_private_data_another_users_job_reads_as_missing() {
    let mut rig = rig();
    block(&mut rig);
    rig.submit_as(JobBuilder::gang("mine", 1, "cpu=4").build(), "alice");
    rig.step();
    let bob = Caller::user("bob").private(true);
    let e = rig.p.hold(&["mine".into()], bob).unwrap_err();
    assert!(matches!(e, HoldError::Hidden { .. }));
    assert_eq!(e.to_string(), "no job named \"mine\"");
    // Checked before anything changes: one refusal holds none.
    let e = rig
        .p
        .hold(&["mine".into(), "nope".into()], Caller::user("alice"))
        .unwrap_err();
    assert_eq!(e, HoldError::NoSuchJob("nope".into()));
    rig.step();
    assert!(!matches!(rig.reason("mine"), Some(Reason::Held(_))));
}

#[test]
fn a_begin_time_is_a_deadline_and_the_simulator_waits_for_it() {
    let mut p = hyperplan_core::Planner::new(PlannerConfig::default());
    hyperplan_core::sim::submit::submit(
        &mut p,
        JobBuilder::gang("later", 1, "cpu=4").begin(500).build(),
        "alice",
    );
    p.tick(10);
    assert_eq!(p.next_deadline(), Some(500_000), "a tick is due at its begin time");
    let cluster = ClusterBuilder::flat(1).build();
    let jobs = [JobBuilder::gang("later", 1, "cpu=4").begin(500).runtime(10).build()];
    let report = hyperplan_core::testing::run(&cluster, &jobs, PlannerConfig::default());
    assert_eq!(report.jobs[0].start_time, Some(500), "{:?}", report.jobs[0].reason);
}
