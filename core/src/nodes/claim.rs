//! Which agent link owns a node. Two agents that present the same node name (a cloned
//! machine, a certificate copied to a second host) must not take the node from each other
//! on every reconnect: the first link keeps it while it is heard from, and a second one is
//! refused. A link that has gone silent (longer than `heartbeatInterval ×
//! missedHeartbeats`, the same rule that turns the node NotReady) no longer holds the
//! node: a restarted agent replaces the half-dead connection of its previous run.
//!
//! The daemon asks [`Planner::claim_node`] when an agent registers and carries out the
//! answer (refuse the newcomer, or close the silent link it replaces).

use crate::Planner;
use crate::config::PlannerConfig;
use crate::model::events::Event;
use crate::model::health::Heartbeats;
use crate::model::tick::Inbox;
use crate::names::NodeNames;

/// The node may be taken by the link that asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// No link holds it.
    Free,
    /// Link `link` held it but has been silent too long: close it.
    Replaces {
        /// The silent link, for the daemon to close.
        link: u64,
    },
}

/// Why a link may not take a node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeTaken {
    /// Another link holds the node and was heard from within the heartbeat allowance.
    #[error(
        "node {node:?} is already connected (another agent with this node name, heard from {heard_ms} ms ago); \
         a second agent with the same node name is refused while the first is connected"
    )]
    Connected {
        /// The node's name.
        node: String,
        /// The link that holds it.
        link: u64,
        /// How long ago that link was last heard from, in ms.
        heard_ms: u64,
    },
}

/// A node's link as the core will know it after the queued events: (link, last heard,
/// linked).
fn current_link(p: &Planner, node: &str) -> Option<(u64, u64, bool)> {
    let world = p.world();
    let mut link = world
        .resource::<NodeNames>()
        .0
        .get(node)
        .and_then(|&e| world.get::<Heartbeats>(e))
        .map(|h| (h.link, h.last_ms, h.linked));
    for event in &world.resource::<Inbox>().0 {
        match event {
            Event::LinkUp {
                node: n,
                link: l,
                at_ms,
            } if n == node => link = Some((*l, *at_ms, true)),
            Event::Heartbeat { node: n, at_ms } if n == node => {
                if let Some((_, last, true)) = &mut link {
                    *last = (*last).max(*at_ms);
                }
            }
            Event::LinkDown {
                node: n,
                link: l,
                at_ms,
            } if n == node => {
                if let Some((current, last, linked)) = &mut link
                    && current == l
                {
                    *linked = false;
                    *last = (*last).max(*at_ms);
                }
            }
            _ => {}
        }
    }
    link
}

impl Planner {
    /// Whether agent link `link` may take node `node` at `now_ms` (the driver's clock, as
    /// in [`Event::LinkUp`]): refused while another link holds it and was heard from
    /// within the heartbeat allowance.
    pub fn claim_node(&self, node: &str, link: u64, now_ms: u64) -> Result<Claim, NodeTaken> {
        let allowance = self.world().resource::<PlannerConfig>().health.silent_after();
        let allowance = u64::try_from(allowance.as_millis()).unwrap_or(u64::MAX);
        match current_link(self, node) {
            Some((held, last, true)) if held != link => {
                let heard_ms = now_ms.saturating_sub(last);
                if heard_ms <= allowance {
                    Err(NodeTaken::Connected {
                        node: node.to_string(),
                        link: held,
                        heard_ms,
                    })
                } else {
                    Ok(Claim::Replaces { link: held })
                }
            }
            _ => Ok(Claim::Free),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::testing::ClusterBuilder;

    /// One node, heartbeats every second, NotReady after 3 missed (the defaults).
    fn planner() -> (Planner, String) {
        let mut p = Planner::new(PlannerConfig::default());
        let spec = ClusterBuilder::flat(1).build().nodes.remove(0);
        let name = spec.name.clone();
        p.push(Event::NodeUp(spec));
        (p, name)
    }

    #[test]
    fn a_second_link_is_refused_while_the_first_is_heard_then_replaces_a_silent_one() {
        let (mut p, n) = planner();
        assert_eq!(p.claim_node(&n, 1, 10_000), Ok(Claim::Free));
        p.push(Event::LinkUp {
            node: n.clone(),
            link: 1,
            at_ms: 10_000,
        });
        // Queued, not yet ticked: taken all the same.
        let err = p.claim_node(&n, 2, 10_100).unwrap_err();
        assert_eq!(
            err,
            NodeTaken::Connected {
                node: n.clone(),
                link: 1,
                heard_ms: 100
            }
        );
        assert!(err.to_string().contains("is already connected"), "{err}");
        p.tick_millis(10_100);
        p.push(Event::Heartbeat {
            node: n.clone(),
            at_ms: 12_000,
        });
        p.tick_millis(12_000);
        assert!(p.claim_node(&n, 2, 14_900).is_err(), "heard 2.9 s ago");
        // The same link asking again is no clash.
        assert_eq!(p.claim_node(&n, 1, 14_900), Ok(Claim::Free));
        // Silent for more than 3 s: a new link replaces it.
        assert_eq!(p.claim_node(&n, 2, 15_100), Ok(Claim::Replaces { link: 1 }));
    }

    #[test]
    fn a_closed_link_leaves_the_node_free_and_an_old_links_close_changes_nothing() {
        let (mut p, n) = planner();
        p.push(Event::LinkUp {
            node: n.clone(),
            link: 1,
            at_ms: 0,
        });
        p.push(Event::LinkDown {
            node: n.clone(),
            link: 1,
            at_ms: 10,
        });
        assert_eq!(p.claim_node(&n, 2, 20), Ok(Claim::Free));
        p.push(Event::LinkUp {
            node: n.clone(),
            link: 2,
            at_ms: 20,
        });
        p.tick_millis(20);
        // Link 1's close arriving late does not free link 2's node.
        p.push(Event::LinkDown {
            node: n.clone(),
            link: 1,
            at_ms: 30,
        });
        p.tick_millis(30);
        assert!(p.claim_node(&n, 3, 40).is_err());
    }
}
