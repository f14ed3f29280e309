//! `probe_hwloc` on every real hwloc XML export in `testdata/hwloc-xml`, on synthetic
//! descriptions, on broken inputs, and on this machine.
//!
//! Expected figures come from hwloc 2.9's own tools, run by hand on the same files
//! (`hwloc-info --input F`, `lstopo-no-graphics --input F -v --whole-io`,
//! `hwloc-calc --input F os=NAME --intersect numa --physical-output`,
//! `lstopo-no-graphics --input F --distances -p`), and written down here: the tests do
//! not call those tools.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use hyperplan_agent::probe::ProbeError;
use hyperplan_agent::probe::hwloc::{HwlocSource, probe_hwloc};
use hyperplan_shared::topology::{NicKind, NodeTopology};

const XML_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/hwloc-xml");

fn xml_path(file: &str) -> PathBuf {
    Path::new(XML_DIR).join(file)
}

fn probe(file: &str) -> NodeTopology {
    let path = xml_path(file);
    probe_hwloc(HwlocSource::XmlFile(&path)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// What hwloc's tools say about one file.
struct Expected {
    file: &'static str,
    /// Package OS indexes.
    packages: &'static [u32],
    /// NUMA node OS indexes.
    numa: &'static [u32],
    cores: usize,
    pus: usize,
    l3: usize,
    /// `(PCI bus id, NUMA locality)`.
    gpus: &'static [(&'static str, &'static [u32])],
    /// `(name, kind, NUMA locality)`.
    nics: &'static [(&'static str, NicKind, &'static [u32])],
    /// `(name, PCI bus id, PCI class, NUMA locality)`.
    hcas: &'static [(&'static str, &'static str, &'static str, &'static [u32])],
}

const ETH: NicKind = NicKind::Ethernet;
const IB: NicKind = NicKind::Infiniband;
const USNIC: NicKind = NicKind::Usnic;

const DGX2_GPUS: &[(&str, &[u32])] = &[
    ("0000:34:00.0", &[0]),
    ("0000:36:00.0", &[0]),
    ("0000:39:00.0", &[0]),
    ("0000:3b:00.0", &[0]),
    ("0000:57:00.0", &[0]),
    ("0000:59:00.0", &[0]),
    ("0000:5c:00.0", &[0]),
    ("0000:5e:00.0", &[0]),
    ("0000:b7:00.0", &[1]),
    ("0000:b9:00.0", &[1]),
    ("0000:bc:00.0", &[1]),
    ("0000:be:00.0", &[1]),
    ("0000:e0:00.0", &[1]),
    ("0000:e2:00.0", &[1]),
    ("0000:e5:00.0", &[1]),
    ("0000:e7:00.0", &[1]),
];

const ALL: &[Expected] = &[
    Expected {
        file: "linux__40intel64-2g2n4c+pci.xml",
        packages: &[0, 1, 2, 3],
        numa: &[0, 1, 2, 3],
        cores: 40,
        pus: 40,
        l3: 4,
        // The Matrox G200 VGA (0000:09:03.0, class 0300) is the BMC console, not a GPU.
        gpus: &[],
        nics: &[
            ("eth0", ETH, &[0, 2]),
            ("eth1", ETH, &[0, 2]),
            ("eth2", ETH, &[0, 2]),
            ("eth3", ETH, &[0, 2]),
            ("ib0", IB, &[1, 3]),
        ],
        hcas: &[("qib0", "0000:43:00.0", "0c06", &[1, 3])],
    },
    Expected {
        file: "x86+linux__64amd64-4p2n4ca2co.xml",
        packages: &[0, 1, 2, 3],
        numa: &[0, 1, 2, 3, 4, 5, 6, 7],
        cores: 64,
        pus: 64,
        l3: 8,
        gpus: &[],
        nics: &[],
        hcas: &[],
    },
    Expected {
        file: "x86__AMD-17h-Zen-2xEpyc-7451.xml",
        packages: &[0, 1],
        numa: &[0, 1, 2, 3, 4, 5, 6, 7],
        cores: 48,
        pus: 96,
        l3: 16,
        gpus: &[],
        nics: &[],
        hcas: &[],
    },
    Expected {
        file: "x86__Intel-CPUID.1A-1p2co2t.xml",
        packages: &[0],
        numa: &[0],
        cores: 2,
        pus: 4,
        l3: 1,
        gpus: &[],
        nics: &[],
        hcas: &[],
    },
    Expected {
        file: "x86__Intel-RaptorLake-Corei7-1370P.xml",
        packages: &[0],
        numa: &[0],
        cores: 14,
        pus: 20,
        l3: 1,
        gpus: &[],
        nics: &[],
        hcas: &[],
    },
    Expected {
        file: "xml__16em64t-4s2c2t.xml",
        packages: &[0, 1, 2, 3],
        numa: &[0],
        cores: 8,
        pus: 16,
        l3: 4,
        gpus: &[],
        nics: &[],
        hcas: &[],
    },
    Expected {
        file: "xml__16intel64-manyVFs.xml",
        packages: &[0, 1],
        numa: &[0, 1],
        cores: 16,
        pus: 16,
        l3: 2,
        gpus: &[],
        nics: &[
            ("eth0", ETH, &[0]),
            ("eth1", ETH, &[0]),
            ("eth4", USNIC, &[0]),
            ("eth5", USNIC, &[0]),
            ("eth6", USNIC, &[1]),
            ("eth7", ETH, &[1]),
        ],
        // usnic_0..2 are OpenFabrics osdevs, but not InfiniBand.
        hcas: &[],
    },
    Expected {
        file: "xml__192em64t-24n8c2t.xml",
        packages: &[
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23,
        ],
        numa: &[
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23,
        ],
        cores: 192,
        pus: 384,
        l3: 24,
        // Matrox G200eR2 VGA at 0000:0a:00.0: BMC console.
        gpus: &[],
        nics: &[
            ("eth0", ETH, &[0]),
            ("eth1", ETH, &[0]),
            ("eth2", ETH, &[4]),
            ("eth3", ETH, &[4]),
            ("eth4", ETH, &[4]),
            ("eth5", ETH, &[4]),
            ("ib0", IB, &[6]),
        ],
        hcas: &[("mlx4_0", "0003:01:00.0", "0280", &[6])],
    },
    Expected {
        file: "xml__32em64t-2n8c2t-pci-normalio.xml",
        packages: &[0, 1],
        numa: &[0, 1],
        cores: 16,
        pus: 32,
        l3: 2,
        // Three NVIDIA Tesla (class 0302) and an AMD Radeon (VGA) carrying an OpenCL GPU
        // osdev; the Matrox VGA at 0000:05:03.0 is left out.
        gpus: &[
            ("0000:03:00.0", &[0]),
            ("0000:83:00.0", &[1]),
            ("0000:84:00.0", &[1]),
            ("0000:84:00.1", &[1]),
        ],
        nics: &[("eth0", ETH, &[1]), ("eth1", ETH, &[1]), ("ib0", IB, &[1])],
        // The file reuses bus id 0000:04:00.0 (a SAS controller on package 0); the HCA sits
        // under package 1's host bridge, so its locality is node 1.
        hcas: &[("mlx5_0", "0000:04:00.0", "0207", &[1])],
    },
    Expected {
        file: "xml__memorysidecaches.xml",
        packages: &[0, 1],
        numa: &[0, 1, 2, 3],
        cores: 40,
        pus: 80,
        l3: 2,
        gpus: &[],
        nics: &[],
        hcas: &[],
    },
    Expected {
        file: "xml__nvidiaDGX2.xml",
        packages: &[0, 1],
        numa: &[0, 1],
        cores: 4,
        pus: 4,
        l3: 2,
        gpus: DGX2_GPUS,
        nics: &[],
        hcas: &[],
    },
];

fn check(e: &Expected) {
    // How long it takes: `cargo bench -p hyperplan-agent --bench probe`.
    let node = probe(e.file);
    let f = e.file;

    let packages: Vec<u32> = node.packages.iter().map(|p| p.os_index.unwrap()).collect();
    assert_eq!(packages, e.packages, "{f}: packages");
    let numa: Vec<u32> = node.numa_nodes.iter().map(|n| n.os_index).collect();
    assert_eq!(numa, e.numa, "{f}: NUMA nodes");
    assert_eq!(node.cores.len(), e.cores, "{f}: cores");
    let mut pus: Vec<u32> = node.cores.iter().flat_map(|c| c.pus.iter().copied()).collect();
    assert_eq!(pus.len(), e.pus, "{f}: PUs");
    pus.sort_unstable();
    pus.dedup();
    assert_eq!(pus.len(), e.pus, "{f}: a PU in two cores");
    assert_eq!(node.l3_groups.len(), e.l3, "{f}: L3 caches");

    // The package and NUMA cpusets partition the PUs.
    let mut package_pus: Vec<u32> = node.packages.iter().flat_map(|p| p.cpus.iter().copied()).collect();
    package_pus.sort_unstable();
    assert_eq!(package_pus, pus, "{f}: package cpusets");
    let mut numa_pus: Vec<u32> = node.numa_nodes.iter().flat_map(|n| n.cpus.iter().copied()).collect();
    numa_pus.sort_unstable();
    assert_eq!(numa_pus, pus, "{f}: NUMA cpusets");
    for core in &node.cores {
        let numa = core
            .numa
            .unwrap_or_else(|| panic!("{f}: core {} has no NUMA node", core.index));
        let holder = node.numa_nodes.iter().find(|n| n.os_index == numa).unwrap();
        assert!(
            core.pus.iter().all(|pu| holder.cpus.contains(pu)),
            "{f}: core {}",
            core.index
        );
        assert!(core.package.is_some(), "{f}: core {} has no package", core.index);
    }
    // Deterministic order.
    assert!(
        node.cores.windows(2).all(|w| w[0].index < w[1].index),
        "{f}: core order"
    );
    for n in &node.numa_nodes {
        assert!(
            n.distances.is_empty() || n.distances.len() == node.numa_nodes.len(),
            "{f}: distances"
        );
    }

    let gpus: Vec<(&str, &[u32])> = node
        .gpus
        .iter()
        .map(|g| (g.pci_bus_id.as_str(), g.numa.as_slice()))
        .collect();
    assert_eq!(gpus, e.gpus, "{f}: GPUs");
    let nics: Vec<(&str, NicKind, &[u32])> = node
        .nics
        .iter()
        .map(|n| (n.name.as_str(), n.kind, n.numa.as_slice()))
        .collect();
    assert_eq!(nics, e.nics, "{f}: NICs");
    let hcas: Vec<(&str, &str, &str, &[u32])> = node
        .hcas
        .iter()
        .map(|h| {
            assert!(h.ports.is_empty(), "{f}: hwloc side has no ports");
            (
                h.name.as_str(),
                h.pci_bus_id.as_deref().unwrap(),
                h.pci_class.as_deref().unwrap(),
                h.numa.as_slice(),
            )
        })
        .collect();
    assert_eq!(hcas, e.hcas, "{f}: IB HCAs");
    assert!(node.warnings.is_empty(), "{f}: {:?}", node.warnings);
}

/// Every XML file in the data folder has expectations, and meets them.
#[test]
fn every_xml_file_matches_hwloc_tools() {
    let mut files: Vec<String> = std::fs::read_dir(XML_DIR)
        .unwrap_or_else(|e| panic!("{XML_DIR}: {e} (is testdata/ in the repository?)"))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".xml"))
        .collect();
    files.sort();
    let mut covered: Vec<&str> = ALL.iter().map(|e| e.file).collect();
    covered.sort_unstable();
    assert_eq!(files, covered, "a data file without expectations (or the reverse)");
    for e in ALL {
        check(e);
    }
}

