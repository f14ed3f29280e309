//! Slurm's `topology.conf` (topology/tree) as HyperNodes, both ways.
//!
//! Import: `SwitchName=s1 Switches=s[2-3]` and `SwitchName=l1 Nodes=gpu[001-016,020]`
//! lines (keys case-insensitive as Slurm reads them, `LinkSpeed=` ignored, `#` comments,
//! `\` continues a line). A switch with `Nodes=` is tier 1; a switch's tier is 1 + the
//! highest tier of its child switches. Slurm tolerates a cycle of `Switches=` references
//! (the X5 file has one); here the reference that closes the cycle, found by a walk in
//! name order, is dropped with a warning; a switch left with no members by that is left
//! out too (warned), so what is written always reads back. A file with no `SwitchName=`
//! line is an error, not an empty result. A node or switch listed under several parents is
//! kept everywhere, with a warning (HyperNodes want one parent; the planner reports it).
//! Names are kept exactly as written, and must follow hyperplan's name rule.
//!
//! Export: one line per HyperNode, tier by tier, names compressed to hostlists. Import →
//! export → import gives the same HyperNodes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use hyperplan_shared::hostlist::{compress, expand};
use hyperplan_shared::names::{NameKind, check_name};
use hyperplan_shared::{HyperNodeSpec, Member, MemberType, Selector};

use crate::error::FabricError;
use crate::names::{natural_key, tier_name};

/// HyperNodes read from a `topology.conf`, with what was tolerated on the way.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlurmImport {
    /// Sorted by tier, then name; members sorted.
    pub hypernodes: Vec<HyperNodeSpec>,
    pub warnings: Vec<String>,
}

struct SwitchLine {
    name: String,
    line: u64,
    switches: Vec<String>,
    nodes: Vec<String>,
}

