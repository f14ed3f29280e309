//! The worksheet of one job for one allocation attempt, and gang readiness (Volcano's
//! gang plugin: JobReady, SubJobReady, required sub-jobs, sub-job order).

use bevy_ecs::prelude::Entity;

use crate::cache::capacity::Shape;
use crate::model::ids::{HnIdx, NodeIdx};
use crate::numa::assign::{Assignment, TaskNuma};

/// One task of the job and where it is placed.
#[derive(Clone, Debug)]
pub struct TaskSlot {
    /// The task's entity.
    pub entity: Entity,
    /// Index of its task spec in the job (into `JobCtx::shapes`, `numa`, `role_names`).
    pub role: usize,
    /// Its node: running, finished or placed in this attempt; `None` = pending.
    pub node: Option<NodeIdx>,
    /// Placed in this attempt (not yet committed to the ECS).
    pub new: bool,
    /// PUs, memory and GPUs picked in this attempt, for a role with a NUMA request.
    pub assignment: Option<std::sync::Arc<Assignment>>,
}

/// One sub-job (a partition, or the job's default sub-job) of the job.
#[derive(Clone, Debug)]
pub struct SubJobCtx {
    /// The sub-job's entity.
    pub entity: Entity,
    /// `<job>/<task>-<partition>` or `<job>`.
    pub id: String,
    /// Tasks that must be placed for the sub-job to be whole.
    pub min_available: u32,
    /// Index into `JobCtx::group_min`; `None` for the job's default sub-job.
    pub group: Option<usize>,
    /// Partition number within its partition group (0 for the default sub-job).
    pub match_index: u32,
    /// Effective hard tier limit (soft converted, tier names resolved); `None` = not hard.
    pub tier: Option<crate::topology::TierCap>,
    /// Has a network topology at all: nodes are scored by LCA, not fading.
    pub with_topology: bool,
    /// Its recorded AllocatedHyperNode; `None` = none yet.
    pub allocated: Option<HnIdx>,
    /// Indices into `JobCtx::tasks`.
    pub tasks: Vec<usize>,
    /// The segment it sits in (index into `JobCtx::sub_jobs`): placed inside the
    /// HyperNode that one picked. `None`: placed inside the job's.
    pub parent: Option<usize>,
    /// An innermost segment's number: ranks follow these in order.
    pub block: Option<u32>,
}

/// One job's worksheet for an allocation attempt: its tasks, sub-jobs and limits.
#[derive(Clone, Debug)]
pub struct JobCtx {
    /// The job's entity.
    pub entity: Entity,
    /// The job's name, for messages.
    pub name: String,
    /// Tasks that must be placed for the job to be ready (gang minimum).
    pub gang_min: u32,
    /// minPartitions per partition group.
    pub group_min: Vec<u32>,
    /// The job's effective hard tier limit, as for sub-jobs; `None` = not hard.
    pub tier: Option<crate::topology::TierCap>,
    /// Its queue's trees: per tree of the index, whether the job may go in it; `None`:
    /// any (the whole cluster).
    pub trees: Option<std::sync::Arc<Vec<bool>>>,
    /// Has a network topology at all: nodes are scored by LCA, not fading.
    pub with_topology: bool,
    /// The job's recorded AllocatedHyperNode; `None` = none yet.
    pub allocated: Option<HnIdx>,
    /// Per role (task spec): its shape and name.
    pub shapes: Vec<std::sync::Arc<Shape>>,
    /// Per role: its NUMA request (`None` = nothing to pin).
    pub numa: Vec<Option<TaskNuma>>,
    /// Per role: its task spec's name.
    pub role_names: Vec<String>,
    /// Every task of the job, in `Job::tasks` order.
    pub tasks: Vec<TaskSlot>,
    /// Every sub-job of the job, in `Job::sub_jobs` order.
    pub sub_jobs: Vec<SubJobCtx>,
}

impl JobCtx {
    /// Whether the job has partition groups (partition policies).
    pub fn has_partitions(&self) -> bool {
        !self.group_min.is_empty()
    }