#[test]
fn dgx2_sixteen_v100_and_no_nvswitch() {
    let node = probe("xml__nvidiaDGX2.xml");
    assert_eq!(node.gpus.len(), 16);
    for (i, gpu) in node.gpus.iter().enumerate() {
        assert_eq!((gpu.vendor_id, gpu.device_id), (0x10de, 0x1db8), "{}", gpu.pci_bus_id);
        assert_eq!(gpu.model.as_deref(), Some("Tesla V100-SXM3-32GB-H"));
        assert_eq!(gpu.vendor.as_deref(), Some("NVIDIA Corporation"));
        assert_eq!(gpu.os_devices.len(), 1);
        assert!(gpu.os_devices[0].starts_with("nvml"), "{:?}", gpu.os_devices);
        // nvml0..7 on node 0 in bus order; 8..15 on node 1.
        let expected_numa = u32::from(i >= 8);
        assert_eq!(gpu.numa, [expected_numa]);
    }
    // The NVSwitches (10de:1ac2, class 0680) are not GPUs.
    assert!(!node.gpus.iter().any(|g| g.device_id == 0x1ac2));
    assert!(!node.gpus.iter().any(|g| g.pci_bus_id == "0000:61:00.0"));
    assert_eq!(node.numa_nodes[0].distances, [10, 21]);
    assert_eq!(node.numa_nodes[1].distances, [21, 10]);
    assert_eq!(node.numa_nodes[0].cpus, [0, 1]);
    assert_eq!(node.numa_nodes[1].cpus, [24, 25]);
    assert_eq!(node.architecture, "x86_64");
    assert_eq!(
        node.cpu_model.as_deref(),
        Some("Intel(R) Xeon(R) Platinum 8174 CPU @ 3.10GHz")
    );
    assert_eq!(node.total_memory, 1_583_957_300 * 1024);
}

