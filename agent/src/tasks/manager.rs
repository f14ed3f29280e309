//! [`Tasks`]: the tasks of this node, kept across reconnects (the link owns it) and, via
//! the state directory, across agent restarts.
//!
//! - `Job`: the job's world is kept per job id until its tasks here are all acknowledged
//!   finished (at most [`MAX_WORLDS`] without tasks are kept).
//! - `Launch`: a task already known (in memory, on disk, or recently acknowledged
//!   finished) starts nothing; otherwise its shepherd is started ([`runner`]).
//! - [`Tasks::scan`] (every 100 ms): reaps shepherds the agent started, reads new
//!   `started.json` and `record.json` files, turns a shepherd that died without a record
//!   into a failed record, and sends a `Kill` that waited for a shepherd's pid.
//! - `Ack`: `finished: false` stops the `TaskStarted`; `finished: true` deletes the
//!   task's directory (and the job's, with its hostfile and its own `/tmp` and `/dev/shm`,
//!   after its last task), keeping
//!   only the names of its output files, so `hyperplan logs` still reads an ended job
//!   (the last [`MAX_DONE`], until the agent restarts).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::process::Child;
use std::time::{Duration, Instant};

use hyperplan_net::messages::{AgentMessage, JobWorld, LaunchTask, RunningTask, TaskRef};
use hyperplan_shared::names::{NameKind, check_name};

use super::cgroup::{self, TaskCgroups};
use super::logs::{self, Source};
use super::report::{finished_message, started_message, task_end};
use super::runner::{self, Launched};
use super::scan::{self, Files};
use super::strain::Strain;
use super::usage::Use;
use super::{TaskOptions, TasksError};
use crate::shepherd::layout::{job_dir, write_exclusive};
use crate::shepherd::{ExitRecord, Started, TaskDir};

/// Job worlds kept for jobs with no task here (a `Job` frame before its `Launch`).
pub const MAX_WORLDS: usize = 1024;
/// Acknowledged ends remembered, so a late repeated `Launch` starts nothing and their
/// output can still be read.
pub const MAX_DONE: usize = 16_384;
/// Reports kept in memory for tasks that have no directory (an invalid name).
const MAX_HOMELESS: usize = 256;
/// A task directory without a shepherd pid, found at start-up: how long its shepherd
/// may take to write one before the task counts as never started.
const PID_GRACE: Duration = Duration::from_secs(30);
/// A cancelled task whose shepherd has not ended it this long after its grace: the
/// agent kills the task's processes itself (cgroups or sweep), and after twice this the
/// shepherd too. A shepherd stuck before exec (a hung file system) cannot hold CPUs.
const KILL_BACKSTOP: Duration = Duration::from_secs(10);
/// How much sooner a second Kill's SIGKILL must come than the first's to be sent on: a
/// repeat of the same Kill (the planner sends one per heartbeat while a job ends) is not.
const SHORTER_BY: Duration = Duration::from_secs(1);
/// How long the agent waits for a task's cgroups to empty when it kills them itself.
const AGENT_KILL_WAIT: Duration = Duration::from_secs(1);
/// A task whose shepherd the agent cannot find (its pid file deleted, or naming another
/// process): how long it is looked for, held as running with its resources, before it
/// counts as gone and fails.
pub const LOST_GRACE: Duration = Duration::from_secs(2);
/// Between looks for a lost shepherd (each may read every process's command line).
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// A cancel asked for, and where it stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kill {
    None,
    /// Waiting for the shepherd's pid: the grace, and the signal to warn with.
    Pending(u64, Option<i32>),
    Sent,
}

#[derive(Debug)]
struct Entry {
    dir: TaskDir,
    rank: u32,
    /// Which placement of the task this is (`LaunchTask::run`).
    run: u32,
    /// The shepherd this agent started (reaped by [`Tasks::scan`]).
    child: Option<Child>,
    /// Its exit status when it ended before a record was read.
    child_exit: Option<std::process::ExitStatus>,
    shepherd_pid: Option<u32>,
    started: Option<Started>,
    started_acked: bool,
    record: Option<ExitRecord>,
    kill: Kill,
    /// When the cancel went to the shepherd, with its grace, and how far the agent
    /// went itself since (0: not at all, 1: killed the task, 2: killed the shepherd).
    kill_sent: Option<(Instant, Duration, u8)>,
    /// A shepherd that could not be started yet (the node short of processes or memory).
    retry: Option<Box<Retry>>,
    /// When this agent first saw the task (its launch, or its start-up).
    since: Instant,
    /// The start time (clock ticks after boot) of a shepherd found by its command line:
    /// with its pid, who it is (a pid alone may be used again).
    shepherd_start: Option<u64>,
    /// The shepherd cannot be found: since when, and when to look again.
    lost: Option<Lost>,
    /// The shepherd is the launcher's, started by this agent run: known for sure by its
    /// pid and start time (`shepherd_start`), as a child is by its handle. Its command
    /// line is not read: right after exec it may still be empty.
    launched: bool,
}

/// A task whose shepherd is not where its pid file says.
#[derive(Clone, Copy, Debug)]
struct Lost {
    since: Instant,
    next_look: Instant,
}

/// A launch waiting to start its shepherd again.
#[derive(Debug)]
struct Retry {
    launch: LaunchTask,
    tries: u32,
    next: Instant,
    /// The task's end of its PMI socket, which the shepherd must inherit.
    pmi: Option<std::os::fd::OwnedFd>,
}

impl Entry {
    fn new(dir: TaskDir, rank: u32) -> Self {
        Self {
            dir,
            rank,
            run: 0,
            child: None,
            child_exit: None,
            shepherd_pid: None,
            started: None,
            started_acked: false,
            record: None,
            kill: Kill::None,
            kill_sent: None,
            retry: None,
            since: Instant::now(),
            shepherd_start: None,
            lost: None,
            launched: false,
        }
    }

    /// Follows a shepherd just started: this agent's child is reaped by it; the
    /// launcher's is known by its pid and start time, as one found after a restart.
    fn follow(&mut self, shepherd: runner::Shepherd) {
        match shepherd {
            runner::Shepherd::Child(child) => self.child = Some(child),
            runner::Shepherd::Launched(pid) => {
                self.shepherd_pid = Some(pid);
                self.shepherd_start = runner::proc_stat(pid).map(|p| p.start_ticks);
                self.launched = self.shepherd_start.is_some();
            }
        }
    }

    /// The launcher's shepherd still runs: its pid names a live process started when it
    /// was (not a zombie, not a new process under a reused pid).
    fn launched_alive(&self) -> bool {
        match (self.shepherd_pid, self.shepherd_start) {
            (Some(pid), Some(start)) => runner::proc_stat(pid).is_some_and(|p| !p.zombie && p.start_ticks == start),
            _ => false,
        }
    }

    /// Reports not yet acknowledged, started before finished.
    fn reports(&self, task: &TaskRef, out: &mut Vec<AgentMessage>) {
        if let Some(started) = self.started.as_ref().filter(|_| !self.started_acked) {
            out.push(started_message(task, started));
        }
        if let Some(record) = &self.record {
            out.push(finished_message(task, task_end(record)));
        }
    }
}

