//! A job's state: its phase and verdict, and [`JobState`], the component, whose durable
//! part is [`StateRecord`], the very struct the store keeps (one type, not two copied
//! field by field).

use bevy_ecs::prelude::Component;
use serde::{Deserialize, Serialize};

use crate::model::kill::KillReason;
use crate::model::reason::Reason;

/// How a job ended (or is ending), once decided; `None` on the simulator's jobs, whose
/// tasks nobody reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Verdict {
    /// Every placed task exited 0.
    Completed,
    /// A task failed, or was lost and the job does not ask `requeue`.
    Failed,
    /// `hyperplan cancel`.
    Cancelled,
    /// A task hit the job's time limit.
    Timeout,
    /// Preempted (and not requeued).
    Preempted,
}

/// Lifecycle of a job as people see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum JobPhase {
    /// Gang minimum not placed yet.
    Pending,
    /// Gang minimum placed (tasks may still be waiting for room).
    Running,
    /// The verdict is decided (`JobState::verdict`, or a requeue) but tasks on agents'
    /// nodes still hold resources until their ends are reported: never placed, never
    /// retired (retiring would hide their ends from the resource cache), name taken.
    Ending,
    /// Every placed task finished.
    Finished,
    /// Can never run, even on the empty cluster.
    Rejected,
    /// Cancelled, and none of its tasks holds resources any more.
    Cancelled,
}

/// A job's state in the world: what the store keeps of it ([`StateRecord`], reached
/// through `Deref`, so `state.phase` reads and writes the stored field) and what the
/// allocator works out again after a restart. A new durable field is one edit, in
/// [`StateRecord`].
#[derive(Component, Clone, Debug, Default)]
pub struct JobState {
    /// What the store keeps (see `model::record`).
    pub stored: StateRecord,
    /// The topology generation this job was last found unplaceable on the empty cluster
    /// for, so the (costly) check runs once per topology.
    pub checked_generation: Option<u64>,
    /// The room epoch (the capacity epoch plus the reservations' generation, see
    /// `allocate`) of the last attempt that placed nothing.
    pub failed_epoch: Option<u64>,
    /// What keeps it from being tried besides a hold or a begin time (a dependency, its
    /// array's limit, `singleton`): worked out each tick by `jobs::gates`.
    pub gate: Option<super::gate::Gate>,
    /// What its gang needs of the whole cluster, for the walk's cheap "cannot fit" skip:
    /// worked out once per set of resource dimensions, not from the spec's resource maps
    /// on every walk (string lookups in the walk's inner loop).
    pub room_need: Option<RoomNeed>,
    /// How long backfill expects it to run, from its start (its time limit, or a runtime
    /// estimate: `allocate::backfill::estimate`); set when it starts.
    pub expected_run: Option<u64>,
}

/// A job's gang need per resource dimension (see [`JobState::room_need`]).
#[derive(Clone, Debug)]
pub struct RoomNeed {
    /// The dimensions it was worked out for (the capacity cache's, compared by pointer).
    pub dims: std::sync::Arc<[String]>,
    /// Per dimension; `None`: a task asks for a resource no node has.
    pub need: Option<Box<[u64]>>,
}

impl JobState {
    /// A pending job.
    pub fn new() -> Self {
        Self::default()
    }

    /// Which placement of its tasks a new one is (`Placement::run`).
    pub fn run(&self) -> u32 {
        self.requeues.saturating_add(self.restarts)
    }

    /// Whether the job has tasks still to place: ranks not yet given, or lost tasks
    /// waiting to start again. A job with a verdict gets no more.
    pub fn has_tasks_to_place(&self, tasks: usize) -> bool {
        self.verdict.is_none() && ((self.next_rank as usize) < tasks || !self.replacing.is_empty())
    }

    /// Whether the job has not ended: pending, running or ending (its tasks still hold
    /// resources), or rejected for the topology of now (looked at again when it changes).
    /// Its name stays taken and it counts against its owner's limits.
    pub fn is_live(&self) -> bool {
        match self.phase {
            JobPhase::Pending | JobPhase::Running | JobPhase::Ending => true,
            JobPhase::Rejected => self.checked_generation.is_some(),
            JobPhase::Finished | JobPhase::Cancelled => false,
        }
    }

    /// A job in the stored state `stored` (restored from the store).
    pub fn from_stored(stored: StateRecord) -> Self {
        Self {
            stored,
            ..Self::default()
        }
    }
}

impl std::ops::Deref for JobState {
    type Target = StateRecord;

    fn deref(&self) -> &StateRecord {
        &self.stored
    }
}

impl std::ops::DerefMut for JobState {
    fn deref_mut(&mut self) -> &mut StateRecord {
        &mut self.stored
    }
}

