//! Every ibnetdiscover dump in `testdata/ib/`: what parses, which CAs are hosts, SHARP
//! CAs left out, and the tiers built from the switch graph; plus bad input.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use hyperplan_fabric::ibnetdiscover::DumpFormat;
use hyperplan_fabric::tiers::NameSource;
use hyperplan_fabric::{Discovery, FabricError, GuidMap, HostNames, IbFabric, discover, parse_ibnetdiscover};
use hyperplan_shared::hostlist::{compress, expand};
use hyperplan_shared::{HyperNodeSpec, MemberType, Selector};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/ib/");

fn read(rel: &str) -> String {
    std::fs::read_to_string(format!("{DATA}{rel}")).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn parse(rel: &str) -> IbFabric {
    parse_ibnetdiscover(&read(rel), Path::new(rel)).unwrap_or_else(|e| panic!("{e}"))
}

fn discover_file(rel: &str, names: &HostNames) -> Discovery {
    discover(&parse(rel), names).unwrap_or_else(|e| panic!("{e}"))
}

fn names(h: &HyperNodeSpec) -> Vec<&str> {
    h.members
        .iter()
        .map(|m| match &m.selector {
            Selector::Exact { name } => name.as_str(),
            _ => panic!("discovery writes exact members only"),
        })
        .collect()
}

/// `t1 leaf-x: gpu[1-4]` per HyperNode: the whole tree in a few readable lines.
fn summary(d: &Discovery) -> String {
    d.hypernodes
        .iter()
        .map(|h| {
            format!(
                "t{} {} ({}): {}\n",
                h.tier,
                h.name,
                h.tier_name.as_deref().unwrap_or("-"),
                compress(&names(h))
            )
        })
        .collect()
}

fn tier1_of_each_host(d: &Discovery) -> BTreeMap<String, Vec<String>> {
    let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for h in d.hypernodes.iter().filter(|h| h.tier == 1) {
        for n in names(h) {
            m.entry(n.to_string()).or_default().push(h.name.clone());
        }
    }
    m
}

#[test]
fn topograph_superpod_slice_leaves_tier1_spines_tier2() {
    let f = parse("topograph/example.out");
    assert_eq!((f.switch_count(), f.ca_count()), (40, 582));
    let d = discover(&f, &HostNames::default()).unwrap();

    // 40 SHARP aggregation nodes, one per switch, none a host.
    assert_eq!(d.excluded.len(), 40);
    assert!(d.excluded.iter().all(|e| e.description.contains("Aggregation Node")));
    assert!(d.hosts.iter().all(|h| !h.description.contains("Aggregation")));

    // The tier is in the switch names: every IBLEAF is a level-1 switch in a tier-1
    // HyperNode, every IBSPINE a level-2 switch in a tier-2 one.
    let tier_of: BTreeMap<&str, u32> = d.hypernodes.iter().map(|h| (h.name.as_str(), h.tier)).collect();
    let (mut leaves, mut spines) = (0, 0);
    for s in &d.switches {
        let hn = s
            .hypernode
            .as_deref()
            .unwrap_or_else(|| panic!("{} is in no HyperNode", s.name));
        if s.name.contains("IBLEAF") {
            leaves += 1;
            assert_eq!((s.level, tier_of[hn]), (Some(1), 1), "{}", s.name);
        } else {
            assert!(s.name.contains("IBSPINE"), "{}", s.name);
            spines += 1;
            assert_eq!((s.level, tier_of[hn]), (Some(2), 2), "{}", s.name);
        }
    }
    assert_eq!((leaves, spines), (31, 9));

    // Each host in exactly one tier-1 HyperNode; all tier-1 under the one spine group.
    let per_host = tier1_of_each_host(&d);
    assert_eq!(per_host.len(), 121);
    assert!(per_host.values().all(|v| v.len() == 1), "{per_host:?}");
    let tier1: Vec<&HyperNodeSpec> = d.hypernodes.iter().filter(|h| h.tier == 1).collect();
    let tier2: Vec<&HyperNodeSpec> = d.hypernodes.iter().filter(|h| h.tier == 2).collect();
    assert_eq!((tier1.len(), tier2.len(), d.hypernodes.len()), (8, 1, 9));
    assert!(tier2[0].members.iter().all(|m| m.kind == MemberType::HyperNode));
    assert_eq!(tier2[0].members.len(), 8);

    // Unnamed HCAs (firmware descriptions, "localhost") are listed, not guessed.
    assert_eq!(d.unmapped.len(), 72);
    assert!(
        d.unmapped
            .iter()
            .all(|u| u.description.starts_with("MT4129") || u.description.starts_with("localhost"))
    );
    assert!(d.hosts.iter().all(|h| h.source == NameSource::Description));
    insta::assert_snapshot!(summary(&d));
}

#[test]
fn topograph_agrees_with_topograph_own_subset_leaves() {
    // expected_subset_topology.conf puts these nodes under these leaf switches; each such
    // leaf must sit in the tier-1 HyperNode that holds its nodes.
    let d = discover_file("topograph/example.out", &HostNames::default());
    let by_guid: BTreeMap<String, &str> = d
        .switches
        .iter()
        .map(|s| (format!("S-{:016x}", s.guids[0]), s.hypernode.as_deref().unwrap_or("")))
        .collect();
    let per_host = tier1_of_each_host(&d);
    let conf = read("topograph/expected_subset_topology.conf");
    let mut checked = 0;
    for line in conf.lines().filter(|l| l.contains("Nodes=")) {
        let (switch, nodes) = line.trim_start_matches("SwitchName=").split_once(" Nodes=").unwrap();
        let hn = by_guid[switch];
        for n in expand(nodes).unwrap() {
            assert_eq!(per_host[&n], [hn], "{n}");
            checked += 1;
        }
    }
    assert_eq!(checked, 31);
}

#[test]
fn output_does_not_depend_on_block_order() {
    let text = read("topograph/example.out");
    let blocks: Vec<&str> = text.split("\n\n").collect();
    let reversed: String = blocks.iter().rev().map(|b| format!("{b}\n\n")).collect();
    let a = discover(
        &parse_ibnetdiscover(&text, Path::new("a")).unwrap(),
        &HostNames::default(),
    )
    .unwrap();
    let b = discover(
        &parse_ibnetdiscover(&reversed, Path::new("b")).unwrap(),
        &HostNames::default(),
    )
    .unwrap();
    assert_eq!(a.hypernodes, b.hypernodes);
    assert_eq!(a.switches, b.switches);
}

fn x5_names() -> HostNames {
    HostNames {
        map_file: GuidMap::parse(&read("x5/X5.map"), Path::new("X5.map")).unwrap(),
        ..HostNames::default()
    }
}

#[test]
fn x5_with_its_map_matches_its_topology_conf() {
    let f = parse("x5/X5.topofile");
    assert_eq!((f.switch_count(), f.ca_count()), (11, 89));
    let d = discover(&f, &x5_names()).unwrap();
    assert!(d.excluded.is_empty());
    assert_eq!(d.hosts.len(), 86);
    assert!(d.hosts.iter().all(|h| h.source == NameSource::MapFile));
    let unmapped: BTreeSet<String> = d.unmapped.iter().map(|u| u.id.clone()).collect();

    // Leaves: the conf's `Nodes=` lines (its unmapped hosts appear as H-<guid>).
    let hn_of_switch: BTreeMap<String, &str> = d
        .switches
        .iter()
        .map(|s| (format!("S-{:016x}", s.guids[0]), s.hypernode.as_deref().unwrap_or("")))
        .collect();
    let members: BTreeMap<&str, BTreeSet<&str>> = d
        .hypernodes
        .iter()
        .map(|h| (h.name.as_str(), names(h).into_iter().collect()))
        .collect();
    let conf = read("x5/X5.topology.conf");
    let mut leaves = 0;
    for line in conf.lines().filter(|l| l.contains("Nodes=")) {
        let (switch, nodes) = line.trim_start_matches("SwitchName=").split_once(" Nodes=").unwrap();
        let (guids, named): (Vec<String>, Vec<String>) =
            expand(nodes).unwrap().into_iter().partition(|n| n.starts_with("H-"));
        assert!(guids.iter().all(|g| unmapped.contains(g)), "{guids:?}");
        let hn = hn_of_switch[switch];
        let want: BTreeSet<&str> = named.iter().map(String::as_str).collect();
        assert_eq!(members[hn], want, "{switch}");
        leaves += 1;
    }
    assert_eq!(leaves, 6);
    assert_eq!(unmapped.len(), 3);

    // Upper tier: the conf's spines (X5.spine) are above the leaves, all leaves under one root.
    for spine in read("x5/X5.spine").lines().filter(|l| l.starts_with("S-")) {
        let s = d
            .switches
            .iter()
            .find(|s| format!("S-{:016x}", s.guids[0]) == spine)
            .unwrap();
        assert!(s.level >= Some(2), "{spine}: {:?}", s.level);
    }
    let top: Vec<&HyperNodeSpec> = d.hypernodes.iter().filter(|h| h.tier == 2).collect();
    assert_eq!(top.len(), 1);
    assert_eq!(top[0].members.len(), 6);
    insta::assert_snapshot!(summary(&d));
}

#[test]
fn x5_without_its_map_names_nobody() {
    let d = discover_file("x5/X5.topofile", &HostNames::default());
    assert!(d.hypernodes.is_empty());
    assert_eq!(d.unmapped.len(), 89);
    assert!(d.warnings.iter().any(|w| w.contains("has only unmapped CAs")));
}

#[test]
fn reported_guids_win_over_the_map_and_descriptions() {
    let mut names = x5_names();
    // sl390lin1's port GUID, as an agent would report it.
    names.reported.insert(0x78e7d10300229795, "agent-says");
    let d = discover_file("x5/X5.topofile", &names);
    let h = d.hosts.iter().find(|h| h.host == "agent-says").unwrap();
    assert_eq!(h.source, NameSource::Reported);
    assert!(!d.hosts.iter().any(|h| h.host == "sl390lin25"));
}

#[test]
fn ibtopotool_edge_cases() {
    // Grouped output (`Non-Chassis Nodes`), generic HCA descriptions: nothing named.
    let f = parse("ibtopotool/1.topo");
    assert_eq!((f.switch_count(), f.ca_count(), f.links.len()), (2, 4, 7));
    let d = discover(&f, &HostNames::default()).unwrap();
    assert_eq!((d.hosts.len(), d.unmapped.len()), (0, 4));

    let d = discover_file("ibtopotool/2.topo", &HostNames::default());
    insta::assert_snapshot!("ibtopotool_2", summary(&d));

    // An error line before the header, and a switch cabled to itself.
    let f = parse("ibtopotool/3.topo");
    assert_eq!((f.switch_count(), f.ca_count()), (2, 6));
    assert_eq!(f.warnings.len(), 1);
    assert!(f.warnings[0].starts_with("ibtopotool/3.topo:1: skipped a diagnostic line: src/query_smp.c:195;"));
    assert_eq!(f.links.iter().filter(|l| l.a == l.b).count(), 3);
    let d = discover(&f, &HostNames::default()).unwrap();
    insta::assert_snapshot!("ibtopotool_3", summary(&d));

    // A whitespace-only line between blocks, no blank line after the header comment.
    let d = discover_file("ibtopotool/4.topo", &HostNames::default());
    assert_eq!(summary(&d), "t1 leaf-0021283a8389a0a0 (leaf): nsn33-43\n");
}

#[test]
fn ports_reports() {
    let f = parse("ibnetdiscover-ports/test.out");
    assert_eq!(f.format, DumpFormat::Ports);
    assert_eq!((f.switch_count(), f.ca_count(), f.links.len()), (4, 3, 4));
    let d = discover(&f, &HostNames::default()).unwrap();
    insta::assert_snapshot!("ports_test", summary(&d));

    // A SHARP CA seen on two switches (the fixture is spliced): excluded, and warned about.
    let f = parse("ibnetdiscover-ports/test2.out");
    assert_eq!((f.switch_count(), f.ca_count()), (5, 2));
    assert_eq!(f.warnings.len(), 1);
    let d = discover(&f, &HostNames::default()).unwrap();
    assert_eq!(d.excluded.len(), 1);
    assert_eq!(summary(&d), "t1 leaf-5fb0405-leaf-ib01 (leaf): worker20\n");

    // An unquoted description; one switch, no hosts: no HyperNodes, not an error.
    let d = discover_file("ibnetdiscover-ports/test3.out", &HostNames::default());
    assert!(d.hypernodes.is_empty());
    assert_eq!(d.switches.len(), 1);
}

#[test]
fn ufm_lab_multi_rail_host_joins_both_switches() {
    let f = parse("ufm-lab/small_topo_file");
    assert_eq!((f.switch_count(), f.ca_count()), (2, 13));
    let d = discover(&f, &HostNames::default()).unwrap();
    assert_eq!(d.excluded.len(), 1);
    assert!(d.unmapped.is_empty());
    // r-dcs96 has HCAs on both switches, so both are one leaf group.
    assert_eq!(d.hypernodes.len(), 1);
    assert!(
        d.switches
            .iter()
            .all(|s| s.hypernode.as_deref() == Some("leaf-r-ufm-sw226"))
    );
    insta::assert_snapshot!("ufm_lab", summary(&d));
}

#[test]
fn example_bad_has_no_switches() {
    let f = parse("topograph/example-bad.out");
    assert_eq!((f.switch_count(), f.ca_count()), (0, 1));
    let e = discover(&f, &HostNames::default()).unwrap_err();
    assert!(matches!(e, FabricError::NoSwitches { cas: 1, .. }));
    insta::assert_snapshot!("example_bad", e.to_string());
}

/// Two 1U leaves cabled to a director whose leaf ASICs (L01, L02) reach each other only
/// through its spine ASIC (S01): the chassis is one switch layer, so one spine HyperNode.
const DIRECTOR: &str = r#"
vendid=0x2c9
devid=0xc738
sysimgguid=0x100
switchguid=0x101(101)
Switch	36 "S-0000000000000101"		# "MF0;ib-core:SX6536/L01/U1" enhanced port 0 lid 1 lmc 0
[1]	"S-0000000000000201"[1]		# "MF0;leaf1:MQM8700/U1" lid 4 4xHDR
[2]	"S-0000000000000103"[1]		# "MF0;ib-core:SX6536/S01/U1" lid 3 4xHDR

vendid=0x2c9
devid=0xc738
sysimgguid=0x100
switchguid=0x102(102)
Switch	36 "S-0000000000000102"		# "MF0;ib-core:SX6536/L02/U1" enhanced port 0 lid 2 lmc 0
[1]	"S-0000000000000202"[1]		# "MF0;leaf2:MQM8700/U1" lid 5 4xHDR
[2]	"S-0000000000000103"[2]		# "MF0;ib-core:SX6536/S01/U1" lid 3 4xHDR

vendid=0x2c9
devid=0xc738
sysimgguid=0x100
switchguid=0x103(103)
Switch	36 "S-0000000000000103"		# "MF0;ib-core:SX6536/S01/U1" enhanced port 0 lid 3 lmc 0
[1]	"S-0000000000000101"[2]		# "MF0;ib-core:SX6536/L01/U1" lid 1 4xHDR
[2]	"S-0000000000000102"[2]		# "MF0;ib-core:SX6536/L02/U1" lid 2 4xHDR

vendid=0x2c9
devid=0xd2f0
sysimgguid=0x201
switchguid=0x201(201)
Switch	41 "S-0000000000000201"		# "MF0;leaf1:MQM8700/U1" enhanced port 0 lid 4 lmc 0
[1]	"S-0000000000000101"[1]		# "MF0;ib-core:SX6536/L01/U1" lid 1 4xHDR
[2]	"H-0000000000000301"[1](301) 		# "gpu001 mlx5_0" lid 6 4xHDR
[41]	"H-0000000000000209"[1](209) 		# "Mellanox Technologies Aggregation Node" lid 9 4xHDR

vendid=0x2c9
devid=0xd2f0
sysimgguid=0x202
switchguid=0x202(202)
Switch	41 "S-0000000000000202"		# "MF0;leaf2:MQM8700/U1" enhanced port 0 lid 5 lmc 0
[1]	"S-0000000000000102"[1]		# "MF0;ib-core:SX6536/L02/U1" lid 2 4xHDR
[2]	"H-0000000000000302"[1](302) 		# "gpu002 mlx5_0" lid 7 4xHDR

vendid=0x2c9
devid=0x101b
sysimgguid=0x301
caguid=0x301
Ca	1 "H-0000000000000301"		# "gpu001 mlx5_0"
[1](301) 	"S-0000000000000201"[2]		# lid 6 lmc 0 "MF0;leaf1:MQM8700/U1" lid 4 4xHDR

vendid=0x2c9
devid=0x101b
sysimgguid=0x302
caguid=0x302
Ca	1 "H-0000000000000302"		# "gpu002 mlx5_0"
[1](302) 	"S-0000000000000202"[2]		# lid 7 lmc 0 "MF0;leaf2:MQM8700/U1" lid 5 4xHDR

vendid=0x2c9
devid=0xcf09
sysimgguid=0x201
caguid=0x209
Ca	1 "H-0000000000000209"		# "Mellanox Technologies Aggregation Node"
[1](209) 	"S-0000000000000201"[41]		# lid 9 lmc 0 "MF0;leaf1:MQM8700/U1" lid 4 4xHDR
"#;

#[test]
fn director_chassis_is_one_switch_layer() {
    let f = parse_ibnetdiscover(DIRECTOR, Path::new("director.out")).unwrap();
    let d = discover(&f, &HostNames::default()).unwrap();
    assert_eq!(
        summary(&d),
        "t1 leaf-leaf1 (leaf): gpu001\nt1 leaf-leaf2 (leaf): gpu002\nt2 spine-ib-core (spine): leaf-leaf[1-2]\n"
    );
    let core = d.switches.iter().find(|s| s.name == "ib-core").unwrap();
    assert_eq!((core.guids.len(), core.level), (3, Some(2)));
    assert_eq!(d.excluded.len(), 1);

    // The same chassis found by description alone (no system image GUIDs).
    let no_images: String = DIRECTOR
        .lines()
        .filter(|l| !l.starts_with("sysimgguid=0x100"))
        .map(|l| format!("{l}\n"))
        .collect();
    let d2 = discover(
        &parse_ibnetdiscover(&no_images, Path::new("d")).unwrap(),
        &HostNames::default(),
    )
    .unwrap();
    assert_eq!(d2.hypernodes, d.hypernodes);
}

fn parse_err(text: &str, name: &str) -> String {
    parse_ibnetdiscover(text, Path::new(name)).unwrap_err().to_string()
}

#[test]
fn truncated_dumps_are_clear_errors() {
    let text = read("ufm-lab/small_topo_file");
    // Cut in the middle of a port line.
    let cut = &text[..text.find("r-dcs96 HCA-2").unwrap() - 30];
    insta::assert_snapshot!("truncated_mid_line", parse_err(cut, "small_topo_file"));
    // Cut after the switch blocks: the CAs they link to have no blocks.
    let cut = &text[..text.find("vendid=0x2c9\ndevid=0x1017").unwrap()];
    insta::assert_snapshot!("truncated_after_switches", parse_err(cut, "small_topo_file"));
    // Cut between the ids and the header.
    let cut = &text[..text.find("Ca\t1 \"H-ec0d9a03007d7d0b\"").unwrap()];
    insta::assert_snapshot!("truncated_before_header", parse_err(cut, "small_topo_file"));
    // Half of the big dump.
    let big = read("topograph/example.out");
    let e = parse_err(&big[..big.len() / 2], "example.out");
    assert!(e.contains("truncated"), "{e}");
}

#[test]
fn unknown_lines_and_duplicate_guids_are_errors() {
    let text = read("ufm-lab/small_topo_file").replacen("devid=0xc738", "Bogus line here", 1);
    insta::assert_snapshot!("unknown_line", parse_err(&text, "small_topo_file"));

    let text = read("ufm-lab/small_topo_file");
    let start = text.find("vendid=0x2c9\ndevid=0x1017").unwrap();
    let block_len = text[start..].find("\n\n").unwrap();
    let dup = format!("{text}\n{}\n", &text[start..start + block_len]);
    insta::assert_snapshot!("duplicate_guid", parse_err(&dup, "small_topo_file"));
}

#[test]
fn every_dump_parses_or_fails_clearly() {
    for rel in [
        "topograph/example.out",
        "topograph/example-bad.out",
        "x5/X5.topofile",
        "ibtopotool/1.topo",
        "ibtopotool/2.topo",
        "ibtopotool/3.topo",
        "ibtopotool/4.topo",
        "ibnetdiscover-ports/test.out",
        "ibnetdiscover-ports/test2.out",
        "ibnetdiscover-ports/test3.out",
        "ufm-lab/small_topo_file",
    ] {
        let f = parse(rel);
        match discover(&f, &HostNames::default()) {
            Ok(d) => {
                // Deterministic: a second run is identical.
                let again = discover(&f, &HostNames::default()).unwrap();
                assert_eq!(d.hypernodes, again.hypernodes, "{rel}");
                let mut sorted = d.hypernodes.clone();
                sorted.sort_by(|a, b| (a.tier, &a.name).cmp(&(b.tier, &b.name)));
                assert_eq!(sorted, d.hypernodes, "{rel}");
            }
            Err(e) => assert!(matches!(e, FabricError::NoSwitches { .. }), "{rel}: {e}"),
        }
    }
}

#[test]
fn a_spine_with_a_management_host_is_warned_about() {
    // A proper tree says nothing.
    let d = discover(
        &parse_ibnetdiscover(DIRECTOR, Path::new("d")).unwrap(),
        &HostNames::default(),
    )
    .unwrap();
    assert!(!d.warnings.iter().any(|w| w.contains("management host")));
    // A management host plugged into the spine makes it look like a leaf: three roots, a warning.
    let flat = "\
Switch 4 \"S-0000000000000001\" # \"spine\" base port 0 lid 1 lmc 0
[1] \"S-0000000000000002\"[1] # \"leaf1\" lid 2 4xHDR
[2] \"S-0000000000000003\"[1] # \"leaf2\" lid 3 4xHDR
[3] \"H-0000000000000010\"[1](10) # \"ufm01 HCA-1\" lid 4 4xHDR

Switch 4 \"S-0000000000000002\" # \"leaf1\" base port 0 lid 2 lmc 0
[1] \"S-0000000000000001\"[1] # \"spine\" lid 1 4xHDR
[2] \"H-0000000000000011\"[1](11) # \"gpu1 HCA-1\" lid 5 4xHDR

Switch 4 \"S-0000000000000003\" # \"leaf2\" base port 0 lid 3 lmc 0
[1] \"S-0000000000000001\"[2] # \"spine\" lid 1 4xHDR
[2] \"H-0000000000000012\"[1](12) # \"gpu2 HCA-1\" lid 6 4xHDR

Ca 1 \"H-0000000000000010\" # \"ufm01 HCA-1\"
[1](10) \"S-0000000000000001\"[3] # lid 4 lmc 0 \"spine\" lid 1 4xHDR

Ca 1 \"H-0000000000000011\" # \"gpu1 HCA-1\"
[1](11) \"S-0000000000000002\"[2] # lid 5 lmc 0 \"leaf1\" lid 2 4xHDR

Ca 1 \"H-0000000000000012\" # \"gpu2 HCA-1\"
[1](12) \"S-0000000000000003\"[2] # lid 6 lmc 0 \"leaf2\" lid 3 4xHDR
";
    let d = hyperplan_fabric::discover_text(flat, Path::new("flat"), &HostNames::default()).unwrap();
    assert_eq!(d.hypernodes.len(), 3);
    assert!(
        d.warnings
            .iter()
            .any(|w| w.contains("switch spine has host links and links to 2 other leaf switches")),
        "{:?}",
        d.warnings
    );
}