/// The node's tasks.
#[derive(Debug)]
pub struct Tasks {
    opts: TaskOptions,
    worlds: BTreeMap<(String, hyperplan_shared::ids::JobId), JobWorld>,
    /// Order the worlds came in, for forgetting the oldest.
    world_order: VecDeque<(String, hyperplan_shared::ids::JobId)>,
    tasks: BTreeMap<TaskRef, Entry>,
    /// Tasks whose end the planner has, with the placement (`run`) that ended.
    done: HashMap<TaskRef, u32>,
    done_order: VecDeque<TaskRef>,
    /// Output files `(stdout, stderr)` of acknowledged ends, for `ReadLog`.
    done_logs: HashMap<TaskRef, logs::Outputs>,
    /// Ends of tasks that never had a directory (their names were refused).
    homeless: BTreeMap<TaskRef, ExitRecord>,
    /// Shepherds whose task was forgotten before they exited, still to be reaped.
    exiting: Vec<Child>,
    /// The newest planner epoch seen (kept in the state directory).
    epoch: super::epoch::Epoch,
    /// How long a task whose shepherd cannot be found is held ([`LOST_GRACE`]).
    lost_grace: Duration,
    /// The agent's ends of new tasks' PMI sockets, for the PMI hub ([`Tasks::take_pmi`]).
    pmi: Vec<crate::pmi::PmiTask>,
    /// Removes jobs' own /tmp and /dev/shm once they have no task here.
    jobtmp: super::jobtmp::Cleaner,
    /// Whether shepherds cannot start now for want of processes or memory.
    strain: Strain,
}

impl Tasks {
    /// Creates the state directory when missing and takes every task found in it.
    pub fn new(opts: TaskOptions) -> Result<Self, TasksError> {
        Self::with_lost_grace(opts, LOST_GRACE)
    }

    fn with_lost_grace(opts: TaskOptions, lost_grace: Duration) -> Result<Self, TasksError> {
        runner::make_state_dir(&opts.state_dir).map_err(|e| TasksError::StateDir {
            path: opts.state_dir.clone(),
            why: match std::fs::metadata(&opts.state_dir) {
                Ok(m) if !m.is_dir() => "it exists and is not a directory".to_string(),
                _ => e.to_string(),
            },
        })?;
        let epoch = super::epoch::Epoch::load(&opts.state_dir);
        let jobtmp = super::jobtmp::Cleaner::new(&opts.private_tmp, &opts.state_dir);
        let strain = Strain::new(opts.shepherd.clone());
        let mut tasks = Tasks {
            opts,
            worlds: BTreeMap::new(),
            world_order: VecDeque::new(),
            tasks: BTreeMap::new(),
            done: HashMap::new(),
            done_order: VecDeque::new(),
            done_logs: HashMap::new(),
            homeless: BTreeMap::new(),
            exiting: Vec::new(),
            epoch,
            lost_grace,
            pmi: Vec::new(),
            jobtmp,
            strain,
        };
        for (task, dir) in scan::list(&tasks.opts.state_dir) {
            let files = scan::read_files(&dir);
            let mut entry = Entry::new(dir, 0);
            apply(&mut entry, files);
            tasks.tasks.insert(task, entry);
        }
        let running = tasks.tasks.values().filter(|e| e.record.is_none()).count();
        if !tasks.tasks.is_empty() {
            tracing::info!(
                tasks = tasks.tasks.len(),
                running,
                state_dir = %tasks.opts.state_dir.display(),
                "found tasks of an earlier agent run; reporting them"
            );
        }
        tasks.scan();
        Ok(tasks)
    }

    /// Whether a planner of `epoch` may give orders (see [`super::epoch`]).
    pub fn admit_epoch(&mut self, epoch: u64) -> bool {
        self.epoch.admit(epoch)
    }

    pub fn highest_epoch(&self) -> u64 {
        self.epoch.highest()
    }

    /// A task runs or may still start (a scan is worth doing).
    pub fn active(&self) -> bool {
        self.tasks.values().any(|e| e.record.is_none() || e.child.is_some()) || !self.exiting.is_empty()
    }

    pub fn on_job(&mut self, world: JobWorld) {
        let key = (world.job.clone(), world.job_id);
        // A job already running here whose world changed (a lost task started again
        // elsewhere, a task placed late): its hostfile and `restart` file say so now,
        // for its running tasks to read again.
        let changed = self.worlds.get(&key).is_some_and(|old| {
            old.nodes != world.nodes || old.node_of_rank != world.node_of_rank || old.restart != world.restart
        });
        if changed && self.has_tasks(&key.0, key.1) {
            runner::rewrite_world(&self.opts, &world);
        }
        if self.worlds.insert(key.clone(), world).is_none() {
            self.world_order.push_back(key);
        }
        // Forget the oldest worlds without tasks here beyond the bound.
        while self.worlds.len() > MAX_WORLDS {
            let Some(pos) = self.world_order.iter().position(|k| !self.has_tasks(&k.0, k.1)) else {
                break;
            };
            if let Some(old) = self.world_order.remove(pos) {
                self.worlds.remove(&old);
            }
        }
    }

    fn has_tasks(&self, job: &str, job_id: hyperplan_shared::ids::JobId) -> bool {
        self.tasks.keys().any(|t| t.job == job && t.job_id == job_id)
    }

    /// Starts the task unless it is known already; `gpus`: this node's GPUs (PCI bus ids).
    /// Returns the reports it made at once (a task that could not start).
    pub fn on_launch(&mut self, node: &str, gpus: &[String], launch: &LaunchTask) -> Vec<AgentMessage> {
        let key = TaskRef {
            job: launch.job.clone(),
            job_id: launch.job_id,
            task: launch.task.clone(),
            index: launch.index,
        };
        // The same task placed again (its job requeued, or preempted and requeued, and back
        // on this node): a later run of it, which starts; the run that ended is forgotten.
        let again = |run: u32| launch.run > run;
        if self.tasks.get(&key).is_some_and(|e| e.record.is_some() && again(e.run)) {
            self.forget(&key, true);
        }
        if self.done.get(&key).is_some_and(|&run| again(run)) {
            self.done.remove(&key);
            self.done_logs.remove(&key);
        }
        if self.tasks.contains_key(&key) || self.done.contains_key(&key) || self.homeless.contains_key(&key) {
            tracing::debug!(job = %key.job, job_id = %key.job_id, task = %key.task, "Launch repeated; nothing started");
            return Vec::new();
        }
        let names_ok = hyperplan_shared::names::check_job_name(&key.job)
            .and_then(|()| check_name(NameKind::Task, &key.task))
            .map_err(|e| e.to_string());
        if let Err(why) = names_ok {
            tracing::warn!(job = ?key.job, task = ?key.task, "refusing a Launch: {why}");
            if self.homeless.len() >= MAX_HOMELESS {
                return Vec::new();
            }
            let record = runner::synthesized(
                &key.job,
                key.job_id,
                &key.task,
                launch.rank,
                0,
                None,
                format!("task {}/{}: {why}", key.job, key.task),
            );
            let message = finished_message(&key, task_end(&record));
            self.homeless.insert(key, record);
            return vec![message];
        }
        let dir = TaskDir::new(&self.opts.state_dir, &key.job, key.job_id, &key.task);
        if dir.dir.exists() {
            // Made by an earlier run that this one did not list (it was created since).
            tracing::info!(job = %key.job, task = %key.task, "Launch of a task whose directory exists; nothing started");
            let mut entry = Entry::new(dir, launch.rank);
            entry.run = launch.run;
            let files = scan::read_files(&entry.dir);
            apply(&mut entry, files);
            self.tasks.insert(key, entry);
            return Vec::new();
        }
        let world = self.worlds.get(&(key.job.clone(), key.job_id));
        let mut entry = Entry::new(dir, launch.rank);
        entry.run = launch.run;
        let mut out = Vec::new();
        let mut pmi = None;
        let launched = runner::launch(&self.opts, node, gpus, world, launch, &entry.dir, &mut pmi);
        // The task's end of the PMI socket: the shepherd has its own copy now (or will
        // have, after a retry); the agent's end goes to the hub.
        let (pmi_child, pmi_task) = match pmi {
            Some(p) => (Some(p.child), Some(p.task)),
            None => (None, None),
        };
        if let (Some(task), false) = (pmi_task, matches!(launched, Launched::Failed(_))) {
            self.pmi.push(task);
        }
        match launched {
            Launched::Spawned(shepherd) => {
                tracing::info!(
                    job = %key.job, job_id = %key.job_id, task = %key.task, rank = launch.rank, user = %launch.user,
                    shepherd = shepherd.pid(), "started the task's shepherd"
                );
                entry.follow(shepherd);
                self.strain.started();
            }
            Launched::Retry(e) => {
                self.strain.failed(&e);
                tracing::warn!(
                    job = %key.job, job_id = %key.job_id, task = %key.task,
                    "cannot start the task's shepherd now ({e}); trying again every {} s, {} times",
                    runner::RETRY_EVERY.as_secs(), runner::SPAWN_TRIES - 1
                );
                entry.retry = Some(Box::new(Retry {
                    launch: launch.clone(),
                    tries: 1,
                    next: Instant::now() + runner::RETRY_EVERY,
                    pmi: pmi_child,
                }));
            }
            Launched::Failed(record) => {
                tracing::warn!(
                    job = %key.job, job_id = %key.job_id, task = %key.task,
                    "cannot start the task: {}", record.reason.as_deref().unwrap_or("")
                );
                out.push(finished_message(&key, task_end(&record)));
                entry.record = Some(record);
            }
        }
        self.tasks.insert(key, entry);
        out
    }

