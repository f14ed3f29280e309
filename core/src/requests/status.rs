//! `hyperplan status`: the jobs a request shows, a page at a time. Live jobs come from
//! the world; a job that ended before this planner started (or that it let go of, see
//! `jobs::forget`) is only in the store, so the driver hands a reader of stored records,
//! which is called only when the answer needs it (`--all`, `--since`, or a name the world
//! does not have). Under `privateData` a plain user's answer is built from their jobs
//! alone.
//!
//! An answer is as large as the jobs and tasks it holds (a job of 100,000 tasks alone is
//! some MB): it is cut into pages of at most `max_bytes` of encoded job reports, between
//! two jobs or inside a job's task list, each page saying where the next starts (see
//! `hyperplan_shared::status::JobList`). A page makes only the reports it sends.

use std::collections::HashSet;

use bevy_ecs::entity::Entity;
use hyperplan_shared::report::{JobReport, TaskReport};
use hyperplan_shared::status::{JobList, StatusCursor};

use crate::Planner;
use crate::caller::Caller;
use crate::model::record::JobRecord;
use crate::view::{job_heads, job_tasks, stored_head, stored_tasks};

/// What a `status` request asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusQuery {
    /// One job by name (the newest of that name unless `all`).
    pub job: Option<String>,
    /// Every job, ended ones and older jobs of a name too.
    pub all: bool,
    /// Only jobs that ended in the last this many seconds (or have not ended).
    pub since_secs: Option<u64>,
    /// Where the page starts (the `next` of the page before); `None`: the first.
    pub page: Option<StatusCursor>,
    /// The most bytes of encoded job reports a page holds (the driver's largest frame,
    /// less room for the envelope); `None`: the whole answer is one page. A page holds
    /// at least one task or job, whatever its size.
    pub max_bytes: Option<usize>,
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

/// Where a job of the answer comes from: the world, or a stored record.
#[derive(Clone, Copy)]
enum Source<'r> {
    World(Entity),
    Stored(&'r JobRecord),
}

