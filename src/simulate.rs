//! `hyperplan simulate`: the real planner core on a cluster file and job files, or on a
//! Standard Workload Format log (`--swf`), in virtual time.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::ValueEnum;
use clap::error::ErrorKind;
use hyperplan_core::jobs::ownership::{NameClash, check_job_names};
use hyperplan_core::sim::metrics::{SLOWDOWN_BOUND_SECS, TraceMetrics, outcomes, trace_metrics};
use hyperplan_core::sim::noise::{Pairwise, Spread, shifted};
use hyperplan_core::sim::swf::{SwfOptions, TopologyAsk, replay, tier_sizes};
use hyperplan_core::{PlannerConfig, sim};
use hyperplan_shared::ClusterSpec;
use serde::Serialize;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Output {
    /// A table for people: job, status, HyperNode, nodes, reason (with --swf: the log, the
    /// jobs replayed and skipped, and the run's figures).
    Table,
    /// A row per task: rank, node, and its NUMA pinning (CPUs, NUMA nodes, memory per
    /// NUMA node, GPUs, NICs). Not with --swf.
    Tasks,
    /// The full report; field names are a stable interface for scripts.
    Json,
    /// The same report as YAML.
    Yaml,
}

/// How log jobs ask for topology (`--topology`).
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Topology {
    /// Required: each job gets the lowest tier one of whose HyperNodes can hold it
    /// (networkTopology mode hard, highestTierAllowed).
    Hard,
    /// Required for the jobs that fit a leaf (tier 1: one leaf each); wider jobs ask for
    /// their lowest tier softly, packed into as few leaves as the free nodes allow but
    /// never held back for it.
    Leaf,
    /// The same tier, preferred but not required (mode soft).
    Soft,
    /// No networkTopology: anywhere (the placement a topology-oblivious scheduler makes).
    None,
}

impl Topology {
    fn ask(self) -> TopologyAsk {
        match self {
            Topology::Hard => TopologyAsk::Hard,
            Topology::Leaf => TopologyAsk::Leaf,
            Topology::Soft => TopologyAsk::Soft,
            Topology::None => TopologyAsk::None,
        }
    }