    /// Why this node cannot start tasks now (its shepherds' forks fail), for the
    /// heartbeat; probes whether it can again when that is due ([`super::strain`]).
    pub fn strained(&mut self) -> Option<String> {
        let (why, probe) = self.strain.check();
        self.exiting.extend(probe);
        why
    }

    /// The agent's ends of the PMI sockets of tasks launched since the last call.
    pub fn take_pmi(&mut self) -> Vec<crate::pmi::PmiTask> {
        std::mem::take(&mut self.pmi)
    }

    /// Cancels the task (SIGTERM to its shepherd, which passes it on and SIGKILLs after
    /// `grace_secs`). Unknown or ended: nothing happens. Already being killed: a Kill
    /// whose SIGKILL would come sooner than the one under way shortens it (a cancel after
    /// a preemption's long grace, an admin's at once); a later or equal one changes
    /// nothing (the planner repeats its Kills while a job ends).
    pub fn on_kill(&mut self, task: &TaskRef, grace_secs: u64, signal: Option<i32>) {
        let Some(entry) = self.tasks.get_mut(task) else {
            tracing::debug!(job = %task.job, task = %task.task, "Kill of a task not on this node; ignored");
            return;
        };
        if entry.record.is_some() {
            return;
        }
        // Only a signal a task can catch warns it; anything else is SIGTERM.
        let signal = signal.filter(|s| (1..=31).contains(s) && ![libc::SIGKILL, libc::SIGSTOP].contains(s));
        match entry.kill {
            Kill::None => {
                tracing::info!(job = %task.job, job_id = %task.job_id, task = %task.task, grace_secs, "cancelling the task");
                entry.kill = Kill::Pending(grace_secs, signal);
            }
            Kill::Pending(grace, warn) => entry.kill = Kill::Pending(grace.min(grace_secs), signal.or(warn)),
            Kill::Sent => {
                let Some((sent, grace, done)) = entry.kill_sent else {
                    return;
                };
                let sooner = Duration::from_secs(grace_secs) + SHORTER_BY;
                if sent.elapsed() + sooner > grace {
                    return;
                }
                tracing::info!(
                    job = %task.job, job_id = %task.job_id, task = %task.task, grace_secs,
                    "cancelling the task again, with a shorter grace"
                );
                if let Some(pid) = entry.shepherd_pid.filter(|&p| p > 0) {
                    runner::cancel(&entry.dir, pid, grace_secs, signal);
                }
                entry.kill_sent = Some((Instant::now(), Duration::from_secs(grace_secs), done));
                return;
            }
        }
        if entry.shepherd_pid.is_none() {
            entry.shepherd_pid = scan::read_pid(&entry.dir);
        }
        send_kill(entry);
    }

    /// The planner has the task's start (`finished: false`) or end (`finished: true`).
    pub fn on_ack(&mut self, task: &TaskRef, finished: bool) {
        if !finished {
            if let Some(entry) = self.tasks.get_mut(task) {
                entry.started_acked = true;
            }
            return;
        }
        if self.homeless.remove(task).is_some() {
            self.remember_done(task.clone(), 0);
            return;
        }
        let Some(entry) = self.tasks.get(task) else { return };
        if entry.record.is_none() {
            tracing::warn!(job = %task.job, task = %task.task, "the planner acknowledged an end this node has not reported; ignored");
            return;
        }
        self.forget(task, false);
    }

