//! The placement table people read: job, status, HyperNode, nodes as a compressed
//! hostlist, reason.

use hyperplan_shared::hostlist;
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
    let mut widths = [0usize; 4];
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in &rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i < 4 {
                line.push_str(&format!("{c:<w$}  ", w = widths[i]));
            } else {
                line.push_str(c);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
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
