//! Scenario tests for the job and task lifecycle (issue 13): what agents report of their
//! tasks (starts, ends, what they run), verdicts, kills, cancels, orphans and lost nodes.
//! The nodes have agent links (their tasks hold resources until their ends are
//! reported); every tick is followed by the invariants check.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hyperplan_core::sim::SIM_OWNER;
use std::time::Duration;

use hyperplan_core::config::HealthConfig;
use hyperplan_core::model::events::TaskOnNode;
use hyperplan_core::model::jobstate::{StepEnd, StepRecord};
use hyperplan_core::model::kill::KillReason;
use hyperplan_core::model::reason::Reason;
use hyperplan_core::model::record::JobRecord;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, Rig};
use hyperplan_core::{Command, Event, Planner, PlannerConfig};
use hyperplan_shared::OnTaskFailure;
use hyperplan_shared::report::{JobReport, JobStatus, TaskStatus};
use hyperplan_shared::taskend::{TaskEnd, TaskOutcome};

/// A daemon-like planner: `nodes` linked nodes `n01..` (cpu=8 each) that heartbeat
/// every second unless silenced; time in milliseconds (see `testing::Rig`).
fn rig(nodes: u32) -> Rig {
    let config = PlannerConfig {
        health: HealthConfig {
            node_lost_after: Duration::from_secs(10),
            ..HealthConfig::default()
        },
        ..PlannerConfig::default()
    };
    let cluster = ClusterBuilder::flat(nodes).node_resources("cpu=8").build();
    let mut rig = Rig::new(config, cluster.nodes);
    rig.register_all();
    rig.tick();
    rig
}

fn exited(code: i32) -> TaskEnd {
    TaskEnd {
        outcome: TaskOutcome::Exited,
        exit_code: Some(code),
        cpu_seconds: 1.5,
        max_rss_bytes: 1 << 20,
        ..TaskEnd::default()
    }
}

fn signaled(outcome: TaskOutcome, signal: i32) -> TaskEnd {
    TaskEnd {
        outcome,
        signal: Some(signal),
        ..TaskEnd::default()
    }
}

/// (node, task, why, grace) of every `Kill`.
fn kills(cmds: &[Command]) -> Vec<(String, String, KillReason, u64)> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Kill {
                node,
                task,
                why,
                grace_secs,
                ..
            } => Some((node.to_string(), task.to_string(), *why, *grace_secs)),
            _ => None,
        })
        .collect()
}

/// The jobs of the `Place` commands.
fn placed_jobs(cmds: &[Command]) -> Vec<String> {
    let mut v: Vec<String> = cmds
        .iter()
        .filter_map(|c| match c {
            Command::Place(p) => Some(p.job().to_string()),
            _ => None,
        })
        .collect();
    v.dedup();
    v
}

fn task_state(r: &JobReport, task: &str) -> Option<TaskStatus> {
    r.tasks.iter().find(|t| t.name == task).unwrap().state
}

/// Two nodes, `a` (2 tasks, one per node) placed and started, `b` (the same size)
/// waiting for the room.
fn two_jobs(policy: OnTaskFailure) -> (Rig, u64) {
    let mut rig = rig(2);
    let mut a = JobBuilder::gang("a", 2, "cpu=8").build();
    a.run.on_task_failure = policy;
    let id = rig.submit_as(a, SIM_OWNER);
    rig.submit_as(JobBuilder::gang("b", 2, "cpu=8").priority(-1).build(), SIM_OWNER);
    let cmds = rig.step();
    assert_eq!(placed_jobs(&cmds), ["a"]);
    let r = rig.job("a");
    assert_eq!(r.status, JobStatus::Placed, "no task reported started yet");
    assert_eq!(task_state(&r, "worker-0"), Some(TaskStatus::Starting));
    rig.start_all("a", id);
    rig.step();
    let r = rig.job("a");
    assert_eq!(r.status, JobStatus::Running);
    assert_eq!(task_state(&r, "worker-1"), Some(TaskStatus::Running));
    assert_eq!(r.tasks[1].pid, Some(101));
    assert_eq!(rig.job("b").status, JobStatus::Pending);
    (rig, id)
}

#[test]
fn exit_3_fails_the_job_kills_the_others_and_holds_their_room_until_they_end() {
    let (mut rig, id) = two_jobs(OnTaskFailure::KillJob);
    rig.ended("a", id, "worker-0", exited(3));
    let other = rig.node_of("a", "worker-1");
    let cmds = rig.step();
    assert_eq!(
        kills(&cmds),
        [(other.clone(), "worker-1".into(), KillReason::TaskFailed, 10)]
    );
    let r = rig.job("a");
    assert_eq!(r.status, JobStatus::Failed);
    assert_eq!(r.exit_code, None, "set once the job ended");
    assert_eq!(r.end_time, None);
    assert_eq!(r.reason.as_deref(), Some("task worker-0 exited with code 3"));
    let t0 = &r.tasks[0];
    assert_eq!((t0.state, t0.exit_code), (Some(TaskStatus::Exited), Some(3)));
    assert_eq!((t0.cpu_seconds, t0.max_rss_bytes), (Some(1.5), Some(1 << 20)));
    assert!(t0.end_time.is_some() && t0.start_time.is_some());
    // worker-1 still holds its node: b waits, and the name is still taken.
    assert!(placed_jobs(&cmds).is_empty());
    assert_eq!(rig.job("b").status, JobStatus::Pending);
    assert!(rig.p.check_job_names(["a"]).is_err());
    assert!(placed_jobs(&rig.step()).is_empty());
    // Its end arrives: the job is over, the room free, b placed in that very tick.
    rig.ended("a", id, "worker-1", signaled(TaskOutcome::Cancelled, 15));
    let cmds = rig.step();
    assert_eq!(placed_jobs(&cmds), ["b"]);
    let r = rig.job("a");
    assert_eq!(r.status, JobStatus::Failed);
    assert_eq!(r.exit_code, Some(3), "the first non-zero exit by end time");
    assert!(r.end_time.is_some());
    assert_eq!(task_state(&r, "worker-1"), Some(TaskStatus::Killed));
    assert_eq!(r.tasks[1].signal, Some(15));
    assert!(rig.p.check_job_names(["a"]).is_ok());
}

