//! The limits a queue keeps while the allocator walks: its `limit` (the most it may use,
//! its quota plus what it borrows), `maxPerUser` and `maxRunningJobs`. A job that would
//! break one waits, saying which, and holds no reservation: the room is not what it lacks.

use super::{QueueTable, QueueUse, UNLIMITED};
use crate::model::ids::{QueueIdx, UserIdx};
use crate::model::reason::{OverLimit, Reason};

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
) -> Option<Reason> {
    let queue = table.get(q);
    if !running
        && let Some(max) = queue.max_running_jobs
        && used.running_jobs.get(q.ix()).copied().unwrap_or(0) >= max
    {
        return Some(Reason::QueueJobs {
            queue: queue.name.clone(),
            max,
        });
    }
    let zero = vec![0; req.len()];
    let in_queue = used.used.get(q.ix()).unwrap_or(&zero);
    for (k, dim) in table.dims.iter().enumerate() {
        let limit = table.limit[q.ix()][k];
        if limit != UNLIMITED && in_queue[k].saturating_add(req[k]) > limit {
            return Some(Reason::QueueLimit {
                queue: queue.name.clone(),
                over: OverLimit {
                    resource: dim.to_string(),
                    would: in_queue[k].saturating_add(req[k]),
                    limit,
                    in_use: in_queue[k],
                    asks: req[k],
                },
            });
        }
    }
    let mine = used.of_user(q, user).unwrap_or(&zero);
    for (k, dim) in table.dims.iter().enumerate() {
        let max = table.max_per_user[q.ix()][k];
        if max != UNLIMITED && mine[k].saturating_add(req[k]) > max {
            return Some(Reason::UserLimit {
                user: user_name.to_string(),
                queue: queue.name.clone(),
                over: OverLimit {
                    resource: dim.to_string(),
                    would: mine[k].saturating_add(req[k]),
                    limit: max,
                    in_use: mine[k],
                    asks: req[k],
                },
            });
        }
    }
    None
}
