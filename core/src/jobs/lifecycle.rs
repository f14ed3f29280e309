//! The job and task lifecycle: starts, ends and cancels as the agents (or the simulator)
//! report them, each job's verdict, and the kills it sends. A task on a node with an
//! agent link (`health::Heartbeats`) holds its resources until its end is reported, never
//! before; a task elsewhere (the simulator's, cluster-file nodes) stops at once.
//!
//! The first task to fail (non-zero exit, a signal, never ran, lost) decides `failed`:
//! with `onTaskFailure: killJob` (the default) the job turns [`JobPhase::Ending`] and
//! its other tasks are killed; with `continue` they run on. A task's time limit decides
//! `timeout` and kills the others; a cancel decides `cancelled`. An ending job stays
//! live (its name taken, never retired) until no task of it holds resources; then it is
//! finished (or cancelled), or back to pending when a lost node asked for a requeue.
//! A batch job (`launch: batch`) lives as long as its rank 0, which runs its command:
//! when that ends, well or not, the verdict and exit code are its, and the job's other
//! tasks (which hold their nodes for its steps) are killed.
//! Every event here is idempotent: a repeat, a task already ended, another job's id or
//! another node change nothing.

use std::sync::Arc;

use bevy_ecs::prelude::*;
use hyperplan_shared::OnTaskFailure;
use hyperplan_shared::job::LaunchMode;
use hyperplan_shared::job::OnNodeLost;
use hyperplan_shared::report::JobStatus;
use hyperplan_shared::taskend::{TaskEnd, TaskOutcome};

use crate::model::commands::Command;
use crate::model::components::JobId;
use crate::model::components::Requeued;
use crate::model::components::{
    Job, JobPhase, JobQueue, JobState, Node, SubJobState, Task, TaskPhase, TaskState, Verdict,
};
use crate::model::events::TaskOnNode;
use crate::model::health::Heartbeats;
use crate::model::jobstate::StateRecord;
use crate::model::kill::KillReason;
use crate::model::reason::Reason;
use crate::model::strays::Strays;
use crate::model::taskrun::TaskRun;
use crate::model::tick::{Now, Outbox};
use crate::names::{JobNames, NodeNames};

/// SIGTERM to SIGKILL when the core kills a task on its own account (a failed task, the
/// time limit, an orphan); a cancel says its own.
pub const KILL_GRACE_SECS: u64 = 10;

/// The job's status for people: the phase, refined by the verdict and whether a task
/// reported started. A job without a verdict (the simulator's) stays `placed`.
pub fn job_status(st: &JobState) -> JobStatus {
    let decided = |v: Option<Verdict>| match v {
        Some(Verdict::Completed) => JobStatus::Completed,
        Some(Verdict::Failed) => JobStatus::Failed,
        Some(Verdict::Cancelled) => JobStatus::Cancelled,
        Some(Verdict::Timeout) => JobStatus::Timeout,
        Some(Verdict::Preempted) => JobStatus::Preempted,
        None => JobStatus::Placed,
    };
    match st.phase {
        JobPhase::Pending => JobStatus::Pending,
        JobPhase::Rejected => JobStatus::Rejected,
        JobPhase::Cancelled => JobStatus::Cancelled,
        JobPhase::Running if st.task_started => JobStatus::Running,
        JobPhase::Running => JobStatus::Placed,
        // Ending without a verdict: a requeue, pending again once its tasks ended.
        JobPhase::Ending if st.verdict.is_none() && st.requeue.is_some() => JobStatus::Pending,
        JobPhase::Ending | JobPhase::Finished => decided(st.verdict),
    }
}