#[test]
fn with_continue_the_others_run_on_and_the_job_fails_when_all_ended() {
    let (mut rig, id) = two_jobs(OnTaskFailure::Continue);
    rig.ended("a", id, "worker-1", exited(2));
    let cmds = rig.step();
    assert!(kills(&cmds).is_empty(), "{cmds:?}");
    assert_eq!(rig.job("a").status, JobStatus::Running);
    rig.ended("a", id, "worker-0", exited(0));
    let cmds = rig.step();
    let r = rig.job("a");
    assert_eq!((r.status, r.exit_code), (JobStatus::Failed, Some(2)));
    assert_eq!(placed_jobs(&cmds), ["b"]);
}

#[test]
fn all_exiting_0_completes_with_exit_code_0() {
    let (mut rig, id) = two_jobs(OnTaskFailure::KillJob);
    rig.ended("a", id, "worker-0", exited(0));
    rig.step();
    assert_eq!(rig.job("a").status, JobStatus::Running);
    rig.ended("a", id, "worker-1", exited(0));
    let cmds = rig.step();
    let r = rig.job("a");
    assert_eq!((r.status, r.exit_code), (JobStatus::Completed, Some(0)));
    assert_eq!(placed_jobs(&cmds), ["b"]);
}

#[test]
fn a_signal_counts_128_plus_its_number() {
    let (mut rig, id) = two_jobs(OnTaskFailure::KillJob);
    rig.ended("a", id, "worker-1", signaled(TaskOutcome::Signaled, 9));
    let cmds = rig.step();
    assert_eq!(kills(&cmds).len(), 1);
    rig.ended("a", id, "worker-0", signaled(TaskOutcome::Cancelled, 15));
    rig.step();
    let r = rig.job("a");
    assert_eq!((r.status, r.exit_code), (JobStatus::Failed, Some(137)));
    assert_eq!(r.tasks[1].signal, Some(9));
    assert_eq!(r.tasks[1].state, Some(TaskStatus::Exited));
    assert_eq!(r.reason.as_deref(), Some("task worker-1 was killed by signal 9"));
}

#[test]
fn the_time_limit_decides_timeout_and_kills_the_others() {
    let (mut rig, id) = two_jobs(OnTaskFailure::Continue);
    rig.ended("a", id, "worker-0", signaled(TaskOutcome::Timeout, 15));
    let other = rig.node_of("a", "worker-1");
    let cmds = rig.step();
    assert_eq!(kills(&cmds), [(other, "worker-1".into(), KillReason::Timeout, 10)]);
    assert_eq!(rig.job("a").status, JobStatus::Timeout);
    rig.ended("a", id, "worker-1", signaled(TaskOutcome::Timeout, 15));
    rig.step();
    let r = rig.job("a");
    assert_eq!((r.status, r.exit_code), (JobStatus::Timeout, Some(143)));
    assert_eq!(task_state(&r, "worker-0"), Some(TaskStatus::Killed));
}

#[test]
fn cancel_kills_with_its_grace_and_frees_only_on_the_ends() {
    let (mut rig, id) = two_jobs(OnTaskFailure::KillJob);
    rig.p.push(Event::Cancel {
        job: "a".into(),
        grace_secs: 30,
        by_admin: false,
    });
    let (n0, n1) = (rig.node_of("a", "worker-0"), rig.node_of("a", "worker-1"));
    let cmds = rig.step();
    assert_eq!(
        kills(&cmds),
        [
            (n0, "worker-0".into(), KillReason::Cancel, 30),
            (n1, "worker-1".into(), KillReason::Cancel, 30)
        ]
    );
    assert_eq!(rig.job("a").status, JobStatus::Cancelled);
    assert!(placed_jobs(&cmds).is_empty(), "the tasks still hold their nodes");
    // The name is not free yet: a new `a` is refused.
    assert!(rig.p.check_job_names(["a"]).is_err());
    hyperplan_core::sim::submit::submit(&mut rig.p, JobBuilder::gang("a", 1, "cpu=1").build(), SIM_OWNER);
    let cmds = rig.step();
    assert!(
        cmds.iter()
            .any(|c| matches!(c, Command::Warn(w) if w.contains("has not ended")))
    );
    assert_eq!(rig.job("a").id, id);
    rig.ended("a", id, "worker-0", signaled(TaskOutcome::Cancelled, 15));
    assert!(placed_jobs(&rig.step()).is_empty());
    rig.ended("a", id, "worker-1", exited(0));
    let cmds = rig.step();
    assert_eq!(placed_jobs(&cmds), ["b"]);
    let r = rig.job("a");
    assert_eq!((r.status, r.exit_code), (JobStatus::Cancelled, Some(143)));
    assert!(r.end_time.is_some());
    assert!(rig.p.check_job_names(["a"]).is_ok());
}

