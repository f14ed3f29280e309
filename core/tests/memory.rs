//! The planner's memory (issue 38): a rejected job keeps no entity per replica and its
//! record no record per task; ended jobs past `[limits]`' bounds leave the world (the
//! store keeps them, and `status --all` reads them there); a status answer comes in
//! pages of a bounded size, however many jobs and tasks there are.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::time::Duration;

use hyperplan_core::caller::Caller;
use hyperplan_core::config::{HealthConfig, LimitsConfig};
use hyperplan_core::jobs::forget::Kept;
use hyperplan_core::model::components::{Job, SubJob, Task};
use hyperplan_core::model::reason::Reason;
use hyperplan_core::model::record::JobRecord;
use hyperplan_core::requests::status::StatusQuery;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, Rig};
use hyperplan_core::{Command, Event, Planner, PlannerConfig};
use hyperplan_shared::report::{JobReport, JobStatus};
use hyperplan_shared::status::JobList;
use hyperplan_shared::taskend::{TaskEnd, TaskOutcome};

fn config(limits: LimitsConfig) -> PlannerConfig {
    PlannerConfig {
        health: HealthConfig {
            node_lost_after: Duration::from_secs(10),
            ..HealthConfig::default()
        },
        limits,
        ..PlannerConfig::default()
    }
}

/// A daemon's planner (it keeps records) with `nodes` nodes of 8 CPUs, the first
/// `registered` of them with their agents registered.
fn rig(limits: LimitsConfig, nodes: u32, registered: usize) -> Rig {
    let cluster = ClusterBuilder::flat(nodes).node_resources("cpu=8").build();
    let mut rig = Rig::new(config(limits), cluster.nodes).persisting();
    let names: Vec<String> = rig.nodes.iter().take(registered).map(|n| n.name.clone()).collect();
    for n in names {
        rig.register(&n);
    }
    rig.tick();
    rig
}

/// How many entities have component `C`.
fn count<C: bevy_ecs::component::Component>(p: &mut Planner) -> usize {
    let world = p.world_mut_for_tests();
    world.query::<&C>().iter(world).count()
}

fn entities(p: &mut Planner) -> usize {
    let world = p.world_mut_for_tests();
    world.query::<bevy_ecs::entity::Entity>().iter(world).count()
}

fn stored(rig: &Rig, id: u64) -> (bool, JobRecord, usize) {
    let (live, bytes) = rig.store.get(&id).unwrap_or_else(|| panic!("no record of job {id}"));
    (*live, JobRecord::decode(bytes).unwrap(), bytes.len())
}

#[test]
fn a_rejected_100000_replica_job_keeps_no_entity_per_replica_nor_a_record_per_task() {
    let mut rig = rig(LimitsConfig::default(), 2, 2);
    let before = entities(&mut rig.p);
    let huge = JobBuilder::gang("huge", 100_000, "cpu=1").build();
    let now = rig.now;
    let admitted = rig.p.submit(vec![huge], Caller::user("alice"), now).unwrap();
    let id = admitted[0].id.0;
    // What the daemon writes at submit is the spec, not 100,000 task records.
    assert!(
        admitted[0].record.bytes.len() < 4096,
        "{} bytes",
        admitted[0].record.bytes.len()
    );
    let cmds = rig.step();
    let j = rig.job("huge");
    assert_eq!(j.status, JobStatus::Rejected, "{:?}", j.reason);
    assert!(
        matches!(rig.reason("huge"), Some(Reason::NoFitEver { .. })),
        "{:?}",
        j.reason
    );
    assert!(
        cmds.iter()
            .any(|c| matches!(c, Command::Reject { job, .. } if job == "huge"))
    );
    // What people need to see why stays; no entity per replica does.
    assert_eq!(
        (j.owner.as_deref(), j.queue.as_deref(), j.id),
        (Some("alice"), Some("default"), id)
    );
    assert!(j.tasks.is_empty(), "{} tasks", j.tasks.len());
    assert_eq!(count::<Task>(&mut rig.p), 0);
    assert_eq!(count::<SubJob>(&mut rig.p), 0);
    assert_eq!(count::<Job>(&mut rig.p), 1);
    assert_eq!(entities(&mut rig.p), before + 1, "the job's own entity, nothing else");
    let (live, rec, bytes) = stored(&rig, id);
    assert!(live, "rejected for the cluster of now: looked at again when it changes");
    assert!(
        rec.tasks.is_empty() && rec.sub_jobs.is_empty() && bytes < 4096,
        "{bytes} bytes"
    );
    // Nothing changes while the cluster does not: no entity comes back, no record is
    // written again, no second rejection is announced.
    let writes = rig.writes;
    for _ in 0..3 {
        let cmds = rig.step();
        assert!(!cmds.iter().any(|c| matches!(c, Command::Reject { .. })), "{cmds:?}");
    }
    assert_eq!(count::<Task>(&mut rig.p), 0);
    assert_eq!(rig.writes, writes);
    // A node more is a new topology: the job is looked at again (its tasks made for
    // the look), rejected again as it still cannot fit, and lets them go again.
    rig.nodes
        .push(ClusterBuilder::flat(1).node_resources("cpu=8").build().nodes.remove(0));
    rig.nodes.last_mut().unwrap().name = "n99".into();
    rig.register("n99");
    rig.step();
    assert_eq!(rig.job("huge").status, JobStatus::Rejected);
    assert_eq!((count::<Task>(&mut rig.p), count::<SubJob>(&mut rig.p)), (0, 0));
}