    /// Whether HyperNode `h` is inside a tree the job may use (any HyperNode when its queue
    /// names no trees; never the virtual root when it does).
    pub fn in_trees(&self, index: &crate::topology::TopologyIndex, h: HnIdx) -> bool {
        match &self.trees {
            None => true,
            Some(allowed) => index.hns[h.ix()]
                .tree
                .is_some_and(|t| allowed.get(t as usize).copied().unwrap_or(false)),
        }
    }

    /// Whether segments sit inside sub-job `sj` (it is an outer segment).
    pub fn has_children(&self, sj: usize) -> bool {
        self.sub_jobs.iter().any(|s| s.parent == Some(sj))
    }

    /// Tasks placed (running, finished or placed in this attempt).
    pub fn placed(&self) -> u32 {
        self.tasks.iter().filter(|t| t.node.is_some()).count() as u32
    }

    /// Tasks not placed yet.
    pub fn pending(&self) -> impl Iterator<Item = &TaskSlot> {
        self.tasks.iter().filter(|t| t.node.is_none())
    }

    /// Placed tasks of sub-job `sj` (index into `sub_jobs`).
    pub fn sj_placed(&self, sj: usize) -> u32 {
        self.sub_jobs[sj]
            .tasks
            .iter()
            .filter(|&&t| self.tasks[t].node.is_some())
            .count() as u32
    }

    /// Indices into `tasks` of sub-job `sj`'s tasks not placed yet.
    pub fn sj_pending(&self, sj: usize) -> impl Iterator<Item = usize> + '_ {
        self.sub_jobs[sj]
            .tasks
            .iter()
            .copied()
            .filter(|&t| self.tasks[t].node.is_none())
    }

    fn sj_whole(&self, sj: usize) -> bool {
        self.sj_placed(sj) >= self.sub_jobs[sj].min_available
    }

    /// Gang minimum placed and every partition group has its minPartitions whole.
    pub fn job_ready(&self) -> bool {
        if self.placed() < self.gang_min {
            return false;
        }
        self.group_min.iter().enumerate().all(|(g, &min)| {
            let ready = (0..self.sub_jobs.len())
                .filter(|&s| self.sub_jobs[s].group == Some(g) && self.sj_whole(s))
                .count() as u32;
            ready >= min
        })
    }

    /// Volcano: without partition policies a sub-job is ready when its job is.
    pub fn sj_ready(&self, sj: usize) -> bool {
        if self.has_partitions() {
            self.sj_whole(sj)
        } else {
            self.job_ready()
        }
    }

    /// Volcano's NeedContinueAllocating: keep trying other tasks after one did not fit?
    pub fn need_continue(&self, sj: usize) -> bool {
        let s = &self.sub_jobs[sj];
        !(self.gang_min as usize >= self.tasks.len() || s.min_available as usize >= s.tasks.len())
    }

    /// Sub-jobs with pending tasks in allocation order: required ones (needed to reach a
    /// group's minPartitions) first, then not-yet-whole before whole, then match index, id.
    pub fn sub_job_order(&self) -> Vec<usize> {
        let mut ready_count = vec![0u32; self.group_min.len()];
        for s in 0..self.sub_jobs.len() {
            if let Some(g) = self.sub_jobs[s].group
                && self.sj_whole(s)
            {
                ready_count[g] += 1;
            }
        }
        let mut base: Vec<usize> = (0..self.sub_jobs.len()).collect();
        base.sort_by(|&a, &b| {
            let (x, y) = (&self.sub_jobs[a], &self.sub_jobs[b]);
            self.sj_whole(a)
                .cmp(&self.sj_whole(b))
                .then(x.match_index.cmp(&y.match_index))
                .then_with(|| x.id.cmp(&y.id))
        });
        let mut required = vec![false; self.sub_jobs.len()];
        for &s in &base {
            if let Some(g) = self.sub_jobs[s].group
                && !self.sj_whole(s)
                && ready_count[g] < self.group_min[g]
            {
                required[s] = true;
                ready_count[g] += 1;
            }
        }
        let mut order: Vec<usize> = base
            .into_iter()
            .filter(|&s| self.sj_pending(s).next().is_some())
            .collect();
        order.sort_by_key(|&s| !required[s]); // stable: keeps the base order within each class
        order
    }
}