/// Reads a Slurm `topology.conf`. `path` is only used in messages.
pub fn parse_topology_conf(text: &str, path: &Path) -> Result<SlurmImport, FabricError> {
    let err = |line: u64, msg: String| FabricError::parse(path, line, msg);
    let mut switches: Vec<SwitchLine> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    let mut warnings = Vec::new();
    for (line_no, line) in logical_lines(text) {
        let mut entry = SwitchLine {
            name: String::new(),
            line: line_no,
            switches: Vec::new(),
            nodes: Vec::new(),
        };
        for (pos, token) in line.split_whitespace().enumerate() {
            let Some((key, value)) = token.split_once('=') else {
                return Err(err(line_no, format!("expected `Key=Value`, got {token:?}")));
            };
            let key = key.to_ascii_lowercase();
            if pos == 0 && key != "switchname" {
                let hint = if key == "blockname" {
                    " (topology/block `BlockName=` lines are not supported, only topology/tree)"
                } else {
                    ""
                };
                return Err(err(
                    line_no,
                    format!("expected the line to start with `SwitchName=`, got {token:?}{hint}"),
                ));
            }
            // Names become HyperNode and node names: the one rule applies (`names.rs`).
            let list = |v: &str, kind: NameKind, field: &str| -> Result<Vec<String>, FabricError> {
                let names = expand(v).map_err(|e| err(line_no, format!("{key}: {e}")))?;
                for n in &names {
                    check_name(kind, n).map_err(|e| err(line_no, format!("{field}: {e}")))?;
                }
                Ok(names)
            };
            match key.as_str() {
                "switchname" if pos == 0 => {
                    if value.is_empty() {
                        return Err(err(line_no, "expected a name after `SwitchName=`".to_string()));
                    }
                    check_name(NameKind::HyperNode, value).map_err(|e| err(line_no, format!("SwitchName: {e}")))?;
                    entry.name = value.to_string();
                }
                "switches" => entry.switches.extend(list(value, NameKind::HyperNode, "Switches")?),
                "nodes" => entry.nodes.extend(list(value, NameKind::Node, "Nodes")?),
                "linkspeed" => {}
                _ => {
                    return Err(err(
                        line_no,
                        format!("unknown key {token:?}: expected `Switches=`, `Nodes=` or `LinkSpeed=`"),
                    ));
                }
            }
        }
        if entry.switches.is_empty() && entry.nodes.is_empty() {
            return Err(err(
                line_no,
                format!("switch {} has neither `Switches=` nor `Nodes=`", entry.name),
            ));
        }
        if let Some(&first) = index.get(&entry.name) {
            return Err(err(
                line_no,
                format!(
                    "switch {} is defined twice (first at line {})",
                    entry.name, switches[first].line
                ),
            ));
        }
        index.insert(entry.name.clone(), switches.len());
        switches.push(entry);
    }

    if switches.is_empty() {
        return Err(err(
            0,
            "expected `SwitchName=` lines (Slurm topology/tree), the file has none".to_string(),
        ));
    }

    // Children as indices; unknown names are errors.
    let mut children: Vec<Vec<usize>> = Vec::with_capacity(switches.len());
    for s in &switches {
        let mut c = Vec::with_capacity(s.switches.len());
        for name in &s.switches {
            let Some(&i) = index.get(name) else {
                return Err(err(
                    s.line,
                    format!(
                        "switch {} lists child switch {name:?}, which has no `SwitchName=` line",
                        s.name
                    ),
                ));
            };
            c.push(i);
        }
        c.sort_by(|&a, &b| switches[a].name.cmp(&switches[b].name));
        c.dedup();
        children.push(c);
    }

    // Tiers by an iterative depth-first walk in name order; a back edge closes a cycle.
    let order: Vec<usize> = index.values().copied().collect();
    let mut state = vec![0u8; switches.len()]; // 0 new, 1 on the stack, 2 done
    let mut tier = vec![1u32; switches.len()];
    let mut dropped: BTreeSet<(usize, usize)> = BTreeSet::new();
    for &root in &order {
        if state[root] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        state[root] = 1;
        while let Some(&mut (s, ref mut next)) = stack.last_mut() {
            if let Some(&c) = children[s].get(*next) {
                *next += 1;
                match state[c] {
                    0 => {
                        state[c] = 1;
                        stack.push((c, 0));
                    }
                    1 => {
                        dropped.insert((s, c));
                    }
                    _ => {}
                }
            } else {
                state[s] = 2;
                stack.pop();
                let t = children[s]
                    .iter()
                    .filter(|&&c| !dropped.contains(&(s, c)))
                    .map(|&c| tier[c] + 1)
                    .max()
                    .unwrap_or(1);
                tier[s] = t;
            }
        }
    }
    for &(s, c) in &dropped {
        warnings.push(format!(
            "{}:{}: `Switches=` of {} lists {}, which is already above it (a cycle); that reference is ignored",
            path.display(),
            switches[s].line,
            switches[s].name,
            switches[c].name
        ));
    }

    // Parent counts, for warnings.
    let mut node_parents: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut switch_parents: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (si, s) in switches.iter().enumerate() {
        for n in &s.nodes {
            node_parents.entry(n.as_str()).or_default().push(&s.name);
        }
        for &c in &children[si] {
            if !dropped.contains(&(si, c)) {
                switch_parents
                    .entry(switches[c].name.as_str())
                    .or_default()
                    .push(&s.name);
            }
        }
    }
    for (what, parents) in [("node", &node_parents), ("switch", &switch_parents)] {
        let many: Vec<String> = parents
            .iter()
            .filter(|(_, p)| p.len() > 1)
            .map(|(n, p)| format!("{n} ({})", p.join(", ")))
            .collect();
        if !many.is_empty() {
            warnings.push(format!(
                "{}: {} {what}(s) have more than one parent switch; a HyperNode tree wants one: {}",
                path.display(),
                many.len(),
                many.join("; ")
            ));
        }
    }

    let mut hypernodes: Vec<HyperNodeSpec> = switches
        .iter()
        .enumerate()
        .map(|(si, s)| {
            let mut child_names: Vec<&str> = children[si]
                .iter()
                .filter(|&&c| !dropped.contains(&(si, c)))
                .map(|&c| switches[c].name.as_str())
                .collect();
            child_names.sort_unstable();
            let mut nodes: Vec<&str> = s.nodes.iter().map(String::as_str).collect();
            nodes.sort_by_key(|n| natural_key(n));
            nodes.dedup();
            let members = child_names
                .into_iter()
                .map(|n| (MemberType::HyperNode, n))
                .chain(nodes.into_iter().map(|n| (MemberType::Node, n)))
                .map(|(kind, n)| Member {
                    kind,
                    selector: Selector::Exact { name: n.to_string() },
                })
                .collect();
            HyperNodeSpec {
                name: s.name.clone(),
                tier: tier[si],
                tier_name: Some(tier_name(tier[si])),
                members,
            }
        })
        .collect();
    drop_memberless(&mut hypernodes, &mut warnings, path);
    if hypernodes.is_empty() {
        // Every switch was in a cycle with no node below it.
        return Err(err(
            switches.first().map_or(0, |s| s.line),
            "expected at least one switch with `Nodes=` below it; every switch is in a `Switches=` cycle".to_string(),
        ));
    }
    hypernodes.sort_by(|a, b| a.tier.cmp(&b.tier).then_with(|| a.name.cmp(&b.name)));
    Ok(SlurmImport { hypernodes, warnings })
}

