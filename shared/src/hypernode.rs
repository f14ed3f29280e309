//! HyperNodes as users write them: Volcano's `topology.volcano.sh/v1alpha1` HyperNode
//! manifest (accepted unchanged) and the inline `hyperNodes:` form of the cluster file.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Deserialize;

use crate::error::FileError;
use crate::job::check_located_name;
use crate::names::NameKind;
use crate::yaml::{self, Located, Node, file_error, located_error};

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
    Exact {
        name: String,
    },
    /// Unanchored (substring) match against node names, like Go's `regexp.MatchString`.
    Regex {
        pattern: String,
    },
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
            Selector::Label {
                match_labels,
                match_expressions,
            } => {
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

/// The only HyperNode `apiVersion` there is.
pub const HYPERNODE_API_VERSION: &str = "topology.volcano.sh/v1alpha1";

/// `members[].type`.
#[derive(Deserialize)]
enum RawMemberType {
    Node,
    HyperNode,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMember {
    #[serde(rename = "type")]
    kind: RawMemberType,
    selector: Located<RawSelector>,
}

/// All three kinds are optional here so "exactly one" can be checked with a message
/// that says which ones were given.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSelector {
    exact_match: Option<Located<RawExact>>,
    regex_match: Option<Located<RawRegex>>,
    label_match: Option<Located<RawLabelMatch>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExact {
    name: Located<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRegex {
    pattern: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawLabelMatch {
    #[serde(default)]
    match_labels: BTreeMap<String, String>,
    #[serde(default)]
    match_expressions: Vec<RawExpression>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpression {
    key: String,
    operator: Located<String>,
    #[serde(default)]
    values: Vec<String>,
}

/// The inline `hyperNodes:` entry of a cluster file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RawInlineHyperNode {
    name: Located<String>,
    tier: u32,
    tier_name: Option<String>,
    members: Located<Vec<Located<RawMember>>>,
}

/// A HyperNode manifest; Kubernetes fields hyperplan has no use for are ignored.
#[derive(Deserialize)]
struct RawManifest {
    metadata: RawMetadata,
    spec: RawManifestSpec,
}

#[derive(Deserialize)]
struct RawMetadata {
    name: Located<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawManifestSpec {
    tier: u32,
    tier_name: Option<String>,
    members: Located<Vec<Located<RawMember>>>,
}

/// A parsed HyperNode with where its name was written, for duplicate checks that
/// span several files.
pub(crate) struct LocatedHyperNode {
    pub spec: HyperNodeSpec,
    pub path: std::path::PathBuf,
    pub name: Located<String>,
}

impl RawInlineHyperNode {
    pub(crate) fn build(self, path: &Path) -> Result<LocatedHyperNode, FileError> {
        build(self.name, self.tier, self.tier_name, self.members, path)
    }
}

fn build(
    name: Located<String>,
    tier: u32,
    tier_name: Option<String>,
    members: Located<Vec<Located<RawMember>>>,
    path: &Path,
) -> Result<LocatedHyperNode, FileError> {
    check_located_name(NameKind::HyperNode, &name, path)?;
    if members.value.is_empty() {
        return Err(located_error(path, &members, "expected at least one member"));
    }
    let mut out = Vec::with_capacity(members.value.len());
    for m in members.value {
        out.push(build_member(m.value, path)?);
    }
    Ok(LocatedHyperNode {
        spec: HyperNodeSpec {
            name: name.value.clone(),
            tier,
            tier_name: tier_name.filter(|t| !t.is_empty()),
            members: out,
        },
        path: path.to_path_buf(),
        name,
    })
}

fn build_member(raw: RawMember, path: &Path) -> Result<Member, FileError> {
    let kind = match raw.kind {
        RawMemberType::Node => MemberType::Node,
        RawMemberType::HyperNode => MemberType::HyperNode,
    };
    let sel = raw.selector;
    let given: Vec<&str> = [
        sel.value.exact_match.as_ref().map(|_| "exactMatch"),
        sel.value.regex_match.as_ref().map(|_| "regexMatch"),
        sel.value.label_match.as_ref().map(|_| "labelMatch"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if given.len() != 1 {
        let got = if given.is_empty() {
            "none".to_string()
        } else {
            given.join(" and ")
        };
        return Err(located_error(
            path,
            &sel,
            format!("expected exactly one of exactMatch, regexMatch or labelMatch, got {got}"),
        ));
    }
    let selector = if let Some(exact) = sel.value.exact_match {
        let name = exact.value.name;
        let member_kind = match kind {
            MemberType::Node => NameKind::Node,
            MemberType::HyperNode => NameKind::HyperNode,
        };
        check_located_name(member_kind, &name, path)?;
        Selector::Exact { name: name.value }
    } else if let Some(regex) = sel.value.regex_match {
        Selector::Regex {
            pattern: regex.value.pattern,
        }
    } else if let Some(label) = sel.value.label_match {
        let mut match_expressions = Vec::new();
        for e in label.value.match_expressions {
            if !matches!(e.operator.value.as_str(), "In" | "NotIn" | "Exists" | "DoesNotExist") {
                return Err(located_error(
                    path,
                    &e.operator,
                    format!("expected In, NotIn, Exists or DoesNotExist, got {:?}", e.operator.value),
                ));
            }
            match_expressions.push(LabelExpression {
                key: e.key,
                operator: e.operator.value,
                values: e.values,
            });
        }
        Selector::Label {
            match_labels: label.value.match_labels,
            match_expressions,
        }
    } else {
        return Err(located_error(path, &sel, "expected a selector"));
    };
    Ok(Member { kind, selector })
}

/// Checks that a document is `apiVersion: <api_version>`, `kind: <kind>`.
/// `base` is the document's own field path ("" for a document root).
pub(crate) fn check_kind(doc: &Node, base: &str, api_version: &str, kind: &str, path: &Path) -> Result<(), FileError> {
    if !matches!(doc.value, yaml::Value::Map(_)) {
        return Err(file_error(
            path,
            doc.pos,
            base,
            format!("expected a {kind} manifest (a mapping)"),
        ));
    }
    for (key, want) in [("apiVersion", api_version), ("kind", kind)] {
        let field = yaml::join_key(base, key);
        let field = field.as_str();
        match doc.get(key) {
            None => {
                return Err(file_error(
                    path,
                    doc.pos,
                    field,
                    format!("missing field `{key}` (expected {want})"),
                ));
            }
            Some(node) if node.scalar_text() != Some(want) => {
                let got = node
                    .scalar_text()
                    .map_or_else(|| "not a string".to_string(), |s| format!("{s:?}"));
                return Err(file_error(path, node.pos, field, format!("expected {want}, got {got}")));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

pub(crate) fn parse_manifests_located(text: &str, path: &Path) -> Result<Vec<LocatedHyperNode>, FileError> {
    let mut out = Vec::new();
    for doc in yaml::parse_documents(text, path)? {
        check_kind(&doc, "", HYPERNODE_API_VERSION, "HyperNode", path)?;
        let raw: RawManifest = yaml::from_node(&doc, "", path)?;
        out.push(build(
            raw.metadata.name,
            raw.spec.tier,
            raw.spec.tier_name,
            raw.spec.members,
            path,
        )?);
    }
    Ok(out)
}

/// Rejects a HyperNode name used twice, pointing at the second and naming the first.
pub(crate) fn check_unique(hyper_nodes: &[LocatedHyperNode]) -> Result<(), FileError> {
    let mut seen: HashMap<&str, &LocatedHyperNode> = HashMap::new();
    for h in hyper_nodes {
        if let Some(first) = seen.insert(h.spec.name.as_str(), h) {
            let at = if first.path == h.path {
                format!("line {}", first.name.pos.line)
            } else {
                format!("{}:{}", first.path.display(), first.name.pos.line)
            };
            return Err(located_error(
                &h.path,
                &h.name,
                format!("duplicate HyperNode name {:?} (first defined at {at})", h.spec.name),
            ));
        }
    }
    Ok(())
}

/// Reads a file of Volcano HyperNode manifests (one or more YAML documents; empty
/// documents are skipped). Names must be unique within the file.
pub fn parse_hypernode_manifests(text: &str, path: &Path) -> Result<Vec<HyperNodeSpec>, FileError> {
    let located = parse_manifests_located(text, path)?;
    check_unique(&located)?;
    Ok(located.into_iter().map(|h| h.spec).collect())
}

/// One member in YAML flow style, e.g. `{type: Node, selector: {exactMatch: {name: n1}}}`.
pub(crate) fn member_yaml(m: &Member) -> String {
    let kind = match m.kind {
        MemberType::Node => "Node",
        MemberType::HyperNode => "HyperNode",
    };
    let selector = match &m.selector {
        Selector::Exact { name } => format!("exactMatch: {{name: {}}}", yaml::scalar(name)),
        Selector::Regex { pattern } => {
            format!("regexMatch: {{pattern: {}}}", yaml::scalar(pattern))
        }
        Selector::Label {
            match_labels,
            match_expressions,
        } => {
            let labels: Vec<String> = match_labels
                .iter()
                .map(|(k, v)| format!("{}: {}", yaml::scalar(k), yaml::scalar(v)))
                .collect();
            let exprs: Vec<String> = match_expressions
                .iter()
                .map(|e| {
                    let values: Vec<String> = e.values.iter().map(|v| yaml::scalar(v)).collect();
                    format!(
                        "{{key: {}, operator: {}, values: [{}]}}",
                        yaml::scalar(&e.key),
                        yaml::scalar(&e.operator),
                        values.join(", ")
                    )
                })
                .collect();
            format!(
                "labelMatch: {{matchLabels: {{{}}}, matchExpressions: [{}]}}",
                labels.join(", "),
                exprs.join(", ")
            )
        }
    };
    format!("{{type: {kind}, selector: {{{selector}}}}}")
}

/// Reads several manifest files (path, text) as one set, in order: names must be unique
/// across the files too. A name given twice is an error naming both files.
pub fn parse_hypernode_files<'a>(
    files: impl IntoIterator<Item = (&'a Path, &'a str)>,
) -> Result<Vec<HyperNodeSpec>, FileError> {
    let mut all = Vec::new();
    let mut first_in: HashMap<String, &Path> = HashMap::new();
    for (path, text) in files {
        for h in parse_hypernode_manifests(text, path)? {
            if let Some(other) = first_in.insert(h.name.clone(), path) {
                let (line, column) = name_position(text, &h.name);
                return Err(FileError {
                    path: path.to_path_buf(),
                    line,
                    column,
                    field: "metadata.name".into(),
                    message: format!(
                        "HyperNode {:?} is also defined in {}; names must be unique",
                        h.name,
                        other.display()
                    ),
                });
            }
            all.push(h);
        }
    }
    Ok(all)
}

/// Line and column (1-based) of the last `name: NAME` line in `text`, (0, 0) when none:
/// specs do not keep their positions, and the duplicate is the later definition.
fn name_position(text: &str, name: &str) -> (u64, u64) {
    text.lines()
        .enumerate()
        .filter_map(|(i, l)| {
            let at = l.find("name:")?;
            let value = l[at + 5..].trim().trim_matches(|c| c == '"' || c == '\'');
            (value == name).then(|| (i as u64 + 1, at as u64 + 1))
        })
        .last()
        .unwrap_or((0, 0))
}

/// Writes HyperNodes as a multi-document file of Volcano HyperNode manifests that
/// `kubectl apply -f` and [`parse_hypernode_manifests`] both accept.
pub fn to_hypernode_manifests(specs: &[HyperNodeSpec]) -> String {
    let mut out = String::new();
    for (i, h) in specs.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&format!(
            "apiVersion: {HYPERNODE_API_VERSION}\nkind: HyperNode\nmetadata:\n"
        ));
        out.push_str(&format!(
            "  name: {}\nspec:\n  tier: {}\n",
            yaml::scalar(&h.name),
            h.tier
        ));
        if let Some(t) = &h.tier_name {
            out.push_str(&format!("  tierName: {}\n", yaml::scalar(t)));
        }
        out.push_str("  members:\n");
        for m in &h.members {
            out.push_str(&format!("    - {}\n", member_yaml(m)));
        }
    }
    out
}