#[test]
fn normalio_gpus_nics_and_mlx5() {
    let node = probe("xml__32em64t-2n8c2t-pci-normalio.xml");
    assert_eq!(node.hostname, "conan");
    assert_eq!(node.architecture, "x86_64");
    assert_eq!(node.kernel.as_deref(), Some("3.2.0-4-amd64"));
    assert_eq!(
        node.cpu_model.as_deref(),
        Some("Intel(R) Xeon(R) CPU E5-2650 0 @ 2.00GHz")
    );
    assert_eq!(node.total_memory, 67_079_992 * 1024);

    let nvidia: Vec<&str> = node
        .gpus
        .iter()
        .filter(|g| g.vendor_id == 0x10de)
        .map(|g| g.pci_bus_id.as_str())
        .collect();
    assert_eq!(nvidia, ["0000:03:00.0", "0000:83:00.0", "0000:84:00.0"]);
    let with_cuda = &node.gpus[2];
    assert_eq!(with_cuda.os_devices, ["card0", "cuda0"]);
    assert_eq!(with_cuda.device_id, 0x1094);
    // The CUDA osdev's GPUModel wins over the PCI name database.
    assert_eq!(with_cuda.model.as_deref(), Some("Tesla K40m"));
    assert_eq!(
        node.gpus[0].model.as_deref(),
        Some("Tesla M2075 Dual-Slot Computing Processor Module")
    );
    assert!(node.gpus[0].os_devices.is_empty());
    let radeon = &node.gpus[3];
    assert_eq!((radeon.vendor_id, radeon.device_id), (0x1002, 0x6798));
    assert_eq!(radeon.os_devices, ["opencl0d1"]);

    let ib0 = node.nics.iter().find(|n| n.name == "ib0").unwrap();
    assert_eq!(ib0.pci_bus_id.as_deref(), Some("0000:04:00.0"));
    assert_eq!(
        ib0.address.as_deref(),
        Some("80:00:00:26:fe:80:00:00:00:00:00:00:24:8a:07:03:00:1e:39:fe")
    );
    let eth0 = node.nics.iter().find(|n| n.name == "eth0").unwrap();
    assert_eq!(eth0.pci_bus_id.as_deref(), Some("0000:81:00.0"));
    assert_eq!(eth0.address.as_deref(), Some("00:25:90:95:71:12"));
    assert_eq!(node.hcas[0].node_guid.as_deref(), Some("248a:0703:001e:39fe"));
    assert_eq!(node.numa_nodes[0].distances, [10, 20]);
    assert_eq!(
        node.numa_nodes[0].cpus,
        [0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23]
    );
}