    /// An ended task leaves: its cgroups, its directory, its shepherd to reap; its end is
    /// remembered (a repeated Launch starts nothing). Its job's directory and world go
    /// with its last task here, unless `keep_world` (the job is being placed here again).
    fn forget(&mut self, task: &TaskRef, keep_world: bool) {
        let Some(mut entry) = self.tasks.remove(task) else {
            return;
        };
        let outputs = logs::output_files(&entry.dir.spec());
        self.release_cgroups(task, &entry.dir);
        if let Err(e) = std::fs::remove_dir_all(&entry.dir.dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %entry.dir.dir.display(), "cannot remove the task directory: {e}");
        }
        if let Some(mut child) = entry.child.take()
            && let Ok(None) = child.try_wait()
        {
            self.exiting.push(child);
        }
        self.remember_done(task.clone(), entry.run);
        if let Some(files) = outputs {
            self.done_logs.insert(task.clone(), files);
        }
        if !keep_world && !self.has_tasks(&task.job, task.job_id) {
            let dir = job_dir(&self.opts.state_dir, &task.job, task.job_id);
            // The hostfile, and a batch job's MPI hostfiles and remote shell: they go with it.
            for name in [
                "hostfile",
                crate::launch::OPENMPI_HOSTFILE,
                crate::launch::HYDRA_HOSTFILE,
                crate::launch::RSH,
            ] {
                let _ = std::fs::remove_file(dir.join(name));
            }
            if let Err(e) = std::fs::remove_dir(&dir)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(dir = %dir.display(), "cannot remove the job directory: {e}");
            }
            let key = (task.job.clone(), task.job_id);
            self.worlds.remove(&key);
            self.world_order.retain(|k| k != &key);
            // Its own /tmp and /dev/shm: what it left there gives its memory back now.
            self.jobtmp.retire(&task.job, task.job_id);
        }
    }

    /// Empties and removes the task's cgroups: those its spec names (an earlier agent
    /// run's may be elsewhere) and those this run would have made (a launch that failed
    /// after making them). No cgroup is left with a process in it.
    fn release_cgroups(&self, task: &TaskRef, dir: &TaskDir) {
        let paths = task_cgroups(&self.opts, task, dir);
        if paths.is_empty() {
            return;
        }
        let left = cgroup::kill::kill_all(&paths, AGENT_KILL_WAIT, &mut || {});
        if left > 0 {
            tracing::warn!(job = %task.job, task = %task.task, left, "processes of an ended task survive SIGKILL in its cgroups");
        }
        for path in &paths {
            cgroup::remove(path);
        }
    }

    fn remember_done(&mut self, task: TaskRef, run: u32) {
        if self.done.insert(task.clone(), run).is_none() {
            self.done_order.push_back(task);
        }
        while self.done_order.len() > MAX_DONE {
            if let Some(old) = self.done_order.pop_front() {
                self.done.remove(&old);
                self.done_logs.remove(&old);
            }
        }
    }

    /// Looks at every task that may have moved on; returns the reports that are new.
    pub fn scan(&mut self) -> Vec<AgentMessage> {
        self.exiting.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
        let tasks = &self.tasks;
        self.jobtmp.work(tasks.is_empty(), |job, job_id| {
            tasks.keys().any(|t| t.job == job && t.job_id.0 == job_id)
        });
        let shepherds = self.shepherds();
        let mut out = Vec::new();
        for (task, entry) in &mut self.tasks {
            if let Some(record) = retry_spawn(&self.opts, &mut self.strain, task, entry) {
                out.push(finished_message(task, task_end(&record)));
                entry.record = Some(record);
                continue;
            }
            if let Some(child) = &mut entry.child {
                match child.try_wait() {
                    Ok(None) => {}
                    Ok(Some(status)) => {
                        entry.child_exit = Some(status);
                        entry.child = None;
                    }
                    Err(e) => {
                        tracing::warn!(job = %task.job, task = %task.task, "cannot wait for the shepherd: {e}");
                        entry.child = None;
                    }
                }
            }
            if entry.record.is_some() {
                continue;
            }
            if entry.shepherd_pid.is_none() {
                entry.shepherd_pid = scan::read_pid(&entry.dir);
            }
            send_kill(entry);
            backstop_kill(&self.opts, task, entry);
            if entry.started.is_none()
                && let Some(started) = scan::read_started(&entry.dir)
            {
                tracing::info!(job = %task.job, task = %task.task, pid = started.pid, "task started");
                out.push(started_message(task, &started));
                entry.started = Some(started);
            }
            let record = match scan::read_record(&entry.dir) {
                Some(r) => Some(r),
                None => vanished(&self.opts, &shepherds, self.lost_grace, task, entry),
            };
            if let Some(record) = record {
                tracing::info!(
                    job = %task.job, task = %task.task, outcome = ?record.outcome,
                    exit_code = ?record.exit_code, signal = ?record.signal, "task ended"
                );
                out.push(finished_message(task, task_end(&record)));
                entry.record = Some(record);
            }
        }
        out
    }

    /// Every report the planner has not acknowledged.
    pub fn unacked(&self) -> Vec<AgentMessage> {
        let mut out = Vec::new();
        for (task, entry) in &self.tasks {
            entry.reports(task, &mut out);
        }
        for (task, record) in &self.homeless {
            out.push(finished_message(task, task_end(record)));
        }
        out
    }

    /// The shepherd pids of the tasks that run (for usage sampling).
    pub fn shepherds(&self) -> Vec<u32> {
        self.tasks
            .values()
            .filter(|e| e.record.is_none() && e.lost.is_none())
            .filter_map(|e| e.shepherd_pid.filter(|&p| p > 0))
            .collect()
    }

    /// The tasks whose shepherds run and have no record, with their use.
    pub fn running(&self, usage: &std::collections::HashMap<u32, Use>) -> Vec<RunningTask> {
        self.tasks
            .iter()
            .filter(|(_, e)| e.record.is_none())
            .map(|(task, e)| {
                let u = e.shepherd_pid.and_then(|p| usage.get(&p)).copied().unwrap_or_default();
                // A task whose shepherd is being looked for is still this node's (its
                // resources stay held), with no pid it can vouch for: 0.
                let pid = match e.lost {
                    Some(_) => 0,
                    None => e.started.as_ref().map_or(0, |s| s.pid),
                };
                RunningTask {
                    task: task.clone(),
                    pid,
                    cpu_cores: u.cpu_cores,
                    rss_bytes: u.rss_bytes,
                }
            })
            .collect()
    }

    /// What `/metrics` shows of the tasks: each task [`Tasks::running`] lists, by job id
    /// and index, with its use in `usage`; and the ends the planner has not acknowledged.
    pub fn metrics_now(&self, usage: &std::collections::HashMap<u32, Use>) -> crate::metrics::TasksNow {
        let mut now = crate::metrics::TasksNow::default();
        for (task, e) in &self.tasks {
            if e.record.is_some() {
                now.unacknowledged_ends += 1;
                continue;
            }
            let u = e.shepherd_pid.and_then(|p| usage.get(&p)).copied().unwrap_or_default();
            now.running.push(crate::metrics::TaskUse {
                job_id: task.job_id,
                index: task.index,
                // sysinfo's figure, to a thousandth of a core (f32 noise left out).
                cpu_cores: (f64::from(u.cpu_cores) * 1000.0).round() / 1000.0,
                memory_bytes: u.rss_bytes,
            });
        }
        now.unacknowledged_ends += self.homeless.len() as u64;
        now
    }

    /// Where a task's output is named, for `ReadLog`: its spec, or the files kept after
    /// its acknowledged end.
    pub fn log_source(&self, task: &TaskRef) -> Option<Source> {
        if let Some(e) = self.tasks.get(task) {
            return Some(Source::Spec(e.dir.spec()));
        }
        self.done_logs.get(task).cloned().map(Source::Files)
    }
}

/// Takes what a task directory says into its entry (a task found after start-up).
fn apply(entry: &mut Entry, files: Files) {
    entry.shepherd_pid = files.pid;
    entry.started = files.started;
    if let Some(r) = &files.record {
        entry.rank = r.rank;
    }
    entry.record = files.record;
}

/// Sends a pending cancel once the shepherd is known: its pid file names it, or it was
/// found by its command line. A pid file naming another process gets no signal: the
/// cancel waits until the shepherd is found, or the task is proven gone (then its
/// leftovers are killed and it fails, see [`vanished`]).
fn send_kill(entry: &mut Entry) {
    if let (Kill::Pending(grace, warn), Some(pid)) = (entry.kill, entry.shepherd_pid) {
        if pid > 0 {
            let runs = if entry.launched {
                entry.launched_alive()
            } else {
                runner::shepherd_alive(pid, &entry.dir.spec())
            };
            if entry.lost.is_some() || !runs {
                return;
            }
            runner::cancel(&entry.dir, pid, grace, warn);
        }
        entry.kill = Kill::Sent;
        entry.kill_sent = Some((Instant::now(), Duration::from_secs(grace), 0));
    }
}

/// A cancelled task still without a record well after its grace: the agent kills the
/// task's processes itself, and later its shepherd (whose death then fails the task).
fn backstop_kill(opts: &TaskOptions, task: &TaskRef, entry: &mut Entry) {
    if entry.record.is_some() {
        return;
    }
    let Some((sent, grace, done)) = entry.kill_sent else {
        return;
    };
    let overdue = sent.elapsed().saturating_sub(grace);
    let Some(shepherd) = entry.shepherd_pid.filter(|&p| p > 0) else {
        return;
    };
    if done == 0 && overdue >= KILL_BACKSTOP {
        tracing::warn!(job = %task.job, task = %task.task, shepherd, "the task outlived its cancel; killing its processes");
        kill_task_processes(opts, task, entry, &[]);
        entry.kill_sent = Some((sent, grace, 1));
    } else if done == 1 && overdue >= 2 * KILL_BACKSTOP {
        tracing::warn!(job = %task.job, task = %task.task, shepherd, "the shepherd does not end its cancelled task; killing it");
        runner::signal(shepherd, libc::SIGKILL);
        entry.kill_sent = Some((sent, grace, 2));
    }
}

/// The task's cgroups, those its spec names and those this agent would make for it.
fn task_cgroups(opts: &TaskOptions, task: &TaskRef, dir: &TaskDir) -> Vec<std::path::PathBuf> {
    let mut paths = crate::shepherd::LaunchSpec::read(&dir.spec())
        .map(|s| TaskCgroups::named_in_spec(&s.all_cgroups(), &task.job, task.job_id, &task.task))
        .unwrap_or_default();
    if let Some(ours) = opts
        .confinement
        .cgroups()
        .and_then(|c| c.paths(&task.job, task.job_id, &task.task).ok())
    {
        for p in ours {
            if !paths.contains(&p) && p.exists() {
                paths.push(p);
            }
        }
    }
    paths
}

