//! `onNodeLost: replace`, settled. A task lost with its node waits to start again,
//! keeping its rank (`lifecycle`), and the walk tries it in the same tick inside the
//! job's HyperNode, its tier limit holding (`allocate`: a running job's tasks are placed
//! from its AllocatedHyperNode). Right after the walk, this system looks at each such
//! job: every lost task placed again means the job goes on, its other ranks untouched
//! (the driver tells them the new node); one that found no spare node means the job
//! falls back to a requeue (with `requeue: true`) or fails, saying why. Several nodes
//! lost in one tick are replaced together, as one gang.

use bevy_ecs::prelude::*;

use crate::jobs::lifecycle::{KILL_GRACE_SECS, settle as settle_job, stop_tasks};
use crate::model::commands::Command;
use crate::model::components::{Job, JobPhase, JobState, Node, Task, TaskPhase, TaskState, Verdict};
use crate::model::kill::KillReason;
use crate::model::reason::Reason;
use crate::model::tick::{Now, Outbox, Replacements};

/// The system (see the module).
pub fn settle(world: &mut World) {
    if world.resource::<Replacements>().jobs.is_empty() {
        return;
    }
    let _span = tracing::info_span!("replace").entered();
    // While agents known from the store are away the cluster is not whole: their nodes
    // may be the spares. Wait.
    let whole = world
        .get_resource::<crate::model::awaiting::Awaiting>()
        .is_none_or(|a| a.0 == 0);
    let now_ms = world.resource::<Now>().ms;
    let jobs: Vec<Entity> = world.resource::<Replacements>().jobs.iter().copied().collect();
    for e in jobs {
        let Some(job) = world.get::<Job>(e) else {
            world.resource_mut::<Replacements>().jobs.remove(&e);
            continue;
        };
        let (name, requeue, tasks, gang_min) = (
            job.spec.name.clone(),
            job.spec.run.requeue,
            job.tasks.clone(),
            job.gang_min,
        );
        let Some(st) = world.get::<JobState>(e) else { continue };
        let running = st.phase == JobPhase::Running && st.verdict.is_none();
        let state_of = |i: u32| tasks.get(i as usize).and_then(|&t| world.get::<TaskState>(t));
        let waiting: Vec<u32> = st
            .replacing
            .iter()
            .copied()
            .filter(|&i| state_of(i).is_some_and(|ts| ts.phase == TaskPhase::Pending))
            .collect();
        let placed: Vec<String> = st
            .replacing
            .iter()
            .filter_map(|&i| tasks.get(i as usize))
            .filter_map(|&t| Some((world.get::<Task>(t)?, world.get::<TaskState>(t)?)))
            .filter(|(_, ts)| ts.is_running())
            .filter_map(|(t, ts)| Some(format!("{} on {}", t.name, world.get::<Node>(ts.node?)?.name)))
            .collect();
        let holding = tasks
            .iter()
            .filter(|&&t| world.get::<TaskState>(t).is_some_and(TaskState::is_running))
            .count() as u32;
        let restarts = st.restarts;
        if running && !placed.is_empty() {
            world.resource_mut::<Outbox>().0.push(Command::Info(format!(
                "job {name}: lost tasks started again: {} (restart {restarts})",
                placed.join(", ")
            )));
        }
        // Done: all started again, or the job ended meanwhile; or the gang is whole
        // without the rest (minAvailable below its replicas), which then wait as any
        // task beyond the gang minimum does.
        if !running || waiting.is_empty() || holding >= gang_min {
            if let Some(mut st) = world.get_mut::<JobState>(e) {
                st.replacing = if running { waiting } else { Vec::new() };
            }
            if !running || world.get::<JobState>(e).is_some_and(|st| st.replacing.is_empty()) {
                world.resource_mut::<Replacements>().jobs.remove(&e);
            }
            continue;
        }
        if !whole {
            continue;
        }
        let st = world.get::<JobState>(e).map(|s| s.allocated_hyper_node.clone());
        let names: Vec<String> = waiting
            .iter()
            .filter_map(|&i| tasks.get(i as usize))
            .filter_map(|&t| world.get::<Task>(t).map(|t| t.name.to_string()))
            .collect();
        let within = st.flatten().unwrap_or_else(|| "the cluster".into());
        let why = Reason::NoSpareNode { within, tasks: names };
        if let Some(mut st) = world.get_mut::<JobState>(e) {
            st.replacing.clear();
            if requeue {
                let why = Reason::Requeued(Box::new(why.clone()));
                st.reason = Some(why.clone());
                st.requeue = Some(why);
            } else {
                st.verdict = Some(Verdict::Failed);
                st.reason = Some(why.clone());
                if st.first_failure.is_none() {
                    st.first_failure = Some((now_ms, 1));
                }
            }
            st.phase = JobPhase::Ending;
            st.kill = Some((KillReason::TaskFailed, KILL_GRACE_SECS));
        }
        // The lost tasks' runs are over: they count as ended, as a lost task does.
        for &i in &waiting {
            if let Some(&t) = tasks.get(i as usize)
                && let Some(mut ts) = world.get_mut::<TaskState>(t)
            {
                ts.phase = TaskPhase::Finished;
            }
        }
        world.resource_mut::<Replacements>().jobs.remove(&e);
        world.resource_mut::<Outbox>().0.push(Command::Warn(format!(
            "job {name}: {why}; {}",
            if requeue { "requeued" } else { "failed" }
        )));
        stop_tasks(world, e, KillReason::TaskFailed, KILL_GRACE_SECS);
        settle_job(world, e);
    }
}
