//! `hyperplan simulate` on a cluster file whose node names a malformed hwloc XML export
//! (an object without `complete_cpuset`, which crashes libhwloc with SIGSEGV): an error
//! naming the file, never a crash of `hyperplan` itself.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;

const GOOD_XML: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/testdata/hwloc-xml/xml__16em64t-4s2c2t.xml"
);

/// A copy of a real export whose first PU has no `complete_cpuset`.
fn malformed_xml(dir: &Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(GOOD_XML).unwrap();
    let pu = text.find("<object type=\"PU\"").unwrap();
    let attr_start = pu + text[pu..].find(" complete_cpuset=\"").unwrap();
    let attr_end = attr_start + 1 + text[attr_start + 1..].find("\" ").unwrap() + 1;
    let mut bad = text.clone();
    bad.replace_range(attr_start..attr_end, "");
    assert!(bad.len() < text.len());
    let path = dir.join("no-complete-cpuset.xml");
    std::fs::write(&path, bad).unwrap();
    path
}

#[test]
fn simulate_with_a_malformed_hwloc_xml_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let xml = malformed_xml(dir.path());
    std::fs::write(
        dir.path().join("cluster.yaml"),
        "nodes:\n  - {name: n1, topology: {hwlocXml: no-complete-cpuset.xml}}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("jobs.yaml"),
        "name: j\ntasks:\n  - name: w\n    replicas: 1\n    resources: {cpu: 1}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hyperplan"))
        .current_dir(dir.path())
        .args(["simulate", "--cluster", "cluster.yaml", "--jobs", "jobs.yaml"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), None, "hyperplan crashed: {stderr}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // Named as the cluster file names it (relative to its directory).
    assert!(xml.is_file());
    assert!(stderr.contains("no-complete-cpuset.xml"), "{stderr}");
    assert!(stderr.contains("crashed"), "{stderr}");
}