/// Leaves out switches left without members once a cycle is broken (a HyperNode needs at
/// least one member, so they could not be written and read back), and the references to
/// them, until none is left empty; each with a warning.
fn drop_memberless(hypernodes: &mut Vec<HyperNodeSpec>, warnings: &mut Vec<String>, path: &Path) {
    loop {
        let empty: BTreeSet<String> = hypernodes
            .iter()
            .filter(|h| h.members.is_empty())
            .map(|h| h.name.clone())
            .collect();
        if empty.is_empty() {
            return;
        }
        hypernodes.retain(|h| !empty.contains(&h.name));
        for h in hypernodes.iter_mut() {
            h.members.retain(|m| {
                !(m.kind == MemberType::HyperNode
                    && matches!(&m.selector, Selector::Exact { name } if empty.contains(name)))
            });
        }
        for name in empty {
            warnings.push(format!(
                "{}: switch {name} has no members once the cycle is broken; it is left out",
                path.display()
            ));
        }
    }
}

/// Lines with comments stripped and `\` continuations joined, numbered by where they start;
/// blank ones dropped.
fn logical_lines(text: &str) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(u64, String)> = None;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim_end();
        let (start, mut acc) = pending.take().unwrap_or((n as u64 + 1, String::new()));
        if let Some(cont) = line.strip_suffix('\\') {
            acc.push_str(cont);
            acc.push(' ');
            pending = Some((start, acc));
            continue;
        }
        acc.push_str(line);
        if !acc.trim().is_empty() {
            out.push((start, acc.trim().to_string()));
        }
    }
    if let Some((start, acc)) = pending
        && !acc.trim().is_empty()
    {
        out.push((start, acc.trim().to_string()));
    }
    out
}

