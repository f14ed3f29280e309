//! `hyperplan hypernodes`: the planner's HyperNode tree (network performance domains:
//! leaf switch groups, spines, ...) with tiers, Ready nodes and free capacity, then the
//! HyperNodes left out and why.

use std::collections::{BTreeMap, BTreeSet};

use hyperplan_net::messages::RequestCommand;
use hyperplan_shared::CPU;
use hyperplan_shared::hostlist::compress;
use hyperplan_shared::quantity::format_quantity;
use hyperplan_shared::status::{HyperNodeStatus, HyperNodeTree, SourceStatus};

use super::columns::{columns, ratio};
use super::{Output, long_help, run_request};
use crate::client::ClientArgs;

const EXAMPLES: &str = "  hyperplan hypernodes
  hyperplan hypernodes --output json | jq '.hyperNodes[] | select(.tier == 1) | .name'";

/// Show the HyperNode tree: tiers, Ready nodes, free CPUs and GPUs per HyperNode.
///
/// Children are indented under their parents (highest tier at the left). TIER is the
/// tier number and its name, SOURCE the discovery source that made it (static, label,
/// ibnetdiscover, ufm, slurm, or the name its [[discovery]] entry gives), NODES the Ready
/// nodes under it out of all, CPUS and GPUS free/allocatable. HyperNodes the planner had
/// to leave out (a cycle, a second parent, a member matching nothing) follow as warnings.
///
/// Then every discovery source: the HyperNodes it owns, when it last read its input
/// successfully, and its state. A source that fails keeps the HyperNodes of its last good
/// read and shows FAILING with the reason. Hosts a fabric names that are no planner node,
/// CAs nothing maps to a host, and what a source tolerated in its input are listed under
/// the table (all of them in --output json, `sources`).
#[derive(clap::Args, Debug)]
#[command(after_long_help = long_help(EXAMPLES))]
pub struct Args {
    #[arg(long, value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    client: ClientArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    run_request(
        &args.client,
        RequestCommand::HyperNodes,
        args.output,
        "HyperNode tree",
        |tree| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            render(tree, now)
        },
    )
}

/// How many left-out hosts, unmapped CAs or warnings a source lists before "… and N more".
const LISTED: usize = 5;

/// The indented tree, one `warning:` line per warning, then the discovery sources
/// (`now`, Unix seconds, turns their times into ages).
pub fn render(tree: &HyperNodeTree, now: u64) -> String {
    let mut out = String::new();
    if tree.hyper_nodes.is_empty() {
        out.push_str("no HyperNodes: none configured or discovered yet\n");
    } else {
        let mut rows: Vec<[String; 6]> = vec![[
            "HYPERNODE".into(),
            "TIER".into(),
            "SOURCE".into(),
            "NODES".into(),
            "CPUS".into(),
            "GPUS".into(),
        ]];
        for (depth, h) in tree_order(&tree.hyper_nodes) {
            let tier = match &h.tier_name {
                Some(name) => format!("{} {name}", h.tier),
                None => h.tier.to_string(),
            };
            let sick = if h.fabric_degraded > 0 || h.links_degraded > 0 {
                " (degraded)"
            } else {
                ""
            };
            rows.push([
                format!("{}{}{sick}", "  ".repeat(depth), h.name),
                tier,
                h.source.clone(),
                ratio(h.ready_nodes, h.nodes),
                ratio(cpus(&h.free), cpus(&h.allocatable)),
                ratio(gpus(&h.free), gpus(&h.allocatable)),
            ]);
        }
        out.push_str(&columns(&rows));
        let mut sick: Vec<String> = Vec::new();
        for (_, h) in tree_order(&tree.hyper_nodes) {
            if h.fabric_degraded > 0 {
                sick.push(format!(
                    "  {}: {} of {} nodes report an InfiniBand port degraded\n",
                    h.name, h.fabric_degraded, h.nodes
                ));
            }
            for l in &h.degraded_links {
                sick.push(format!("  {}: link {l}\n", h.name));
            }
        }
        if !sick.is_empty() {
            out.push_str("\ndegraded fabric (hard-topology jobs take a healthy HyperNode of the tier first):\n");
            out.push_str(&sick.concat());
        }
    }
    for w in &tree.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    if !tree.sources.is_empty() {
        out.push('\n');
        out.push_str(&render_sources(&tree.sources, now));
    }
    out
}