/// `Event::Cancel`: tasks on agents' nodes are killed and hold their resources until
/// their ends arrive; the others stop now. Tasks not placed never will be. A job already
/// being stopped (preempted, failed, cancelled before) keeps the shorter of its grace and
/// this one; `by_admin`: it is killed at once (grace 0).
pub(crate) fn cancel(world: &mut World, name: &str, grace_secs: u64, by_admin: bool) {
    let Some(&job_e) = world.resource::<JobNames>().0.get(name) else {
        world
            .resource_mut::<Outbox>()
            .0
            .push(Command::Warn(format!("cancel: no job {name}")));
        return;
    };
    let now = world.resource::<Now>().secs();
    let Some(mut st) = world.get_mut::<JobState>(job_e) else {
        return;
    };
    match st.phase {
        JobPhase::Finished | JobPhase::Cancelled => return,
        // A rejected job too: it would be looked at again when nodes join.
        JobPhase::Pending | JobPhase::Rejected => {
            // The nodes held for its preemption go back to everyone.
            st.nomination = None;
            st.phase = JobPhase::Cancelled;
            st.verdict = Some(Verdict::Cancelled);
            st.end_time = Some(now);
            // Why it waited no longer matters: it will never run.
            st.reason = None;
            return;
        }
        JobPhase::Running | JobPhase::Ending => {}
    }
    let grace_secs = match st.kill {
        _ if by_admin && st.phase == JobPhase::Ending => 0,
        Some((_, before)) => before.min(grace_secs),
        None => grace_secs,
    };
    // A verdict already decided (a failed task, the time limit) stands; a requeue does not.
    if st.verdict.is_none() {
        st.verdict = Some(Verdict::Cancelled);
        st.reason = None;
    }
    st.requeue = None;
    st.nomination = None;
    st.phase = JobPhase::Ending;
    st.kill = Some((KillReason::Cancel, grace_secs));
    stop_tasks(world, job_e, KillReason::Cancel, grace_secs);
    settle(world, job_e);
}

/// Preempts running job `job_e` for job `by`: its tasks get the job's `preemptSignal`
/// (SIGTERM by default) and `grace_secs` to end, then SIGKILL. It goes back to pending
/// once they ended when it asks `requeue` (keeping its submit time, so its priority and
/// age), or ends `preempted`. `why` is the reason it shows. A job that is not running
/// (already ending, or pending) is left as it is.
pub(crate) fn preempt(world: &mut World, job_e: Entity, by: &str, why: Reason, grace_secs: u64) {
    let requeue = world.get::<Job>(job_e).is_some_and(|j| j.spec.run.requeue);
    let Some(mut st) = world.get_mut::<JobState>(job_e) else {
        return;
    };
    if st.phase != JobPhase::Running || st.verdict.is_some() {
        return;
    }
    st.preempted_by = Some(by.to_string());
    if requeue {
        let why = Reason::Requeued(Box::new(why));
        st.reason = Some(why.clone());
        st.requeue = Some(why);
    } else {
        st.verdict = Some(Verdict::Preempted);
        st.reason = Some(why);
    }
    st.phase = JobPhase::Ending;
    st.kill = Some((KillReason::Preempted, grace_secs));
    stop_tasks(world, job_e, KillReason::Preempted, grace_secs);
    settle(world, job_e);
}

/// `Event::TaskFinished`, the simulator's end of a task: exited 0 now, free at once.
pub(crate) fn task_finished(world: &mut World, job: &str, index: u32, task: &str) {
    let Some(&job_e) = world.resource::<JobNames>().0.get(job) else {
        return;
    };
    let Some(task_e) = world.get::<Job>(job_e).and_then(|j| find_task(world, j, index, task)) else {
        return;
    };
    if let Some(mut ts) = world.get_mut::<TaskState>(task_e)
        && ts.phase == TaskPhase::Running
    {
        ts.phase = TaskPhase::Finished;
    }
    settle(world, job_e);
}

/// `Event::TaskStarted`: its pid and start time, once.
pub(crate) fn task_started(world: &mut World, node: &str, job: (&str, JobId), task: (u32, &str), pid: u32, at_ms: u64) {
    let Some((job_e, task_e)) = running_task(world, node, job, task) else {
        return;
    };
    let mut run = world.get::<TaskRun>(task_e).cloned().unwrap_or_default();
    if run.start_ms.is_some() {
        return;
    }
    run.start_ms = Some(at_ms);
    run.pid = Some(pid);
    run.seen_ms = Some(world.resource::<Now>().ms);
    world.entity_mut(task_e).insert(run);
    mark_started(world, job_e);
}