/// Writes HyperNodes as a `topology.conf`: lower tiers first, then by name, child names
/// and nodes compressed to hostlists. Only exact-name members can be written; a HyperNode
/// without members is left out with a comment (Slurm rejects an empty switch).
pub fn to_topology_conf(hypernodes: &[HyperNodeSpec]) -> Result<String, FabricError> {
    let mut sorted: Vec<&HyperNodeSpec> = hypernodes.iter().collect();
    sorted.sort_by(|a, b| a.tier.cmp(&b.tier).then_with(|| a.name.cmp(&b.name)));
    let mut out = String::from("# topology.conf written by `hyperplan topology export` (topology/tree)\n");
    for h in sorted {
        if h.name.is_empty() || h.name.chars().any(|c| c.is_whitespace() || c == '#' || c == '=') {
            return Err(FabricError::Export(format!(
                "HyperNode name {:?} cannot be a Slurm switch name (no spaces, `#` or `=`)",
                h.name
            )));
        }
        let mut switches: Vec<&str> = Vec::new();
        let mut nodes: Vec<&str> = Vec::new();
        for m in &h.members {
            let Selector::Exact { name } = &m.selector else {
                return Err(FabricError::Export(format!(
                    "HyperNode {} has a regex or label member; topology.conf can only list exact names",
                    h.name
                )));
            };
            match m.kind {
                MemberType::HyperNode => switches.push(name),
                MemberType::Node => nodes.push(name),
            }
        }
        if switches.is_empty() && nodes.is_empty() {
            out.push_str(&format!("# {}: no members, left out\n", h.name));
            continue;
        }
        nodes.sort_by_key(|n| natural_key(n));
        switches.sort_by_key(|n| natural_key(n));
        out.push_str(&format!("SwitchName={}", h.name));
        if !switches.is_empty() {
            out.push_str(&format!(" Switches={}", compress(&switches)));
        }
        if !nodes.is_empty() {
            out.push_str(&format!(" Nodes={}", compress(&nodes)));
        }
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn import(text: &str) -> Result<SlurmImport, FabricError> {
        parse_topology_conf(text, Path::new("topology.conf"))
    }

    const CONF: &str = "\
# two leaves under one spine
SwitchName=s1 Switches=l[1-2] LinkSpeed=100
switchname=l1 nodes=gpu[001-016,020]
SwitchName=l2 \\
  Nodes=gpu[017-019]
";

    #[test]
    fn imports_tiers_and_members() {
        let imp = import(CONF).unwrap();
        assert!(imp.warnings.is_empty(), "{:?}", imp.warnings);
        let names: Vec<(&str, u32)> = imp.hypernodes.iter().map(|h| (h.name.as_str(), h.tier)).collect();
        assert_eq!(names, [("l1", 1), ("l2", 1), ("s1", 2)]);
        assert_eq!(imp.hypernodes[0].members.len(), 17);
        assert_eq!(imp.hypernodes[2].tier_name.as_deref(), Some("spine"));
    }

    #[test]
    fn export_then_import_is_identity() {
        let first = import(CONF).unwrap().hypernodes;
        let text = to_topology_conf(&first).unwrap();
        assert!(text.contains("SwitchName=l1 Nodes=gpu[001-016,020]"), "{text}");
        let second = import(&text).unwrap().hypernodes;
        assert_eq!(first, second);
    }

    #[test]
    fn errors_name_the_line() {
        let e = import("SwitchName=a Nodes=n1\nSwitchName=a Nodes=n2\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "topology.conf:2: switch a is defined twice (first at line 1)"
        );
        let e = import("SwitchName=a Switches=b\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("topology.conf:1: switch a lists child switch \"b\"")
        );
        let e = import("\nSwitchName=a Nodes=n[1-\n").unwrap_err();
        assert!(e.to_string().starts_with("topology.conf:2: nodes:"), "{e}");
        let e = import("BlockName=b1 Nodes=n1\n").unwrap_err();
        assert!(e.to_string().contains("not supported"), "{e}");
        let e = import("SwitchName=a Foo=1\n").unwrap_err();
        assert!(e.to_string().contains("unknown key \"Foo=1\""), "{e}");
        let e = import("SwitchName=a\n").unwrap_err();
        assert!(e.to_string().contains("neither"), "{e}");
    }

    #[test]
    fn cycles_are_broken_with_a_warning() {
        let imp = import("SwitchName=a Switches=b,l\nSwitchName=b Switches=a\nSwitchName=l Nodes=n1\n").unwrap();
        assert_eq!(imp.warnings.len(), 2, "{:?}", imp.warnings);
        assert!(imp.warnings[0].contains("a cycle"));
        // b is left with nothing once its reference to a is dropped, so it is left out.
        assert!(
            imp.warnings[1].contains("switch b has no members"),
            "{:?}",
            imp.warnings
        );
        let tiers: Vec<(&str, u32)> = imp.hypernodes.iter().map(|h| (h.name.as_str(), h.tier)).collect();
        assert_eq!(tiers, [("l", 1), ("a", 2)]);
        assert_eq!(imp.hypernodes[1].members.len(), 1);
    }

    /// Issue 12 item 10: what import writes reads back, a cycle included (`b` below
    /// has only the reference that closes the cycle; it used to come out `members:` null).
    #[test]
    fn import_round_trips_through_manifests() {
        for conf in [
            CONF,
            "SwitchName=a Switches=b,l\nSwitchName=b Switches=a\nSwitchName=l Nodes=n1\n",
            "SwitchName=a Switches=b\nSwitchName=b Switches=a\nSwitchName=l Nodes=n1\n",
        ] {
            let imp = import(conf).unwrap();
            let text = hyperplan_shared::hypernode::to_hypernode_manifests(&imp.hypernodes);
            let back = hyperplan_shared::hypernode::parse_hypernode_manifests(&text, Path::new("out.yaml"))
                .unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(back, imp.hypernodes, "{conf}");
        }
    }

    #[test]
    fn a_cycle_with_nothing_else_is_an_error() {
        let e = import("SwitchName=a Switches=b\nSwitchName=b Switches=a\n").unwrap_err();
        assert!(e.to_string().starts_with("topology.conf:"), "{e}");
    }

    /// Issue 12 item 10: an empty topology.conf is an error naming the file, not nothing.
    #[test]
    fn empty_input_is_an_error() {
        for text in ["", "\n# only a comment\n  \n"] {
            let e = import(text).unwrap_err();
            assert_eq!(
                e.to_string(),
                "topology.conf:0: expected `SwitchName=` lines (Slurm topology/tree), the file has none"
            );
        }
    }

    /// Issue 12 item 8: names from a discovery source follow the name rule too.
    #[test]
    fn bad_names_are_errors_naming_the_line() {
        let e = import("SwitchName=l1 Nodes=n1\nSwitchName=s\u{1b}[2J Switches=l1\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("topology.conf:2: SwitchName: expected a HyperNode name of 1-253"),
            "{e}"
        );
        assert!(!e.to_string().contains('\u{1b}'), "{e}");
        let e = import("SwitchName=l1 Nodes=../etc/passwd\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("topology.conf:1: Nodes: expected a node name"),
            "{e}"
        );
    }

    #[test]
    fn regex_members_cannot_be_exported() {
        let h = HyperNodeSpec {
            name: "x".into(),
            tier: 1,
            tier_name: None,
            members: vec![Member {
                kind: MemberType::Node,
                selector: Selector::Regex {
                    pattern: "gpu.*".into(),
                },
            }],
        };
        assert!(to_topology_conf(&[h]).is_err());
    }
}
