//! [`Rig`]: a planner driven the way the daemon drives it, for scenario tests (quinn's
//! `Pair`): a virtual clock in milliseconds, nodes whose agents register and heartbeat
//! every step unless silenced, task starts and ends as agents report them, the
//! invariants checked after every tick, and the records a store would keep, from which a
//! restarted planner loads. The lifecycle and restore suites share it.

use std::collections::BTreeMap;

use hyperplan_shared::NodeSpec;
use hyperplan_shared::report::JobReport;
use hyperplan_shared::taskend::TaskEnd;

use crate::config::PlannerConfig;
use crate::model::reason::Reason;
use crate::model::record::JobRecord;
use crate::{Command, Event, Planner};

/// See the module documentation. Fields are public: a test reads and sets them as it
/// needs (silence a node, look at the store).
pub struct Rig {
    /// The planner under test.
    pub p: Planner,
    /// The virtual clock, Unix milliseconds.
    pub now: u64,
    /// Every node the rig knows, registered or not.
    pub nodes: Vec<NodeSpec>,
    /// Nodes whose agents are registered: they heartbeat every step...
    pub linked: Vec<String>,
    /// ...unless silenced.
    pub silent: Vec<String>,
    /// What the persist system wrote: job id → (live, record bytes).
    pub store: BTreeMap<u64, (bool, Vec<u8>)>,
    /// How many records it wrote.
    pub writes: usize,
    /// The nodes' drains as last written (a `DrainsRecord`, encoded).
    pub drains: Option<Vec<u8>>,
}

impl Rig {
    /// A planner with `config` and `nodes` known but none registered, at 1 s.
    pub fn new(config: PlannerConfig, nodes: Vec<NodeSpec>) -> Self {
        Self {
            p: Planner::new(config),
            now: 1_000,
            nodes,
            linked: Vec::new(),
            silent: Vec::new(),
            store: BTreeMap::new(),
            writes: 0,
            drains: None,
        }
    }

    /// `n` flat nodes of the default resources, every agent registered, records written,
    /// one tick run: the rig most scenario tests start from.
    pub fn flat_ready(n: u32) -> Self {
        let mut rig = Self::new(PlannerConfig::default(), super::ClusterBuilder::flat(n).build().nodes).persisting();
        rig.register_all();
        rig.tick();
        rig
    }

    /// The daemon's planner: job records are written (see [`Rig::store`]).
    pub fn persisting(mut self) -> Self {
        self.p.enable_persist();
        self
    }

    /// A planner started from this one's stored live records, `after_ms` later, with
    /// the same nodes known and none registered; and what it could not restore.
    pub fn restarted(&self, config: PlannerConfig, after_ms: u64) -> (Self, Vec<String>) {
        let mut rig = Self::new(config, self.nodes.clone()).persisting();
        rig.now = self.now + after_ms;
        rig.store = self.store.clone();
        let live: Vec<JobRecord> = self
            .store
            .values()
            .filter(|(live, _)| *live)
            .filter_map(|(_, b)| JobRecord::decode(b).ok())
            .collect();
        let mut warnings = rig.p.restore(live, self.p.next_job_id(), rig.now);
        rig.drains.clone_from(&self.drains);
        if let Some(bytes) = &self.drains
            && let Err(e) = rig.p.restore_drains(bytes)
        {
            warnings.push(format!("drains: {e}"));
        }
        (rig, warnings)
    }

