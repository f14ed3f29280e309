//! Scenario tests for durable state (issue 14), on the core's side: the persist system writes a
//! job's record when it changes (and only then), a planner restored from those records
//! has every live job as it was, places nothing on the nodes of running tasks before
//! their agents are back, takes the tasks' NUMA assignments again on the hardware they
//! report, kills what they run that it does not know, and loses what they no longer run
//! (or what a node that never comes back ran). Invariants are checked after every tick.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use hyperplan_core::config::HealthConfig;
use hyperplan_core::model::events::TaskOnNode;
use hyperplan_core::model::kill::KillReason;
use hyperplan_core::model::reason::{NoFit, Reason};
use hyperplan_core::model::record::JobRecord;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, MachineBuilder, Rig};
use hyperplan_core::{Command, Event, PlannerConfig};
use hyperplan_shared::NodeSpec;
use hyperplan_shared::report::{JobStatus, TaskStatus};
use hyperplan_shared::taskend::{TaskEnd, TaskOutcome};

/// Nodes lost after 10 s of silence.
fn config() -> PlannerConfig {
    PlannerConfig {
        health: HealthConfig {
            node_lost_after: Duration::from_secs(10),
            ..HealthConfig::default()
        },
        ..PlannerConfig::default()
    }
}

/// Two nodes of 2 NUMA nodes × 4 cores (8 PUs).
fn cluster() -> Vec<NodeSpec> {
    ClusterBuilder::flat(2)
        .hardware(MachineBuilder::new(2, 1, 4, 1).build())
        .build()
        .nodes
}

/// The daemon's planner (records written) with the two nodes known, none registered.
fn new_rig() -> Rig {
    Rig::new(config(), cluster()).persisting()
}

/// A planner started from `old`'s stored live records 5 s later.
fn restarted(old: &Rig) -> (Rig, Vec<String>) {
    old.restarted(config(), 5_000)
}

/// The task's end as its agent reports it.
fn end(rig: &mut Rig, job: &str, id: u64, task: &str, outcome: TaskOutcome, code: Option<i32>) {
    rig.ended(
        job,
        id,
        task,
        TaskEnd {
            outcome,
            exit_code: code,
            ..TaskEnd::default()
        },
    );
}

fn placed(cmds: &[Command]) -> Vec<String> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Place(p) => Some(format!("{}/{}@{}", p.job(), p.task, p.node)),
            _ => None,
        })
        .collect()
}

/// A rig with `run` (2 × 4 PUs, single-numa-node, started),
/// `wait` (2 × 8 PUs) pending behind it, and `done` finished.
fn busy_rig() -> (Rig, u64, u64) {
    let mut rig = new_rig();
    rig.register("n01");
    rig.register("n02");
    rig.tick();
    let done = rig.submit_as(JobBuilder::gang("done", 1, "cpu=1").build(), "alice");
    rig.step();
    rig.start_all("done", done);
    rig.step();
    end(&mut rig, "done", done, "worker-0", TaskOutcome::Exited, Some(0));
    rig.step();
    assert_eq!(rig.job("done").status, JobStatus::Completed);
    let run = rig.submit_as(
        JobBuilder::gang("run", 2, "cpu=4").numa("single-numa-node").build(),
        "alice",
    );
    rig.step();
    rig.start_all("run", run);
    let wait = rig.submit_as(JobBuilder::gang("wait", 2, "cpu=8").build(), "alice");
    rig.step();
    assert_eq!(rig.job("run").status, JobStatus::Running);
    assert_eq!(rig.job("wait").status, JobStatus::Pending);
    (rig, run, wait)
}

#[test]
fn the_persist_system_writes_a_job_when_it_changes_and_only_then() {
    let (mut rig, run, _) = busy_rig();
    let before = rig.writes;
    // Heartbeats with the tasks' use: nothing durable changed.
    for _ in 0..3 {
        let tasks = rig
            .job("run")
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| (t.node.clone().unwrap(), t.name.clone(), i as u32))
            .collect::<Vec<_>>();
        for (node, task, index) in tasks {
            rig.p.push(Event::TasksOnNode {
                node,
                tasks: vec![TaskOnNode {
                    job: "run".into(),
                    job_id: run.into(),
                    task,
                    index,
                    pid: 100 + index,
                    cpu_cores: 3.5,
                    rss_bytes: 1 << 20,
                }],
            });
        }
        rig.step();
    }
    assert_eq!(rig.writes, before, "sampled use and idle ticks write nothing");
    // Finished jobs go to the finished side, live ones stay live.
    let live: Vec<bool> = rig.store.values().map(|(l, _)| *l).collect();
    assert_eq!(live, vec![false, true, true], "done, run, wait");
}

