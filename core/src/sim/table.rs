//! The tables people read: per job (status, HyperNode, nodes as a compressed hostlist,
//! reason) and per task (rank, node, and where it is pinned: CPUs, NUMA nodes, memory,
//! GPUs, rails).

use hyperplan_shared::MEMORY;
use hyperplan_shared::columns::columns;
use hyperplan_shared::hostlist;
use hyperplan_shared::quantity::format_quantity;
use hyperplan_shared::report::{JobStatus, Report};

/// One row per job: name, status, HyperNode, nodes (a compressed hostlist) and reason;
/// then the summary line and the warnings.
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
            other => other.as_str().into(),
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
    if s.preemptions > 0 {
        out.push_str(&format!(
            "{} preemption{}, {} CPU-seconds of work lost\n",
            s.preemptions,
            if s.preemptions == 1 { "" } else { "s" },
            s.lost_cpu_seconds
        ));
    }
    for w in &report.warnings {
        // Warnings quote what files said (labels, patterns): never raw on a terminal.
        out.push_str(&format!("warning: {}\n", hyperplan_shared::names::escape(w)));
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use hyperplan_shared::report::{JobReport, TaskReport};

    use super::*;

    fn task(name: &str, node: Option<String>) -> TaskReport {
        TaskReport {
            name: name.into(),
            rank: None,
            sub_job: name.into(),
            node,
            hyper_nodes: Vec::new(),
            cpus: None,
            numa_nodes: Vec::new(),
            memory_numa: Default::default(),
            gpus: Vec::new(),
            nics: Vec::new(),
            working_dir: None,
            ..TaskReport::default()
        }
    }

    fn job(name: &str, tasks: Vec<TaskReport>) -> JobReport {
        JobReport {
            id: 1,
            name: name.into(),
            status: JobStatus::Placed,
            reason: Some("reason\u{1b}[2J".into()),
            submit_time: 0,
            start_time: None,
            end_time: None,
            allocated_hyper_node: None,
            owner: None,
            tasks,
            ..JobReport::default()
        }
    }

    /// Issue 12 item 1: a 70,000-character job name and an 18,000-node job (every other
    /// node of a 40,000-node cluster, so the hostlist does not compress) render, cut.
    #[test]
    fn huge_names_and_node_lists_render() {
        let nodes = (0..18_000)
            .map(|i| task("w", Some(format!("node{:05}", 2 * i))))
            .collect();
        let report = Report {
            jobs: vec![job(&"j".repeat(70_000), vec![task("t", None)]), job("big", nodes)],
            ..Report::default()
        };
        let out = render_table(&report);
        assert!(out.lines().all(|l| l.chars().count() < 4 * 1024), "{}", out.len());
        assert!(out.contains("…"));
        assert!(!out.contains('\u{1b}'), "the reason is printed escaped");
        let tasks = render_task_table(&report);
        assert!(tasks.lines().count() > 18_000);
    }
}
