//! Fat-tree cluster generator behind `hyperplan cluster generate fat-tree`, and the
//! writer that turns any [`ClusterSpec`] back into a cluster file.
//!
//! `fanout[0]` nodes share a leaf (tier 1); every `fanout[i]` HyperNodes of tier `i`
//! share one of tier `i + 1`. If more than one HyperNode is left at the last level, a
//! single `top` HyperNode one tier higher joins them, so the tree always has one root.

use std::collections::BTreeMap;

use crate::cluster::{ClusterSpec, NodeSpec};
use crate::hypernode::{HyperNodeSpec, Member, MemberType, Selector, member_yaml};
use crate::quantity::format_quantity;
use crate::resources::Resources;
use crate::yaml::scalar;

pub use crate::hypernode::to_hypernode_manifests;

/// What to generate; see the module docs for the shape.
#[derive(Clone, Debug, PartialEq)]
pub struct FatTreeParams {
    pub nodes: u32,
    pub fanout: Vec<u32>,
    /// Every node's capacity.
    pub node_resources: Resources,
    /// Share of nodes (0..=1, rounded to the nearest node) marked fully used.
    pub busy: f64,
    /// Seeds the choice of busy nodes, so a seed always gives the same cluster.
    pub seed: u64,
    /// Node name prefix, `node` on the command line by default.
    pub prefix: String,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FatTreeError {
    #[error("--nodes: expected at least 1 node")]
    NoNodes,
    #[error("--fanout: expected at least one level, such as 16,32,8")]
    NoFanout,
    #[error("--fanout: the first level (nodes per leaf) must be at least 1")]
    ZeroLeafFanout,
    #[error("--fanout: level {level} is {value}; levels above the leaves must be at least 2")]
    UpperFanoutTooSmall { level: usize, value: u32 },
    #[error("--busy: expected a share between 0 and 1, got {0}")]
    BadBusy(String),
}

/// The tier name the generator uses for `tier`: leaf, spine, pod, then `tier<N>`.
fn tier_name(tier: u32) -> String {
    match tier {
        1 => "leaf".to_string(),
        2 => "spine".to_string(),
        3 => "pod".to_string(),
        n => format!("tier{n}"),
    }
}

/// Digits needed to write `n`.
fn width(n: usize) -> usize {
    n.max(1).to_string().len()
}

/// Builds the fat-tree cluster `params` describes.
pub fn generate(params: &FatTreeParams) -> Result<ClusterSpec, FatTreeError> {
    if params.nodes == 0 {
        return Err(FatTreeError::NoNodes);
    }
    match params.fanout.first() {
        None => return Err(FatTreeError::NoFanout),
        Some(0) => return Err(FatTreeError::ZeroLeafFanout),
        Some(_) => {}
    }
    if let Some((i, &v)) = params.fanout.iter().enumerate().skip(1).find(|(_, v)| **v < 2) {
        return Err(FatTreeError::UpperFanoutTooSmall { level: i + 1, value: v });
    }
    if !(0.0..=1.0).contains(&params.busy) {
        return Err(FatTreeError::BadBusy(params.busy.to_string()));
    }

    let n = params.nodes as usize;
    let node_width = width(n);
    let node_names: Vec<String> = (1..=n).map(|i| format!("{}{i:0node_width$}", params.prefix)).collect();
    let mut labels: Vec<BTreeMap<String, String>> = vec![BTreeMap::new(); n];

    // `children`: the member names of the level below; `span[i]`: the nodes under child i.
    let mut children: Vec<String> = node_names.clone();
    let mut spans: Vec<std::ops::Range<usize>> = (0..n).map(|i| i..i + 1).collect();
    let mut member_type = MemberType::Node;
    let mut hyper_nodes = Vec::new();
    let mut levels: Vec<(u32, usize)> = params
        .fanout
        .iter()
        .enumerate()
        .map(|(i, &f)| (i as u32 + 1, f as usize))
        .collect();
    let mut level = 0;
    while level < levels.len() {
        let (tier, fanout) = levels[level];
        let name = tier_name(tier);
        let count = children.len().div_ceil(fanout);
        let w = width(count);
        let mut next_children = Vec::with_capacity(count);
        let mut next_spans = Vec::with_capacity(count);
        for (j, (group, group_spans)) in children.chunks(fanout).zip(spans.chunks(fanout)).enumerate() {
            // The extra level past the fanout list is the single root.
            let is_top = level == params.fanout.len();
            let hn = if is_top {
                "top".to_string()
            } else {
                format!("{name}-{:0w$}", j + 1)
            };
            let span = group_spans.first().map_or(0, |s| s.start)..group_spans.last().map_or(0, |s| s.end);
            for l in &mut labels[span.clone()] {
                l.insert(name.clone(), hn.clone());
            }
            hyper_nodes.push(HyperNodeSpec {
                name: hn.clone(),
                tier,
                tier_name: Some(name.clone()),
                members: group
                    .iter()
                    .map(|c| Member {
                        kind: member_type,
                        selector: Selector::Exact { name: c.clone() },
                    })
                    .collect(),
            });
            next_children.push(hn);
            next_spans.push(span);
        }
        children = next_children;
        spans = next_spans;
        member_type = MemberType::HyperNode;
        level += 1;
        // One root: join whatever is left under a `top` HyperNode.
        if level == levels.len() && children.len() > 1 && level == params.fanout.len() {
            levels.push((tier + 1, children.len()));
        }
    }

    let busy = (params.busy * f64::from(params.nodes)).round() as usize;
    let mut used = vec![false; n];
    let mut order: Vec<usize> = (0..n).collect();
    fastrand::Rng::with_seed(params.seed).shuffle(&mut order);
    for &i in order.iter().take(busy.min(n)) {
        used[i] = true;
    }

    let nodes = node_names
        .into_iter()
        .zip(labels)
        .zip(used)
        .map(|((name, labels), busy)| NodeSpec {
            name,
            labels,
            resources: params.node_resources.clone(),
            used: if busy {
                params.node_resources.clone()
            } else {
                Resources::new()
            },
            topology: None,
            hardware: None,
        })
        .collect();
    Ok(ClusterSpec {
        nodes,
        hyper_nodes,
        label_discovery: BTreeMap::new(),
    })
}

/// `{cpu: 128, memory: 1Ti}` in the human form, which reads back exactly.
fn resources_yaml(r: &Resources) -> String {
    let entries: Vec<String> = r
        .iter()
        .map(|(k, v)| format!("{}: {}", scalar(k), format_quantity(k, v)))
        .collect();
    format!("{{{}}}", entries.join(", "))
}

/// Writes a cluster file that [`crate::parse_cluster`] reads back to the same spec,
/// HyperNodes inline. One line per node keeps 10000-node files readable.
pub fn to_cluster_yaml(spec: &ClusterSpec) -> String {
    let mut out = String::from("nodes:\n");
    for n in &spec.nodes {
        out.push_str(&format!("  - {{name: {}", scalar(&n.name)));
        if !n.labels.is_empty() {
            let labels: Vec<String> = n
                .labels
                .iter()
                .map(|(k, v)| format!("{}: {}", scalar(k), scalar(v)))
                .collect();
            out.push_str(&format!(", labels: {{{}}}", labels.join(", ")));
        }
        out.push_str(&format!(", resources: {}", resources_yaml(&n.resources)));
        if !n.used.0.is_empty() {
            out.push_str(&format!(", used: {}", resources_yaml(&n.used)));
        }
        match &n.topology {
            Some(crate::TopologyRef::HwlocXml(p)) => out.push_str(&format!(
                ", topology: {{hwlocXml: {}}}",
                scalar(&p.display().to_string())
            )),
            Some(crate::TopologyRef::Synthetic(s)) => {
                out.push_str(&format!(", topology: {{synthetic: {}}}", scalar(s)))
            }
            Some(crate::TopologyRef::Probe(p)) => {
                out.push_str(&format!(", topology: {{probe: {}}}", scalar(&p.display().to_string())))
            }
            None => {}
        }
        out.push_str("}\n");
    }
    if !spec.hyper_nodes.is_empty() {
        out.push_str("hyperNodes:\n");
        for h in &spec.hyper_nodes {
            out.push_str(&format!("  - name: {}\n    tier: {}\n", scalar(&h.name), h.tier));
            if let Some(t) = &h.tier_name {
                out.push_str(&format!("    tierName: {}\n", scalar(t)));
            }
            out.push_str("    members:\n");
            for m in &h.members {
                out.push_str(&format!("      - {}\n", member_yaml(m)));
            }
        }
    }
    if !spec.label_discovery.is_empty() {
        out.push_str("discovery:\n  label:\n");
        for (kind, keys) in &spec.label_discovery {
            let levels: Vec<String> = keys.iter().map(|k| format!("{{nodeLabel: {}}}", scalar(k))).collect();
            out.push_str(&format!("    {}: [{}]\n", scalar(kind), levels.join(", ")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::quantity::parse_resource_list;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn params(nodes: u32, fanout: &[u32]) -> Result<FatTreeParams, Box<dyn std::error::Error>> {
        Ok(FatTreeParams {
            nodes,
            fanout: fanout.to_vec(),
            node_resources: parse_resource_list("cpu=128,memory=1Ti,nvidia.com/gpu=8")?,
            busy: 0.0,
            seed: 7,
            prefix: "node".to_string(),
        })
    }

    fn per_tier(spec: &ClusterSpec) -> BTreeMap<u32, usize> {
        let mut m = BTreeMap::new();
        for h in &spec.hyper_nodes {
            *m.entry(h.tier).or_insert(0) += 1;
        }
        m
    }

    #[test]
    fn ten_thousand_nodes() -> TestResult {
        let spec = generate(&params(10_000, &[16, 32, 8])?)?;
        assert_eq!(per_tier(&spec), BTreeMap::from([(1, 625), (2, 20), (3, 3), (4, 1)]));
        assert_eq!(spec.nodes.len(), 10_000);
        assert_eq!(spec.nodes[0].name, "node00001");
        assert_eq!(spec.nodes[9_999].name, "node10000");
        let names: Vec<&str> = spec.hyper_nodes.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names[0], "leaf-001");
        assert_eq!(names[624], "leaf-625");
        assert_eq!(names[625], "spine-01");
        assert_eq!(names[645], "pod-1");
        assert_eq!(names[648], "top");
        let top = &spec.hyper_nodes[648];
        assert_eq!(
            (top.tier, top.tier_name.as_deref(), top.members.len()),
            (4, Some("tier4"), 3)
        );
        assert_eq!(spec.hyper_nodes[0].members.len(), 16);
        assert_eq!(spec.hyper_nodes[0].members[0].kind, MemberType::Node);
        assert_eq!(spec.hyper_nodes[625].members.len(), 32);
        assert_eq!(spec.hyper_nodes[625].members[0].kind, MemberType::HyperNode);
        assert_eq!(spec.hyper_nodes[647].members.len(), 4); // 20 spines = 8 + 8 + 4
        let last = &spec.nodes[9_999].labels;
        let want = [
            ("leaf", "leaf-625"),
            ("spine", "spine-20"),
            ("pod", "pod-3"),
            ("tier4", "top"),
        ];
        assert_eq!(
            last,
            &want
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        );
        assert!(spec.nodes.iter().all(|n| n.used.is_empty()));
        Ok(())
    }

    #[test]
    fn partial_leaf_and_no_extra_top() -> TestResult {
        let spec = generate(&params(20, &[8, 4])?)?;
        assert_eq!(per_tier(&spec), BTreeMap::from([(1, 3), (2, 1)]));
        assert_eq!(spec.hyper_nodes[2].members.len(), 4);
        assert_eq!(spec.hyper_nodes[3].name, "spine-1");
        assert_eq!(spec.nodes[0].name, "node01");
        let single = generate(&params(5, &[8])?)?;
        assert_eq!(per_tier(&single), BTreeMap::from([(1, 1)]));
        let top = generate(&params(20, &[8])?)?;
        assert_eq!(per_tier(&top), BTreeMap::from([(1, 3), (2, 1)]));
        assert_eq!(top.hyper_nodes[3].name, "top");
        assert_eq!(top.hyper_nodes[3].tier_name.as_deref(), Some("spine"));
        Ok(())
    }

    #[test]
    fn busy_share_is_exact_and_deterministic() -> TestResult {
        let mut p = params(1000, &[16, 4])?;
        p.busy = 0.1234;
        let a = generate(&p)?;
        let busy: Vec<&str> = a
            .nodes
            .iter()
            .filter(|n| !n.used.is_empty())
            .map(|n| n.name.as_str())
            .collect();
        assert_eq!(busy.len(), 123);
        assert!(
            a.nodes
                .iter()
                .filter(|n| !n.used.is_empty())
                .all(|n| n.used == n.resources)
        );
        assert_eq!(generate(&p)?, a);
        p.seed = 8;
        assert_ne!(generate(&p)?, a);
        p.busy = 1.0;
        assert!(generate(&p)?.nodes.iter().all(|n| n.used == n.resources));
        Ok(())
    }

    #[test]
    fn rejects_bad_parameters() -> TestResult {
        let ok = params(10, &[4, 2])?;
        let with = |f: &dyn Fn(&mut FatTreeParams)| {
            let mut p = ok.clone();
            f(&mut p);
            generate(&p).err()
        };
        assert_eq!(with(&|p| p.nodes = 0), Some(FatTreeError::NoNodes));
        assert_eq!(with(&|p| p.fanout.clear()), Some(FatTreeError::NoFanout));
        assert_eq!(with(&|p| p.fanout = vec![0]), Some(FatTreeError::ZeroLeafFanout));
        assert_eq!(
            with(&|p| p.fanout = vec![4, 1]),
            Some(FatTreeError::UpperFanoutTooSmall { level: 2, value: 1 })
        );
        assert!(matches!(with(&|p| p.busy = 1.5), Some(FatTreeError::BadBusy(_))));
        assert!(matches!(with(&|p| p.busy = f64::NAN), Some(FatTreeError::BadBusy(_))));
        assert_eq!(with(&|p| p.fanout = vec![1, 2]), None);
        Ok(())
    }

    #[test]
    fn round_trips_through_the_cluster_file() -> TestResult {
        let mut p = params(1000, &[16, 4, 2])?;
        p.busy = 0.25;
        p.node_resources.0.insert("cpu".into(), 1500);
        let spec = generate(&p)?;
        let text = to_cluster_yaml(&spec);
        assert_eq!(crate::parse_cluster(&text, Path::new("gen.yaml"))?, spec);
        let manifests = to_hypernode_manifests(&spec.hyper_nodes);
        assert_eq!(
            crate::hypernode::parse_hypernode_manifests(&manifests, Path::new("m.yaml"))?,
            spec.hyper_nodes
        );
        Ok(())
    }

    #[test]
    fn writer_quotes_what_needs_it() -> TestResult {
        let spec = ClusterSpec {
            nodes: vec![NodeSpec {
                name: "001".into(),
                labels: BTreeMap::from([("on".into(), "yes".into()), ("a b".into(), "x: y".into())]),
                resources: Resources::new(),
                used: Resources::new(),
                topology: None,
                hardware: None,
            }],
            hyper_nodes: vec![HyperNodeSpec {
                name: "h".into(),
                tier: 0,
                tier_name: None,
                members: vec![Member {
                    kind: MemberType::Node,
                    selector: Selector::Label {
                        match_labels: BTreeMap::from([("on".into(), "yes".into())]),
                        match_expressions: vec![crate::hypernode::LabelExpression {
                            key: "k".into(),
                            operator: "In".into(),
                            values: vec!["1".into(), "[x]".into()],
                        }],
                    },
                }],
            }],
            label_discovery: BTreeMap::from([("fabric".into(), vec!["spine".into(), "leaf".into()])]),
        };
        assert_eq!(
            crate::parse_cluster(&to_cluster_yaml(&spec), Path::new("q.yaml"))?,
            spec
        );
        Ok(())
    }
}