#[test]
fn a_restarted_planner_has_every_live_job_and_places_nothing_before_the_nodes_are_back() {
    let (old, run, wait) = busy_rig();
    let cpus_before: Vec<Option<String>> = old.job("run").tasks.iter().map(|t| t.cpus.clone()).collect();
    let (mut rig, warnings) = restarted(&old);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert!(rig.p.job("done").is_none(), "ended jobs stay in the store");
    let cmds = rig.tick();
    assert!(placed(&cmds).is_empty(), "{:?}", placed(&cmds));
    let r = rig.job("run");
    assert_eq!(r.status, JobStatus::Running);
    assert!(r.tasks.iter().all(|t| t.state == Some(TaskStatus::Running)), "{r:?}");
    assert_eq!(rig.job("wait").status, JobStatus::Pending);
    // Ids go on after the stored ones.
    assert_eq!(rig.p.next_job_id(), wait + 1);
    // One node is back: its task holds its PUs again, and `wait` still does not fit.
    rig.register("n01");
    let cmds = rig.step();
    assert!(placed(&cmds).is_empty(), "{:?}", placed(&cmds));
    let cpus_after: Vec<Option<String>> = rig.job("run").tasks.iter().map(|t| t.cpus.clone()).collect();
    assert_eq!(cpus_after, cpus_before, "the same PUs as before the restart");
    rig.register("n02");
    let cmds = rig.step();
    assert!(placed(&cmds).is_empty(), "{:?}", placed(&cmds));
    // Ends sent while the planner was down arrive now: `run` completes, `wait` goes.
    end(&mut rig, "run", run, "worker-0", TaskOutcome::Exited, Some(0));
    end(&mut rig, "run", run, "worker-1", TaskOutcome::Exited, Some(0));
    let cmds = rig.step();
    assert_eq!(rig.job("run").status, JobStatus::Completed);
    let p = placed(&cmds);
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(p.iter().all(|p| p.starts_with("wait/")), "{p:?}");
}

#[test]
fn unknown_tasks_are_killed_and_tasks_no_longer_listed_are_lost() {
    let (old, run, _) = busy_rig();
    let (mut rig, _) = restarted(&old);
    rig.register("n01");
    rig.register("n02");
    rig.tick();
    let node_of_0 = rig.job("run").tasks[0].node.clone().unwrap();
    // Each heartbeat: the node of worker-0 lists it and a task the planner never had;
    // the other node lists nothing (its state directory was wiped).
    let mut orphan_kills = 0;
    for _ in 0..15 {
        rig.p.push(Event::TasksOnNode {
            node: node_of_0.clone(),
            tasks: vec![
                TaskOnNode {
                    job: "run".into(),
                    job_id: run.into(),
                    task: "worker-0".into(),
                    index: 0,
                    pid: 100,
                    cpu_cores: 1.0,
                    rss_bytes: 1,
                },
                TaskOnNode {
                    job: "ghost".into(),
                    job_id: 99.into(),
                    task: "t-0".into(),
                    index: 0,
                    pid: 7,
                    cpu_cores: 1.0,
                    rss_bytes: 1,
                },
            ],
        });
        let cmds = rig.step();
        orphan_kills += cmds
            .iter()
            .filter(|c| matches!(c, Command::Kill { job, why: KillReason::Orphan, .. } if &**job == "ghost"))
            .count();
    }
    assert_eq!(orphan_kills, 15, "killed every time it is listed");
    let r = rig.job("run");
    assert_eq!(r.tasks[1].state, Some(TaskStatus::Lost), "{r:?}");
    assert!(
        r.tasks[1].reason.as_deref().unwrap_or("").contains("has not listed it"),
        "{r:?}"
    );
    assert_eq!(
        r.tasks[0].state,
        Some(TaskStatus::Running),
        "killed, its end not reported yet"
    );
    assert_eq!(r.status, JobStatus::Failed);
}

