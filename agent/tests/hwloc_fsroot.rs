//! `HwlocSource::Local` on real `hwloc-gather-topology` trees (`testdata/hwloc-linux`),
//! with `HWLOC_FSROOT` pointing at the unpacked tree.
//!
//! Environment variables are process-wide (and `set_var` is `unsafe` in edition 2024), so
//! the one driving test, `fsroot_trees`, re-runs this test binary once per tree with
//! `HWLOC_FSROOT` set on the child only; the child (`fsroot_child`, ignored otherwise)
//! probes and writes the `NodeTopology` as JSON for the parent to check against hwloc's
//! own `.output` beside each tarball.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use hyperplan_agent::probe::hwloc::{HwlocSource, probe_hwloc};
use hyperplan_shared::topology::{NicKind, NodeTopology};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/hwloc-linux");
/// Set on the child: where to write the probed topology.
const OUT_VAR: &str = "HYPERPLAN_TEST_HWLOC_FSROOT_OUT";

/// Child half: probe `Local` under the `HWLOC_FSROOT` the parent set, write JSON.
#[test]
#[ignore = "run by fsroot_trees in a child process with HWLOC_FSROOT set"]
fn fsroot_child() {
    let Some(out) = std::env::var_os(OUT_VAR) else {
        return;
    };
    let node = probe_hwloc(HwlocSource::Local).expect("probe under HWLOC_FSROOT");
    std::fs::write(out, serde_json::to_vec(&node).unwrap()).unwrap();
}

/// `KEY="VALUE"` lines of `NAME.env` (how hwloc's own test ran this tree), if any.
fn tree_env(name: &str) -> Vec<(String, String)> {
    let Ok(text) = std::fs::read_to_string(PathBuf::from(DATA).join(format!("{name}.env"))) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| !k.contains(' '))
        .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
        .collect()
}

