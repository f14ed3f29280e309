//! An admin's `hyperplan nodes drain|resume|remove`: who may (admins only), which nodes
//! exist, and whether a node may be removed are decided here; the change is queued for
//! the next tick (`nodes::drain` applies it and writes the drains to the store).

use std::collections::BTreeSet;

use hyperplan_shared::status::{NodeChange, NodesChanged};

use crate::Planner;
use crate::caller::Caller;
use crate::model::awaiting::StandIn;
use crate::model::components::{Job, Node};
use crate::model::drain::{Drain, Drains, MAX_REASON_BYTES};
use crate::model::events::Event;
use crate::model::health::Heartbeats;
use crate::names::NodeNames;
use crate::nodes::drain::running_on;

/// Why a drain, resume or remove was refused (nothing was changed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeAdminError {
    /// The caller's certificate is not an admin's.
    #[error(
        "only an admin may {action} nodes: the certificate of {user:?} has the role user (use an admin's certificate, made with `hyperplan certs issue --user NAME --role admin`)"
    )]
    NotAdmin {
        /// `drain`, `resume` or `remove`.
        action: &'static str,
        /// The caller's name.
        user: String,
    },
    /// No node was named.
    #[error("name at least one node to {0}")]
    NoNodes(&'static str),
    /// A name the planner does not know.
    #[error("no node named {name:?}: the planner knows {known} node(s) (`hyperplan nodes` lists them)")]
    NoSuchNode {
        /// The name asked for.
        name: String,
        /// How many nodes it knows.
        known: usize,
    },
    /// `--reason` too long or with control characters.
    #[error("the reason must be at most {MAX_REASON_BYTES} bytes without control characters, got {0:?}")]
    Reason(String),
    /// `remove` of a node that still runs tasks.
    #[error(
        "node {name} runs {tasks} task(s) (of {jobs}): wait for them to end, or end them with `hyperplan nodes drain --now {name}`, then remove it"
    )]
    Busy {
        /// The node.
        name: String,
        /// How many tasks run on it.
        tasks: usize,
        /// Their jobs, by name, comma-separated.
        jobs: String,
    },
    /// `remove` of a node that is neither drained nor without its agent.
    #[error(
        "node {0} is not drained and its agent is connected: drain it first (`hyperplan nodes drain {0}`), or stop its agent, then remove it"
    )]
    InUse(String),
}

impl Planner {
    /// Drains `nodes` for `caller` (an admin) at `at` (Unix seconds): they take no new
    /// task from the next tick on; with `now`, their running tasks end as a lost node's
    /// do. Draining a drained node again replaces its reason.
    pub fn drain_nodes(
        &mut self,
        nodes: &[String],
        reason: Option<String>,
        now: bool,
        caller: Caller<'_>,
        at: u64,
    ) -> Result<NodesChanged, NodeAdminError> {
        let names = self.check_nodes("drain", nodes, caller)?;
        if let Some(r) = &reason
            && (r.len() > MAX_REASON_BYTES || r.chars().any(char::is_control))
        {
            return Err(NodeAdminError::Reason(hyperplan_shared::names::shorten(r, 80)));
        }
        let reason = reason.filter(|r| !r.trim().is_empty());
        let nodes = names
            .iter()
            .map(|name| {
                let tasks = self.node_entity(name).map_or(0, |e| running_on(&self.world, e).len());
                let note = match (tasks, now) {
                    (0, _) => "drained: it runs no task".to_string(),
                    (n, false) => format!("draining: {n} task(s) run on until they end"),
                    (n, true) => format!("drained: its {n} task(s) end now, as a lost node's would"),
                };
                NodeChange {
                    name: name.clone(),
                    note,
                }
            })
            .collect();
        self.push(Event::Drain {
            nodes: names,
            drain: Drain {
                reason,
                by: caller.user.to_string(),
                since: at,
                by_health: false,
            },
            now,
        });
        Ok(NodesChanged {
            action: "drain".into(),
            nodes,
        })
    }

