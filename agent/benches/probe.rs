//! How long probing one machine from its hwloc XML takes, for every held-out dump in
//! `testdata/hwloc-xml` (the test `hwloc_xml` once asserted "under 2 s" on wall time;
//! speed belongs here). Each file is probed `ROUNDS` times (default 5); the median and the
//! slowest are printed per file, then the slowest median of all.
//!
//! `cargo bench -p hyperplan-agent --bench probe`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use hyperplan_agent::probe::hwloc::{HwlocSource, probe_hwloc};

fn main() {
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(5)
        .max(1);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/hwloc-xml");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "xml"))
        .collect();
    files.sort();
    let mut worst = (Duration::ZERO, String::new());
    println!("{:<48} {:>10} {:>10}", "file", "median", "max");
    for file in &files {
        let mut times: Vec<Duration> = (0..rounds)
            .map(|_| {
                let started = Instant::now();
                let node = probe_hwloc(HwlocSource::XmlFile(file)).unwrap();
                let took = started.elapsed();
                assert!(!node.numa_nodes.is_empty());
                took
            })
            .collect();
        times.sort();
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let median = times[times.len() / 2];
        println!("{name:<48} {median:>10.2?} {:>10.2?}", times[times.len() - 1]);
        if median > worst.0 {
            worst = (median, name);
        }
    }
    println!("slowest median: {:.2?} ({})", worst.0, worst.1);
}
