//! The simulator: drives the planner core with events from files and virtual time.
//! Without runtimes it runs one scheduling pass at time 0; with runtimes, time moves from
//! event to event (submissions, completions) until every job has finished or can never
//! run. It runs the very Schedule the daemon runs.

pub mod baselines;
pub mod easy;
mod events;
pub mod metrics;
pub mod noise;
pub mod submit;
pub mod swf;
mod table;
pub mod topo_easy;
mod trace_job;

use std::collections::BTreeMap;

use hyperplan_shared::report::{JobStatus, Report, Summary};
use hyperplan_shared::{ClusterSpec, JobSpec};

use crate::config::PlannerConfig;
use crate::{Command, Event, Planner};

pub use table::{render_table, render_task_table};

/// The owner the simulator submits its jobs as (the tests and benches do too): a fixed
/// name, not the local user, so reports are the same on every machine. To the core it
/// is an owner like any other.
pub const SIM_OWNER: &str = "sim";

/// Loads the cluster into a fresh planner (nodes, static HyperNodes, label discovery).
pub fn planner_for(cluster: &ClusterSpec, config: PlannerConfig) -> Planner {
    let mut planner = Planner::new(config);
    for node in &cluster.nodes {
        planner.push(Event::NodeUp(node.clone()));
    }
    planner.push(Event::StaticHyperNodes(cluster.hyper_nodes.clone()));
    planner.push(Event::LabelDiscovery(cluster.label_discovery.clone()));
    planner
}

/// How long a task runs in virtual time: its runtime, cut at the time limit; with only a
/// limit, until the limit; with neither, until cancelled (`None`).
fn ran_for(runtime: Option<u64>, limit: Option<u64>) -> Option<u64> {
    match (runtime, limit) {
        (Some(r), Some(l)) => Some(r.min(l)),
        (r, l) => r.or(l),
    }
}

/// Runs the simulation and returns the report.
pub fn simulate(cluster: &ClusterSpec, jobs: &[JobSpec], config: PlannerConfig) -> Report {
    simulate_with(cluster, jobs, config, |_| {})
}

/// As [`simulate`], calling `after_tick` after every tick (tests check invariants there).
pub fn simulate_with(
    cluster: &ClusterSpec,
    jobs: &[JobSpec],
    config: PlannerConfig,
    mut after_tick: impl FnMut(&mut Planner),
) -> Report {
    let mut planner = planner_for(cluster, config);
    let mut warnings: Vec<String> = Vec::new();
    let note = |cmds: Vec<Command>, warnings: &mut Vec<String>| -> Vec<Command> {
        let mut rest = Vec::new();
        for c in cmds {
            match c {
                Command::Warn(w) => {
                    if !warnings.contains(&w) {
                        tracing::warn!("{w}");
                        warnings.push(w);
                    }
                }
                other => rest.push(other),
            }
        }
        rest
    };
    let timed = jobs
        .iter()
        .any(|j| j.run.time_limit.is_some() || j.begin.is_some() || j.tasks.iter().any(|t| t.runtime.is_some()));
    // (preemptions, work they lost)
    let mut totals = (0u32, 0u64);
    let count = |c: &Command, totals: &mut (u32, u64)| match c {
        Command::Preempted { lost_cpu_seconds, .. } => {
            totals.0 += 1;
            totals.1 = totals.1.saturating_add(*lost_cpu_seconds);
            true
        }
        _ => false,
    };
    if !timed {
        for j in jobs {
            submit::submit(&mut planner, j.clone(), j.user.as_deref().unwrap_or(SIM_OWNER));
        }
        // Once, and again at the same time while preemptions free room (each frees
        // room for a job that waits; a bounded number of rounds).
        for _ in 0..64 {
            let cmds = note(planner.tick(0), &mut warnings);
            after_tick(&mut planner);
            let mut again = false;
            for c in &cmds {
                again |= count(c, &mut totals);
            }
            if !again {
                break;
            }
        }
    } else {
        let mut submissions: Vec<&JobSpec> = jobs.iter().collect();
        submissions.sort_by(|a, b| a.submit_time.cmp(&b.submit_time).then_with(|| a.name.cmp(&b.name)));
        let mut next_sub = 0;
        let mut completions: BTreeMap<u64, Vec<(String, String, u32)>> = BTreeMap::new();
        let mut now = submissions.first().map_or(0, |j| j.submit_time);
        loop {
            while next_sub < submissions.len() && submissions[next_sub].submit_time <= now {
                let j = submissions[next_sub];
                submit::submit(&mut planner, j.clone(), j.user.as_deref().unwrap_or(SIM_OWNER));
                next_sub += 1;
            }
            if let Some(done) = completions.remove(&now) {
                for (job, task, index) in done {
                    planner.push(Event::TaskFinished { job, task, index });
                }
            }
            let cmds = planner.tick(now);
            // A preemption stops its victims at once here (no agent): the room is the
            // preemptor's at the next tick, at the same time.
            let mut again = false;
            for c in note(cmds, &mut warnings) {
                if let Command::Preempted { victim, .. } = &c {
                    count(&c, &mut totals);
                    again = true;
                    // Its tasks' ends were scheduled for the run it no longer has.
                    for list in completions.values_mut() {
                        list.retain(|(job, _, _)| job != victim);
                    }
                    continue;
                }
                // A task's runtime is in its spec (the placement shares it); one past its
                // job's time limit ends at the limit, as the agent would end it.
                if let Command::Place(p) = c
                    && let Some(r) = ran_for(p.spec.tasks.get(p.role).and_then(|t| t.runtime), p.spec.run.time_limit)
                {
                    completions
                        .entry(now + r)
                        .or_default()
                        .push((p.job().to_string(), p.task.to_string(), p.index));
                }
            }
            after_tick(&mut planner);
            completions.retain(|_, l| !l.is_empty());
            if again {
                continue;
            }
            let next_submission = submissions.get(next_sub).map(|j| j.submit_time);
            let next_completion = completions.keys().next().copied();
            // A job that waits for its begin time, with nothing else to come.
            let next_begin = planner
                .world()
                .resource::<crate::model::held::Waiting>()
                .next_begin
                .filter(|&t| t > now);
            // What the core decides by time alone (a maintenance window closing, a begin
            // time) comes between, when it comes first; a window closing while jobs wait
            // for its nodes is an event of its own.
            let deadline = planner.next_deadline().map(|ms| ms.div_ceil(1000)).filter(|&t| t > now);
            match (next_submission, next_completion) {
                (None, None) if next_begin.is_none() && deadline.is_none() => break,
                (a, b) => now = a.into_iter().chain(b).chain(deadline).min().unwrap_or(now),
            }
        }
    }
    let jobs = planner.jobs();
    let mut summary = Summary {
        preemptions: totals.0,
        lost_cpu_seconds: totals.1,
        ..Summary::default()
    };
    for j in &jobs {
        match j.status {
            // The simulator's jobs are `placed` however they end; the others were placed too.
            JobStatus::Placed | JobStatus::Running | JobStatus::Completed | JobStatus::Failed | JobStatus::Timeout => {
                summary.placed += 1
            }
            JobStatus::Pending => summary.pending += 1,
            JobStatus::Rejected => summary.rejected += 1,
            JobStatus::Cancelled | JobStatus::Preempted => {}
        }
        summary.makespan = summary.makespan.max(j.end_time.unwrap_or(0));
    }
    Report {
        jobs,
        summary,
        warnings,
    }
}