impl Planner {
    /// The page of the jobs `query` shows to `caller` at `now_ms`, in id order when
    /// stored jobs are merged in. `stored(cutoff)` reads the ended jobs that ended at or
    /// after `cutoff` (Unix seconds; 0 for all).
    pub fn status<E: std::error::Error + 'static>(
        &self,
        query: StatusQuery,
        caller: Caller<'_>,
        now_ms: u64,
        stored: impl FnOnce(u64) -> Result<Vec<JobRecord>, E>,
    ) -> Result<JobList, StatusError<E>> {
        let StatusQuery {
            job,
            all,
            since_secs,
            page,
            max_bytes,
        } = query;
        let world = self.world();
        // Before the rows, which borrow from it.
        let records: Vec<JobRecord>;
        let mut rows: Vec<(JobReport, Source<'_>)> = job_heads(world)
            .into_iter()
            .map(|(e, head)| (head, Source::World(e)))
            .collect();
        rows.retain(|(r, _)| caller.sees(r.owner.as_deref()));
        // One name the world has (`submit --wait` asks every second): no disk read;
        // `--all` asks for the history, older jobs of a live name included.
        // A job's name, or an array's (`sweep`: every element; `sweep[3-5]`, `17_3`: some).
        let selected: Option<HashSet<String>> = job
            .as_ref()
            .and_then(|n| crate::jobs::arrays::select(world, n).ok())
            .map(|names| names.into_iter().collect());
        let named = |name: &str, array: Option<&str>| {
            job.as_ref().is_none_or(|n| {
                name == n || array == Some(n.as_str()) || selected.as_ref().is_some_and(|s| s.contains(name))
            })
        };
        let in_world = job.is_some()
            && rows
                .iter()
                .any(|(j, _)| named(&j.name, j.array.as_ref().map(|a| a.array_name.as_str())));
        if all || (job.is_some() && !in_world) || since_secs.is_some() {
            let cutoff = since_secs.map_or(0, |s| (now_ms / 1000).saturating_sub(s));
            let have: HashSet<u64> = rows.iter().map(|(j, _)| j.id).collect();
            records = stored(cutoff).map_err(StatusError::Store)?;
            let wanted = |r: &&JobRecord| {
                !have.contains(&r.id)
                    && named(&r.spec.name, r.spec.element.as_ref().map(|a| a.array_name.as_str()))
                    && caller.sees(Some(&r.owner))
            };
            rows.extend(
                records
                    .iter()
                    .filter(wanted)
                    .map(|r| (stored_head(r), Source::Stored(r))),
            );
            if since_secs.is_some() {
                rows.retain(|(j, _)| j.end_time.is_none_or(|end| end >= cutoff));
            }
            rows.sort_by_key(|(j, _)| j.id);
            if !all && since_secs.is_none() {
                rows = newest_of_each_name(rows);
            }
        } else if !all {
            rows = newest_of_each_name(rows);
        }
        if let Some(name) = job.clone() {
            rows.retain(|(j, _)| named(&j.name, j.array.as_ref().map(|a| a.array_name.as_str())));
            if rows.is_empty() {
                return Err(StatusError::NoSuchJob(name));
            }
        }
        for (r, _) in &mut rows {
            self.hide_other_jobs(caller, r); // who preempted whom, under privateData
        }
        Ok(self.page(rows, page, max_bytes.unwrap_or(usize::MAX)))
    }

    /// The page of `rows` that starts at `at`, within `max_bytes`.
    fn page(&self, rows: Vec<(JobReport, Source<'_>)>, at: Option<StatusCursor>, max_bytes: usize) -> JobList {
        let world = self.world();
        let (first, mut from) = start(&rows, at);
        let mut used = 0usize;
        let mut jobs = Vec::new();
        for (i, (mut head, source)) in rows.into_iter().enumerate().skip(first) {
            let size = encoded_len(&head);
            if !jobs.is_empty() && used.saturating_add(size) > max_bytes {
                return JobList {
                    jobs,
                    next: Some(cursor(i, head.id, 0)),
                };
            }
            used = used.saturating_add(size);
            let skip = std::mem::take(&mut from);
            let tasks: Box<dyn Iterator<Item = TaskReport>> = match source {
                Source::World(e) => Box::new(job_tasks(world, e, skip)),
                Source::Stored(rec) => Box::new(stored_tasks(rec, skip)),
            };
            for (taken, t) in tasks.enumerate() {
                let size = encoded_len(&t);
                if (taken > 0 || !jobs.is_empty()) && used.saturating_add(size) > max_bytes {
                    let id = head.id;
                    jobs.push(head);
                    return JobList {
                        jobs,
                        next: Some(cursor(i, id, skip + taken)),
                    };
                }
                used = used.saturating_add(size);
                head.tasks.push(t);
            }
            jobs.push(head);
        }
        JobList { jobs, next: None }
    }
}

/// Where a page starting at `at` starts in `rows`: (row, first task). The job `at`
/// names, where it is now; if it went, the first row again (rare: the CLI drops the jobs
/// it already has, and nothing is missed).
fn start(rows: &[(JobReport, Source<'_>)], at: Option<StatusCursor>) -> (usize, usize) {
    let Some(at) = at else { return (0, 0) };
    let task = usize::try_from(at.task).unwrap_or(usize::MAX);
    let index = usize::try_from(at.index).unwrap_or(usize::MAX);
    if rows.get(index).is_some_and(|(j, _)| j.id == at.id) {
        return (index, task);
    }
    match rows.iter().position(|(j, _)| j.id == at.id) {
        Some(i) => (i, task),
        None => (0, 0),
    }
}

fn cursor(index: usize, id: u64, task: usize) -> StatusCursor {
    StatusCursor {
        index: index as u64,
        id,
        task: task as u64,
    }
}

/// `rows` with only the newest job (highest id) of each name, in their order: what a
/// name means once an ended job's name was used again.
fn newest_of_each_name<'r>(rows: Vec<(JobReport, Source<'r>)>) -> Vec<(JobReport, Source<'r>)> {
    let mut newest: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
    for (r, _) in &rows {
        let id = newest.entry(r.name.clone()).or_insert(r.id);
        *id = (*id).max(r.id);
    }
    rows.into_iter()
        .filter(|(r, _)| newest.get(&r.name) == Some(&r.id))
        .collect()
}

/// Bytes `value` takes as the reply encodes it (MessagePack with field names).
fn encoded_len<T: serde::Serialize>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count(0);
    // Encoding into a counter fails only for a value serde cannot encode: counted as
    // nothing, the reply's own encoding says so.
    let _ = rmp_serde::encode::write_named(&mut n, value);
    n.0
}
