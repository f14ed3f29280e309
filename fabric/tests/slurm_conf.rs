//! Slurm `topology.conf`: the real files in `testdata/ib/` import, and import → export →
//! import is the identity, also for HyperNodes discovered from a dump.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use hyperplan_fabric::slurm::{parse_topology_conf, to_topology_conf};
use hyperplan_fabric::{HostNames, discover, parse_ibnetdiscover};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/ib/");

fn read(rel: &str) -> String {
    std::fs::read_to_string(format!("{DATA}{rel}")).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn round_trip(text: &str) {
    let first = parse_topology_conf(text, Path::new("a.conf")).unwrap();
    let exported = to_topology_conf(&first.hypernodes).unwrap();
    let second = parse_topology_conf(&exported, Path::new("b.conf")).unwrap();
    assert_eq!(first.hypernodes, second.hypernodes, "exported:\n{exported}");
    // Exporting again gives the same text.
    assert_eq!(to_topology_conf(&second.hypernodes).unwrap(), exported);
}

#[test]
fn x5_conf_imports_with_its_cycle_and_multiple_parents_reported() {
    let imp = parse_topology_conf(&read("x5/X5.topology.conf"), Path::new("X5.topology.conf")).unwrap();
    assert_eq!(imp.hypernodes.len(), 11);
    let tiers: Vec<(u32, &str)> = imp.hypernodes.iter().map(|h| (h.tier, h.name.as_str())).collect();
    insta::assert_snapshot!(format!("{tiers:#?}\n{}", imp.warnings.join("\n")));
    let leaves = imp.hypernodes.iter().filter(|h| h.tier == 1).count();
    assert_eq!(leaves, 6);
    round_trip(&read("x5/X5.topology.conf"));
}

#[test]
fn topograph_subset_conf_round_trips() {
    let imp = parse_topology_conf(&read("topograph/expected_subset_topology.conf"), Path::new("t.conf")).unwrap();
    let tiers: Vec<(u32, &str)> = imp.hypernodes.iter().map(|h| (h.tier, h.name.as_str())).collect();
    assert_eq!(
        tiers,
        [
            (1, "S-2c5eab0300b879c0"),
            (1, "S-2c5eab0300b87a80"),
            (1, "S-2c5eab0300c26040"),
            (2, "S-2c5eab0300c25f00"),
            (3, "S-2c5eab0300b87b40"),
        ]
    );
    assert!(imp.warnings.is_empty());
    round_trip(&read("topograph/expected_subset_topology.conf"));
}

#[test]
fn discovered_hypernodes_export_and_import_unchanged() {
    let text = read("topograph/example.out");
    let d = discover(
        &parse_ibnetdiscover(&text, Path::new("example.out")).unwrap(),
        &HostNames::default(),
    )
    .unwrap();
    let conf = to_topology_conf(&d.hypernodes).unwrap();
    insta::assert_snapshot!(conf);
    let back = parse_topology_conf(&conf, Path::new("exported.conf")).unwrap();
    assert_eq!(back.hypernodes, d.hypernodes);
    assert!(back.warnings.is_empty(), "{:?}", back.warnings);
}
