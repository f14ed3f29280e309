//! Property tests: random fat trees, random busy nodes and random jobs. After every tick
//! the invariants hold (nothing given twice, gangs whole, hard tier limits kept), and the
//! same inputs give the same report. The NUMA property adds random machines (sockets,
//! NUMA nodes, SMT, GPUs) and random topology policies: no PU, GPU or byte of NUMA memory
//! is given twice, and single-numa-node tasks stay on one NUMA node.

use hyperplan_core::PlannerConfig;
use hyperplan_core::sim::SIM_OWNER;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, MachineBuilder, run};
use hyperplan_shared::JobSpec;
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct JobShape {
    replicas: u32,
    cpu: u32,
    gpu: u32,
    mode: u8,
    tier: u32,
    min: Option<u32>,
    partitions: Option<(u32, u32, u32)>,
    runtime: Option<u64>,
    submit: u64,
    priority: i32,
}

fn job_shape() -> impl Strategy<Value = JobShape> {
    (
        1u32..7,
        prop_oneof![Just(1u32), Just(2), Just(4), Just(8)],
        0u32..5,
        0u8..4,
        0u32..5,
        proptest::option::of(1u32..4),
        proptest::option::weighted(0.3, (1u32..4, 1u32..3, 0u32..4)),
        proptest::option::weighted(0.7, 1u64..50),
        0u64..40,
        -1i32..2,
    )
        .prop_map(
            |(replicas, cpu, gpu, mode, tier, min, partitions, runtime, submit, priority)| JobShape {
                replicas,
                cpu,
                gpu,
                mode,
                tier,
                min,
                partitions,
                runtime,
                submit,
                priority,
            },
        )
}

fn to_spec(i: usize, s: &JobShape) -> JobSpec {
    let mut b = JobBuilder::gang(
        &format!("job-{i:02}"),
        s.replicas,
        &format!("cpu={},nvidia.com/gpu={}", s.cpu, s.gpu),
    )
    .priority(s.priority)
    .submit(s.submit);
    b = match s.mode {
        0 => b,
        1 => b.soft(),
        _ => b.hard(s.tier),
    };
    if let Some((total, size, min)) = s.partitions {
        b = b.partitions(
            total,
            size,
            min.min(total),
            if s.tier > 0 { Some(s.tier.min(2)) } else { None },
        );
    } else if let Some(m) = s.min {
        b = b.min_available(m.min(s.replicas));
    }
    if let Some(r) = s.runtime {
        b = b.runtime(r);
    }
    b.build()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_and_runs_repeat(
        leaf in 1u32..4,
        upper in proptest::collection::vec(2u32..4, 0..3),
        top in 1u32..3,
        busy in proptest::collection::vec(0usize..40, 0..6),
        jobs in proptest::collection::vec(job_shape(), 1..8),
    ) {
        let mut fanout = vec![leaf];
        fanout.extend(upper);
        let mut b = ClusterBuilder::fat_tree(&fanout, top).node_resources("cpu=8,memory=32Gi,nvidia.com/gpu=4");
        for i in busy {
            b = b.used(i, "cpu=4,nvidia.com/gpu=2");
        }
        let cluster = b.build();
        let specs: Vec<JobSpec> = jobs.iter().enumerate().map(|(i, s)| to_spec(i, s)).collect();
        // `run` asserts the invariants after every tick.
        let one = run(&cluster, &specs, PlannerConfig::default());
        let two = run(&cluster, &specs, PlannerConfig::default());
        prop_assert_eq!(&one, &two);
        let placed = one.jobs.iter().filter(|j| j.status == hyperplan_shared::report::JobStatus::Placed).count();
        prop_assert_eq!(placed as u32, one.summary.placed);
    }
}

#[derive(Debug, Clone)]
struct NumaJob {
    replicas: u32,
    cpu: u32,
    gpu: u32,
    memory_gi: u32,
    policy: u8,
    spread: bool,
    full_cores: bool,
    hard: bool,
    runtime: Option<u64>,
    submit: u64,
}

