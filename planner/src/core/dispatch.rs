//! The dispatch system: hands each new placement to the driver as a `Place` command
//! (the daemon will launch it; the simulator schedules its completion).

use bevy_ecs::prelude::*;

use super::commands::{Command, Placement};
use super::components::{Job, Node, Task, TaskPhase, TaskState};
use super::queues::Outbox;

pub fn dispatch(
    mut out: ResMut<Outbox>,
    mut tasks: Query<(&Task, &mut TaskState), Changed<TaskState>>,
    jobs: Query<&Job>,
    nodes: Query<&Node>,
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
        });
    }
    placed.sort_by(|a, b| a.job.cmp(&b.job).then(a.rank.cmp(&b.rank)));
    out.0.extend(placed.into_iter().map(Command::Place));
}
