//! Queues (`[[queue]]`): the table of configured queues as dense vectors, who uses what
//! in each ([`QueueUse`], kept by the `account` system and by the allocator as it
//! commits), the checks at submit ([`check`]) and the limits the allocator keeps
//! ([`limits`]). Like Volcano's queues and Kueue's ClusterQueues: a queue is guaranteed
//! its `quota`, may borrow idle room up to its `limit`, and bounds each user
//! (`maxPerUser`) and its running jobs (`maxRunningJobs`).

pub mod account;
pub mod check;
pub mod limits;
pub mod reload;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bevy_ecs::prelude::*;
use hyperplan_shared::Resources;

use crate::config::{DEFAULT_QUEUE, PlannerConfig, QueueConfig};
use crate::model::ids::{QueueIdx, UserIdx};

/// No limit on a dimension.
pub const UNLIMITED: u64 = u64::MAX;

/// The configured queues, `default` first, by dense index.
#[derive(Clone, Debug, Resource)]
pub struct QueueTable {
    /// By `QueueIdx`.
    pub queues: Vec<QueueConfig>,
    /// Index by name.
    pub by_name: BTreeMap<String, QueueIdx>,
    /// Resource names any queue bounds or fair share weighs, sorted: the dimensions of
    /// every vector here.
    pub dims: Vec<String>,
    /// Per queue, per dimension: quota (0: none).
    pub quota: Vec<Vec<u64>>,
    /// Per queue, per dimension: limit ([`UNLIMITED`]: none).
    pub limit: Vec<Vec<u64>>,
    /// Per queue, per dimension: the most one user may use ([`UNLIMITED`]: none).
    pub max_per_user: Vec<Vec<u64>>,
    /// Per dimension: fair-share usage per base unit per second (`[fairshare] weights`
    /// per core, per GiB of memory, per unit of anything else).
    pub usage_weight: Vec<f64>,
    /// `[[account]]`: the accounts jobs are charged to, as configured with this table.
    pub accounts: crate::config::Accounts,
    /// Bumped on every reload: what was computed against the old table is stale.
    pub generation: u64,
}

impl QueueTable {
    /// The table of `config`'s queues.
    pub fn new(config: &PlannerConfig, generation: u64) -> Self {
        let mut dims: BTreeSet<String> = config.fairshare.weights.keys().cloned().collect();
        for q in &config.queues {
            for r in [&q.quota, &q.limit, &q.max_per_user] {
                dims.extend(r.iter().map(|(k, _)| k.to_string()));
            }
        }
        let dims: Vec<String> = dims.into_iter().collect();
        let vec_of = |r: &Resources, none: u64| -> Vec<u64> {
            dims.iter()
                .map(|d| if r.0.contains_key(d) { r.get(d) } else { none })
                .collect()
        };
        let mut queues = config.queues.clone();
        if !queues.iter().any(|q| q.name == DEFAULT_QUEUE) {
            queues.insert(0, QueueConfig::default_queue());
        }
        Self {
            by_name: queues
                .iter()
                .enumerate()
                .map(|(i, q)| (q.name.clone(), QueueIdx(i as u32)))
                .collect(),
            quota: queues.iter().map(|q| vec_of(&q.quota, 0)).collect(),
            limit: queues.iter().map(|q| vec_of(&q.limit, UNLIMITED)).collect(),
            max_per_user: queues.iter().map(|q| vec_of(&q.max_per_user, UNLIMITED)).collect(),
            usage_weight: dims
                .iter()
                .map(|d| {
                    let w = config.fairshare.weights.get(d).copied().unwrap_or(0.0);
                    match d.as_str() {
                        hyperplan_shared::CPU => w / 1000.0,
                        hyperplan_shared::MEMORY => w / f64::from(1u32 << 30),
                        _ => w,
                    }
                })
                .collect(),
            dims,
            queues,
            accounts: config.accounts.clone(),
            generation,
        }
    }

