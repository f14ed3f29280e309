//! `hyperplan history`: the jobs that match, newest first up to the limit, shown oldest
//! first; each with its steps when asked. The filters become indexed conditions: a user
//! and a period walk `jobs_by_user`, a period alone `jobs_by_end`.

use hyperplan_shared::history::{
    DEFAULT_HISTORY_LIMIT, History, HistoryJob, HistoryQuery, HistoryStep, MAX_HISTORY_LIMIT,
};

use crate::db::Db;
use crate::error::AccountingError;
use crate::rows::{JOB_COLUMNS, STEP_COLUMNS};
use crate::sql::{Kind, Sql, Value};

/// How a job row's columns (after `cluster`) are read.
const JOB_KINDS: &[Kind] = &[
    Kind::Int,  // job_id
    Kind::Int,  // attempt
    Kind::Int,  // array_job_id
    Kind::Int,  // array_index
    Kind::Text, // name
    Kind::Text, // user_name
    Kind::Text, // account
    Kind::Text, // queue
    Kind::Int,  // submit_time
    Kind::Int,  // eligible_time
    Kind::Int,  // start_time
    Kind::Int,  // end_time
    Kind::Text, // state
    Kind::Text, // reason
    Kind::Int,  // exit_code
    Kind::Int,  // signal
    Kind::Int,  // nnodes
    Kind::Int,  // ntasks
    Kind::Text, // nodelist
    Kind::Text, // hypernode
    Kind::Int,  // tier
    Kind::Real, // req_cpus
    Kind::Int,  // req_gpus
    Kind::Int,  // req_memory
    Kind::Real, // alloc_cpus
    Kind::Int,  // alloc_gpus
    Kind::Int,  // alloc_memory
    Kind::Int,  // time_limit
    Kind::Real, // cpu_seconds
    Kind::Int,  // max_rss
    Kind::Real, // core_seconds
    Kind::Real, // gpu_seconds
    Kind::Int,  // requeues
    Kind::Int,  // restarts
    Kind::Text, // preempted_by
];

const STEP_KINDS: &[Kind] = &[
    Kind::Int,  // job_id
    Kind::Int,  // attempt
    Kind::Int,  // step
    Kind::Text, // nodelist
    Kind::Int,  // nnodes
    Kind::Int,  // start_time
    Kind::Int,  // end_time
    Kind::Int,  // exit_code
    Kind::Int,  // signal
    Kind::Text, // command
];

/// Job ids per `IN (…)` when steps are read for many jobs.
const STEP_BATCH: usize = 500;

/// The statement for `q` over `cluster`'s jobs: the newest `limit + 1` (one more, to
/// know whether there were more).
pub fn statement(cluster: &str, q: &HistoryQuery, limit: u32) -> Sql {
    let mut s = Sql::new(&format!(
        "SELECT {} FROM jobs WHERE cluster = ",
        JOB_COLUMNS[1..].join(", ")
    ));
    s.bind(Value::text(cluster));
    let any_of = |s: &mut Sql, column: &str, values: &[String]| {
        if !values.is_empty() {
            s.push(&format!(" AND {column} IN "));
            s.bind_list(values.iter().map(Value::text));
        }
    };
    any_of(&mut s, "user_name", &q.users);
    any_of(&mut s, "account", &q.accounts);
    any_of(&mut s, "queue", &q.queues);
    let states: Vec<String> = q.states.iter().map(|x| x.to_ascii_uppercase()).collect();
    any_of(&mut s, "state", &states);
    if let Some(since) = q.since {
        s.push(" AND end_time >= ").bind(Value::int(since));
    }
    if let Some(until) = q.until {
        s.push(" AND submit_time < ").bind(Value::int(until));
    }
    if !q.jobs.is_empty() {
        s.push(" AND (");
        for (i, j) in q.jobs.iter().enumerate() {
            if i > 0 {
                s.push(" OR ");
            }
            match parse_job(j) {
                JobRef::Id(id) => {
                    s.push("job_id = ").bind(Value::int(id));
                    s.push(" OR array_job_id = ").bind(Value::int(id));
                }
                JobRef::Element(a, i) => {
                    s.push("(array_job_id = ").bind(Value::int(a));
                    s.push(" AND array_index = ").bind(Value::int(i)).push(")");
                }
                JobRef::Name(n) => {
                    s.push("name = ").bind(Value::text(n));
                    // An array's name matches its elements (`sweep[3]`).
                    let prefix = format!("{n}[");
                    let len = prefix.len();
                    s.push(&format!(" OR substr(name, 1, {len}) = "))
                        .bind(Value::text(prefix));
                }
            }
        }
        s.push(")");
    }
    s.push(" ORDER BY end_time DESC, job_id DESC LIMIT ")
        .bind(Value::int(u64::from(limit) + 1));
    s
}

enum JobRef<'a> {
    Id(u64),
    Element(u64, u64),
    Name(&'a str),
}

fn parse_job(j: &str) -> JobRef<'_> {
    if let Ok(id) = j.parse() {
        return JobRef::Id(id);
    }
    if let Some((a, i)) = j.split_once('_')
        && let (Ok(a), Ok(i)) = (a.parse(), i.parse())
    {
        return JobRef::Element(a, i);
    }
    JobRef::Name(j)
}