/// Kills every process of a task whose shepherd is gone or stuck: its cgroups, else its
/// process group and session and, once the shepherd is gone, by user and start time what
/// no live shepherd (`shepherds`, the other tasks') owns. Never uid 0's processes.
fn kill_task_processes(opts: &TaskOptions, task: &TaskRef, entry: &Entry, shepherds: &[u32]) {
    let paths = task_cgroups(opts, task, &entry.dir);
    if !paths.is_empty() {
        cgroup::kill::kill_all(&paths, AGENT_KILL_WAIT, &mut || {});
        return;
    }
    let (Some(started), Some(shepherd)) = (&entry.started, entry.shepherd_pid.filter(|&p| p > 0)) else {
        return;
    };
    runner::kill_orphaned_task(started.pid, shepherd);
    let proc_root = std::path::Path::new("/proc");
    let procs = super::sweep::all(proc_root);
    let in_session: Vec<u32> = super::sweep::session(&procs, shepherd)
        .into_iter()
        .filter(|&p| p != shepherd)
        .collect();
    super::sweep::kill_each(&in_session);
    if runner::shepherd_alive(shepherd, &entry.dir.spec()) {
        return; // stuck, not gone: what it still holds is its own
    }
    let Ok(user) = crate::shepherd::LaunchSpec::read(&entry.dir.spec())
        .map_err(|e| e.to_string())
        .and_then(|s| crate::shepherd::user::lookup(&s.user).map_err(|e| e.to_string()))
    else {
        return;
    };
    if user.uid == 0 {
        return;
    }
    let mut keep = std::collections::HashSet::new();
    for &other in shepherds.iter().filter(|&&p| p != shepherd) {
        keep.insert(other);
        keep.extend(super::sweep::descendants(&procs, other));
    }
    let orphans = super::sweep::orphans_of(proc_root, &procs, user.uid, started.start_time_ms, &keep);
    if !orphans.is_empty() {
        tracing::warn!(job = %task.job, task = %task.task, uid = user.uid, pids = ?orphans, "killing what the task left behind (its user's processes since its start that no task owns)");
        super::sweep::kill_each(&orphans);
    }
}

/// Starts a waiting shepherd again when its time has come; the failed record once the
/// tries are used up.
fn retry_spawn(opts: &TaskOptions, strain: &mut Strain, task: &TaskRef, entry: &mut Entry) -> Option<ExitRecord> {
    let retry = entry.retry.as_mut()?;
    if Instant::now() < retry.next {
        return None;
    }
    let inherit = retry.pmi.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
    match runner::spawn_shepherd(opts, &entry.dir, inherit) {
        Ok(shepherd) => {
            tracing::info!(job = %task.job, task = %task.task, tries = retry.tries + 1, shepherd = shepherd.pid(), "started the task's shepherd");
            entry.follow(shepherd);
            entry.since = Instant::now();
            entry.retry = None;
            strain.started();
            None
        }
        Err(e) if runner::temporary(&e) && retry.tries + 1 < runner::SPAWN_TRIES => {
            strain.failed(&e);
            retry.tries += 1;
            retry.next = Instant::now() + runner::RETRY_EVERY;
            None
        }
        Err(e) => {
            strain.failed(&e);
            let record = runner::shepherd_failed(opts, &entry.dir, &retry.launch, &e);
            tracing::warn!(job = %task.job, task = %task.task, tries = retry.tries + 1, "cannot start the task's shepherd: {e}");
            entry.retry = None;
            Some(record)
        }
    }
}

/// A task without a record whose shepherd is gone (or never came): the failed record
/// the agent writes for it, or None while the shepherd may still be there.
///
/// A pid file that is missing (while the task has started, or past [`PID_GRACE`]) or
/// names a process that is not the task's shepherd does not make the task fail: the
/// shepherd is looked for by its command line ([`runner::find_shepherd`]) and, when
/// found, taken as the task's again (its pid file written again). Until it is found, or
/// `lost_grace` has passed without it anywhere, the task stays running (its resources
/// held, reported with pid 0).
fn vanished(
    opts: &TaskOptions,
    shepherds: &[u32],
    lost_grace: Duration,
    task: &TaskRef,
    entry: &mut Entry,
) -> Option<ExitRecord> {
    if entry.child.is_some() || entry.retry.is_some() {
        return None; // our own child, not reaped (it runs), or one still to start
    }
    // The launcher's shepherd: alive while its pid names a live process started when it
    // was; once gone, its record (which it writes before it exits) is read again, and
    // without one it died.
    let launched_gone = if entry.launched {
        if entry.launched_alive() {
            return None;
        }
        if let Some(record) = scan::read_record(&entry.dir) {
            return Some(record);
        }
        true
    } else {
        false
    };
    if !launched_gone
        && let Some(pid) = entry.shepherd_pid.filter(|&p| p > 0)
        && runner::shepherd_alive(pid, &entry.dir.spec())
        && entry
            .shepherd_start
            .is_none_or(|start| runner::proc_stat(pid).is_some_and(|p| p.start_ticks == start))
    {
        return None;
    }
    let may_be_starting = entry.shepherd_pid.is_none()
        && entry.started.is_none()
        && entry.child_exit.is_none()
        && entry.since.elapsed() <= PID_GRACE;
    if entry.shepherd_pid != Some(0) && !may_be_starting && !launched_gone {
        if look_for_shepherd(task, entry) {
            return None;
        }
        let lost = entry.lost.get_or_insert_with(|| {
            tracing::warn!(
                job = %task.job, job_id = %task.job_id, task = %task.task, pid_file = ?entry.shepherd_pid,
                "cannot find the task's shepherd (its pid file is missing or names another process); \
                 the task keeps its resources while it is looked for"
            );
            let now = Instant::now();
            Lost {
                since: now,
                next_look: now + LOOK_EVERY,
            }
        });
        // Our own shepherd seen exiting without a pid is gone for sure.
        let seen_exit = entry.shepherd_pid.is_none() && entry.child_exit.is_some();
        if lost.since.elapsed() < lost_grace && !seen_exit {
            return None;
        }
    }
    let reason = match entry.shepherd_pid {
        Some(pid) if pid > 0 => match runner::proc_stat(pid) {
            Some(p) if !p.zombie => format!(
                "the shepherd died without a record (its pid file names pid {pid}, another process, \
                 and no process runs the task's spec)"
            ),
            _ => match runner::last_log_line(&entry.dir) {
                Some(line) => format!("the shepherd (pid {pid}) died without a record: {line}"),
                None => format!("the shepherd (pid {pid}) died without a record"),
            },
        },
        Some(_) => "the agent could not start the task's shepherd".to_string(),
        None if entry.started.is_some() => {
            "the shepherd died without a record (its pid file is gone and no process runs the task's spec)".to_string()
        }
        None => {
            // No pid yet: a shepherd this agent started and saw exit, or one an earlier run
            // started that had its time. The tombstone stops a late one from running it.
            match write_exclusive(&entry.dir.pid(), b"0\n") {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    entry.shepherd_pid = scan::read_pid(&entry.dir);
                    return None; // it came after all: look again next scan
                }
                Err(e) => tracing::warn!(dir = %entry.dir.dir.display(), "cannot write the pid tombstone: {e}"),
            }
            entry.shepherd_pid = Some(0);
            match (&entry.child_exit, runner::last_log_line(&entry.dir)) {
                (Some(status), Some(line)) => format!("the shepherd exited ({status}) without a record: {line}"),
                (Some(status), None) => format!("the shepherd exited ({status}) without a record"),
                (None, _) if !entry.dir.spec().exists() => "the agent stopped before it started the task".to_string(),
                (None, _) => "the task's shepherd never started".to_string(),
            }
        }
    };
    // It may have written its record just before it went.
    if let Some(record) = scan::read_record(&entry.dir) {
        return Some(record);
    }
    let reason = match full(&entry.dir.dir) {
        Some(e) => format!(
            "{reason}; the agent's state directory is full ({e}): the shepherd could not write how the task ended"
        ),
        None => reason,
    };
    tracing::warn!(job = %task.job, task = %task.task, "{reason}");
    kill_task_processes(opts, task, entry, shepherds);
    if entry.rank == 0
        && let Ok(spec) = crate::shepherd::LaunchSpec::read(&entry.dir.spec())
    {
        entry.rank = spec.rank; // a task found at start-up
    }
    let record = runner::synthesized(
        &task.job,
        task.job_id,
        &task.task,
        entry.rank,
        entry.shepherd_pid.unwrap_or(0),
        entry.started.as_ref().map(|s| s.pid),
        reason,
    );
    runner::write_record(&entry.dir, &record);
    Some(record)
}

