//! People's requests (`hyperplan submit`, `status`, `cancel`, `logs`, …) handed to the
//! core's answers (`core::requests`, the views); what changes state is answered once it
//! is committed. A submitted file arrives read into jobs (`server::submission` parses it
//! on its connection's task). The only thing decided here is how an answer is encoded.

use std::net::SocketAddr;

use hyperplan_core::caller::Caller;
use hyperplan_core::jobs::ownership::CancelError;
use hyperplan_core::requests::hold::HoldError;
use hyperplan_core::requests::nodes::NodeAdminError;
use hyperplan_core::requests::status::{StatusError, StatusQuery};
use hyperplan_core::requests::submit::SubmitRefused;
use hyperplan_core::view;
use hyperplan_net::messages::{NodeAction, RequestCommand, ResponseError, TaskRef};
use hyperplan_shared::status::{Cancelled, HoldsChanged, LogPiece, Manifests, NodeList, Submitted};
use serde_json::Value;
use tokio::sync::oneshot;

use super::Driver;
use crate::server::inbox::{Asked, Request, Submission};
use crate::store::writer::After;

impl Driver {
    pub(super) fn request(&mut self, r: Request) {
        let Request {
            user,
            admin,
            groups,
            peer,
            asked,
            reply,
        } = r;
        let caller = Caller {
            user: &user,
            admin,
            private_data: self.private_data,
            groups: &groups,
        };
        let command = match asked {
            Asked::Submit(submission) => {
                // Answered once it is on disk.
                let answer = self.submit(caller, submission);
                self.work.after.push(After::Reply(reply, answer));
                return;
            }
            Asked::Command(command) => command,
        };
        if self.dirty {
            self.tick(); // answer from a world that has seen everything received
        }
        // What changes state is answered once it is on disk.
        let durable = matches!(
            command,
            RequestCommand::Cancel { .. }
                | RequestCommand::Hold { .. }
                | RequestCommand::Release { .. }
                | RequestCommand::NodeAdmin { .. }
        );
        if let RequestCommand::Logs {
            job,
            task,
            stderr,
            offset,
            max_bytes,
            node,
        } = command
        {
            let asked = match self
                .planner
                .authorize_logs(&job, task.as_deref(), node.as_deref(), caller)
            {
                Ok(t) => t,
                Err(e) => {
                    let _ = reply.send(Err(ResponseError::new(e.to_string())));
                    return;
                }
            };
            let piece = LogPiece {
                job: asked.job.clone(),
                task: asked.task.clone(),
                node: asked.node,
                offset,
                ended: asked.ended,
                ..Default::default()
            };
            let task = TaskRef {
                job: asked.job,
                job_id: asked.job_id,
                task: asked.task,
                index: asked.index,
            };
            let link = self.links.get(&piece.node).map(|l| &l.frames);
            self.logs.ask(link, task, asked.step, stderr, max_bytes, piece, reply);
            return;
        }
        if let RequestCommand::History(_) | RequestCommand::Report(_) = command {
            self.accounting_question(caller, command, reply);
            return;
        }
        let answer = self.answer(caller, peer, command);
        if durable {
            self.work.after.push(After::Reply(reply, answer));
        } else {
            let _ = reply.send(answer);
        }
    }

