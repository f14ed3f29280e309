//! `hyperplan exec` as the driver sees it: the core says who may and where
//! (`Planner::authorize_exec`); the driver adds each node's link and the frame that
//! starts the command there, and hands that to the exec session, which carries the bytes
//! (`server::exec`).

use hyperplan_core::model::jobstate::StepEnd;
use hyperplan_core::requests::exec::{ExecWhere, ExecWho};
use hyperplan_net::messages::{ExecNodes, ExecRequest, ExecStart, TaskRef};

use super::Driver;
use crate::server::inbox::{ExecAsk, ExecCaller, ExecPlan, ExecRefused, StepEnded};
use hyperplan_core::caller::Caller;

impl Driver {
    pub(super) fn step_ended(&mut self, ended: StepEnded) {
        let StepEnded { job, job_id, step, end } = ended;
        if self.planner.end_step(&job, job_id, step, end, self.clock.now_secs()) {
            self.dirty = true; // written at the next commit
        }
    }

    pub(super) fn exec(&mut self, ask: ExecAsk) {
        let ExecAsk { caller, request, reply } = ask;
        if self.dirty {
            self.tick(); // from a world that has seen everything received
        }
        let plan = self.plan_exec(&caller, &request);
        let step = plan
            .as_ref()
            .ok()
            .and_then(|p| Some((p.job.clone(), p.job_id, p.step?)));
        if reply.send(plan).is_err()
            && let Some((job, job_id, step)) = step
        {
            // Its session went away before it was told: the step ends as it began.
            self.step_ended(StepEnded {
                job,
                job_id,
                step,
                end: StepEnd::default(),
            });
        }
    }

    fn plan_exec(&mut self, caller: &ExecCaller, request: &ExecRequest) -> Result<ExecPlan, ExecRefused> {
        let nodes = match &request.nodes {
            ExecNodes::Rank0 => ExecWhere::Rank0,
            ExecNodes::Node(n) => ExecWhere::Node(n),
            ExecNodes::All => ExecWhere::All,
        };
        let no_groups: [String; 0] = [];
        let who = match caller {
            ExecCaller::Person { user, admin } => ExecWho::Person(Caller {
                user,
                admin: *admin,
                private_data: self.private_data,
                groups: &no_groups,
            }),
            ExecCaller::Task { .. } => match request.credential.as_deref() {
                Some(c) => ExecWho::Credential(c),
                None => return Err(ExecRefused::NoCredential),
            },
        };
        let target = self.planner.authorize_exec(&request.job, nodes, who)?;
        if let ExecCaller::Task { node } = caller {
            // A credential is good only on the job's own nodes.
            if !self
                .planner
                .job_nodes(&target.job, target.job_id)
                .is_some_and(|ns| ns.iter().any(|n| **n == **node))
            {
                return Err(ExecRefused::NotJobsNode {
                    node: node.clone(),
                    job: target.job,
                });
            }
        }
        let mut conns = Vec::with_capacity(target.places.len());
        for place in &target.places {
            match self.links.get(&place.node).and_then(|l| l.quic()) {
                Some(conn) => conns.push(conn),
                None => return Err(ExecRefused::NotConnected(place.node.clone())),
            }
        }
        // A step of the job, numbered and kept with it (committed at the next tick).
        let nodes: Vec<String> = target.places.iter().map(|p| p.node.clone()).collect();
        let step = self
            .planner
            .begin_step(&target.job, target.job_id, nodes, &request.argv, self.clock.now_secs());
        self.dirty = true;
        let mut plan = ExecPlan {
            job: target.job.clone(),
            job_id: target.job_id,
            nodes: Vec::new(),
            step,
            targets: Vec::new(),
        };
        for (place, conn) in target.places.into_iter().zip(conns) {
            let start = ExecStart {
                task: TaskRef {
                    job: target.job.clone(),
                    job_id: target.job_id,
                    task: place.task,
                    index: place.index,
                },
                user: target.user.clone(),
                argv: request.argv.clone(),
                shell: request.shell,
                epoch: self.epoch,
                step,
            };
            plan.nodes.push(place.node);
            plan.targets.push((conn, start));
        }
        Ok(plan)
    }
}