#[test]
fn r910_qib_behind_group_and_numa_order() {
    let node = probe("linux__40intel64-2g2n4c+pci.xml");
    // No uname infos in this export.
    assert_eq!(node.hostname, "");
    assert_eq!(node.architecture, "");
    assert_eq!(node.kernel, None);
    assert_eq!(
        node.cpu_model.as_deref(),
        Some("Intel(R) Xeon(R) CPU E7- 4870  @ 2.40GHz")
    );
    assert_eq!(node.total_memory, 536_857_436 * 1024);
    // hwloc's logical NUMA order is 0,2,1,3; ours is by OS index.
    assert_eq!(node.numa_nodes[1].os_index, 1);
    assert_eq!(node.numa_nodes[1].cpus, [1, 5, 9, 13, 17, 21, 25, 29, 33, 37]);
    assert_eq!(node.numa_nodes[0].local_memory, 134_204_252 * 1024);
    assert_eq!(node.numa_nodes[2].distances, [20, 20, 10, 20]);
    let qib = &node.hcas[0];
    assert_eq!(qib.node_guid.as_deref(), Some("0011:7500:0077:cfc8"));
    let ib0 = node.nics.iter().find(|n| n.name == "ib0").unwrap();
    assert_eq!(ib0.pci_bus_id, qib.pci_bus_id);
}