/// One row per source, then what each left out or tolerated.
fn render_sources(sources: &[SourceStatus], now: u64) -> String {
    let mut rows: Vec<[String; 5]> = vec![[
        "SOURCE".into(),
        "KIND".into(),
        "HYPERNODES".into(),
        "LAST GOOD".into(),
        "STATE".into(),
    ]];
    for s in sources {
        let last_good = match (s.kind.as_str(), s.last_success) {
            ("label", _) => "-".to_string(),
            (_, Some(t)) => ago(now, t),
            (_, None) => "never".to_string(),
        };
        let state = match (&s.error, s.last_attempt) {
            (Some(e), Some(t)) => format!("FAILING (tried {}): {e}", ago(now, t)),
            (Some(e), None) => format!("FAILING: {e}"),
            (None, None) if s.kind != "label" => format!("waiting for the first read of {}", s.target),
            (None, _) if s.summary.is_empty() => format!("ok: {}", s.target),
            (None, _) => format!("ok: {}", s.summary),
        };
        rows.push([
            s.name.clone(),
            s.kind.clone(),
            s.hyper_nodes.to_string(),
            last_good,
            state,
        ]);
    }
    let mut out = columns(&rows);
    for s in sources {
        if !s.unknown_hosts.is_empty() {
            let names: Vec<&str> = s.unknown_hosts.iter().map(String::as_str).collect();
            out.push_str(&format!(
                "{}: {} host(s) it names are no planner node (left out): {}\n",
                s.name,
                names.len(),
                compress(&names)
            ));
        }
        listed(
            &mut out,
            &s.name,
            "CA(s) name no host (add them to guidMap)",
            &s.unmapped,
        );
        listed(&mut out, &s.name, "warning(s)", &s.warnings);
    }
    out
}

/// `name: N what:` then up to [`LISTED`] indented items and how many more there are.
fn listed(out: &mut String, name: &str, what: &str, items: &[String]) {
    if items.is_empty() {
        return;
    }
    out.push_str(&format!("{name}: {} {what}:\n", items.len()));
    for item in items.iter().take(LISTED) {
        out.push_str(&format!("  {item}\n"));
    }
    if items.len() > LISTED {
        out.push_str(&format!(
            "  … and {} more (--output json lists them all)\n",
            items.len() - LISTED
        ));
    }
}

/// `now - t` for people: `12s ago`, `5m ago`, `3h ago`, `2d ago`.
fn ago(now: u64, t: u64) -> String {
    let s = now.saturating_sub(t);
    match s {
        0..60 => format!("{s}s ago"),
        60..3600 => format!("{}m ago", s / 60),
        3600..86_400 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86_400),
    }
}

/// Depth-first from the roots (no parent, or a parent not in the list), children by
/// name. A HyperNode reached twice or never (a cycle the planner should have broken) is
/// listed once, at the end, as a root: nothing is hidden.
fn tree_order(hyper_nodes: &[HyperNodeStatus]) -> Vec<(usize, &HyperNodeStatus)> {
    let by_name: BTreeMap<&str, &HyperNodeStatus> = hyper_nodes.iter().map(|h| (h.name.as_str(), h)).collect();
    let mut children: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for h in hyper_nodes {
        if let Some(parent) = h.parent.as_deref().filter(|p| by_name.contains_key(p)) {
            children.entry(parent).or_default().insert(&h.name);
        }
    }
    let mut roots: Vec<&HyperNodeStatus> = hyper_nodes
        .iter()
        .filter(|h| h.parent.as_deref().is_none_or(|p| !by_name.contains_key(p)))
        .collect();
    // Highest tier first, then by name: the top of the fabric at the top.
    roots.sort_by(|a, b| b.tier.cmp(&a.tier).then_with(|| a.name.cmp(&b.name)));

    let mut walk = Walk {
        by_name: &by_name,
        children: &children,
        seen: BTreeSet::new(),
        out: Vec::with_capacity(hyper_nodes.len()),
    };
    for root in roots.into_iter().chain(hyper_nodes) {
        walk.from(root);
    }
    walk.out
}

