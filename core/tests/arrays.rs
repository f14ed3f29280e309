//! Job arrays (issue 39): an array is split at submit into elements, each a job of its
//! own named `NAME[INDEX]` with its own id (the first's is the array's); `%N` keeps at
//! most N elements running at every tick and across a restart; `cancel` takes the
//! array, some elements, or one; arrays in the simulator's path split the same way.
//! Invariants are checked after every tick.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hyperplan_core::PlannerConfig;
use hyperplan_core::caller::Caller;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, Rig};
use hyperplan_shared::report::JobStatus;

/// Two nodes of 8 CPUs, registered, the daemon's planner (records written).
fn rig() -> Rig {
    Rig::flat_ready(2)
}

fn finish(rig: &mut Rig, job: &str, code: i32) {
    rig.exit_all(job, code);
}

/// The elements of `sweep` with indices `indices`, in each state.
fn states(rig: &Rig, name: &str, indices: impl Iterator<Item = u32>) -> Vec<(u32, JobStatus)> {
    indices.map(|i| (i, rig.job(&format!("{name}[{i}]")).status)).collect()
}

fn active(s: &[(u32, JobStatus)]) -> usize {
    s.iter()
        .filter(|(_, st)| matches!(st, JobStatus::Placed | JobStatus::Running))
        .count()
}

#[test]
fn an_array_of_twenty_with_a_limit_of_three_never_runs_more_than_three() {
    let mut rig = rig();
    let spec = JobBuilder::gang("sweep", 1, "cpu=1").array("1-20%3").build();
    let ids = rig.submit_now(vec![spec], "alice").unwrap();
    assert_eq!(ids.len(), 20, "one job per element");
    let first = ids[0].0;
    assert_eq!(ids[0].1, "sweep[1]");
    assert_eq!(ids[19], (first + 19, "sweep[20]".to_string()));
    let report = rig.job("sweep[7]");
    let el = report.array.clone().unwrap();
    assert_eq!((el.array_id, el.index, el.count, el.min, el.max), (first, 7, 20, 1, 20));
    assert_eq!(el.spec.to_string(), "1-20%3");
    let mut done = Vec::new();
    let mut most = 0;
    for _ in 0..60 {
        rig.step();
        let s = states(&rig, "sweep", 1..=20);
        most = most.max(active(&s));
        assert!(active(&s) <= 3, "more than %3 at {} ms: {s:?}", rig.now);
        // The lowest waiting indices go first; one element ends per step.
        if let Some(&(i, _)) = s.iter().find(|(_, st)| *st == JobStatus::Placed) {
            finish(&mut rig, &format!("sweep[{i}]"), 0);
            done.push(i);
        }
        if done.len() == 20 {
            break;
        }
    }
    rig.step();
    assert_eq!(
        done,
        (1..=20).collect::<Vec<_>>(),
        "every element ran, lowest index first"
    );
    assert_eq!(most, 3, "the limit is used, not only kept");
    assert!(
        states(&rig, "sweep", 1..=20)
            .iter()
            .all(|(_, s)| *s == JobStatus::Completed)
    );
}

#[test]
fn a_waiting_element_says_it_waits_for_the_limit_and_gets_no_reservation() {
    let mut rig = rig();
    let spec = JobBuilder::gang("sweep", 1, "cpu=1")
        .limit(100)
        .array("0-30:10%2")
        .build();
    rig.submit_now(vec![spec], "alice").unwrap();
    rig.step();
    let s = states(&rig, "sweep", [0, 10, 20, 30].into_iter());
    assert_eq!(active(&s), 2, "{s:?}");
    let waiting = rig.job("sweep[30]");
    assert_eq!(waiting.status, JobStatus::Pending);
    assert_eq!(
        waiting.reason.as_deref(),
        Some("array limit: 2 elements of sweep run at once (%2)")
    );
    assert_eq!(waiting.reservation, None);
}