#[test]
fn a_cancelled_job_never_places_its_remaining_tasks() {
    let mut rig = rig(2);
    // Gang of 2, 4 replicas: 2 placed (cpu=8 each fills a node), 2 wait for room.
    let id = rig.submit_as(JobBuilder::gang("a", 4, "cpu=8").min_available(2).build(), SIM_OWNER);
    rig.step();
    rig.start_all("a", id);
    rig.step();
    rig.p.push(Event::Cancel {
        job: "a".into(),
        grace_secs: 5,
        by_admin: false,
    });
    rig.step();
    let placed: Vec<String> = rig
        .job("a")
        .tasks
        .iter()
        .filter(|t| t.node.is_some())
        .map(|t| t.name.clone())
        .collect();
    for t in &placed {
        rig.ended("a", id, t, signaled(TaskOutcome::Cancelled, 15));
    }
    let cmds = rig.step();
    assert!(placed_jobs(&cmds).is_empty(), "{cmds:?}");
    let r = rig.job("a");
    assert_eq!(r.status, JobStatus::Cancelled);
    assert_eq!(
        r.tasks.iter().filter(|t| t.state == Some(TaskStatus::Pending)).count(),
        2
    );
}

#[test]
fn repeated_and_foreign_reports_change_nothing() {
    let (mut rig, id) = two_jobs(OnTaskFailure::KillJob);
    let start = rig.job("a").tasks[0].start_time;
    // A repeated start: pid and time stay.
    rig.started("a", id, "worker-0", 999);
    rig.step();
    let r = rig.job("a");
    assert_eq!((r.tasks[0].pid, r.tasks[0].start_time), (Some(100), start));
    // Another job's id, another node, a task that does not exist: ignored.
    rig.ended("a", id + 7, "worker-0", exited(3));
    let wrong = rig.node_of("a", "worker-1");
    rig.p.push(Event::TaskEnded {
        node: wrong,
        job: "a".into(),
        job_id: id.into(),
        task: "worker-0".into(),
        index: 0,
        end: exited(4),
    });
    rig.ended("a", id, "worker-0", exited(0));
    rig.p.push(Event::TaskEnded {
        node: "n01".into(),
        job: "a".into(),
        job_id: id.into(),
        task: "worker-9".into(),
        index: 9,
        end: exited(5),
    });
    let cmds = rig.step();
    assert!(kills(&cmds).is_empty(), "{cmds:?}");
    let r = rig.job("a");
    assert_eq!(r.status, JobStatus::Running);
    assert_eq!(r.tasks[0].exit_code, Some(0));
    // The same end again, and then a failing one for the ended task: nothing.
    rig.ended("a", id, "worker-0", exited(0));
    rig.ended("a", id, "worker-0", exited(3));
    let cmds = rig.step();
    assert!(kills(&cmds).is_empty(), "{cmds:?}");
    assert_eq!(rig.job("a").status, JobStatus::Running);
    rig.ended("a", id, "worker-1", exited(0));
    rig.ended("a", id, "worker-1", exited(0));
    rig.step();
    let r = rig.job("a");
    assert_eq!((r.status, r.exit_code), (JobStatus::Completed, Some(0)));
}

/// What an agent lists of `task` (`worker-<i>` of a one-role job: index `i`).
fn on_node(job: &str, id: u64, task: &str) -> TaskOnNode {
    let index = task.rsplit_once('-').and_then(|(_, i)| i.parse().ok()).unwrap_or(0);
    TaskOnNode {
        job: job.into(),
        job_id: id.into(),
        task: task.into(),
        index,
        pid: 4242,
        cpu_cores: 1.25,
        rss_bytes: 3 << 20,
    }
}

#[test]
fn tasks_a_node_runs_that_the_planner_does_not_are_killed_as_orphans() {
    let (mut rig, id) = two_jobs(OnTaskFailure::KillJob);
    let node = rig.node_of("a", "worker-0");
    rig.p.push(Event::TasksOnNode {
        node: node.clone(),
        tasks: vec![
            on_node("a", id, "worker-0"),
            // Runs on the other node, as far as the planner knows.
            on_node("a", id, "worker-1"),
            on_node("a", id + 1, "worker-0"),
            on_node("gone", 77, "worker-0"),
        ],
    });
    let cmds = rig.step();
    assert_eq!(
        kills(&cmds),
        [
            (node.clone(), "worker-1".into(), KillReason::Orphan, 10),
            (node.clone(), "worker-0".into(), KillReason::Orphan, 10),
            (node.clone(), "worker-0".into(), KillReason::Orphan, 10),
        ]
    );
    let ids: Vec<(String, u64)> = cmds
        .iter()
        .filter_map(|c| match c {
            Command::Kill { job, job_id, .. } => Some((job.to_string(), job_id.0)),
            _ => None,
        })
        .collect();
    assert_eq!(ids, [("a".into(), id), ("a".into(), id + 1), ("gone".into(), 77)]);
    let t = &rig.job("a").tasks[0];
    assert_eq!((t.cpu_cores, t.rss_bytes), (Some(1.25), Some(3 << 20)));
    assert_eq!(t.pid, Some(100), "the started pid stays");
    // Once ended, the same listing makes it an orphan too.
    rig.ended("a", id, "worker-0", exited(0));
    rig.step();
    rig.p.push(Event::TasksOnNode {
        node: node.clone(),
        tasks: vec![on_node("a", id, "worker-0")],
    });
    let cmds = rig.step();
    assert_eq!(kills(&cmds), [(node, "worker-0".into(), KillReason::Orphan, 10)]);
}

