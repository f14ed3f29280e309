//! `[accounting] keep`: how long each table keeps its rows, by the end of the job they
//! belong to. Nothing is deleted by default (as slurmdbd); a site sets e.g. jobs two
//! years, tasks and steps 180 days.

use crate::sql::{Sql, Value};

/// Seconds each table keeps rows; `None`: for ever.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Keep {
    pub jobs: Option<u64>,
    pub tasks: Option<u64>,
    pub steps: Option<u64>,
}

impl Keep {
    pub fn is_forever(&self) -> bool {
        self.jobs.is_none() && self.tasks.is_none() && self.steps.is_none()
    }

    /// The deletes due at `now` (Unix seconds) for `cluster`'s rows.
    pub fn statements(&self, cluster: &str, now: u64) -> Vec<Sql> {
        let mut out = Vec::new();
        for (table, column, keep) in [
            ("jobs", "end_time", self.jobs),
            ("tasks", "end_time", self.tasks),
            ("steps", "job_end_time", self.steps),
        ] {
            if let Some(keep) = keep {
                let mut s = Sql::new(&format!("DELETE FROM {table} WHERE cluster = "));
                s.bind(Value::text(cluster));
                s.push(&format!(" AND {column} < "));
                s.bind(Value::int(now.saturating_sub(keep)));
                out.push(s);
            }
        }
        out
    }
}