/// `Event::TaskEnded`: the task's end from its agent, applied only to the task the core
/// has running on that node for the job of that id.
pub(crate) fn task_ended(world: &mut World, node: &str, job: (&str, JobId), task: (u32, &str), end: TaskEnd) {
    if let Some((job_e, task_e)) = running_task(world, node, job, task) {
        end_task(world, job_e, task_e, end);
    }
}

/// `Event::TasksOnNode`: what a node's agent runs. A task the core does not have running
/// there is an orphan and is killed; one of an ending job is killed again (its kill may
/// have been lost); the others' use is kept.
pub(crate) fn tasks_on_node(world: &mut World, node: &str, tasks: Vec<TaskOnNode>) {
    let Some(&node_e) = world.resource::<NodeNames>().0.get(node) else {
        return;
    };
    let Some(node_name) = world.get::<Node>(node_e).map(|n| n.name.clone()) else {
        return;
    };
    let now = world.resource::<Now>().ms;
    if let Some(mut h) = world.get_mut::<Heartbeats>(node_e) {
        h.bypass_change_detection().listed_ms = Some(now);
    }
    let mut strays: Option<Strays> = None;
    for t in tasks {
        let Some((job_e, task_e)) = running_task(world, node, (&t.job, t.job_id), (t.index, &t.task)) else {
            let s = strays.get_or_insert_with(|| Strays {
                count: 0,
                first: format!("{}.{}/{}", t.job, t.job_id, t.task),
            });
            s.count = s.count.saturating_add(1);
            world.resource_mut::<Outbox>().0.push(Command::Kill {
                node: node_name.clone(),
                job: Arc::from(t.job.as_str()),
                job_id: t.job_id,
                task: Arc::from(t.task.as_str()),
                index: t.index,
                grace_secs: KILL_GRACE_SECS,
                why: KillReason::Orphan,
                signal: None,
            });
            continue;
        };
        // Pid 0: its agent is still starting it. Such a task is its agent's (see
        // `TaskRun::accepted`) but has not started: no pid and no start to show.
        let pid = (t.pid != 0).then_some(t.pid);
        // Samples and the time it was seen are not worth a change (the persist system would
        // look at the job every heartbeat); a pid first learnt here is.
        match world.get_mut::<TaskRun>(task_e) {
            Some(mut run) if run.pid.is_some() || pid.is_none() => {
                let run = run.bypass_change_detection();
                run.cpu_cores = Some(t.cpu_cores);
                run.rss_bytes = Some(t.rss_bytes);
                run.seen_ms = Some(now);
            }
            found => {
                let mut run = found.map(|r| r.clone()).unwrap_or_default();
                run.pid = pid;
                run.cpu_cores = Some(t.cpu_cores);
                run.rss_bytes = Some(t.rss_bytes);
                run.seen_ms = Some(now);
                world.entity_mut(task_e).insert(run);
            }
        }
        if world.get::<TaskRun>(task_e).is_some_and(TaskRun::started) {
            mark_started(world, job_e);
        }
        let ending = world
            .get::<JobState>(job_e)
            .filter(|st| st.phase == JobPhase::Ending)
            .and_then(|st| st.kill);
        if let Some((why, grace_secs)) = ending {
            kill(world, job_e, task_e, node_name.clone(), why, grace_secs);
        }
    }
    mark_strays(world, node_e, &node_name, strays);
}

/// Keeps node `e`'s [`Strays`] as its agent's list says: its resources stay closed to new
/// tasks while a task the planner no longer counts runs there (said once in the log).
fn mark_strays(world: &mut World, e: Entity, node: &str, now: Option<Strays>) {
    let before = world.get::<Strays>(e).cloned();
    match (before, now) {
        (None, None) => {}
        (Some(_), None) => {
            world.entity_mut(e).remove::<Strays>();
            let line =
                format!("node {node}: the tasks the planner no longer counted there have ended; it takes tasks again");
            world.resource_mut::<Outbox>().0.push(Command::Info(line));
        }
        (before, Some(now)) => {
            if before.is_none() {
                let line = format!(
                    "node {node}: {} task{} the planner no longer counts still run{} there ({}{}); killed, and the node takes no new task until they have ended",
                    now.count,
                    if now.count == 1 { "" } else { "s" },
                    if now.count == 1 { "s" } else { "" },
                    now.first,
                    if now.count > 1 { ", …" } else { "" },
                );
                world.resource_mut::<Outbox>().0.push(Command::Warn(line));
            }
            if before.as_ref() != Some(&now) {
                world.entity_mut(e).insert(now);
            }
        }
    }
}

