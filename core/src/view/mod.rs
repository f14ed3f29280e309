//! Read-only views of the world for people and scripts: the job reports `hyperplan
//! simulate` prints and `hyperplan status` shows, the node list, the HyperNode tree and
//! the explanation of a job's gradient search, the HyperNodes as manifests, the queues. Nothing here changes the world: every view takes `&World`.

mod explain;
pub mod gauges;
mod hypernodes;
mod jobs;
mod manifests;
mod nodes;
mod queues;
mod ranks;
mod stored;

pub use explain::{explain, explain_naming};
pub use hypernodes::hyper_node_tree;
pub(crate) use jobs::{job_heads, job_tasks};
pub use jobs::{job_report, job_reports, newest_of_each_name};
pub use manifests::resolved_specs;
pub use nodes::node_statuses;
pub use queues::{queue_statuses, queue_statuses_showing};
pub use ranks::{hyper_nodes_of, job_ranks};
pub use stored::stored_report;
pub(crate) use stored::{stored_head, stored_tasks};

use hyperplan_shared::report::JobReport;
use hyperplan_shared::status::{Explanation, HyperNodeTree, NodeStatus, QueuesReport};

use crate::Planner;
use crate::model::commands::Placement;

/// A read-only query over `world`, without `&mut World`: every component is registered
/// when the planner is made (`model::components::register`), so the state can always be
/// built; `None` only for a component no entity ever had, of which a view sees nothing.
fn read<D: bevy_ecs::query::QueryData>(world: &bevy_ecs::world::World) -> Option<bevy_ecs::query::QueryState<D>> {
    world.try_query::<D>()
}

/// The views as the planner's own answers: what drivers and tests ask of it, without
/// reaching into its world.
impl Planner {
    /// Every node, by name (`hyperplan nodes`).
    pub fn nodes(&self) -> Vec<NodeStatus> {
        node_statuses(self.world())
    }

    /// The HyperNode tree (`hyperplan hypernodes`).
    pub fn hyper_nodes(&self) -> HyperNodeTree {
        hyper_node_tree(self.world())
    }

    /// What `/metrics` reports of the cluster now (see [`gauges`]).
    pub fn gauges(&self) -> gauges::Gauges {
        gauges::gauges(self.world())
    }

    /// Every queue with its use and fair share (`hyperplan queues`).
    pub fn queues(&self) -> QueuesReport {
        queue_statuses(self.world())
    }

    /// Every queue as `caller` may read it: under `privateData` a plain user gets the
    /// queues' totals and their own share only (`hyperplan queues`).
    pub fn queues_for(&self, caller: crate::caller::Caller<'_>) -> QueuesReport {
        queue_statuses_showing(self.world(), |user| caller.sees_user(user))
    }

    /// Every job the world holds, as `hyperplan status --all` reports it.
    pub fn jobs(&self) -> Vec<JobReport> {
        job_reports(self.world())
    }

    /// As [`Planner::explain`], for `caller`: under `privateData` the other jobs it
    /// names (its preemption's victims, the job that preempted it, a reservation's job)
    /// are named only where `caller` may see them.
    pub fn explain_for(&self, name: &str, caller: crate::caller::Caller<'_>) -> Option<Explanation> {
        let other = |n: &str| caller.job_name(n, |o| self.sees_job(o, caller));
        let mut e = explain_naming(self.world(), name, &other)?;
        self.hide_other_jobs(caller, &mut e.job);
        Some(e)
    }

    /// The newest job of that name.
    pub fn job(&self, name: &str) -> Option<JobReport> {
        job_report(self.world(), name)
    }

    /// Why the job is where it is, or why it waits (`hyperplan explain`).
    pub fn explain(&self, name: &str) -> Option<Explanation> {
        explain(self.world(), name)
    }

    /// The placed tasks on `node` that have not started: Launches to send again when its
    /// agent registers.
    pub fn unstarted_on(&self, node: &str) -> Vec<Placement> {
        crate::dispatch::unstarted_on(self.world(), node)
    }

    /// A running job's ranks and their nodes, by rank (what a `Job` frame tells agents).
    pub fn job_ranks(&self, job: &str) -> Option<Vec<(u32, std::sync::Arc<str>)>> {
        job_ranks(self.world(), job)
    }

    /// How many times lost tasks of job `job` were started again elsewhere (its tasks'
    /// `HYPERPLAN_RESTART`); `None` for no job of that name.
    pub fn job_restarts(&self, job: &str) -> Option<u32> {
        let world = self.world();
        let &e = world.resource::<crate::names::JobNames>().0.get(job)?;
        world.get::<crate::model::components::JobState>(e).map(|st| st.restarts)
    }

    /// The nodes running job `job` (id `job_id`), sorted; `None` when no live job of that
    /// name has that id (PMI fences go only to a job's own nodes).
    pub fn job_nodes(&self, job: &str, job_id: hyperplan_shared::ids::JobId) -> Option<Vec<std::sync::Arc<str>>> {
        ranks::job_nodes(self.world(), job, job_id)
    }

    /// The HyperNodes `node` belongs to, lowest tier first (a task's `HYPERPLAN_*` hints).
    pub fn hyper_nodes_of(&self, node: &str) -> Vec<String> {
        hyper_nodes_of(self.world(), node)
    }

    /// Every invariant the world breaks now (nothing given twice, gangs whole, hard tier
    /// limits kept, …); empty when all hold. For tests and `--check`-style tools.
    pub fn violations(&mut self) -> Vec<String> {
        crate::invariants::check(self.world_mut())
    }
}
