//! `hyperplan hypernodes`: the planner's HyperNode tree (network performance domains:
//! leaf switch groups, spines, ...) with tiers, Ready nodes and free capacity, then the
//! HyperNodes left out and why.

use std::collections::{BTreeMap, BTreeSet};

use hyperplan_net::messages::RequestCommand;
use hyperplan_shared::CPU;
use hyperplan_shared::quantity::format_quantity;
use hyperplan_shared::status::{HyperNodeStatus, HyperNodeTree};

use super::columns::{columns, ratio};
use super::{Output, call, decode, json, long_help};
use crate::client::ClientArgs;

const EXAMPLES: &str = "  hyperplan hypernodes
  hyperplan hypernodes --output json | jq '.hyperNodes[] | select(.tier == 1) | .name'";

/// Show the HyperNode tree: tiers, Ready nodes, free CPUs and GPUs per HyperNode.
///
/// Children are indented under their parents (highest tier at the left). TIER is the
/// tier number and its name, SOURCE the discovery source that made it (static, label,
/// ibnetdiscover, ufm, slurm), NODES the Ready nodes under it out of all, CPUS and GPUS
/// free/allocatable. HyperNodes the planner had to leave out (a cycle, a second parent,
/// a member matching nothing) follow as warnings.
#[derive(clap::Args, Debug)]
#[command(after_long_help = long_help(EXAMPLES))]
pub struct Args {
    #[arg(long, value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    client: ClientArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let value = call(&args.client, RequestCommand::HyperNodes)?;
    let text = match args.output {
        Output::Json => json(&value)?,
        Output::Table => render(&decode::<HyperNodeTree>(value, "HyperNode tree")?),
    };
    print!("{text}");
    Ok(())
}

/// The indented tree, then one `warning:` line per warning.
pub fn render(tree: &HyperNodeTree) -> String {
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
            rows.push([
                format!("{}{}", "  ".repeat(depth), h.name),
                tier,
                h.source.clone(),
                ratio(h.ready_nodes, h.nodes),
                ratio(cpus(&h.free), cpus(&h.allocatable)),
                ratio(gpus(&h.free), gpus(&h.allocatable)),
            ]);
        }
        out.push_str(&columns(&rows));
    }
    for w in &tree.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
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
                hn("leaf-1", 1, Some("spine-0"), &[], (3, 4)),
                hn("leaf-0", 1, Some("spine-0"), &[], (4, 4)),
                leaf_cpu,
                hn("spine-0", 2, Some("core"), &["leaf-0", "leaf-1", "leaf-cpu"], (11, 12)),
                hn("leaf-2", 1, Some("spine-1"), &[], (2, 2)),
                hn("spine-1", 2, Some("core"), &["leaf-2"], (2, 2)),
                hn("core", 3, None, &["spine-0", "spine-1"], (13, 14)),
                hn("lonely-leaf", 1, None, &[], (0, 1)),
            ],
            warnings: vec![
                "HyperNode leaf-9: member regex \"gpu-[\" does not compile".into(),
                "HyperNode leaf-3 has two parents (spine-0, spine-1); left out".into(),
            ],
        };
        insta::assert_snapshot!(render(&tree));
    }

    #[test]
    fn empty_with_a_warning() {
        let tree = HyperNodeTree {
            hyper_nodes: vec![],
            warnings: vec!["discovery source ufm failed: connection refused".into()],
        };
        insta::assert_snapshot!(render(&tree), @r"
        no HyperNodes: none configured or discovered yet
        warning: discovery source ufm failed: connection refused
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
