//! Link health from dumps (`hyperplan_fabric::links`): the real dumps of `testdata/ib/`
//! and a generated fat tree with one host link fallen to 1x and one leaf uplink fallen to
//! EDR. Each degraded link counts against the HyperNode holding both its ends.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use hyperplan_fabric::synthetic::FatTreeDump;
use hyperplan_fabric::{HostNames, discover, parse_ibnetdiscover};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/ib/");

#[test]
fn real_dumps_say_which_links_trained_below_their_neighbours() {
    let mut found = Vec::new();
    for rel in [
        "ibnetdiscover-ports/test.out",
        "ibnetdiscover-ports/test2.out",
        "ibnetdiscover-ports/test3.out",
        "topograph/example.out",
        "ibtopotool/1.topo",
        "ibtopotool/2.topo",
        "ibtopotool/3.topo",
        "ibtopotool/4.topo",
        "ufm-lab/small_topo_file",
        "x5/X5.topofile",
    ] {
        let text = std::fs::read_to_string(format!("{DATA}{rel}")).unwrap();
        let fabric = parse_ibnetdiscover(&text, Path::new(rel)).unwrap();
        let d = discover(&fabric, &HostNames::default()).unwrap();
        found.extend(d.degraded_links.iter().map(|l| format!("{rel}: {}: {l}", l.hypernode)));
    }
    // A lab fabric (UFM's test dumps): an FDR HCA on an EDR leaf, and a port that trained
    // at SDR among QDR ones. Every other dump's links match their neighbours'.
    assert_eq!(
        found,
        [
            "ibtopotool/3.topo: leaf-e41d2d030003e470: r-ufm111 HCA-1 port 2 – e41d2d030003e470 port 35: 4xFDR (expected 4xEDR), line 20",
            "ibtopotool/3.topo: leaf-switch-de779e: r-ufm96 HCA-1 port 1 – switch-de779e port 8: 4xSDR (expected 4xQDR), line 31",
        ]
    );
}

/// `text` with every line of the block headed by `switch` that names `peer` at `rate`.
fn retrain(text: &str, block: &str, peer: &str, rate: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in text.lines() {
        if line.is_empty() {
            inside = false;
        } else if line.starts_with("Switch") || line.starts_with("Ca") {
            inside = line.contains(block);
        }
        if inside && line.starts_with('[') && line.contains(peer) {
            out.push_str(&line.replace("4xHDR", rate));
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

#[test]
fn a_host_link_at_1x_and_a_leaf_uplink_at_edr_count_against_their_hypernodes() {
    let spec = FatTreeDump {
        pods: 2,
        leaves_per_pod: 4,
        spines_per_pod: 2,
        cores_per_group: 1,
        hosts_per_pod: 8,
        rails: 1,
        sharp: false,
    };
    let healthy = spec.generate();
    let d = discover(
        &parse_ibnetdiscover(&healthy, Path::new("t.out")).unwrap(),
        &HostNames::default(),
    )
    .unwrap();
    assert!(d.degraded_links.is_empty(), "{:?}", d.degraded_links);
    // gpu00001 on pod00-leaf00 at 1x (both ends of the cable say so), and that leaf's
    // cable to pod00-spine00 at EDR.
    let mut text = retrain(&healthy, "S-0000000010000000", "H-0000000040000000", "1xHDR");
    text = retrain(&text, "H-0000000040000000", "S-0000000010000000", "1xHDR");
    text = retrain(&text, "S-0000000010000000", "S-0000000020000000", "4xEDR");
    text = retrain(&text, "S-0000000020000000", "S-0000000010000000", "4xEDR");
    let d = discover(
        &parse_ibnetdiscover(&text, Path::new("t.out")).unwrap(),
        &HostNames::default(),
    )
    .unwrap();
    let said: Vec<String> = d
        .degraded_links
        .iter()
        .map(|l| format!("{}: {l}", l.hypernode))
        .collect();
    let leaf = d
        .hypernodes
        .iter()
        .find(|h| h.tier == 1 && h.members.iter().any(|m| format!("{m:?}").contains("\"gpu00001\"")))
        .unwrap();
    let pod = d
        .hypernodes
        .iter()
        .find(|h| {
            h.tier == 2
                && h.members
                    .iter()
                    .any(|m| format!("{m:?}").contains(&format!("\"{}\"", leaf.name)))
        })
        .unwrap();
    assert_eq!(said.len(), 2, "{said:#?}");
    assert!(
        said[0].starts_with(&format!(
            "{}: gpu00001 mlx5_0 port 1 – pod00-leaf00 port 1: 1xHDR (expected 4xHDR)",
            leaf.name
        )),
        "{said:#?}"
    );
    assert!(
        said[1].starts_with(&format!(
            "{}: pod00-leaf00 port 3 – pod00-spine00 port 1: 4xEDR (expected 4xHDR)",
            pod.name
        )),
        "{said:#?}"
    );
    assert!(
        d.summary().ends_with("2 link(s) below their neighbours' rate"),
        "{}",
        d.summary()
    );
}