#[test]
fn a_node_that_never_comes_back_loses_its_tasks_and_a_requeued_job_runs_again() {
    let mut old = new_rig();
    old.register("n01");
    old.register("n02");
    old.tick();
    let mut spec = JobBuilder::gang("again", 1, "cpu=2").build();
    spec.run.requeue = true;
    let id = old.submit_as(spec, "alice");
    old.step();
    old.start_all("again", id);
    old.step();
    let first = old.job("again").tasks[0].node.clone().unwrap();
    let other = if first == "n01" { "n02" } else { "n01" };
    let (mut rig, _) = restarted(&old);
    rig.register(other);
    rig.tick();
    let mut placed_again = Vec::new();
    // Lost once its node has stopped it (3 s of silence and nodeLostAfter, 10 s, from the
    // start), and the fence margin (5 s) later.
    for _ in 0..22 {
        placed_again.extend(placed(&rig.step()));
    }
    assert_eq!(placed_again, vec![format!("again/worker-0@{other}")]);
    assert_eq!(rig.job("again").status, JobStatus::Placed);
}

#[test]
fn a_task_whose_node_came_back_with_other_hardware_is_lost() {
    let (old, _, _) = busy_rig();
    let (mut rig, _) = restarted(&old);
    // Both nodes come back with a single NUMA node of 2 PUs.
    for n in &mut rig.nodes {
        let small = ClusterBuilder::flat(1)
            .hardware(MachineBuilder::new(1, 1, 2, 1).build())
            .build()
            .nodes
            .remove(0);
        n.hardware = small.hardware;
        n.resources = small.resources;
    }
    rig.register("n01");
    rig.register("n02");
    rig.step();
    let r = rig.job("run");
    assert!(r.tasks.iter().all(|t| t.state == Some(TaskStatus::Lost)), "{r:?}");
    assert!(
        r.tasks[0].reason.as_deref().unwrap_or("").contains("hardware changed"),
        "{r:?}"
    );
    assert_eq!(r.status, JobStatus::Failed);
}

#[test]
fn a_job_stored_at_submit_comes_back_pending_and_is_placed() {
    let spec = JobBuilder::gang("early", 2, "cpu=2").build();
    let rec = JobRecord::submitted(41, "alice", spec);
    let mut rig = new_rig();
    let warnings = rig
        .p
        .restore(vec![JobRecord::decode(&rec.encode().unwrap()).unwrap()], 1, rig.now);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(rig.p.next_job_id(), 42);
    rig.register("n01");
    rig.register("n02");
    let cmds = rig.step();
    assert_eq!(placed(&cmds).len(), 2, "{:?}", placed(&cmds));
    let r = rig.job("early");
    assert_eq!((r.id, r.owner.as_deref()), (41, Some("alice")));
}

/// A planner that ran `run` (one whole node, started) and finished `done`, restarted
/// with no agent back yet: `run`'s node awaits its agent, the other node (idle when
/// the planner stopped) is named by no record.
fn restarted_with_one_node_busy() -> (Rig, u64, String) {
    let mut old = new_rig();
    old.register("n01");
    old.register("n02");
    old.tick();
    let run = old.submit_as(JobBuilder::gang("run", 1, "cpu=8").build(), "alice");
    old.step();
    old.start_all("run", run);
    old.step();
    let busy = old.job("run").tasks[0].node.clone().unwrap();
    let (rig, warnings) = restarted(&old);
    assert!(warnings.is_empty(), "{warnings:?}");
    (rig, run, busy)
}

fn pending_reason(rig: &Rig, job: &str) -> Reason {
    let j = rig.job(job);
    assert_eq!(j.status, JobStatus::Pending, "{j:?}");
    rig.reason(job).unwrap_or_else(|| panic!("{job} says no reason"))
}

