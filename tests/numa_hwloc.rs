//! NUMA allocation on machines hwloc describes: kubelet's documented CPU-assignment
//! scenarios on kubelet's own test topologies, built as hwloc synthetic descriptions
//! (with explicit PU numbering, so CPU ids match kubelet's), and the real lstopo XMLs in
//! `testdata/hwloc-xml` run through the whole planner.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use hyperplan_agent::probe::{ProbeOptions, Source, probe};
use hyperplan_core::PlannerConfig;
use hyperplan_core::numa::NumaMachine;
use hyperplan_core::numa::cpus::{CpuError, CpuPlacement, take_cpus};
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, run};
use hyperplan_shared::report::{JobStatus, Report};
use hyperplan_shared::topology::NodeTopology;

fn synthetic(desc: &str) -> NodeTopology {
    probe(&ProbeOptions {
        source: Source::Synthetic(desc.into()),
        ..ProbeOptions::local()
    })
    .unwrap_or_else(|e| panic!("{desc}: {e}"))
}

fn xml(name: &str) -> NodeTopology {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/hwloc-xml")
        .join(name);
    probe(&ProbeOptions {
        source: Source::HwlocXml(path),
        ..ProbeOptions::local()
    })
    .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// `pu:2(indexes=...)` with core `c` holding PUs `{c, c + cores}` (kubelet's numbering).
fn ht_indexes(cores: u32) -> String {
    (0..cores)
        .flat_map(|c| [c, c + cores])
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// kubelet topoSingleSocketHT: 1 socket, 4 cores, core i = {i, i+4}.
fn single_socket_ht() -> NumaMachine {
    NumaMachine::from_topology(&synthetic(&format!("pack:1 core:4 pu:2(indexes={})", ht_indexes(4))))
}

/// kubelet topoDualSocketHT: 6 cores, core i = {i, i+6}, socket = NUMA node = i % 2. hwloc
/// lists a package's cores together: socket 0 has cores 0, 2, 4.
fn dual_socket_ht() -> NumaMachine {
    let order = [0u32, 2, 4, 1, 3, 5];
    let idx: Vec<String> = order.iter().flat_map(|&c| [c, c + 6]).map(|i| i.to_string()).collect();
    NumaMachine::from_topology(&synthetic(&format!(
        "pack:2 numa:1 core:3 pu:2(indexes={})",
        idx.join(",")
    )))
}

/// kubelet topoDualSocketMultiNumaPerSocketHT: 40 cores {i, i+40}, NUMA n = cores
/// 10n..10n+9, socket 0 = NUMA 0, 1.
fn dual_socket_multi_numa_ht() -> NumaMachine {
    NumaMachine::from_topology(&synthetic(&format!(
        "pack:2 numa:2 core:10 pu:2(indexes={})",
        ht_indexes(40)
    )))
}

/// A quad-socket machine (4 sockets = 4 NUMA nodes × 4 cores × 2 threads, core i =
/// {i, i+16}), standing in for kubelet's topoQuadSocketFourWayHT.
fn quad_socket_ht() -> NumaMachine {
    NumaMachine::from_topology(&synthetic(&format!(
        "pack:4 numa:1 core:4 pu:2(indexes={})",
        ht_indexes(16)
    )))
}

/// kubelet's cpuset syntax "0-6,10,12-13" → sorted ids.
fn set(s: &str) -> Vec<usize> {
    let mut v: Vec<usize> = s
        .split(',')
        .filter(|p| !p.is_empty())
        .flat_map(|p| match p.split_once('-') {
            Some((a, b)) => a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap(),
            None => {
                let x = p.parse::<usize>().unwrap();
                x..=x
            }
        })
        .collect();
    v.sort_unstable();
    v
}

/// Takes `n` PUs packed from the PUs in `avail` (OS ids; on these machines the PU index
/// is the OS id) and returns their OS ids.
fn packed(m: &NumaMachine, avail: &str, n: usize, placement: CpuPlacement) -> Result<Vec<usize>, CpuError> {
    let a = set(avail);
    let mut free = m.all_free();
    for (i, f) in free.pus.iter_mut().enumerate() {
        *f = a.contains(&(m.pus[i].os as usize));
    }
    take_cpus(m, &free, None, n, placement, false)
        .map(|v| v.into_iter().map(|i| m.pus[i].os as usize).collect::<Vec<_>>())
        .map(|mut v| {
            v.sort_unstable();
            v
        })
}

#[test]
fn synthetic_machines_have_kubelets_shape() {
    let m = dual_socket_multi_numa_ht();
    assert_eq!((m.pus.len(), m.numa_count(), m.sockets), (80, 4, 2));
    // PU 0 and 40 are one core on NUMA 0, socket 0; PU 39 sits on NUMA 3, socket 1.
    assert_eq!(m.pus[0].core, m.pus[40].core);
    assert_eq!((m.pus[0].numa, m.pus[0].socket), (0, 0));
    assert_eq!((m.pus[39].numa, m.pus[39].socket), (3, 1));
    let d = dual_socket_ht();
    assert_eq!(d.pus[1].socket, 1);
    assert_eq!(d.pus[0].core, d.pus[6].core);
    assert_eq!(quad_socket_ht().sockets, 4);
}

/// (name, machine, available PUs, request, expected PUs or error).
type Case = (
    &'static str,
    NumaMachine,
    &'static str,
    usize,
    Result<&'static str, CpuError>,
);

/// kubelet `TestTakeByTopologyNUMAPacked` (commonTakeByTopologyTestCases and its own).
#[test]
fn kubelet_packed_cases_on_hwloc_machines() {
    let cases: Vec<Case> = vec![
        (
            "take more cpus than are available from single socket with HT",
            single_socket_ht(),
            "0,2,4,6",
            5,
            Err(CpuError::NotEnough {
                requested: 5,
                available: 4,
            }),
        ),
        (
            "take zero cpus from single socket with HT",
            single_socket_ht(),
            "0-7",
            0,
            Ok(""),
        ),
        (
            "take one cpu from single socket with HT",
            single_socket_ht(),
            "0-7",
            1,
            Ok("0"),
        ),
        (
            "take one cpu from single socket with HT, some cpus are taken",
            single_socket_ht(),
            "1,3,5,6,7",
            1,
            Ok("6"),
        ),
        (
            "take two cpus from single socket with HT",
            single_socket_ht(),
            "0-7",
            2,
            Ok("0,4"),
        ),
        (
            "take all cpus from single socket with HT",
            single_socket_ht(),
            "0-7",
            8,
            Ok("0-7"),
        ),
        (
            "take two cpus from single socket with HT, only one core totally free",
            single_socket_ht(),
            "0,1,2,3,6",
            2,
            Ok("2,6"),
        ),
        (
            "take a socket of cpus from dual socket with HT",
            dual_socket_ht(),
            "0-11",
            6,
            Ok("0,2,4,6,8,10"),
        ),
        (
            "take one cpu from dual socket with HT - core from Socket 0",
            dual_socket_ht(),
            "1-5,7-11",
            1,
            Ok("2"),
        ),
        (
            "allocate 4 full cores with 3 coming from the first NUMA node (filling it up) and 1 coming from the second NUMA node",
            dual_socket_ht(),
            "0-11",
            8,
            Ok("0,6,2,8,4,10,1,7"),
        ),
        (
            "take a socket of cpus from dual socket with multi-numa-per-socket with HT",
            dual_socket_multi_numa_ht(),
            "0-79",
            40,
            Ok("0-19,40-59"),
        ),
        (
            "take a NUMA node of cpus from dual socket with multi-numa-per-socket with HT",
            dual_socket_multi_numa_ht(),
            "0-79",
            20,
            Ok("0-9,40-49"),
        ),
        (
            "take a NUMA node of cpus from dual socket with multi-numa-per-socket with HT, with 1 NUMA node already taken",
            dual_socket_multi_numa_ht(),
            "10-39,50-79",
            20,
            Ok("10-19,50-59"),
        ),
        (
            "take a socket and a NUMA node of cpus from dual socket with multi-numa-per-socket with HT",
            dual_socket_multi_numa_ht(),
            "0-79",
            60,
            Ok("0-29,40-69"),
        ),
        (
            "take a socket and a NUMA node of cpus from dual socket with multi-numa-per-socket with HT, a core taken",
            dual_socket_multi_numa_ht(),
            "1-39,41-79",
            60,
            Ok("10-39,50-79"),
        ),
        (
            "allocate 32 full cores with 30 coming from the first 3 NUMA nodes (filling them up) and 2 coming from the fourth NUMA node",
            dual_socket_multi_numa_ht(),
            "0-79",
            64,
            Ok("0-29,40-69,30,31,70,71"),
        ),
        // The quad-socket stand-in: a whole socket, then a whole socket plus a core.
        (
            "take a socket from quad socket with HT",
            quad_socket_ht(),
            "0-31",
            8,
            Ok("0-3,16-19"),
        ),
        (
            "take a socket and a core from quad socket with HT",
            quad_socket_ht(),
            "0-31",
            10,
            Ok("0-3,16-19,4,20"),
        ),
    ];
    for (name, m, avail, n, want) in &cases {
        let got = packed(m, avail, *n, CpuPlacement::Packed);
        match want {
            Ok(s) => assert_eq!(got, Ok(set(s)), "{name}"),
            Err(e) => assert_eq!(got.as_ref().err(), Some(e), "{name}"),
        }
    }
}

/// kubelet `TestTakeByTopologyNUMADistributed` cases that use the default group size
/// (the PUs of a core, what the static policy passes).
#[test]
fn kubelet_distributed_cases_on_hwloc_machines() {
    let m = dual_socket_multi_numa_ht();
    for (name, avail, n, want) in [
        (
            "allocate 24 full cores with 8 distributed across the first 3 NUMA nodes",
            "0-79",
            48,
            "0-7,10-17,20-27,40-47,50-57,60-67",
        ),
        (
            "allocate 32 full cores with 8 distributed across all 4 NUMA nodes",
            "0-79",
            64,
            "0-7,10-17,20-27,30-37,40-47,50-57,60-67,70-77",
        ),
    ] {
        assert_eq!(packed(&m, avail, n, CpuPlacement::Spread), Ok(set(want)), "{name}");
    }
    // An odd count falls back to packed.
    assert_eq!(
        packed(&m, "0-79", 3, CpuPlacement::Spread),
        packed(&m, "0-79", 3, CpuPlacement::Packed)
    );
}

fn placed_tasks(r: &Report, job: &str) -> usize {
    r.jobs
        .iter()
        .filter(|j| j.name.starts_with(job))
        .flat_map(|j| &j.tasks)
        .filter(|t| t.node.is_some())
        .count()
}

/// The 24-NUMA machine (24 × 8 cores × 2 threads): 24 single-numa-node tasks of a whole
/// NUMA node each fill it, one NUMA node each; a 25th waits and says why.
#[test]
fn twenty_four_numa_machine_fills_one_numa_node_per_task() {
    let cluster = ClusterBuilder::flat(1)
        .hardware(xml("xml__192em64t-24n8c2t.xml"))
        .build();
    let jobs = vec![
        JobBuilder::gang("numa", 24, "cpu=16").numa("single-numa-node").build(),
        JobBuilder::gang("extra", 1, "cpu=2")
            .numa("single-numa-node")
            .submit(1)
            .build(),
    ];
    let r = run(&cluster, &jobs, PlannerConfig::default());
    let numa = &r.jobs.iter().find(|j| j.name == "numa").unwrap().tasks;
    let mut seen: Vec<u32> = numa.iter().map(|t| t.numa_nodes[0]).collect();
    assert!(numa.iter().all(|t| t.numa_nodes.len() == 1));
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), 24, "one NUMA node per task");
    let extra = r.jobs.iter().find(|j| j.name == "extra").unwrap();
    assert_eq!(extra.status, JobStatus::Pending);
    assert!(
        extra.reason.as_deref().unwrap().contains("cluster has free room for 0"),
        "{:?}",
        extra.reason
    );
}