#[test]
fn sgi_uv_24_numa_nodes_and_mlx4() {
    let node = probe("xml__192em64t-24n8c2t.xml");
    assert_eq!(node.hostname, "uv2000");
    assert_eq!(node.kernel.as_deref(), Some("3.0.58-0.6.6-default"));
    // First and last rows of the NUMALatency matrix (lstopo --distances -p).
    assert_eq!(
        node.numa_nodes[0].distances,
        [
            10, 50, 65, 65, 65, 65, 65, 65, 65, 65, 79, 79, 65, 65, 79, 79, 65, 65, 79, 79, 79, 79, 79, 79
        ]
    );
    assert_eq!(
        node.numa_nodes[23].distances,
        [
            79, 79, 79, 79, 79, 79, 65, 65, 79, 79, 79, 79, 79, 79, 65, 65, 65, 65, 65, 65, 65, 65, 50, 10
        ]
    );
    assert!(node.numa_nodes.iter().all(|n| n.cpus.len() == 16));
    assert_eq!(node.numa_nodes[0].local_memory, 32_475_908 * 1024);
    assert_eq!(node.total_memory, 779_733_764 * 1024);
    let core = &node.cores[0];
    assert_eq!(
        (core.package, core.numa, core.pus.as_slice()),
        (Some(0), Some(0), &[0, 192][..])
    );
    let last = &node.cores[191];
    assert_eq!(
        (last.package, last.numa, last.pus.as_slice()),
        (Some(23), Some(23), &[191, 383][..])
    );
    let mlx4 = &node.hcas[0];
    assert_eq!(mlx4.node_guid.as_deref(), Some("0002:c903:001b:b0a0"));
    let ib0 = node.nics.iter().find(|n| n.name == "ib0").unwrap();
    assert_eq!(ib0.pci_bus_id.as_deref(), Some("0003:01:00.0"));
    let eth2 = node.nics.iter().find(|n| n.name == "eth2").unwrap();
    assert_eq!(eth2.pci_bus_id.as_deref(), Some("0002:03:00.0"));
}

#[test]
fn usnic_is_not_infiniband() {
    let node = probe("xml__16intel64-manyVFs.xml");
    assert!(node.hcas.is_empty(), "{:?}", node.hcas);
    assert!(node.hcas.iter().all(|h| !h.name.starts_with("usnic")));
    let eth4 = node.nics.iter().find(|n| n.name == "eth4").unwrap();
    assert_eq!(eth4.kind, NicKind::Usnic);
    assert_eq!(eth4.pci_bus_id.as_deref(), Some("0000:0b:00.0"));
    assert_eq!(eth4.address.as_deref(), Some("24:57:20:04:20:00"));
    assert!(node.gpus.is_empty());
    assert!(node.numa_nodes.iter().all(|n| n.distances.is_empty()));
}

