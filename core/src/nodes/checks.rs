//! Health checks' results ([`Event::NodeChecks`](crate::Event::NodeChecks)) and what
//! they do to a node. A check that newly fails drains the node "by health" (an ordinary
//! drain marked `by_health`: it takes no new task, its running tasks run on, and the drain
//! outlives a restart). Once every check passes, the node is [`Returning`]; after
//! `[health] returnAfter` with none failing it takes work again ([`return_healthy`]).
//! A degraded check drains nothing: the node scores lower and is taken after the healthy
//! nodes of its group, as a node with NVLink trouble is ([`HealthMarks`], which the
//! topology index takes in place), so work goes elsewhere first.
//!
//! A newly failed check whose code is in `[health] endTasksOn` (by default `gpu-lost`: a
//! GPU that fell off the bus) also ends the node's running tasks at once, as `hyperplan
//! nodes drain --now` does: each job's `onNodeLost` decides (replaced inside its
//! HyperNode, requeued, or failed).
//!
//! Health never touches an admin's drain: a node an admin drained stays drained whatever
//! its checks say, and an admin who drains a node drained by health makes the drain theirs.
//! A node an admin resumed while a check still fails stays resumed until a check fails
//! anew (the admin has the last word; the next new failure drains it again).

use bevy_ecs::prelude::*;
use hyperplan_shared::health::{CheckResult, CheckState, bounded};

use crate::config::PlannerConfig;
use crate::model::checks::{DrainsTouched, HealthMarks, NodeChecks, Returning};
use crate::model::commands::Command;
use crate::model::components::Node;
use crate::model::drain::{Drain, Drained, Drains, MAX_REASON_BYTES};
use crate::model::tick::{Now, Outbox};
use crate::names::NodeNames;

/// Who a drain by health is by, as `hyperplan nodes` shows it.
pub const BY_HEALTH: &str = "health";

/// `Event::NodeChecks`: keeps the results, drains the node on a new failure, starts its
/// way back when every check passes.
pub(crate) fn node_checks(world: &mut World, node: &str, checks: Vec<CheckResult>) {
    let Some(&e) = world.resource::<NodeNames>().0.get(node) else {
        return;
    };
    let checks = bounded(checks);
    let now = world.resource::<Now>().secs();
    let before = world.get::<NodeChecks>(e).map(|c| c.0.clone()).unwrap_or_default();
    let failed: Vec<&CheckResult> = checks.iter().filter(|c| c.state == CheckState::Failed).collect();
    let was_failed = |c: &CheckResult| {
        before
            .iter()
            .any(|b| b.check == c.check && b.state == CheckState::Failed && b.code == c.code)
    };
    let new_failure = failed.iter().any(|c| !was_failed(c));
    let drain = world.resource::<Drains>().nodes.get(node).cloned();
    let mut lines = Vec::new();
    if failed.is_empty() {
        if drain.as_ref().is_some_and(|d| d.by_health) && world.get::<Returning>(e).is_none() {
            world.entity_mut(e).insert(Returning { since: now });
            let after = world.resource::<PlannerConfig>().checks.return_after;
            lines.push(Command::Info(format!(
                "node {node}: every health check passes; it takes work again in {after} s unless one fails"
            )));
        }
    } else {
        world.entity_mut(e).remove::<Returning>();
        let reason = reason_of(&failed);
        match drain {
            None if new_failure => {
                world.entity_mut(e).insert(Drained);
                world.resource_mut::<Drains>().nodes.insert(
                    node.to_string(),
                    Drain {
                        reason: Some(reason.clone()),
                        by: BY_HEALTH.to_string(),
                        since: now,
                        by_health: true,
                    },
                );
                world.resource_mut::<DrainsTouched>().0 = true;
                lines.push(Command::Warn(format!(
                    "node {node} drained by health: {reason}; it takes no new task, its running tasks run on"
                )));
            }
            // Another check failed, or the same differently: the reason follows.
            Some(d) if d.by_health && d.reason.as_deref() != Some(reason.as_str()) => {
                if let Some(d) = world.resource_mut::<Drains>().nodes.get_mut(node) {
                    d.reason = Some(reason.clone());
                }
                world.resource_mut::<DrainsTouched>().0 = true;
                lines.push(Command::Warn(format!("node {node} drained by health: {reason}")));
            }
            // An admin's drain stands; a node an admin resumed waits for a new failure.
            _ => {}
        }
    }
    // Degraded checks that came or went: said once each, the node keeps working.
    for c in checks.iter().filter(|c| c.state == CheckState::Degraded) {
        if !before
            .iter()
            .any(|b| b.check == c.check && b.state == CheckState::Degraded && b.code == c.code)
        {
            lines.push(Command::Warn(format!("node {node}: {} degraded", c.describe())));
        }
    }
    // A degraded node scores lower and is taken last in its group; with a degraded IB
    // port its HyperNodes count it, and hard-topology jobs go elsewhere first. The
    // topology index takes the marks in place (`topology::marks`).
    let marks = HealthMarks {
        degraded: checks.iter().any(|c| c.state == CheckState::Degraded),
        fabric: checks
            .iter()
            .any(|c| c.state == CheckState::Degraded && c.check.starts_with("ib:")),
    };
    if world.get::<HealthMarks>(e).copied().unwrap_or_default() != marks {
        if marks == HealthMarks::default() {
            world.entity_mut(e).remove::<HealthMarks>();
        } else {
            world.entity_mut(e).insert(marks);
        }
    }
    // A hard failure (`[health] endTasksOn`, a GPU gone) newly reported: the node's
    // tasks end now, as a lost node's, and their jobs' `onNodeLost` decides.
    let hard: Vec<&CheckResult> = {
        let config = &world.resource::<PlannerConfig>().checks;
        failed
            .iter()
            .copied()
            .filter(|c| !was_failed(c) && config.ends_tasks(&c.code))
            .collect()
    };
    if !hard.is_empty() && !crate::nodes::drain::running_on(world, e).is_empty() {
        let drain = Drain {
            reason: Some(reason_of(&hard)),
            by: BY_HEALTH.to_string(),
            since: now,
            by_health: true,
        };
        lines.push(Command::Warn(format!(
            "node {node}: {}: its running tasks end now, as a lost node's",
            drain.reason.as_deref().unwrap_or_default()
        )));
        crate::nodes::drain::end_tasks_on(world, e, node, &drain);
    }
    if before != checks {
        world.entity_mut(e).insert(NodeChecks(checks));
    }
    world.resource_mut::<Outbox>().0.extend(lines);
}

