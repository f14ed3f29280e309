//! The `accrue` system: after the allocator, every (queue, user) whose use changed this
//! tick has its usage brought up to now at the old rate and takes the new one; usage read
//! from the store is applied once the queue table stands; every `[priority]
//! recalcInterval` the whole table goes to the store (the daemon writes it with the
//! tick's job records). (Account, user) associations are kept alike, for Fair Tree, and,
//! with `[scheduler] estimates = "history"`, the users' last runtimes.

use std::collections::BTreeMap;
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
        let old = std::mem::take(&mut usage.queue_names);
        renumber(&mut usage.accounts, |q| {
            old.get(q.ix()).and_then(|n| table.by_name.get(n)).copied()
        });
        usage.queue_names = table.queues.iter().map(|q| q.name.clone()).collect();
        // Associations follow their account by name likewise.
        let old = std::mem::take(&mut usage.account_names);
        renumber(&mut usage.associations, |ac| {
            old.get(ac).and_then(|n| table.accounts.find(n))
        });
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
            restore(entry(&mut usage.accounts, (q, u), now), row.usage, record.at, half_life);
        }
        for row in record.associations {
            let Some(ac) = table.accounts.find(&row.account) else {
                continue;
            };
            let u = users.intern(&Arc::from(row.user.as_str()));
            restore(
                entry(&mut usage.associations, (ac, u), now),
                row.usage,
                record.at,
                half_life,
            );
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
        rerate(entry(&mut usage.accounts, (q, u), now), rate, now, half_life);
    }
    let changed = std::mem::take(&mut used.changed_associations);
    let mut moved = !changed.is_empty();
    for (ac, u) in changed {
        let rate = used.of_association(ac, u).map_or(0.0, |v| table.rate(v));
        rerate(entry(&mut usage.associations, (ac, u), now), rate, now, half_life);
    }
    any |= prune(&mut usage.accounts, now, half_life);
    moved |= prune(&mut usage.associations, now, half_life);
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

/// After a reload: each entry under its owner's new index (`new_of`), those whose owner is
/// gone dropped.
fn renumber<K: Ord + Copy, U: Ord + Copy>(map: &mut BTreeMap<(K, U), Account>, new_of: impl Fn(K) -> Option<K>) {
    *map = std::mem::take(map)
        .into_iter()
        .filter_map(|((k, u), a)| Some(((new_of(k)?, u), a)))
        .collect();
}

/// The entry of `key`, new (nothing used yet) at `now` when there is none.
fn entry<K: Ord>(map: &mut BTreeMap<K, Account>, key: K, now: u64) -> &mut Account {
    map.entry(key).or_insert(Account {
        usage: 0.0,
        rate: 0.0,
        at: now,
    })
}

/// Adds `usage`, read from the store as of `then`, to what accrued since the planner
/// started, both decayed to the same moment.
fn restore(a: &mut Account, usage: f64, then: u64, half_life: u64) {
    let stored = Account {
        usage,
        rate: 0.0,
        at: then,
    };
    a.usage += stored.at(a.at.max(then), half_life);
}

/// Brings `a` up to `now` at its old rate, and gives it the new one.
fn rerate(a: &mut Account, rate: f64, now: u64, half_life: u64) {
    a.advance(now, half_life);
    a.rate = rate;
}

/// Drops the entries that decayed to nothing and hold nothing (the table is bounded by the
/// users who ran something within a few half-lives); whether any went.
fn prune<K: Ord>(map: &mut BTreeMap<K, Account>, now: u64, half_life: u64) -> bool {
    let before = map.len();
    map.retain(|_, a| a.rate > 0.0 || a.at(now, half_life) > 1e-6);
    map.len() != before
}