#[test]
fn a_rejected_job_gets_its_tasks_back_and_runs_when_the_cluster_grows() {
    // Three nodes known, two agents registered: three whole nodes cannot fit yet.
    let mut rig = rig(LimitsConfig::default(), 3, 2);
    let id = rig.submit_as(JobBuilder::gang("wide", 3, "cpu=8").build(), "alice");
    rig.step();
    assert_eq!(rig.job("wide").status, JobStatus::Rejected);
    assert_eq!(count::<Task>(&mut rig.p), 0);
    let (live, rec, _) = stored(&rig, id);
    assert!(live && rec.tasks.is_empty());
    rig.register("n03");
    let cmds = rig.step();
    let j = rig.job("wide");
    assert_eq!(j.status, JobStatus::Placed, "{:?}", j.reason);
    assert_eq!(j.tasks.iter().filter(|t| t.node.is_some()).count(), 3);
    assert!(
        cmds.iter()
            .any(|c| matches!(c, Command::Info(i) if i.contains("it was rejected"))),
        "{cmds:?}"
    );
    let (_, rec, _) = stored(&rig, id);
    assert_eq!(rec.tasks.len(), 3, "placed tasks are recorded again");
}

#[test]
fn a_restarted_planner_loads_a_rejected_job_from_its_compact_record() {
    let mut old = rig(LimitsConfig::default(), 3, 2);
    old.submit_as(JobBuilder::gang("wide", 3, "cpu=8").build(), "alice");
    old.step();
    assert_eq!(old.job("wide").status, JobStatus::Rejected);
    let (mut rig, warnings) = old.restarted(config(LimitsConfig::default()), 1_000);
    assert!(warnings.is_empty(), "{warnings:?}");
    rig.register_all();
    rig.step();
    assert_eq!(rig.job("wide").status, JobStatus::Placed);
}

#[test]
fn explain_says_what_a_rejected_job_needs_and_where_there_is_room_from_its_spec() {
    let cluster = ClusterBuilder::fat_tree(&[2, 2], 1).node_resources("cpu=8").build();
    let mut p = Planner::new(config(LimitsConfig::default()));
    for n in cluster.nodes {
        p.push(Event::NodeUp(n));
    }
    p.push(Event::StaticHyperNodes(cluster.hyper_nodes));
    hyperplan_core::sim::submit::submit(&mut p, JobBuilder::gang("five", 5, "cpu=8").build(), "alice");
    p.tick(1);
    assert_eq!(p.job("five").unwrap().status, JobStatus::Rejected);
    assert_eq!(count::<Task>(&mut p), 0);
    let e = p.explain("five").unwrap();
    assert_eq!(e.need, 5);
    let leaf = e.candidates.iter().find(|c| c.name == "leaf-1").unwrap();
    assert_eq!(leaf.room, 2, "{leaf:?}");
}

fn exited(code: i32) -> TaskEnd {
    TaskEnd {
        outcome: TaskOutcome::Exited,
        exit_code: Some(code),
        ..TaskEnd::default()
    }
}