/// The drain's reason: `ib:mlx5_0/1: width 1x (expected 4x); …`, cut to what a drain's
/// reason may hold.
fn reason_of(failed: &[&CheckResult]) -> String {
    let mut reason = String::new();
    for (k, c) in failed.iter().enumerate() {
        if k > 0 {
            reason.push_str("; ");
        }
        reason.push_str(&c.describe());
    }
    if reason.len() > MAX_REASON_BYTES {
        let mut end = MAX_REASON_BYTES - '…'.len_utf8();
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
        reason.push('…');
    }
    reason
}

/// Nodes drained by health whose checks have all passed for `[health] returnAfter` take
/// work again; the drains health changed in this tick are written once. Runs every tick;
/// only the nodes on their way back are looked at.
pub fn return_healthy(world: &mut World) {
    let now = world.resource::<Now>().secs();
    let after = world.resource::<PlannerConfig>().checks.return_after;
    let mut changed = std::mem::take(&mut world.resource_mut::<DrainsTouched>().0);
    let mut due: Vec<(Entity, String)> = match world.try_query::<(Entity, &Node, &Returning)>() {
        Some(mut q) => q
            .iter(world)
            .filter(|(_, _, r)| r.since.saturating_add(after) <= now)
            .map(|(e, n, _)| (e, n.name.to_string()))
            .collect(),
        None => Vec::new(),
    };
    due.sort_by(|a, b| a.1.cmp(&b.1));
    for (e, name) in due {
        world.entity_mut(e).remove::<Returning>();
        let by_health = world.resource::<Drains>().nodes.get(&name).is_some_and(|d| d.by_health);
        if !by_health {
            continue; // an admin resumed it, or drained it since: theirs to decide
        }
        world.resource_mut::<Drains>().nodes.remove(&name);
        world.entity_mut(e).remove::<Drained>();
        changed = true;
        let line = format!("node {name} returns: every health check has passed for {after} s");
        world.resource_mut::<Outbox>().0.push(Command::Info(line));
    }
    if changed {
        crate::nodes::drain::write(world);
    }
}
