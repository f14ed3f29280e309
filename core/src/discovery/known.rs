//! Leaving out hosts that are no planner node. A fabric (or a Slurm file) names every
//! host on it: storage servers, login nodes, nodes whose agent has not registered yet.
//! Such a member would break its HyperNode in the topology index (a member that matches
//! nothing), so discovered sources keep only the hosts the planner knows; a HyperNode
//! left with no member goes too, and so does a reference to it from its parent.

use std::collections::{BTreeSet, HashSet};

use hyperplan_shared::{HyperNodeSpec, MemberType, Selector};

/// The HyperNodes to reconcile, and the host names that were left out (sorted).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Kept {
    /// The HyperNodes with only known hosts, the ones left empty dropped.
    pub specs: Vec<HyperNodeSpec>,
    /// Host names that are no planner node, sorted and without repeats.
    pub unknown_hosts: Vec<String>,
}

/// Keeps exact Node members that `known` accepts; other selectors stay as written. A
/// HyperNode member naming one of `specs` that ended empty is dropped; one naming a
/// HyperNode of another source stays (that source decides about it).
pub fn keep_known(specs: &[HyperNodeSpec], known: impl Fn(&str) -> bool) -> Kept {
    let own: HashSet<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    let mut unknown: BTreeSet<String> = BTreeSet::new();
    let mut out: Vec<HyperNodeSpec> = specs
        .iter()
        .map(|s| {
            let mut s = s.clone();
            s.members.retain(|m| match (&m.kind, &m.selector) {
                (MemberType::Node, Selector::Exact { name }) => {
                    let keep = known(name);
                    if !keep {
                        unknown.insert(name.clone());
                    }
                    keep
                }
                _ => true,
            });
            s
        })
        .collect();
    // Drop empty HyperNodes and references to them until nothing changes; each pass
    // removes at least one HyperNode, so this ends.
    let mut dropped: HashSet<String> = HashSet::new();
    loop {
        let before = dropped.len();
        for s in &mut out {
            if dropped.contains(&s.name) {
                continue;
            }
            s.members.retain(|m| match (&m.kind, &m.selector) {
                (MemberType::HyperNode, Selector::Exact { name }) => {
                    !(own.contains(name.as_str()) && dropped.contains(name))
                }
                _ => true,
            });
            if s.members.is_empty() {
                dropped.insert(s.name.clone());
            }
        }
        if dropped.len() == before {
            break;
        }
    }
    out.retain(|s| !dropped.contains(&s.name));
    Kept {
        specs: out,
        unknown_hosts: unknown.into_iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::hn;

    #[test]
    fn foreign_hosts_leave_and_empty_hypernodes_follow_upwards() {
        let specs = vec![
            hn("leaf-a", 1, MemberType::Node, &["n1", "storage1"]),
            hn("leaf-b", 1, MemberType::Node, &["storage2", "storage3"]),
            hn("leaf-c", 1, MemberType::Node, &["login1"]),
            hn("spine-1", 2, MemberType::HyperNode, &["leaf-a", "leaf-b"]),
            hn("spine-2", 2, MemberType::HyperNode, &["leaf-c"]),
            hn("core", 3, MemberType::HyperNode, &["spine-1", "spine-2", "elsewhere"]),
        ];
        let kept = keep_known(&specs, |n| n.starts_with('n'));
        assert_eq!(
            kept.specs,
            vec![
                hn("leaf-a", 1, MemberType::Node, &["n1"]),
                hn("spine-1", 2, MemberType::HyperNode, &["leaf-a"]),
                // `elsewhere` belongs to no spec here: another source's, kept.
                hn("core", 3, MemberType::HyperNode, &["spine-1", "elsewhere"]),
            ]
        );
        assert_eq!(kept.unknown_hosts, vec!["login1", "storage1", "storage2", "storage3"]);
    }

    #[test]
    fn parents_listed_before_children_are_pruned_too() {
        let specs = vec![
            hn("top", 3, MemberType::HyperNode, &["mid"]),
            hn("mid", 2, MemberType::HyperNode, &["leaf"]),
            hn("leaf", 1, MemberType::Node, &["x"]),
        ];
        assert!(keep_known(&specs, |_| false).specs.is_empty());
        assert_eq!(keep_known(&specs, |_| true).specs, specs);
    }
}
