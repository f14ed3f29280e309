//! The rows one ended job becomes: the job's (the same type `history` answers with, its
//! steps inside), and one per task. Column lists and values for the upserts.

use hyperplan_shared::history::{HistoryJob, HistoryStep};

use crate::sql::{Sql, Value, upsert_many};

/// A job's row.
pub type JobRow = HistoryJob;
/// A step's row.
pub type StepRow = HistoryStep;

/// One task of an ended job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskRow {
    /// Its place in the job (spec order, then replica).
    pub index: u32,
    /// `<task name>-<replica>`.
    pub name: String,
    pub rank: Option<u32>,
    pub node: Option<String>,
    pub start: Option<u64>,
    pub end: u64,
    /// `exited`, `signaled`, `timeout`, `cancelled`, `failed`, `lost`, or `pending` for
    /// one never placed.
    pub outcome: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub cpus: f64,
    pub gpus: u64,
    pub memory: u64,
    pub cpu_seconds: f64,
    pub max_rss: u64,
}

/// Everything one ended job writes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rows {
    pub job: JobRow,
    pub tasks: Vec<TaskRow>,
}

pub(crate) const JOB_COLUMNS: &[&str] = &[
    "cluster",
    "job_id",
    "attempt",
    "array_job_id",
    "array_index",
    "name",
    "user_name",
    "account",
    "queue",
    "submit_time",
    "eligible_time",
    "start_time",
    "end_time",
    "state",
    "reason",
    "exit_code",
    "signal",
    "nnodes",
    "ntasks",
    "nodelist",
    "hypernode",
    "tier",
    "req_cpus",
    "req_gpus",
    "req_memory",
    "alloc_cpus",
    "alloc_gpus",
    "alloc_memory",
    "time_limit",
    "cpu_seconds",
    "max_rss",
    "core_seconds",
    "gpu_seconds",
    "requeues",
    "restarts",
    "preempted_by",
];
const JOB_KEY: &[&str] = &["cluster", "job_id", "attempt"];

const TASK_COLUMNS: &[&str] = &[
    "cluster",
    "job_id",
    "attempt",
    "task_index",
    "name",
    "task_rank",
    "node",
    "start_time",
    "end_time",
    "outcome",
    "exit_code",
    "signal",
    "cpus",
    "gpus",
    "memory",
    "cpu_seconds",
    "max_rss",
];
const TASK_KEY: &[&str] = &["cluster", "job_id", "attempt", "task_index"];

pub(crate) const STEP_COLUMNS: &[&str] = &[
    "cluster",
    "job_id",
    "attempt",
    "step",
    "nodelist",
    "nnodes",
    "start_time",
    "end_time",
    "exit_code",
    "signal",
    "command",
    "job_end_time",
];
const STEP_KEY: &[&str] = &["cluster", "job_id", "attempt", "step"];

/// The upserts that write `jobs` for `cluster`: a few multi-row statements per table.
pub fn statements(cluster: &str, jobs: &[Rows]) -> Vec<Sql> {
    let (mut j, mut t, mut s) = (Vec::new(), Vec::new(), Vec::new());
    for r in jobs {
        r.values(cluster, &mut j, &mut t, &mut s);
    }
    let mut out = upsert_many("jobs", JOB_COLUMNS, JOB_KEY, j);
    out.extend(upsert_many("tasks", TASK_COLUMNS, TASK_KEY, t));
    out.extend(upsert_many("steps", STEP_COLUMNS, STEP_KEY, s));
    out
}

impl Rows {
    /// This job's rows' values: its own, its tasks', its steps'.
    fn values(
        &self,
        cluster: &str,
        jobs: &mut Vec<Vec<Value>>,
        tasks: &mut Vec<Vec<Value>>,
        steps: &mut Vec<Vec<Value>>,
    ) {
        let j = &self.job;
        let key = || vec![Value::text(cluster), Value::int(j.job_id), Value::int(j.attempt)];
        let mut job = key();
        job.extend([
            Value::opt_int(j.array_job_id),
            Value::opt_int(j.array_index),
            Value::text(&j.name),
            Value::text(&j.user),
            Value::text(&j.account),
            Value::text(&j.queue),
            Value::int(j.submit),
            Value::int(j.eligible),
            Value::opt_int(j.start),
            Value::int(j.end),
            Value::text(&j.state),
            Value::Text(j.reason.clone()),
            Value::opt_int(j.exit_code),
            Value::opt_int(j.signal),
            Value::int(j.nnodes),
            Value::int(j.ntasks),
            Value::text(&j.nodelist),
            Value::Text(j.hypernode.clone()),
            Value::opt_int(j.tier),
            Value::Real(Some(j.req_cpus)),
            Value::int(j.req_gpus),
            Value::int(j.req_memory),
            Value::Real(Some(j.alloc_cpus)),
            Value::int(j.alloc_gpus),
            Value::int(j.alloc_memory),
            Value::opt_int(j.time_limit),
            Value::Real(Some(j.cpu_seconds)),
            Value::int(j.max_rss),
            Value::Real(Some(j.core_seconds)),
            Value::Real(Some(j.gpu_seconds)),
            Value::int(j.requeues),
            Value::int(j.restarts),
            Value::Text(j.preempted_by.clone()),
        ]);
        jobs.push(job);
        for t in &self.tasks {
            let mut v = key();
            v.extend([
                Value::int(t.index),
                Value::text(&t.name),
                Value::opt_int(t.rank),
                Value::Text(t.node.clone()),
                Value::opt_int(t.start),
                Value::int(t.end),
                Value::text(&t.outcome),
                Value::opt_int(t.exit_code),
                Value::opt_int(t.signal),
                Value::Real(Some(t.cpus)),
                Value::int(t.gpus),
                Value::int(t.memory),
                Value::Real(Some(t.cpu_seconds)),
                Value::int(t.max_rss),
            ]);
            tasks.push(v);
        }
        for s in &j.steps {
            let mut v = key();
            v.extend([
                Value::int(s.step),
                Value::text(&s.nodelist),
                Value::int(s.nnodes),
                Value::opt_int(s.start),
                Value::opt_int(s.end),
                Value::opt_int(s.exit_code),
                Value::opt_int(s.signal),
                Value::Text(s.command.clone()),
                Value::int(j.end),
            ]);
            steps.push(v);
        }
    }
}
