//! Parsing and tiering a 4,000-CA, 700-switch fat-tree `ibnetdiscover` dump (issue 6
//! target: ≤ 1 s), with and without a SHARP CA on every switch.

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use hyperplan_fabric::synthetic::FatTreeDump;
use hyperplan_fabric::{HostNames, discover, parse_ibnetdiscover};

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("discover");
    group.sample_size(20);
    for (name, sharp) in [("4000ca_700sw", false), ("4000ca_700sw_sharp", true)] {
        let text = FatTreeDump {
            sharp,
            ..FatTreeDump::ISSUE_6
        }
        .generate();
        let names = HostNames::default();
        group.bench_function(format!("parse_{name}"), |b| {
            b.iter(|| parse_ibnetdiscover(black_box(&text), Path::new("synthetic.out")))
        });
        group.bench_function(format!("parse_and_tier_{name}"), |b| {
            b.iter(|| {
                parse_ibnetdiscover(black_box(&text), Path::new("synthetic.out"))
                    .and_then(|f| discover(&f, &names))
                    .map(|d| d.hypernodes.len())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