/// The durable part of a job's state: what [`JobState`] holds and the store keeps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateRecord {
    /// Where it is in its life (see [`JobPhase`]).
    pub phase: JobPhase,
    /// Why it waits or how it ended; stored once the job is ending or ended (a waiting
    /// job's reason is worked out again).
    pub reason: Option<Reason>,
    /// When its gang minimum was placed (Unix seconds); `None` until then.
    pub start_time: Option<u64>,
    /// When it ended (Unix seconds): finished, or cancelled; `None` until then.
    pub end_time: Option<u64>,
    /// Volcano's job-level AllocatedHyperNode, by name (stable across re-indexing).
    pub allocated_hyper_node: Option<String>,
    /// The rank the job's next placed task gets (ranks count from 0).
    pub next_rank: u32,
    /// Decided by the first task that failed or timed out, a cancel, or every placed
    /// task exiting 0 (see `lifecycle`).
    pub verdict: Option<Verdict>,
    /// Set when it ended, if any task's end was reported: 0, or `first_failure`'s code.
    pub exit_code: Option<i32>,
    /// The earliest (by end time, Unix ms) non-zero task end and its shell exit code.
    pub first_failure: Option<(u64, i32)>,
    /// Some task's end was reported by its agent (or it was lost): the job gets an exit
    /// code and a verdict of `completed` when all went well.
    pub reported: bool,
    /// Some task reported started (status `running` rather than `placed`).
    pub task_started: bool,
    /// While ending: the kill sent to its tasks, repeated to a task its node still lists.
    pub kill: Option<(KillReason, u64)>,
    /// Back to pending once its tasks ended (a node with its tasks was lost and the job
    /// asks `requeue`); the reason it will show.
    pub requeue: Option<Reason>,
    /// Rejected by the allocator (looked at again when nodes join), not at submit. Set
    /// in the record only (`persist`, from `JobState::checked_generation`).
    pub rejected_for_topology: bool,
    /// While it waits with a reservation: when it is expected to start and where (see
    /// `allocate::backfill`). Kept in the store, so `status` shows it across a restart
    /// until the first walk works it out again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<hyperplan_shared::report::ReservationReport>,
    /// Its steps (`hyperplan exec` into it), numbered from 0, the newest
    /// [`MAX_STEPS`] kept: where each ran, so `hyperplan logs JOB.STEP` finds its output.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepRecord>,
    /// The job that preempted it last, by name (kept when it is requeued).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_by: Option<String>,
    /// While it waits for the victims of its preemption to end: where, and the nodes
    /// held for it against every other job (see `preempt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nomination: Option<hyperplan_shared::report::Nomination>,
    /// Times lost tasks of it were started again elsewhere (`onNodeLost: replace`): its
    /// tasks' `HYPERPLAN_RESTART`. Kept when it is requeued.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restarts: u32,
    /// Times it went back to pending after running (a lost node, a preemption).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub requeues: u32,
    /// Tasks (by their place in the job) lost with their node that wait to start again,
    /// keeping their ranks (see `jobs::replace`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replacing: Vec<u32>,
    /// Its `MASTER_PORT`, chosen free on rank 0's node when it was first placed (its
    /// `masterPort` when it gives one) and kept while it runs; `None` until then, and again
    /// after a requeue (which places it anew).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master_port: Option<u16>,
    /// Held (`hyperplan hold`, `submit --hold`) and by whom: it waits until released
    /// (see `jobs::holds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<crate::model::held::Held>,
    /// Its dependency, once decided (met, or never to be met): kept, so that a restart,
    /// which brings back no ended job, decides nothing again from targets it no longer
    /// holds (see `jobs::dependencies`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependency: Option<crate::model::gate::Settled>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Steps a job keeps the record of (the newest; numbering goes on).
pub const MAX_STEPS: usize = 1024;

/// The most bytes of a step's [`StepRecord::command`] kept (cut at a character).
pub const MAX_STEP_COMMAND: usize = 256;

/// One step of a job: its number, the nodes it ran on, and (for accounting) when it
/// began and ended and how. The times and the end are optional: records written before
/// they were kept load without them, and a step whose exec session has not ended (or
/// ended with the planner that ran it) has no end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepRecord {
    /// Numbered from 0 in the job.
    pub step: u32,
    /// The nodes, in the order the step's output names them.
    pub nodes: Vec<String>,
    /// When it began (Unix seconds): the core's time when it was numbered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<u64>,
    /// When its exec session ended (Unix seconds): every node reported its command's
    /// end, or the person went away (their commands killed), or the nodes were lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<u64>,
    /// How it ended, see [`StepEnd::exit_code`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// How it ended, see [`StepEnd::signal`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Its command line: the words joined by spaces, the first [`MAX_STEP_COMMAND`]
    /// bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

