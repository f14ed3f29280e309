//! The order of the allocate walk: Slurm's multifactor priority, queue first. A pending
//! job's key is its queue's `priority`, then its priority class's `value`, then its score
//!
//! ```text
//! score = weightPriority · priority          (the job's own; ≤ 0 for plain users)
//!       + weightFairshare · fairshare        (0..1, see `fairshare`; with `[fairshare]
//!                                             tree = "accounts"` the queue's factor
//!                                             times the association's Fair Tree factor)
//!       + weightAge · min(age / maxAge, 1)   (age: seconds since submit)
//!       + weightSize · size                  (0..1: its CPUs over the cluster's)
//! ```
//!
//! higher first; ties by submit time, then job id. Every `[priority] recalcInterval` the
//! `rank` system works every waiting job's factors out again (age grows, usage moves), and
//! the reservations are made again against the new order; between two recalculations
//! the order stands, and a job submitted meanwhile gets its key at once.

use std::cmp::Reverse;

use bevy_ecs::prelude::*;

use crate::cache::capacity::Capacity;
use crate::config::FairshareTree;
use crate::config::PlannerConfig;
use crate::fairshare::tree::FairTree;
use crate::fairshare::{Shares, Usage};
use crate::model::components::{Job, JobId, JobPhase, JobQueue, JobState, Retired};
use crate::model::tick::Now;
use crate::queues::{QueueTable, Users};
use crate::topology::TopologyIndex;

/// A job's factors and the score they make, as of `at`.
#[derive(Component, Clone, Copy, Debug, Default, PartialEq)]
pub struct Rank {
    /// Its queue's priority (compared first).
    pub queue_priority: i32,
    /// Its priority class's value (compared next; 0 without one).
    pub class: i32,
    /// The weighted sum, in thousandths of a point.
    pub score: i64,
    /// The job's own priority.
    pub job: i32,
    /// Fair-share factor, 0 to 1.
    pub fairshare: f64,
    /// Age factor, 0 to 1.
    pub age: f64,
    /// Size factor, 0 to 1.
    pub size: f64,
    /// When they were worked out (Unix seconds); `None`: not yet.
    pub at: Option<u64>,
}

/// A job's place in the walk: smaller goes first.
pub type OrderKey = (Reverse<i32>, Reverse<i32>, Reverse<i64>, u64, u64);

impl Rank {
    /// The walk's key of the job with this rank, submitted at `submit`, numbered `id`.
    pub fn key(&self, submit: u64, id: JobId) -> OrderKey {
        (
            Reverse(self.queue_priority),
            Reverse(self.class),
            Reverse(self.score),
            submit,
            id.0,
        )
    }
}

/// When the order was last worked out, and how often it was.
#[derive(Debug, Default, Resource)]
pub struct OrderState {
    /// Bumped at every recalculation: reservations made for the old order are redone.
    pub generation: u64,
    /// When every job was last ranked (Unix seconds).
    pub recalc_at: Option<u64>,
    /// The queue table generation of that.
    pub table_generation: Option<u64>,
}

/// Ranks new jobs, and every waiting job each `recalcInterval` or after a queue reload.
#[allow(clippy::too_many_arguments)]
pub fn rank(
    config: Res<PlannerConfig>,
    table: Res<QueueTable>,
    usage: Res<Usage>,
    users: Res<Users>,
    mut tree: ResMut<FairTree>,
    cap: Res<Capacity>,
    index: Res<TopologyIndex>,
    now: Res<Now>,
    mut state: ResMut<OrderState>,
    mut jobs: Query<(&Job, &JobState, &JobQueue, &mut Rank), Without<Retired>>,
    fresh: Query<Entity, (Added<Job>, Without<Retired>)>,
) {
    let _span = tracing::info_span!("rank").entered();
    let now = now.secs();
    let p = &config.priority;
    let all = state.table_generation != Some(table.generation)
        || state
            .recalc_at
            .is_none_or(|t| now >= t.saturating_add(p.recalc_interval.max(1)));
    // A tick with nothing to rank costs nothing (the shares below read every waiting job).
    if !all && fresh.is_empty() {
        return;
    }
    let half_life = config.fairshare.half_life;
    let waiting = jobs
        .iter()
        .filter(|(_, st, _, _)| st.phase == JobPhase::Pending)
        .map(|(_, _, jq, _)| (jq.queue, jq.user));
    let shares = Shares::at(&usage, &table, now, half_life, waiting);
    let by_tree = config.fairshare.tree == FairshareTree::Accounts;
    if by_tree {
        // Fair Tree ranks every association at once: again only when the tree or usage
        // changed, a waiting association is new, or the order is recalculated.
        let waiting = || {
            jobs.iter()
                .filter(|(_, st, _, _)| st.phase == JobPhase::Pending)
                .filter_map(|(job, _, jq, _)| Some((table.account_of(job.spec.account.as_deref())?, jq.user)))
        };
        if all || tree.stale(table.generation, usage.epoch, waiting()) {
            let mut now_usage: std::collections::BTreeMap<_, f64> = usage
                .associations
                .iter()
                .map(|(&k, a)| (k, a.at(now, half_life)))
                .collect();
            for k in waiting() {
                now_usage.entry(k).or_insert(0.0);
            }
            tree.update(table.generation, usage.epoch, &table.accounts, &users, &now_usage);
        }
    }
    let cpu_dim = cap.dims.iter().position(|d| d == hyperplan_shared::CPU);
    let cluster_cpu = cpu_dim.map_or(0, |k| {
        cap.hn_alloc.get(index.root.ix() * cap.d + k).copied().unwrap_or(0)
    });
    let one = |job: &Job, st: &JobState, jq: &JobQueue, r: &mut Rank| {
        let waiting = match st.phase {
            JobPhase::Pending | JobPhase::Rejected => true,
            JobPhase::Running => st.verdict.is_none(),
            JobPhase::Ending | JobPhase::Finished | JobPhase::Cancelled => false,
        };
        if !waiting && r.at.is_some() {
            return;
        }
        let spec = &job.spec;
        let fairshare = if by_tree {
            // The queue's factor among queues stays; the user's within it is Fair Tree's.
            shares.queue_factor.get(jq.queue.ix()).copied().unwrap_or(1.0)
                * tree.factor(table.account_of(spec.account.as_deref()), jq.user)
        } else {
            shares.factor(&usage, jq.queue, jq.user, now, half_life)
        };
        let age = if p.max_age == 0 {
            1.0
        } else {
            (now.saturating_sub(spec.submit_time) as f64 / p.max_age as f64).min(1.0)
        };
        let cpus = job.cpus;
        let size = if cluster_cpu == 0 {
            0.0
        } else {
            (cpus as f64 / cluster_cpu as f64).min(1.0)
        };
        let score = p.weight_priority * f64::from(spec.priority)
            + p.weight_fairshare * fairshare
            + p.weight_age * age
            + p.weight_size * size;
        *r = Rank {
            queue_priority: table.get(jq.queue).priority,
            class: config.preemption.of(spec.priority_class.as_deref()).0,
            score: (score * 1000.0).round() as i64,
            job: spec.priority,
            fairshare,
            age,
            size,
            at: Some(now),
        };
    };
    if all {
        for (job, st, jq, mut r) in &mut jobs {
            one(job, st, jq, &mut r);
        }
        state.generation += 1;
        state.recalc_at = Some(now);
        state.table_generation = Some(table.generation);
    } else {
        for e in &fresh {
            if let Ok((job, st, jq, mut r)) = jobs.get_mut(e) {
                one(job, st, jq, &mut r);
            }
        }
    }
}
