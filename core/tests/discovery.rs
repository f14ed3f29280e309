//! Polled discovery sources through the whole planner (the Schedule the daemon runs), with
//! the invariants checked after every tick: real ibnetdiscover dumps become HyperNodes of
//! the planner's nodes, agents' HCA GUIDs name CAs before anything else, a source that
//! fails keeps its last good HyperNodes and says why, and each source reconciles only
//! what it owns.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hyperplan_core::sim::SIM_OWNER;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use hyperplan_core::discovery::{Found, SourceError};
use hyperplan_core::model::components::HyperNode;
use hyperplan_core::model::components::SourceKind;
use hyperplan_core::testing::{JobBuilder, MachineBuilder, hn, res};
use hyperplan_core::view;
use hyperplan_core::{Command, Event, Planner, PlannerConfig};
use hyperplan_fabric::{GuidMap, HostNames, discover, parse_ibnetdiscover};
use hyperplan_shared::status::SourceStatus;
use hyperplan_shared::topology::{IbPort, InfinibandHca, SharedTopology};
use hyperplan_shared::{HyperNodeSpec, MemberType, NodeSpec};

fn data(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/ib").join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A node an agent registered: 64 CPUs, and one HCA per GUID given (node GUID; the port
/// GUID is the node GUID + 1, as Mellanox numbers them).
fn node(name: &str, hca_guids: &[u64]) -> NodeSpec {
    let mut t = MachineBuilder::new(1, 1, 64, 1).build();
    for (i, g) in hca_guids.iter().enumerate() {
        let hex = format!("{g:016x}");
        let colons = |h: &str| format!("{}:{}:{}:{}", &h[0..4], &h[4..8], &h[8..12], &h[12..16]);
        t.hcas.push(InfinibandHca {
            name: format!("mlx5_{i}"),
            node_guid: Some(colons(&hex)),
            ports: vec![IbPort {
                number: 1,
                state: Some("ACTIVE".into()),
                port_guid: Some(colons(&format!("{:016x}", g + 1))),
                ..IbPort::default()
            }],
            ..InfinibandHca::default()
        });
    }
    NodeSpec {
        name: name.into(),
        labels: BTreeMap::new(),
        resources: res("cpu=64,memory=256Gi"),
        used: Default::default(),
        topology: None,
        hardware: Some(SharedTopology::new(t)),
    }
}

/// Ticks, checks the invariants, returns the commands.
fn tick(p: &mut Planner, now: u64) -> Vec<Command> {
    let cmds = p.tick(now);
    let broken = p.violations();
    assert!(broken.is_empty(), "invariants broken at {now}: {broken:#?}");
    cmds
}

fn fabric(rel: &str) -> Found {
    Found::Fabric {
        fabric: Arc::new(parse_ibnetdiscover(&data(rel), Path::new(rel)).unwrap()),
        map_file: GuidMap::new(),
    }
}

/// A poll's result as the daemon sends it; a failure is given as its text.
fn discovered(source: &str, kind: SourceKind, at: u64, result: Result<Found, String>) -> Event {
    Event::Discovered {
        source: source.into(),
        kind,
        at,
        result: result.map_err(SourceError::Unreadable),
    }
}

/// name → (tier, sorted member names, source) of every HyperNode entity.
fn hypernodes(p: &mut Planner) -> BTreeMap<String, (u32, Vec<String>, String)> {
    let mut q = p.world_mut_for_tests().query::<&HyperNode>();
    q.iter(p.world_for_tests())
        .map(|h| {
            let mut members: Vec<String> = h
                .spec
                .members
                .iter()
                .map(|m| match &m.selector {
                    hyperplan_shared::Selector::Exact { name } => name.clone(),
                    other => format!("{other:?}"),
                })
                .collect();
            members.sort();
            (h.spec.name.clone(), (h.spec.tier, members, h.source.name.clone()))
        })
        .collect()
}

fn status(p: &mut Planner, source: &str) -> SourceStatus {
    p.hyper_nodes()
        .sources
        .into_iter()
        .find(|s| s.name == source)
        .unwrap_or_else(|| panic!("no source {source}"))
}

/// The hosts the topograph slice's CA descriptions name (`"gpu017 mlx5_0"` → gpu017).
fn topograph_hosts() -> BTreeSet<String> {
    let dump = parse_ibnetdiscover(&data("topograph/example.out"), Path::new("example.out")).unwrap();
    let d = discover(&dump, &HostNames::default()).unwrap();
    d.hosts.into_iter().map(|h| h.host).collect()
}

#[test]
fn a_superpod_dump_gives_leaf_and_spine_hypernodes_and_a_gang_stays_under_one_leaf() {
    let hosts = topograph_hosts();
    assert_eq!(hosts.len(), 121);
    let mut p = Planner::new(PlannerConfig::default());
    for h in &hosts {
        p.push(Event::NodeUp(node(h, &[])));
    }
    p.push(discovered(
        "fabric",
        SourceKind::Ibnetdiscover,
        100,
        Ok(fabric("topograph/example.out")),
    ));
    tick(&mut p, 100);

    let hns = hypernodes(&mut p);
    let tier1: Vec<_> = hns.iter().filter(|(_, h)| h.0 == 1).collect();
    let tier2: Vec<_> = hns.iter().filter(|(_, h)| h.0 == 2).collect();
    assert_eq!((tier1.len(), tier2.len()), (8, 1), "{hns:#?}");
    // Every host in exactly one leaf HyperNode, every HyperNode the source's.
    let mut seen = BTreeSet::new();
    for (_, (_, members, _)) in &tier1 {
        for m in members {
            assert!(seen.insert(m.clone()), "{m} in two leaves");
        }
    }
    assert_eq!(seen, hosts);
    assert!(hns.values().all(|h| h.2 == "fabric"));
    let s = status(&mut p, "fabric");
    assert_eq!(
        (s.kind.as_str(), s.hyper_nodes, s.last_success),
        ("ibnetdiscover", 9, Some(100))
    );
    assert!(
        s.summary.contains("121 hosts") && s.summary.contains("40 switch-internal"),
        "{}",
        s.summary
    );
    assert!(s.unknown_hosts.is_empty() && s.error.is_none());

    // A leaf-bound gang of 12 nodes lands under one leaf HyperNode.
    hyperplan_core::sim::submit::submit(
        &mut p,
        JobBuilder::gang("train", 12, "cpu=64").hard(1).build(),
        SIM_OWNER,
    );
    let placed: Vec<String> = tick(&mut p, 101)
        .into_iter()
        .filter_map(|c| match c {
            Command::Place(pl) => Some(pl.node.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(placed.len(), 12);
    let leaf = tier1
        .iter()
        .find(|(_, h)| h.1.contains(&placed[0]))
        .map(|(n, _)| n.to_string())
        .unwrap();
    let members = &hns[&leaf].1;
    assert!(
        placed.iter().all(|n| members.contains(n)),
        "{placed:?} not all under {leaf}"
    );
}

#[test]
fn agents_hca_guids_name_the_cas_of_a_dump_without_descriptions() {
    // X5's CAs have no host in their descriptions; X5.map names 86 of them. Agents that
    // report those GUIDs must give exactly what the map file gives.
    let map_text = data("x5/X5.map");
    let map = GuidMap::parse(&map_text, Path::new("X5.map")).unwrap();
    let dump = parse_ibnetdiscover(&data("x5/X5.topofile"), Path::new("X5.topofile")).unwrap();
    let by_map = discover(
        &dump,
        &HostNames {
            map_file: map.clone(),
            ..HostNames::default()
        },
    )
    .unwrap();
    let mut hosts: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for line in map_text.lines().filter(|l| l.starts_with("H-")) {
        let (guid, host) = line.split_once(char::is_whitespace).unwrap();
        let g = u64::from_str_radix(&guid[2..], 16).unwrap();
        hosts.entry(host.trim().to_string()).or_default().push(g);
    }
    assert_eq!(hosts.len(), 86);

    let mut p = Planner::new(PlannerConfig::default());
    let found = Found::Fabric {
        fabric: Arc::new(dump.clone()),
        map_file: GuidMap::new(),
    };
    p.push(discovered("x5", SourceKind::Ibnetdiscover, 10, Ok(found)));
    tick(&mut p, 10);
    // No agent yet: every CA is unmapped, no HyperNode.
    assert!(hypernodes(&mut p).is_empty());
    assert_eq!(status(&mut p, "x5").unmapped.len(), dump.ca_count());

    // Half the agents register: their hosts appear, tiered again.
    let (first, second): (Vec<_>, Vec<_>) = hosts.iter().enumerate().partition(|(i, _)| i % 2 == 0);
    for (_, (h, g)) in &first {
        p.push(Event::NodeUp(node(h, g)));
    }
    tick(&mut p, 11);
    let half: BTreeSet<String> = hypernodes(&mut p)
        .values()
        .filter(|h| h.0 == 1)
        .flat_map(|h| h.1.clone())
        .collect();
    assert_eq!(half, first.iter().map(|(_, (h, _))| h.to_string()).collect());

    // All of them: the same leaves, spines and names as the map file gives.
    for (_, (h, g)) in &second {
        p.push(Event::NodeUp(node(h, g)));
    }
    tick(&mut p, 12);
    let got = hypernodes(&mut p);
    let known: BTreeSet<&str> = hosts.keys().map(String::as_str).collect();
    let want: BTreeMap<String, (u32, Vec<String>)> =
        hyperplan_core::discovery::known::keep_known(&by_map.hypernodes, |n| known.contains(n))
            .specs
            .iter()
            .map(|h| (h.name.clone(), (h.tier, names(h))))
            .collect();
    let got: BTreeMap<String, (u32, Vec<String>)> = got.into_iter().map(|(n, h)| (n, (h.0, h.1))).collect();
    assert_eq!(got, want);
    let s = status(&mut p, "x5");
    assert!(
        s.summary.contains("86 hosts") && s.summary.contains("by agents"),
        "{}",
        s.summary
    );
}

fn names(h: &HyperNodeSpec) -> Vec<String> {
    let mut v: Vec<String> = h
        .members
        .iter()
        .filter_map(|m| match &m.selector {
            hyperplan_shared::Selector::Exact { name } => Some(name.clone()),
            _ => None,
        })
        .collect();
    v.sort();
    v
}

/// Two leaves under a spine, as UFM or Slurm would give them.
fn two_leaves(spine: &str) -> Found {
    Found::HyperNodes {
        specs: vec![
            hn("leaf-a", 1, MemberType::Node, &["n1", "n2", "storage1"]),
            hn("leaf-b", 1, MemberType::Node, &["n3", "n4"]),
            hn(spine, 2, MemberType::HyperNode, &["leaf-a", "leaf-b"]),
        ],
        warnings: vec!["UFM: skipped 1 port record with a null system_name (first at index 3)".into()],
        summary: "7 port records".into(),
        degraded_links: Vec::new(),
    }
}

#[test]
fn a_failing_source_keeps_its_last_good_hypernodes_and_says_why() {
    let mut p = Planner::new(PlannerConfig::default());
    for n in ["n1", "n2", "n3", "n4"] {
        p.push(Event::NodeUp(node(n, &[])));
    }
    p.push(Event::DeclareSource {
        source: "ufm".into(),
        kind: SourceKind::Ufm,
        target: "https://ufm.lab/ufmRest/resources/ports".into(),
    });
    tick(&mut p, 0);
    let s = status(&mut p, "ufm");
    assert_eq!((s.last_attempt, s.hyper_nodes), (None, 0), "declared, not read yet");

    // Failing before any success: nothing to keep, and the log says so.
    p.push(discovered(
        "ufm",
        SourceKind::Ufm,
        5,
        Err("UFM at https://ufm.lab answered HTTP 500".into()),
    ));
    let warns = warnings(tick(&mut p, 5));
    assert_eq!(
        warns,
        vec!["discovery source ufm (ufm): UFM at https://ufm.lab answered HTTP 500; it has no HyperNodes yet"]
    );

    p.push(discovered("ufm", SourceKind::Ufm, 10, Ok(two_leaves("spine-hn"))));
    let cmds = tick(&mut p, 10);
    assert!(
        cmds.iter()
            .any(|c| matches!(c, Command::Info(m) if m.contains("works again"))),
        "{cmds:?}"
    );
    let good = hypernodes(&mut p);
    assert_eq!(good.len(), 3);
    assert_eq!(good["leaf-a"].1, vec!["n1", "n2"], "storage1 is no node: left out");
    let s = status(&mut p, "ufm");
    assert_eq!(s.unknown_hosts, vec!["storage1"]);
    assert_eq!(s.warnings.len(), 1);

    // 401, garbage, a timeout: each is reported once, the HyperNodes stay.
    for (at, e) in [
        (3610, "refused the credentials (HTTP 401)"),
        (7210, "not JSON"),
        (7211, "not JSON"),
    ] {
        p.push(discovered("ufm", SourceKind::Ufm, at, Err(e.into())));
        let warns = warnings(tick(&mut p, at));
        if at == 7211 {
            assert!(warns.is_empty(), "the same error again is not logged again: {warns:?}");
        } else {
            assert_eq!(
                warns,
                vec![format!(
                    "discovery source ufm (ufm): {e}; keeping its 3 HyperNode(s) from the last good poll ({}s ago)",
                    at - 10
                )]
            );
        }
        assert_eq!(hypernodes(&mut p), good);
        let s = status(&mut p, "ufm");
        assert_eq!(
            (s.error.as_deref(), s.last_success, s.last_attempt),
            (Some(e), Some(10), Some(at))
        );
    }
    // The same port list again: status recovers, nothing is rebuilt.
    let generation = p.index().generation;
    p.push(discovered("ufm", SourceKind::Ufm, 7300, Ok(Found::Unchanged)));
    tick(&mut p, 7300);
    assert_eq!(p.index().generation, generation, "an unchanged poll rebuilds nothing");
    let s = status(&mut p, "ufm");
    assert_eq!((s.error, s.last_success), (None, Some(7300)));
    assert_eq!(hypernodes(&mut p), good);
}

fn warnings(cmds: Vec<Command>) -> Vec<String> {
    cmds.into_iter()
        .filter_map(|c| match c {
            Command::Warn(w) => Some(w),
            _ => None,
        })
        .collect()
}

#[test]
fn each_source_reconciles_only_its_own_and_late_nodes_join() {
    let mut p = Planner::new(PlannerConfig::default());
    for n in ["n1", "n2", "n3"] {
        p.push(Event::NodeUp(node(n, &[])));
    }
    p.push(discovered("ufm", SourceKind::Ufm, 1, Ok(two_leaves("spine-hn"))));
    let slurm = Found::HyperNodes {
        specs: vec![
            hn("s-leaf", 1, MemberType::Node, &["n9"]),
            hn("s-top", 2, MemberType::HyperNode, &["s-leaf"]),
        ],
        warnings: vec![],
        summary: "2 switches".into(),
        degraded_links: Vec::new(),
    };
    p.push(discovered("slurm", SourceKind::Slurm, 1, Ok(slurm)));
    tick(&mut p, 1);
    let hns = hypernodes(&mut p);
    assert_eq!(hns.keys().collect::<Vec<_>>(), vec!["leaf-a", "leaf-b", "spine-hn"]);
    assert_eq!(hns["leaf-b"].1, vec!["n3"], "n4 has not registered yet");
    assert_eq!(status(&mut p, "slurm").unknown_hosts, vec!["n9"]);

    // n4 and n9 register: both sources take them in without a new poll.
    p.push(Event::NodeUp(node("n4", &[])));
    p.push(Event::NodeUp(node("n9", &[])));
    tick(&mut p, 2);
    let hns = hypernodes(&mut p);
    assert_eq!(hns["leaf-b"].1, vec!["n3", "n4"]);
    assert_eq!(hns["s-leaf"], (1, vec!["n9".to_string()], "slurm".to_string()));

    // UFM's next result renames its spine and drops leaf-b: slurm's HyperNodes stay.
    let next = Found::HyperNodes {
        specs: vec![
            hn("leaf-a", 1, MemberType::Node, &["n1", "n2"]),
            hn("spine-hn-0", 2, MemberType::HyperNode, &["leaf-a"]),
        ],
        warnings: vec![],
        summary: String::new(),
        degraded_links: Vec::new(),
    };
    p.push(discovered("ufm", SourceKind::Ufm, 3, Ok(next)));
    tick(&mut p, 3);
    let hns = hypernodes(&mut p);
    assert_eq!(
        hns.keys().collect::<Vec<_>>(),
        vec!["leaf-a", "s-leaf", "s-top", "spine-hn-0"]
    );
    let tree = p.hyper_nodes();
    assert!(tree.warnings.is_empty(), "{:?}", tree.warnings);
    let sources: Vec<(String, u32)> = tree.sources.iter().map(|s| (s.name.clone(), s.hyper_nodes)).collect();
    assert_eq!(sources, vec![("slurm".to_string(), 2), ("ufm".to_string(), 2)]);
}

#[test]
fn the_live_tree_exports_as_resolved_manifests() {
    let mut p = Planner::new(PlannerConfig::default());
    for n in ["gpu1", "gpu2", "gpu3", "cpu1"] {
        p.push(Event::NodeUp(node(n, &[])));
    }
    let mut leaf = hn("leaf-gpu", 1, MemberType::Node, &[]);
    leaf.members = vec![hyperplan_shared::Member {
        kind: MemberType::Node,
        selector: hyperplan_shared::Selector::Regex { pattern: "^gpu".into() },
    }];
    p.push(Event::StaticHyperNodes(vec![
        leaf,
        hn("leaf-cpu", 1, MemberType::Node, &["cpu1"]),
        hn("spine", 2, MemberType::HyperNode, &["leaf-cpu", "leaf-gpu"]),
        hn("broken", 1, MemberType::Node, &["nowhere"]),
    ]));
    tick(&mut p, 0);
    let specs = view::resolved_specs(p.index());
    let got: Vec<(String, u32, Vec<String>)> = specs.iter().map(|h| (h.name.clone(), h.tier, names(h))).collect();
    assert_eq!(
        got,
        vec![
            ("leaf-cpu".to_string(), 1, vec!["cpu1".to_string()]),
            (
                "leaf-gpu".to_string(),
                1,
                vec!["gpu1".into(), "gpu2".into(), "gpu3".into()]
            ),
            ("spine".to_string(), 2, vec!["leaf-cpu".into(), "leaf-gpu".into()]),
        ]
    );
}

#[test]
fn a_job_submitted_before_any_agent_registered_runs_once_they_do() {
    // The planner has just started: no node, no HyperNode yet.
    let mut p = Planner::new(PlannerConfig::default());
    hyperplan_core::sim::submit::submit(&mut p, JobBuilder::gang("pair", 2, "cpu=64").hard(1).build(), SIM_OWNER);
    let cmds = tick(&mut p, 0);
    let rejected: Vec<&String> = cmds
        .iter()
        .filter_map(|c| match c {
            Command::Reject { reason, .. } => Some(reason),
            _ => None,
        })
        .collect();
    assert_eq!(rejected.len(), 1, "{cmds:?}");

    // Nothing about the topology changed: no second rejection.
    assert!(tick(&mut p, 1).is_empty());

    // One node registers: still impossible, for a new reason, which is announced...
    p.push(Event::NodeUp(node("n9", &[])));
    let cmds = tick(&mut p, 2);
    assert!(
        matches!(&cmds[..], [Command::Reject { reason, .. }] if reason.contains("free room for 1 of the 2 tasks")),
        "{cmds:?}"
    );
    // ...but the same reason on a new topology (n9 registers again) is not.
    p.push(Event::NodeUp(node("n9", &[])));
    let generation = p.index().generation;
    assert!(tick(&mut p, 2).is_empty());
    assert_ne!(p.index().generation, generation);

    // The fabric and the rest of the nodes arrive: placed under one leaf, and said so.
    for n in ["n1", "n2", "n3", "n4"] {
        p.push(Event::NodeUp(node(n, &[])));
    }
    p.push(discovered("ufm", SourceKind::Ufm, 3, Ok(two_leaves("spine-hn"))));
    let cmds = tick(&mut p, 3);
    let placed: BTreeSet<String> = cmds
        .iter()
        .filter_map(|c| match c {
            Command::Place(pl) => Some(pl.node.to_string()),
            _ => None,
        })
        .collect();
    assert!(
        placed == BTreeSet::from(["n1".into(), "n2".into()]) || placed == BTreeSet::from(["n3".into(), "n4".into()]),
        "{cmds:?}"
    );
    assert!(
        cmds.iter().any(
            |c| matches!(c, Command::Info(m) if m.starts_with("job pair: the topology changed and it is placed now"))
        ),
        "{cmds:?}"
    );
    let report = p.jobs();
    assert_eq!(report[0].status, hyperplan_shared::report::JobStatus::Placed);
}

/// Issue 43: a dump whose host link trained at 1x marks its leaf degraded; a hard tier-1
/// job takes the healthy leaf first, `hyperplan hypernodes` says which link, and the leaf
/// still takes work once the healthy one is full.
#[test]
fn a_leaf_with_a_host_link_at_1x_is_taken_after_a_healthy_one() {
    let spec = hyperplan_fabric::synthetic::FatTreeDump {
        pods: 1,
        leaves_per_pod: 2,
        spines_per_pod: 1,
        cores_per_group: 1,
        hosts_per_pod: 8,
        rails: 1,
        sharp: false,
    };
    // gpu00001 (CA 0x40000000) on pod00-leaf00, its cable at 1x as both ends say.
    let text: String = spec
        .generate()
        .lines()
        .map(|l| {
            let l = if l.contains("0000000040000000") || l.contains("(40000000)") {
                l.replace("4xHDR", "1xHDR")
            } else {
                l.to_string()
            };
            l + "\n"
        })
        .collect();
    let dump = parse_ibnetdiscover(&text, Path::new("fat.out")).unwrap();
    let mut p = Planner::new(PlannerConfig::default());
    for i in 1..=8 {
        p.push(Event::NodeUp(node(&format!("gpu{i:05}"), &[])));
    }
    let found = Found::Fabric {
        fabric: Arc::new(dump),
        map_file: GuidMap::new(),
    };
    p.push(discovered("fabric", SourceKind::Ibnetdiscover, 10, Ok(found)));
    tick(&mut p, 10);
    let tree = p.hyper_nodes();
    let sick: Vec<(String, u32, Vec<String>)> = tree
        .hyper_nodes
        .iter()
        .filter(|h| h.links_degraded > 0)
        .map(|h| (h.name.clone(), h.links_degraded, h.degraded_links.clone()))
        .collect();
    assert_eq!(
        sick,
        [
            ("spine-pod00-spine00".to_string(), 1, vec![]),
            (
                "leaf-pod00-leaf00".to_string(),
                1,
                vec!["gpu00001 mlx5_0 port 1 – pod00-leaf00 port 1: 1xHDR (expected 4xHDR), line 11".to_string()]
            ),
        ]
    );
    assert!(status(&mut p, "fabric").summary.contains("1 link(s) below"));
    let placed = |cmds: Vec<Command>| -> BTreeSet<String> {
        cmds.iter()
            .filter_map(|c| match c {
                Command::Place(pl) => Some(pl.node.to_string()),
                _ => None,
            })
            .collect()
    };
    let gang = |name: &str| JobBuilder::gang(name, 4, "cpu=64").hard(1).build();
    hyperplan_core::sim::submit::submit(&mut p, gang("first"), SIM_OWNER);
    let healthy: BTreeSet<String> = ["gpu00002", "gpu00004", "gpu00006", "gpu00008"]
        .map(String::from)
        .into();
    assert_eq!(placed(tick(&mut p, 11)), healthy, "the leaf without the 1x link first");
    hyperplan_core::sim::submit::submit(&mut p, gang("second"), SIM_OWNER);
    let second = placed(tick(&mut p, 12));
    assert_eq!(second.len(), 4, "the degraded leaf still takes work: {second:?}");
    assert!(second.contains("gpu00001"), "{second:?}");
}
