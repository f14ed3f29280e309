//! Leaves spanned by whole-node soft jobs on fragmented fat trees (issue 11): hyperplan's
//! leaf-minimal placement, Volcano's order (`span = "volcano"`), and the optimum, for
//! 8- to 512-node jobs on 2,048- and 8,192-node trees (16 nodes per leaf, 8 leaves per
//! spine, one top; 46 % of the nodes busy at random, three seeds each).
//!
//! A harness, not a timing bench: it prints the table in `benches/README.md`.
//! `cargo bench --bench span`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hyperplan_core::PlannerConfig;
use hyperplan_core::config::SpanMode;
use hyperplan_core::sim::simulate;
use hyperplan_core::testing::{FatTreeView, JobBuilder, leaves_spanned};
use hyperplan_shared::fattree::{self, FatTreeParams};
use hyperplan_shared::quantity::parse_resource_list;
use hyperplan_shared::report::JobStatus;

const NODE: &str = "cpu=128,memory=1Ti,nvidia.com/gpu=8";

fn main() {
    let mut volcano = PlannerConfig::default();
    volcano.scoring.span = SpanMode::Volcano;
    println!("| nodes | seed | job | hyperplan (minimal) | volcano order | optimum |");
    println!("|---|---|---|---|---|---|");
    for nodes in [2048u32, 8192] {
        for seed in [46u64, 47, 48] {
            let cluster = fattree::generate(&FatTreeParams {
                nodes,
                fanout: vec![16, 8],
                node_resources: parse_resource_list(NODE).unwrap(),
                busy: 0.46,
                seed,
                prefix: "node".into(),
            })
            .unwrap();
            let view = FatTreeView::new(&cluster);
            let room = view.free_nodes(&cluster);
            for job_nodes in [8u32, 16, 32, 64, 128, 256, 512] {
                let job = JobBuilder::gang("job", job_nodes, NODE).soft().build();
                let cell = |config: PlannerConfig| {
                    let r = simulate(&cluster, std::slice::from_ref(&job), config);
                    let j = &r.jobs[0];
                    if j.status == JobStatus::Placed {
                        format!("{} leaves, tier {}", leaves_spanned(j), view.placed_tier(j))
                    } else {
                        "not placed".to_string()
                    }
                };
                let best = match view.optimum(&room, u64::from(job_nodes), false) {
                    Some((tier, leaves)) => format!("{leaves} leaves, tier {tier}"),
                    None => "does not fit".into(),
                };
                println!(
                    "| {nodes} | {seed} | {job_nodes} | {} | {} | {best} |",
                    cell(PlannerConfig::default()),
                    cell(volcano.clone())
                );
            }
        }
    }
}
