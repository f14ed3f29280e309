//! Dependencies (issue 39): `after`, `afterok`, `afternotok`, `afterany`, `aftercorr`,
//! `singleton`, `,` and `?`; a job whose dependency can never be met is cancelled with
//! the reason (or kept, asked so); waiting jobs say what they wait for, preempt no one
//! and get no reservation; what was decided survives a restart. Virtual clock;
//! invariants are checked after every tick.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hyperplan_core::PlannerConfig;
use hyperplan_core::testing::{JobBuilder, Rig};
use hyperplan_shared::report::JobStatus;

/// Two nodes of 8 CPUs, registered, the daemon's planner (records written).
fn rig() -> Rig {
    Rig::flat_ready(2)
}

/// Every placed task of `job` exits `code` now, and a step goes by.
fn finish(rig: &mut Rig, job: &str, code: i32) {
    rig.exit_all(job, code);
    rig.step();
}

fn status(rig: &Rig, job: &str) -> JobStatus {
    rig.job(job).status
}

fn reason(rig: &Rig, job: &str) -> String {
    rig.job(job).reason.unwrap_or_default()
}

fn one(name: &str) -> JobBuilder {
    JobBuilder::gang(name, 1, "cpu=1")
}

#[test]
fn a_pipeline_starts_in_order_and_the_failed_branch_is_cancelled() {
    let mut rig = rig();
    // One file: prep, then train after it succeeded, report-failure after it failed,
    // cleanup after it ended however.
    let jobs = vec![
        one("prep").build(),
        one("train").depends("afterok:prep").build(),
        one("on-failure").depends("afternotok:prep").build(),
        one("cleanup").depends("afterany:prep").build(),
    ];
    rig.submit_now(jobs, "alice").unwrap();
    rig.step();
    assert_eq!(status(&rig, "prep"), JobStatus::Placed);
    assert_eq!(status(&rig, "train"), JobStatus::Pending);
    // Worked out before the walk: the next tick says what the walk did.
    assert_eq!(reason(&rig, "train"), "Dependency: afterok:prep (pending)");
    rig.step();
    assert_eq!(reason(&rig, "train"), "Dependency: afterok:prep (running)");
    assert_eq!(rig.job("train").reservation, None);
    assert_eq!(
        rig.p.explain("train").map(|e| e.job.reason),
        Some(Some("Dependency: afterok:prep (running)".to_string()))
    );
    finish(&mut rig, "prep", 0);
    rig.step();
    assert_eq!(status(&rig, "prep"), JobStatus::Completed);
    assert_eq!(status(&rig, "train"), JobStatus::Placed, "{}", reason(&rig, "train"));
    assert_eq!(status(&rig, "cleanup"), JobStatus::Placed);
    assert_eq!(status(&rig, "on-failure"), JobStatus::Cancelled);
    assert_eq!(
        reason(&rig, "on-failure"),
        "Dependency never met: afternotok:prep (completed); cancelled (keepOnFailedDependency: true keeps such a job waiting)"
    );
}

#[test]
fn afterok_on_a_failed_job_cancels_unless_asked_to_keep() {
    let mut rig = rig();
    let jobs = vec![
        one("prep").build(),
        one("next").depends("afterok:prep").build(),
        one("kept").depends("afterok:prep").keep_on_failed_dependency().build(),
    ];
    rig.submit_now(jobs, "alice").unwrap();
    rig.step();
    finish(&mut rig, "prep", 3);
    rig.step();
    assert_eq!(status(&rig, "prep"), JobStatus::Failed);
    assert_eq!(status(&rig, "next"), JobStatus::Cancelled);
    assert_eq!(status(&rig, "kept"), JobStatus::Pending);
    let kept = "Dependency never met: afterok:prep (failed); kept waiting (keepOnFailedDependency): cancel it";
    assert_eq!(reason(&rig, "kept"), kept);
    // After a restart, which brings back no ended job, it is still kept, not freed.
    let (mut back, warnings) = rig.restarted(PlannerConfig::default(), 5_000);
    assert!(warnings.is_empty(), "{warnings:?}");
    back.register_all();
    for _ in 0..3 {
        back.step();
    }
    assert_eq!(status(&back, "kept"), JobStatus::Pending);
    assert_eq!(reason(&back, "kept"), kept);
}

#[test]
fn a_dependency_on_a_running_job_survives_a_restart() {
    let mut rig = rig();
    rig.submit_now(vec![one("prep").build()], "alice").unwrap();
    rig.step();
    let id = rig.job("prep").id;
    rig.start_all("prep", id);
    rig.submit_now(vec![one("train").depends(&format!("afterok:{id}")).build()], "alice")
        .unwrap();
    rig.step();
    assert_eq!(reason(&rig, "train"), format!("Dependency: afterok:{id} (running)"));
    let (mut back, _) = rig.restarted(PlannerConfig::default(), 5_000);
    back.register_all();
    back.step();
    back.step();
    assert_eq!(status(&back, "train"), JobStatus::Pending);
    finish(&mut back, "prep", 0);
    back.step();
    assert_eq!(status(&back, "train"), JobStatus::Placed, "{}", reason(&back, "train"));
}

