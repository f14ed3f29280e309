//! The `accrue` system: after the allocator, every (queue, user) whose use changed this
//! tick has its usage brought up to now at the old rate and takes the new one; usage read
//! from the store is applied once the queue table stands; every `[priority]
//! recalcInterval` the whole table goes to the store (the daemon writes it with the
//! tick's job records). (Account, user) associations are kept alike, for Fair Tree, and,
//! with `[scheduler] estimates = "history"`, the users' last runtimes.

use std::sync::Arc;

use bevy_ecs::prelude::*;

use super::{Account, Usage};
use crate::config::PlannerConfig;
use crate::config::scheduler::Estimates;
use crate::model::commands::Command;
use crate::model::runtimes::RuntimeHistory;
use crate::model::tick::{Now, Outbox};
use crate::queues::{QueueTable, QueueUse, Users};

/// Keeps [`Usage`] exact; runs after `allocate`.
pub fn accrue(
    config: Res<PlannerConfig>,
    table: Res<QueueTable>,
    now: Res<Now>,
    mut used: ResMut<QueueUse>,
    mut users: ResMut<Users>,
    (mut usage, mut history): (ResMut<Usage>, ResMut<RuntimeHistory>),
    mut out: ResMut<Outbox>,
) {
    let _span = tracing::info_span!("fairshare").entered();
    let now = now.secs();
    let half_life = config.fairshare.half_life;
    if usage.generation != Some(table.generation) {
        // Reloaded queues are renumbered: accounts follow their queue by name; those of
        // a queue that is gone go with it.
        let old: Vec<String> = usage.queue_names.clone();
        let accounts = std::mem::take(&mut usage.accounts);
        for ((q, u), a) in accounts {
            if let Some(nq) = old.get(q.ix()).and_then(|n| table.by_name.get(n)) {
                usage.accounts.insert((*nq, u), a);
            }
        }
        usage.queue_names = table.queues.iter().map(|q| q.name.clone()).collect();
        // Associations follow their account by name likewise.
        let old: Vec<String> = std::mem::take(&mut usage.account_names);
        let associations = std::mem::take(&mut usage.associations);
        for ((ac, u), a) in associations {
            if let Some(na) = old.get(ac).and_then(|n| table.accounts.find(n)) {
                usage.associations.insert((na, u), a);
            }
        }
        usage.account_names = table.accounts.list.iter().map(|a| a.name.clone()).collect();
        usage.generation = Some(table.generation);
        usage.epoch += 1;
    }
    if let Some(record) = usage.restored.take() {
        for row in record.rows {
            let Some(&q) = table.by_name.get(&row.queue) else {
                continue;
            };
            let u = users.intern(&Arc::from(row.user.as_str()));
            // Added to what accrued since the planner started, decayed to the same moment.
            let a = usage.accounts.entry((q, u)).or_insert(Account {
                usage: 0.0,
                rate: 0.0,
                at: now,
            });
            let then = Account {
                usage: row.usage,
                rate: 0.0,
                at: record.at,
            };
            a.usage += then.at(a.at.max(record.at), half_life);
        }
        for row in record.associations {
            let Some(ac) = table.accounts.find(&row.account) else {
                continue;
            };
            let u = users.intern(&Arc::from(row.user.as_str()));
            let a = usage.associations.entry((ac, u)).or_insert(Account {
                usage: 0.0,
                rate: 0.0,
                at: now,
            });
            let then = Account {
                usage: row.usage,
                rate: 0.0,
                at: record.at,
            };
            a.usage += then.at(a.at.max(record.at), half_life);
        }
        for row in record.runtimes {
            let u = users.intern(&Arc::from(row.user.as_str()));
            history.restore(u, row.last, row.before);
        }
        usage.epoch += 1;
    }
    let changed = std::mem::take(&mut used.changed);
    let mut any = !changed.is_empty();
    for (q, u) in changed {
        let rate = used.of_user(q, u).map_or(0.0, |v| table.rate(v));
        let a = usage.accounts.entry((q, u)).or_insert(Account {
            usage: 0.0,
            rate: 0.0,
            at: now,
        });
        a.advance(now, half_life);
        a.rate = rate;
    }
    let changed = std::mem::take(&mut used.changed_associations);
    let mut moved = !changed.is_empty();
    for (ac, u) in changed {
        let rate = used.of_association(ac, u).map_or(0.0, |v| table.rate(v));
        let a = usage.associations.entry((ac, u)).or_insert(Account {
            usage: 0.0,
            rate: 0.0,
            at: now,
        });
        a.advance(now, half_life);
        a.rate = rate;
    }
    // Accounts that decayed to nothing and hold nothing are dropped (the table is
    // bounded by the users who ran something within a few half-lives).
    let before = usage.accounts.len();
    usage
        .accounts
        .retain(|_, a| a.rate > 0.0 || a.at(now, half_life) > 1e-6);
    any |= usage.accounts.len() != before;
    let before = usage.associations.len();
    usage
        .associations
        .retain(|_, a| a.rate > 0.0 || a.at(now, half_life) > 1e-6);
    moved |= usage.associations.len() != before;
    if moved {
        usage.epoch += 1;
    }
    any |= moved;
    let interval = config.priority.recalc_interval.max(1);
    let due = usage.persisted_at.is_none_or(|t| now >= t.saturating_add(interval));
    if due
        && (any || usage.accounts.values().any(|a| a.rate > 0.0) || usage.associations.values().any(|a| a.rate > 0.0))
    {
        usage.persisted_at = Some(now);
        let runtimes = (config.scheduler.estimates == Estimates::History).then_some(&*history);
        match usage.record(&table, &users, now, half_life, runtimes).encode() {
            Ok(bytes) => out.0.push(Command::PersistUsage(bytes.into())),
            Err(e) => out.0.push(Command::Warn(format!("fair-share usage not written: {e}"))),
        }
    }
}
