//! From the planner's stored record of an ended job to its accounting rows: sacct's
//! state, what was asked and held, CPU time and peak memory from the agents' reports,
//! GPU- and core-seconds from what each task held for how long.

use std::collections::BTreeSet;

use hyperplan_core::model::components::{JobPhase, TaskPhase};
use hyperplan_core::model::jobstate::Verdict;
use hyperplan_core::model::record::JobRecord;
use hyperplan_core::numa::node::is_gpu_resource;
use hyperplan_shared::history::HistoryStep;
use hyperplan_shared::taskend::TaskOutcome;
use hyperplan_shared::{CPU, MEMORY, Resources, TaskSpec, hostlist};

use crate::rows::{JobRow, Rows, TaskRow};
use crate::topology::Tiers;

/// The queue a job without one is in.
const DEFAULT_QUEUE: &str = "default";

/// The rows of `record`, an ended job; `tiers` (`Topology::tiers`) gives its HyperNode's tier.
pub fn rows_of(record: &JobRecord, tiers: &Tiers) -> Rows {
    let spec = &record.spec;
    let s = &record.state;
    let end = s.end_time.unwrap_or(spec.submit_time);
    // The task specs in the job's task order: spec order, then replica.
    let specs: Vec<&TaskSpec> = spec
        .tasks
        .iter()
        .flat_map(|t| std::iter::repeat_n(t, t.replicas as usize))
        .collect();
    let mut tasks = Vec::with_capacity(record.tasks.len());
    let mut nodes = BTreeSet::new();
    let (mut cpu_seconds, mut max_rss, mut core_seconds, mut gpu_seconds) = (0.0, 0u64, 0.0, 0.0);
    let (mut alloc_cpus, mut alloc_gpus, mut alloc_memory) = (0.0, 0u64, 0u64);
    let (mut oom, mut lost) = (false, false);
    for (index, t) in record.tasks.iter().enumerate() {
        let asked = specs.get(index).map(|t| &t.resources);
        let placed = t.node.is_some() && t.start_time.is_some();
        let (cpus, gpus, memory) = match (&t.numa, asked) {
            (Some(a), _) if placed => (
                a.pus.len() as f64,
                a.gpus.len() as u64,
                a.memory.iter().map(|&(_, b)| b).sum::<u64>(),
            ),
            (_, Some(r)) if placed => (cores(r), gpus_of(r), r.get(MEMORY)),
            _ => (0.0, 0, 0),
        };
        let e = t.end.as_ref();
        let start_ms = e
            .and_then(|e| e.start_time_ms)
            .or(t.start_ms)
            .or(t.start_time.map(|s| s.saturating_mul(1000)));
        let end_ms = e.map_or(end.saturating_mul(1000), |e| e.end_time_ms);
        let held = if placed {
            start_ms.map_or(0.0, |s| end_ms.saturating_sub(s) as f64 / 1000.0)
        } else {
            0.0
        };
        if let Some(n) = &t.node
            && placed
        {
            nodes.insert(n.as_str());
        }
        let (used, rss) = e.map_or((0.0, 0), |e| (e.cpu_seconds, e.max_rss_bytes));
        cpu_seconds += used;
        max_rss = max_rss.max(rss);
        core_seconds += cpus * held;
        gpu_seconds += gpus as f64 * held;
        alloc_cpus += cpus;
        alloc_gpus += gpus;
        alloc_memory += memory;
        oom |= e.is_some_and(|e| e.oom_killed);
        lost |= e.is_some_and(|e| e.outcome == TaskOutcome::Lost);
        tasks.push(TaskRow {
            index: index as u32,
            name: t.name.clone(),
            rank: t.rank.filter(|_| placed),
            node: t.node.clone().filter(|_| placed),
            start: start_ms.filter(|_| placed).map(|ms| ms / 1000),
            end: end_ms / 1000,
            outcome: match (e, t.phase) {
                (Some(e), _) => e.outcome.as_str().to_string(),
                (None, TaskPhase::Pending) => "pending".into(),
                (None, _) => "unreported".into(),
            },
            exit_code: e.and_then(|e| e.exit_code),
            signal: e.and_then(|e| e.signal),
            cpus,
            gpus,
            memory,
            cpu_seconds: used,
            max_rss: rss,
        });
    }
    let (req_cpus, req_gpus, req_memory) = specs.iter().fold((0.0, 0u64, 0u64), |(c, g, m), t| {
        (
            c + cores(&t.resources),
            g.saturating_add(gpus_of(&t.resources)),
            m.saturating_add(t.resources.get(MEMORY)),
        )
    });
    let state = match s.verdict {
        Some(Verdict::Completed) => "COMPLETED",
        Some(Verdict::Cancelled) => "CANCELLED",
        Some(Verdict::Timeout) => "TIMEOUT",
        Some(Verdict::Preempted) => "PREEMPTED",
        Some(Verdict::Failed) if oom => "OUT_OF_MEMORY",
        Some(Verdict::Failed) if lost => "NODE_FAIL",
        Some(Verdict::Failed) => "FAILED",
        // Never placed and given up (a request no node could ever hold), or cancelled
        // before any verdict: sacct's words for those.
        None if s.phase == JobPhase::Rejected => "FAILED",
        None if s.phase == JobPhase::Cancelled => "CANCELLED",
        None if s.exit_code.is_some_and(|c| c != 0) => "FAILED",
        None => "COMPLETED",
    };
    // The signal of the first failure, when a signal ended it.
    let signal = s.first_failure.and_then(|(ms, _)| {
        record
            .tasks
            .iter()
            .filter_map(|t| t.end.as_ref())
            .find(|e| e.end_time_ms == ms && !e.succeeded())
            .and_then(|e| e.signal)
    });
    let hypernode = s
        .allocated_hyper_node
        .clone()
        .or_else(|| record.sub_jobs.iter().flatten().next().cloned());
    let tier = hypernode.as_deref().and_then(|h| tiers.get(h).copied());
    let node_names: Vec<&str> = nodes.iter().copied().collect();
    let steps = s
        .steps
        .iter()
        .map(|st| {
            let names: Vec<&str> = st.nodes.iter().map(String::as_str).collect();
            HistoryStep {
                step: st.step,
                nodelist: hostlist::compress(&names),
                nnodes: names.iter().collect::<BTreeSet<_>>().len() as u32,
                start: st.start_time,
                end: st.end_time,
                exit_code: st.exit_code,
                signal: st.signal,
                command: st.command.clone(),
            }
        })
        .collect();
    let job = JobRow {
        job_id: record.id,
        array_job_id: spec.element.as_ref().map(|e| e.array_id),
        array_index: spec.element.as_ref().map(|e| u64::from(e.index)),
        attempt: s.requeues,
        name: spec.name.clone(),
        user: record.owner.clone(),
        account: spec.account.clone().unwrap_or_default(),
        queue: spec.queue.clone().unwrap_or_else(|| DEFAULT_QUEUE.to_string()),
        submit: spec.submit_time,
        eligible: spec.begin.map_or(spec.submit_time, |b| b.max(spec.submit_time)),
        start: s.start_time,
        end,
        state: state.to_string(),
        reason: s.reason.as_ref().map(ToString::to_string),
        exit_code: s.exit_code,
        signal,
        nnodes: nodes.len() as u32,
        ntasks: specs.len() as u32,
        nodelist: hostlist::compress(&node_names),
        hypernode,
        tier,
        req_cpus,
        req_gpus,
        req_memory,
        alloc_cpus,
        alloc_gpus,
        alloc_memory,
        time_limit: spec.run.time_limit,
        cpu_seconds,
        max_rss,
        core_seconds,
        gpu_seconds,
        requeues: s.requeues,
        restarts: s.restarts,
        preempted_by: s.preempted_by.clone(),
        steps,
    };
    Rows { job, tasks }
}

/// Cores asked for (`cpu` is in millicores).
fn cores(r: &Resources) -> f64 {
    r.get(CPU) as f64 / 1000.0
}

fn gpus_of(r: &Resources) -> u64 {
    r.iter()
        .filter(|(name, _)| is_gpu_resource(name))
        .fold(0u64, |a, (_, n)| a.saturating_add(n))
}