/// Runs `name` (`tasks` tasks of one CPU) for `owner` to its end: its id.
fn run_to_end(rig: &mut Rig, name: &str, tasks: u32, owner: &str) -> u64 {
    let id = rig.submit_as(JobBuilder::gang(name, tasks, "cpu=1").build(), owner);
    rig.step();
    rig.start_all(name, id);
    rig.step();
    for i in 0..tasks {
        rig.ended(name, id, &format!("worker-{i}"), exited(0));
    }
    rig.step();
    assert_eq!(rig.job(name).status, JobStatus::Completed);
    id
}

fn names(reports: &[JobReport]) -> Vec<&str> {
    let mut v: Vec<&str> = reports.iter().map(|r| r.name.as_str()).collect();
    v.sort_unstable();
    v
}

/// `status` as `caller` (`--all` when `all`) with the rig's store as the stored jobs.
fn status(rig: &Rig, job: Option<&str>, all: bool) -> Vec<JobReport> {
    let records = || -> Result<Vec<JobRecord>, Infallible> {
        Ok(rig
            .store
            .values()
            .filter(|(live, _)| !live)
            .map(|(_, b)| JobRecord::decode(b).unwrap())
            .collect())
    };
    let query = StatusQuery {
        job: job.map(str::to_string),
        all,
        ..StatusQuery::default()
    };
    rig.p
        .status(query, Caller::admin("root"), rig.now, |_| records())
        .unwrap()
        .jobs
}

#[test]
fn ended_jobs_past_a_users_bound_leave_memory_oldest_first_and_stay_in_the_store() {
    let limits = LimitsConfig {
        max_ended_jobs_per_user: 2,
        ..LimitsConfig::default()
    };
    let mut rig = rig(limits, 2, 2);
    for name in ["a0", "a1", "a2", "a3"] {
        run_to_end(&mut rig, name, 2, "alice");
    }
    run_to_end(&mut rig, "b0", 1, "bob");
    // alice's two newest and bob's one are kept; alice's history did not push bob's out.
    assert_eq!(names(&rig.p.jobs()), ["a2", "a3", "b0"]);
    assert_eq!(count::<Job>(&mut rig.p), 3);
    assert_eq!(count::<Task>(&mut rig.p), 5);
    let kept = rig.p.world_for_tests().resource::<Kept>();
    assert_eq!(
        (kept.of_owner("alice"), kept.of_owner("bob"), kept.len(), kept.tasks()),
        (2, 1, 3, 5)
    );
    // The others are read from the store, as after a restart.
    assert_eq!(names(&status(&rig, None, false)), ["a2", "a3", "b0"]);
    assert_eq!(names(&status(&rig, None, true)), ["a0", "a1", "a2", "a3", "b0"]);
    let a0 = status(&rig, Some("a0"), false);
    assert_eq!((a0[0].status, a0[0].tasks.len()), (JobStatus::Completed, 2));
    // The name is free, and means the new job.
    let id = run_to_end(&mut rig, "a0", 1, "alice");
    assert_eq!(rig.job("a0").id, id);
    assert_eq!(names(&rig.p.jobs()), ["a0", "a3", "b0"]);
}

#[test]
fn the_tasks_of_ended_jobs_kept_are_bounded_for_all_users_together() {
    let limits = LimitsConfig {
        max_ended_tasks: 5,
        ..LimitsConfig::default()
    };
    let mut rig = rig(limits, 2, 2);
    run_to_end(&mut rig, "a", 2, "alice");
    run_to_end(&mut rig, "b", 2, "bob");
    assert_eq!(names(&rig.p.jobs()), ["a", "b"]);
    run_to_end(&mut rig, "c", 3, "carol");
    assert_eq!(names(&rig.p.jobs()), ["b", "c"], "the oldest goes, whoever's it is");
    assert_eq!(count::<Task>(&mut rig.p), 5);
}

#[test]
fn ended_jobs_leave_memory_when_the_store_lets_them_go() {
    let limits = LimitsConfig {
        keep_ended_secs: Some(60),
        ..LimitsConfig::default()
    };
    let mut rig = rig(limits, 2, 2);
    run_to_end(&mut rig, "old", 1, "alice");
    let pending = rig.submit_as(JobBuilder::gang("waits", 3, "cpu=8").build(), "alice");
    rig.now += 59_000;
    rig.step();
    assert_eq!(names(&rig.p.jobs()), ["old", "waits"]);
    rig.step();
    rig.step();
    assert_eq!(names(&rig.p.jobs()), ["waits"], "only an ended job goes");
    assert!(stored(&rig, pending).0);
}

