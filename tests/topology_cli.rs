//! End-to-end tests of `hyperplan topology`: discover from real ibnetdiscover dumps,
//! Slurm import and export, and the errors people see. They run the real binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const IB: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/ib/");

fn hyperplan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hyperplan"))
        .current_dir(IB)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap_or_else(|e| panic!("cannot run hyperplan: {e}"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn discover_yaml_is_volcano_manifests_the_planner_reads_back() {
    let out = hyperplan(&["topology", "discover", "--ibnetdiscover", "topograph/example.out"]);
    let yaml = ok(&out);
    let hns = hyperplan_shared::hypernode::parse_hypernode_manifests(&yaml, Path::new("stdout")).unwrap();
    assert_eq!(hns.len(), 9);
    assert!(yaml.starts_with("apiVersion: topology.volcano.sh/v1alpha1\nkind: HyperNode\n"));
    insta::assert_snapshot!("discover_topograph_stderr", text(&out.stderr));
}

#[test]
fn discover_x5_with_guid_map_as_slurm() {
    let out = hyperplan(&[
        "topology",
        "discover",
        "--ibnetdiscover",
        "x5/X5.topofile",
        "--guid-map",
        "x5/X5.map",
        "--output",
        "slurm",
    ]);
    insta::assert_snapshot!("discover_x5_slurm", ok(&out));
    insta::assert_snapshot!("discover_x5_stderr", text(&out.stderr));
}

#[test]
fn discover_json_lists_unmapped_cas_and_warnings() {
    let out = hyperplan(&[
        "topology",
        "discover",
        "--ibnetdiscover",
        "ibtopotool/3.topo",
        "--output",
        "json",
    ]);
    let v: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(v["hypernodes"].as_array().unwrap().len(), 2);
    assert_eq!(v["hypernodes"][0]["tierName"], "leaf");
    assert_eq!(v["hypernodes"][0]["members"][0]["type"], "Node");
    assert_eq!(
        v["hypernodes"][0]["members"][0]["selector"]["exactMatch"]["name"],
        "r-ufm111"
    );
    assert_eq!(v["unmapped"].as_array().unwrap().len(), 0);
    assert_eq!(v["warnings"].as_array().unwrap().len(), 1);
    assert_eq!(v["switches"][0]["level"], 1);

    let out = hyperplan(&[
        "topology",
        "discover",
        "--ibnetdiscover",
        "ibtopotool/1.topo",
        "--output",
        "json",
    ]);
    let v: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(v["unmapped"].as_array().unwrap().len(), 4);
    assert_eq!(v["unmapped"][0]["id"], "H-0008f10403960558");
}

#[test]
fn discover_dot_draws_the_tree() {
    let out = hyperplan(&[
        "topology",
        "discover",
        "--ibnetdiscover",
        "ufm-lab/small_topo_file",
        "--output",
        "dot",
    ]);
    insta::assert_snapshot!("discover_ufm_lab_dot", ok(&out));
}

#[test]
fn discover_errors_name_the_file() {
    let out = hyperplan(&["topology", "discover", "--ibnetdiscover", "topograph/example-bad.out"]);
    assert!(!out.status.success());
    insta::assert_snapshot!("discover_no_switches", text(&out.stderr));
    let out = hyperplan(&[
        "topology",
        "discover",
        "--ibnetdiscover",
        "x5/X5.topofile",
        "--guid-map",
        "x5/X5.spine",
    ]);
    assert!(!out.status.success());
    insta::assert_snapshot!("discover_bad_guid_map", text(&out.stderr));
    let out = hyperplan(&["topology", "discover", "--ibnetdiscover", "no/such/file"]);
    assert!(
        text(&out.stderr).starts_with("hyperplan: reading no/such/file:"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn import_then_export_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let out = hyperplan(&["topology", "import", "--slurm", "x5/X5.topology.conf"]);
    let yaml = ok(&out);
    assert!(text(&out.stderr).contains("a cycle"), "{}", text(&out.stderr));
    let file = dir.path().join("x5.yaml");
    std::fs::write(&file, &yaml).unwrap();
    let conf = ok(&hyperplan(&[
        "topology",
        "export",
        "--format",
        "slurm",
        "--hypernodes",
        file.to_str().unwrap(),
    ]));
    insta::assert_snapshot!("export_x5", conf);
    let conf_file = dir.path().join("topology.conf");
    std::fs::write(&conf_file, &conf).unwrap();
    let again = ok(&hyperplan(&[
        "topology",
        "import",
        "--slurm",
        conf_file.to_str().unwrap(),
    ]));
    assert_eq!(again, yaml);

    let v: Value = serde_json::from_str(&ok(&hyperplan(&[
        "topology",
        "import",
        "--slurm",
        "topograph/expected_subset_topology.conf",
        "--output",
        "json",
    ])))
    .unwrap();
    assert_eq!(v["hypernodes"].as_array().unwrap().len(), 5);
}

#[test]
fn import_errors_name_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("topology.conf");
    std::fs::write(&conf, "SwitchName=s1 Switches=l1\nSwitchName=l1 Nodes=gpu[1-\n").unwrap();
    let out = hyperplan(&["topology", "import", "--slurm", conf.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = text(&out.stderr).replace(dir.path().to_str().unwrap(), "DIR");
    insta::assert_snapshot!("import_bad_hostlist", err);
}

/// Issue 12 item 10: an empty topology.conf fails naming the file; a cycle's output reads back.
#[test]
fn import_empty_fails_and_a_cycle_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("topology.conf");
    std::fs::write(&conf, "# nothing here\n").unwrap();
    let out = hyperplan(&["topology", "import", "--slurm", conf.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = text(&out.stderr).replace(dir.path().to_str().unwrap(), "DIR");
    assert_eq!(
        err,
        "hyperplan: DIR/topology.conf:0: expected `SwitchName=` lines (Slurm topology/tree), the file has none\n"
    );

    std::fs::write(
        &conf,
        "SwitchName=a Switches=b,l\nSwitchName=b Switches=a\nSwitchName=l Nodes=n1\n",
    )
    .unwrap();
    let out = hyperplan(&["topology", "import", "--slurm", conf.to_str().unwrap()]);
    let yaml = ok(&out);
    assert!(
        !yaml.contains("members:\n---") && !yaml.ends_with("members:\n"),
        "{yaml}"
    );
    hyperplan_shared::hypernode::parse_hypernode_manifests(&yaml, Path::new("stdout")).unwrap();
}

#[test]
fn export_rejects_duplicate_names_across_files() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = "apiVersion: topology.volcano.sh/v1alpha1\nkind: HyperNode\nmetadata:\n  name: leaf-a\nspec:\n  tier: 1\n  members:\n    - {type: Node, selector: {exactMatch: {name: n1}}}\n";
    let (a, b) = (dir.path().join("a.yaml"), dir.path().join("b.yaml"));
    std::fs::write(&a, yaml).unwrap();
    std::fs::write(&b, yaml).unwrap();
    let out = hyperplan(&[
        "topology",
        "export",
        "--format",
        "slurm",
        "--hypernodes",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("is also defined in"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn help_teaches() {
    let help = ok(&hyperplan(&["topology", "discover", "--help"]));
    assert!(help.contains("--guid-map"));
    assert!(help.contains("dot -Tsvg"));
    assert!(help.contains("SHARP"));
}