fn numa_job() -> impl Strategy<Value = NumaJob> {
    (
        1u32..5,
        0u32..10,
        0u32..4,
        0u32..12,
        0u8..4,
        any::<bool>(),
        proptest::bool::weighted(0.2),
        proptest::bool::weighted(0.3),
        proptest::option::weighted(0.7, 1u64..30),
        0u64..20,
    )
        .prop_map(
            |(replicas, cpu, gpu, memory_gi, policy, spread, full_cores, hard, runtime, submit)| NumaJob {
                replicas,
                cpu,
                gpu,
                memory_gi,
                policy,
                spread,
                full_cores,
                hard,
                runtime,
                submit,
            },
        )
}

fn numa_spec(i: usize, s: &NumaJob) -> JobSpec {
    let policy = ["none", "best-effort", "restricted", "single-numa-node"][s.policy as usize % 4];
    let mut b = JobBuilder::gang(
        &format!("job-{i:02}"),
        s.replicas,
        &format!("cpu={},memory={}Gi,nvidia.com/gpu={}", s.cpu, s.memory_gi, s.gpu),
    )
    .numa(policy)
    .submit(s.submit);
    if s.spread {
        b = b.cpu_placement("spread");
    }
    if s.full_cores {
        b = b.full_cores();
    }
    if s.hard {
        b = b.hard(1);
    }
    if let Some(r) = s.runtime {
        b = b.runtime(r);
    }
    b.build()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn numa_assignments_never_overlap(
        packages in 1u32..3,
        numa_per_package in 1u32..3,
        cores in 1u32..6,
        threads in 1u32..3,
        gpus_per_numa in 0u32..3,
        leaf in 1u32..4,
        jobs in proptest::collection::vec(numa_job(), 1..10),
    ) {
        let machine = MachineBuilder::new(packages, numa_per_package, cores, threads)
            .memory_per_numa(8 << 30)
            .gpus_per_numa(gpus_per_numa)
            .hcas_per_numa(1)
            .build();
        let cluster = ClusterBuilder::fat_tree(&[leaf], 2).hardware(machine).build();
        let specs: Vec<JobSpec> = jobs.iter().enumerate().map(|(i, s)| numa_spec(i, s)).collect();
        // `run` asserts the invariants (NUMA ones included) after every tick.
        let one = run(&cluster, &specs, PlannerConfig::default());
        let two = run(&cluster, &specs, PlannerConfig::default());
        prop_assert_eq!(&one, &two);
        for j in &one.jobs {
            let single = specs.iter().any(|s| s.name == j.name
                && s.tasks[0].topology_policy.as_deref() == Some("single-numa-node"));
            for t in j.tasks.iter().filter(|t| t.node.is_some()) {
                if single {
                    prop_assert!(t.numa_nodes.len() <= 1, "{} spans {:?}", t.name, t.numa_nodes);
                }
            }
        }
    }
}

/// One step of a random daemon life: what happens between two ticks.
#[derive(Debug, Clone)]
enum Step {
    /// A job of `replicas` × (`cpu`, `gpu`), NUMA-pinned or not, soft, hard or flat.
    Submit {
        replicas: u32,
        cpu: u32,
        gpu: u32,
        pinned: bool,
        mode: u8,
    },
    Cancel(usize),
    Finish(usize, u32),
    Ready(usize, bool),
    /// The node registers again (an agent restart): same spec, or bigger with some
    /// outside use (and once bigger it stays so: a node shrunk under its running tasks
    /// would break "nothing given twice" by itself).
    Reregister(usize, bool),
    Gone(usize),
    /// Several steps before one tick.
    Batch(Vec<Step>),
}

fn single_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (1u32..5, 1u32..9, 0u32..3, any::<bool>(), 0u8..3)
            .prop_map(|(replicas, cpu, gpu, pinned, mode)| Step::Submit { replicas, cpu, gpu, pinned, mode }),
        2 => (0usize..12).prop_map(Step::Cancel),
        3 => (0usize..12, 0u32..5).prop_map(|(j, t)| Step::Finish(j, t)),
        1 => (0usize..8, any::<bool>()).prop_map(|(n, r)| Step::Ready(n, r)),
        1 => (0usize..8, any::<bool>()).prop_map(|(n, g)| Step::Reregister(n, g)),
        1 => (0usize..8).prop_map(Step::Gone),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => single_step(),
        1 => proptest::collection::vec(single_step(), 2..5).prop_map(Step::Batch),
    ]
}