/// The error a small write in `dir` gets when its file system (or quota) is full: why a
/// shepherd may have left no record.
fn full(dir: &std::path::Path) -> Option<std::io::Error> {
    let probe = dir.join(".space-check");
    let result = std::fs::write(&probe, b"x");
    let _ = std::fs::remove_file(&probe);
    result.err().filter(crate::shepherd::is_full)
}

/// Looks for the shepherd of a task whose pid file is missing or wrong (at most every
/// [`LOOK_EVERY`]); true when it was found, and taken as the task's again.
fn look_for_shepherd(task: &TaskRef, entry: &mut Entry) -> bool {
    if let Some(lost) = &mut entry.lost {
        if Instant::now() < lost.next_look {
            return false;
        }
        lost.next_look = Instant::now() + LOOK_EVERY;
    }
    // Where it would be: the parent and session of the task's processes.
    let mut hints: Vec<u32> = entry.started.iter().map(|s| s.pid).collect();
    if let Ok(spec) = crate::shepherd::LaunchSpec::read(&entry.dir.spec()) {
        let cgroups = TaskCgroups::named_in_spec(&spec.all_cgroups(), &task.job, task.job_id, &task.task);
        hints.extend(cgroup::kill::members(&cgroups).into_iter().take(64));
    }
    let Some((pid, start)) = runner::find_shepherd(&entry.dir.spec(), &hints) else {
        return false;
    };
    let was = entry.shepherd_pid;
    tracing::info!(
        job = %task.job, job_id = %task.job_id, task = %task.task, shepherd = pid, pid_file = ?was,
        "found the task's shepherd by its command line; its pid file is written again"
    );
    entry.shepherd_pid = Some(pid);
    entry.shepherd_start = Some(start);
    entry.lost = None;
    // Written again where a restarted agent looks. A missing file only once the task has
    // started: before, the shepherd may not have written its own yet (it writes it
    // exclusively, and would take ours for another shepherd's).
    let text = format!("{pid}\n");
    let written = match was {
        Some(_) => crate::shepherd::layout::write_replace(&entry.dir.pid(), text.as_bytes()),
        None if entry.started.is_some() => write_exclusive(&entry.dir.pid(), text.as_bytes()),
        None => Ok(()),
    };
    if let Err(e) = written {
        tracing::debug!(dir = %entry.dir.dir.display(), "cannot write the pid file again: {e}");
    }
    true
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::path::PathBuf;

    use super::*;

    /// A Launch of task `w-0` of job `j` (id `job_id`), for user `nobody`.
    fn frame(job_id: hyperplan_shared::ids::JobId) -> LaunchTask {
        LaunchTask {
            job: "j".into(),
            job_id,
            task: "w-0".into(),
            index: 0,
            rank: 0,
            user: "nobody".into(),
            argv: vec!["true".into()],
            env: Default::default(),
            working_dir: Some("/".into()),
            output: "o".into(),
            error: "o".into(),
            time_limit_secs: None,
            hyper_nodes: vec![],
            cpus: String::new(),
            numa_nodes: vec![],
            bind_memory: false,
            gpus: vec![],
            nics: vec![],
            memory_bytes: None,
            max_processes: None,
            epoch: 1,
            mpi: None,
            credential: None,
            run: 0,
            fence: false,
        }
    }

    fn tasks(state: &std::path::Path) -> Tasks {
        tasks_with_grace(state, LOST_GRACE)
    }

    fn tasks_with_grace(state: &std::path::Path, lost_grace: Duration) -> Tasks {
        try_tasks(state, lost_grace).unwrap()
    }

    fn try_tasks(state: &std::path::Path, lost_grace: Duration) -> Result<Tasks, TasksError> {
        Tasks::with_lost_grace(
            TaskOptions {
                state_dir: state.to_path_buf(),
                pin: false,
                confinement: crate::tasks::cgroup::Confinement::None,
                allow_root: false,
                pids_max: Some(64),
                limits_conf: false,
                rlimits: Default::default(),
                shepherd: PathBuf::from("/nonexistent/hyperplan-agent"),
                default_mpi: hyperplan_shared::job::MpiMode::None,
                output_mode: crate::config::DEFAULT_OUTPUT_MODE,
                private_tmp: Default::default(),
                launcher: None,
                cli: PathBuf::from("hyperplan"),
            },
            lost_grace,
        )
    }

    #[test]
    fn a_state_dir_that_is_a_file_is_said_so_once() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("state");
        std::fs::write(&file, "").unwrap();
        let e = try_tasks(&file, LOST_GRACE).err().unwrap();
        let text = format!("{:#}", anyhow::Error::from(e));
        assert!(text.ends_with("state: it exists and is not a directory (set --state-dir, or stateDir in agent.toml, to a directory the agent may own)"), "{text}");
        assert!(!text.contains("os error"), "{text}");
    }

    fn finished(messages: &[AgentMessage]) -> Vec<(TaskRef, hyperplan_shared::taskend::TaskEnd)> {
        messages
            .iter()
            .filter_map(|m| match m {
                AgentMessage::TaskFinished(f) => Some((f.task.clone(), f.end.clone())),
                _ => None,
            })
            .collect()
    }

    /// A job's world on nodes `nodes` (ranks by node index), its restart count.
    fn world(
        job: &str,
        job_id: hyperplan_shared::ids::JobId,
        nodes: &[&str],
        node_of_rank: &[u32],
        restart: u32,
    ) -> JobWorld {
        JobWorld {
            job: job.into(),
            job_id,
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            node_of_rank: node_of_rank.to_vec(),
            master_addr: "127.0.0.1".into(),
            master_port: 29500,
            launch: Default::default(),
            restart,
            slurm: None,
            array: None,
        }
    }

    #[test]
    fn a_jobs_hostfile_is_written_by_its_first_task_here_and_kept_for_the_others() {
        use std::os::unix::fs::MetadataExt;
        let state = tempfile::tempdir().unwrap();
        let mut t = tasks(state.path());
        t.on_job(world("j", 4.into(), &["n1", "n2"], &[0, 0, 0, 1], 0));
        let hostfile = state.path().join("tasks/j.4/hostfile");
        // The shepherd cannot start here; the hostfile is written before it would.
        t.on_launch("n1", &[], &frame(4.into()));
        let first = std::fs::metadata(&hostfile).unwrap().ino();
        assert_eq!(std::fs::read_to_string(&hostfile).unwrap(), "n1\nn1\nn1\nn2\n");
        let second = LaunchTask {
            task: "w-1".into(),
            index: 1,
            rank: 1,
            ..frame(4.into())
        };
        t.on_launch("n1", &[], &second);
        assert_eq!(std::fs::metadata(&hostfile).unwrap().ino(), first, "not written again");
        // Different contents (a hand-edited or damaged file) are replaced.
        std::fs::write(&hostfile, "n9\n").unwrap();
        let third = LaunchTask {
            task: "w-2".into(),
            index: 2,
            rank: 2,
            ..frame(4.into())
        };
        t.on_launch("n1", &[], &third);
        assert_eq!(std::fs::read_to_string(&hostfile).unwrap(), "n1\nn1\nn1\nn2\n");
        // Rank 3 lost with n2 starts again on n3: the job's running tasks here read the
        // new world in their hostfile, and the restart count beside it.
        t.on_job(world("j", 4.into(), &["n1", "n3"], &[0, 0, 0, 1], 1));
        assert_eq!(std::fs::read_to_string(&hostfile).unwrap(), "n1\nn1\nn1\nn3\n");
        let restart = state.path().join("tasks/j.4/restart");
        assert_eq!(std::fs::read_to_string(&restart).unwrap(), "1\n");
        // The same world again writes nothing; a job with nothing here gets no files.
        let before = std::fs::metadata(&hostfile).unwrap().ino();
        t.on_job(world("j", 4.into(), &["n1", "n3"], &[0, 0, 0, 1], 1));
        assert_eq!(std::fs::metadata(&hostfile).unwrap().ino(), before);
        t.on_job(world("other", 5.into(), &["n1"], &[0], 2));
        assert!(!state.path().join("tasks/other.5").exists());
    }

    #[test]
    fn a_shepherd_that_died_without_a_record_fails_its_task_and_an_ack_forgets_it() {
        let state = tempfile::tempdir().unwrap();
        let dir = TaskDir::new(state.path(), "j", 3.into(), "w-0");
        std::fs::create_dir_all(&dir.dir).unwrap();
        std::fs::write(dir.spec(), "{}").unwrap();
        std::fs::write(dir.dir.parent().unwrap().join("hostfile"), "n1\n").unwrap();
        // A pid that is gone (a child already reaped).
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let pid = gone.id();
        gone.wait().unwrap();
        std::fs::write(dir.pid(), format!("{pid}\n")).unwrap();
        // Not failed at once: looked for first (no grace here, so at the first scan).
        let t = tasks_with_grace(state.path(), Duration::ZERO);
        let ends = finished(&t.unacked());
        assert_eq!(ends.len(), 1);
        let (task, end) = &ends[0];
        assert_eq!(
            (task.job.as_str(), task.job_id, task.task.as_str()),
            ("j", 3.into(), "w-0")
        );
        assert_eq!(end.outcome, hyperplan_shared::taskend::TaskOutcome::Failed);
        assert!(
            end.reason.as_deref().unwrap().contains("died without a record"),
            "{end:?}"
        );
        assert!(dir.record().is_file(), "the record is kept on disk until acknowledged");
        assert!(t.running(&Default::default()).is_empty());

        // Found again by a restarted agent: the same end, once.
        drop(t);
        let mut t = tasks_with_grace(state.path(), Duration::ZERO);
        assert_eq!(finished(&t.unacked()).len(), 1);
        assert!(t.scan().is_empty(), "nothing new");
        t.on_kill(task, 1, None); // ended: nothing to do
        t.on_ack(task, true);
        assert!(t.unacked().is_empty());
        assert!(
            !dir.dir.parent().unwrap().exists(),
            "the job directory and hostfile are gone"
        );
        // A late repeated Launch starts nothing.
        let launch = frame(3.into());
        assert!(t.on_launch("n1", &[], &launch).is_empty());
        assert!(!dir.dir.exists());
        // The task placed here again (its job requeued): a later run is tried (the shepherd
        // program cannot start here, which its end says), and only once.
        t.on_job(world("j", 3.into(), &["n1"], &[0], 0));
        let again = LaunchTask {
            run: 1,
            ..frame(3.into())
        };
        let ends = finished(&t.on_launch("n1", &[], &again));
        assert_eq!(ends.len(), 1, "{ends:?}");
        assert!(
            t.on_launch("n1", &[], &again).is_empty(),
            "the same run again starts nothing"
        );
    }

    #[test]
    fn launches_that_cannot_start_are_failed_records() {
        let state = tempfile::tempdir().unwrap();
        let mut t = tasks(state.path());
        let mut launch = frame(4.into());
        // No Job frame.
        let ends = finished(&t.on_launch("n1", &[], &launch));
        assert!(ends[0].1.reason.as_deref().unwrap().contains("no Job frame"));
        // A hostile name: refused, reported from memory, no directory.
        launch.job = "../etc".into();
        let ends = finished(&t.on_launch("n1", &[], &launch));
        assert!(ends[0].1.reason.as_deref().unwrap().contains("job name"), "{ends:?}");
        assert!(!state.path().join("etc").exists());
        // The shepherd program cannot be started.
        launch.job = "j".into();
        launch.job_id = 5.into();
        t.on_job(world("j", 5.into(), &["n1"], &[0], 0));
        let ends = finished(&t.on_launch("n1", &[], &launch));
        assert!(
            ends[0]
                .1
                .reason
                .as_deref()
                .unwrap()
                .contains("cannot start the shepherd"),
            "{ends:?}"
        );
        assert_eq!(finished(&t.unacked()).len(), 3);
    }

    #[test]
    fn a_task_s_cgroup_is_made_before_its_shepherd_and_removed_after_its_acknowledged_end() {
        // A fake cgroup v2 tree (see `cgroup`'s tests: no real cgroup v2 here).
        let (state, fake) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(fake.path().join("cgroup.controllers"), "cpuset memory").unwrap();
        let own = fake.path().join("agent.service");
        std::fs::create_dir(&own).unwrap();
        std::fs::write(own.join("cgroup.controllers"), "cpuset memory").unwrap();
        std::fs::write(own.join("cgroup.procs"), "").unwrap();
        let cgroups = cgroup::Confinement::detect_with(fake.path(), "0::/agent.service\n", 1, "hyperplan")
            .cgroups()
            .unwrap()
            .clone();
        let mut t = Tasks::new(TaskOptions {
            state_dir: state.path().to_path_buf(),
            pin: true,
            confinement: cgroup::Confinement::Cgroup(cgroups),
            allow_root: false,
            pids_max: Some(64),
            limits_conf: false,
            rlimits: Default::default(),
            shepherd: PathBuf::from("/nonexistent/hyperplan-agent"),
            default_mpi: hyperplan_shared::job::MpiMode::None,
            output_mode: crate::config::DEFAULT_OUTPUT_MODE,
            private_tmp: Default::default(),
            launcher: None,
            cli: PathBuf::from("hyperplan"),
        })
        .unwrap();
        t.on_job(world("j", 6.into(), &["n1"], &[0], 0));
        let launch = LaunchTask {
            cpus: "0-1".into(),
            numa_nodes: vec![0],
            bind_memory: true,
            memory_bytes: Some(1 << 20),
            epoch: 1,
            ..frame(6.into())
        };
        // The shepherd cannot start here, but the spec naming the cgroup was written first.
        let ends = finished(&t.on_launch("n1", &[], &launch));
        assert_eq!(ends.len(), 1);
        let cg = own.join("tasks/j.6.w-0");
        let read = |f: &str| std::fs::read_to_string(cg.join(f)).unwrap();
        assert_eq!(
            (read("cpuset.cpus"), read("cpuset.mems"), read("memory.max")),
            ("0-1".into(), "0".into(), "1048576".into())
        );
        let dir = TaskDir::new(state.path(), "j", 6.into(), "w-0");
        let spec = crate::shepherd::LaunchSpec::read(&dir.spec()).unwrap();
        assert_eq!(spec.cgroups, std::slice::from_ref(&cg));

        // The kernel lists no interface files as contents: rmdir works on a real one.
        for f in ["cpuset.cpus", "cpuset.mems", "memory.max"] {
            std::fs::remove_file(cg.join(f)).unwrap();
        }
        t.on_ack(&ends[0].0, true);
        assert!(!cg.exists(), "the task's cgroup is removed with its directory");
        assert!(!dir.dir.exists());
    }

    /// A stand-in shepherd: a session leader whose command line names `spec` after
    /// `--spec`, as `hyperplan-agent shepherd --spec FILE` does; it runs until killed.
    fn fake_shepherd(spec: &std::path::Path) -> std::process::Child {
        std::process::Command::new("setsid")
            .args(["sh", "-c", "sleep 600; :", "shepherd", "--spec"])
            .arg(spec)
            .spawn()
            .unwrap()
    }

    /// A task directory that has started (spec, `started.json`), with no pid file.
    fn started_task(state: &std::path::Path, job_id: hyperplan_shared::ids::JobId, task_pid: u32) -> TaskDir {
        let dir = TaskDir::new(state, "j", job_id, "w-0");
        std::fs::create_dir_all(&dir.dir).unwrap();
        std::fs::write(dir.spec(), "{}").unwrap();
        std::fs::write(dir.started(), format!(r#"{{"pid": {task_pid}, "startTimeMs": 1}}"#)).unwrap();
        dir
    }

    fn wait_gone(child: &mut std::process::Child) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the stand-in shepherd outlived its cancel");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn wait_shepherd(pid: u32, spec: &std::path::Path) {
        let deadline = Instant::now() + Duration::from_secs(10);
        // Until `setsid` has made its session, its command line names the spec too but
        // it is no shepherd yet: wait for the session, as a real shepherd's first act.
        // And for its exec of `sh`: while the kernel swaps the program in, the command
        // line reads empty for a moment, and a scan then would find nothing.
        let exec_done =
            || std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.split(|&b| b == 0).next() == Some(b"sh"));
        while !(exec_done() && runner::is_shepherd(pid, spec)) {
            assert!(Instant::now() < deadline, "the stand-in shepherd did not start");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_task_whose_pid_file_is_gone_or_wrong_is_found_by_its_shepherd_s_command_line() {
        // The pid file deleted, then one naming another live process.
        for wrong in [false, true] {
            let state = tempfile::tempdir().unwrap();
            let dir = started_task(state.path(), 8.into(), 1);
            let mut shepherd = fake_shepherd(&dir.spec());
            wait_shepherd(shepherd.id(), &dir.spec());
            let mut other = std::process::Command::new("sleep").arg("600").spawn().unwrap();
            if wrong {
                std::fs::write(dir.pid(), format!("{}\n", other.id())).unwrap();
            }
            // An hour's grace: nothing here may depend on it running out.
            let mut t = tasks_with_grace(state.path(), Duration::from_secs(3600));
            assert!(finished(&t.unacked()).is_empty(), "wrong={wrong}: not failed");
            let running = t.running(&Default::default());
            assert_eq!(running.len(), 1, "wrong={wrong}: still this node's");
            assert_eq!(t.shepherds(), [shepherd.id()], "wrong={wrong}");
            assert_eq!(
                scan::read_pid(&dir),
                Some(shepherd.id()),
                "wrong={wrong}: the pid file is written again"
            );
            // Cancel reaches the shepherd found, not the process the pid file named.
            let task = running[0].task.clone();
            t.on_kill(&task, 1, None);
            let status = wait_gone(&mut shepherd);
            // Its `sleep` outlives the `sh` it ran under: not to be left behind.
            let procs = crate::tasks::sweep::all(std::path::Path::new("/proc"));
            crate::tasks::sweep::kill_each(&crate::tasks::sweep::session(&procs, shepherd.id()));
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(status.signal(), Some(libc::SIGTERM), "wrong={wrong}");
            assert_eq!(std::fs::read_to_string(dir.kill_grace()).unwrap(), "1\n");
            assert!(
                matches!(other.try_wait(), Ok(None)),
                "wrong={wrong}: the other process was spared"
            );
            other.kill().unwrap();
            other.wait().unwrap();
        }
    }

    #[test]
    fn a_launched_shepherd_is_known_by_pid_and_start_not_by_its_command_line() {
        let state = tempfile::tempdir().unwrap();
        let t = tasks_with_grace(state.path(), Duration::from_secs(3600));
        let task = TaskRef {
            job: "l".into(),
            job_id: 3.into(),
            task: "t".into(),
            index: 0,
        };
        let dir = TaskDir::new(state.path(), "l", 3.into(), "t");
        std::fs::create_dir_all(&dir.dir).unwrap();
        // A process whose command line does not name the spec (as one just exec'd may
        // not yet): the launcher's shepherd all the same, by pid and start time.
        let mut stand_in = std::process::Command::new("sleep").arg("600").spawn().unwrap();
        let mut entry = Entry::new(dir.clone(), 0);
        entry.follow(runner::Shepherd::Launched(stand_in.id()));
        assert!(entry.launched);
        let vanished = |entry: &mut Entry| vanished(&t.opts, &[], Duration::from_secs(3600), &task, entry);
        assert!(vanished(&mut entry).is_none());
        assert!(entry.lost.is_none(), "not looked for: it runs");
        assert!(!dir.pid().exists(), "its pid file is the shepherd's to write");
        // Gone: failed at once, no grace to wait.
        stand_in.kill().unwrap();
        let _ = stand_in.wait();
        let record = vanished(&mut entry).expect("a failed record");
        assert!(record.reason.unwrap().contains("died without a record"));
        // A record it wrote just before it went is taken instead.
        let mut other = std::process::Command::new("true").spawn().unwrap();
        let mut entry = Entry::new(dir.clone(), 0);
        entry.follow(runner::Shepherd::Launched(other.id()));
        let _ = other.wait();
        let ended = runner::synthesized("l", 3.into(), "t", 0, other.id(), None, "its own words".into());
        std::fs::remove_file(dir.record()).unwrap();
        runner::write_record(&dir, &ended);
        let record = vanished(&mut entry).expect("its record");
        assert_eq!(record.reason.as_deref(), Some("its own words"));
    }

    #[test]
    fn a_task_whose_shepherd_is_nowhere_is_held_until_its_grace_then_fails() {
        let state = tempfile::tempdir().unwrap();
        let dir = started_task(state.path(), 9.into(), 1);
        // Held: listed as running with no pid, no end reported, its pid file not written.
        let mut t = tasks_with_grace(state.path(), Duration::from_secs(3600));
        assert!(finished(&t.unacked()).is_empty());
        assert!(finished(&t.scan()).is_empty());
        let running = t.running(&Default::default());
        assert_eq!(running.len(), 1);
        assert_eq!(running[0].pid, 0, "no pid it can vouch for");
        assert!(t.shepherds().is_empty(), "no pid to sample or signal");
        // `/metrics` shows it running (by job id and index), using nothing sampled.
        let now = t.metrics_now(&Default::default());
        assert_eq!(now.unacknowledged_ends, 0);
        assert_eq!(
            now.running,
            [crate::metrics::TaskUse {
                job_id: 9.into(),
                index: running[0].task.index,
                cpu_cores: 0.0,
                memory_bytes: 0,
            }]
        );
        assert!(!dir.record().exists() && !dir.pid().exists());
        // Proven gone once the grace is over: failed, saying why.
        drop(t);
        let t = tasks_with_grace(state.path(), Duration::ZERO);
        let ends = finished(&t.unacked());
        assert_eq!(ends.len(), 1);
        let reason = ends[0].1.reason.as_deref().unwrap();
        assert!(reason.contains("pid file is gone"), "{reason}");
        assert_eq!(ends[0].1.outcome, hyperplan_shared::taskend::TaskOutcome::Failed);
        let now = t.metrics_now(&Default::default());
        assert!(now.running.is_empty());
        assert_eq!(now.unacknowledged_ends, 1);
    }
}
