//! Property tests: random fat trees, random busy nodes and random jobs. After every tick
//! the invariants hold (nothing given twice, gangs whole, hard tier limits kept), and the
//! same inputs give the same report.

use hyperplan_planner::PlannerConfig;
use hyperplan_planner::testing::{ClusterBuilder, JobBuilder, run};
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