    /// The agent of `name` registers now (its spec, then its link).
    pub fn register(&mut self, name: &str) {
        let spec = self
            .nodes
            .iter()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("no node {name} in the rig"))
            .clone();
        self.p.push(Event::NodeUp(spec));
        self.p.push(Event::LinkUp {
            node: name.into(),
            link: 1,
            at_ms: self.now,
        });
        if !self.linked.iter().any(|n| n == name) {
            self.linked.push(name.into());
        }
    }

    /// Every node's agent registers now.
    pub fn register_all(&mut self) {
        let names: Vec<String> = self.nodes.iter().map(|n| n.name.clone()).collect();
        for n in names {
            self.register(&n);
        }
    }

    /// One tick a second later, after a heartbeat from every registered node not
    /// silenced.
    pub fn step(&mut self) -> Vec<Command> {
        self.now += 1_000;
        for n in &self.linked {
            if !self.silent.contains(n) {
                self.p.push(Event::Heartbeat {
                    node: n.clone(),
                    at_ms: self.now,
                });
            }
        }
        self.tick()
    }

    /// One tick now; the invariants must hold after it; its records go to the store.
    pub fn tick(&mut self) -> Vec<Command> {
        let cmds = self.p.tick_millis(self.now);
        let bad = self.p.violations();
        assert!(bad.is_empty(), "invariants broken at {} ms: {bad:#?}", self.now);
        for c in &cmds {
            match c {
                Command::Persist(p) => {
                    self.store.insert(p.id, (p.live, p.bytes.to_vec()));
                    self.writes += 1;
                }
                Command::PersistDrains(bytes) => self.drains = Some(bytes.to_vec()),
                _ => {}
            }
        }
        cmds
    }

    /// Steps until `done` says so, at most `steps` times (then the test fails): the
    /// commands of every step, in order.
    pub fn drive_until(&mut self, steps: u32, mut done: impl FnMut(&mut Self) -> bool) -> Vec<Command> {
        let mut all = Vec::new();
        for _ in 0..steps {
            if done(self) {
                return all;
            }
            all.extend(self.step());
        }
        assert!(done(self), "not done after {steps} steps");
        all
    }

    /// Steps `steps` times: the last fair-share usage record written in them (the test
    /// fails when none was).
    pub fn usage_written(&mut self, steps: u32) -> std::sync::Arc<[u8]> {
        let mut stored = None;
        for _ in 0..steps {
            for c in self.step() {
                if let Command::PersistUsage(bytes) = c {
                    stored = Some(bytes);
                }
            }
        }
        stored.unwrap_or_else(|| panic!("no usage written in {steps} steps"))
    }

    /// Submits `jobs` as `owner` the daemon's way ([`Planner::submit`]: admitted now,
    /// arrays split, records stored): the ids and names, or why it was refused.
    pub fn submit_now(
        &mut self,
        jobs: Vec<hyperplan_shared::JobSpec>,
        owner: &str,
    ) -> Result<Vec<(u64, String)>, crate::requests::submit::SubmitRefused> {
        let admitted = self.p.submit(jobs, crate::caller::Caller::user(owner), self.now)?;
        Ok(admitted
            .into_iter()
            .map(|a| {
                self.store.insert(a.record.id, (a.record.live, a.record.bytes.to_vec()));
                (a.id.0, a.name)
            })
            .collect())
    }

    /// Submits `spec` as `owner` the simulator's way (`sim::submit`: admitted at once, as
    /// of its `submit_time`; a refusal kept as a rejected job): its id.
    pub fn submit_as(&mut self, spec: hyperplan_shared::JobSpec, owner: &str) -> u64 {
        let id = self.p.next_job_id();
        crate::sim::submit::submit(&mut self.p, spec, owner);
        id
    }

    /// The job's report (the test fails when there is none).
    pub fn job(&self, name: &str) -> JobReport {
        self.p.job(name).unwrap_or_else(|| panic!("no job {name}"))
    }

    /// The job's reason as the core holds it (a [`Reason`] to match, where [`Rig::job`]
    /// gives the sentence `status` shows).
    pub fn reason(&self, name: &str) -> Option<Reason> {
        let world = self.p.world_for_tests();
        let e = *world
            .resource::<crate::names::JobNames>()
            .0
            .get(name)
            .unwrap_or_else(|| panic!("no job {name}"));
        world.get::<crate::model::components::JobState>(e)?.reason.clone()
    }

    /// The node of a placed task.
    pub fn node_of(&self, job: &str, task: &str) -> String {
        self.placed(job, task).1
    }

    /// A placed task's index in its job (its place in the job's report) and node.
    pub fn placed(&self, job: &str, task: &str) -> (u32, String) {
        let r = self.job(job);
        let (i, t) = r
            .tasks
            .iter()
            .enumerate()
            .find(|(_, t)| t.name == task)
            .unwrap_or_else(|| panic!("no task {job}/{task}"));
        let node = t.node.clone().unwrap_or_else(|| panic!("{job}/{task} is not placed"));
        (i as u32, node)
    }

    /// Its node's agent reports the task started now, as `pid`.
    pub fn started(&mut self, job: &str, id: u64, task: &str, pid: u32) {
        let (index, node) = self.placed(job, task);
        self.p.push(Event::TaskStarted {
            node,
            job: job.into(),
            job_id: id.into(),
            task: task.into(),
            index,
            pid,
            at_ms: self.now,
        });
    }

    /// Submits `spec` as alice, places it in the next step (or fails the test), starts
    /// every task and steps once more: its id.
    pub fn run(&mut self, spec: hyperplan_shared::JobSpec) -> u64 {
        let name = spec.name.clone();
        let id = self.submit_as(spec, "alice");
        self.step();
        let job = self.job(&name);
        assert_eq!(
            job.status,
            hyperplan_shared::report::JobStatus::Placed,
            "{:?}",
            job.reason
        );
        self.start_all(&name, id);
        self.step();
        id
    }

    /// (rank, node) of each placed task of the job, by rank.
    pub fn ranks(&self, job: &str) -> Vec<(u32, String)> {
        let mut v: Vec<(u32, String)> = self
            .job(job)
            .tasks
            .iter()
            .filter_map(|t| Some((t.rank?, t.node.clone()?)))
            .collect();
        v.sort();
        v
    }

    /// Every placed task of the job started now (pids 100, 101, …).
    pub fn start_all(&mut self, job: &str, id: u64) {
        let tasks: Vec<String> = self
            .job(job)
            .tasks
            .iter()
            .filter(|t| t.node.is_some())
            .map(|t| t.name.clone())
            .collect();
        for (i, t) in tasks.iter().enumerate() {
            self.started(job, id, t, 100 + i as u32);
        }
    }

    /// Every placed task of `job` exits `code` now (its agent reports it).
    pub fn exit_all(&mut self, job: &str, code: i32) {
        let r = self.job(job);
        for t in r.tasks.iter().filter(|t| t.node.is_some()) {
            let end = TaskEnd {
                outcome: hyperplan_shared::taskend::TaskOutcome::Exited,
                exit_code: Some(code),
                ..TaskEnd::default()
            };
            self.ended(job, r.id, &t.name, end);
        }
    }

    /// Its node's agent reports the task ended now, as `end` says.
    pub fn ended(&mut self, job: &str, id: u64, task: &str, end: TaskEnd) {
        let (index, node) = self.placed(job, task);
        self.p.push(Event::TaskEnded {
            node,
            job: job.into(),
            job_id: id.into(),
            task: task.into(),
            index,
            end: TaskEnd {
                end_time_ms: self.now,
                ..end
            },
        });
    }
}