/// A job row read back.
fn job_of(r: Vec<Value>, at: &str) -> Result<HistoryJob, AccountingError> {
    let damaged = |what: &str| AccountingError::Damaged {
        at: at.to_string(),
        what: format!("a job row has no {what}"),
    };
    let mut it = r.into_iter();
    let mut next = || it.next().unwrap_or(Value::Int(None));
    let u = |v: Value| v.as_u64();
    let job_id = u(next()).ok_or_else(|| damaged("job_id"))?;
    Ok(HistoryJob {
        job_id,
        attempt: u(next()).unwrap_or(0) as u32,
        array_job_id: u(next()),
        array_index: u(next()),
        name: next().into_string().unwrap_or_default(),
        user: next().into_string().unwrap_or_default(),
        account: next().into_string().unwrap_or_default(),
        queue: next().into_string().unwrap_or_default(),
        submit: u(next()).unwrap_or(0),
        eligible: u(next()).unwrap_or(0),
        start: u(next()),
        end: u(next()).unwrap_or(0),
        state: next().into_string().unwrap_or_default(),
        reason: next().into_string(),
        exit_code: next().as_i64().map(|c| c as i32),
        signal: next().as_i64().map(|c| c as i32),
        nnodes: u(next()).unwrap_or(0) as u32,
        ntasks: u(next()).unwrap_or(0) as u32,
        nodelist: next().into_string().unwrap_or_default(),
        hypernode: next().into_string(),
        tier: u(next()).map(|t| t as u32),
        req_cpus: next().as_f64().unwrap_or(0.0),
        req_gpus: u(next()).unwrap_or(0),
        req_memory: u(next()).unwrap_or(0),
        alloc_cpus: next().as_f64().unwrap_or(0.0),
        alloc_gpus: u(next()).unwrap_or(0),
        alloc_memory: u(next()).unwrap_or(0),
        time_limit: u(next()),
        cpu_seconds: next().as_f64().unwrap_or(0.0),
        max_rss: u(next()).unwrap_or(0),
        core_seconds: next().as_f64().unwrap_or(0.0),
        gpu_seconds: next().as_f64().unwrap_or(0.0),
        requeues: u(next()).unwrap_or(0) as u32,
        restarts: u(next()).unwrap_or(0) as u32,
        preempted_by: next().into_string(),
        steps: Vec::new(),
    })
}

impl Db {
    /// `hyperplan history` for `cluster`. The caller has already narrowed `q` to what
    /// the asker may see (`privateData`).
    pub fn history(&mut self, cluster: &str, q: &HistoryQuery) -> Result<History, AccountingError> {
        let limit = q.limit.unwrap_or(DEFAULT_HISTORY_LIMIT).clamp(1, MAX_HISTORY_LIMIT);
        let rows = self.query(&statement(cluster, q, limit), JOB_KINDS)?;
        let truncated = rows.len() > limit as usize;
        let at = self.describe().to_string();
        let mut jobs = rows
            .into_iter()
            .take(limit as usize)
            .map(|r| job_of(r, &at))
            .collect::<Result<Vec<_>, _>>()?;
        jobs.reverse();
        if q.steps {
            self.add_steps(cluster, &mut jobs)?;
        }
        Ok(History {
            jobs,
            truncated,
            database: at,
            behind_secs: None,
        })
    }

    fn add_steps(&mut self, cluster: &str, jobs: &mut [HistoryJob]) -> Result<(), AccountingError> {
        let mut found: std::collections::BTreeMap<(u64, u32), Vec<HistoryStep>> = Default::default();
        for chunk in jobs.chunks(STEP_BATCH) {
            let mut s = Sql::new(&format!(
                "SELECT {} FROM steps WHERE cluster = ",
                STEP_COLUMNS[1..STEP_COLUMNS.len() - 1].join(", ")
            ));
            s.bind(Value::text(cluster)).push(" AND job_id IN ");
            let ids: std::collections::BTreeSet<u64> = chunk.iter().map(|j| j.job_id).collect();
            s.bind_list(ids.into_iter().map(Value::int));
            s.push(" ORDER BY job_id, attempt, step");
            for r in self.query(&s, STEP_KINDS)? {
                let mut it = r.into_iter();
                let mut next = || it.next().unwrap_or(Value::Int(None));
                let key = (next().as_u64().unwrap_or(0), next().as_u64().unwrap_or(0) as u32);
                found.entry(key).or_default().push(HistoryStep {
                    step: next().as_u64().unwrap_or(0) as u32,
                    nodelist: next().into_string().unwrap_or_default(),
                    nnodes: next().as_u64().unwrap_or(0) as u32,
                    start: next().as_u64(),
                    end: next().as_u64(),
                    exit_code: next().as_i64().map(|c| c as i32),
                    signal: next().as_i64().map(|c| c as i32),
                    command: next().into_string(),
                });
            }
        }
        for j in jobs {
            if let Some(steps) = found.remove(&(j.job_id, j.attempt)) {
                j.steps = steps;
            }
        }
        Ok(())
    }
}
