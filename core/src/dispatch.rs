//! The dispatch system: hands each new placement to the driver as a `Place` command
//! (the daemon will launch it; the simulator schedules its completion).

use bevy_ecs::prelude::*;

use super::commands::{Command, Pinning, Placement};
use super::components::{Job, LiveChanged, Node, Task, TaskPhase, TaskState};
use super::numa::node::NodeHardware;
use super::queues::Outbox;

pub fn dispatch(
    mut out: ResMut<Outbox>,
    mut tasks: Query<(&Task, &mut TaskState), LiveChanged<TaskState>>,
    jobs: Query<&Job>,
    nodes: Query<&Node>,
    hardware: Query<&NodeHardware>,
) {
    let _span = tracing::info_span!("dispatch").entered();
    let mut placed = Vec::new();
    for (task, mut ts) in &mut tasks {
        if ts.phase != TaskPhase::Running || ts.dispatched {
            continue;
        }
        ts.dispatched = true;
        let (Ok(job), Some(Ok(node))) = (jobs.get(task.job), ts.node.map(|n| nodes.get(n))) else {
            continue;
        };
        placed.push(Placement {
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
        });
    }
    placed.sort_by(|a, b| a.job.cmp(&b.job).then(a.rank.cmp(&b.rank)));
    out.0.extend(placed.into_iter().map(Command::Place));
}