#[test]
fn opteron_distance_matrix_rows() {
    let node = probe("x86+linux__64amd64-4p2n4ca2co.xml");
    assert_eq!(node.hostname, "jolly");
    assert_eq!(node.cpu_model.as_deref(), Some("AMD Opteron(TM) Processor 6272"));
    assert_eq!(node.numa_nodes[0].distances, [10, 16, 16, 22, 16, 22, 16, 22]);
    assert_eq!(node.numa_nodes[2].distances, [16, 22, 10, 16, 16, 16, 16, 16]);
    assert_eq!(node.numa_nodes[7].distances, [22, 16, 16, 22, 22, 16, 16, 10]);
    // Package 2 holds NUMA nodes 4 and 5 (P#2/P#3 are logical 4/5 in hwloc's listing).
    let last = node.cores.last().unwrap();
    assert_eq!(
        (last.package, last.numa, last.pus.as_slice()),
        (Some(2), Some(5), &[63][..])
    );
}

#[test]
fn memory_side_caches_snc_nodes() {
    let node = probe("xml__memorysidecaches.xml");
    assert_eq!(node.hostname, "leonide");
    // Sub-NUMA clusters: nodes 0 and 2 share package 0 (distance 11).
    assert_eq!(node.numa_nodes[0].distances, [10, 21, 11, 21]);
    assert_eq!(
        node.numa_nodes[0].cpus,
        [
            0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 64, 68, 72, 76
        ]
    );
    assert_eq!(node.numa_nodes[0].local_memory, 388_492_316 * 1024);
    assert_eq!(node.l3_groups[0].size, Some(28_160 * 1024));
    assert_eq!(node.l3_groups[0].cpus.len(), 40);
}

#[test]
fn epyc_without_memory_figures() {
    let node = probe("x86__AMD-17h-Zen-2xEpyc-7451.xml");
    // An x86-backend export: no memory sizes, no distances, no uname.
    assert_eq!(node.total_memory, 0);
    assert!(
        node.numa_nodes
            .iter()
            .all(|n| n.local_memory == 0 && n.distances.is_empty())
    );
    // Trailing blanks of the CPUID brand string are trimmed.
    assert_eq!(node.cpu_model.as_deref(), Some("AMD EPYC 7451 24-Core Processor"));
    assert_eq!(node.numa_nodes[0].cpus, [0, 1, 2, 3, 4, 5, 48, 49, 50, 51, 52, 53]);
    assert_eq!(node.l3_groups[0].cpus, [0, 1, 2, 48, 49, 50]);
    assert_eq!(node.l3_groups[0].size, Some(8 * 1024 * 1024));
}

#[test]
fn raptor_lake_hybrid_cores() {
    let node = probe("x86__Intel-RaptorLake-Corei7-1370P.xml");
    let threads: Vec<usize> = node.cores.iter().map(|c| c.pus.len()).collect();
    // 6 P-cores with 2 threads, then 8 E-cores with one (hwloc-calc core:N).
    assert_eq!(threads, [2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1]);
    assert_eq!(node.cores[6].pus, [12]);
    assert_eq!(node.cpu_model.as_deref(), Some("13th Gen Intel(R) Core(TM) i7-1370P"));
}

