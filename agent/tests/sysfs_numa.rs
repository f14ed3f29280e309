//! `read_numa`, `live_figures` and the CPU list helpers against real sysfs fixtures, spoiled
//! copies, and this machine's own `/sys` and `/proc`.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(unix)]

mod sysfs_common;

use std::fs;
use std::path::Path;

use hyperplan_agent::probe::ProbeError;
use hyperplan_agent::probe::live::{SysfsNuma, format_cpu_list, live_figures, parse_cpu_list, read_numa};
use sysfs_common::{copy_tree, hwloc_sys, node_exporter_sys, node_exporter_ttar, procfs_sys, unpack_ttar};

const KB: u64 = 1024;

fn read(root: &Path) -> (Vec<SysfsNuma>, Vec<String>) {
    let mut warnings = Vec::new();
    let nodes = read_numa(root, &mut warnings).unwrap();
    (nodes, warnings)
}

fn node(os_index: u32, cpus: Vec<u32>, total_kb: u64, free_kb: u64) -> SysfsNuma {
    SysfsNuma {
        os_index,
        cpus,
        mem_total: Some(total_kb * KB),
        mem_free: Some(free_kb * KB),
    }
}

/// Dell R910, 4 × E7-4870: PUs interleaved across nodes (node N has N, N+4, …, N+36).
/// Its meminfo files start with a blank line.
#[test]
fn hwloc_dump_four_nodes() {
    let (nodes, warnings) = read(&hwloc_sys());
    let cpus = |n: u32| (0..10).map(|i| n + 4 * i).collect::<Vec<u32>>();
    assert_eq!(
        nodes,
        vec![
            node(0, cpus(0), 134_204_252, 75_631_516),
            node(1, cpus(1), 134_217_728, 85_242_572),
            node(2, cpus(2), 134_217_728, 90_309_928),
            node(3, cpus(3), 134_217_728, 96_933_048),
        ]
    );
    assert!(warnings.is_empty(), "{warnings:?}");
}

fn expected_node_exporter() -> Vec<SysfsNuma> {
    vec![
        node(0, vec![0, 1], 134_182_340, 53_030_372),
        node(1, vec![2, 3], 134_217_728, 39_634_788),
        // CPU-less node: cpulist is an empty line.
        node(2, vec![], 134_217_728, 39_634_788),
    ]
}

#[test]
fn node_exporter_cpu_less_node() {
    let (nodes, warnings) = read(&node_exporter_sys());
    assert_eq!(nodes, expected_node_exporter());
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn node_exporter_ttar_unpacks_to_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    unpack_ttar(&node_exporter_ttar(), tmp.path());
    let (nodes, warnings) = read(&tmp.path().join("sys"));
    assert_eq!(nodes, expected_node_exporter());
    assert!(warnings.is_empty(), "{warnings:?}");
}

/// prometheus/procfs: node1 and node2 hold only `vmstat` (no cpulist, no meminfo).
#[test]
fn procfs_nodes_without_cpulist_or_meminfo() {
    let (nodes, warnings) = read(&procfs_sys());
    assert_eq!(
        nodes,
        vec![
            SysfsNuma {
                os_index: 1,
                cpus: vec![],
                mem_total: None,
                mem_free: None
            },
            SysfsNuma {
                os_index: 2,
                cpus: vec![],
                mem_total: None,
                mem_free: None
            },
        ]
    );
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].contains("node1") && warnings[0].contains("no cpulist"),
        "{warnings:?}"
    );
    assert!(warnings[1].contains("node2"), "{warnings:?}");
}

#[test]
fn cpus_from_cpu_entries_when_cpulist_is_missing() {
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&node_exporter_sys(), tmp.path(), true);
    fs::remove_file(tmp.path().join("devices/system/node/node1/cpulist")).unwrap();
    let (nodes, warnings) = read(tmp.path());
    assert_eq!(nodes[1].cpus, [2, 3]);
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn missing_node_dir_is_no_numa_info() {
    let tmp = tempfile::tempdir().unwrap();
    fs::create_dir_all(tmp.path().join("devices/system/cpu")).unwrap();
    assert_eq!(read(tmp.path()), (vec![], vec![]));
}

#[test]
fn garbage_cpulist_and_meminfo_are_warnings() {
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&node_exporter_sys(), tmp.path(), false);
    let dir = tmp.path().join("devices/system/node");
    fs::write(dir.join("node0/cpulist"), "0-x\n").unwrap();
    fs::write(
        dir.join("node1/meminfo"),
        "Node 1 MemTotal:  N/A kB\nNode 1 MemFree:  100 kB\n",
    )
    .unwrap();
    fs::remove_file(dir.join("node2/meminfo")).unwrap();
    fs::create_dir(dir.join("node2/meminfo")).unwrap();
    let (nodes, warnings) = read(tmp.path());
    assert_eq!(nodes[0].cpus, Vec::<u32>::new());
    assert_eq!((nodes[1].mem_total, nodes[1].mem_free), (None, Some(100 * KB)));
    assert_eq!((nodes[2].mem_total, nodes[2].mem_free), (None, None));
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert!(
        warnings[0].contains("node0/cpulist") && warnings[0].contains("\"x\""),
        "{warnings:?}"
    );
    assert!(
        warnings[1].contains("node1/meminfo") && warnings[1].contains("N/A"),
        "{warnings:?}"
    );
    assert!(
        warnings[2].contains("node2/meminfo") && warnings[2].contains("cannot read"),
        "{warnings:?}"
    );
}

