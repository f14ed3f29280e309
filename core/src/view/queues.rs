//! `hyperplan queues`: each queue's quota, limit, use and what it borrows, its running
//! and waiting jobs, and the fair share of the queue and of its busiest users.

use std::collections::BTreeMap;

use bevy_ecs::prelude::*;
use hyperplan_shared::status::{QueueStatus, QueuesReport, UserShare};

use crate::config::PlannerConfig;
use crate::fairshare::{Shares, Usage};
use crate::model::components::{JobPhase, JobQueue, JobState, Retired};
use crate::model::tick::Now;
use crate::queues::{QueueTable, QueueUse, UNLIMITED, Users};

/// Users listed per queue, busiest first.
const TOP_USERS: usize = 5;

/// Every queue, `default` first, then by name.
pub fn queue_statuses(world: &World) -> QueuesReport {
    queue_statuses_showing(world, |_| true)
}

/// As [`queue_statuses`], with per-user figures only of the users `shown` accepts (the
/// busiest of them): under `privateData` a plain user's own, the queues' totals whole.
pub fn queue_statuses_showing(world: &World, shown: impl Fn(&str) -> bool) -> QueuesReport {
    let table = world.resource::<QueueTable>();
    let used = world.resource::<QueueUse>();
    let usage = world.resource::<Usage>();
    let users = world.resource::<Users>();
    let half_life = world.resource::<PlannerConfig>().fairshare.half_life;
    let now = world.resource::<Now>().secs();
    let mut pending = vec![0u32; table.queues.len()];
    let mut waiting = Vec::new();
    if let Some(mut q) = super::read::<(&JobQueue, &JobState, Option<&Retired>)>(world) {
        for (jq, st, retired) in q.iter(world) {
            if retired.is_none()
                && st.phase == JobPhase::Pending
                && let Some(p) = pending.get_mut(jq.queue.ix())
            {
                *p += 1;
                waiting.push((jq.queue, jq.user));
            }
        }
    }
    let shares = Shares::at(usage, table, now, half_life, waiting.into_iter());
    let named = |v: &[u64], skip: u64| -> BTreeMap<String, u64> {
        table
            .dims
            .iter()
            .zip(v)
            .filter(|(_, a)| **a != skip)
            .map(|(d, a)| (d.clone(), *a))
            .collect()
    };
    let queues = table
        .queues
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let zero = vec![0; table.dims.len()];
            let in_use = used.used.get(i).unwrap_or(&zero);
            let quota = &table.quota[i];
            let borrowed: Vec<u64> = in_use
                .iter()
                .zip(quota)
                .map(|(u, q)| if *q > 0 { u.saturating_sub(*q) } else { 0 })
                .collect();
            let mut top: Vec<UserShare> = usage
                .accounts
                .iter()
                .filter(|((qi, u), _)| qi.ix() == i && shown(users.name(*u)))
                .map(|(&(qi, u), a)| UserShare {
                    user: users.name(u).to_string(),
                    usage: a.at(now, half_life),
                    fairshare: shares.factor(usage, qi, u, now, half_life),
                    used: used.of_user(qi, u).map(|v| named(v, 0)).unwrap_or_default(),
                })
                .collect();
            top.sort_by(|a, b| b.usage.total_cmp(&a.usage).then_with(|| a.user.cmp(&b.user)));
            top.truncate(TOP_USERS);
            QueueStatus {
                name: q.name.clone(),
                priority: q.priority,
                weight: q.weight,
                preemptible: q.preemptible,
                quota: named(quota, 0),
                limit: named(&table.limit[i], UNLIMITED),
                max_per_user: named(&table.max_per_user[i], UNLIMITED),
                max_running_jobs: q.max_running_jobs,
                used: named(in_use, u64::MAX),
                borrowed: named(&borrowed, 0),
                running_jobs: used.running_jobs.get(i).copied().unwrap_or(0),
                pending_jobs: pending[i],
                fairshare: shares.queue_factor.get(i).copied().unwrap_or(1.0),
                usage: shares.queue_usage.get(i).copied().unwrap_or(0.0),
                users: top,
                default_time_limit: q.default_time_limit,
                max_time_limit: q.max_time_limit,
                allowed_users: q.users.clone(),
                allowed_groups: q.groups.clone(),
            }
        })
        .collect();
    QueuesReport { queues }
}
