//! Nodes whose agent this planner turned away for a reason the agent cannot fix by
//! retrying (today: the agent has obeyed a newer planner epoch than this planner's, so
//! it would refuse this planner's orders). The daemon reports each refusal
//! ([`Event::NodeRefused`]); the core keeps the newest reason per node until the node's
//! agent registers ([`Event::LinkUp`]), so `hyperplan nodes` says why the node is
//! NotReady (or lists a node this planner has not met yet), and the daemon logs a
//! refusal once per change of reason, not on every retry.
//!
//! A refused node never gets a `LinkUp`: it stays NotReady, gets no new tasks, and the
//! tasks it held are declared lost after `nodeLostAfter` as any silent node's are.
//!
//! [`Event::NodeRefused`]: crate::Event::NodeRefused
//! [`Event::LinkUp`]: crate::Event::LinkUp

use std::collections::BTreeMap;

use bevy_ecs::prelude::*;

/// At most this many nodes' refusals are kept (the oldest goes first): names come from
/// certificates, so the count is bounded anyway; this bounds a bad CA.
pub const MAX_REFUSALS: usize = 65_536;

/// Why a node's agent was turned away, and since when (the driver's clock, ms).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// What the daemon said, as people see it in `hyperplan nodes`.
    pub reason: String,
    /// When this reason was first given (the driver's clock, ms); a repeat keeps it.
    pub since_ms: u64,
}

/// The refused nodes, by name.
#[derive(Resource, Debug, Default)]
pub struct Refusals(pub BTreeMap<String, Refusal>);

impl Refusals {
    /// Records a refusal at `at_ms`; true when its reason is new for this node (the
    /// driver's cue to log it).
    pub fn refuse(&mut self, node: &str, reason: &str, at_ms: u64) -> bool {
        if let Some(old) = self.0.get(node)
            && old.reason == reason
        {
            return false;
        }
        if self.0.len() >= MAX_REFUSALS && !self.0.contains_key(node) {
            let oldest = self
                .0
                .iter()
                .min_by_key(|(name, r)| (r.since_ms, (*name).clone()))
                .map(|(name, _)| name.clone());
            if let Some(oldest) = oldest {
                self.0.remove(&oldest);
            }
        }
        self.0.insert(
            node.to_string(),
            Refusal {
                reason: reason.to_string(),
                since_ms: at_ms,
            },
        );
        true
    }

    /// The node's agent registered: nothing refused any more.
    pub fn clear(&mut self, node: &str) {
        self.0.remove(node);
    }

    /// The node's refusal; None: its agent was not turned away since it last registered.
    pub fn get(&self, node: &str) -> Option<&Refusal> {
        self.0.get(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_new_once_per_change_and_gone_at_registration() {
        let mut r = Refusals::default();
        assert!(r.refuse("n1", "epoch 7 > 3", 10));
        assert!(!r.refuse("n1", "epoch 7 > 3", 20), "the same reason again is not news");
        assert_eq!(r.get("n1").map(|x| x.since_ms), Some(10), "since its first refusal");
        assert!(r.refuse("n1", "epoch 8 > 3", 30), "a changed reason is");
        r.clear("n1");
        assert!(r.get("n1").is_none());
        assert!(
            r.refuse("n1", "epoch 8 > 3", 40),
            "after a registration it is news again"
        );
    }

    #[test]
    fn a_refused_node_is_listed_with_its_reason_until_its_agent_registers() {
        use crate::testing::ClusterBuilder;
        use crate::{Command, Event, Planner, config::PlannerConfig, view};
        let mut p = Planner::new(PlannerConfig::default());
        let spec = ClusterBuilder::flat(1).build().nodes.remove(0);
        let known = spec.name.clone();
        p.push(Event::NodeUp(spec));
        p.push(Event::LinkUp {
            node: known.clone(),
            link: 1,
            at_ms: 0,
        });
        p.tick_millis(0);
        p.push(Event::LinkDown {
            node: known.clone(),
            link: 1,
            at_ms: 10,
        });
        for node in [&known, &"stranger".to_string()] {
            p.push(Event::NodeRefused {
                node: node.clone(),
                reason: "epoch 7 > 3".into(),
                at_ms: 20,
            });
        }
        let said = p.tick_millis(20);
        let warns = said
            .iter()
            .filter(|c| matches!(c, Command::Warn(w) if w.contains("epoch 7 > 3")))
            .count();
        assert_eq!(warns, 2, "each node's refusal said once: {said:?}");
        p.push(Event::NodeRefused {
            node: known.clone(),
            reason: "epoch 7 > 3".into(),
            at_ms: 30,
        });
        assert!(
            !p.tick_millis(30).iter().any(|c| matches!(c, Command::Warn(_))),
            "not again"
        );
        let listed = view::node_statuses(p.world());
        let reasons: Vec<(&str, Option<&str>)> =
            listed.iter().map(|n| (n.name.as_str(), n.reason.as_deref())).collect();
        assert_eq!(
            reasons,
            [
                (known.as_str(), Some("refused: epoch 7 > 3")),
                ("stranger", Some("refused: epoch 7 > 3"))
            ]
        );
        p.push(Event::LinkUp {
            node: known.clone(),
            link: 2,
            at_ms: 40,
        });
        p.tick_millis(40);
        let listed = view::node_statuses(p.world());
        assert!(
            listed.iter().all(|n| n.name == "stranger" || n.reason.is_none()),
            "{listed:?}"
        );
    }

    #[test]
    fn the_oldest_refusal_makes_room() {
        let mut r = Refusals::default();
        for i in 0..MAX_REFUSALS {
            r.refuse(&format!("n{i}"), "x", i as u64);
        }
        assert!(r.refuse("new", "x", u64::MAX));
        assert_eq!(r.0.len(), MAX_REFUSALS);
        assert!(r.get("n0").is_none() && r.get("n1").is_some() && r.get("new").is_some());
    }
}