    /// Resumes `nodes` for `caller` (an admin): they take tasks again.
    pub fn resume_nodes(&mut self, nodes: &[String], caller: Caller<'_>) -> Result<NodesChanged, NodeAdminError> {
        let names = self.check_nodes("resume", nodes, caller)?;
        let drains = self.world.resource::<Drains>();
        let nodes = names
            .iter()
            .map(|name| NodeChange {
                name: name.clone(),
                note: if drains.nodes.contains_key(name) {
                    "resumed: it takes tasks again".into()
                } else {
                    "was not drained".into()
                },
            })
            .collect();
        self.push(Event::Resume { nodes: names });
        Ok(NodesChanged {
            action: "resume".into(),
            nodes,
        })
    }

    /// Removes `nodes` for `caller` (an admin): each must run no task, and be drained or
    /// have no agent connected. Its agent, if it registers again, joins anew.
    pub fn remove_nodes(&mut self, nodes: &[String], caller: Caller<'_>) -> Result<NodesChanged, NodeAdminError> {
        let names = self.check_nodes("remove", nodes, caller)?;
        let drains = self.world.resource::<Drains>();
        for name in &names {
            let Some(e) = self.node_entity(name) else {
                continue; // drained while away: only its drain goes
            };
            let running = running_on(&self.world, e);
            if !running.is_empty() {
                let jobs: BTreeSet<&str> = running
                    .iter()
                    .filter_map(|&(j, _)| self.world.get::<Job>(j))
                    .map(|j| j.spec.name.as_str())
                    .collect();
                return Err(NodeAdminError::Busy {
                    name: name.clone(),
                    tasks: running.len(),
                    jobs: jobs.into_iter().collect::<Vec<_>>().join(", "),
                });
            }
            let agent_gone =
                self.world.get::<StandIn>(e).is_some() || self.world.get::<Heartbeats>(e).is_some_and(|h| !h.linked);
            if !drains.nodes.contains_key(name) && !agent_gone {
                return Err(NodeAdminError::InUse(name.clone()));
            }
        }
        let nodes = names
            .iter()
            .map(|name| NodeChange {
                name: name.clone(),
                note: "removed: it leaves the planner and its HyperNodes; its agent, registering again, joins anew"
                    .into(),
            })
            .collect();
        self.push(Event::Remove { nodes: names });
        Ok(NodesChanged {
            action: "remove".into(),
            nodes,
        })
    }

    /// The admin check and the names: each a node the planner knows (present, awaiting
    /// its agent, or drained while away), sorted, without repeats.
    fn check_nodes(
        &self,
        action: &'static str,
        nodes: &[String],
        caller: Caller<'_>,
    ) -> Result<Vec<String>, NodeAdminError> {
        if !caller.admin {
            return Err(NodeAdminError::NotAdmin {
                action,
                user: caller.user.to_string(),
            });
        }
        if nodes.is_empty() {
            return Err(NodeAdminError::NoNodes(action));
        }
        let known = self.world.resource::<NodeNames>();
        let drains = self.world.resource::<Drains>();
        let names: BTreeSet<&String> = nodes.iter().collect();
        for name in &names {
            if !known.0.contains_key(*name) && !drains.nodes.contains_key(*name) {
                return Err(NodeAdminError::NoSuchNode {
                    name: hyperplan_shared::names::shorten(name, 80),
                    known: known.0.len(),
                });
            }
        }
        Ok(names.into_iter().cloned().collect())
    }

    fn node_entity(&self, name: &str) -> Option<bevy_ecs::entity::Entity> {
        let e = self.world.resource::<NodeNames>().0.get(name).copied()?;
        self.world.get::<Node>(e).map(|_| e)
    }

    /// The nodes' drains as the store last had them (a `DrainsRecord`, encoded), after
    /// the jobs are restored: nodes present now (stand-ins included) are marked at once,
    /// the others when their agents register.
    pub fn restore_drains(&mut self, bytes: &[u8]) -> Result<(), crate::model::record::RecordError> {
        let record = crate::model::drain::DrainsRecord::decode(bytes)?;
        let drains = record.into_drains();
        let present: Vec<_> = drains
            .nodes
            .keys()
            .filter_map(|n| self.world.resource::<NodeNames>().0.get(n).copied())
            .collect();
        for e in present {
            self.world.entity_mut(e).insert(crate::model::drain::Drained);
        }
        self.world.insert_resource(drains);
        Ok(())
    }
}