    /// How the topology-aware EASY yardstick places a job wider than a leaf.
    fn wide(self) -> sim::topo_easy::Wide {
        match self {
            Topology::Leaf => sim::topo_easy::Wide::Anywhere,
            Topology::Hard | Topology::Soft | Topology::None => sim::topo_easy::Wide::OneDomain,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Topology::Hard => "hard",
            Topology::Leaf => "leaf",
            Topology::Soft => "soft",
            Topology::None => "none",
        }
    }
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
///
/// With `--swf LOG`, the jobs come from a job log in the Standard Workload Format of the
/// Parallel Workloads Archive (https://www.cs.huji.ac.il/labs/parallel/workload/) instead
/// of job files: a site replays its own history against a cluster file and a planner.toml
/// before deploying them. Each log job becomes one job of as many tasks as it had
/// processors (`--procs-per-node P`: P processors share a node, each task asking for 1/P
/// of the smallest node's CPUs), submitted when the log says (times `--time-scale`),
/// running as long as it ran, with its requested time as its time limit and its log user
/// as its user (for fair share). Jobs the log cannot run (unknown run time or processors)
/// are skipped and counted. With `--swf`, `--jobs N` is a number, not a file: replay the
/// first N jobs of the log (all of them without it); job files and `--swf` do not mix.
/// It prints the log's acknowledgement (whom to credit for it), the jobs replayed and
/// skipped, and the figures the run is judged by: mean, 95th percentile and longest wait,
/// mean bounded slowdown (runs shorter than 10 s count as 10 s), utilisation (node-seconds
/// used over those offered from the first submit to the last end), leaves (tier-1
/// HyperNodes) per multi-node job, and the share of multi-node jobs no larger than a leaf
/// that got one leaf. `--output json` gives them as `metrics` (meanWait, p95Wait, maxWait,
/// boundedSlowdown, utilisation, leavesPerJob, leafSizedInOneLeaf, …).
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
                  hyperplan simulate --cluster examples/cluster.yaml --jobs examples/jobs.yaml --output json\n  \
                  hyperplan simulate --cluster examples/numa-cluster.yaml --jobs examples/numa-jobs.yaml --output tasks\n  \
                  hyperplan simulate --swf testdata/traces/KTH-SP2-1996-2.1-cln.swf --cluster examples/kth-sp2-cluster.yaml --jobs 2000\n  \
                  hyperplan simulate --swf LOG --cluster CLUSTER --jobs 2000 --baselines\n  \
                  hyperplan simulate --swf LOG --cluster CLUSTER --jobs 2000 --baselines --noise 4 --config planner.toml\n  \
                  hyperplan simulate --swf LOG --cluster CLUSTER --jobs 2000 --topology none --time-scale 0.8 --output json")]
pub struct Args {
    /// Cluster file (nodes, hyperNodes, hyperNodeFiles, discovery).
    #[arg(long, value_name = "FILE")]
    cluster: PathBuf,
    /// Job file: one job, a list, or several YAML documents; hyperplan's format or a
    /// Volcano batch.volcano.sh/v1alpha1 Job. Repeat for several files. With --swf, a
    /// number instead: how many jobs of the log to replay (the first N; all without it).
    #[arg(long, value_name = "FILE|N", required_unless_present = "swf")]
    jobs: Vec<PathBuf>,
    /// Replay this Standard Workload Format job log instead of job files.
    #[arg(long, value_name = "LOG")]
    swf: Option<PathBuf>,
    /// With --swf: how log jobs ask for topology [default: hard].
    #[arg(long, value_enum, requires = "swf")]
    topology: Option<Topology>,
    /// With --swf: a job whose hard topology (every job's with --topology hard, the
    /// leaf-sized jobs' with leaf) is still unmet TIME after its submit is placed as soft
    /// from then on (networkTopology.softAfter, Slurm's --switches=1@TIME). The row
    /// "leaf-sized jobs in one leaf" shows what that gave up. TIME: 12h, 90m, 1d or seconds.
    #[arg(long, value_name = "TIME", requires = "swf", value_parser = soft_after)]
    soft_after: Option<u64>,
    /// With --swf: submit times are multiplied by F (below 1 packs arrivals closer: a
    /// heavier load) [default: 1].
    #[arg(long, value_name = "F", requires = "swf", value_parser = positive)]
    time_scale: Option<f64>,
    /// With --swf: log processors per node [default: 1, one processor is one node].
    #[arg(long, value_name = "P", requires = "swf", value_parser = clap::value_parser!(u32).range(1..))]
    procs_per_node: Option<u32>,
    /// With --swf: replay the same jobs under EASY backfill, topology-oblivious, and (on a
    /// regular fat tree) a topology-aware EASY, one leaf per leaf-sized job and one domain
    /// of the lowest tier per wider job (anywhere with --topology leaf), and
    /// show their figures beside hyperplan's (one log processor per node).
    #[arg(long, requires = "swf")]
    baselines: bool,
    /// With --swf: replay K more copies of the jobs, each job submitted 0 or 1 s later (a
    /// fixed choice per copy and job: the log's times are whole seconds), and show the
    /// lowest and highest mean and longest wait over the runs (with --baselines, EASY's
    /// too). A schedule is a chain: a second early on can move a wait by hours. A
    /// difference between two configurations inside that spread is chance.
    #[arg(long, value_name = "K", requires = "swf", value_parser = clap::value_parser!(u32).range(1..=100))]
    noise: Option<u32>,
    #[arg(long, value_enum, default_value = "table")]
    output: Output,
    /// Planner configuration (TOML): [scoring] takes Volcano's network-topology-aware
    /// plugin arguments, [numa] the default topology policy and the numa-aware weight,
    /// [scheduler], [fairshare], [priority] and [[queue]] the scheduling policy.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

impl Args {
    /// What clap's attributes cannot say: with `--swf`, `--jobs` is one number, and
    /// `--output tasks` has no tasks to show. The caller reports it as clap reports usage
    /// errors (exit code 2).
    pub fn check(&self) -> Result<(), (ErrorKind, String)> {
        if self.swf.is_none() {
            return Ok(());
        }
        match self.jobs.as_slice() {
            [] => {}
            [one] if count(one).is_some() => {}
            [one] => {
                return Err((
                    ErrorKind::ValueValidation,
                    format!(
                        "invalid value '{}' for '--jobs <FILE|N>': with '--swf', '--jobs' is how many log jobs \
                         to replay (a number above 0); job files and '--swf' do not mix",
                        one.display()
                    ),
                ));
            }
            _ => {
                return Err((
                    ErrorKind::ArgumentConflict,
                    "the argument '--swf <LOG>' cannot be used with several '--jobs': with '--swf', '--jobs' is \
                     one number, how many log jobs to replay; job files and '--swf' do not mix"
                        .into(),
                ));
            }
        }
        if self.soft_after.is_some() && matches!(self.topology, Some(Topology::Soft | Topology::None)) {
            return Err((
                ErrorKind::ArgumentConflict,
                "the argument '--soft-after <TIME>' cannot be used with '--topology soft' or '--topology none': \
                 it turns hard asks soft, and these ask for none (use --topology hard or leaf)"
                    .into(),
            ));
        }
        if self.baselines && self.procs_per_node.is_some_and(|p| p != 1) {
            return Err((
                ErrorKind::ArgumentConflict,
                "the argument '--baselines' cannot be used with '--procs-per-node' above 1: the baselines count \
                 whole nodes, one log processor each"
                    .into(),
            ));
        }
        if matches!(self.output, Output::Tasks) {
            return Err((
                ErrorKind::ArgumentConflict,
                "the argument '--output tasks' cannot be used with '--swf <LOG>': a replay prints its figures \
                 (table, json or yaml)"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// `--time-scale`: a finite number above 0.
fn positive(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err("expected a number above 0, such as 0.8 or 1.5".into()),
    }
}

/// `--soft-after`: a job file's duration (`12h`, `90m`, `1d`, seconds).
fn soft_after(text: &str) -> Result<u64, String> {
    hyperplan_shared::timelimit::parse_time_limit(text).map_err(|e| e.to_string())
}

/// `--jobs N` with `--swf`: a number above 0.
fn count(arg: &Path) -> Option<usize> {
    arg.to_str()?.parse::<usize>().ok().filter(|&n| n > 0)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(log) = &args.swf {
        return run_swf(&args, log);
    }
    let mut cluster = hyperplan_shared::load_cluster_file(&args.cluster)?;
    crate::topology::fill_resources(&mut cluster, &args.cluster)?;
    let mut jobs = Vec::new();
    // For each job, the index of its file in `args.jobs`.
    let mut file_of: Vec<usize> = Vec::new();
    for (f, path) in args.jobs.iter().enumerate() {
        if count(path).is_some() && !path.exists() {
            bail!(
                "--jobs {}: no such job file; a number of jobs is for replaying a log (--swf LOG --jobs N)",
                path.display()
            );
        }
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
    let config = config(&args)?;
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

fn config(args: &Args) -> anyhow::Result<PlannerConfig> {
    Ok(match &args.config {
        Some(p) => hyperplan_planner::DaemonConfig::load(p)?.planner,
        None => PlannerConfig::default(),
    })
}

/// `simulate --swf --output json`: what was replayed, on what, and the run's figures.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SwfRun {
    /// The log file, as given.
    pub log: String,
    /// The log header's `Computer`, `Installation` and `Acknowledge` (whom to credit).
    pub computer: Option<String>,
    pub installation: Option<String>,
    pub acknowledge: Option<String>,
    /// The cluster file, as given, its node count and the size of its largest leaf
    /// (tier-1 HyperNode; `None` without HyperNodes).
    pub cluster: String,
    pub nodes: usize,
    pub leaf_size: Option<u32>,
    /// `hard`, `leaf`, `soft` or `none`.
    pub topology: &'static str,
    /// `--soft-after`, in seconds: hard asks turn soft after this wait.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soft_after: Option<u64>,
    pub procs_per_node: u32,
    pub time_scale: f64,
    /// Job lines read from the log (at most `--jobs`), those replayed and those skipped.
    pub jobs_read: usize,
    pub replayed: usize,
    pub skipped: Vec<Skipped>,
    pub metrics: TraceMetrics,
    /// With `--baselines`: the same jobs under the two yardsticks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baselines: Option<SwfBaselines>,
    /// With `--noise`: the spread over the run and its shifted copies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub noise: Option<SwfNoise>,
    pub warnings: Vec<String>,
}

/// `--noise K`: the lowest and highest mean and longest wait over the run and its K
/// copies with submits 0–1 s later, per column.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SwfNoise {
    /// Shifted copies (the runs are one more: the log as it is).
    pub copies: u32,
    pub hyperplan: Spread,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub easy: Option<Spread>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology_aware_easy: Option<Spread>,
    /// With `--baselines`: hyperplan against EASY on the same jobs, run by run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub against_easy: Option<Pairwise>,
}

/// `--baselines`: EASY's figures, and the topology-aware EASY's on the fat tree it read
/// from the cluster (`None` where the cluster is not a regular fat tree).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SwfBaselines {
    pub easy: TraceMetrics,
    pub topology_aware_easy: Option<TraceMetrics>,
    /// The tree: nodes per leaf, leaves per spine, spines.
    pub tree: Option<[u32; 3]>,
}

/// A log job left out, and why.
#[derive(Debug, Serialize)]
pub struct Skipped {
    pub line: usize,
    pub reason: String,
}

fn run_swf(args: &Args, log_path: &Path) -> anyhow::Result<()> {
    // The cluster and the config first: a mistake there shows before a long log is read.
    let mut cluster = hyperplan_shared::load_cluster_file(&args.cluster)?;
    crate::topology::fill_resources(&mut cluster, &args.cluster)?;
    let config = config(args)?;
    let limit = args.jobs.first().and_then(|j| count(j));
    let log = hyperplan_shared::swf::load_swf_file(log_path, limit)?;
    let topology = args.topology.unwrap_or(Topology::Hard);
    let opts = SwfOptions {
        topology: topology.ask(),
        procs_per_node: args.procs_per_node.unwrap_or(1),
        time_scale: args.time_scale.unwrap_or(1.0),
        soft_after: args.soft_after,
    };
    let replayed = replay(&log, &cluster, &opts)
        .with_context(|| format!("{}: cannot replay it on {}", log_path.display(), args.cluster.display()))?;
    let report = sim::simulate(&cluster, &replayed.jobs, config.clone());
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    let leaf_size = leaf_size(&cluster);
    let nodes = u32::try_from(cluster.nodes.len()).unwrap_or(u32::MAX);
    let metrics = |report: &hyperplan_shared::report::Report| {
        let mut runs = outcomes(report);
        if leaf_size.is_none() {
            // No HyperNodes: leaves are not known, not zero.
            for r in &mut runs {
                r.leaves = None;
            }
        }
        trace_metrics(&runs, nodes, leaf_size.unwrap_or(1))
    };
    let ours = metrics(&report);
    let yardsticks = |jobs: &[hyperplan_shared::JobSpec]| {
        let b = sim::baselines::baselines(jobs, &cluster, leaf_size.unwrap_or(1), topology.wide());
        SwfBaselines {
            easy: b.easy,
            tree: b
                .topology_aware
                .as_ref()
                .map(|(s, _, _)| [s.leaf, s.per_spine, s.spines]),
            topology_aware_easy: b.topology_aware.map(|(_, m, _)| m),
        }
    };
    let baselines = args.baselines.then(|| yardsticks(&replayed.jobs));
    let noise = args.noise.map(|copies| {
        let mut runs = vec![(
            ours.clone(),
            baselines
                .as_ref()
                .map(|b| (b.easy.clone(), b.topology_aware_easy.clone())),
        )];
        for copy in 1..=u64::from(copies) {
            let jobs = shifted(&replayed.jobs, copy);
            let b = baselines.is_some().then(|| yardsticks(&jobs));
            let report = sim::simulate(&cluster, &jobs, config.clone());
            runs.push((metrics(&report), b.map(|b| (b.easy, b.topology_aware_easy))));
        }
        let easy: Vec<&TraceMetrics> = runs.iter().filter_map(|(_, b)| b.as_ref().map(|b| &b.0)).collect();
        let topo: Vec<&TraceMetrics> = runs.iter().filter_map(|(_, b)| b.as_ref()?.1.as_ref()).collect();
        let against_easy = baselines
            .is_some()
            .then(|| Pairwise::of(runs.iter().filter_map(|(m, b)| Some((m, &b.as_ref()?.0)))));
        SwfNoise {
            copies,
            hyperplan: Spread::of(runs.iter().map(|(m, _)| m)).unwrap_or_else(|| unreachable!("one run at least")),
            easy: Spread::of(easy),
            topology_aware_easy: Spread::of(topo),
            against_easy,
        }
    });
    let header = |key| log.header_value(key).map(str::to_string);
    let run = SwfRun {
        log: log_path.display().to_string(),
        computer: header("Computer"),
        installation: header("Installation"),
        acknowledge: header("Acknowledge"),
        cluster: args.cluster.display().to_string(),
        nodes: cluster.nodes.len(),
        leaf_size,
        topology: topology.as_str(),
        soft_after: opts.soft_after,
        procs_per_node: opts.procs_per_node,
        time_scale: opts.time_scale,
        jobs_read: log.jobs.len(),
        replayed: replayed.jobs.len(),
        skipped: replayed
            .skipped
            .into_iter()
            .map(|(line, reason)| Skipped { line, reason })
            .collect(),
        metrics: ours,
        baselines,
        noise,
        warnings: report.warnings,
    };
    let text = match args.output {
        Output::Table | Output::Tasks => hyperplan_shared::names::escape_text(&render_swf(&run)),
        Output::Json => serde_json::to_string_pretty(&run).context("encoding the figures")? + "\n",
        Output::Yaml => serde_saphyr::to_string(&run).context("encoding the figures")?,
    };
    print!("{text}");
    Ok(())
}

/// The largest tier-1 HyperNode, in nodes: what "fits in a leaf" means.
fn leaf_size(cluster: &ClusterSpec) -> Option<u32> {
    tier_sizes(cluster).get(&1).copied().filter(|&n| n > 0)
}

/// How many skipped jobs the table names before "…".
const NAMED_SKIPS: usize = 3;

/// The replay for people: the log and its credit, the jobs, the cluster, the figures.
pub fn render_swf(run: &SwfRun) -> String {
    let mut out = format!("log: {}", run.log);
    let about: Vec<&str> = [&run.computer, &run.installation]
        .into_iter()
        .filter_map(|v| v.as_deref())
        .collect();
    if !about.is_empty() {
        out.push_str(&format!(" ({})", about.join(", ")));
    }
    out.push('\n');
    if let Some(who) = &run.acknowledge {
        out.push_str(&format!(
            "acknowledge: {who} (the Parallel Workloads Archive asks users of this log to credit them)\n"
        ));
    }
    let mut jobs = format!(
        "jobs: {} read, {} replayed, {} skipped",
        run.jobs_read,
        run.replayed,
        run.skipped.len()
    );
    if !run.skipped.is_empty() {
        let named: Vec<String> = run
            .skipped
            .iter()
            .take(NAMED_SKIPS)
            .map(|s| format!("line {}: {}", s.line, s.reason))
            .collect();
        let more = if run.skipped.len() > NAMED_SKIPS { "; …" } else { "" };
        jobs.push_str(&format!(" ({}{more})", named.join("; ")));
    }
    out.push_str(&jobs);
    out.push('\n');
    let leaves = match run.leaf_size {
        Some(n) => format!("leaves of up to {n} nodes"),
        None => "no HyperNodes".into(),
    };
    let procs = match run.procs_per_node {
        1 => "1 log processor per node".to_string(),
        p => format!("{p} log processors per node"),
    };
    let soft_after = run.soft_after.map_or(String::new(), |t| {
        format!(" (soft after {})", hyperplan_shared::timelimit::format_time_limit(t))
    });
    out.push_str(&format!(
        "cluster: {}, {} nodes, {leaves}; topology {}{soft_after}; {procs}; time scale {}\n\n",
        run.cluster, run.nodes, run.topology, run.time_scale
    ));
    let secs = |s: f64| {
        let whole = s.round() as u64;
        if whole >= 60 {
            format!("{whole} s ({})", crate::commands::span(whole))
        } else {
            format!("{whole} s")
        }
    };
    // Rounded down: "100.0 %" only when every job got one leaf.
    let share = |v: Option<f64>| {
        v.map_or_else(
            || "-".to_string(),
            |v| format!("{:.1} %", (v * 1000.0 + 1e-6).floor() / 10.0),
        )
    };
    let figures = |m: &TraceMetrics| -> [String; 8] {
        [
            format!("{} of {}", m.started, m.jobs),
            secs(m.mean_wait),
            secs(m.p95_wait as f64),
            secs(m.max_wait as f64),
            format!("{:.2}", m.bounded_slowdown),
            format!("{:.1} %", m.utilisation * 100.0),
            m.leaves_per_job.map_or_else(|| "-".into(), |v| format!("{v:.2}")),
            share(m.leaf_sized_in_one_leaf),
        ]
    };
    let labels = [
        "jobs started".to_string(),
        "mean wait".into(),
        "p95 wait".into(),
        "max wait".into(),
        format!("bounded slowdown (τ = {SLOWDOWN_BOUND_SECS} s)"),
        "utilisation".into(),
        "leaves per multi-node job".into(),
        "leaf-sized multi-node jobs in one leaf".into(),
    ];
    let mut columns = vec![figures(&run.metrics)];
    let mut header = vec!["FIGURE".to_string(), "VALUE".into()];
    if let Some(b) = &run.baselines {
        header = vec![
            "FIGURE".into(),
            "HYPERPLAN".into(),
            "EASY".into(),
            "TOPOLOGY-AWARE EASY".into(),
        ];
        columns.push(figures(&b.easy));
        columns.push(
            b.topology_aware_easy
                .as_ref()
                .map_or_else(|| std::array::from_fn(|_| "-".to_string()), figures),
        );
    }
    let mut rows = vec![header];
    for (k, label) in labels.into_iter().enumerate() {
        let mut row = vec![label];
        row.extend(columns.iter().map(|c| c[k].clone()));
        rows.push(row);
    }
    if let Some(n) = &run.noise {
        let mut spreads = vec![Some(n.hyperplan)];
        if run.baselines.is_some() {
            spreads.extend([n.easy, n.topology_aware_easy]);
        }
        let range = |s: &Option<Spread>, mean: bool| match s {
            Some(s) if mean => format!("{:.0}–{:.0} s", s.mean_wait[0], s.mean_wait[1]),
            Some(s) => format!("{}–{} s", s.max_wait[0], s.max_wait[1]),
            None => "-".into(),
        };
        let runs = n.copies + 1;
        for (label, mean) in [("mean wait", true), ("max wait", false)] {
            let mut row = vec![format!("{label}, {runs} runs 0–1 s apart")];
            row.extend(spreads.iter().map(|s| range(s, mean)));
            rows.push(row);
        }
    }
    out.push_str(&hyperplan_shared::columns::columns_of(&rows));
    if let Some(b) = &run.baselines {
        out.push_str(&match b.tree {
            Some([leaf, per, spines]) => format!(
                "baselines: the same jobs, one node per log processor; topology-aware EASY on {spines} \
                 spine(s) of {per} leaves of {leaf} nodes, {}\n",
                if run.topology == "leaf" {
                    "one leaf per job that fits one, wider jobs anywhere in as few leaves as the free nodes allow, \
                     as --topology leaf asks"
                } else {
                    "one leaf (or spine) per job as hard topology asks"
                }
            ),
            None => "baselines: the same jobs, one node per log processor; no topology-aware EASY: the \
                     cluster is not a regular fat tree (equal leaves under equal spines)\n"
                .into(),
        });
    }
    if let Some(n) = &run.noise {
        out.push_str(&format!(
            "noise: the jobs again {} time(s), each job submitted 0 or 1 s later (under the log's resolution); a \
             difference inside a column's range is chance\n",
            n.copies
        ));
        if let Some(p) = n.against_easy {
            out.push_str(&format!(
                "hyperplan against EASY, run by run: mean wait at or below in {} of {} runs, max wait in {}, both \
                 in {}\n",
                p.mean_at_or_below, p.runs, p.max_at_or_below, p.both
            ));
        }
    }
    for w in &run.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn swf_table() {
        let run = SwfRun {
            log: "kth.swf".into(),
            computer: Some("IBM SP2".into()),
            installation: Some("Swedish Royal Institute of Technology (KTH)".into()),
            acknowledge: Some("Lars Malinowsky".into()),
            cluster: "kth.yaml".into(),
            nodes: 100,
            leaf_size: Some(10),
            topology: "hard",
            soft_after: None,
            procs_per_node: 1,
            time_scale: 1.0,
            jobs_read: 6,
            replayed: 2,
            skipped: (1..=4)
                .map(|i| Skipped {
                    line: 20 + i,
                    reason: "no run time".into(),
                })
                .collect(),
            metrics: TraceMetrics {
                jobs: 2,
                started: 2,
                mean_wait: 1234.4,
                p95_wait: 7985,
                max_wait: 12,
                bounded_slowdown: 3.2468,
                utilisation: 0.4567,
                leaves_per_job: Some(1.25),
                leaf_sized_in_one_leaf: None,
                makespan: 99,
            },
            baselines: None,
            noise: None,
            warnings: vec![],
        };
        insta::assert_snapshot!(render_swf(&run), @r"
        log: kth.swf (IBM SP2, Swedish Royal Institute of Technology (KTH))
        acknowledge: Lars Malinowsky (the Parallel Workloads Archive asks users of this log to credit them)
        jobs: 6 read, 2 replayed, 4 skipped (line 21: no run time; line 22: no run time; line 23: no run time; …)
        cluster: kth.yaml, 100 nodes, leaves of up to 10 nodes; topology hard; 1 log processor per node; time scale 1

        FIGURE                                  VALUE
        jobs started                            2 of 2
        mean wait                               1234 s (20m34s)
        p95 wait                                7985 s (2h13m)
        max wait                                12 s
        bounded slowdown (τ = 10 s)             3.25
        utilisation                             45.7 %
        leaves per multi-node job               1.25
        leaf-sized multi-node jobs in one leaf  -
        ");
    }

    /// `--baselines`: three columns, and the tree the topology-aware EASY ran on (or why
    /// it did not run).
    #[test]
    fn swf_table_with_baselines() {
        let m = |mean: f64, max: u64, leaves: Option<f64>| TraceMetrics {
            jobs: 2,
            started: 2,
            mean_wait: mean,
            p95_wait: max,
            max_wait: max,
            bounded_slowdown: 1.5,
            utilisation: 0.5,
            leaves_per_job: leaves,
            leaf_sized_in_one_leaf: leaves.map(|_| 1.0),
            makespan: 99,
        };
        let mut run = SwfRun {
            log: "kth.swf".into(),
            computer: None,
            installation: None,
            acknowledge: None,
            cluster: "kth.yaml".into(),
            nodes: 100,
            leaf_size: Some(10),
            topology: "hard",
            soft_after: None,
            procs_per_node: 1,
            time_scale: 1.0,
            jobs_read: 2,
            replayed: 2,
            skipped: vec![],
            metrics: m(100.0, 300, Some(1.0)),
            baselines: Some(SwfBaselines {
                easy: m(90.0, 400, None),
                topology_aware_easy: Some(m(120.0, 500, Some(1.5))),
                tree: Some([10, 5, 2]),
            }),
            noise: None,
            warnings: vec![],
        };
        insta::assert_snapshot!("swf_table_with_baselines", render_swf(&run));
        // With `--topology leaf` the yardstick puts wider jobs anywhere, and says so.
        run.topology = "leaf";
        let leaf = render_swf(&run);
        assert!(
            leaf.contains("10 nodes, one leaf per job that fits one, wider jobs anywhere in as few leaves as the free nodes allow, as --topology leaf asks\n"),
            "{leaf}"
        );
        run.topology = "hard";
        run.baselines = Some(SwfBaselines {
            easy: m(90.0, 400, None),
            topology_aware_easy: None,
            tree: None,
        });
        insta::assert_snapshot!("swf_table_with_baselines_no_tree", render_swf(&run));
        // `--noise`: two rows of ranges, a column each, and a line that says what they are.
        run.baselines = Some(SwfBaselines {
            easy: m(90.0, 400, None),
            topology_aware_easy: Some(m(120.0, 500, Some(1.5))),
            tree: Some([10, 5, 2]),
        });
        let spread = |mean: [f64; 2], max: [u64; 2]| Spread {
            runs: 4,
            mean_wait: mean,
            max_wait: max,
        };
        run.noise = Some(SwfNoise {
            copies: 3,
            hyperplan: spread([99.6, 104.2], [300, 360]),
            easy: Some(spread([88.0, 90.0], [399, 400])),
            topology_aware_easy: Some(spread([120.0, 131.0], [480, 500])),
            against_easy: Some(Pairwise {
                runs: 4,
                mean_at_or_below: 0,
                max_at_or_below: 4,
                both: 0,
            }),
        });
        insta::assert_snapshot!("swf_table_with_noise", render_swf(&run));
    }
}
