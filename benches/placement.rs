//! Placement benchmarks on generated fat trees (see `benches/README.md`).
//!
//! Cluster: `fattree::generate` with fanout 16,32,8 (16 nodes per leaf, 32 leaves per
//! spine group, 8 spine groups per pod, one `top` over the pods), every node
//! `cpu=128,memory=1Ti,nvidia.com/gpu=8`, 10 % of nodes fully busy (fixed seed).
//!
//! Every measurement starts from a fresh `Planner` loaded with the cluster and ticked
//! once, so the topology index and resource cache are built; that set-up is not timed.
//! Only the tick that places the submitted jobs is timed (`iter_custom`).
//!
//! - `gang_3000/10k`: (a) one hard tier-3 gang of 3,000 tasks × 8 GPUs.
//! - `small_jobs_1000/10k`: (b) 1,000 jobs of 1–4 whole-node tasks, hard tier 1 or 2,
//!   all submitted before one tick; throughput is in placed tasks per second.
//! - `scale_gang/{1k,10k,50k}`, `scale_small_jobs/{1k,10k,50k}`: the same at 1,000,
//!   10,000 and 50,000 nodes (at 1,000 nodes the gang is 300 tasks and there are 100
//!   small jobs, so that they fit).
//! - `idle_tick/10k*`: the steady-state tick with nothing to place.
//! - `numa_gang_3000/10k`: (issue 4) the 10,000 nodes as two-socket machines (2 × 32
//!   cores × 2 threads, 512 GiB and 4 GPUs + 2 HCAs per socket); one hard tier-3 gang of
//!   3,000 single-numa-node tasks × (16 PUs, 64 GiB, 4 GPUs): every task gets its own
//!   PUs, memory and GPUs on one NUMA node, and its rails.
//! - `one_job/{2k,8k,50k}/{8,64,512}`: (issue 11) the daemon's steady state: one tick
//!   placing one soft-mode job of 8, 64 or 512 whole-node tasks on a fragmented fat tree
//!   (fanout 16,8; 16,8,8 at 50k) whose ~46 % busy nodes, chosen at random, hold running
//!   single-task jobs of this planner. Between measured ticks the job is cancelled (an
//!   untimed tick), so every measured tick starts from the same warm planner.
//!
//! Run on one core: `taskset -c 0 cargo bench --bench placement`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hyperplan_core::sim::SIM_OWNER;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{
    BenchmarkGroup, Criterion, SamplingMode, Throughput, criterion_group, criterion_main, measurement::WallTime,
};
use hyperplan_core::sim::planner_for;
use hyperplan_core::testing::{JobBuilder, MachineBuilder, hardware_resources};
use hyperplan_core::{Command, Event, Planner, PlannerConfig};
use hyperplan_shared::fattree::{self, FatTreeParams};
use hyperplan_shared::quantity::parse_resource_list;
use hyperplan_shared::topology::SharedTopology;
use hyperplan_shared::{ClusterSpec, JobSpec, Resources};

/// The daemon's allocator (`planner/src/main.rs`), so the figures are the daemon's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SEED: u64 = 20_240_601;
const FANOUT: [u32; 3] = [16, 32, 8];
const NODE_RESOURCES: &str = "cpu=128,memory=1Ti,nvidia.com/gpu=8";
const TASK_RESOURCES: &str = "cpu=16,memory=64Gi,nvidia.com/gpu=8";

fn cluster(nodes: u32) -> ClusterSpec {
    let params = FatTreeParams {
        nodes,
        fanout: FANOUT.to_vec(),
        node_resources: parse_resource_list(NODE_RESOURCES).expect("node resources"),
        busy: 0.1,
        seed: SEED,
        prefix: "node".to_string(),
    };
    fattree::generate(&params).expect("fat tree")
}