#[test]
fn an_ending_jobs_task_its_node_still_lists_is_killed_again() {
    let (mut rig, id) = two_jobs(OnTaskFailure::KillJob);
    rig.p.push(Event::Cancel {
        job: "a".into(),
        grace_secs: 20,
        by_admin: false,
    });
    assert_eq!(kills(&rig.step()).len(), 2);
    let node = rig.node_of("a", "worker-1");
    rig.p.push(Event::TasksOnNode {
        node: node.clone(),
        tasks: vec![on_node("a", id, "worker-1")],
    });
    let cmds = rig.step();
    assert_eq!(kills(&cmds), [(node, "worker-1".into(), KillReason::Cancel, 20)]);
}

/// Issue 38: a task that traps SIGTERM must not outlive every later kill. A second cancel
/// shortens the first's grace (never lengthens it), and an admin's ends it now.
#[test]
fn a_later_cancel_shortens_the_grace_and_an_admins_kills_at_once() {
    let (mut rig, _) = two_jobs(OnTaskFailure::KillJob);
    let graces = |cmds: &[Command]| kills(cmds).into_iter().map(|k| k.3).collect::<Vec<_>>();
    for (grace, by_admin, want) in [(300, false, 300), (20, false, 20), (60, false, 20), (60, true, 0)] {
        rig.p.push(Event::Cancel {
            job: "a".into(),
            grace_secs: grace,
            by_admin,
        });
        assert_eq!(graces(&rig.step()), [want, want], "cancel {grace} s, admin {by_admin}");
    }
    // An admin's first cancel of a running job gives the grace asked.
    let (mut rig, _) = two_jobs(OnTaskFailure::KillJob);
    rig.p.push(Event::Cancel {
        job: "a".into(),
        grace_secs: 30,
        by_admin: true,
    });
    assert_eq!(graces(&rig.step()), [30, 30]);
}

/// Issue 38: a node whose agent still runs a task the planner no longer counts (an
/// orphan: lost, drained `--now`, or unknown) offers nothing until the agent lists it no
/// more, so no other job is placed beside its live processes.
#[test]
fn a_node_running_an_orphan_takes_no_new_task_until_it_ended() {
    let mut rig = rig(1);
    let node = "n01".to_string();
    rig.p.push(Event::TasksOnNode {
        node: node.clone(),
        tasks: vec![on_node("gone", 77, "worker-0")],
    });
    let cmds = rig.step();
    assert_eq!(
        kills(&cmds),
        [(node.clone(), "worker-0".into(), KillReason::Orphan, 10)]
    );
    assert!(
        cmds.iter()
            .any(|c| matches!(c, Command::Warn(w) if w.contains("gone.77/worker-0"))),
        "{cmds:?}"
    );
    let n = rig.p.nodes().into_iter().find(|n| n.name == node).unwrap();
    assert_eq!(n.cpus.free, 0, "{n:?}");
    assert!(n.reason.unwrap().contains("takes no new task until 1 task"));
    rig.submit_as(JobBuilder::gang("c", 1, "cpu=8").build(), SIM_OWNER);
    assert!(placed_jobs(&rig.step()).is_empty(), "placed beside a live orphan");
    // Still listed: still closed (and killed again).
    rig.p.push(Event::TasksOnNode {
        node: node.clone(),
        tasks: vec![on_node("gone", 77, "worker-0")],
    });
    let cmds = rig.step();
    assert!(placed_jobs(&cmds).is_empty());
    assert_eq!(kills(&cmds).len(), 1);
    rig.p.push(Event::TasksOnNode {
        node: node.clone(),
        tasks: vec![],
    });
    assert_eq!(placed_jobs(&rig.step()), ["c"]);
    assert!(rig.p.nodes()[0].reason.is_none());
}

/// Issue 38: a job's `MASTER_PORT` is chosen free on rank 0's node (another user bound
/// its default first), kept for the job (a rank replaced later gets the same), and chosen
/// again after a requeue; a job's own `masterPort` is kept as given.
#[test]
fn the_master_port_is_chosen_free_on_rank_0s_node_and_kept() {
    use hyperplan_shared::taskenv::default_master_port;
    let mut rig = rig(1);
    let id = rig.p.next_job_id();
    let taken = default_master_port(id);
    rig.p.push(Event::PortsInUse {
        node: "n01".into(),
        ports: vec![taken + 1, 8080, taken],
    });
    let cmds = rig.step();
    assert!(
        cmds.iter().any(|c| matches!(c, Command::Info(l) if l == &format!("node n01: MASTER_PORT range ports bound now: {taken},{}", taken + 1))),
        "{cmds:?}"
    );
    rig.submit_as(JobBuilder::gang("a", 2, "cpu=1").build(), SIM_OWNER);
    let ports = |cmds: &[Command]| -> Vec<u16> {
        cmds.iter()
            .filter_map(|c| match c {
                Command::Place(p) => Some(p.master_port),
                _ => None,
            })
            .collect()
    };
    assert_eq!(ports(&rig.step()), [taken + 2, taken + 2]);
    // Now bound by the job itself: its port stays its own.
    rig.p.push(Event::PortsInUse {
        node: "n01".into(),
        ports: vec![taken, taken + 1, taken + 2],
    });
    rig.step();
    let relaunched = rig.p.unstarted_on("n01");
    assert!(relaunched.iter().all(|p| p.master_port == taken + 2), "{relaunched:?}");
    // A job that names its port gets it.
    let mut b = JobBuilder::gang("b", 1, "cpu=1").build();
    b.run.master_port = Some(taken);
    rig.submit_as(b, SIM_OWNER);
    assert_eq!(ports(&rig.step()), [taken]);
}

