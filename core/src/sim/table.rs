//! The tables people read: per job (status, HyperNode, nodes as a compressed hostlist,
//! reason) and per task (rank, node, and where it is pinned: CPUs, NUMA nodes, memory,
//! GPUs, rails).

use hyperplan_shared::MEMORY;
use hyperplan_shared::columns::columns;
use hyperplan_shared::hostlist;
use hyperplan_shared::quantity::format_quantity;
use hyperplan_shared::report::{JobStatus, Report};

pub fn render_table(report: &Report) -> String {
    let mut rows: Vec<[String; 5]> = vec![[
        "JOB".into(),
        "STATUS".into(),
        "HYPERNODE".into(),
        "NODES".into(),
        "REASON".into(),
    ]];
    for j in &report.jobs {
        let mut names: Vec<&str> = j.tasks.iter().filter_map(|t| t.node.as_deref()).collect();
        names.sort_unstable();
        names.dedup();
        let placed = j.tasks.iter().filter(|t| t.node.is_some()).count();
        let status = match j.status {
            JobStatus::Placed => format!("placed {placed}/{}", j.tasks.len()),
            JobStatus::Pending => "pending".into(),
            JobStatus::Rejected => "rejected".into(),
        };
        rows.push([
            j.name.clone(),
            status,
            j.allocated_hyper_node.clone().unwrap_or_else(|| "-".into()),
            if names.is_empty() {
                "-".into()
            } else {
                hostlist::compress(&names)
            },
            j.reason.clone().unwrap_or_default(),
        ]);
    }
    let mut out = columns(&rows);
    let s = &report.summary;
    out.push_str(&format!(
        "\n{} placed, {} pending, {} rejected; makespan {} s\n",
        s.placed, s.pending, s.rejected, s.makespan
    ));
    for w in &report.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}

/// One row per task: job, task, rank, node, and its pinning (`-` where it has none).
pub fn render_task_table(report: &Report) -> String {
    let mut rows: Vec<[String; 9]> = vec![[
        "JOB".into(),
        "TASK".into(),
        "RANK".into(),
        "NODE".into(),
        "CPUS".into(),
        "NUMA".into(),
        "MEMORY".into(),
        "GPUS".into(),
        "NICS".into(),
    ]];
    let dash = |s: String| if s.is_empty() { "-".to_string() } else { s };
    for j in &report.jobs {
        for t in &j.tasks {
            let numa: Vec<String> = t.numa_nodes.iter().map(|n| n.to_string()).collect();
            let memory: Vec<String> = t
                .memory_numa
                .iter()
                .map(|(n, b)| format!("{}@{n}", format_quantity(MEMORY, *b)))
                .collect();
            rows.push([
                j.name.clone(),
                t.name.clone(),
                t.rank.map_or_else(|| "-".into(), |r| r.to_string()),
                t.node.clone().unwrap_or_else(|| "-".into()),
                dash(t.cpus.clone().unwrap_or_default()),
                dash(numa.join(",")),
                dash(memory.join(",")),
                dash(t.gpus.join(",")),
                dash(t.nics.join(",")),
            ]);
        }
    }
    columns(&rows)
}