#[test]
fn the_limit_holds_across_a_restart() {
    let mut rig = rig();
    let spec = JobBuilder::gang("sweep", 1, "cpu=1").array("1-10%2").build();
    rig.submit_now(vec![spec], "alice").unwrap();
    rig.step();
    for i in [1, 2] {
        let id = rig.job(&format!("sweep[{i}]")).id;
        rig.start_all(&format!("sweep[{i}]"), id);
    }
    rig.step();
    let (mut back, warnings) = rig.restarted(PlannerConfig::default(), 5_000);
    assert!(warnings.is_empty(), "{warnings:?}");
    back.register_all();
    for _ in 0..5 {
        back.step();
        let s = states(&back, "sweep", 1..=10);
        assert!(active(&s) <= 2, "{s:?}");
    }
    // The limit still lets the next one in when one ends.
    finish(&mut back, "sweep[1]", 0);
    back.step();
    back.step();
    assert_eq!(back.job("sweep[3]").status, JobStatus::Placed);
    assert_eq!(back.job("sweep[4]").status, JobStatus::Pending);
}

#[test]
fn cancel_takes_the_array_some_elements_or_one() {
    let mut rig = rig();
    let spec = JobBuilder::gang("sweep", 1, "cpu=1").array("1-8").build();
    let ids = rig.submit_now(vec![spec], "alice").unwrap();
    let array_id = ids[0].0;
    rig.step();
    let alice = Caller::user("alice");
    // Another user may not.
    assert!(rig.p.cancel("sweep[3-5]", 0, Caller::user("bob")).is_err());
    rig.p.cancel("sweep[3-5]", 0, alice).unwrap();
    rig.p.cancel(&format!("{array_id}_7"), 0, alice).unwrap();
    rig.step();
    rig.step();
    let cancelled: Vec<u32> = states(&rig, "sweep", 1..=8)
        .into_iter()
        .filter(|(_, s)| *s == JobStatus::Cancelled)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(cancelled, vec![3, 4, 5, 7]);
    assert!(rig.p.cancel("sweep[9]", 0, alice).is_err(), "no such element");
    assert!(rig.p.cancel("nothing", 0, alice).is_err());
    rig.p.cancel("sweep", 0, alice).unwrap();
    rig.step();
    rig.step();
    assert!(
        states(&rig, "sweep", 1..=8)
            .iter()
            .all(|(_, s)| *s == JobStatus::Cancelled)
    );
    // Its name is free again once the killed tasks ended: a new array of the name.
    for i in 1..=8 {
        finish(&mut rig, &format!("sweep[{i}]"), 143);
    }
    rig.step();
    let again = JobBuilder::gang("sweep", 1, "cpu=1").array("1-2").build();
    rig.submit_now(vec![again], "alice").unwrap();
}

#[test]
fn an_arrays_name_is_taken_while_an_element_lives() {
    let mut rig = rig();
    rig.submit_now(
        vec![JobBuilder::gang("sweep", 1, "cpu=1").array("1-2").build()],
        "alice",
    )
    .unwrap();
    let plain = rig.submit_now(vec![JobBuilder::gang("sweep", 1, "cpu=1").build()], "alice");
    assert!(plain.is_err(), "a job named as a live array");
    let twice = rig.submit_now(vec![JobBuilder::gang("sweep", 1, "cpu=1").array("3").build()], "alice");
    assert!(twice.is_err(), "a second live array of the name");
    rig.submit_now(vec![JobBuilder::gang("plain", 1, "cpu=1").build()], "alice")
        .unwrap();
    let over = rig.submit_now(
        vec![JobBuilder::gang("plain", 1, "cpu=1").array("1-2").build()],
        "alice",
    );
    assert!(over.is_err(), "an array named as a live job");
}