/// `cluster(nodes)` with every node a two-socket machine (its resources from it).
fn numa_cluster(nodes: u32) -> ClusterSpec {
    let mut c = cluster(nodes);
    let machine = MachineBuilder::new(2, 1, 32, 2)
        .memory_per_numa(512 << 30)
        .gpus_per_numa(4)
        .hcas_per_numa(2)
        .build();
    let resources = hardware_resources(&machine);
    let shared = SharedTopology::new(machine);
    for n in &mut c.nodes {
        let busy = n.used == n.resources;
        n.resources = resources.clone();
        n.used = if busy { resources.clone() } else { Default::default() };
        n.hardware = Some(shared.clone());
    }
    c
}

/// A planner holding `cluster`, ticked once: the index and the resource cache are built.
fn ready_planner(cluster: &ClusterSpec) -> Planner {
    let mut planner = planner_for(cluster, PlannerConfig::default());
    let cmds = planner.tick(0);
    assert!(
        !cmds
            .iter()
            .any(|c| matches!(c, Command::Place(_) | Command::Reject { .. })),
        "the set-up tick must not place or reject anything"
    );
    planner
}

/// (a): one hard tier-3 gang of `tasks` × 8 GPUs.
fn gang_job(tasks: u32) -> Vec<JobSpec> {
    vec![JobBuilder::gang("big", tasks, TASK_RESOURCES).hard(3).build()]
}

/// (b): `count` jobs of 1–4 whole-node tasks (8 GPUs each), hard tier 1 or 2; sizes
/// and tiers from a fixed-seed xorshift, so every run submits the same jobs.
fn small_jobs(count: usize) -> Vec<JobSpec> {
    let mut state: u64 = SEED | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..count)
        .map(|i| {
            let replicas = (next() % 4) as u32 + 1;
            let tier = (next() % 2) as u32 + 1;
            JobBuilder::gang(&format!("small-{i:05}"), replicas, TASK_RESOURCES)
                .hard(tier)
                .build()
        })
        .collect()
}

fn task_count(jobs: &[JobSpec]) -> u64 {
    jobs.iter().flat_map(|j| &j.tasks).map(|t| u64::from(t.replicas)).sum()
}

/// Submits `jobs` to a ready planner and runs the placing tick; returns its commands
/// and how long the tick took.
fn place_once(cluster: &ClusterSpec, jobs: &[JobSpec]) -> (Vec<Command>, Duration, Planner) {
    let mut planner = ready_planner(cluster);
    for j in jobs {
        hyperplan_core::sim::submit::submit(&mut planner, j.clone(), SIM_OWNER);
    }
    let start = Instant::now();
    let cmds = planner.tick(1);
    let took = start.elapsed();
    (cmds, took, planner)
}

/// Checks once, outside the timing, that the tick placed every task.
fn assert_all_placed(cluster: &ClusterSpec, jobs: &[JobSpec], what: &str) {
    let (cmds, took, _) = place_once(cluster, jobs);
    let placed = cmds.iter().filter(|c| matches!(c, Command::Place(_))).count() as u64;
    let rejected: Vec<&Command> = cmds.iter().filter(|c| matches!(c, Command::Reject { .. })).collect();
    assert!(rejected.is_empty(), "{what}: rejected: {rejected:?}");
    assert_eq!(placed, task_count(jobs), "{what}: not every task was placed");
    eprintln!("{what}: {placed} tasks placed in one tick, first run {took:?}");
}

/// Times only the placing tick; set-up (loading and indexing the cluster, submitting)
/// and tear-down (dropping the planner) stay outside.
///
/// The first time the benchmark runs (only if the filter selects it), it checks that
/// every task is placed.
fn bench_place(
    group: &mut BenchmarkGroup<'_, WallTime>,
    group_name: &str,
    id: &str,
    cluster: &ClusterSpec,
    jobs: &[JobSpec],
) {
    group.throughput(Throughput::Elements(task_count(jobs)));
    let what = format!("{group_name}/{id}");
    let mut checked = false;
    group.bench_function(id, |b| {
        if !checked {
            assert_all_placed(cluster, jobs, &what);
            checked = true;
        }
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let (cmds, took, planner) = place_once(cluster, jobs);
                total += took;
                black_box(&cmds);
                drop(planner);
            }
            total
        });
    });
}

