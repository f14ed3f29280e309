//! The dispatch system: hands each new placement to the driver as a `Place` command
//! (the daemon will launch it; the simulator schedules its completion).

use bevy_ecs::prelude::*;

use super::commands::{Command, Pinning, Placement};
use super::components::{Job, LiveChanged, Node, Task, TaskPhase, TaskState};
use super::numa::node::NodeHardware;
use super::queues::Outbox;

pub fn dispatch(
    mut out: ResMut<Outbox>,
    mut tasks: Query<(Entity, &Task, &mut TaskState), LiveChanged<TaskState>>,
    jobs: Query<&Job>,
    nodes: Query<&Node>,
    hardware: Query<&NodeHardware>,
) {
    let _span = tracing::info_span!("dispatch").entered();
    // First the order (job name, then rank) on small keys, then one `Place` per task
    // built straight into the outbox: a 512-task job moves no big structs around.
    let mut order: Vec<(&str, u32, Entity)> = Vec::new();
    for (e, task, mut ts) in &mut tasks {
        if ts.phase != TaskPhase::Running || ts.dispatched {
            continue;
        }
        ts.dispatched = true;
        if let Ok(job) = jobs.get(task.job) {
            order.push((job.spec.name.as_str(), ts.rank.unwrap_or(0), e));
        }
    }
    order.sort_unstable();
    out.0.reserve(order.len());
    for (_, _, e) in order {
        let Ok((_, task, ts)) = tasks.get(e) else { continue };
        let (Ok(job), Some(Ok(node))) = (jobs.get(task.job), ts.node.map(|n| nodes.get(n))) else {
            continue;
        };
        out.0.push(Command::Place(Placement {
            job: job.spec.name.clone(),
            task: task.name.clone(),
            node: node.name.clone(),
            rank: ts.rank.unwrap_or(0),
            command: job
                .spec
                .tasks
                .get(task.role)
                .map(|t| t.command.clone())
                .unwrap_or_default(),
            pinning: ts
                .numa
                .as_ref()
                .zip(ts.node.and_then(|n| hardware.get(n).ok()))
                .map(|(a, hw)| Pinning {
                    cpus: hw.0.cpu_list(a),
                    numa_nodes: hw.0.numa_nodes(a),
                    memory: hw.0.memory(a),
                    gpus: hw.0.gpus(a),
                    nics: hw.0.nics(a),
                }),
        }));
    }
}
