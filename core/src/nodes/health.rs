//! Node health: which of the daemon's nodes are Ready. The daemon reports what its agent
//! links do ([`Event::LinkUp`], [`Event::Heartbeat`], [`Event::LinkDown`], each with the
//! time it happened); the core decides readiness from them and the tick's time (a node
//! silent for longer than `heartbeatInterval × missedHeartbeats` is NotReady, its next
//! heartbeat makes it Ready) and says so with a [`Command::NodeHealth`] for the log.
//!
//! A node without a link record (every simulator node) is left alone: Ready unless a
//! [`Event::NodeReady`] says otherwise.
//!
//! [`Event::LinkUp`]: crate::Event::LinkUp
//! [`Event::Heartbeat`]: crate::Event::Heartbeat
//! [`Event::LinkDown`]: crate::Event::LinkDown
//! [`Event::NodeReady`]: crate::Event::NodeReady

use bevy_ecs::prelude::*;

use crate::model::health::{Away, Heartbeats};

use crate::config::PlannerConfig;
use crate::model::commands::{Command, HealthChange};
use crate::model::components::{Node, set_node_ready};
use crate::model::tick::{Now, Outbox};
use crate::names::NodeNames;

/// The node's agent registered: Ready, heard now.
pub(crate) fn link_up(world: &mut World, node: &str, link: u64, at_ms: u64) {
    let Some(e) = entity(world, node) else { return };
    world.entity_mut(e).insert(Heartbeats {
        last_ms: at_ms,
        heard_ms: at_ms,
        linked: true,
        link,
        listed_ms: None,
    });
    set_ready(world, e, true, at_ms);
    say(world, node, true, HealthChange::Registered);
}

/// A heartbeat on the node's current link: heard now, and Ready again if it was not.
pub(crate) fn heartbeat(world: &mut World, node: &str, at_ms: u64) {
    let Some(e) = entity(world, node) else { return };
    let Some(mut h) = world.get_mut::<Heartbeats>(e).filter(|h| h.linked) else {
        return;
    };
    h.last_ms = h.last_ms.max(at_ms);
    h.heard_ms = h.heard_ms.max(at_ms);
    if set_ready(world, e, true, at_ms) {
        say(world, node, true, HealthChange::HeartbeatAgain);
    }
}

/// The node's agent link closed: NotReady until it registers again. The close of a
/// link that no longer holds the node changes nothing.
pub(crate) fn link_down(world: &mut World, node: &str, link: u64, at_ms: u64) {
    let Some(e) = entity(world, node) else { return };
    let Some(mut h) = world.get_mut::<Heartbeats>(e).filter(|h| h.link == link) else {
        return;
    };
    h.linked = false;
    h.last_ms = h.last_ms.max(at_ms);
    set_ready(world, e, false, at_ms);
    say(world, node, false, HealthChange::LinkClosed);
}

/// The system: every linked, Ready node silent for longer than the configured heartbeats
/// turns NotReady (in name order, so the commands are deterministic). Nodes NotReady for
/// too long lose their tasks in the next system, `lost`.
pub fn check_silence(world: &mut World) {
    let _span = tracing::info_span!("node_health").entered();
    turn_silent_not_ready(world);
}

fn turn_silent_not_ready(world: &mut World) {
    let now = world.resource::<Now>().ms;
    let health = world.resource::<PlannerConfig>().health;
    let limit = u64::try_from(health.silent_after().as_millis()).unwrap_or(u64::MAX);
    let mut silent: Vec<(std::sync::Arc<str>, Entity, u64)> = world
        .query::<(Entity, &Node, &Heartbeats)>()
        .iter(world)
        .filter(|(_, n, h)| n.ready && h.linked)
        .map(|(e, n, h)| (n.name.clone(), e, now.saturating_sub(h.last_ms)))
        .filter(|&(_, _, quiet)| quiet > limit)
        .collect();
    silent.sort();
    for (name, e, silent_ms) in silent {
        set_ready(world, e, false, now);
        let missed = health.missed_heartbeats;
        say(world, &name, false, HealthChange::Silent { silent_ms, missed });
    }
}

/// Seconds since the node was last heard from, at the last tick; `None` for nodes
/// without a link record.
pub fn heard_secs_ago(world: &World, e: Entity) -> Option<u64> {
    let h = world.get::<Heartbeats>(e)?;
    Some(world.resource::<Now>().ms.saturating_sub(h.last_ms) / 1000)
}

fn entity(world: &World, node: &str) -> Option<Entity> {
    world.resource::<NodeNames>().0.get(node).copied()
}

/// Sets the node's readiness at `at_ms`; `true` when it changed (capacity per HyperNode
/// changes with it: see `invalidate`).
fn set_ready(world: &mut World, e: Entity, ready: bool, at_ms: u64) -> bool {
    let changed = set_node_ready(world, e, ready);
    if changed {
        let mut away = world.resource_mut::<Away>();
        if ready {
            away.0.remove(&e);
        } else {
            away.0.insert(e, at_ms);
        }
    }
    changed
}

