//! Property tests: random fat trees, random busy nodes and random jobs. After every tick
//! the invariants hold (nothing given twice, gangs whole, hard tier limits kept), and the
//! same inputs give the same report. The NUMA property adds random machines (sockets,
//! NUMA nodes, SMT, GPUs) and random topology policies: no PU, GPU or byte of NUMA memory
//! is given twice, and single-numa-node tasks stay on one NUMA node.

use hyperplan_planner::PlannerConfig;
use hyperplan_planner::testing::{ClusterBuilder, JobBuilder, MachineBuilder, run};
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
