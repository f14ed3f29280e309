//! HyperNodes as users write them: Volcano's `topology.volcano.sh/v1alpha1` HyperNode
//! manifest (accepted unchanged) and the inline `hyperNodes:` form of the cluster file.

use std::collections::BTreeMap;

/// One HyperNode spec (Volcano field names). Structural problems (cycles, a second
/// parent, members that match nothing, bad regexes) are not parse errors: the planner
/// leaves such a HyperNode out with a warning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HyperNodeSpec {
    pub name: String,
    pub tier: u32,
    pub tier_name: Option<String>,
    pub members: Vec<Member>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MemberType {
    Node,
    HyperNode,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub kind: MemberType,
    pub selector: Selector,
}

/// Exactly one selector kind per member, as Volcano's CRD demands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selector {
    Exact { name: String },
    /// Unanchored (substring) match against node names, like Go's `regexp.MatchString`.
    Regex { pattern: String },
    Label {
        match_labels: BTreeMap<String, String>,
        match_expressions: Vec<LabelExpression>,
    },
}

/// A Kubernetes label-selector requirement (`In`, `NotIn`, `Exists`, `DoesNotExist`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelExpression {
    pub key: String,
    pub operator: String,
    pub values: Vec<String>,
}

impl Selector {
    /// Does a node with this name and these labels match? Regex selectors are matched by
    /// the planner, which compiles them once; here they never match.
    pub fn matches_labels(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Selector::Label { match_labels, match_expressions } => {
                if match_labels.is_empty() && match_expressions.is_empty() {
                    return false; // Volcano: an empty labelMatch matches nothing.
                }
                match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
                    && match_expressions.iter().all(|e| e.matches(labels))
            }
            _ => false,
        }
    }
}

impl LabelExpression {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator.as_str() {
            "In" => value.is_some_and(|v| self.values.contains(v)),
            "NotIn" => value.is_none_or(|v| !self.values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    }
}
