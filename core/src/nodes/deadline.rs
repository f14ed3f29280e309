//! When the driver must tick next with no event in between: the core decides by time
//! about nodes, maintenance windows and jobs' begin times. A Ready node turns NotReady
//! once silent past `silentAfter` (`health`); a NotReady node's tasks are lost past
//! `nodeLostAfter` (`lost`); started tasks an agent stopped listing are looked for every
//! few seconds (`lost`). A driver that ticks at [`Planner::next_deadline`] (and on
//! events) notices each at once rather than at its next timer tick.

use crate::Planner;
use crate::config::PlannerConfig;
use crate::model::components::Node;
use crate::model::health::{Away, Heartbeats};
use crate::nodes::lost::{MISSING_SWEEP_MS, MissingSweep};

impl Planner {
    /// The earliest time (Unix ms, the driver's clock) at which a tick would change
    /// something without a new event: the first node to fall silent, the first NotReady
    /// node whose tasks are then lost, the next sweep for unlisted tasks, or a waiting
    /// job's begin time; `None` when nothing waits on time (no agent's node, no begin
    /// time). Events pushed since the last tick are the driver's to tick for (it may
    /// batch them).
    pub fn next_deadline(&self) -> Option<u64> {
        let world = self.world();
        let health = world.resource::<PlannerConfig>().health;
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let (silent_after, lost_after) = (ms(health.silent_after()), ms(health.node_lost_after));
        let mut first: Option<u64> = None;
        let mut at = |t: u64| first = Some(first.map_or(t, |f| f.min(t)));
        let mut linked = false;
        let now_ms = world.resource::<crate::model::tick::Now>().ms;
        if let Some(mut q) = world.try_query::<(&Node, &Heartbeats)>() {
            for (n, h) in q.iter(world) {
                // Silence counts when it is longer than the limit: one ms past it.
                if n.ready && h.linked {
                    at(h.last_ms.saturating_add(silent_after).saturating_add(1));
                }
                linked |= h.listed_ms.is_some();
            }
        }
        for (&node, &since) in &world.resource::<Away>().0 {
            // Its tasks, then its fenced tasks (`lost`); a node past both has left `Away`.
            let heard = world.get::<Heartbeats>(node).map(|h| h.heard_ms);
            for due in [since.saturating_add(lost_after), health.fenced_lost_at(since, heard)] {
                if due >= now_ms {
                    at(due.saturating_add(1));
                }
            }
        }
        if linked {
            let last = world.get_resource::<MissingSweep>().map_or(0, |s| s.0);
            at(last.saturating_add(MISSING_SWEEP_MS));
        }
        // A job's begin time comes (see `jobs::holds`).
        let waiting = world.resource::<crate::model::held::Waiting>();
        for t in [waiting.next_begin, waiting.next_dependency].into_iter().flatten() {
            at(t.saturating_mul(1000));
        }
        // A maintenance window that closes gives its nodes back.
        for w in &world.resource::<PlannerConfig>().maintenance {
            let end = w.end.saturating_mul(1000);
            if end > now_ms {
                at(end);
            }
        }
        first
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use crate::config::{HealthConfig, PlannerConfig};
    use crate::model::events::Event;
    use crate::testing::ClusterBuilder;
    use crate::{Command, Planner};

    fn not_ready(cmds: &[Command]) -> bool {
        cmds.iter()
            .any(|c| matches!(c, Command::NodeHealth { ready: false, .. }))
    }

    /// Ticks at the deadline change what the deadline said, and a tick a millisecond
    /// before it changes nothing.
    #[test]
    fn the_deadline_is_when_silence_and_loss_are_noticed() {
        let config = PlannerConfig {
            health: HealthConfig {
                heartbeat_interval: Duration::from_secs(1),
                missed_heartbeats: 3,
                node_lost_after: Duration::from_secs(10),
            },
            ..PlannerConfig::default()
        };
        let mut p = Planner::new(config);
        assert_eq!(p.next_deadline(), None, "no agent's node: nothing waits on time");
        let node = ClusterBuilder::flat(1).build().nodes.remove(0);
        let name = node.name.clone();
        p.push(Event::NodeUp(node));
        p.push(Event::LinkUp {
            node: name.clone(),
            link: 1,
            at_ms: 1_000,
        });
        p.tick_millis(1_000);
        // Heard at 1 s: silent past 3 s of heartbeats at 4.001 s.
        assert_eq!(p.next_deadline(), Some(4_001));
        assert!(!not_ready(&p.tick_millis(4_000)));
        assert_eq!(p.next_deadline(), Some(4_001));
        assert!(not_ready(&p.tick_millis(4_001)), "NotReady at the deadline");
        // NotReady since 4.001 s: its tasks are lost past 10 s, at 14.002 s.
        assert_eq!(p.next_deadline(), Some(14_002));
        p.push(Event::Heartbeat {
            node: name,
            at_ms: 5_000,
        });
        p.tick_millis(5_000);
        assert_eq!(p.next_deadline(), Some(8_001), "Ready again, silent from 8.001 s");
    }
}