#[test]
fn synthetic_two_packages_four_numa() {
    let node = probe_hwloc(HwlocSource::Synthetic("pack:2 numa:2 core:8 pu:2")).unwrap();
    // hwloc-info --input "pack:2 numa:2 core:8 pu:2": 2 Package, 4 Group0, 32 Core,
    // 64 PU, 4 NUMANode (1 GiB each).
    assert_eq!(node.packages.len(), 2);
    assert_eq!(
        node.numa_nodes.iter().map(|n| n.os_index).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    assert_eq!(node.cores.len(), 32);
    assert_eq!(node.cores.iter().map(|c| c.pus.len()).sum::<usize>(), 64);
    assert!(
        node.numa_nodes
            .iter()
            .all(|n| n.local_memory == 1 << 30 && n.cpus.len() == 16)
    );
    assert_eq!(node.total_memory, 4 << 30);
    assert_eq!(node.cores[0].pus, [0, 1]);
    assert_eq!(node.cores[8].numa, Some(1));
    assert_eq!(node.cores[31].package, Some(1));
    assert!(node.gpus.is_empty() && node.nics.is_empty() && node.hcas.is_empty());
}

#[test]
fn bad_synthetic_strings_are_synthetic_errors() {
    for bad in ["pack:2 foo:3", "", "pack:0", "core:2\0 pu:2", "pack:two"] {
        match probe_hwloc(HwlocSource::Synthetic(bad)) {
            Err(ProbeError::Synthetic { description, message }) => {
                assert_eq!(description, bad);
                assert!(!message.is_empty());
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}

#[test]
fn synthetic_machines_over_the_pu_limit_are_refused_before_hwloc_builds_them() {
    // 262,144 PUs took hwloc past 25 s and 1.3 GB; 99999^3 would never end.
    for (huge, pus) in [
        ("pack:64 numa:8 core:64 pu:8", "262144"),
        ("pack:99999 core:99999 pu:99999", "999970000299999"),
        ("pack:2 [numa(memory=1GB)] core:4097 pu:2", "16388"),
        ("pack:0x4000 pu:2", "32768"),
        ("pack:2 numa:2(memory=1GB) core:2049 pu:2", "16392"),
        // hwloc inserts siblings in quadratic time: 16,384 cores under one package would
        // take many minutes, however few PUs.
        ("pack:1 core:16384 pu:1", "16384 objects per parent"),
    ] {
        match probe_hwloc(HwlocSource::Synthetic(huge)) {
            Err(e @ ProbeError::TooLarge { .. }) => {
                let shown = e.to_string();
                assert!(shown.contains(huge) && shown.contains(pus), "{shown}");
                assert!(shown.contains("at most"), "{shown}");
            }
            other => panic!("{huge:?}: {other:?}"),
        }
    }
    assert_eq!(max_pus(), 16_384);
    // Unbalanced brackets could hide a level from the count: refused, not guessed.
    assert!(matches!(
        probe_hwloc(HwlocSource::Synthetic("pack:2 (core:99999 pu:99999")),
        Err(ProbeError::Synthetic { .. })
    ));
    // At the limit it is built.
    let node = probe_hwloc(HwlocSource::Synthetic("pack:8 numa:4 core:64 pu:8")).unwrap();
    assert_eq!(node.cores.iter().map(|c| c.pus.len()).sum::<usize>(), 16_384);
}

fn max_pus() -> usize {
    hyperplan_agent::probe::MAX_PUS
}

/// Asserts an `Xml` error naming `path`, and returns its message.
fn xml_error(path: &Path) -> String {
    match probe_hwloc(HwlocSource::XmlFile(path)) {
        Err(ProbeError::Xml { path: named, message }) => {
            assert_eq!(named, path);
            let shown = ProbeError::Xml {
                path: named,
                message: message.clone(),
            }
            .to_string();
            assert!(shown.contains(&path.display().to_string()), "{shown}");
            message
        }
        other => panic!("{}: {other:?}", path.display()),
    }
}

#[test]
fn broken_xml_inputs_are_xml_errors() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(xml_path("xml__16em64t-4s2c2t.xml")).unwrap();

    let message = xml_error(&dir.path().join("missing.xml"));
    assert!(message.contains("cannot read"), "{message}");

    let truncated = dir.path().join("truncated.xml");
    std::fs::write(&truncated, &good[..good.len() / 2]).unwrap();
    let message = xml_error(&truncated);
    assert!(message.contains("truncated"), "{message}");

    let not_xml = dir.path().join("not-xml.xml");
    std::fs::write(&not_xml, "Machine (16GB total)\n  Package L#0\n").unwrap();
    let message = xml_error(&not_xml);
    assert!(message.contains("not an hwloc XML topology"), "{message}");

    assert!(good.contains("<topology version=\"2.0\">"));
    let v3 = dir.path().join("v3.xml");
    std::fs::write(
        &v3,
        good.replace("<topology version=\"2.0\">", "<topology version=\"3.0\">"),
    )
    .unwrap();
    let message = xml_error(&v3);
    assert!(message.contains("version 3.0"), "{message}");

    let empty = dir.path().join("empty.xml");
    std::fs::write(&empty, "").unwrap();
    xml_error(&empty);

    let binary = dir.path().join("binary.xml");
    std::fs::write(&binary, [0x42, 0x5a, 0x68, 0x00, 0xff, 0xfe]).unwrap();
    xml_error(&binary);

    // A directory is not a file.
    xml_error(dir.path());

    // The untouched copy still loads: the failures above are the edits.
    let copy = dir.path().join("copy.xml");
    std::fs::write(&copy, &good).unwrap();
    assert_eq!(probe_hwloc(HwlocSource::XmlFile(&copy)).unwrap().cores.len(), 8);
}

#[test]
fn local_machine() {
    let node = probe_hwloc(HwlocSource::Local).unwrap();
    assert!(!node.cores.is_empty(), "{node:?}");
    assert!(node.cores.iter().map(|c| c.pus.len()).sum::<usize>() >= 1);
    assert!(!node.numa_nodes.is_empty());
    assert!(!node.architecture.is_empty());
    assert!(!node.hostname.is_empty());
    assert!(node.total_memory > 0);
}

/// Edited copies of the normalio export (mlx5_0 + ib0 on one PCI function): cases no
/// data file has, on an otherwise real topology.
fn edited_normalio(dir: &Path, file: &str, edits: &[(&str, &str)]) -> NodeTopology {
    let mut text = std::fs::read_to_string(xml_path("xml__32em64t-2n8c2t-pci-normalio.xml")).unwrap();
    for (from, to) in edits {
        assert!(text.contains(from), "{from} not in the file");
        text = text.replace(from, to);
    }
    let path = dir.join(file);
    std::fs::write(&path, text).unwrap();
    probe_hwloc(HwlocSource::XmlFile(&path)).unwrap()
}

#[test]
fn roce_and_omni_path_are_not_infiniband_hcas() {
    let dir = tempfile::tempdir().unwrap();
    let ib_address = "80:00:00:26:fe:80:00:00:00:00:00:00:24:8a:07:03:00:1e:39:fe";

    // ConnectX in Ethernet mode: class 0200, a MAC-addressed netdev: RoCE.
    let node = edited_normalio(
        dir.path(),
        "roce.xml",
        &[
            ("pci_type=\"0207 [15b3:1013]", "pci_type=\"0200 [15b3:1013]"),
            ("name=\"ib0\"", "name=\"enp4s0f0\""),
            (ib_address, "24:8a:07:1e:39:fe"),
        ],
    );
    assert!(node.hcas.is_empty(), "{:?}", node.hcas);
    let nic = node.nics.iter().find(|n| n.name == "enp4s0f0").unwrap();
    assert_eq!(nic.kind, NicKind::Roce);

    // A VPI card (class 0280) whose port runs Ethernet: RoCE too.
    let node = edited_normalio(
        dir.path(),
        "vpi-eth.xml",
        &[
            ("pci_type=\"0207 [15b3:1013]", "pci_type=\"0280 [15b3:1013]"),
            ("name=\"ib0\"", "name=\"enp4s0\""),
            (ib_address, "24:8a:07:1e:39:fe"),
        ],
    );
    assert!(node.hcas.is_empty(), "{:?}", node.hcas);
    assert_eq!(
        node.nics.iter().find(|n| n.name == "enp4s0").unwrap().kind,
        NicKind::Roce
    );

    // Omni-Path: hfi1_0 with IPoIB ib0 on it. Verbs-capable, not InfiniBand.
    let node = edited_normalio(dir.path(), "opa.xml", &[("name=\"mlx5_0\"", "name=\"hfi1_0\"")]);
    assert!(node.hcas.is_empty(), "{:?}", node.hcas);
    assert_eq!(
        node.nics.iter().find(|n| n.name == "ib0").unwrap().kind,
        NicKind::OmniPath
    );

    // An IB HCA with no netdev (IPoIB not loaded; ib0 turned into a block osdev) is
    // still an HCA.
    let node = edited_normalio(
        dir.path(),
        "no-ipoib.xml",
        &[("name=\"ib0\" osdev_type=\"2\"", "name=\"ib0\" osdev_type=\"0\"")],
    );
    assert_eq!(
        node.hcas.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(),
        ["mlx5_0"]
    );
}
