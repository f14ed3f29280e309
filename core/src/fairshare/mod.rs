//! Fair share: each user's usage within each queue, in weighted resource-seconds
//! (`[fairshare] weights`: per core, per GiB of memory, per GPU, … per second), decaying
//! with `[fairshare] halfLife`, and the factor it gives a pending job (Slurm's classic
//! fair share, `2^(-usage/share)`), for the user within the queue and the queue among
//! queues. The `accrue` system keeps the sums exact between recalculations: a running
//! task adds its weighted request every second, integrated in closed form whenever its
//! (queue, user)'s rate changes, so the result does not depend on how often it ticks.
//! Usage is kept per (account, user) association too, the same way, for Slurm's Fair
//! Tree over the `[[account]]` tree (`[fairshare] tree = "accounts"`, [`tree`]).

pub mod accrue;
pub mod tree;

use std::collections::BTreeMap;

use bevy_ecs::prelude::*;

use crate::model::ids::{QueueIdx, UserIdx};
use crate::model::runtimes::RuntimeHistory;
use crate::model::usage::{AssociationRow, RuntimeRow, UsageRecord, UsageRow};
use crate::queues::{QueueTable, Users};

/// One (queue, user)'s usage.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Account {
    /// Weighted resource-seconds, decayed to `at`.
    pub usage: f64,
    /// Weighted resources held now (usage per second).
    pub rate: f64,
    /// When `usage` was last brought up to date (Unix seconds).
    pub at: u64,
}

impl Account {
    /// Its usage at `now`: the stored usage decayed, plus what the current rate added
    /// meanwhile, itself decayed (∫ rate · 2^(-(now−t)/H) dt).
    pub fn at(&self, now: u64, half_life: u64) -> f64 {
        let dt = now.saturating_sub(self.at) as f64;
        let h = half_life.max(1) as f64;
        let d = (-dt / h).exp2();
        self.usage * d + self.rate * h / std::f64::consts::LN_2 * (1.0 - d)
    }

    /// Brings `usage` up to `now`.
    pub fn advance(&mut self, now: u64, half_life: u64) {
        if now > self.at {
            self.usage = self.at(now, half_life);
            self.at = now;
        }
    }
}

/// Usage per (queue, user).
#[derive(Debug, Default, Resource)]
pub struct Usage {
    /// By (queue, user).
    pub accounts: BTreeMap<(QueueIdx, UserIdx), Account>,
    /// The queue table generation the indices belong to.
    pub generation: Option<u64>,
    /// The names of that table's queues, by index (to follow them through a reload).
    pub queue_names: Vec<String>,
    /// By (account, user) association, the account by position in the table's
    /// `[[account]]` list (empty without accounts).
    pub associations: BTreeMap<(usize, UserIdx), Account>,
    /// The names of that table's accounts, by position (to follow them through a reload).
    pub account_names: Vec<String>,
    /// Bumped whenever an association's usage changes other than by decay (a rate
    /// changes, one is restored, added or dropped): Fair Tree's ranking is worked out
    /// again.
    pub epoch: u64,
    /// When usage was last written to the store (Unix seconds).
    pub persisted_at: Option<u64>,
    /// Usage read from the store, by names, waiting for the table and the users it
    /// needs (applied by `accrue`).
    pub restored: Option<UsageRecord>,
}

impl Usage {
    /// Every account by names, brought to `now`, for the store, with the runtimes of
    /// `history` of the users who have an account (those who ran something within a few
    /// half-lives: the record stays bounded as usage is), by name.
    pub fn record(
        &self,
        table: &QueueTable,
        users: &Users,
        now: u64,
        half_life: u64,
        history: Option<&RuntimeHistory>,
    ) -> UsageRecord {
        let runtimes = history.map_or_else(Vec::new, |h| {
            let with: BTreeMap<&str, UserIdx> = self.accounts.keys().map(|&(_, u)| (users.name(u), u)).collect();
            with.into_iter()
                .filter_map(|(name, u)| {
                    let (last, before) = h.recent(u)?;
                    Some(RuntimeRow {
                        user: name.to_string(),
                        last,
                        before,
                    })
                })
                .collect()
        });
        UsageRecord {
            runtimes,
            at: now,
            rows: self
                .accounts
                .iter()
                .filter_map(|(&(q, u), a)| {
                    let usage = a.at(now, half_life);
                    let queue = table.queues.get(q.ix())?.name.clone();
                    (usage > 0.0 || a.rate > 0.0).then(|| UsageRow {
                        queue,
                        user: users.name(u).to_string(),
                        usage,
                    })
                })
                .collect(),
            associations: self
                .associations
                .iter()
                .filter_map(|(&(ac, u), a)| {
                    let usage = a.at(now, half_life);
                    let account = table.accounts.list.get(ac)?.name.clone();
                    (usage > 0.0 || a.rate > 0.0).then(|| AssociationRow {
                        account,
                        user: users.name(u).to_string(),
                        usage,
                    })
                })
                .collect(),
        }
    }
}