#[test]
fn any_of_and_all_of() {
    let mut rig = rig();
    let jobs = vec![
        one("a").build(),
        one("b").build(),
        one("either").depends("afterok:a?afterok:b").build(),
        one("both").depends("afterok:a,afterok:b").build(),
        one("both-list").depends("afterok:a:b").build(),
    ];
    rig.submit_now(jobs, "alice").unwrap();
    rig.step();
    finish(&mut rig, "a", 0);
    rig.step();
    assert_eq!(status(&rig, "either"), JobStatus::Placed);
    assert_eq!(status(&rig, "both"), JobStatus::Pending);
    assert_eq!(reason(&rig, "both"), "Dependency: afterok:b (running)");
    assert_eq!(reason(&rig, "both-list"), "Dependency: afterok:b (running)");
    finish(&mut rig, "b", 0);
    rig.step();
    assert_eq!(status(&rig, "both"), JobStatus::Placed);
    assert_eq!(status(&rig, "both-list"), JobStatus::Placed);
}

#[test]
fn after_waits_for_the_start_plus_minutes_on_the_virtual_clock() {
    let mut rig = rig();
    rig.submit_now(vec![one("server").build()], "alice").unwrap();
    rig.step();
    let id = rig.job("server").id;
    rig.start_all("server", id);
    rig.step();
    let started = rig.job("server").start_time.unwrap();
    rig.submit_now(vec![one("client").depends("after:server+1").build()], "alice")
        .unwrap();
    while rig.now / 1000 < started + 59 {
        rig.step();
        assert_eq!(status(&rig, "client"), JobStatus::Pending, "at {} s", rig.now / 1000);
    }
    // The planner asks for a tick when the minute is up.
    assert!(rig.p.next_deadline().is_some_and(|d| d <= (started + 60) * 1000));
    rig.step();
    rig.step();
    assert_eq!(status(&rig, "client"), JobStatus::Placed);
}

#[test]
fn singleton_runs_one_job_of_a_name_and_user_at_a_time() {
    let mut rig = rig();
    let first = rig
        .submit_now(vec![one("nightly").depends("singleton").build()], "alice")
        .unwrap();
    assert_eq!(first[0].1, "nightly");
    let second = rig
        .submit_now(vec![one("nightly").depends("singleton").build()], "alice")
        .unwrap();
    let renamed = second[0].1.clone();
    assert_eq!(renamed, format!("nightly.{}", second[0].0), "the name stays unique");
    // Another user's job of the name is not theirs to share.
    assert!(
        rig.submit_now(vec![one("nightly").depends("singleton").build()], "bob")
            .is_err()
    );
    rig.step();
    assert_eq!(status(&rig, "nightly"), JobStatus::Placed);
    assert_eq!(status(&rig, &renamed), JobStatus::Pending);
    assert_eq!(
        reason(&rig, &renamed),
        "singleton: waits for nightly (same name and user) to end"
    );
    finish(&mut rig, "nightly", 0);
    rig.step();
    assert_eq!(status(&rig, &renamed), JobStatus::Placed);
}

#[test]
fn aftercorr_pairs_elements_of_two_arrays() {
    let mut rig = rig();
    let jobs = vec![
        one("gen").array("1-3").build(),
        one("use").array("1-3").depends("aftercorr:gen").build(),
    ];
    rig.submit_now(jobs, "alice").unwrap();
    rig.step();
    finish(&mut rig, "gen[2]", 0);
    finish(&mut rig, "gen[3]", 1);
    rig.step();
    assert_eq!(status(&rig, "use[1]"), JobStatus::Pending);
    assert_eq!(reason(&rig, "use[1]"), "Dependency: aftercorr:gen (running)");
    assert_eq!(status(&rig, "use[2]"), JobStatus::Placed);
    assert_eq!(status(&rig, "use[3]"), JobStatus::Cancelled);
    // aftercorr outside an array is refused at submit.
    assert!(
        rig.submit_now(vec![one("x").depends("aftercorr:gen").build()], "alice")
            .is_err()
    );
}

#[test]
fn a_dependency_on_a_whole_array_waits_for_every_element() {
    let mut rig = rig();
    let jobs = vec![
        one("sweep").array("1-3").build(),
        one("merge").depends("afterok:sweep").build(),
    ];
    rig.submit_now(jobs, "alice").unwrap();
    rig.step();
    finish(&mut rig, "sweep[1]", 0);
    finish(&mut rig, "sweep[2]", 0);
    assert_eq!(reason(&rig, "merge"), "Dependency: afterok:sweep (2 of 3 done)");
    finish(&mut rig, "sweep[3]", 0);
    rig.step();
    assert_eq!(status(&rig, "merge"), JobStatus::Placed);
}

#[test]
fn a_dependency_on_no_job_is_refused_at_submit() {
    let mut rig = rig();
    let refused = rig
        .submit_now(vec![one("orphan").depends("afterok:nothing").build()], "alice")
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "job orphan: dependency afterok:nothing: no job nothing (name a job by its name or id that has not been forgotten)"
    );
    assert!(
        rig.submit_now(vec![one("orphan").depends("afterany:999").build()], "alice")
            .is_err()
    );
}

#[test]
fn under_private_data_another_users_job_is_no_target() {
    let mut rig = rig();
    rig.submit_now(vec![one("secret").build()], "alice").unwrap();
    rig.step();
    let bob = hyperplan_core::caller::Caller::user("bob").private(true);
    let asked = vec![one("spy").depends("afterany:secret").build()];
    let refused = rig.p.submit(asked, bob, rig.now).unwrap_err().to_string();
    assert!(refused.contains("no job secret"), "{refused}");
    // Without privateData, jobs are everyone's to wait for (as in Slurm).
    let open = vec![one("after-secret").depends("afterany:secret").build()];
    rig.submit_now(open, "bob").unwrap();
}
