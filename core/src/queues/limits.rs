//! The limits a queue keeps while the allocator walks: its `limit` (the most it may use,
//! its quota plus what it borrows), `maxPerUser` and `maxRunningJobs`. A job that would
//! break one waits, saying which, and holds no reservation: the room is not what it lacks.

use hyperplan_shared::quantity::format_quantity;

use super::{QueueTable, QueueUse, UNLIMITED};
use crate::model::ids::{QueueIdx, UserIdx};

/// Why a job of `user` in queue `q` asking `req` more (over the table's dimensions) may
/// not start now; `None` when it may. `running`: the job already has tasks running (it
/// counts against `maxRunningJobs` already).
pub fn blocked(
    table: &QueueTable,
    used: &QueueUse,
    q: QueueIdx,
    user: UserIdx,
    user_name: &str,
    req: &[u64],
    running: bool,
) -> Option<String> {
    let queue = table.get(q);
    if !running
        && let Some(max) = queue.max_running_jobs
        && used.running_jobs.get(q.ix()).copied().unwrap_or(0) >= max
    {
        return Some(format!(
            "queue {} runs its maxRunningJobs ({max}) jobs already",
            queue.name
        ));
    }
    let zero = vec![0; req.len()];
    let in_queue = used.used.get(q.ix()).unwrap_or(&zero);
    for (k, dim) in table.dims.iter().enumerate() {
        let limit = table.limit[q.ix()][k];
        if limit != UNLIMITED && in_queue[k].saturating_add(req[k]) > limit {
            return Some(format!(
                "queue {} would use {dim} {} of its limit {} (in use {}, the job asks {})",
                queue.name,
                format_quantity(dim, in_queue[k].saturating_add(req[k])),
                format_quantity(dim, limit),
                format_quantity(dim, in_queue[k]),
                format_quantity(dim, req[k]),
            ));
        }
    }
    let mine = used.of_user(q, user).unwrap_or(&zero);
    for (k, dim) in table.dims.iter().enumerate() {
        let max = table.max_per_user[q.ix()][k];
        if max != UNLIMITED && mine[k].saturating_add(req[k]) > max {
            return Some(format!(
                "user {user_name} would use {dim} {} in queue {}, above its maxPerUser {} (in use {}, the job asks {})",
                format_quantity(dim, mine[k].saturating_add(req[k])),
                queue.name,
                format_quantity(dim, max),
                format_quantity(dim, mine[k]),
                format_quantity(dim, req[k]),
            ));
        }
    }
    None
}
