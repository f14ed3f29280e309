//! NUMA decisions per task: topology-manager hints + merge (`hints::decide`) and the
//! concrete CPU/GPU/memory choice (`assign::assign`) on a 2-NUMA, a 24-NUMA (like
//! `xml__192em64t-24n8c2t.xml`: 24 × 8 cores × 2 threads) and a 34-NUMA GB200-like tray
//! (2 NUMA nodes with 72 cores each + 32 CPU-less GPU-memory NUMA nodes, 1 GPU each).
//! Target (issue 4): ≤ 1 ms per task on the 24- and 34-NUMA machines.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use hyperplan_core::numa::assign::{TaskNuma, apply, assign};
use hyperplan_core::numa::cpus::CpuPlacement;
use hyperplan_core::numa::hints::{Policy, Request, decide};
use hyperplan_core::numa::{GpuInfo, NumaMachine, NumaMask, PuInfo};

const GIB: u64 = 1 << 30;

/// `numa` NUMA nodes with CPUs (`cores` × 2 threads each, one socket per `per_socket`
/// NUMA nodes), `gpu_numa` extra CPU-less NUMA nodes with one GPU each, `gpus_per_numa`
/// GPUs on each CPU NUMA node.
fn machine(numa: u32, cores: u32, per_socket: u32, gpus_per_numa: u32, gpu_numa: u32) -> NumaMachine {
    let threads = numa * cores;
    let mut pus = Vec::new();
    for n in 0..numa {
        for c in 0..cores {
            let core = n * cores + c;
            for t in 0..2 {
                pus.push(PuInfo {
                    os: core + t * threads,
                    core,
                    socket: n / per_socket,
                    numa: n,
                });
            }
        }
    }
    pus.sort_by_key(|p| p.os);
    let total = numa + gpu_numa;
    let mut gpus = Vec::new();
    for n in 0..numa {
        for g in 0..gpus_per_numa {
            gpus.push(GpuInfo {
                pci_bus_id: format!("0000:{n:02x}:{g:02x}.0"),
                numa: NumaMask::single(n as usize),
            });
        }
    }
    for n in numa..total {
        gpus.push(GpuInfo {
            pci_bus_id: format!("0001:{n:02x}:00.0"),
            numa: NumaMask::single(n as usize),
        });
    }
    NumaMachine {
        numa_os: (0..total).collect(),
        numa_memory: (0..total)
            .map(|n| if n < numa { 64 * GIB } else { 180 * GIB })
            .collect(),
        pus,
        sockets: (numa / per_socket).max(1),
        gpus,
    }
}

fn bench(c: &mut Criterion) {
    let machines = [
        ("2-numa", machine(2, 32, 1, 4, 0)),
        ("24-numa", machine(24, 8, 1, 0, 0)),
        ("34-numa-gb200", machine(2, 72, 1, 0, 32)),
    ];
    let mut group = c.benchmark_group("numa_task");
    group.sample_size(30);
    for (name, m) in &machines {
        // Half the machine busy, in a pattern, so the search has something to skip.
        let mut free = m.all_free();
        for (i, f) in free.pus.iter_mut().enumerate() {
            *f = i % 4 != 1;
        }
        let gpus = if m.gpus.is_empty() { 0 } else { 2 };
        for policy in [Policy::SingleNumaNode, Policy::Restricted, Policy::BestEffort] {
            let req = Request {
                cpus: 8,
                memory: 16 * GIB,
                gpus,
            };
            group.bench_with_input(
                BenchmarkId::new(format!("decide/{}", policy.as_str()), name),
                &req,
                |b, req| b.iter(|| decide(m, &free, req, policy)),
            );
            let task = TaskNuma {
                policy,
                cpus: 8,
                memory: 16 * GIB,
                gpus,
                placement: CpuPlacement::Packed,
                full_cores: false,
            };
            group.bench_with_input(
                BenchmarkId::new(format!("assign/{}", policy.as_str()), name),
                &task,
                |b, t| b.iter(|| assign(m, &free, t)),
            );
        }
        // Filling a whole machine task by task (assign + apply), best-effort.
        let task = TaskNuma {
            policy: Policy::BestEffort,
            cpus: 4,
            memory: GIB,
            gpus: 0,
            placement: CpuPlacement::Packed,
            full_cores: false,
        };
        group.bench_function(BenchmarkId::new("fill", name), |b| {
            b.iter(|| {
                let mut f = m.all_free();
                let mut n = 0;
                while let Ok(a) = assign(m, &f, &task) {
                    apply(&mut f, &a);
                    n += 1;
                }
                n
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
