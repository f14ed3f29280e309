//! End-to-end (issue 27): real `hyperplan-agent`s report their GPUs' NVLink fabric (saved
//! `nvidia-smi` reports from `testdata/nvidia`, given with `--gpu-fabric`: this machine
//! has no GPU) to the real `hyperplan-planner` on 127.0.0.1. The `nvlink` source makes the
//! trays' domain a HyperNode; `hyperplan nodes` shows each node's NVLink state (a domain,
//! degraded, an H100 with none, a tray still registering); a job held to `nvlink` runs
//! inside the domain; a job whose segment can never fit is explained with `SegmentNoFit`;
//! `hyperplan-agent probe` says a node's verdict.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Cluster, bin, wait_for};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(40);
const MACHINE: &str = "pack:1 numa:1 core:2 pu:1";

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/nvidia")
        .join(name)
        .display()
        .to_string()
}

fn nvlink_of(nodes: &Value, name: &str) -> Value {
    nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .map(|n| n["nvlink"].clone())
        .unwrap_or(Value::Null)
}

#[test]
fn trays_report_their_domain_and_a_job_held_to_nvlink_runs_inside_it() {
    let mut c = Cluster::start(&["tray1", "tray2", "h100", "tray3"]);
    for (node, report) in [
        ("tray1", "gb200-nvl72-tray.csv"),
        ("tray2", "gb200-tray-degraded.q.txt"),
        ("h100", "hgx-h100.csv"),
        ("tray3", "gb200-tray-in-progress.csv"),
    ] {
        c.start_agent_with(node, MACHINE, &[], &["--gpu-fabric", &fixture(report)]);
    }
    // Every agent registered (agents start in any order): the still-registering tray too.
    let want = "1 NVLink domain(s), 0 partition(s) from 2 node(s); 1 node(s) degraded; 1 node(s) still registering";
    let tree = wait_for(LONG, "the NVLink domain with both trays, every agent counted", || {
        let t = c.cli_json("alice", &["hypernodes"]);
        let found = t["hyperNodes"]
            .as_array()?
            .iter()
            .any(|h| h["name"] == "nvl-6b8d7c1e" && h["nodes"] == 2);
        let counted = t["sources"]
            .as_array()?
            .iter()
            .any(|s| s["name"] == "nvlink" && s["summary"].as_str().is_some_and(|x| x.contains(want)));
        (found && counted).then_some(t)
    });
    let domain = tree["hyperNodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == "nvl-6b8d7c1e")
        .unwrap();
    assert_eq!(domain["tierName"], "nvlink", "{domain:#}");
    assert_eq!(domain["source"], "nvlink", "{domain:#}");
    let source = tree["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "nvlink")
        .unwrap();
    let summary = source["summary"].as_str().unwrap();
    assert!(summary.contains(want), "{summary}");

    // Each node's state, as JSON and in the table.
    let nodes = wait_for(LONG, "every node listed", || {
        let n = c.cli_json("alice", &["nodes"]);
        (n["nodes"].as_array()?.len() == 4).then_some(n)
    });
    assert_eq!(nvlink_of(&nodes, "tray1")["state"], "ok");
    assert_eq!(nvlink_of(&nodes, "tray1")["hyperNode"], "nvl-6b8d7c1e");
    assert_eq!(nvlink_of(&nodes, "tray2")["state"], "degraded");
    assert_eq!(nvlink_of(&nodes, "h100")["state"], "none");
    assert_eq!(nvlink_of(&nodes, "tray3")["state"], "registering");
    let out = c.cli("alice", &["nodes"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for want in [
        "NVLINK",
        "nvl-6b8d7c1e(degraded)",
        "\nnvlink:\n",
        "tray2: degraded: GPU 0018:01:00.0: bandwidth degraded",
        "tray3: registering: GPU 2",
    ] {
        assert!(table.contains(want), "{want:?} not in\n{table}");
    }

    // Two ranks held to one NVLink domain land on its two trays.
    let job = c.write(
        "job.yaml",
        "name: nvl\nnetworkTopology: {mode: hard, highestTierName: nvlink}\n\
         tasks:\n  - name: rank\n    replicas: 2\n    resources: {cpu: 2}\n",
    );
    c.cli_json("alice", &["submit", job.to_str().unwrap()]);
    let status = wait_for(LONG, "nvl placed", || {
        let s = c.cli_json("alice", &["status", "nvl"]);
        s["jobs"][0]["allocatedHyperNode"].is_string().then_some(s)
    });
    assert_eq!(status["jobs"][0]["allocatedHyperNode"], "nvl-6b8d7c1e", "{status:#}");
    let mut on: Vec<String> = status["jobs"][0]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["node"].as_str().unwrap().to_string())
        .collect();
    on.sort();
    assert_eq!(on, ["tray1", "tray2"], "{status:#}");

    // Segments go over the wire: three ranks in one NVLink domain of two trays can never
    // be, and `explain` says which segment and where the best one stands.
    let seg = c.write(
        "seg.yaml",
        "name: seg\nsegments:\n  - {size: 3, tierName: nvlink}\n\
         tasks:\n  - name: rank\n    replicas: 3\n    resources: {cpu: 2}\n",
    );
    c.cli_json("alice", &["submit", seg.to_str().unwrap()]);
    let out = wait_for(LONG, "seg explained", || {
        let out = c.cli("alice", &["explain", "seg"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.contains("NoFit").then_some(text)
    });
    assert!(
        out.contains("SegmentNoFit")
            && out.contains("segment seg/segment-0 (ranks 0-2)")
            && out.contains("best is nvl-6b8d7c1e with 2"),
        "{out}"
    );
}

/// `hyperplan-agent probe` of a small synthetic machine with the fabric report `report`.
fn probe(report: &Path) -> std::process::Output {
    Command::new(bin("hyperplan-agent"))
        .args(["probe", "--config", "/dev/null", "--synthetic", MACHINE, "--gpu-fabric"])
        .arg(report)
        .output()
        .unwrap()
}

/// As [`probe`], which must fail: its standard error.
fn probe_fails(report: &Path) -> String {
    let out = probe(report);
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn probe_says_the_verdict_and_refuses_a_fifo_as_the_report() {
    let out = probe(Path::new(&fixture("gb200-nvl72-x36-partition.csv")));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("NVLink domain nvl-6b8d7c1e, partition c1"), "{text}");

    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let err = probe_fails(&fifo);
    assert!(err.contains("expected a regular file"), "{err}");

    let truncated = dir.path().join("truncated.csv");
    std::fs::write(&truncated, "index, pci.bus_id, fabric.clusterUuid\n0, 0000").unwrap();
    let err = probe_fails(&truncated);
    assert!(err.contains("truncated.csv"), "{err}");
}