#[test]
fn a_node_not_ready_for_longer_than_node_lost_after_loses_its_tasks() {
    let (mut rig, id) = two_jobs(OnTaskFailure::KillJob);
    let lost = rig.node_of("a", "worker-1");
    let other = rig.node_of("a", "worker-0");
    rig.silent.push(lost.clone());
    // NotReady after 3 s of silence, lost 10 s after that.
    let mut ticks = 0;
    let cmds = loop {
        let cmds = rig.step();
        ticks += 1;
        if !kills(&cmds).is_empty() {
            break cmds;
        }
        assert_eq!(rig.job("a").status, JobStatus::Running, "{ticks} ticks");
        assert!(ticks < 20, "never lost");
    };
    assert!((13..=15).contains(&ticks), "{ticks}");
    assert_eq!(kills(&cmds), [(other, "worker-0".into(), KillReason::TaskFailed, 10)]);
    let r = rig.job("a");
    assert_eq!(r.status, JobStatus::Failed);
    let t1 = &r.tasks[1];
    assert_eq!(t1.state, Some(TaskStatus::Lost));
    assert_eq!(
        t1.reason.as_deref(),
        Some(format!("node {lost} was NotReady for more than 10 s").as_str())
    );
    rig.ended("a", id, "worker-0", signaled(TaskOutcome::Cancelled, 15));
    rig.step();
    let r = rig.job("a");
    assert_eq!((r.status, r.exit_code), (JobStatus::Failed, Some(1)));
    // The node comes back, still running the lost task: it is killed as an orphan.
    rig.silent.clear();
    rig.p.push(Event::LinkUp {
        node: lost.clone(),
        link: 2,
        at_ms: rig.now,
    });
    rig.p.push(Event::TasksOnNode {
        node: lost.clone(),
        tasks: vec![on_node("a", id, "worker-1")],
    });
    let cmds = rig.step();
    assert_eq!(kills(&cmds), [(lost, "worker-1".into(), KillReason::Orphan, 10)]);
}

#[test]
fn requeue_sends_the_job_back_to_pending_once_its_tasks_ended_and_places_it_again() {
    let mut rig = rig(3);
    let mut a = JobBuilder::gang("a", 2, "cpu=8").build();
    a.run.requeue = true;
    let id = rig.submit_as(a, SIM_OWNER);
    rig.step();
    rig.start_all("a", id);
    rig.step();
    let lost = rig.node_of("a", "worker-1");
    let other = rig.node_of("a", "worker-0");
    rig.silent.push(lost.clone());
    let cmds = loop {
        let cmds = rig.step();
        if !kills(&cmds).is_empty() {
            break cmds;
        }
        assert!(rig.now < 30_000, "never lost");
    };
    assert_eq!(
        kills(&cmds),
        [(other.clone(), "worker-0".into(), KillReason::TaskFailed, 10)]
    );
    let r = rig.job("a");
    assert_eq!(r.status, JobStatus::Pending, "requeued, waiting for its tasks to end");
    assert!(
        matches!(rig.reason("a"), Some(Reason::Requeued(why)) if matches!(*why, Reason::TaskLost { .. })),
        "{:?}",
        r.reason
    );
    assert!(rig.p.check_job_names(["a"]).is_err());
    rig.ended("a", id, "worker-0", signaled(TaskOutcome::Cancelled, 15));
    let cmds = rig.step();
    // Placed again in the same tick, on the two Ready nodes, as the same job.
    assert_eq!(placed_jobs(&cmds), ["a"]);
    let r = rig.job("a");
    assert_eq!((r.id, r.status, r.exit_code), (id, JobStatus::Placed, None));
    let mut nodes: Vec<String> = r
        .tasks
        .iter()
        .map(|t| t.node.clone().unwrap_or_else(|| panic!("{r:#?}")))
        .collect();
    nodes.sort();
    assert!(!nodes.contains(&lost), "{nodes:?}");
    assert!(r.tasks.iter().all(|t| t.state == Some(TaskStatus::Starting)));
    assert!(r.tasks.iter().all(|t| t.exit_code.is_none() && t.pid.is_none()));
    // It runs to completion the second time.
    rig.start_all("a", id);
    rig.step();
    rig.ended("a", id, "worker-0", exited(0));
    rig.ended("a", id, "worker-1", exited(0));
    rig.step();
    let r = rig.job("a");
    assert_eq!((r.status, r.exit_code), (JobStatus::Completed, Some(0)));
}