/// DGX-2: 16 V100, 8 per NUMA node. Two 8-GPU single-numa-node tasks take one NUMA node
/// each with its 8 GPUs; a third 8-GPU task can never fit beside them.
#[test]
fn dgx2_gpus_follow_their_numa_node() {
    let topo = xml("xml__nvidiaDGX2.xml");
    let numa0: Vec<String> = topo
        .gpus
        .iter()
        .filter(|g| g.numa == vec![0])
        .map(|g| g.pci_bus_id.clone())
        .collect();
    assert_eq!(numa0.len(), 8);
    let cluster = ClusterBuilder::flat(1).hardware(topo).build();
    let jobs = vec![
        JobBuilder::gang("train", 2, "cpu=1,nvidia.com/gpu=8")
            .numa("single-numa-node")
            .build(),
    ];
    let r = run(&cluster, &jobs, PlannerConfig::default());
    let t = &r.jobs[0].tasks;
    assert_eq!(t[0].numa_nodes, vec![0]);
    assert_eq!(t[0].gpus, numa0);
    assert_eq!(t[1].numa_nodes, vec![1]);
    assert_eq!(placed_tasks(&r, "train"), 2);
}

/// normalio: a GPU on each NUMA node and mlx5_0 on NUMA 1: the task on NUMA 1 gets the
/// HCA as its rail, the one on NUMA 0 none.
#[test]
fn normalio_gpu_task_gets_the_local_hca() {
    let cluster = ClusterBuilder::flat(1)
        .hardware(xml("xml__32em64t-2n8c2t-pci-normalio.xml"))
        .build();
    let jobs = vec![
        JobBuilder::gang("io", 2, "cpu=4,nvidia.com/gpu=1")
            .numa("restricted")
            .build(),
    ];
    let r = run(&cluster, &jobs, PlannerConfig::default());
    let t = &r.jobs[0].tasks;
    assert_eq!(t.len(), 2);
    let on1 = t.iter().find(|t| t.numa_nodes == vec![1]).expect("a task on NUMA 1");
    assert_eq!(on1.nics, vec!["mlx5_0"]);
    let on0 = t.iter().find(|t| t.numa_nodes == vec![0]).expect("a task on NUMA 0");
    assert!(on0.nics.is_empty(), "{:?}", on0.nics);
}

/// Every real XML: fill it with 2-PU single-numa-node tasks; the planner's invariants
/// (checked after every tick by `run`) hold and every PU ends up used once.
#[test]
fn every_real_xml_fills_without_overlap() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/hwloc-xml");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".xml"))
        .collect();
    names.sort();
    assert!(names.len() >= 10, "{names:?}");
    for name in names {
        let topo = xml(&name);
        let pus: usize = topo.cores.iter().map(|c| c.pus.len()).sum();
        let cluster = ClusterBuilder::flat(1).hardware(topo).build();
        let jobs: Vec<_> = (0..pus)
            .map(|i| {
                JobBuilder::gang(&format!("t{i:03}"), 1, "cpu=1")
                    .numa("single-numa-node")
                    .build()
            })
            .collect();
        let r = run(&cluster, &jobs, PlannerConfig::default());
        assert_eq!(placed_tasks(&r, "t"), pus, "{name}");
        let mut cpus: Vec<String> = r.jobs.iter().filter_map(|j| j.tasks[0].cpus.clone()).collect();
        cpus.sort();
        cpus.dedup();
        assert_eq!(cpus.len(), pus, "{name}: a PU given twice");
    }
}