/// The fair-share factors of a moment: per queue its total usage and factor, for the
/// order of every pending job.
#[derive(Debug, Default)]
pub struct Shares {
    /// Per queue: Σ of its users' usage.
    pub queue_usage: Vec<f64>,
    /// Per queue: users with usage or a waiting job in it.
    pub queue_users: Vec<u32>,
    /// Per queue: its factor among queues.
    pub queue_factor: Vec<f64>,
}

impl Shares {
    /// Works the queue totals and factors out at `now`. A queue's users are those with
    /// usage in it and those with a job waiting in it (`waiting`): each has an equal share.
    pub fn at(
        usage: &Usage,
        table: &QueueTable,
        now: u64,
        half_life: u64,
        waiting: impl Iterator<Item = (QueueIdx, UserIdx)>,
    ) -> Self {
        let n = table.queues.len();
        let mut queue_usage = vec![0.0; n];
        let mut queue_users = vec![0u32; n];
        for (&(q, _), a) in &usage.accounts {
            if let Some(u) = queue_usage.get_mut(q.ix()) {
                *u += a.at(now, half_life);
            }
        }
        let mut users: std::collections::BTreeSet<(QueueIdx, UserIdx)> = usage.accounts.keys().copied().collect();
        users.extend(waiting);
        for (q, _) in users {
            if let Some(c) = queue_users.get_mut(q.ix()) {
                *c += 1;
            }
        }
        let total: f64 = queue_usage.iter().sum();
        let weights: f64 = table.queues.iter().map(|q| q.weight).sum();
        let queue_factor = table
            .queues
            .iter()
            .zip(&queue_usage)
            .map(|(q, u)| factor(*u, total, q.weight / weights))
            .collect();
        Self {
            queue_usage,
            queue_users,
            queue_factor,
        }
    }

    /// A job's fair-share factor (0 to 1): its queue's among queues times its user's
    /// within the queue, where every user of the queue has an equal share.
    pub fn factor(&self, usage: &Usage, q: QueueIdx, u: UserIdx, now: u64, half_life: u64) -> f64 {
        let mine = usage.accounts.get(&(q, u)).map_or(0.0, |a| a.at(now, half_life));
        let users = self.queue_users.get(q.ix()).copied().unwrap_or(0).max(1);
        let in_queue = factor(
            mine,
            self.queue_usage.get(q.ix()).copied().unwrap_or(0.0),
            1.0 / f64::from(users),
        );
        self.queue_factor.get(q.ix()).copied().unwrap_or(1.0) * in_queue
    }
}

/// Slurm's classic factor: `2^(-(usage/total)/share)`; 1 when nothing was used.
pub fn factor(usage: f64, total: f64, share: f64) -> f64 {
    if total <= 0.0 || share <= 0.0 {
        return 1.0;
    }
    (-(usage / total) / share).exp2()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_decays_by_half_each_half_life_and_a_rate_adds_up() {
        let a = Account {
            usage: 100.0,
            rate: 0.0,
            at: 0,
        };
        assert!((a.at(10, 10) - 50.0).abs() < 1e-9);
        let b = Account {
            usage: 0.0,
            rate: 1.0,
            at: 0,
        };
        // Short against the half-life: about the seconds held.
        assert!((b.at(10, 1_000_000) - 10.0).abs() < 1e-3);
        // Advancing in steps gives what one step gives.
        let mut c = b;
        for t in [3, 7, 10] {
            c.advance(t, 5);
        }
        assert!((c.usage - b.at(10, 5)).abs() < 1e-9);
    }

    #[test]
    fn the_factor_is_one_unused_a_half_at_ones_share_and_less_above() {
        assert_eq!(factor(0.0, 0.0, 0.5), 1.0);
        assert_eq!(factor(0.0, 10.0, 0.5), 1.0);
        assert!((factor(5.0, 10.0, 0.5) - 0.5).abs() < 1e-12);
        assert!(factor(10.0, 10.0, 0.5) < 0.5);
    }
}
