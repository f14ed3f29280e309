//! The ingest system: applies queued events to the world (nodes, their links and
//! heartbeats (see `health`), HyperNode sources, drains, holds); task starts, ends,
//! cancellations and what nodes run go to `lifecycle`. Jobs come in by
//! [`Planner::submit`](crate::Planner::submit), not by an event.

use bevy_ecs::prelude::*;
use hyperplan_shared::NodeSpec;

use super::discovery::{self, Found};
use super::numa::node::{HardwareCache, NodeHardware};
use crate::jobs::lifecycle;
use crate::model::awaiting::StandIn;
use crate::model::commands::Command;
use crate::model::components::SourceKind;
use crate::model::components::{Node, set_node_ready};
use crate::model::events::Event;
use crate::model::health::Heartbeats;
use crate::model::tick::{Inbox, LabelTypes, Now, Outbox, Reregistered};
use crate::nodes::health;
use crate::nodes::refusals::Refusals;

use super::names::NodeNames;

pub(crate) fn ingest(world: &mut World) {
    let _span = tracing::info_span!("ingest").entered();
    let events = std::mem::take(&mut world.resource_mut::<Inbox>().0);
    for event in events {
        match event {
            Event::NodeUp(spec) => node_up(world, spec),
            Event::NodeGone { name } => {
                let found = world.resource_mut::<NodeNames>().0.remove(&name);
                if let Some(e) = found {
                    world.despawn(e);
                }
            }
            Event::StaticHyperNodes(specs) => {
                let at = world.resource::<Now>().secs();
                let found = Found::HyperNodes {
                    summary: format!("{} HyperNode(s) from the cluster file", specs.len()),
                    specs,
                    warnings: Vec::new(),
                    degraded_links: Vec::new(),
                };
                discovery::record(world, SourceKind::Static.as_str(), SourceKind::Static, at, Ok(found));
            }
            Event::LabelDiscovery(types) => {
                discovery::declare_label(world, &types);
                world.resource_mut::<LabelTypes>().0 = types;
            }
            Event::NvlinkDiscovery(on) => {
                world.insert_resource(crate::model::tick::NvlinkDiscovery(on));
            }
            Event::DeclareSource { source, kind, target } => discovery::declare(world, &source, kind, target),
            Event::Discovered {
                source,
                kind,
                at,
                result,
            } => discovery::record(world, &source, kind, at, result),
            Event::NodeReady { name, ready } => {
                let found = world.resource::<NodeNames>().0.get(&name).copied();
                if let Some(e) = found {
                    set_node_ready(world, e, ready);
                }
            }
            Event::LinkUp { node, link, at_ms } => {
                world.resource_mut::<Refusals>().clear(&node);
                health::link_up(world, &node, link, at_ms);
                world.resource_mut::<Reregistered>().0.push(node);
            }
            Event::NodeRefused { node, reason, at_ms } => {
                // Said once per change of reason: an agent retrying is no news.
                if world.resource_mut::<Refusals>().refuse(&node, &reason, at_ms) {
                    let line = format!("node {node}: its agent is refused until it changes: {reason}");
                    world.resource_mut::<Outbox>().0.push(Command::Warn(line));
                }
            }
            Event::Heartbeat { node, at_ms } => health::heartbeat(world, &node, at_ms),
            Event::LinkDown { node, link, at_ms } => health::link_down(world, &node, link, at_ms),
            Event::Drain { nodes, drain, now } => crate::nodes::drain::drain(world, nodes, drain, now),
            Event::Resume { nodes } => crate::nodes::drain::resume(world, nodes),
            Event::Remove { nodes } => crate::nodes::drain::remove(world, nodes),
            Event::Cancel {
                job,
                grace_secs,
                by_admin,
            } => lifecycle::cancel(world, &job, grace_secs, by_admin),
            Event::Hold { job, by, admin } => crate::jobs::holds::hold(world, &job, by, admin),
            Event::Release { job } => crate::jobs::holds::release(world, &job),
            Event::TaskFinished { job, task, index } => lifecycle::task_finished(world, &job, index, &task),
            Event::TaskStarted {
                node,
                job,
                job_id,
                task,
                index,
                pid,
                at_ms,
            } => lifecycle::task_started(world, &node, (&job, job_id), (index, &task), pid, at_ms),
            Event::TaskEnded {
                node,
                job,
                job_id,
                task,
                index,
                end,
            } => lifecycle::task_ended(world, &node, (&job, job_id), (index, &task), end),
            Event::TasksOnNode { node, tasks } => lifecycle::tasks_on_node(world, &node, tasks),
            Event::PortsInUse { node, ports } => crate::nodes::ports::ports_in_use(world, &node, ports),
            Event::NodeStrained { node, reason } => crate::nodes::strained::node_strained(world, &node, reason),
            Event::NodeChecks { node, checks } => crate::nodes::checks::node_checks(world, &node, checks),
        }
    }
}

fn node_up(world: &mut World, spec: NodeSpec) {
    // The daemon refuses such an agent at registration; a cluster file can still name one.
    if let Some(why) = spec.hardware.as_ref().and_then(|t| t.unsupported()) {
        let w = format!("node {:?} not added: {why}", spec.name);
        world.resource_mut::<Outbox>().0.push(Command::Warn(w));
        return;
    }
    let hardware = NodeHardware(
        world
            .resource_mut::<HardwareCache>()
            .get(spec.hardware.as_ref(), &spec.resources),
    );
    let ib_ports = spec.hardware.as_ref().map_or((0, 0), |t| {
        let ports = t.hcas.iter().flat_map(|h| &h.ports);
        let up = ports.clone().filter(|p| p.state.as_deref() == Some("ACTIVE")).count();
        (up as u32, ports.count() as u32)
    });
    let ib_guids = spec
        .hardware
        .as_ref()
        .map(|t| t.hcas.iter().flat_map(|h| h.guids()).collect())
        .unwrap_or_default();
    let nvlink = spec
        .hardware
        .as_ref()
        .and_then(|t| crate::model::components::NodeNvlink::from_gpus(&t.gpu_fabric));
    let known = world.resource::<NodeNames>().0.get(&spec.name).copied();
    // A node whose readiness its link decides keeps it across a new spec (an agent
    // that is away may still have its topology changed); any other node is Ready.
    let ready = known
        .filter(|&e| world.get::<Heartbeats>(e).is_some())
        .and_then(|e| world.get::<Node>(e))
        .is_none_or(|n| n.ready);
    let node = Node {
        name: spec.name.into(),
        labels: spec.labels,
        allocatable: spec.resources,
        external_used: spec.used,
        ready,
        ib_ports,
        ib_guids,
        nvlink,
    };
    match known {
        Some(e) => {
            // A stand-in of the store's is a node now: `restore::adopt` takes it over.
            world.entity_mut(e).insert((node, hardware)).remove::<StandIn>();
        }
        None => {
            let name = node.name.to_string();
            let e = world.spawn((node, hardware)).id();
            crate::nodes::drain::mark(world, e, &name);
            world.resource_mut::<NodeNames>().0.insert(name, e);
        }
    }
}
