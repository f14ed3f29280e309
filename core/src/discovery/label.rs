//! Label discovery: HyperNodes from node labels, in Volcano's `networkTopologyTypes`
//! format (`{type: [{nodeLabel: top}, …, {nodeLabel: bottom}]}`).
//!
//! Unlike Volcano, a HyperNode is keyed by its whole path of label values, so `rack=r1`
//! under spine `s1` and `rack=r1` under `s2` are two HyperNodes. The last label is
//! dropped only when it is a host-name label (a warning otherwise), and names are
//! derived from the path, not random suffixes, so they are stable across restarts.

use std::collections::BTreeMap;

use hyperplan_shared::{HyperNodeSpec, Member, MemberType, Selector};

/// Labels that name the host itself; the tier under them would hold one node each.
const HOSTNAME_LABELS: &[&str] = &["kubernetes.io/hostname", "hostname", "host"];

/// Volcano limits type names to 20 characters.
const MAX_TYPE_NAME: usize = 20;

/// A discovered HyperNode before naming: tier, label key, members.
type Found = (u32, String, Vec<(MemberType, String)>);

/// Discovers HyperNodes. `nodes` are `(name, labels)`; the result is sorted by name.
pub(super) fn discover<'a>(
    types: &BTreeMap<String, Vec<String>>,
    nodes: impl Iterator<Item = (&'a str, &'a BTreeMap<String, String>)> + Clone,
    warnings: &mut Vec<String>,
) -> Vec<HyperNodeSpec> {
    // path (type, values top-down) → (tier, label key, member names)
    let mut found: BTreeMap<(String, Vec<String>), Found> = BTreeMap::new();
    for (type_name, labels) in types {
        if type_name.len() > MAX_TYPE_NAME {
            warnings.push(format!(
                "label discovery: type {type_name:?} is longer than {MAX_TYPE_NAME} characters; skipped"
            ));
            continue;
        }
        let mut seen = std::collections::BTreeSet::new();
        if !labels.iter().all(|l| seen.insert(l)) {
            warnings.push(format!(
                "label discovery: type {type_name:?} lists a label twice; skipped"
            ));
            continue;
        }
        let mut tiers: Vec<&str> = labels.iter().map(String::as_str).collect();
        match tiers.last() {
            Some(last) if HOSTNAME_LABELS.contains(last) => {
                tiers.pop();
            }
            Some(last) => warnings.push(format!(
                "label discovery: type {type_name:?}: last label {last:?} is not a host-name label; it is kept as tier 1"
            )),
            None => continue,
        }
        tiers.reverse(); // index 0 = tier 1, closest to the nodes
        let prefix = clean(type_name);
        for (node, node_labels) in nodes.clone() {
            // Values present from tier 1 upward, stopping at the first missing one.
            let values: Vec<&str> = tiers
                .iter()
                .map_while(|l| node_labels.get(*l).map(String::as_str))
                .collect();
            for tier in 0..values.len() {
                // Path from the highest present label down to this tier.
                let path: Vec<String> = values[tier..].iter().rev().map(|v| v.to_string()).collect();
                let entry = found
                    .entry((prefix.clone(), path))
                    .or_insert_with(|| ((tier + 1) as u32, tiers[tier].to_string(), Vec::new()));
                let member = if tier == 0 {
                    (MemberType::Node, node.to_string())
                } else {
                    let child: Vec<String> = values[tier - 1..].iter().rev().map(|v| v.to_string()).collect();
                    (MemberType::HyperNode, hn_name(&prefix, &child))
                };
                entry.2.push(member);
            }
        }
    }
    let mut out: Vec<HyperNodeSpec> = found
        .into_iter()
        .map(|((prefix, path), (tier, key, mut members))| {
            members.sort();
            members.dedup();
            HyperNodeSpec {
                name: hn_name(&prefix, &path),
                tier,
                tier_name: Some(key),
                members: members
                    .into_iter()
                    .map(|(kind, name)| Member {
                        kind,
                        selector: Selector::Exact { name },
                    })
                    .collect(),
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn hn_name(prefix: &str, path: &[String]) -> String {
    let mut s = prefix.to_string();
    for v in path {
        s.push('-');
        s.push_str(&clean(v));
    }
    s
}

/// Volcano's clean(): letters lower-cased, digits, `.` and `-` kept, the rest → `-`.
fn clean(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn same_rack_value_under_two_spines_is_two_hypernodes() {
        let nodes = [
            (
                "n1".to_string(),
                labels(&[("spine", "s1"), ("rack", "r1"), ("kubernetes.io/hostname", "n1")]),
            ),
            (
                "n2".to_string(),
                labels(&[("spine", "s2"), ("rack", "r1"), ("kubernetes.io/hostname", "n2")]),
            ),
            ("n3".to_string(), labels(&[("rack", "r9")])),
            ("n4".to_string(), labels(&[("spine", "s1")])), // no tier-1 label: contributes nothing
        ];
        let mut types = BTreeMap::new();
        types.insert(
            "Fabric".to_string(),
            vec![
                "spine".to_string(),
                "rack".to_string(),
                "kubernetes.io/hostname".to_string(),
            ],
        );
        let mut warnings = Vec::new();
        let hns = discover(&types, nodes.iter().map(|(n, l)| (n.as_str(), l)), &mut warnings);
        let summary: Vec<String> = hns
            .iter()
            .map(|h| {
                let members: Vec<String> = h
                    .members
                    .iter()
                    .map(|m| match &m.selector {
                        Selector::Exact { name } => name.clone(),
                        _ => String::new(),
                    })
                    .collect();
                format!(
                    "{} t{} {} [{}]",
                    h.name,
                    h.tier,
                    h.tier_name.clone().unwrap_or_default(),
                    members.join(",")
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                "fabric-r9 t1 rack [n3]",
                "fabric-s1 t2 spine [fabric-s1-r1]",
                "fabric-s1-r1 t1 rack [n1]",
                "fabric-s2 t2 spine [fabric-s2-r1]",
                "fabric-s2-r1 t1 rack [n2]",
            ]
        );
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn last_label_kept_with_warning_when_not_a_hostname() {
        let nodes = [("n1".to_string(), labels(&[("spine", "s1"), ("leaf", "l1")]))];
        let mut types = BTreeMap::new();
        types.insert("t".to_string(), vec!["spine".to_string(), "leaf".to_string()]);
        let mut warnings = Vec::new();
        let hns = discover(&types, nodes.iter().map(|(n, l)| (n.as_str(), l)), &mut warnings);
        assert_eq!(hns.len(), 2);
        assert_eq!(warnings.len(), 1);
    }
}