    /// The queue at `q`.
    pub fn get(&self, q: QueueIdx) -> &QueueConfig {
        &self.queues[q.ix()]
    }

    /// The queue a spec names (`default` when it names none); `None`: no such queue.
    pub fn of_spec(&self, queue: Option<&str>) -> Option<QueueIdx> {
        self.by_name.get(queue.unwrap_or(DEFAULT_QUEUE)).copied()
    }

    /// Fair-share usage per second of holding `v` (over the table's dimensions).
    pub fn rate(&self, v: &[u64]) -> f64 {
        v.iter().zip(&self.usage_weight).map(|(a, w)| *a as f64 * w).sum()
    }

    /// A request over the table's dimensions.
    pub fn vector(&self, r: &Resources) -> Vec<u64> {
        self.dims.iter().map(|d| r.get(d)).collect()
    }

    /// The position in [`QueueTable::accounts`] of the account a job is charged to
    /// (`None`: it names none, or one no longer configured).
    pub fn account_of(&self, account: Option<&str>) -> Option<usize> {
        account.and_then(|a| self.accounts.find(a))
    }
}

/// Users by dense index, numbered as they first submit.
#[derive(Debug, Default, Resource)]
pub struct Users {
    names: Vec<Arc<str>>,
    by_name: HashMap<Arc<str>, UserIdx>,
}

impl Users {
    /// The index of `name`, numbering it if new.
    pub fn intern(&mut self, name: &Arc<str>) -> UserIdx {
        if let Some(&u) = self.by_name.get(name) {
            return u;
        }
        let u = UserIdx(self.names.len() as u32);
        self.names.push(name.clone());
        self.by_name.insert(name.clone(), u);
        u
    }

    /// The index of `name`, if they ever submitted.
    pub fn find(&self, name: &str) -> Option<UserIdx> {
        self.by_name.get(name).copied()
    }

    /// The name of user `u`.
    pub fn name(&self, u: UserIdx) -> &str {
        self.names.get(u.ix()).map_or("?", |n| n)
    }
}

/// What one running task is charged to its queue and user.
#[derive(Clone, Debug)]
pub struct Charge {
    /// Its job's queue and owner.
    pub queue: QueueIdx,
    /// Its job's owner.
    pub user: UserIdx,
    /// Its job.
    pub job: Entity,
    /// Its request over the table's dimensions.
    pub req: Vec<u64>,
    /// Its job's account and what it holds there.
    pub account: crate::accounts::usage::AccountCharge,
}

/// What each queue and each user in it holds now: the sum of its running tasks' requests.
#[derive(Debug, Default, Resource)]
pub struct QueueUse {
    /// The queue table generation these sums belong to (`None`: to be rebuilt).
    pub generation: Option<u64>,
    /// Per queue, per dimension.
    pub used: Vec<Vec<u64>>,
    /// Per queue: jobs with a task running.
    pub running_jobs: Vec<u32>,
    /// Per (queue, user), per dimension.
    pub by_user: BTreeMap<(QueueIdx, UserIdx), Vec<u64>>,
    /// By task entity: what it is charged (iterated only to rebuild).
    charged: HashMap<Entity, Charge>,
    /// Per job: its running tasks, while it has any.
    tasks_of: HashMap<Entity, u32>,
    /// (queue, user) pairs whose use changed since fair share last looked.
    pub changed: BTreeSet<(QueueIdx, UserIdx)>,
    /// What each account and everything below it runs.
    pub accounts: crate::accounts::usage::AccountUse,
    /// Per (account, user) association (the account by position in the table's
    /// accounts), per dimension: what its running tasks hold (Fair Tree's usage).
    pub by_association: BTreeMap<(usize, UserIdx), Vec<u64>>,
    /// Associations whose use changed since fair share last looked.
    pub changed_associations: BTreeSet<(usize, UserIdx)>,
}