/// Slow set-up, so: few samples, flat sampling (each sample the same iteration count),
/// a short warm-up.
fn configure(group: &mut BenchmarkGroup<'_, WallTime>) {
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_secs(2));
}

struct Scale {
    label: &'static str,
    nodes: u32,
    gang_tasks: u32,
    small_jobs: usize,
}

const SCALES: &[Scale] = &[
    Scale {
        label: "1k",
        nodes: 1_000,
        gang_tasks: 300,
        small_jobs: 100,
    },
    Scale {
        label: "10k",
        nodes: 10_000,
        gang_tasks: 3_000,
        small_jobs: 1_000,
    },
    Scale {
        label: "50k",
        nodes: 50_000,
        gang_tasks: 3_000,
        small_jobs: 1_000,
    },
];

/// The two targets on the 10,000-node cluster, and the idle tick.
fn targets(c: &mut Criterion) {
    let cluster = cluster(10_000);

    let gang = gang_job(3_000);
    let mut group = c.benchmark_group("gang_3000");
    configure(&mut group);
    bench_place(&mut group, "gang_3000", "10k", &cluster, &gang);
    group.finish();

    let small = small_jobs(1_000);
    let mut group = c.benchmark_group("small_jobs_1000");
    configure(&mut group);
    bench_place(&mut group, "small_jobs_1000", "10k", &cluster, &small);
    group.finish();

    let numa = numa_cluster(10_000);
    let pinned = vec![
        JobBuilder::gang("pinned", 3_000, "cpu=16,memory=64Gi,nvidia.com/gpu=4")
            .numa("single-numa-node")
            .hard(3)
            .build(),
    ];
    let mut group = c.benchmark_group("numa_gang_3000");
    configure(&mut group);
    bench_place(&mut group, "numa_gang_3000", "10k", &numa, &pinned);
    group.finish();

    // The daemon ticks every second: the cost of a tick with nothing new to do, on an
    // empty cluster and with the 1,000 small jobs running.
    let mut group = c.benchmark_group("idle_tick");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    // Planners are built on first use, so a filter that skips a benchmark skips its set-up.
    let mut empty: Option<Planner> = None;
    let mut now = 1;
    group.bench_function("10k", |b| {
        let planner = empty.get_or_insert_with(|| ready_planner(&cluster));
        b.iter(|| {
            now += 1;
            black_box(planner.tick(now))
        });
    });
    let mut running: Option<Planner> = None;
    group.bench_function("10k_1000_jobs_running", |b| {
        let planner = running.get_or_insert_with(|| {
            let (_, _, mut planner) = place_once(&cluster, &small);
            planner.tick(2);
            planner
        });
        b.iter(|| {
            now += 1;
            let cmds = planner.tick(now);
            assert!(
                !cmds
                    .iter()
                    .any(|c| matches!(c, Command::Place(_) | Command::Reject { .. }))
            );
            black_box(cmds)
        });
    });
    group.finish();
}

/// How the cost grows from 1,000 to 10,000 to 50,000 nodes.
fn scale(c: &mut Criterion) {
    let clusters: Vec<(&Scale, ClusterSpec)> = SCALES.iter().map(|s| (s, cluster(s.nodes))).collect();

    let mut group = c.benchmark_group("scale_gang");
    configure(&mut group);
    for (s, cluster) in &clusters {
        bench_place(&mut group, "scale_gang", s.label, cluster, &gang_job(s.gang_tasks));
    }
    group.finish();

    let mut group = c.benchmark_group("scale_small_jobs");
    configure(&mut group);
    for (s, cluster) in &clusters {
        bench_place(
            &mut group,
            "scale_small_jobs",
            s.label,
            cluster,
            &small_jobs(s.small_jobs),
        );
    }
    group.finish();

    let mut group = c.benchmark_group("scale_idle_tick");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_secs(1));
    for (s, cluster) in &clusters {
        let mut ready: Option<Planner> = None;
        let mut now = 1;
        group.bench_function(s.label, |b| {
            let planner = ready.get_or_insert_with(|| ready_planner(cluster));
            b.iter(|| {
                now += 1;
                black_box(planner.tick(now))
            });
        });
    }
    group.finish();
}