fn push_step(
    planner: &mut hyperplan_core::Planner,
    cluster: &hyperplan_shared::ClusterSpec,
    jobs: &mut usize,
    grown: &mut Vec<bool>,
    step: &Step,
) {
    use hyperplan_core::Event;
    let node = |i: usize| &cluster.nodes[i % cluster.nodes.len()];
    match step {
        Step::Submit {
            replicas,
            cpu,
            gpu,
            pinned,
            mode,
        } => {
            let mut b = JobBuilder::gang(
                &format!("job-{:02}", *jobs),
                *replicas,
                &format!("cpu={cpu},memory=2Gi,nvidia.com/gpu={gpu}"),
            );
            if *pinned {
                b = b.numa("single-numa-node");
            }
            b = match mode {
                0 => b,
                1 => b.soft(),
                _ => b.hard(2),
            };
            *jobs += 1;
            hyperplan_core::sim::submit::submit(planner, b.build(), SIM_OWNER);
        }
        Step::Cancel(j) => planner.push(Event::Cancel {
            job: format!("job-{j:02}"),
            grace_secs: 0,
            by_admin: false,
        }),
        Step::Finish(j, t) => planner.push(Event::TaskFinished {
            job: format!("job-{j:02}"),
            task: format!("worker-{t}"),
            index: *t,
        }),
        Step::Ready(n, ready) => planner.push(Event::NodeReady {
            name: node(*n).name.clone(),
            ready: *ready,
        }),
        Step::Reregister(n, grow) => {
            let mut spec = node(*n).clone();
            let i = *n % cluster.nodes.len();
            grown[i] |= *grow;
            if grown[i] {
                spec.resources.0.insert("cpu".into(), 16_000);
                spec.used.0.insert("cpu".into(), 4_000);
            }
            planner.push(Event::NodeUp(spec));
        }
        Step::Gone(n) => planner.push(Event::NodeGone {
            name: node(*n).name.clone(),
        }),
        Step::Batch(steps) => {
            for s in steps {
                push_step(planner, cluster, jobs, grown, s);
            }
        }
    }
}

fn has_gone(step: &Step) -> bool {
    match step {
        Step::Gone(_) => true,
        Step::Batch(steps) => steps.iter().any(has_gone),
        _ => false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The resource caches live across ticks and follow what changed (placements,
    /// finished and cancelled tasks, node readiness, re-registration, nodes gone): after
    /// every tick they equal caches built afresh (`invariants::check` compares them),
    /// and nothing is given twice.
    #[test]
    fn caches_follow_random_events(steps in proptest::collection::vec(step(), 1..30)) {
        let machine = MachineBuilder::new(1, 2, 4, 1)
            .memory_per_numa(8 << 30)
            .gpus_per_numa(1)
            .build();
        let cluster = ClusterBuilder::fat_tree(&[2, 2], 2).hardware(machine).build();
        let mut planner = hyperplan_core::sim::planner_for(&cluster, PlannerConfig::default());
        let mut jobs = 0;
        let mut gone = false;
        let mut grown = vec![false; cluster.nodes.len()];
        for (now, s) in steps.iter().enumerate() {
            push_step(&mut planner, &cluster, &mut jobs, &mut grown, s);
            gone |= has_gone(s);
            planner.tick(now as u64);
            let mut bad = planner.violations();
            if gone {
                // A node gone keeps its tasks (as running on no known node) and breaks
                // the HyperNodes that named it: a hard job placed before may sit under no
                // HyperNode of its tier any more, a pinned task on no known hardware.
                const AFTER_GONE: [&str; 3] = ["placed across tier", "no HyperNode holds", "runs without an assignment"];
                bad.retain(|b| !AFTER_GONE.iter().any(|m| b.contains(m)));
            }
            prop_assert!(bad.is_empty(), "after step {now} ({s:?}): {bad:#?}");
        }
    }
}