impl QueueUse {
    /// Starts over for `table`: nothing charged.
    pub fn reset(&mut self, table: &QueueTable) {
        let d = table.dims.len();
        self.generation = Some(table.generation);
        self.used = vec![vec![0; d]; table.queues.len()];
        self.running_jobs = vec![0; table.queues.len()];
        self.changed.extend(self.by_user.keys().copied());
        self.by_user.clear();
        self.changed_associations.extend(self.by_association.keys().copied());
        self.by_association.clear();
        self.charged.clear();
        self.tasks_of.clear();
        self.accounts.reset(&table.accounts);
    }

    /// Whether `task` is charged.
    pub fn is_charged(&self, task: Entity) -> bool {
        self.charged.contains_key(&task)
    }

    /// Charges `task` (once: a second charge is ignored).
    pub fn charge(&mut self, task: Entity, c: Charge) {
        if self.charged.contains_key(&task) {
            return;
        }
        let q = c.queue.ix();
        if let Some(used) = self.used.get_mut(q) {
            add(used, &c.req);
        }
        add(
            self.by_user
                .entry((c.queue, c.user))
                .or_insert_with(|| vec![0; c.req.len()]),
            &c.req,
        );
        let n = self.tasks_of.entry(c.job).or_insert(0);
        *n += 1;
        let first = *n == 1;
        if first && let Some(r) = self.running_jobs.get_mut(q) {
            *r += 1;
        }
        self.accounts.charge(&c.account, first);
        if let Some(a) = c.account.account {
            add(
                self.by_association
                    .entry((a, c.user))
                    .or_insert_with(|| vec![0; c.req.len()]),
                &c.req,
            );
            self.changed_associations.insert((a, c.user));
        }
        self.changed.insert((c.queue, c.user));
        self.charged.insert(task, c);
    }

    /// Gives back what `task` was charged; whether it was.
    pub fn uncharge(&mut self, task: Entity) -> bool {
        let Some(c) = self.charged.remove(&task) else {
            return false;
        };
        let q = c.queue.ix();
        if let Some(used) = self.used.get_mut(q) {
            sub(used, &c.req);
        }
        if let Some(u) = self.by_user.get_mut(&(c.queue, c.user)) {
            sub(u, &c.req);
            if u.iter().all(|v| *v == 0) {
                self.by_user.remove(&(c.queue, c.user));
            }
        }
        let mut last = false;
        if let Some(n) = self.tasks_of.get_mut(&c.job) {
            *n -= 1;
            if *n == 0 {
                last = true;
                self.tasks_of.remove(&c.job);
                if let Some(r) = self.running_jobs.get_mut(q) {
                    *r = r.saturating_sub(1);
                }
            }
        }
        self.accounts.uncharge(&c.account, last);
        if let Some(a) = c.account.account {
            if let Some(u) = self.by_association.get_mut(&(a, c.user)) {
                sub(u, &c.req);
                if u.iter().all(|v| *v == 0) {
                    self.by_association.remove(&(a, c.user));
                }
            }
            self.changed_associations.insert((a, c.user));
        }
        self.changed.insert((c.queue, c.user));
        true
    }

    /// What `user` uses in queue `q` (zeros when nothing).
    pub fn of_user(&self, q: QueueIdx, user: UserIdx) -> Option<&[u64]> {
        self.by_user.get(&(q, user)).map(Vec::as_slice)
    }

    /// What `user` uses charged to account `a` (by position in the table's accounts).
    pub fn of_association(&self, a: usize, user: UserIdx) -> Option<&[u64]> {
        self.by_association.get(&(a, user)).map(Vec::as_slice)
    }

    /// Whether job `job` has a task running.
    pub fn is_running(&self, job: Entity) -> bool {
        self.tasks_of.contains_key(&job)
    }
}

fn add(a: &mut [u64], b: &[u64]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = x.saturating_add(*y);
    }
}

fn sub(a: &mut [u64], b: &[u64]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = x.saturating_sub(*y);
    }
}
