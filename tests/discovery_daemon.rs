//! Fabric discovery in the real planner daemon, on 127.0.0.1: an ibnetdiscover dump, a
//! UFM (a stand-in HTTP server) and a Slurm topology.conf as `[[discovery]]` sources next
//! to real agents. A CA the dump does not name is named by the GUID its agent reports;
//! hosts that are no planner node are left out; a file that appears later is picked up
//! on the source's interval; a UFM that answers 500 or hangs, and a truncated dump, each
//! keep their last good HyperNodes while `hyperplan hypernodes` and the log say why; the
//! planner keeps answering while a source hangs; SIGHUP reads every source again; the
//! live tree exports as a Slurm topology.conf.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use common::ufm::{CREDENTIALS, MockUfm, Reply};
use common::{Cluster, wait_for};
use serde_json::Value;

const MACHINE: &str = "pack:1 numa:1(memory=8589934592) core:4 pu:1";
const LONG: Duration = Duration::from_secs(60);

fn testdata(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata").join(rel)
}

/// The `sources[]` entry named `name` of `hyperplan hypernodes --output json`.
fn source(c: &Cluster, name: &str) -> Value {
    let tree = c.cli_json("alice", &["hypernodes"]);
    tree["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no source {name} in {tree:#}"))
}

/// HyperNode name → sorted member nodes (children for upper tiers), of one source.
fn owned(c: &Cluster, source: &str) -> Vec<(String, Vec<String>)> {
    let tree = c.cli_json("alice", &["hypernodes"]);
    let mut out: Vec<(String, Vec<String>)> = tree["hyperNodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["source"] == source)
        .map(|h| {
            let kids: Vec<String> = h["children"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k.as_str().unwrap().to_string())
                .collect();
            (h["name"].as_str().unwrap().to_string(), kids)
        })
        .collect();
    out.sort();
    out
}

/// What [`owned`] gives for two leaves (no child HyperNodes) under one spine.
fn two_leaves_under(spine: &str, a: &str, b: &str) -> Vec<(String, Vec<String>)> {
    vec![
        (a.to_string(), vec![]),
        (b.to_string(), vec![]),
        (spine.to_string(), vec![a.to_string(), b.to_string()]),
    ]
}

fn wait_source(c: &Cluster, name: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    wait_for(LONG, &format!("source {name}: {what}"), || {
        let s = source(c, name);
        ok(&s).then_some(s)
    })
}

#[test]
fn fabric_ufm_and_slurm_sources_in_the_daemon() {
    let ufm = MockUfm::start(Reply::Ports(
        std::fs::read(testdata("ufm/volcano_mock/resources_ports.mock.json")).unwrap(),
    ));
    let toml = format!(
        r#"
[[discovery]]
source = "ibnetdiscover"
name = "fabric"
file = "fabric.out"
interval = "1h"

[[discovery]]
source = "ufm"
endpoint = "{endpoint}"
credentialsFile = "ufm.credentials"
interval = "1h"
timeout = "3s"

[[discovery]]
source = "slurm"
file = "topology.conf"
interval = "1s"
"#,
        endpoint = ufm.endpoint
    );
    let nodes = ["gpu001", "gpu002", "qnode", "node0", "node4", "cpu01", "cpu02"];
    let dump =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/two-leaf-fabric.out"))
            .unwrap();
    // The files must be there before the planner's first poll.
    let mut c = Cluster::prepare(&nodes, Some(&toml));
    c.write("fabric.out", &dump);
    let creds = c.write("ufm.credentials", CREDENTIALS);
    std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o600)).unwrap();
    c.start_planner("127.0.0.1:0");
    // qnode's only HCA is the 40intel64 machine's qib0 (GUID 0011:7500:0077:cfc8), whose
    // CA in the dump has a description that names no host.
    let sysfs = testdata("sysfs/hwloc/40intel64-2g2n4c+pci");
    for n in nodes {
        let extra: Vec<&str> = if n == "qnode" {
            vec!["--sysfs-root", sysfs.to_str().unwrap()]
        } else {
            vec![]
        };
        c.start_agent_with(n, MACHINE, &[], &extra);
    }
    for n in nodes {
        c.wait_state(n, "Ready", LONG);
    }

    // ibnetdiscover: gpu001/gpu002 by their descriptions, qnode by its agent's GUID,
    // stor01 is no planner node.
    let fabric = wait_source(&c, "fabric", "3 HyperNodes with qnode", |s| {
        s["hyperNodes"] == 3 && s["summary"].as_str().unwrap_or("").contains("by agents")
    });
    assert_eq!(fabric["kind"], "ibnetdiscover");
    assert_eq!(fabric["unknownHosts"], serde_json::json!(["stor01"]));
    assert_eq!(fabric["unmapped"], serde_json::json!([]), "{fabric:#}");
    assert_eq!(
        owned(&c, "fabric"),
        two_leaves_under("spine-ib-s1", "leaf-ib-l1", "leaf-ib-l2")
    );
    let tree = c.cli_json("alice", &["hypernodes"]);
    let l2 = tree["hyperNodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == "leaf-ib-l2")
        .unwrap();
    assert_eq!((l2["nodes"].as_u64(), l2["readyNodes"].as_u64()), (Some(1), Some(1)));

    // UFM: Volcano's leaf grouping, filtered to the two hosts that are nodes.
    let ufm_status = wait_source(&c, "ufm", "3 HyperNodes", |s| s["hyperNodes"] == 3);
    assert!(ufm_status["error"].is_null(), "{ufm_status:#}");
    assert_eq!(ufm_status["unknownHosts"].as_array().unwrap().len(), 6);
    assert_eq!(owned(&c, "ufm"), two_leaves_under("spine-hn", "leaf-hn-0", "leaf-hn-1"));

    // Slurm: the file does not exist yet, so the source fails and has nothing...
    let slurm = wait_source(&c, "slurm", "an error", |s| !s["error"].is_null());
    assert!(
        slurm["error"].as_str().unwrap().contains("topology.conf: cannot read"),
        "{slurm:#}"
    );
    assert_eq!(slurm["hyperNodes"], 0);
    // ...until it appears: read on the source's 1 s interval, no signal needed.
    c.write(
        "topology.conf",
        "SwitchName=s-leaf Nodes=cpu[01-02] LinkSpeed=100\nSwitchName=s-top Switches=s-leaf\n",
    );
    wait_source(&c, "slurm", "2 HyperNodes", |s| {
        s["hyperNodes"] == 2 && s["error"].is_null()
    });

    // UFM answers 500: SIGHUP reads every source now; UFM's HyperNodes stay.
    ufm.set(Reply::Status(500));
    c.signal_planner("HUP");
    let failing = wait_source(&c, "ufm", "HTTP 500", |s| {
        s["error"].as_str().is_some_and(|e| e.contains("HTTP 500"))
    });
    assert_eq!(failing["hyperNodes"], 3);
    assert!(
        failing["lastSuccess"].as_u64() < failing["lastAttempt"].as_u64(),
        "{failing:#}"
    );
    assert_eq!(owned(&c, "ufm").len(), 3);
    let log = c.planner_log();
    assert!(
        log.contains("discovery source ufm (ufm): UFM at")
            && log.contains("answered HTTP 500")
            && log.contains("keeping its 3 HyperNode(s)"),
        "{log}"
    );

    // A wrong password (401), then a login page instead of JSON: each a clear error.
    ufm.set(Reply::Ports(
        std::fs::read(testdata("ufm/volcano_mock/resources_ports.mock.json")).unwrap(),
    ));
    c.write("ufm.credentials", "admin:wrong\n");
    c.signal_planner("HUP");
    let e = wait_source(&c, "ufm", "HTTP 401", |s| {
        s["error"].as_str().is_some_and(|e| e.contains("401"))
    });
    assert!(e["error"].as_str().unwrap().contains("ufm.credentials"), "{e:#}");
    c.write("ufm.credentials", CREDENTIALS);
    ufm.set(Reply::Ports(b"<html><body>UFM login</body></html>".to_vec()));
    c.signal_planner("HUP");
    let e = wait_source(&c, "ufm", "not JSON", |s| {
        s["error"].as_str().is_some_and(|e| e.contains("not JSON"))
    });
    assert_eq!(e["hyperNodes"], 3);

    // UFM hangs: the planner answers people while the poll waits (up to its 3 s timeout).
    ufm.set(Reply::Hang);
    c.signal_planner("HUP");
    wait_for(LONG, "the UFM poll to hang", || (ufm.hanging() == 1).then_some(()));
    assert_eq!(
        c.cli_json("alice", &["nodes"])["nodes"].as_array().unwrap().len(),
        nodes.len()
    );
    let still = source(&c, "ufm");
    assert_eq!(ufm.hanging(), 1, "answered only once UFM gave up: {still:#}");
    assert!(
        !still["error"].as_str().unwrap_or("").contains("did not answer"),
        "{still:#}"
    );
    let hung = wait_source(&c, "ufm", "a timeout", |s| {
        s["error"]
            .as_str()
            .is_some_and(|e| e.contains("did not answer within 3 s"))
    });
    assert_eq!(hung["hyperNodes"], 3);

    // A truncated dump: a clear error naming the file and line; the fabric's HyperNodes stay.
    let cut = dump.find("caguid=0x0000000000001002").unwrap();
    c.write("fabric.out", &format!("{}Ca\t1 \"H-00000000000010", &dump[..cut]));
    c.signal_planner("HUP");
    let broken = wait_source(&c, "fabric", "an error", |s| !s["error"].is_null());
    let e = broken["error"].as_str().unwrap();
    assert!(e.contains("fabric.out:"), "{e}");
    assert_eq!(broken["hyperNodes"], 3);
    assert_eq!(owned(&c, "fabric").len(), 3);

    // Repaired: works again, and the log says so.
    c.write("fabric.out", &dump);
    c.signal_planner("HUP");
    wait_source(&c, "fabric", "no error", |s| s["error"].is_null());
    assert!(
        c.planner_log()
            .contains("discovery source fabric (ibnetdiscover) works again")
    );

    // The people's view: the tree, then every source and its state.
    let out = c.cli("alice", &["hypernodes"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    for want in [
        "SOURCE",
        "fabric  ibnetdiscover  3",
        "FAILING (tried",
        "fabric: 1 host(s) it names are no planner node (left out): stor01",
    ] {
        assert!(table.contains(want), "{want:?} not in\n{table}");
    }

    // The live tree as a Slurm topology.conf: every source's switches, node names resolved.
    let out = c.cli("alice", &["topology", "export", "--format", "slurm"]);
    let conf = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for want in [
        "SwitchName=leaf-ib-l1 Nodes=gpu[001-002]",
        "SwitchName=leaf-ib-l2 Nodes=qnode",
        "SwitchName=spine-ib-s1 Switches=leaf-ib-l[1-2]",
        "SwitchName=leaf-hn-0 Nodes=node0",
        "SwitchName=s-leaf Nodes=cpu[01-02]",
    ] {
        assert!(conf.contains(want), "{want:?} not in\n{conf}");
    }

    // A leaf-bound gang of two whole nodes lands under one leaf.
    let job = c.write(
        "job.yaml",
        "name: pair\nnetworkTopology: {mode: hard, highestTierAllowed: 1}\n\
         tasks:\n  - name: rank\n    replicas: 2\n    resources: {cpu: 4}\n",
    );
    c.cli_json("alice", &["submit", job.to_str().unwrap()]);
    // Placed (and then run: it has no command, so its tasks fail at once).
    let status = wait_for(LONG, "pair placed", || {
        let s = c.cli_json("alice", &["status", "pair"]);
        s["jobs"][0]["allocatedHyperNode"].is_string().then_some(s)
    });
    let leaf = status["jobs"][0]["allocatedHyperNode"].as_str().unwrap().to_string();
    let tree = c.cli_json("alice", &["hypernodes"]);
    let h = tree["hyperNodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == leaf)
        .unwrap();
    assert_eq!(h["tier"], 1, "{status:#}");
}

#[test]
fn check_reads_every_source_once_and_fails_when_one_cannot_be_read() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("planner.toml");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/two-leaf-fabric.out"),
        dir.path().join("fabric.out"),
    )
    .unwrap();
    std::fs::write(
        &toml,
        "[[discovery]]\nsource = \"ibnetdiscover\"\nfile = \"fabric.out\"\n\n\
         [[discovery]]\nsource = \"slurm\"\nfile = \"topology.conf\"\ninterval = \"10m\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(common::bin("hyperplan-planner"))
        .arg("--config")
        .arg(&toml)
        .arg("--store")
        .arg(toml.with_file_name("state.redb"))
        .arg("--check")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let dir = dir.path().display();
    assert!(
        stdout.contains(&format!(
            "discovery ibnetdiscover (ibnetdiscover {dir}/fabric.out, every 1m): ok: 3 switches (2 at level 1, 1 at \
             level 2), 3 hosts on 3 CAs (3 named by descriptions), 1 unmapped CA(s), 0 switch-internal CA(s) left out; \
             3 HyperNodes in 2 tier(s)"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "discovery slurm (slurm {dir}/topology.conf, every 10m): FAILING: {dir}/topology.conf: cannot read: No such file"
        )),
        "{stdout}"
    );
    assert_eq!(
        stderr.trim(),
        "hyperplan-planner: the configuration is valid, but 1 discovery source(s) cannot be read (see above)"
    );
}