/// How a step ended, over its nodes (what its exec session saw of each node's
/// `Exit`): the first failure, in the order the nodes' ends arrived, decides, as the
/// first failed task decides a job's exit code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepEnd {
    /// The first non-zero exit code a node reported; 0 when every node that reported an
    /// exit code reported 0; `None` when none reported one (each was killed by a signal,
    /// lost, or never heard from because the person went away first).
    pub exit_code: Option<i32>,
    /// The first signal that killed the command on a node; `None` when none did.
    pub signal: Option<i32>,
}

impl StepEnd {
    /// Adds one node's end (its exit code, or the signal that killed it).
    pub fn node_exited(&mut self, code: Option<i32>, signal: Option<i32>) {
        if let Some(code) = code
            && self.exit_code.is_none_or(|c| c == 0)
        {
            self.exit_code = Some(code);
        }
        if self.signal.is_none() {
            self.signal = signal;
        }
    }
}

impl StepRecord {
    /// The step as `status --output json` shows it.
    pub fn report(&self) -> hyperplan_shared::report::StepReport {
        hyperplan_shared::report::StepReport {
            step: self.step,
            nodes: self.nodes.clone(),
            start_time: self.start_time,
            end_time: self.end_time,
            exit_code: self.exit_code,
            signal: self.signal,
            command: self.command.clone(),
        }
    }
}

/// A step's command line as kept: `argv` joined by spaces, at most
/// [`MAX_STEP_COMMAND`] bytes, cut at a character boundary; `None` for no words.
pub fn step_command(argv: &[String]) -> Option<String> {
    let mut line = argv.join(" ");
    if line.is_empty() {
        return None;
    }
    if line.len() > MAX_STEP_COMMAND {
        let mut cut = MAX_STEP_COMMAND;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
    }
    Some(line)
}

impl StateRecord {
    /// A pending job's.
    pub fn new() -> Self {
        Self {
            phase: JobPhase::Pending,
            reason: None,
            start_time: None,
            end_time: None,
            allocated_hyper_node: None,
            next_rank: 0,
            verdict: None,
            exit_code: None,
            first_failure: None,
            reported: false,
            task_started: false,
            kill: None,
            requeue: None,
            rejected_for_topology: false,
            reservation: None,
            steps: Vec::new(),
            preempted_by: None,
            nomination: None,
            restarts: 0,
            requeues: 0,
            replacing: Vec::new(),
            master_port: None,
            held: None,
            dependency: None,
        }
    }
}

impl Default for StateRecord {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_step_written_before_its_times_were_kept_still_loads() {
        #[derive(Serialize)]
        struct Old {
            step: u32,
            nodes: Vec<String>,
        }
        let old = rmp_serde::to_vec_named(&Old {
            step: 4,
            nodes: vec!["n1".into()],
        })
        .unwrap();
        let step: StepRecord = rmp_serde::from_slice(&old).unwrap();
        assert_eq!((step.step, step.nodes.as_slice()), (4, ["n1".to_string()].as_slice()));
        assert_eq!(
            (step.start_time, step.end_time, step.exit_code, step.signal),
            (None, None, None, None)
        );
        assert_eq!(step.command, None);
        // And a step without an end is written without the fields it lacks.
        let bytes = rmp_serde::to_vec_named(&step).unwrap();
        assert_eq!(bytes, old);
    }

    #[test]
    fn a_steps_command_is_its_words_cut_at_a_character() {
        assert_eq!(step_command(&[]), None);
        assert_eq!(
            step_command(&["sh".into(), "-c".into(), "exit 3".into()]).as_deref(),
            Some("sh -c exit 3")
        );
        let long = step_command(&["x".repeat(255) + "é"]).unwrap();
        assert_eq!(long, "x".repeat(255), "é would cross byte 256");
        assert_eq!(step_command(&["y".repeat(400)]).unwrap().len(), MAX_STEP_COMMAND);
    }

    #[test]
    fn the_first_failure_over_the_nodes_decides_a_steps_end() {
        let mut end = StepEnd::default();
        assert_eq!(
            end,
            StepEnd {
                exit_code: None,
                signal: None
            }
        );
        end.node_exited(Some(0), None);
        assert_eq!(end.exit_code, Some(0));
        end.node_exited(None, Some(9));
        end.node_exited(Some(2), None);
        end.node_exited(Some(1), Some(15));
        assert_eq!(
            end,
            StepEnd {
                exit_code: Some(2),
                signal: Some(9)
            }
        );
    }
}