/// Ends a running task (reported, or lost with its node): it frees its resources, and
/// its job's verdict and phase follow.
pub(crate) fn end_task(world: &mut World, job_e: Entity, task_e: Entity, end: TaskEnd) {
    if end.outcome == TaskOutcome::Lost && replaceable(world, job_e, task_e) {
        replace(world, job_e, task_e, end);
        return;
    }
    let rank = match world.get_mut::<TaskState>(task_e) {
        Some(mut ts) => {
            ts.phase = TaskPhase::Finished;
            ts.rank
        }
        None => return,
    };
    let name = world
        .get::<Task>(task_e)
        .map(|t| t.name.clone())
        .unwrap_or_else(|| Arc::from(""));
    let mut run = world.get::<TaskRun>(task_e).cloned().unwrap_or_default();
    run.start_ms = run.start_ms.or(end.start_time_ms);
    run.pid = run.pid.or(end.pid);
    run.cpu_cores = None;
    run.rss_bytes = None;
    let started = run.started();
    let (policy, requeue, batch) = world
        .get::<Job>(job_e)
        .map(|j| {
            let batch = j.spec.run.launch == LaunchMode::Batch;
            // `replace` comes here only when it cannot (see `replaceable`): it falls back
            // to a requeue with `requeue: true`.
            let requeue = match j.spec.run.node_lost() {
                OnNodeLost::Requeue => true,
                OnNodeLost::Replace => j.spec.run.requeue,
                OnNodeLost::Fail => false,
            };
            (j.spec.run.on_task_failure, requeue, batch)
        })
        .unwrap_or_default();
    let Some(mut st) = world.get_mut::<JobState>(job_e) else {
        return;
    };
    st.reported = true;
    if started && !st.task_started {
        st.task_started = true;
    }
    // A batch job's holders, killed once its command ended, change nothing.
    let decided = batch && st.verdict.is_some();
    if !end.succeeded() && !decided {
        let code = end.shell_code();
        if st.first_failure.is_none_or(|(at, _)| end.end_time_ms < at) {
            st.first_failure = Some((end.end_time_ms, code));
        }
    }
    // Only the first end that goes wrong while the job runs decides; the ends of the
    // tasks killed after it (or during a cancel or a requeue) change nothing.
    let mut stop = None;
    if !end.succeeded() && st.phase == JobPhase::Running && st.verdict.is_none() {
        let what = describe(&end);
        match end.outcome {
            TaskOutcome::Timeout => {
                st.verdict = Some(Verdict::Timeout);
                st.reason = Some(Reason::TaskEnded {
                    task: name.to_string(),
                    how: what,
                });
                stop = Some(KillReason::Timeout);
            }
            TaskOutcome::Lost if requeue => {
                let why = end.reason.clone().unwrap_or_else(|| "its node was lost".into());
                let why = Reason::Requeued(Box::new(Reason::TaskLost {
                    task: name.to_string(),
                    why,
                }));
                st.reason = Some(why.clone());
                st.requeue = Some(why);
                stop = Some(KillReason::TaskFailed);
            }
            _ => {
                st.verdict = Some(Verdict::Failed);
                st.reason = Some(Reason::TaskEnded {
                    task: name.to_string(),
                    how: what,
                });
                if policy == OnTaskFailure::KillJob {
                    stop = Some(KillReason::TaskFailed);
                }
            }
        }
        if let Some(why) = stop {
            st.phase = JobPhase::Ending;
            st.kill = Some((why, KILL_GRACE_SECS));
        }
    } else if batch && rank == Some(0) && st.phase == JobPhase::Running && st.verdict.is_none() {
        // The batch command ended well: the job has, and its holders go.
        st.verdict = Some(Verdict::Completed);
        st.phase = JobPhase::Ending;
        st.kill = Some((KillReason::BatchEnded, KILL_GRACE_SECS));
        stop = Some(KillReason::BatchEnded);
    }
    run.end = Some(end);
    world.entity_mut(task_e).insert(run);
    if let Some(why) = stop {
        stop_tasks(world, job_e, why, KILL_GRACE_SECS);
    }
    settle(world, job_e);
}

