//! The `account` system: each queue's, each user's and each `[[account]]`'s use follows the tasks that stopped
//! or started running outside the allocator (which charges its own placements as it
//! commits them), and is rebuilt from every running task when the queues are reloaded.

use bevy_ecs::prelude::*;

use super::{Charge, QueueTable, QueueUse};
use crate::accounts::usage::AccountCharge;
use crate::model::components::{Job, JobQueue, LiveChanged, Task, TaskState};

/// Keeps [`QueueUse`] current; runs before `allocate`.
pub fn account(
    table: Res<QueueTable>,
    mut used: ResMut<QueueUse>,
    all: Query<(Entity, &Task, &TaskState)>,
    changed: Query<(Entity, &Task, &TaskState), LiveChanged<TaskState>>,
    mut removed: RemovedComponents<TaskState>,
    jobs: Query<(&JobQueue, &Job)>,
) {
    let _span = tracing::info_span!("queue_account").entered();
    let charge_of = |task: &Task| -> Option<Charge> {
        let (jq, job) = jobs.get(task.job).ok()?;
        Some(Charge {
            queue: jq.queue,
            user: jq.user,
            job: task.job,
            req: table.vector(&task.request),
            account: AccountCharge::of(table.account_of(job.spec.account.as_deref()), &task.request),
        })
    };
    if used.generation != Some(table.generation) {
        removed.clear();
        used.reset(&table);
        for (e, task, ts) in &all {
            if ts.is_running()
                && let Some(c) = charge_of(task)
            {
                used.charge(e, c);
            }
        }
        return;
    }
    for e in removed.read() {
        used.uncharge(e);
    }
    for (e, task, ts) in &changed {
        match (ts.is_running(), used.is_charged(e)) {
            (true, false) => {
                if let Some(c) = charge_of(task) {
                    used.charge(e, c);
                }
            }
            (false, true) => {
                used.uncharge(e);
            }
            _ => {}
        }
    }
}