#[test]
fn nodes_without_an_agent_free_at_once_and_say_nothing_new() {
    let mut p = Planner::new(PlannerConfig::default());
    for n in ClusterBuilder::flat(2).node_resources("cpu=8").build().nodes {
        p.push(Event::NodeUp(n));
    }
    hyperplan_core::sim::submit::submit(&mut p, JobBuilder::gang("a", 2, "cpu=8").build(), SIM_OWNER);
    hyperplan_core::sim::submit::submit(
        &mut p,
        JobBuilder::gang("b", 2, "cpu=8").priority(-1).build(),
        SIM_OWNER,
    );
    p.tick(0);
    p.push(Event::Cancel {
        job: "a".into(),
        grace_secs: 0,
        by_admin: false,
    });
    let cmds = p.tick(1);
    assert!(kills(&cmds).is_empty());
    assert_eq!(placed_jobs(&cmds), ["b"]);
    let a = p.job("a").unwrap();
    assert_eq!((a.status, a.exit_code), (JobStatus::Cancelled, None));
    assert!(a.tasks.iter().all(|t| t.state.is_none()));
    // The simulator's end of a task: the job is over, still `placed`.
    p.push(Event::TaskFinished {
        job: "b".into(),
        task: "worker-0".into(),
        index: 0,
    });
    p.push(Event::TaskFinished {
        job: "b".into(),
        task: "worker-1".into(),
        index: 1,
    });
    p.tick(2);
    let b = p.job("b").unwrap();
    assert_eq!((b.status, b.exit_code, b.end_time), (JobStatus::Placed, None, Some(2)));
    assert!(p.check_job_names(["b"]).is_ok());
    assert!(p.violations().is_empty());
}

/// What the daemon sends again when a node's agent registers: the placements of its tasks
/// not known to have started (their `Launch` may have been lost with a link), and only
/// those of jobs still running.
#[test]
fn the_unstarted_tasks_of_a_node_are_there_to_launch_again() {
    let mut rig = rig(2);
    let id = rig.submit_as(JobBuilder::gang("a", 2, "cpu=8").build(), SIM_OWNER);
    rig.step();
    let n0 = rig.node_of("a", "worker-0");
    let again = rig.p.unstarted_on(&n0);
    assert_eq!(again.len(), 1);
    assert_eq!((&*again[0].task, again[0].job_id), ("worker-0", id.into()));
    rig.started("a", id, "worker-0", 7);
    rig.step();
    assert!(rig.p.unstarted_on(&n0).is_empty(), "started: not sent again");
    let n1 = rig.node_of("a", "worker-1");
    assert_eq!(rig.p.unstarted_on(&n1).len(), 1);
    // Once the job is decided (cancelled), nothing is launched any more.
    rig.p.push(Event::Cancel {
        job: "a".into(),
        grace_secs: 10,
        by_admin: false,
    });
    rig.step();
    assert!(rig.p.unstarted_on(&n1).is_empty());
    assert!(rig.p.unstarted_on("no-such-node").is_empty());
}

/// One node, job `a` (one task) placed on it; returns the rig, the job's id and the node.
fn one_task_placed() -> (Rig, u64, String) {
    let mut rig = rig(1);
    let id = rig.submit_as(JobBuilder::gang("a", 1, "cpu=8").build(), SIM_OWNER);
    rig.step();
    let node = rig.node_of("a", "worker-0");
    (rig, id, node)
}

/// Its agent lists `a`'s task with pid 0: its shepherd is still starting it.
fn list_starting(rig: &mut Rig, id: u64, node: &str) {
    rig.p.push(Event::TasksOnNode {
        node: node.to_string(),
        tasks: vec![TaskOnNode {
            pid: 0,
            ..on_node("a", id, "worker-0")
        }],
    });
    rig.step();
}

#[test]
fn a_task_its_agent_lists_while_starting_it_has_no_pid_yet_and_is_not_launched_again() {
    let (mut rig, id, node) = one_task_placed();
    list_starting(&mut rig, id, &node);
    let r = rig.job("a");
    assert_eq!((r.tasks[0].pid, r.status), (None, JobStatus::Placed), "{r:?}");
    assert_eq!(task_state(&r, "worker-0"), Some(TaskStatus::Starting));
    assert!(rig.p.unstarted_on(&node).is_empty(), "its agent has it");
    // Listed again, still starting: the same.
    list_starting(&mut rig, id, &node);
    assert_eq!(rig.job("a").tasks[0].pid, None);
    // Its start: the pid, and the job runs.
    rig.started("a", id, "worker-0", 77);
    rig.step();
    let r = rig.job("a");
    assert_eq!((r.tasks[0].pid, r.status), (Some(77), JobStatus::Running));
    assert_eq!(task_state(&r, "worker-0"), Some(TaskStatus::Running));
}

#[test]
fn a_task_listed_while_starting_that_its_agent_stops_listing_is_lost() {
    let (mut rig, id, node) = one_task_placed();
    list_starting(&mut rig, id, &node);
    // From now on its agent lists nothing: lost after nodeLostAfter (10 s).
    for _ in 0..20 {
        rig.p.push(Event::TasksOnNode {
            node: node.clone(),
            tasks: Vec::new(),
        });
        rig.step();
    }
    let r = rig.job("a");
    assert_eq!(task_state(&r, "worker-0"), Some(TaskStatus::Lost), "{r:?}");
}