/// Depth-first walk state for [`tree_order`].
struct Walk<'a, 'm> {
    by_name: &'m BTreeMap<&'a str, &'a HyperNodeStatus>,
    children: &'m BTreeMap<&'a str, BTreeSet<&'a str>>,
    seen: BTreeSet<&'a str>,
    out: Vec<(usize, &'a HyperNodeStatus)>,
}

impl<'a> Walk<'a, '_> {
    /// Lists `root` and everything under it not listed yet.
    fn from(&mut self, root: &'a HyperNodeStatus) {
        let mut stack = vec![(0, root)];
        while let Some((depth, h)) = stack.pop() {
            if !self.seen.insert(h.name.as_str()) {
                continue;
            }
            self.out.push((depth, h));
            if let Some(kids) = self.children.get(h.name.as_str()) {
                stack.extend(
                    kids.iter()
                        .rev()
                        .filter_map(|k| self.by_name.get(k))
                        .map(|k| (depth + 1, *k)),
                );
            }
        }
    }
}

fn cpus(resources: &BTreeMap<String, u64>) -> String {
    format_quantity(CPU, resources.get(CPU).copied().unwrap_or(0))
}

/// Every GPU resource (`nvidia.com/gpu`, `amd.com/gpu`, ...) counted together.
fn gpus(resources: &BTreeMap<String, u64>) -> u64 {
    resources
        .iter()
        .filter(|(name, _)| name.ends_with("/gpu"))
        .map(|(_, n)| *n)
        .sum()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn hn(name: &str, tier: u32, parent: Option<&str>, children: &[&str], nodes: (u32, u32)) -> HyperNodeStatus {
        let gpus = u64::from(nodes.1) * 8;
        HyperNodeStatus {
            name: name.into(),
            tier,
            tier_name: match tier {
                1 => Some("leaf".into()),
                2 => Some("spine".into()),
                _ => None,
            },
            source: if tier == 1 {
                "ibnetdiscover".into()
            } else {
                "static".into()
            },
            parent: parent.map(Into::into),
            children: children.iter().map(|c| c.to_string()).collect(),
            nodes: nodes.1,
            ready_nodes: nodes.0,
            fabric_degraded: 0,
            degraded_links: Vec::new(),
            links_degraded: 0,
            free: BTreeMap::from([
                (CPU.to_string(), u64::from(nodes.0) * 64_000),
                ("nvidia.com/gpu".to_string(), gpus / 2),
            ]),
            allocatable: BTreeMap::from([
                (CPU.to_string(), u64::from(nodes.1) * 128_000),
                ("nvidia.com/gpu".to_string(), gpus),
            ]),
        }
    }

    #[test]
    fn tree() {
        let mut leaf_cpu = hn("leaf-cpu", 1, Some("spine-0"), &[], (4, 4));
        leaf_cpu.free = BTreeMap::from([(CPU.to_string(), 1500)]);
        leaf_cpu.allocatable = BTreeMap::from([(CPU.to_string(), 512_000)]);
        let tree = HyperNodeTree {
            // Children listed before parents and out of name order: the renderer orders them.
            hyper_nodes: vec![
                HyperNodeStatus {
                    fabric_degraded: 1,
                    ..hn("leaf-1", 1, Some("spine-0"), &[], (3, 4))
                },
                hn("leaf-0", 1, Some("spine-0"), &[], (4, 4)),
                leaf_cpu,
                // One node of leaf-1 reports a port degraded: so do the HyperNodes above.
                HyperNodeStatus {
                    fabric_degraded: 1,
                    ..hn("spine-0", 2, Some("core"), &["leaf-0", "leaf-1", "leaf-cpu"], (11, 12))
                },
                // The dump shows a host link of leaf-2 at 1x: leaf-2 and those above count it.
                HyperNodeStatus {
                    degraded_links: vec![
                        "gpu-9 mlx5_0 port 1 – leaf-2 port 7: 1xHDR (expected 4xHDR), line 212".into(),
                    ],
                    links_degraded: 1,
                    ..hn("leaf-2", 1, Some("spine-1"), &[], (2, 2))
                },
                HyperNodeStatus {
                    links_degraded: 1,
                    ..hn("spine-1", 2, Some("core"), &["leaf-2"], (2, 2))
                },
                HyperNodeStatus {
                    fabric_degraded: 1,
                    links_degraded: 1,
                    ..hn("core", 3, None, &["spine-0", "spine-1"], (13, 14))
                },
                hn("lonely-leaf", 1, None, &[], (0, 1)),
            ],
            warnings: vec![
                "HyperNode leaf-9: member regex \"gpu-[\" does not compile".into(),
                "HyperNode leaf-3 has two parents (spine-0, spine-1); left out".into(),
            ],
            sources: Vec::new(),
        };
        insta::assert_snapshot!(render(&tree, 0));
    }

    #[test]
    fn sources_working_failing_and_waiting() {
        const NOW: u64 = 1_800_000_000;
        let source = |name: &str, kind: &str| SourceStatus {
            name: name.into(),
            kind: kind.into(),
            ..SourceStatus::default()
        };
        let tree = HyperNodeTree {
            hyper_nodes: vec![hn("leaf-0", 1, None, &[], (4, 4))],
            warnings: vec![],
            sources: vec![
                SourceStatus {
                    target: "/var/lib/hyperplan/fabric.out".into(),
                    hyper_nodes: 9,
                    last_attempt: Some(NOW - 12),
                    last_success: Some(NOW - 12),
                    summary: "40 switches (31 at level 1, 9 at level 2), 121 hosts on 470 CAs (470 named by descriptions), 72 \
                              unmapped CA(s), 40 switch-internal CA(s) left out; 9 HyperNodes in 2 tier(s)"
                        .into(),
                    unknown_hosts: (1..=12).map(|i| format!("storage{i:02}")).chain(["login1".into()]).collect(),
                    unmapped: (0..7).map(|i| format!("H-00000000000000{i:02x} \"\" on leaf-a09")).collect(),
                    ..source("fabric", "ibnetdiscover")
                },
                SourceStatus {
                    target: "node labels (fabric: hyperplan.io/spine > hyperplan.io/leaf)".into(),
                    hyper_nodes: 2,
                    ..source("label", "label")
                },
                SourceStatus {
                    target: "/etc/slurm/topology.conf".into(),
                    ..source("slurm", "slurm")
                },
                SourceStatus {
                    target: "https://ufm.lab/ufmRest/resources/ports".into(),
                    hyper_nodes: 3,
                    last_attempt: Some(NOW - 5),
                    last_success: Some(NOW - 3 * 3600 - 5),
                    error: Some(
                        "UFM at https://ufm.lab/ufmRest/resources/ports answered HTTP 500; expected 200 with the port list"
                            .into(),
                    ),
                    summary: "52 port records: 20 host links, 8 switch-to-switch links".into(),
                    warnings: vec!["UFM: skipped 2 port records with no peer_node_name (first at index 7)".into()],
                    ..source("ufm", "ufm")
                },
            ],
        };
        insta::assert_snapshot!(render(&tree, NOW));
    }

    #[test]
    fn empty_with_a_warning() {
        let tree = HyperNodeTree {
            hyper_nodes: vec![],
            warnings: vec![
                "HyperNode leaf-9: members[0] {type: Node, selector: {exactMatch: {name: gpu9}}} matches nothing"
                    .into(),
            ],
            sources: vec![],
        };
        insta::assert_snapshot!(render(&tree, 0), @r"
        no HyperNodes: none configured or discovered yet
        warning: HyperNode leaf-9: members[0] {type: Node, selector: {exactMatch: {name: gpu9}}} matches nothing
        ");
    }

    #[test]
    fn cycles_and_missing_parents_still_list_every_hypernode_once() {
        let a = hn("a", 1, Some("b"), &[], (1, 1));
        let b = hn("b", 1, Some("a"), &[], (1, 1));
        let orphan = hn("orphan", 1, Some("gone"), &[], (1, 1));
        let list = [a, b, orphan];
        let names: Vec<(usize, &str)> = tree_order(&list)
            .into_iter()
            .map(|(d, h)| (d, h.name.as_str()))
            .collect();
        assert_eq!(names, vec![(0, "orphan"), (0, "a"), (1, "b")]);
    }
}
