//! HyperNodes as a Graphviz tree (`dot -Tsvg`): HyperNodes are boxes labelled with their
//! tier, nodes are ellipses, edges go from parent to member.

use std::fmt::Write as _;

use hyperplan_shared::{HyperNodeSpec, MemberType, Selector};

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The DOT text for these HyperNodes (in their order; members in theirs).
pub fn to_dot(hypernodes: &[HyperNodeSpec]) -> String {
    let mut out = String::from("digraph hypernodes {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n");
    for h in hypernodes {
        let tier = match &h.tier_name {
            Some(t) => format!("tier {} ({t})", h.tier),
            None => format!("tier {}", h.tier),
        };
        let _ = writeln!(
            out,
            "  {} [shape=box, style=filled, fillcolor=\"#dbe8f6\", label={}];",
            quote(&format!("hn:{}", h.name)),
            quote(&format!("{}\\n{tier}", h.name)).replace("\\\\n", "\\n")
        );
    }
    for h in hypernodes {
        let from = quote(&format!("hn:{}", h.name));
        for m in &h.members {
            let to = match (&m.kind, &m.selector) {
                (MemberType::HyperNode, Selector::Exact { name }) => quote(&format!("hn:{name}")),
                (MemberType::Node, Selector::Exact { name }) => {
                    let id = quote(&format!("node:{name}"));
                    let _ = writeln!(out, "  {id} [shape=ellipse, label={}];", quote(name));
                    id
                }
                (_, Selector::Regex { pattern }) => {
                    let id = quote(&format!("regex:{}:{pattern}", h.name));
                    let _ = writeln!(
                        out,
                        "  {id} [shape=note, label={}];",
                        quote(&format!("regex {pattern}"))
                    );
                    id
                }
                (_, Selector::Label { .. }) => {
                    let id = quote(&format!("labels:{}", h.name));
                    let _ = writeln!(out, "  {id} [shape=note, label=\"label selector\"];");
                    id
                }
            };
            let _ = writeln!(out, "  {from} -> {to};");
        }
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use hyperplan_shared::Member;

    use super::*;

    #[test]
    fn tree_with_quoted_names() {
        let exact = |kind, name: &str| Member {
            kind,
            selector: Selector::Exact { name: name.into() },
        };
        let hns = vec![
            HyperNodeSpec {
                name: "leaf-a".into(),
                tier: 1,
                tier_name: Some("leaf".into()),
                members: vec![exact(MemberType::Node, "gpu\"1")],
            },
            HyperNodeSpec {
                name: "spine-a".into(),
                tier: 2,
                tier_name: Some("spine".into()),
                members: vec![exact(MemberType::HyperNode, "leaf-a")],
            },
        ];
        let dot = to_dot(&hns);
        assert!(
            dot.contains(
                "\"hn:leaf-a\" [shape=box, style=filled, fillcolor=\"#dbe8f6\", label=\"leaf-a\\ntier 1 (leaf)\"];"
            ),
            "{dot}"
        );
        assert!(
            dot.contains("\"node:gpu\\\"1\" [shape=ellipse, label=\"gpu\\\"1\"];"),
            "{dot}"
        );
        assert!(dot.contains("\"hn:spine-a\" -> \"hn:leaf-a\";"), "{dot}");
        assert!(dot.ends_with("}\n"));
    }
}
