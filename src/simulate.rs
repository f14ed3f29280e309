//! `hyperplan simulate`: the real planner core on a cluster file and job files, in
//! virtual time.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::ValueEnum;
use hyperplan_core::jobs::ownership::{NameClash, check_job_names};
use hyperplan_core::{PlannerConfig, sim};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Output {
    /// A table for people: job, status, HyperNode, nodes, reason.
    Table,
    /// A row per task: rank, node, and its NUMA pinning (CPUs, NUMA nodes, memory per
    /// NUMA node, GPUs, NICs).
    Tasks,
    /// The full report; field names are a stable interface for scripts.
    Json,
    /// The same report as YAML.
    Yaml,
}

/// Plan jobs on a cluster with the planner's own scheduling core, in virtual time.
///
/// Without task runtimes, one scheduling pass runs at time 0. With runtimes, time moves
/// from event to event (submissions, completions) until every job has finished or can
/// never run. Problems a running planner would survive (a broken HyperNode, an unknown
/// tier name) are warnings on stderr and in the report; unreadable files are errors
/// naming FILE:LINE:COLUMN and the field.
///
/// Nodes with `topology:` (hwloc XML, synthetic, saved probe) get NUMA-aligned CPUs,
/// memory, GPUs and NICs for tasks with a `topologyPolicy`; `--output tasks` shows them.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  hyperplan simulate --cluster examples/cluster.yaml --jobs examples/jobs.yaml --output json\n  \
                  hyperplan simulate --cluster examples/numa-cluster.yaml --jobs examples/numa-jobs.yaml --output tasks"
)]
pub struct Args {
    /// Cluster file (nodes, hyperNodes, hyperNodeFiles, discovery).
    #[arg(long, value_name = "FILE")]
    cluster: PathBuf,
    /// Job file: one job, a list, or several YAML documents; hyperplan's format or a
    /// Volcano batch.volcano.sh/v1alpha1 Job. Repeat for several files.
    #[arg(long, value_name = "FILE", required = true)]
    jobs: Vec<PathBuf>,
    #[arg(long, value_enum, default_value = "table")]
    output: Output,
    /// Planner configuration (TOML): [scoring] takes Volcano's network-topology-aware
    /// plugin arguments, [numa] the default topology policy and the numa-aware weight.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut cluster = hyperplan_shared::load_cluster_file(&args.cluster)?;
    crate::topology::fill_resources(&mut cluster, &args.cluster)?;
    let mut jobs = Vec::new();
    // For each job, the index of its file in `args.jobs`.
    let mut file_of: Vec<usize> = Vec::new();
    for (f, path) in args.jobs.iter().enumerate() {
        for job in hyperplan_shared::load_job_file(path)? {
            jobs.push(job);
            file_of.push(f);
        }
        // The planner's own name check (the daemon's too), file by file so a clash is
        // reported before a later file is read. Names within one file the parser checks.
        match check_job_names(jobs.iter().map(|j| j.name.as_str()), |_| None) {
            Ok(()) => {}
            Err(NameClash::Twice { name, first, second }) => bail!(
                "{}: name: job {name:?} is also defined in {}; job names must be unique",
                args.jobs[file_of[second]].display(),
                args.jobs[file_of[first]].display()
            ),
            Err(e) => bail!("{}: {e}", path.display()),
        }
    }
    let config = match &args.config {
        Some(p) => hyperplan_planner::DaemonConfig::load(p)?.planner,
        None => PlannerConfig::default(),
    };
    let report = sim::simulate(&cluster, &jobs, config);
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    let text = match args.output {
        Output::Table => sim::render_table(&report),
        Output::Tasks => sim::render_task_table(&report),
        Output::Json => serde_json::to_string_pretty(&report).context("encoding the report")? + "\n",
        Output::Yaml => serde_saphyr::to_string(&report).context("encoding the report")?,
    };
    print!("{text}");
    Ok(())
}