/// Unpacks `NAME.tar.bz2` into `dir` and probes it in a child process.
fn probe_tree(dir: &Path, name: &str) -> NodeTopology {
    let tarball = Path::new(DATA).join(format!("{name}.tar.bz2"));
    assert!(tarball.is_file(), "{} missing", tarball.display());
    let status = Command::new("tar")
        .arg("xjf")
        .arg(&tarball)
        .current_dir(dir)
        .status()
        .expect("run tar");
    assert!(status.success(), "tar xjf {} failed", tarball.display());
    let root = dir.join(name);
    assert!(root.join("sys").is_dir(), "{} has no sys/", root.display());

    let out = dir.join(format!("{name}.json"));
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "fsroot_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("HWLOC_FSROOT", &root)
        .env(OUT_VAR, &out)
        .env_remove("HWLOC_XMLFILE")
        .env_remove("HWLOC_SYNTHETIC")
        .env_remove("HWLOC_COMPONENTS")
        .envs(tree_env(name))
        .output()
        .expect("re-run the test binary");
    assert!(
        output.status.success(),
        "child probe of {name} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&std::fs::read(&out).expect("child wrote no topology")).unwrap()
}

/// OS indexes of every object of `ty` in hwloc's expected output (`lstopo -v` text, or
/// XML when the `.options` said `--of xml`), sorted.
fn output_os_indexes(name: &str, ty: &str) -> Vec<u32> {
    let text = std::fs::read_to_string(PathBuf::from(DATA).join(format!("{name}.output"))).unwrap();
    let text_prefix = format!("{ty} L#");
    let xml_prefix = format!("<object type=\"{ty}\" os_index=\"");
    let mut indexes: Vec<u32> = text
        .lines()
        .map(str::trim_start)
        .filter_map(|l| {
            if l.starts_with(&text_prefix) {
                l.split_once("(P#")?.1.split([' ', ')']).next()?.parse().ok()
            } else {
                l.strip_prefix(&xml_prefix)?.split('"').next()?.parse().ok()
            }
        })
        .collect();
    indexes.sort_unstable();
    indexes
}

fn pus(node: &NodeTopology) -> Vec<u32> {
    let mut pus: Vec<u32> = node.cores.iter().flat_map(|c| c.pus.iter().copied()).collect();
    pus.sort_unstable();
    pus
}

fn numa_ids(node: &NodeTopology) -> Vec<u32> {
    node.numa_nodes.iter().map(|n| n.os_index).collect()
}

/// All trees in one test, serially (each child is its own process anyway).
#[test]
fn fsroot_trees() {
    let dir = tempfile::tempdir().unwrap();

    // --- 48amd64-4d2n6c-sparse: 4 packages, 8 NUMA nodes with sparse ids.
    let name = "48amd64-4d2n6c-sparse";
    let node = probe_tree(dir.path(), name);
    assert_eq!(numa_ids(&node), [0, 1, 2, 33, 34, 45, 72, 73]);
    assert_eq!(numa_ids(&node), output_os_indexes(name, "NUMANode"));
    assert_eq!(pus(&node), output_os_indexes(name, "PU"));
    assert_eq!(pus(&node), (0..48).collect::<Vec<_>>());
    assert_eq!(
        node.packages.iter().map(|p| p.os_index).collect::<Vec<_>>(),
        [Some(0), Some(1), Some(2), Some(3)]
    );
    assert_eq!(node.cores.len(), 48);
    assert_eq!(node.l3_groups.len(), 8);
    // hwloc-calc node:N --intersect pu on the same tree.
    let expected_cpus: [(u32, std::ops::Range<u32>); 8] = [
        (0, 0..6),
        (1, 6..12),
        (2, 12..18),
        (33, 18..24),
        (34, 24..30),
        (45, 30..36),
        (72, 36..42),
        (73, 42..48),
    ];
    for (numa, (id, cpus)) in node.numa_nodes.iter().zip(expected_cpus) {
        assert_eq!(numa.os_index, id);
        assert_eq!(numa.cpus, cpus.collect::<Vec<_>>(), "NUMA node {id}");
    }
    // local=8386460KB for node 0, 16777216KB for node 73.
    assert_eq!(node.numa_nodes[0].local_memory, 8_386_460 * 1024);
    assert_eq!(node.numa_nodes[7].local_memory, 16_777_216 * 1024);
    assert_eq!(node.total_memory, 100_661_148 * 1024);
    // The NUMALatency matrix of the .output, rows in OS-index order.
    assert_eq!(node.numa_nodes[0].distances, [10, 16, 16, 22, 16, 22, 16, 22]);
    assert_eq!(node.numa_nodes[7].distances, [22, 16, 16, 22, 22, 16, 16, 10]);
    assert_eq!(node.cpu_model.as_deref(), Some("AMD Engineering Sample"));
    assert!(node.cores.iter().all(|c| c.numa.is_some()));
    // A tree, not this machine: no hostname borrowed from the host running the test.
    assert_eq!(node.hostname, "");

    // --- offline-cpu0-node0: CPU0 (and CPUs 1-3, 21-23) offline, NUMA node 0 gone.
    let name = "offline-cpu0-node0";
    let node = probe_tree(dir.path(), name);
    let all_pus = pus(&node);
    assert!(!all_pus.contains(&0), "CPU0 is offline: {all_pus:?}");
    assert_eq!(all_pus, output_os_indexes(name, "PU"));
    assert_eq!(all_pus, (4..=20).collect::<Vec<_>>());
    assert_eq!(numa_ids(&node), [1]);
    assert_eq!(numa_ids(&node), output_os_indexes(name, "NUMANode"));
    assert_eq!(node.numa_nodes[0].cpus, [5, 7, 9, 11, 13, 15, 17, 19]);
    assert_eq!(node.packages.len(), 2);
    assert_eq!(node.packages[0].cpus, [4, 6, 8, 10, 12, 14, 16, 18, 20]);
    assert_eq!(node.cores.len(), 17);
    // Package 0's cores have no NUMA node left; package 1's are on node 1.
    assert!(
        node.cores
            .iter()
            .filter(|c| c.package == Some(0))
            .all(|c| c.numa.is_none())
    );
    assert!(
        node.cores
            .iter()
            .filter(|c| c.package == Some(1))
            .all(|c| c.numa == Some(1))
    );
    assert_eq!(
        node.cpu_model.as_deref(),
        Some("Intel(R) Xeon(R) CPU E5-2680 v3 @ 2.50GHz")
    );

    // --- 40intel64-2g2n4c+pci: I/O from the tree's sysfs, PCI locality from its `.env`.
    let name = "40intel64-2g2n4c+pci";
    let node = probe_tree(dir.path(), name);
    assert_eq!(numa_ids(&node), [0, 1, 2, 3]);
    assert_eq!(numa_ids(&node), output_os_indexes(name, "NUMANode"));
    assert_eq!(pus(&node), output_os_indexes(name, "PU"));
    assert_eq!(node.packages.len(), 4);
    assert_eq!(node.cores.len(), 40);
    let hca_names: Vec<&str> = node.hcas.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(hca_names, ["qib0"]);
    let qib = &node.hcas[0];
    assert_eq!(qib.pci_bus_id.as_deref(), Some("0000:43:00.0"));
    assert_eq!(qib.pci_class.as_deref(), Some("0c06"));
    assert_eq!(qib.numa, [1, 3]);
    let nics: Vec<(&str, NicKind, &[u32])> = node
        .nics
        .iter()
        .map(|n| (n.name.as_str(), n.kind, n.numa.as_slice()))
        .collect();
    assert_eq!(
        nics,
        [
            ("eth0", NicKind::Ethernet, &[0, 2][..]),
            ("eth1", NicKind::Ethernet, &[0, 2][..]),
            ("eth2", NicKind::Ethernet, &[0, 2][..]),
            ("eth3", NicKind::Ethernet, &[0, 2][..]),
            ("ib0", NicKind::Infiniband, &[1, 3][..]),
        ]
    );
    assert!(node.gpus.is_empty(), "{:?}", node.gpus);
}
