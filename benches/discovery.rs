//! Fabric discovery inside the planner, on the issue-6 fabric (4,000 host CAs = 1,000
//! hosts × 4 rails, 700 switches) with all 1,000 hosts registered as nodes:
//!
//! - `load`: the tick that takes a freshly parsed dump: tiering with the agents' GUIDs,
//!   leaving out non-nodes, reconciling the HyperNodes, rebuilding the topology index.
//! - `register_one`: a tick in which one more agent registers during a registration
//!   storm; its GUIDs name 4 CAs, so the dump is tiered again.
//! - `unchanged_poll`: a tick after a poll that found the dump unchanged.
//!
//! Parsing itself is the fabric crate's bench (`cargo bench -p hyperplan-fabric`).

#![allow(clippy::expect_used)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use hyperplan_core::discovery::Found;
use hyperplan_core::model::components::SourceKind;
use hyperplan_core::testing::{MachineBuilder, res};
use hyperplan_core::{Event, Planner, PlannerConfig};
use hyperplan_fabric::synthetic::FatTreeDump;
use hyperplan_fabric::{GuidMap, IbFabric, parse_ibnetdiscover};
use hyperplan_shared::NodeSpec;
use hyperplan_shared::topology::{InfinibandHca, SharedTopology};

const SPEC: FatTreeDump = FatTreeDump::ISSUE_6;

/// Host `h` (0-based) as the agent registers it: `gpu{h+1:05}`, one HCA per rail with
/// the node GUID the synthetic dump gives that rail's CA.
fn node(h: usize) -> NodeSpec {
    let mut t = MachineBuilder::new(2, 1, 32, 2).build();
    for r in 0..SPEC.rails {
        let g = format!("{:016x}", 0x4000_0000 + (h * SPEC.rails + r) as u64);
        t.hcas.push(InfinibandHca {
            name: format!("mlx5_{r}"),
            node_guid: Some(format!("{}:{}:{}:{}", &g[0..4], &g[4..8], &g[8..12], &g[12..16])),
            ..InfinibandHca::default()
        });
    }
    NodeSpec {
        name: format!("gpu{:05}", h + 1),
        labels: BTreeMap::new(),
        resources: res("cpu=128,memory=512Gi"),
        used: Default::default(),
        topology: None,
        hardware: Some(SharedTopology::new(t)),
    }
}

fn fabric(f: &Arc<IbFabric>) -> Event {
    Event::Discovered {
        source: "fabric".into(),
        kind: SourceKind::Ibnetdiscover,
        at: 1,
        result: Ok(Found::Fabric {
            fabric: f.clone(),
            map_file: GuidMap::new(),
        }),
    }
}

/// A planner with `hosts` nodes registered and ticked, nothing discovered yet.
fn planner(hosts: usize) -> Planner {
    let mut p = Planner::new(PlannerConfig::default());
    for h in 0..hosts {
        p.push(Event::NodeUp(node(h)));
    }
    p.tick(0);
    p
}

fn bench(c: &mut Criterion) {
    let hosts = SPEC.pods * SPEC.hosts_per_pod;
    let dump = Arc::new(parse_ibnetdiscover(&SPEC.generate(), Path::new("synthetic.out")).expect("synthetic dump"));
    let mut group = c.benchmark_group("discovery");
    group.sample_size(10);

    let mut loaded = planner(hosts);
    loaded.push(fabric(&dump));
    loaded.tick(1);
    let hns = loaded.index().hns.len();
    // 25 pod leaf groups (multi-rail hosts join a pod's leaves), 25 spine groups, a core, the root.
    assert_eq!(hns, 52, "the fabric gave {hns} HyperNodes");

    group.bench_function("load_4000ca_700sw_1000nodes", |b| {
        b.iter_batched_ref(
            || planner(hosts),
            |p| {
                p.push(fabric(&dump));
                black_box(p.tick(1))
            },
            BatchSize::PerIteration,
        )
    });

    group.bench_function("register_one_of_1000", |b| {
        b.iter_batched_ref(
            || {
                let mut p = planner(hosts - 1);
                p.push(fabric(&dump));
                p.tick(1);
                p
            },
            |p| {
                p.push(Event::NodeUp(node(hosts - 1)));
                black_box(p.tick(2))
            },
            BatchSize::PerIteration,
        )
    });

    group.bench_function("unchanged_poll", |b| {
        b.iter(|| {
            loaded.push(Event::Discovered {
                source: "fabric".into(),
                kind: SourceKind::Ibnetdiscover,
                at: 3,
                result: Ok(Found::Unchanged),
            });
            black_box(loaded.tick(3))
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