fn say(world: &mut World, node: &str, ready: bool, why: HealthChange) {
    world.resource_mut::<Outbox>().0.push(Command::NodeHealth {
        node: node.to_string(),
        ready,
        why,
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use super::*;
    use crate::config::HealthConfig;
    use crate::testing::ClusterBuilder;
    use crate::{Event, Planner};

    /// A daemon-like planner: two nodes registered at t = 10 s, heartbeats every 300 ms,
    /// NotReady after 3 missed.
    fn planner() -> Planner {
        let config = PlannerConfig {
            health: HealthConfig {
                heartbeat_interval: Duration::from_millis(300),
                missed_heartbeats: 3,
                ..HealthConfig::default()
            },
            ..PlannerConfig::default()
        };
        let mut p = Planner::new(config);
        for n in ClusterBuilder::flat(2).build().nodes {
            let name = n.name.clone();
            p.push(Event::NodeUp(n));
            p.push(Event::LinkUp {
                node: name,
                link: 1,
                at_ms: 10_000,
            });
        }
        p
    }

    fn names(p: &Planner) -> Vec<String> {
        let mut v: Vec<String> = p.world().resource::<NodeNames>().0.keys().cloned().collect();
        v.sort();
        v
    }

    fn ready(p: &mut Planner, node: &str) -> bool {
        let e = p.world().resource::<NodeNames>().0[node];
        p.world().get::<Node>(e).unwrap().ready
    }

    fn health(cmds: &[Command]) -> Vec<(String, bool, HealthChange)> {
        cmds.iter()
            .filter_map(|c| match c {
                Command::NodeHealth { node, ready, why } => Some((node.clone(), *ready, *why)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn registered_nodes_are_ready_and_say_so() {
        let mut p = planner();
        let cmds = p.tick_millis(10_000);
        let nodes = names(&p);
        assert_eq!(nodes.len(), 2);
        assert_eq!(
            health(&cmds),
            nodes
                .iter()
                .map(|n| (n.clone(), true, HealthChange::Registered))
                .collect::<Vec<_>>()
        );
        assert!(ready(&mut p, &nodes[0]) && ready(&mut p, &nodes[1]));
    }

    #[test]
    fn silent_for_more_than_the_missed_heartbeats_turns_not_ready_then_a_heartbeat_ready() {
        let mut p = planner();
        p.tick_millis(10_000);
        let nodes = names(&p);
        let (quiet, talker) = (&nodes[0], &nodes[1]);
        // The talker heartbeats every 300 ms; the quiet one never does.
        let mut t = 10_000;
        while t < 10_900 {
            t += 300;
            p.push(Event::Heartbeat {
                node: talker.clone(),
                at_ms: t,
            });
        }
        // 900 ms of silence is exactly 3 intervals: not yet more.
        assert_eq!(health(&p.tick_millis(10_900)), vec![]);
        assert!(ready(&mut p, quiet));
        let cmds = p.tick_millis(10_901);
        assert_eq!(
            health(&cmds),
            vec![(
                quiet.clone(),
                false,
                HealthChange::Silent {
                    silent_ms: 901,
                    missed: 3
                }
            )]
        );
        assert!(!ready(&mut p, quiet));
        assert!(ready(&mut p, talker), "heard 1 ms ago");
        // Said once, not at every tick; by now the talker is silent too.
        assert_eq!(
            health(&p.tick_millis(12_000)),
            vec![(
                talker.clone(),
                false,
                HealthChange::Silent {
                    silent_ms: 1_100,
                    missed: 3
                }
            )]
        );
        // The next heartbeat: Ready again, said once.
        p.push(Event::Heartbeat {
            node: quiet.clone(),
            at_ms: 12_100,
        });
        let cmds = p.tick_millis(12_100);
        assert_eq!(health(&cmds), vec![(quiet.clone(), true, HealthChange::HeartbeatAgain)]);
        assert!(ready(&mut p, quiet));
        p.push(Event::Heartbeat {
            node: quiet.clone(),
            at_ms: 12_400,
        });
        assert_eq!(health(&p.tick_millis(12_400)), vec![]);
    }

    #[test]
    fn a_closed_link_is_not_ready_until_the_node_registers_again() {
        let mut p = planner();
        p.tick_millis(10_000);
        let node = names(&p)[0].clone();
        p.push(Event::LinkDown {
            node: node.clone(),
            link: 1,
            at_ms: 10_200,
        });
        let cmds = p.tick_millis(10_200);
        assert_eq!(health(&cmds), vec![(node.clone(), false, HealthChange::LinkClosed)]);
        assert!(!ready(&mut p, &node));
        // A late heartbeat of the closed link changes nothing, nor does silence (the
        // other node, still linked, turns NotReady).
        p.push(Event::Heartbeat {
            node: node.clone(),
            at_ms: 10_250,
        });
        let cmds = p.tick_millis(20_000);
        assert!(health(&cmds).iter().all(|(n, ..)| *n != node), "{cmds:?}");
        assert!(!ready(&mut p, &node));
        let e = p.world().resource::<NodeNames>().0[&node];
        assert_eq!(heard_secs_ago(p.world(), e), Some(9), "heard when the link closed");
        // A new spec while away keeps it NotReady; registering makes it Ready.
        let spec = ClusterBuilder::flat(2)
            .build()
            .nodes
            .into_iter()
            .find(|n| n.name == node)
            .unwrap();
        p.push(Event::NodeUp(spec.clone()));
        p.tick_millis(20_100);
        assert!(!ready(&mut p, &node));
        p.push(Event::NodeUp(spec));
        p.push(Event::LinkUp {
            node: node.clone(),
            link: 2,
            at_ms: 20_200,
        });
        let cmds = p.tick_millis(20_200);
        assert_eq!(health(&cmds), vec![(node.clone(), true, HealthChange::Registered)]);
        assert!(ready(&mut p, &node));
    }

    #[test]
    fn nodes_without_a_link_never_change() {
        let mut p = Planner::new(PlannerConfig::default());
        for n in ClusterBuilder::flat(2).build().nodes {
            p.push(Event::NodeUp(n));
        }
        assert_eq!(health(&p.tick(0)), vec![]);
        assert_eq!(health(&p.tick(1_000_000)), vec![]);
        let nodes = names(&p);
        assert!(nodes.iter().all(|n| ready(&mut p, n)));
    }
}
