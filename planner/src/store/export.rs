//! `hyperplan-planner state export FILE` / `state import FILE`: the store as JSON lines, to
//! back it up, move it to another store file (or backend), or read it. The first line
//! says what the file is; every other line is one job:
//!
//! ```text
//! {"hyperplan":"state","format":1,"epoch":7,"nextJobId":353}
//! {"live":true,"job":{"id":352,"owner":"alice","spec":{…},"state":{…},"tasks":[…],…}}
//! ```
//!
//! An import goes into an empty store only (move the old file aside first), checks every
//! line before it writes anything, and names the line of what it refuses.

use std::io::{BufRead, Write};

use hyperplan_core::journal::JobRecord;
use serde::{Deserialize, Serialize};

use super::{Batch, STORE_FORMAT, Store, StoreError};

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Header {
    hyperplan: String,
    format: u32,
    epoch: u64,
    next_job_id: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    live: bool,
    job: JobRecord,
}

/// Writes every job of `store` to `out`; returns (live, ended) counts.
pub fn export(store: &Store, out: &mut dyn Write) -> Result<(u64, u64), StoreError> {
    let s = store.summary()?;
    let (live, finished) = store.all()?;
    let io = |e: std::io::Error| StoreError::Import(format!("writing the export: {e}"));
    let header = Header {
        hyperplan: "state".into(),
        format: STORE_FORMAT,
        epoch: s.epoch,
        next_job_id: s.next_job_id,
    };
    writeln!(out, "{}", json(&header)?).map_err(io)?;
    for (is_live, jobs) in [(true, &live), (false, &finished)] {
        for job in jobs.iter() {
            let line = Line {
                live: is_live,
                job: job.clone(),
            };
            writeln!(out, "{}", json(&line)?).map_err(io)?;
        }
    }
    out.flush().map_err(io)?;
    Ok((live.len() as u64, finished.len() as u64))
}

/// The largest line an import reads (a job of 100,000 tasks is some tens of MB).
const MAX_LINE: u64 = 256 << 20;

/// Reads `input` (named `name` in errors) into the empty `store`; returns the number of jobs.
pub fn import(store: &Store, input: &mut dyn BufRead, name: &str) -> Result<u64, StoreError> {
    if !store.is_empty()? {
        return Err(StoreError::Import(format!(
            "{}: the store already holds jobs; import into an empty one ({})",
            store.at().display(),
            match store {
                super::Store::Embedded(_) => "move this file aside first",
                super::Store::Etcd(_) => "a new [store] prefix, or delete this prefix's keys first",
            }
        )));
    }
    let mut lines = Vec::new();
    let mut buf = Vec::new();
    let mut n = 0usize;
    loop {
        buf.clear();
        let read = std::io::Read::take(&mut *input, MAX_LINE + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| StoreError::Import(format!("{name}: {e}")))?;
        if read == 0 {
            break;
        }
        n += 1;
        if read as u64 > MAX_LINE {
            return Err(StoreError::Import(format!(
                "{name}:{n}: the line is longer than {MAX_LINE} bytes"
            )));
        }
        let text = String::from_utf8_lossy(&buf);
        if text.trim().is_empty() {
            continue;
        }
        lines.push((n, text.into_owned()));
    }
    let Some((_, first)) = lines.first() else {
        return Err(StoreError::Import(format!(
            "{name}: empty: expected a `hyperplan-planner state export` file"
        )));
    };
    let header: Header = serde_json::from_str(first).map_err(|e| {
        StoreError::Import(format!(
            "{name}:1: expected the header of a `hyperplan-planner state export` file ({{\"hyperplan\":\"state\",…}}): {e}"
        ))
    })?;
    if header.hyperplan != "state" {
        return Err(StoreError::Import(format!(
            "{name}:1: hyperplan: expected \"state\", got {:?}",
            header.hyperplan
        )));
    }
    if header.format > STORE_FORMAT {
        return Err(StoreError::Import(format!(
            "{name}:1: format {} is newer than this build reads ({STORE_FORMAT})",
            header.format
        )));
    }
    let mut batch = Batch::default();
    let mut next = header.next_job_id.max(1);
    let mut ids = std::collections::BTreeSet::new();
    for (line_no, text) in &lines[1..] {
        let line: Line =
            serde_json::from_str(text).map_err(|e| StoreError::Import(format!("{name}:{line_no}: {e}")))?;
        if line.live != line.job.is_live() {
            return Err(StoreError::Import(format!(
                "{name}:{line_no}: job {} says live: {} but its state is {:?}",
                line.job.id, line.live, line.job.state.phase
            )));
        }
        if !ids.insert(line.job.id) {
            return Err(StoreError::Import(format!(
                "{name}:{line_no}: job id {} appears twice",
                line.job.id
            )));
        }
        next = next.max(line.job.id.saturating_add(1));
        batch.jobs.push(
            line.job
                .persist()
                .map_err(|e| StoreError::Import(format!("{name}:{line_no}: {e}")))?,
        );
    }
    batch.next_job_id = Some(next);
    let jobs = batch.jobs.len() as u64;
    store.commit(&batch)?;
    store.set_meta(header.epoch, next)?;
    Ok(jobs)
}

/// One JSON line.
fn json<T: Serialize>(v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Import(format!("encoding the export: {e}")))
}
