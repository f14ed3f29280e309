//! End-to-end tests of `hyperplan-agent probe`: the real binary on the real data in
//! testdata/ (repository root), every output format, the sysfs merge and bad input.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Output};

use hyperplan_shared::topology::{NicKind, NodeTopology};

fn data(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata")).join(rel)
}

fn agent(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hyperplan-agent"))
        .args(args)
        .env_remove("HWLOC_FSROOT")
        .output()
        .unwrap()
}

fn probe_json(args: &[&str]) -> NodeTopology {
    let mut all = vec!["probe", "--format", "json"];
    all.extend_from_slice(args);
    let out = agent(&all);
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn local_probe_succeeds_in_every_format() {
    let t = probe_json(&[]);
    assert!(t.cores.iter().map(|c| c.pus.len()).sum::<usize>() >= 1);
    assert!(!t.numa_nodes.is_empty() || t.total_memory > 0);
    assert!(t.live.is_some(), "a live probe carries load and up time");
    let text = agent(&["probe"]);
    assert!(text.status.success());
    assert!(String::from_utf8_lossy(&text.stdout).contains("PUs"));
    let yaml = agent(&["probe", "--format", "yaml"]);
    assert!(String::from_utf8_lossy(&yaml.stdout).contains("numaNodes:"));
}

#[test]
fn xml_with_sysfs_tree_merges_hca_ports_with_hwloc_locality() {
    let xml = data("hwloc-xml/linux__40intel64-2g2n4c+pci.xml");
    let sys = data("sysfs/hwloc/40intel64-2g2n4c+pci");
    let t = probe_json(&[
        "--hwloc-xml",
        xml.to_str().unwrap(),
        "--sysfs-root",
        sys.to_str().unwrap(),
        "--label",
        "rack=r7",
    ]);
    assert_eq!(t.hcas.len(), 1);
    let qib = &t.hcas[0];
    assert_eq!(qib.name, "qib0");
    assert_eq!(qib.pci_bus_id.as_deref(), Some("0000:43:00.0"));
    assert_eq!(qib.pci_class.as_deref(), Some("0c06"));
    assert_eq!(qib.numa, [1, 3], "locality from hwloc's PCI tree");
    let port = &qib.ports[0];
    assert_eq!(port.state.as_deref(), Some("ACTIVE"));
    assert_eq!(port.rate_gbps, Some(40.0));
    assert_eq!(port.link_layer.as_deref(), Some("InfiniBand"));
    assert_eq!(port.netdev.as_deref(), Some("ib0"));
    assert!(t.live.is_none(), "a saved tree has no live figures");
    assert_eq!(t.labels.get("rack").map(String::as_str), Some("r7"));
}

#[test]
fn usnic_is_a_nic_not_an_infiniband_hca() {
    let t = probe_json(&[
        "--hwloc-xml",
        data("hwloc-xml/xml__16intel64-manyVFs.xml").to_str().unwrap(),
    ]);
    assert!(t.hcas.is_empty());
    assert!(t.nics.iter().any(|n| n.kind == NicKind::Usnic), "{:?}", t.nics);
}

#[test]
fn gathered_tree_is_probed_through_hwloc_fsroot_with_sparse_numa_ids() {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("tar")
        .arg("xjf")
        .arg(data("hwloc-linux/48amd64-4d2n6c-sparse.tar.bz2"))
        .arg("-C")
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    let root = dir.path().join("48amd64-4d2n6c-sparse");
    let t = probe_json(&["--sysfs-root", root.to_str().unwrap()]);
    let ids: Vec<u32> = t.numa_nodes.iter().map(|n| n.os_index).collect();
    assert_eq!(ids, [0, 1, 2, 33, 34, 45, 72, 73]);
    assert_eq!(t.cores.len(), 48);
}

#[test]
fn synthetic_and_bad_input() {
    let t = probe_json(&["--synthetic", "pack:2 numa:2 core:8 pu:2"]);
    assert_eq!((t.packages.len(), t.numa_nodes.len(), t.cores.len()), (2, 4, 32));
    let bad = agent(&["probe", "--synthetic", "pack:2 numa:x"]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("synthetic topology \"pack:2 numa:x\" does not parse"),
        "{err}"
    );
    let missing = agent(&["probe", "--hwloc-xml", "/nonexistent/lstopo.xml"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/lstopo.xml"));
    assert!(missing.stdout.is_empty());
}

#[test]
fn saved_probe_reads_back_the_same_value() {
    let dir = tempfile::tempdir().unwrap();
    let out = agent(&[
        "probe",
        "--format",
        "json",
        "--hwloc-xml",
        data("hwloc-xml/xml__nvidiaDGX2.xml").to_str().unwrap(),
    ]);
    let path = dir.path().join("dgx2.json");
    std::fs::write(&path, &out.stdout).unwrap();
    let back = hyperplan_agent::probe::load_probe_json(&path).unwrap();
    assert_eq!(back.gpus.len(), 16);
    let direct: NodeTopology = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(back, direct);
    std::fs::write(&path, "{\"hostname\": 3}").unwrap();
    let err = hyperplan_agent::probe::load_probe_json(&path).unwrap_err().to_string();
    assert!(err.contains("dgx2.json") && err.contains("line 1"), "{err}");
}

#[test]
fn text_summary_for_people() {
    let xml = data("hwloc-xml/linux__40intel64-2g2n4c+pci.xml");
    let sys = data("sysfs/hwloc/40intel64-2g2n4c+pci");
    let out = agent(&[
        "probe",
        "--hwloc-xml",
        xml.to_str().unwrap(),
        "--sysfs-root",
        sys.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    insta::assert_snapshot!(String::from_utf8_lossy(&out.stdout));
    let dgx = agent(&[
        "probe",
        "--hwloc-xml",
        data("hwloc-xml/xml__nvidiaDGX2.xml").to_str().unwrap(),
    ]);
    insta::assert_snapshot!("dgx2", String::from_utf8_lossy(&dgx.stdout));
}

#[test]
fn labels_come_from_the_config_and_flags_override() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agent.toml");
    std::fs::write(&cfg, "[labels]\nrack = \"r1\"\nleaf = \"l1\"\n").unwrap();
    let t = probe_json(&[
        "--synthetic",
        "pack:1 core:2 pu:1",
        "--config",
        cfg.to_str().unwrap(),
        "--label",
        "leaf=l7",
    ]);
    assert_eq!(t.labels.get("rack").map(String::as_str), Some("r1"));
    assert_eq!(t.labels.get("leaf").map(String::as_str), Some("l7"));
    std::fs::write(&cfg, "planer = \"x\"\n").unwrap();
    let bad = agent(&["probe", "--config", cfg.to_str().unwrap()]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("agent.toml:1:1: unknown field `planer`"));
}

/// A copy of a real export whose first PU has no `complete_cpuset` (libhwloc 2.9 crashes
/// on it with SIGSEGV).
fn malformed_xml(dir: &std::path::Path) -> PathBuf {
    let text = std::fs::read_to_string(data("hwloc-xml/xml__16em64t-4s2c2t.xml")).unwrap();
    let pu = text.find("<object type=\"PU\"").unwrap();
    let attr_start = pu + text[pu..].find(" complete_cpuset=\"").unwrap();
    let attr_end = attr_start + 1 + text[attr_start + 1..].find("\" ").unwrap() + 1;
    let mut bad = text.clone();
    bad.replace_range(attr_start..attr_end, "");
    let path = dir.join("no-complete-cpuset.xml");
    std::fs::write(&path, bad).unwrap();
    path
}

#[test]
fn malformed_xml_that_crashes_hwloc_is_an_error_naming_the_file() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let xml = malformed_xml(dir.path());
    for format in ["text", "json"] {
        let out = agent(&["probe", "--format", format, "--hwloc-xml", xml.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.signal(), None, "the probe crashed: {stderr}");
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(&xml.display().to_string()), "{stderr}");
        assert!(stderr.contains("crashed"), "{stderr}");
        assert!(out.stdout.is_empty());
    }
}