#[test]
fn a_job_waiting_for_agents_after_a_restart_stays_pending_saying_so_and_runs_once_they_are_back() {
    let (mut rig, run, busy) = restarted_with_one_node_busy();
    let idle = if busy == "n01" { "n02" } else { "n01" };
    // Two whole nodes: one runs `run`, the other's agent is not back yet.
    rig.submit_as(JobBuilder::gang("wide", 2, "cpu=8").build(), "alice");
    rig.tick();
    assert_eq!(pending_reason(&rig, "wide"), Reason::AwaitingAgents(1));
    assert_eq!(
        rig.job("wide").reason.as_deref(),
        Some("waiting for 1 agent(s) known from the store to register")
    );
    // The agent the store knew is back; the idle node's is not: the nodes so far could
    // never hold `wide`, yet it is not rejected.
    rig.register(&busy);
    rig.step();
    let reason = pending_reason(&rig, "wide");
    assert!(matches!(&reason, Reason::Rejoining { cannot: Some(_) }), "{reason:?}");
    let cmds = rig.step();
    assert!(!cmds.iter().any(|c| matches!(c, Command::Reject { .. })), "{cmds:?}");
    // The idle node's agent comes: `wide` waits for `run`'s node, then runs.
    rig.register(idle);
    rig.step();
    assert_eq!(pending_reason(&rig, "wide").no_fit(), Some(NoFit::Resource));
    end(&mut rig, "run", run, "worker-0", TaskOutcome::Exited, Some(0));
    let cmds = rig.step();
    assert_eq!(placed(&cmds).len(), 2, "{:?}", placed(&cmds));
    assert_eq!(rig.job("wide").status, JobStatus::Placed);
}

#[test]
fn after_a_restart_with_nothing_running_a_job_waits_for_the_agents_then_runs() {
    // Every job had ended: the store names no node at all.
    let mut old = new_rig();
    old.register_all();
    old.tick();
    let done = old.submit_as(JobBuilder::gang("done", 1, "cpu=1").build(), "alice");
    old.step();
    old.start_all("done", done);
    old.step();
    end(&mut old, "done", done, "worker-0", TaskOutcome::Exited, Some(0));
    old.step();
    let (mut rig, _) = restarted(&old);
    rig.submit_as(JobBuilder::gang("early", 2, "cpu=4").build(), "alice");
    rig.tick();
    let reason = pending_reason(&rig, "early");
    assert!(
        matches!(&reason, Reason::Rejoining { cannot: Some(why) } if matches!(**why, Reason::TooBig { .. })),
        "{reason:?}"
    );
    rig.step();
    rig.register_all();
    let cmds = rig.step();
    assert_eq!(placed(&cmds).len(), 2, "{:?}", placed(&cmds));
}

#[test]
fn a_job_that_can_never_fit_is_still_rejected_once_the_agents_had_their_time() {
    let (mut rig, _, _) = restarted_with_one_node_busy();
    rig.register_all();
    rig.tick();
    rig.submit_as(JobBuilder::gang("huge", 1, "cpu=64").build(), "alice");
    let restarted_at = rig.now;
    rig.step();
    let reason = pending_reason(&rig, "huge");
    assert!(
        matches!(&reason, Reason::Rejoining { cannot: Some(why) } if matches!(**why, Reason::TooBig { .. })),
        "{reason:?}"
    );
    // Rejected once `nodeLostAfter` (10 s) has passed since the start, with nothing else
    // changed meanwhile.
    let cmds = rig.drive_until(20, |r| r.job("huge").status == JobStatus::Rejected);
    let waited = rig.now - restarted_at;
    assert!((10_000..=12_000).contains(&waited), "{waited}");
    assert!(
        cmds.iter()
            .any(|c| matches!(c, Command::Reject { job, .. } if job == "huge")),
        "{cmds:?}"
    );
    let reason = rig.reason("huge");
    assert!(matches!(reason, Some(Reason::TooBig { .. })), "{reason:?}");
    // A planner that never restarted rejects at once, as before.
    let mut fresh = new_rig();
    fresh.register_all();
    fresh.tick();
    fresh.submit_as(JobBuilder::gang("huge", 1, "cpu=64").build(), "alice");
    fresh.step();
    assert_eq!(fresh.job("huge").status, JobStatus::Rejected);
}