    fn answer(
        &mut self,
        caller: Caller<'_>,
        peer: SocketAddr,
        command: RequestCommand,
    ) -> Result<Value, ResponseError> {
        let user = caller.user;
        match command {
            // Read into jobs before the driver (see `server::submission`).
            RequestCommand::Submit { .. } => Err("submit: its file is read on its connection's task".into()),
            RequestCommand::Cancel { job, grace_secs } => {
                if let Err(e) = self.planner.cancel(&job, grace_secs, caller) {
                    if let CancelError::NotOwner { owner, .. } | CancelError::Hidden { owner, .. } = &e {
                        tracing::warn!(%peer, user, job, owner, "refused: cancel of another user's job");
                    }
                    return Err(e.to_string().into());
                }
                // Not yet done: its record is committed, then it is answered and its kills
                // go out (a planner that cannot commit stops first, and nothing is killed).
                tracing::info!(user, job, "cancel accepted");
                self.tick();
                to_value(&Cancelled { cancelled: job })
            }
            RequestCommand::Hold { jobs } | RequestCommand::Release { jobs } if jobs.is_empty() => {
                Err("name at least one job".into())
            }
            RequestCommand::Hold { jobs } => {
                let done = self.planner.hold(&jobs, caller);
                self.holds_changed(done, caller, peer, "held", jobs)
            }
            RequestCommand::Release { jobs } => {
                let done = self.planner.release(&jobs, caller);
                self.holds_changed(done, caller, peer, "released", jobs)
            }
            RequestCommand::Status {
                job,
                all,
                since_secs,
                page,
            } => {
                let query = StatusQuery {
                    job,
                    all,
                    since_secs,
                    page,
                    max_bytes: Some(self.reply_budget),
                };
                let store = &self.store;
                match self
                    .planner
                    .status(query, caller, self.clock.now_ms(), |cutoff| store.finished(cutoff))
                {
                    Ok(list) => to_value(&list),
                    Err(e @ StatusError::NoSuchJob(_)) => Err(e.to_string().into()),
                    Err(StatusError::Store(e)) => Err(e.to_string().into()),
                }
            }
            RequestCommand::Nodes => {
                let mut nodes = self.planner.nodes();
                // Display only: what each node's current link said at Register.
                for n in &mut nodes {
                    n.confinement = self
                        .links
                        .get(&n.name)
                        .and_then(|l| l.confinement)
                        .map(|c| c.as_str().to_string());
                }
                to_value(&NodeList { nodes })
            }
            RequestCommand::NodeAdmin { action, nodes } => {
                let changed = match &action {
                    NodeAction::Drain { reason, now } => {
                        self.planner
                            .drain_nodes(&nodes, reason.clone(), *now, caller, self.clock.now_secs())
                    }
                    NodeAction::Resume => self.planner.resume_nodes(&nodes, caller),
                    NodeAction::Remove => self.planner.remove_nodes(&nodes, caller),
                };
                match changed {
                    Ok(c) => {
                        tracing::info!(user, action = c.action, ?nodes, ?action, "nodes changed");
                        // Applied, and its record in this commit, before the answer.
                        self.tick();
                        to_value(&c)
                    }
                    Err(e) => {
                        if matches!(e, NodeAdminError::NotAdmin { .. }) {
                            tracing::warn!(%peer, user, ?nodes, "refused: a node change by a non-admin");
                        }
                        Err(e.to_string().into())
                    }
                }
            }
            RequestCommand::HyperNodes => to_value(&self.planner.hyper_nodes()),
            RequestCommand::Queues => to_value(&self.planner.queues_for(caller)),
            RequestCommand::Manifests => {
                let specs = view::resolved_specs(self.planner.index());
                to_value(&Manifests {
                    manifests: hyperplan_shared::hypernode::to_hypernode_manifests(&specs),
                })
            }
            RequestCommand::Logs { .. } => Err("logs: answered by the relay".into()),
            RequestCommand::Exec(_) => Err("exec: answered by its session".into()),
            RequestCommand::Planners => to_value(&hyperplan_shared::status::PlannerInfo {
                role: "leader".into(),
                epoch: self.epoch,
                leader: Some(self.advertise.clone()),
                store: self.describe.clone(),
                accounting: self.accounting.as_ref().map(|a| a.status.info()),
            }),
            RequestCommand::History(_) | RequestCommand::Report(_) => Err("answered by accounting's reader".into()),
            RequestCommand::Explain { job: asked } => {
                // An array: its first waiting element.
                let job = self.planner.explained_job(&asked);
                // Under privateData another user's job is answered as a missing one.
                let seen = self.planner.sees_job(&job, caller);
                match seen.then(|| self.planner.explain_for(&job, caller)).flatten() {
                    Some(e) => to_value(&e),
                    None => Err(format!("no job named {asked:?}").into()),
                }
            }
        }
    }
}

