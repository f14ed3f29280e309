//! A leader that no agent reaches hands the lead over (`[store] backend = "etcd"`).
//!
//! A leader cut from the agents (and the people) but not from etcd keeps its lease: nothing
//! would fail over while every node goes NotReady and, past the node-lost fence, stops
//! its restartable tasks. Agents that cannot reach the leader go down their planner list
//! to a standby, which sends them back with `NotLeader` and says in etcd which nodes came
//! (`server::standby`). A leader with no agent link at all for [`after`] while a standby
//! has lately heard agents resigns its lease, so that a standby the agents reach leads,
//! and stops (started again, it stands by). A leader whose agents are all down, or that
//! no standby hears of, keeps the lead: there is nobody better to hand it to.

use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};

use super::inbox::ToCore;
use crate::store::HaView;

/// How often the leader looks.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// How long a leader may have no agent while a standby hears some: three silences that
/// make a node NotReady, at least 15 s (agents sent back by a standby register with a
/// reachable leader within a second or two), and well inside the node-lost fence.
pub fn after(silent_after: Duration) -> Duration {
    (silent_after * 3).max(Duration::from_secs(15))
}

/// Why this leader should hand the lead over, once it should: `agents` is how many nodes'
/// agents reach it now (Ready nodes), `since` when one last did.
pub fn verdict(view: &HaView, advertise: &str, agents: u64, since: Instant, after: Duration) -> Option<String> {
    if agents > 0 || since.elapsed() < after {
        return None;
    }
    let (standby, nodes) = view
        .standbys_hear
        .iter()
        .filter(|(who, _)| who.as_str() != advertise)
        .filter(|(_, (read, nodes))| *read >= since && !nodes.is_empty())
        .map(|(who, (_, nodes))| (who, nodes))
        .max_by_key(|(who, nodes)| (nodes.len(), std::cmp::Reverse(who.as_str())))?;
    let shown: Vec<&str> = nodes.iter().take(5).map(String::as_str).collect();
    Some(format!(
        "no agent has reached this leader for {:.0} s while standby {standby} hears {} of them ({}{}): \
         handing the lead over",
        since.elapsed().as_secs_f64(),
        nodes.len(),
        shown.join(", "),
        if nodes.len() > shown.len() { ", …" } else { "" }
    ))
}

/// Looks every second until this leader should hand the lead over; returns why.
pub async fn watch(
    to_core: mpsc::UnboundedSender<ToCore>,
    view: watch::Receiver<HaView>,
    advertise: String,
    after: Duration,
) -> String {
    let mut since = Instant::now();
    let mut look = tokio::time::interval(LOOK_EVERY);
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        look.tick().await;
        let (tx, rx) = oneshot::channel();
        if to_core.send(ToCore::Metrics(tx)).is_err() {
            return std::future::pending().await; // the driver is gone: the stop is under way
        }
        let Ok(snapshot) = rx.await else { continue };
        // Reached: Ready (heard within the silence limit), whatever their drain. An open
        // link says less: QUIC keeps a silent one for its idle timeout.
        let reached: u64 = snapshot
            .gauges
            .nodes
            .iter()
            .filter(|(state, _)| **state != "not_ready")
            .map(|(_, n)| n)
            .sum();
        if reached > 0 {
            since = Instant::now();
            continue;
        }
        if let Some(why) = verdict(&view.borrow(), &advertise, 0, since, after) {
            return why;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn view(reports: &[(&str, Instant, &[&str])]) -> HaView {
        HaView {
            standbys_hear: reports
                .iter()
                .map(|(who, at, nodes)| (who.to_string(), (*at, nodes.iter().map(|n| n.to_string()).collect())))
                .collect(),
            ..HaView::default()
        }
    }

    #[test]
    fn a_leader_hands_over_only_without_agents_while_a_standby_freshly_hears_some() {
        let after = Duration::from_millis(50);
        let since = Instant::now();
        let stale = since - Duration::from_secs(1);
        std::thread::sleep(Duration::from_millis(60));
        let fresh = Instant::now();
        let me = "head-1:7400";
        let hears = view(&[("head-2:7400", fresh, &["n1", "n2"])]);
        // Agents of its own, or not long enough without: it keeps the lead.
        assert_eq!(verdict(&hears, me, 1, since, after), None);
        assert_eq!(verdict(&hears, me, 0, fresh, after), None);
        // A report from before the silence, an empty one, or its own: nobody better.
        assert_eq!(
            verdict(&view(&[("head-2:7400", stale, &["n1"])]), me, 0, since, after),
            None
        );
        assert_eq!(
            verdict(&view(&[("head-2:7400", fresh, &[])]), me, 0, since, after),
            None
        );
        assert_eq!(verdict(&view(&[(me, fresh, &["n1"])]), me, 0, since, after), None);
        let why = verdict(&hears, me, 0, since, after).expect("hands over");
        assert!(why.contains("standby head-2:7400 hears 2 of them (n1, n2)"), "{why}");
    }

    #[test]
    fn the_wait_is_three_silences_and_at_least_15_s() {
        assert_eq!(after(Duration::from_secs(3)), Duration::from_secs(15));
        assert_eq!(after(Duration::from_secs(15)), Duration::from_secs(45));
    }
}