/// Whether a task lost with its node starts again elsewhere (`onNodeLost: replace`): its
/// job runs, nothing decided its end, and it is not a batch job's rank 0 (whose command
/// would run again from its start).
fn replaceable(world: &World, job_e: Entity, task_e: Entity) -> bool {
    let (Some(job), Some(st), Some(ts)) = (
        world.get::<Job>(job_e),
        world.get::<JobState>(job_e),
        world.get::<TaskState>(task_e),
    ) else {
        return false;
    };
    job.spec.run.node_lost() == OnNodeLost::Replace
        && st.phase == JobPhase::Running
        && st.verdict.is_none()
        && ts.is_running()
        && !(job.spec.run.launch == LaunchMode::Batch && ts.rank == Some(0))
}

/// A task lost with its node waits to start again, keeping its rank: it holds nothing
/// now, the allocator places it inside the job's HyperNode in this tick, and
/// `jobs::replace` settles what happened (see there). The job runs on; its restart
/// count goes up once per round of losses.
fn replace(world: &mut World, job_e: Entity, task_e: Entity, end: TaskEnd) {
    let (index, name) = match world.get::<Task>(task_e) {
        Some(t) => (t.index, t.name.clone()),
        None => return,
    };
    let rank = match world.get_mut::<TaskState>(task_e) {
        Some(mut ts) => {
            let rank = ts.rank;
            *ts = TaskState {
                rank,
                ..TaskState::pending()
            };
            rank
        }
        None => return,
    };
    world.entity_mut(task_e).remove::<TaskRun>();
    let why = end.reason.unwrap_or_else(|| "its node was lost".into());
    let job_name = world.get::<Job>(job_e).map(|j| j.spec.name.clone()).unwrap_or_default();
    if let Some(mut st) = world.get_mut::<JobState>(job_e) {
        st.reported = true;
        if st.replacing.is_empty() {
            st.restarts += 1;
        }
        if !st.replacing.contains(&index) {
            st.replacing.push(index);
            st.replacing.sort_unstable();
        }
    }
    world
        .resource_mut::<crate::model::tick::Replacements>()
        .jobs
        .insert(job_e);
    world.resource_mut::<Outbox>().0.push(Command::Info(format!(
        "job {job_name}: task {name} (rank {}) lost ({why}); starting it again inside the job's HyperNode",
        rank.unwrap_or(0)
    )));
}

/// What ended the task, for the job's reason: `exited with code 3`.
fn describe(end: &TaskEnd) -> String {
    let why = end.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default();
    match end.outcome {
        TaskOutcome::Exited => format!("exited with code {}", end.exit_code.unwrap_or(1)),
        TaskOutcome::Signaled => match end.signal {
            Some(s) => format!(
                "was killed by signal {s}{}",
                if end.oom_killed { " (out of memory)" } else { "" }
            ),
            None => "was killed by a signal".into(),
        },
        TaskOutcome::Timeout => "reached the job's time limit".into(),
        TaskOutcome::Cancelled => "was killed".into(),
        // It had a pid: it ran, and what ended it is not known (its shepherd was killed,
        // or could not write its record).
        TaskOutcome::Failed if end.start_time_ms.is_some() => format!("ran, then ended without an exit status{why}"),
        TaskOutcome::Failed => format!("never ran{why}"),
        TaskOutcome::Lost => format!("was lost{why}"),
    }
}

