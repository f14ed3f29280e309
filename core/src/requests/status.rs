//! `hyperplan status`: the jobs a request shows. Live jobs come from the world; a job
//! that ended before this planner started is only in the store, so the driver hands a
//! reader of stored records, which is called only when the answer needs it (`--all`,
//! `--since`, or a name the world does not have). Under `privateData` a plain user's
//! answer is built from their jobs alone.

use std::collections::HashSet;

use hyperplan_shared::report::JobReport;

use crate::Planner;
use crate::caller::Caller;
use crate::model::record::JobRecord;
use crate::view::{newest_of_each_name, stored_report};

/// What a `status` request asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusQuery {
    /// One job by name (the newest of that name unless `all`).
    pub job: Option<String>,
    /// Every job, ended ones and older jobs of a name too.
    pub all: bool,
    /// Only jobs that ended in the last this many seconds (or have not ended).
    pub since_secs: Option<u64>,
}

/// Why a `status` request has no answer.
#[derive(Debug, thiserror::Error)]
pub enum StatusError<E: std::error::Error + 'static> {
    /// No job of that name that the caller may see.
    #[error("no job named {0:?}")]
    NoSuchJob(String),
    /// The stored records could not be read.
    #[error(transparent)]
    Store(E),
}

impl Planner {
    /// The jobs `query` shows to `caller` at `now_ms`, in id order when stored jobs are
    /// merged in. `stored(cutoff)` reads the ended jobs that ended at or after `cutoff`
    /// (Unix seconds; 0 for all).
    pub fn status<E: std::error::Error + 'static>(
        &self,
        query: StatusQuery,
        caller: Caller<'_>,
        now_ms: u64,
        stored: impl FnOnce(u64) -> Result<Vec<JobRecord>, E>,
    ) -> Result<Vec<JobReport>, StatusError<E>> {
        let StatusQuery { job, all, since_secs } = query;
        let mut jobs = self.jobs();
        caller.keep_visible(&mut jobs);
        // One name the world has (`submit --wait` asks every second): no disk read;
        // `--all` asks for the history, older jobs of a live name included.
        let in_world = job.as_ref().is_some_and(|n| jobs.iter().any(|j| &j.name == n));
        if all || (job.is_some() && !in_world) || since_secs.is_some() {
            let cutoff = since_secs.map_or(0, |s| (now_ms / 1000).saturating_sub(s));
            let have: HashSet<u64> = jobs.iter().map(|j| j.id).collect();
            let records = stored(cutoff).map_err(StatusError::Store)?;
            let wanted = |r: &&JobRecord| {
                !have.contains(&r.id) && job.as_ref().is_none_or(|n| &r.spec.name == n) && caller.sees(Some(&r.owner))
            };
            jobs.extend(records.iter().filter(wanted).map(stored_report));
            if since_secs.is_some() {
                jobs.retain(|j| j.end_time.is_none_or(|end| end >= cutoff));
            }
            jobs.sort_by_key(|j| j.id);
            if !all && since_secs.is_none() {
                jobs = newest_of_each_name(jobs);
            }
        } else if !all {
            jobs = newest_of_each_name(jobs);
        }
        if let Some(name) = job {
            jobs.retain(|j| j.name == name);
            if jobs.is_empty() {
                return Err(StatusError::NoSuchJob(name));
            }
        }
        Ok(jobs)
    }
}