#[test]
fn the_simulator_keeps_every_job() {
    let limits = LimitsConfig {
        max_ended_jobs_per_user: 1,
        ..LimitsConfig::default()
    };
    let cluster = ClusterBuilder::flat(2).node_resources("cpu=8").build();
    let jobs: Vec<_> = (0..4)
        .map(|i| {
            JobBuilder::gang(&format!("j{i}"), 1, "cpu=1")
                .runtime(10)
                .submit(i)
                .build()
        })
        .collect();
    let report = hyperplan_core::testing::run(&cluster, &jobs, config(limits));
    assert_eq!(report.jobs.len(), 4);
}

/// Every page of `query`, joined as the CLI joins them (a job cut between two pages
/// whole again), and the pages' sizes in jobs and tasks.
fn paged(p: &Planner, query: &StatusQuery, max_bytes: usize) -> (Vec<JobReport>, Vec<(usize, usize)>) {
    let mut all: Vec<JobReport> = Vec::new();
    let mut shapes = Vec::new();
    let mut page = None;
    for _ in 0..10_000 {
        let q = StatusQuery {
            page,
            max_bytes: Some(max_bytes),
            ..query.clone()
        };
        let JobList { jobs, next } = p
            .status(q, Caller::admin("root"), 10_000, |_| Ok::<_, Infallible>(Vec::new()))
            .unwrap();
        shapes.push((jobs.len(), jobs.iter().map(|j| j.tasks.len()).sum()));
        for j in jobs {
            match all.last_mut() {
                Some(last) if last.id == j.id => last.tasks.extend(j.tasks),
                _ => all.push(j),
            }
        }
        match next {
            Some(n) => page = Some(n),
            None => return (all, shapes),
        }
    }
    panic!("no last page");
}

#[test]
fn a_status_answer_comes_in_pages_that_join_into_the_whole() {
    // One node of 8 CPUs: `hog` holds it; the `big-*` jobs could never fit (rejected, no
    // tasks); `wide` could, and waits behind `hog` with its 300 tasks.
    let cluster = ClusterBuilder::flat(1).node_resources("cpu=8").build();
    let mut rig = Rig::new(config(LimitsConfig::default()), cluster.nodes).persisting();
    rig.register_all();
    rig.tick();
    let hog = rig.submit_as(JobBuilder::gang("hog", 1, "cpu=8").build(), "alice");
    rig.step();
    rig.start_all("hog", hog);
    for i in 0..200 {
        rig.submit_as(JobBuilder::gang(&format!("big-{i:03}"), 100, "cpu=1").build(), "alice");
    }
    rig.submit_as(JobBuilder::gang("wide", 300, "cpu=10m").build(), "bob");
    rig.step();
    assert_eq!(rig.job("wide").status, JobStatus::Pending);
    assert_eq!(rig.job("wide").tasks.len(), 300);
    let query = StatusQuery::default();
    let whole = rig
        .p
        .status(query.clone(), Caller::admin("root"), 10_000, |_| {
            Ok::<_, Infallible>(Vec::new())
        })
        .unwrap();
    assert_eq!(whole.jobs.len(), 202);
    assert_eq!(whole.next, None);
    let (joined, shapes) = paged(&rig.p, &query, 8 * 1024);
    assert_eq!(joined, whole.jobs, "the pages join into the whole answer");
    assert!(shapes.len() > 3, "{shapes:?}");
    // `wide`'s tasks do not fit one page: it is cut inside its task list.
    let pages_with_wide_tasks = shapes.iter().filter(|(_, tasks)| *tasks > 0).count();
    assert!(pages_with_wide_tasks > 1, "{shapes:?}");
    // One job asked by name is paged too.
    let one = StatusQuery {
        job: Some("wide".into()),
        ..StatusQuery::default()
    };
    let (joined, shapes) = paged(&rig.p, &one, 4 * 1024);
    assert_eq!((joined.len(), joined[0].tasks.len()), (1, 300));
    assert!(shapes.len() > 2, "{shapes:?}");
    // A page too small for anything still holds one task, so every answer ends.
    let (joined, _) = paged(&rig.p, &one, 1);
    assert_eq!(joined[0].tasks.len(), 300);
}