/// Stops every running task of the job: a kill to those on agents' nodes (they hold
/// their resources until their ends arrive), at once for the others.
pub(crate) fn stop_tasks(world: &mut World, job_e: Entity, why: KillReason, grace_secs: u64) {
    let tasks = world.get::<Job>(job_e).map(|j| j.tasks.clone()).unwrap_or_default();
    for t in tasks {
        let Some(node) = world
            .get::<TaskState>(t)
            .filter(|ts| ts.is_running())
            .and_then(|ts| ts.node)
        else {
            continue;
        };
        if world.get::<Heartbeats>(node).is_some() {
            if let Some(name) = world.get::<Node>(node).map(|n| n.name.clone()) {
                kill(world, job_e, t, name, why, grace_secs);
            }
        } else if let Some(mut ts) = world.get_mut::<TaskState>(t) {
            ts.phase = TaskPhase::Finished;
        }
    }
}

pub(crate) fn kill(world: &mut World, job_e: Entity, task_e: Entity, node: Arc<str>, why: KillReason, grace_secs: u64) {
    let (Some(job), Some(task)) = (world.get::<Job>(job_e), world.get::<Task>(task_e)) else {
        return;
    };
    let cmd = Command::Kill {
        node,
        job: Arc::from(job.spec.name.as_str()),
        job_id: world.get::<JobId>(job_e).copied().unwrap_or_default(),
        task: task.name.clone(),
        index: task.index,
        grace_secs,
        why,
        signal: (why == KillReason::Preempted)
            .then(|| job.spec.run.preempt_signal)
            .flatten(),
    };
    world.resource_mut::<Outbox>().0.push(cmd);
}

/// Ends a placed job once none of its tasks holds resources: finished (or cancelled)
/// with its verdict and exit code, or pending again for a requeue. Tasks never placed
/// beyond the gang minimum are dropped with it.
pub(crate) fn settle(world: &mut World, job_e: Entity) {
    let Some(job) = world.get::<Job>(job_e) else { return };
    if !world
        .get::<JobState>(job_e)
        .is_some_and(|st| matches!(st.phase, JobPhase::Running | JobPhase::Ending))
    {
        return;
    }
    let holding = job
        .tasks
        .iter()
        .any(|&t| world.get::<TaskState>(t).is_some_and(TaskState::is_running));
    if holding {
        return;
    }
    let now = world.resource::<Now>().secs();
    let Some(mut st) = world.get_mut::<JobState>(job_e) else {
        return;
    };
    if let Some(why) = st.requeue.take() {
        requeue(world, job_e, why);
        return;
    }
    if st.reported && st.verdict.is_none() {
        st.verdict = Some(Verdict::Completed);
    }
    st.phase = match st.verdict {
        Some(Verdict::Cancelled) => JobPhase::Cancelled,
        _ => JobPhase::Finished,
    };
    st.end_time = Some(now);
    st.kill = None;
    if st.reported {
        st.exit_code = Some(st.first_failure.map_or(0, |(_, code)| code));
    }
    // How long it ran, for its owner's runtime estimates (`[scheduler] estimates`).
    let ran = st.start_time.map(|s| now.saturating_sub(s));
    if let (Some(secs), Some(user)) = (ran, world.get::<JobQueue>(job_e).map(|q| q.user)) {
        world
            .resource_mut::<crate::model::runtimes::RuntimeHistory>()
            .record(user, secs);
    }
}

/// Back to pending, as if just submitted: every task unplaced with no run, ranks and
/// AllocatedHyperNodes cleared; the allocator looks at it again (see [`Requeued`]).
fn requeue(world: &mut World, job_e: Entity, why: Reason) {
    let Some(job) = world.get::<Job>(job_e) else { return };
    let (tasks, sub_jobs) = (job.tasks.clone(), job.sub_jobs.clone());
    for t in tasks {
        world.entity_mut(t).insert(TaskState::pending()).remove::<TaskRun>();
    }
    for sj in sub_jobs {
        if let Some(mut s) = world.get_mut::<SubJobState>(sj) {
            s.allocated_hyper_node = None;
        }
    }
    if let Some(mut st) = world.get_mut::<JobState>(job_e) {
        *st = JobState {
            checked_generation: st.checked_generation,
            ..JobState::from_stored(StateRecord {
                reason: Some(why),
                preempted_by: st.preempted_by.take(),
                restarts: st.restarts,
                requeues: st.requeues.saturating_add(1),
                ..StateRecord::new()
            })
        };
    }
    let times = world.get::<Requeued>(job_e).map_or(1, |r| r.0 + 1);
    world.entity_mut(job_e).insert(Requeued(times));
}