/// Issue 11: the share of busy nodes and the task that takes a whole node.
const ONE_JOB_BUSY: f64 = 0.46;
const WHOLE_NODE: &str = NODE_RESOURCES;

/// A planner on a `nodes`-node fat tree (`fanout`) whose busy nodes (~46 %, at random)
/// run one single-task job each, placed by the planner itself, ticked until idle: the
/// index is built, the caches are warm, nothing is left to do.
fn fragmented_planner(nodes: u32, fanout: &[u32]) -> Planner {
    let params = FatTreeParams {
        nodes,
        fanout: fanout.to_vec(),
        node_resources: parse_resource_list(NODE_RESOURCES).expect("node resources"),
        busy: ONE_JOB_BUSY,
        seed: SEED,
        prefix: "node".to_string(),
    };
    let spec = fattree::generate(&params).expect("fat tree");
    let busy: Vec<bool> = spec.nodes.iter().map(|n| n.used == n.resources).collect();
    // First only the nodes meant to be busy are free, so the background jobs land there.
    let mut first = spec.clone();
    for (n, &b) in first.nodes.iter_mut().zip(&busy) {
        n.used = if b { Resources::new() } else { n.resources.clone() };
    }
    let mut planner = planner_for(&first, PlannerConfig::default());
    let count = busy.iter().filter(|b| **b).count();
    for i in 0..count {
        hyperplan_core::sim::submit::submit(
            &mut planner,
            JobBuilder::gang(&format!("bg-{i:06}"), 1, WHOLE_NODE).build(),
            SIM_OWNER,
        );
    }
    let cmds = planner.tick(0);
    let placed = cmds.iter().filter(|c| matches!(c, Command::Place(_))).count();
    assert_eq!(placed, count, "every background job runs");
    // Then the other nodes are free again.
    for (n, &b) in spec.nodes.iter().zip(&busy) {
        if !b {
            let mut n = n.clone();
            n.used = Resources::new();
            planner.push(Event::NodeUp(n));
        }
    }
    planner.tick(1);
    planner.tick(2);
    planner
}

/// Issue 11: one tick placing one soft-mode job of `size` whole-node tasks, from a warm
/// planner; the job is cancelled in an untimed tick afterwards.
fn one_job(c: &mut Criterion) {
    const SIZES: [u32; 3] = [8, 64, 512];
    let scales: [(&str, u32, &[u32]); 3] = [
        ("2k", 2_048, &[16, 8]),
        ("8k", 8_192, &[16, 8]),
        ("50k", 50_000, &[16, 8, 8]),
    ];
    let mut group = c.benchmark_group("one_job");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for (label, nodes, fanout) in scales {
        // Built on first use, so a filter that skips a scale skips its set-up.
        let mut ready: Option<Planner> = None;
        let mut now = 10;
        let mut seq = 0u64;
        for size in SIZES {
            group.throughput(Throughput::Elements(u64::from(size)));
            group.bench_function(format!("{label}/{size}"), |b| {
                let planner = ready.get_or_insert_with(|| fragmented_planner(nodes, fanout));
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        seq += 1;
                        let name = format!("one-{seq:07}");
                        now += 1;
                        // Its admission is timed with the tick, as when it came as an event.
                        let start = Instant::now();
                        hyperplan_core::sim::submit::submit(
                            planner,
                            JobBuilder::gang(&name, size, WHOLE_NODE).soft().build(),
                            SIM_OWNER,
                        );
                        let cmds = planner.tick(now);
                        total += start.elapsed();
                        let placed = cmds.iter().filter(|c| matches!(c, Command::Place(_))).count();
                        assert_eq!(placed, size as usize, "{label}/{size}: the job is placed whole");
                        black_box(cmds);
                        planner.push(Event::Cancel {
                            job: name,
                            grace_secs: 0,
                            by_admin: false,
                        });
                        now += 1;
                        black_box(planner.tick(now));
                    }
                    total
                });
            });
        }
    }
    group.finish();
}

criterion_group!(benches, targets, scale, one_job);
criterion_main!(benches);