#[test]
fn elements_count_against_the_users_job_limit() {
    let mut config = PlannerConfig::default();
    config.limits.max_jobs_per_user = 10;
    let mut rig = Rig::new(config, ClusterBuilder::flat(2).build().nodes).persisting();
    rig.register_all();
    rig.tick();
    let big = JobBuilder::gang("big", 1, "cpu=1").array("1-11").build();
    assert!(rig.submit_now(vec![big], "alice").is_err());
    assert_eq!(rig.p.next_job_id(), 1, "a refusal uses no id");
    let fits = JobBuilder::gang("fits", 1, "cpu=1").array("1-10").build();
    assert_eq!(rig.submit_now(vec![fits], "alice").unwrap().len(), 10);
}

#[test]
fn the_limit_holds_when_a_begin_time_comes_and_when_released() {
    let mut rig = rig();
    let begin = rig.now / 1000 + 5;
    let spec = JobBuilder::gang("later", 1, "cpu=1")
        .array("1-3%1")
        .begin(begin)
        .build();
    rig.submit_now(vec![spec], "alice").unwrap();
    let held = JobBuilder::gang("held", 1, "cpu=1").array("1-3%2").hold().build();
    rig.submit_now(vec![held], "alice").unwrap();
    for _ in 0..8 {
        rig.step();
        assert!(active(&states(&rig, "later", 1..=3)) <= 1);
        assert!(active(&states(&rig, "held", 1..=3)) <= 2);
    }
    assert_eq!(active(&states(&rig, "later", 1..=3)), 1, "its time came");
    rig.p.release(&["held".into()], Caller::user("alice")).unwrap();
    for _ in 0..3 {
        rig.step();
        assert!(active(&states(&rig, "held", 1..=3)) <= 2);
    }
    assert_eq!(active(&states(&rig, "held", 1..=3)), 2);
}

#[test]
fn an_array_of_a_large_spec_is_refused_before_it_is_split() {
    let mut rig = rig();
    let mut big = JobBuilder::gang("big", 1, "cpu=1").array("1-10000").build();
    big.tasks[0].exec.env.insert("BLOB".into(), "x".repeat(20_000));
    let e = rig.submit_now(vec![big], "alice").unwrap_err().to_string();
    assert!(
        e.starts_with("job big: 10000 elements × 20") && e.contains("more than the 134217728 bytes an array may hold"),
        "{e}"
    );
    assert_eq!(rig.p.next_job_id(), 1, "nothing admitted");
}

#[test]
fn the_simulators_path_splits_an_array_the_same_way() {
    let mut rig = rig();
    let first = rig.submit_as(JobBuilder::gang("sim", 1, "cpu=1").array("5-7%1").build(), "alice");
    rig.step();
    assert_eq!(rig.job("sim[5]").status, JobStatus::Placed);
    assert_eq!(rig.job("sim[6]").status, JobStatus::Pending);
    assert_eq!(rig.job("sim[7]").array.unwrap().array_id, first);
    assert_eq!(rig.p.next_job_id(), first + 3);
}

#[test]
fn the_simulator_keeps_the_limit_and_the_dependency_on_its_clock() {
    let cluster = ClusterBuilder::flat(1).build();
    let mut sweep = JobBuilder::gang("sweep", 1, "cpu=1").array("1-6%2").build();
    sweep.tasks[0].runtime = Some(60);
    let mut merge = JobBuilder::gang("merge", 1, "cpu=1").depends("afterok:sweep").build();
    merge.tasks[0].runtime = Some(10);
    let report = hyperplan_core::sim::simulate_with(&cluster, &[sweep, merge], PlannerConfig::default(), |p| {
        assert!(p.violations().is_empty());
    });
    let times = |name: &str| {
        let j = report.jobs.iter().find(|j| j.name == name).unwrap();
        (j.start_time.unwrap(), j.end_time.unwrap())
    };
    // Two at a time, 60 s each; merge after the last.
    assert_eq!(times("sweep[1]"), (0, 60));
    assert_eq!(times("sweep[3]"), (60, 120));
    assert_eq!(times("sweep[6]"), (120, 180));
    assert_eq!(times("merge"), (180, 190));
}