/// Some task of the job reported started.
fn mark_started(world: &mut World, job_e: Entity) {
    if let Some(mut st) = world.get_mut::<JobState>(job_e)
        && !st.task_started
    {
        st.task_started = true;
    }
}

/// The job (by name and id) and its task (by its place in the job, its name checked),
/// when the core has that task running on `node`.
fn running_task(world: &World, node: &str, job: (&str, JobId), task: (u32, &str)) -> Option<(Entity, Entity)> {
    let (job, job_id) = job;
    let &job_e = world.resource::<JobNames>().0.get(job)?;
    if world.get::<JobId>(job_e).copied() != Some(job_id) {
        return None;
    }
    let task_e = find_task(world, world.get::<Job>(job_e)?, task.0, task.1)?;
    let &node_e = world.resource::<NodeNames>().0.get(node)?;
    let ts = world.get::<TaskState>(task_e)?;
    (ts.is_running() && ts.node == Some(node_e)).then_some((job_e, task_e))
}

/// The job's task at `index` (spec order, then replica), if it is called `name`: a
/// report that names another task there (a stale or forged one) finds nothing.
pub(crate) fn find_task(world: &World, job: &Job, index: u32, name: &str) -> Option<Entity> {
    let e = *job.tasks.get(index as usize)?;
    world.get::<Task>(e).is_some_and(|t| *t.name == *name).then_some(e)
}

/// Ends a running task as lost, now, saying why (its pid and start as reported).
pub(crate) fn lose(world: &mut World, job: Entity, task: Entity, reason: String) {
    let now = world.resource::<Now>().ms;
    let run = world.get::<TaskRun>(task);
    let end = TaskEnd {
        outcome: TaskOutcome::Lost,
        pid: run.and_then(|r| r.pid),
        start_time_ms: run.and_then(|r| r.start_ms),
        end_time_ms: now,
        reason: Some(reason),
        ..TaskEnd::default()
    };
    end_task(world, job, task, end);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(phase: JobPhase, verdict: Option<Verdict>, task_started: bool) -> JobState {
        JobState::from_stored(StateRecord {
            phase,
            verdict,
            task_started,
            ..StateRecord::new()
        })
    }

    #[test]
    fn job_statuses_follow_phase_verdict_and_starts() {
        use JobPhase as P;
        use JobStatus as S;
        use Verdict as V;
        let cases = [
            (st(P::Pending, None, false), S::Pending),
            (st(P::Rejected, None, false), S::Rejected),
            (st(P::Running, None, false), S::Placed),
            (st(P::Running, None, true), S::Running),
            // `continue`: failed is decided, but it runs on.
            (st(P::Running, Some(V::Failed), true), S::Running),
            (st(P::Ending, Some(V::Failed), true), S::Failed),
            (st(P::Ending, Some(V::Cancelled), true), S::Cancelled),
            (st(P::Ending, Some(V::Timeout), true), S::Timeout),
            (st(P::Finished, Some(V::Completed), true), S::Completed),
            (st(P::Finished, Some(V::Failed), true), S::Failed),
            (st(P::Finished, Some(V::Timeout), true), S::Timeout),
            // The simulator's jobs: finished without reports, still `placed`.
            (st(P::Finished, None, false), S::Placed),
            (st(P::Cancelled, Some(V::Cancelled), false), S::Cancelled),
            (st(P::Cancelled, None, false), S::Cancelled),
        ];
        for (state, want) in cases {
            assert_eq!(job_status(&state), want, "{:?} {:?}", state.phase, state.verdict);
        }
        let mut requeued = st(P::Ending, None, true);
        requeued.requeue = Some(Reason::Text("requeued".into()));
        assert_eq!(job_status(&requeued), S::Pending);
    }
}