impl Driver {
    /// A submitted file's jobs, admitted by the core (owners, queues, limits, dependencies)
    /// and in this commit, or its refusal naming the file.
    fn submit(&mut self, caller: Caller<'_>, submission: Submission) -> Result<Value, ResponseError> {
        let Submission { file_name, jobs } = submission;
        let user = caller.user;
        let admitted = match self.planner.submit(jobs, caller, self.clock.now_ms()) {
            Ok(a) => a,
            Err(SubmitRefused::Check(e)) => {
                if !matches!(e, hyperplan_core::jobs::ownership::SubmitError::Name(_)) {
                    tracing::warn!(user, "refused a submission: {e}");
                }
                return Err(format!("{file_name}: {e}").into());
            }
            Err(
                e @ (SubmitRefused::Queue(_)
                | SubmitRefused::Account(_)
                | SubmitRefused::User { .. }
                | SubmitRefused::Dependency(_)
                | SubmitRefused::ArrayTooLarge { .. }),
            ) => {
                return Err(format!("{file_name}: {e}").into());
            }
            Err(e @ SubmitRefused::Encode { .. }) => return Err(e.to_string().into()),
        };
        let mut names = Vec::with_capacity(admitted.len());
        let mut ids = Vec::with_capacity(admitted.len());
        for a in admitted {
            // Committed before the answer (see `flush`).
            self.work.batch.jobs.push(a.record);
            names.push(a.name);
            ids.push(a.id.0);
        }
        tracing::info!(user, jobs = ?names, ids = ?ids, "submitted");
        self.dirty = true;
        to_value(&Submitted { submitted: names, ids })
    }
}

impl Driver {
    /// `history` and `report`: narrowed to the caller's own jobs where `privateData`
    /// says so, then handed to accounting's reader, which answers.
    fn accounting_question(
        &mut self,
        caller: Caller<'_>,
        command: RequestCommand,
        reply: oneshot::Sender<Result<Value, ResponseError>>,
    ) {
        let Some(a) = &self.accounting else {
            let _ = reply.send(Err(ResponseError::new(
                "accounting is off on this planner ([accounting] enabled = false in planner.toml)",
            )));
            return;
        };
        let own_only = caller.private_data && !caller.admin;
        let others = |users: &[String]| users.iter().any(|u| u != caller.user);
        let ask = match command {
            RequestCommand::History(mut q) => {
                if own_only {
                    if others(&q.users) {
                        let _ = reply.send(Err(ResponseError::new(format!(
                            "privateData: you see your own jobs only (user {}); an admin sees everyone's",
                            caller.user
                        ))));
                        return;
                    }
                    q.users = vec![caller.user.to_string()];
                }
                crate::accounting::reader::Ask::History(q, reply)
            }
            RequestCommand::Report(mut q) => {
                if own_only {
                    if others(&q.users) {
                        let _ = reply.send(Err(ResponseError::new(format!(
                            "privateData: your reports count your own jobs only (user {}); an admin's count everyone's",
                            caller.user
                        ))));
                        return;
                    }
                    q.users = vec![caller.user.to_string()];
                }
                crate::accounting::reader::Ask::Report(q, reply)
            }
            _ => return,
        };
        a.reader.ask(ask);
    }

    /// The answer to a hold or release: applied, and its records in this commit, before
    /// the answer; a refusal of another user's job is logged.
    fn holds_changed(
        &mut self,
        done: Result<(), HoldError>,
        caller: Caller<'_>,
        peer: SocketAddr,
        action: &str,
        jobs: Vec<String>,
    ) -> Result<Value, ResponseError> {
        let user = caller.user;
        if let Err(e) = done {
            if let Some(owner) = e.other_owner() {
                tracing::warn!(%peer, user, ?jobs, owner, "refused: {action} of another user's job");
            }
            return Err(e.to_string().into());
        }
        tracing::info!(user, ?jobs, action, "holds changed");
        self.tick();
        to_value(&HoldsChanged {
            action: action.to_string(),
            jobs,
        })
    }
}

fn to_value<T: serde::Serialize>(v: &T) -> Result<Value, ResponseError> {
    serde_json::to_value(v).map_err(|e| ResponseError::new(format!("encoding the reply: {e}")))
}