#[test]
fn cpu_list_parser() {
    assert_eq!(parse_cpu_list(""), Ok(vec![]));
    assert_eq!(parse_cpu_list("\n"), Ok(vec![]));
    assert_eq!(parse_cpu_list("0"), Ok(vec![0]));
    assert_eq!(parse_cpu_list("0-3,8-11\n"), Ok(vec![0, 1, 2, 3, 8, 9, 10, 11]));
    assert_eq!(parse_cpu_list("0-3\n\0"), Ok(vec![0, 1, 2, 3]));
    assert_eq!(parse_cpu_list("5,1,3-3"), Ok(vec![1, 3, 5]));
    assert_eq!(parse_cpu_list("0-2,1-3"), Ok(vec![0, 1, 2, 3]));
    for bad in [
        "0,,1",
        ",",
        "1-",
        "-1",
        "3-1",
        "a",
        "0-3:2/4",
        "1 2",
        "4294967295",
        "0-4294967295",
        "+1",
    ] {
        let err = parse_cpu_list(bad).unwrap_err().to_string();
        assert!(!err.is_empty(), "{bad:?}");
    }
    assert!(parse_cpu_list("3-1").unwrap_err().to_string().contains("backwards"));
    assert!(parse_cpu_list("0-x").unwrap_err().to_string().contains("\"x\""));
}

#[test]
fn cpu_list_formatter() {
    assert_eq!(format_cpu_list(&[]), "");
    assert_eq!(format_cpu_list(&[7]), "7");
    assert_eq!(format_cpu_list(&[0, 1]), "0-1");
    assert_eq!(format_cpu_list(&[0, 1, 2, 3, 8, 9, 10, 11]), "0-3,8-11");
    assert_eq!(format_cpu_list(&[0, 4, 8, 12]), "0,4,8,12");
    assert_eq!(format_cpu_list(&[3, 1, 2, 2]), "1-3");
    assert_eq!(
        format_cpu_list(&[u32::MAX - 1, u32::MAX]),
        format!("{}-{}", u32::MAX - 1, u32::MAX)
    );
    for text in ["0-3,8-11", "0,2,4-7", "1", ""] {
        assert_eq!(format_cpu_list(&parse_cpu_list(text).unwrap()), text);
    }
}

#[test]
fn live_figures_from_saved_proc() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("loadavg"), "0.50 0.25 0.10 1/79 15889\n").unwrap();
    fs::write(tmp.path().join("uptime"), "4258.67 4734.08\n").unwrap();
    let mut warnings = Vec::new();
    let live = live_figures(&hwloc_sys(), tmp.path(), &mut warnings).unwrap();
    assert_eq!(live.load, [0.5, 0.25, f64::from(0.10_f32)]);
    assert_eq!(live.uptime_seconds, 4258);
    let free: Vec<(u32, u64)> = live.numa_free_memory.into_iter().collect();
    assert_eq!(
        free,
        [
            (0, 75_631_516 * KB),
            (1, 85_242_572 * KB),
            (2, 90_309_928 * KB),
            (3, 96_933_048 * KB)
        ]
    );
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn live_figures_errors_name_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("uptime"), "4258.67 4734.08\n").unwrap();
    let err = live_figures(&hwloc_sys(), tmp.path(), &mut Vec::new()).unwrap_err();
    assert!(
        matches!(&err, ProbeError::Read { path, .. } if path.ends_with("loadavg")),
        "{err}"
    );

    fs::write(tmp.path().join("loadavg"), "garbage\n").unwrap();
    let err = live_figures(&hwloc_sys(), tmp.path(), &mut Vec::new()).unwrap_err();
    assert!(
        matches!(&err, ProbeError::Parse { path, .. } if path.ends_with("loadavg")),
        "{err}"
    );
    assert!(err.to_string().contains("garbage"), "{err}");

    fs::write(tmp.path().join("loadavg"), "0.50 0.25 0.10 1/79 15889\n").unwrap();
    fs::write(tmp.path().join("uptime"), "-5 0\n").unwrap();
    let err = live_figures(&hwloc_sys(), tmp.path(), &mut Vec::new()).unwrap_err();
    assert!(
        matches!(&err, ProbeError::Parse { path, .. } if path.ends_with("uptime")),
        "{err}"
    );
}

#[test]
fn live_figures_of_this_machine() {
    let mut warnings = Vec::new();
    let live = live_figures(Path::new("/sys"), Path::new("/proc"), &mut warnings).unwrap();
    assert!(live.uptime_seconds > 0);
    assert!(live.load.iter().all(|l| l.is_finite() && *l >= 0.0), "{:?}", live.load);
    // Every node this machine lists with a MemFree shows up, with less free than total.
    let nodes = read_numa(Path::new("/sys"), &mut warnings).unwrap();
    for n in &nodes {
        if let (Some(total), Some(free)) = (n.mem_total, n.mem_free) {
            assert!(free <= total, "node {}: {free} > {total}", n.os_index);
            assert!(live.numa_free_memory.contains_key(&n.os_index));
        }
    }
    assert!(warnings.is_empty(), "{warnings:?}");
}