/// A batch job of 2 tasks on 2 nodes, started; (rig, id, rank 0's task, the other).
fn batch_job() -> (Rig, u64, String, String) {
    let mut rig = rig(2);
    let mut job = JobBuilder::gang("batch", 2, "cpu=8").build();
    job.run.launch = hyperplan_shared::job::LaunchMode::Batch;
    let id = rig.submit_as(job, SIM_OWNER);
    rig.step();
    rig.start_all("batch", id);
    rig.step();
    let r = rig.job("batch");
    assert_eq!(r.status, JobStatus::Running);
    let by_rank = |rank| r.tasks.iter().find(|t| t.rank == Some(rank)).unwrap().name.clone();
    (rig, id, by_rank(0), by_rank(1))
}

#[test]
fn a_batch_job_ends_with_its_rank_0_and_its_holders_are_killed() {
    let (mut rig, id, rank0, holder) = batch_job();
    rig.ended("batch", id, &rank0, exited(0));
    let cmds = rig.step();
    let node = rig.node_of("batch", &holder);
    assert_eq!(kills(&cmds), [(node, holder.clone(), KillReason::BatchEnded, 10)]);
    assert_eq!(rig.job("batch").status, JobStatus::Completed, "decided by rank 0");
    // The holder's end (killed) changes nothing: completed, exit code 0.
    rig.ended("batch", id, &holder, signaled(TaskOutcome::Cancelled, 15));
    rig.step();
    let r = rig.job("batch");
    assert_eq!((r.status, r.exit_code), (JobStatus::Completed, Some(0)));

    // Rank 0 failing fails the job with its code.
    let (mut rig, id, rank0, holder) = batch_job();
    rig.ended("batch", id, &rank0, exited(5));
    let cmds = rig.step();
    assert_eq!(kills(&cmds).len(), 1);
    rig.ended("batch", id, &holder, signaled(TaskOutcome::Cancelled, 15));
    rig.step();
    let r = rig.job("batch");
    assert_eq!((r.status, r.exit_code), (JobStatus::Failed, Some(5)));

    // A holder that dies first (its node broke) fails the job and stops rank 0.
    let (mut rig, id, rank0, holder) = batch_job();
    rig.ended("batch", id, &holder, signaled(TaskOutcome::Signaled, 9));
    let cmds = rig.step();
    assert_eq!(kills(&cmds)[0].1, rank0);
    assert_eq!(rig.job("batch").status, JobStatus::Failed);
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
}

#[test]
fn steps_are_numbered_per_job_and_kept_across_a_restart() {
    let mut rig = rig(2).persisting();
    let job = JobBuilder::gang("held", 2, "cpu=8").build();
    let id = rig.submit_as(job, SIM_OWNER);
    rig.step();
    rig.start_all("held", id);
    rig.step();
    let (now, argv) = (rig.now / 1000, words(&["true"]));
    assert_eq!(
        rig.p.begin_step("held", id.into(), vec!["n01".into()], &argv, now),
        Some(0)
    );
    assert_eq!(
        rig.p
            .begin_step("held", id.into(), vec!["n01".into(), "n02".into()], &argv, now),
        Some(1)
    );
    assert_eq!(
        rig.p.begin_step("held", (id + 1).into(), vec![], &argv, now),
        None,
        "another id"
    );
    assert_eq!(rig.p.begin_step("nope", id.into(), vec![], &argv, now), None);
    rig.step(); // the record is written
    let (mut again, warnings) = rig.restarted(PlannerConfig::default(), 1_000);
    assert!(warnings.is_empty(), "{warnings:?}");
    again.tick();
    assert_eq!(
        again
            .p
            .begin_step("held", id.into(), vec!["n02".into()], &argv, again.now / 1000),
        Some(2),
        "numbering goes on"
    );
}

/// The steps of job `id` as its last written record has them.
fn stored_steps(rig: &Rig, id: u64) -> (bool, Vec<StepRecord>) {
    let (live, bytes) = &rig.store[&id];
    (*live, JobRecord::decode(bytes).unwrap().state.steps)
}

