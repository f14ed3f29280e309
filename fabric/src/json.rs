//! HyperNodes and discovery results as JSON, in Volcano's field names (`tierName`,
//! `members[].type`, `selector.exactMatch.name`), for scripts and `--output json`.

use hyperplan_shared::{HyperNodeSpec, MemberType, Selector};
use serde_json::{Map, Value, json};

use crate::tiers::Discovery;

/// One HyperNode: `{"name", "tier", "tierName", "members": [{"type", "selector"}]}`.
pub fn hypernode_json(h: &HyperNodeSpec) -> Value {
    let members: Vec<Value> = h
        .members
        .iter()
        .map(|m| {
            let kind = match m.kind {
                MemberType::Node => "Node",
                MemberType::HyperNode => "HyperNode",
            };
            let selector = match &m.selector {
                Selector::Exact { name } => json!({ "exactMatch": { "name": name } }),
                Selector::Regex { pattern } => json!({ "regexMatch": { "pattern": pattern } }),
                Selector::Label {
                    match_labels,
                    match_expressions,
                } => {
                    let exprs: Vec<Value> = match_expressions
                        .iter()
                        .map(|e| json!({ "key": e.key, "operator": e.operator, "values": e.values }))
                        .collect();
                    json!({ "labelMatch": { "matchLabels": match_labels, "matchExpressions": exprs } })
                }
            };
            json!({ "type": kind, "selector": selector })
        })
        .collect();
    let mut obj = Map::new();
    obj.insert("name".into(), json!(h.name));
    obj.insert("tier".into(), json!(h.tier));
    if let Some(t) = &h.tier_name {
        obj.insert("tierName".into(), json!(t));
    }
    obj.insert("members".into(), Value::Array(members));
    Value::Object(obj)
}

/// `{"hypernodes": [...], "switches", "hosts", "unmapped", "excluded", "warnings"}`.
pub fn discovery_json(d: &Discovery) -> Value {
    let mut v = serde_json::to_value(d).unwrap_or_else(|_| json!({}));
    if let Value::Object(obj) = &mut v {
        let hns: Vec<Value> = d.hypernodes.iter().map(hypernode_json).collect();
        obj.insert("hypernodes".into(), Value::Array(hns));
    }
    v
}

/// `{"hypernodes": [...], "warnings": [...]}` for HyperNodes from other sources.
pub fn hypernodes_json(hypernodes: &[HyperNodeSpec], warnings: &[String]) -> Value {
    json!({
        "hypernodes": hypernodes.iter().map(hypernode_json).collect::<Vec<_>>(),
        "warnings": warnings,
    })
}