#[test]
fn a_steps_end_is_recorded_with_its_times_exit_code_and_command() {
    let mut rig = rig(2).persisting();
    let job = JobBuilder::gang("held", 2, "cpu=8").build();
    let id = rig.submit_as(job, SIM_OWNER);
    rig.step();
    rig.start_all("held", id);
    rig.step();
    let began = rig.now / 1000;
    let both = vec!["n01".to_string(), "n02".to_string()];
    let exit3 = words(&["sh", "-c", "exit 3"]);
    assert_eq!(
        rig.p.begin_step("held", id.into(), both.clone(), &exit3, began),
        Some(0)
    );
    let long = words(&["echo", &"é".repeat(200)]);
    assert_eq!(rig.p.begin_step("held", id.into(), both, &long, began), Some(1));
    rig.step();
    let (live, steps) = stored_steps(&rig, id);
    assert!(live);
    assert_eq!(
        (steps[0].start_time, steps[0].end_time, steps[0].exit_code),
        (Some(began), None, None),
        "begun, not ended"
    );
    assert_eq!(steps[0].command.as_deref(), Some("sh -c exit 3"));
    let cut = steps[1].command.as_deref().unwrap();
    assert!(
        cut.len() <= 256 && cut.len() > 250 && cut.starts_with("echo é"),
        "{cut}"
    );

    // Its nodes' ends: one exits 0, one 3, a later one 5: the first failure decides.
    let mut end = StepEnd::default();
    end.node_exited(Some(0), None);
    end.node_exited(Some(3), None);
    end.node_exited(Some(5), None);
    assert_eq!(
        end,
        StepEnd {
            exit_code: Some(3),
            signal: None
        }
    );
    let ended = began + 4;
    assert!(rig.p.end_step("held", id.into(), 0, end, ended));
    let again = StepEnd {
        exit_code: Some(9),
        signal: None,
    };
    assert!(
        !rig.p.end_step("held", id.into(), 0, again, ended + 1),
        "the first end stands"
    );
    assert!(!rig.p.end_step("held", (id + 1).into(), 1, again, ended), "another id");
    assert!(!rig.p.end_step("held", id.into(), 7, again, ended), "no such step");
    assert!(!rig.p.end_step("nope", id.into(), 1, again, ended), "no such job");
    let writes = rig.writes;
    rig.step();
    assert!(rig.writes > writes, "the step's end is written");
    let (_, steps) = stored_steps(&rig, id);
    assert_eq!(
        (
            steps[0].start_time,
            steps[0].end_time,
            steps[0].exit_code,
            steps[0].signal
        ),
        (Some(began), Some(ended), Some(3), None)
    );
    assert_eq!(steps[1].end_time, None, "step 1 still runs");
    let shown = rig.job("held").steps;
    assert_eq!(shown.len(), 2);
    assert_eq!((shown[0].exit_code, shown[0].end_time), (Some(3), Some(ended)));
    assert_eq!(shown[0].command.as_deref(), Some("sh -c exit 3"));

    // The job ends with step 1 still open (its commands killed with it): the session's
    // end, heard after, is recorded in the ended job's record while the world keeps it;
    // no new step begins in an ended job.
    rig.exit_all("held", 0);
    rig.step();
    assert_eq!(rig.job("held").status, JobStatus::Completed);
    let mut killed = StepEnd::default();
    killed.node_exited(None, Some(15));
    killed.node_exited(Some(0), None);
    assert_eq!(
        killed,
        StepEnd {
            exit_code: Some(0),
            signal: Some(15)
        }
    );
    assert!(rig.p.end_step("held", id.into(), 1, killed, rig.now / 1000));
    rig.step();
    let (live, steps) = stored_steps(&rig, id);
    assert!(!live);
    assert_eq!((steps[1].exit_code, steps[1].signal), (Some(0), Some(15)));
    assert!(steps[1].end_time.is_some_and(|t| t >= began));
    assert_eq!(
        rig.p
            .begin_step("held", id.into(), vec!["n01".into()], &exit3, rig.now / 1000),
        None
    );
}

#[test]
fn a_restartable_jobs_task_on_a_lost_node_is_lost_the_fence_margin_later() {
    // One node running a job that fails on a lost node and one started again elsewhere
    // (requeue): the second's task is fenced on its node, so the planner waits for it.
    let mut rig = rig(1);
    let fail = JobBuilder::gang("fail", 1, "cpu=4").build();
    let mut again = JobBuilder::gang("again", 1, "cpu=4").build();
    again.run.requeue = true;
    let (f, a) = (rig.submit_as(fail, SIM_OWNER), rig.submit_as(again, SIM_OWNER));
    rig.step();
    rig.start_all("fail", f);
    rig.start_all("again", a);
    rig.step();
    let node = rig.node_of("again", "worker-0");
    assert_eq!(rig.node_of("fail", "worker-0"), node);
    rig.silent.push(node.clone());
    let silent_at = rig.now;
    let lost_at = |rig: &mut Rig, job: &str| loop {
        rig.step();
        let r = rig.job(job);
        if r.status != JobStatus::Running || r.tasks[0].state == Some(TaskStatus::Lost) {
            break rig.now - silent_at;
        }
        assert!(rig.now - silent_at < 60_000, "{job} never lost");
    };
    // NotReady after 3 s of silence; lost 10 s later, fenced tasks 5 s after that.
    let fail_lost = lost_at(&mut rig, "fail");
    assert_eq!(rig.job("again").status, JobStatus::Running, "fenced: not lost yet");
    let again_lost = lost_at(&mut rig, "again");
    assert!((13_000..=15_000).contains(&fail_lost), "{fail_lost}");
    let margin = hyperplan_core::config::FENCE_MARGIN.as_millis() as u64;
    assert!(
        (fail_lost + margin - 1_000..=fail_lost + margin + 1_000).contains(&again_lost),
        "{fail_lost} {again_lost}"
    );
    assert_eq!(rig.job("again").status, JobStatus::Pending, "requeued");
}

#[test]
fn a_task_that_ran_and_left_no_exit_status_is_not_said_to_have_never_run() {
    let why = "the shepherd (pid 4100) died without a record";
    for (started, says) in [
        (Some(1_000), "ran, then ended without an exit status: "),
        (None, "never ran: "),
    ] {
        let (mut rig, id) = two_jobs(OnTaskFailure::KillJob);
        let end = TaskEnd {
            outcome: TaskOutcome::Failed,
            start_time_ms: started,
            reason: Some(why.into()),
            ..TaskEnd::default()
        };
        rig.ended("a", id, "worker-1", end);
        rig.step();
        let reason = rig.reason("a");
        assert!(
            matches!(&reason, Some(Reason::TaskEnded { task, how }) if task == "worker-1" && how.contains(&format!("{says}{why}"))),
            "{reason:?}"
        );
    }
}
