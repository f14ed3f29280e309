//! `hyperplan report`: sums over a period, as sreport. Only the part of each job (task)
//! that ran inside `[since, until)` counts: its held core- and GPU-seconds are scaled
//! by the share of its run inside the period.
//!
//! - `usage`: CPU- and GPU-hours by user, account, queue or HyperNode;
//! - `utilisation`: per HyperNode (and per tier, summed), what its nodes' jobs held
//!   against what its nodes could hold over the period (from the node sizes the planner
//!   last copied in, see [`crate::topology`]);
//! - `waits`: jobs that started in the period, by queue and node count: mean, p95
//!   (nearest rank, worked out from the rows) and longest wait from eligible to start.

use std::collections::BTreeMap;

use hyperplan_shared::history::{Report, ReportKind, ReportQuery, UsageBy, UtilisationRow, WAIT_SIZES, WaitRow};

use crate::db::Db;
use crate::error::AccountingError;
use crate::sql::{Kind, Sql, Value};

/// `(MIN(end, until) - MAX(start, since))` in seconds, as SQL both backends read, for
/// the table alias `t`.
fn overlap(s: &mut Sql, t: &str, since: u64, until: u64) {
    s.push(&format!("(CASE WHEN {t}.end_time < "))
        .bind(Value::int(until))
        .push(&format!(" THEN {t}.end_time ELSE "))
        .bind(Value::int(until))
        .push(&format!(" END - CASE WHEN {t}.start_time > "))
        .bind(Value::int(since))
        .push(&format!(" THEN {t}.start_time ELSE "))
        .bind(Value::int(since))
        .push(" END)");
}

/// `AND t.start_time IS NOT NULL AND t.end_time > since AND t.start_time < until`.
fn ran_in(s: &mut Sql, t: &str, since: u64, until: u64) {
    s.push(&format!(" AND {t}.start_time IS NOT NULL AND {t}.end_time > "))
        .bind(Value::int(since))
        .push(&format!(" AND {t}.start_time < "))
        .bind(Value::int(until));
}

fn users(s: &mut Sql, t: &str, users: &[String]) {
    if !users.is_empty() {
        s.push(&format!(" AND {t}.user_name IN "));
        s.bind_list(users.iter().map(Value::text));
    }
}

impl Db {
    /// `hyperplan report` for `cluster`.
    pub fn report(&mut self, cluster: &str, q: &ReportQuery) -> Result<Report, AccountingError> {
        let mut report = Report {
            kind: q.kind,
            since: q.since,
            until: q.until.max(q.since),
            database: self.describe().to_string(),
            ..Report::default()
        };
        match q.kind {
            ReportKind::Usage => report.usage = self.usage(cluster, q)?,
            ReportKind::Utilisation => report.utilisation = self.utilisation(cluster, q)?,
            ReportKind::Waits => report.waits = self.waits(cluster, q)?,
        }
        Ok(report)
    }

    fn usage(
        &mut self,
        cluster: &str,
        q: &ReportQuery,
    ) -> Result<Vec<hyperplan_shared::history::UsageRow>, AccountingError> {
        let (since, until) = (q.since, q.until.max(q.since));
        let key = match q.by {
            UsageBy::User => "j.user_name",
            UsageBy::Account => "j.account",
            UsageBy::Queue => "j.queue",
            UsageBy::Hypernode => "COALESCE(j.hypernode, '')",
        };
        // The share of each job's run inside the period; a job that ran no time counts whole.
        let mut share = Sql::new("(CASE WHEN j.end_time <= j.start_time THEN 1.0 ELSE CAST(");
        overlap(&mut share, "j", since, until);
        share.push(" AS DOUBLE PRECISION) / (j.end_time - j.start_time) END)");
        let mut s = Sql::new(&format!("SELECT {key}, COUNT(*), CAST(SUM(j.core_seconds * "));
        append(&mut s, &share);
        s.push(") AS DOUBLE PRECISION), CAST(SUM(j.gpu_seconds * ");
        append(&mut s, &share);
        s.push(") AS DOUBLE PRECISION) FROM jobs j WHERE j.cluster = ")
            .bind(Value::text(cluster));
        ran_in(&mut s, "j", since, until);
        users(&mut s, "j", &q.users);
        s.push(&format!(" GROUP BY {key} ORDER BY {key}"));
        let rows = self.query(&s, &[Kind::Text, Kind::Int, Kind::Real, Kind::Real])?;
        Ok(rows
            .into_iter()
            .map(|r| hyperplan_shared::history::UsageRow {
                key: r[0].as_str().unwrap_or("").to_string(),
                jobs: r[1].as_u64().unwrap_or(0),
                cpu_hours: r[2].as_f64().unwrap_or(0.0) / 3600.0,
                gpu_hours: r[3].as_f64().unwrap_or(0.0) / 3600.0,
            })
            .collect())
    }

    fn utilisation(&mut self, cluster: &str, q: &ReportQuery) -> Result<Vec<UtilisationRow>, AccountingError> {
        let (since, until) = (q.since, q.until.max(q.since));
        let hours = (until - since) as f64 / 3600.0;
        let mut cap = Sql::new(
            "SELECT h.hypernode, h.tier, COUNT(*), CAST(SUM(n.cpus) AS DOUBLE PRECISION), \
             CAST(SUM(n.gpus) AS DOUBLE PRECISION) FROM node_hypernodes h JOIN nodes n \
             ON n.cluster = h.cluster AND n.name = h.node WHERE h.cluster = ",
        );
        cap.bind(Value::text(cluster))
            .push(" GROUP BY h.hypernode, h.tier ORDER BY h.tier, h.hypernode");
        let mut rows: BTreeMap<(u32, String), UtilisationRow> = BTreeMap::new();
        for r in self.query(&cap, &[Kind::Text, Kind::Int, Kind::Int, Kind::Real, Kind::Real])? {
            let name = r[0].as_str().unwrap_or("").to_string();
            let tier = r[1].as_u64().unwrap_or(0) as u32;
            rows.insert(
                (tier, name.clone()),
                UtilisationRow {
                    hypernode: name,
                    tier,
                    nodes: r[2].as_u64().unwrap_or(0),
                    cpu_capacity_hours: r[3].as_f64().unwrap_or(0.0) * hours,
                    gpu_capacity_hours: r[4].as_f64().unwrap_or(0.0) * hours,
                    ..UtilisationRow::default()
                },
            );
        }
        // Per node first (the tasks of the period, by `tasks_by_end`), then per HyperNode:
        // the join is then of a node's one row, not of every task.
        let mut ov = Sql::default();
        overlap(&mut ov, "t", since, until);
        let mut s = Sql::new(
            "SELECT h.hypernode, h.tier, CAST(SUM(x.c) AS DOUBLE PRECISION), CAST(SUM(x.g) AS DOUBLE PRECISION) FROM (SELECT t.node AS node, SUM(t.cpus * ",
        );
        append(&mut s, &ov);
        s.push(") AS c, SUM(t.gpus * ");
        append(&mut s, &ov);
        s.push(") AS g FROM tasks t WHERE t.cluster = ")
            .bind(Value::text(cluster));
        ran_in(&mut s, "t", since, until);
        s.push(" GROUP BY t.node) x JOIN node_hypernodes h ON h.cluster = ")
            .bind(Value::text(cluster))
            .push(" AND h.node = x.node GROUP BY h.hypernode, h.tier");
        for r in self.query(&s, &[Kind::Text, Kind::Int, Kind::Real, Kind::Real])? {
            let name = r[0].as_str().unwrap_or("").to_string();
            let tier = r[1].as_u64().unwrap_or(0) as u32;
            let row = rows.entry((tier, name.clone())).or_insert_with(|| UtilisationRow {
                hypernode: name,
                tier,
                ..UtilisationRow::default()
            });
            row.cpu_hours += r[2].as_f64().unwrap_or(0.0) / 3600.0;
            row.gpu_hours += r[3].as_f64().unwrap_or(0.0) / 3600.0;
        }
        // Each tier as a whole, after its HyperNodes.
        let mut out = Vec::with_capacity(rows.len() + 4);
        let mut tier_sum: Option<UtilisationRow> = None;
        for ((tier, _), row) in rows {
            if tier_sum.as_ref().is_some_and(|t| t.tier != tier) {
                out.extend(tier_sum.take());
            }
            let t = tier_sum.get_or_insert_with(|| UtilisationRow {
                hypernode: format!("tier {tier}"),
                tier,
                ..UtilisationRow::default()
            });
            t.nodes += row.nodes;
            t.cpu_hours += row.cpu_hours;
            t.cpu_capacity_hours += row.cpu_capacity_hours;
            t.gpu_hours += row.gpu_hours;
            t.gpu_capacity_hours += row.gpu_capacity_hours;
            out.push(row);
        }
        out.extend(tier_sum);
        Ok(out)
    }

    fn waits(&mut self, cluster: &str, q: &ReportQuery) -> Result<Vec<WaitRow>, AccountingError> {
        let (since, until) = (q.since, q.until.max(q.since));
        let mut bucket = String::from("CASE");
        for (i, (max, _)) in WAIT_SIZES.iter().enumerate().take(WAIT_SIZES.len() - 1) {
            bucket.push_str(&format!(" WHEN j.nnodes <= {max} THEN {i}"));
        }
        // BIGINT: PostgreSQL's integer literals are INT4.
        bucket.insert_str(0, "CAST(");
        bucket.push_str(&format!(" ELSE {} END AS BIGINT)", WAIT_SIZES.len() - 1));
        let mut s = Sql::new(&format!(
            "SELECT j.queue, {bucket}, j.start_time - j.eligible_time FROM jobs j WHERE j.cluster = "
        ));
        s.bind(Value::text(cluster));
        // Started in the period: it ended after `since` (the index) and started in it.
        s.push(" AND j.start_time IS NOT NULL AND j.end_time >= ")
            .bind(Value::int(since))
            .push(" AND j.start_time >= ")
            .bind(Value::int(since))
            .push(" AND j.start_time < ")
            .bind(Value::int(until));
        users(&mut s, "j", &q.users);
        // The p95 is worked out here: a window over every row sorts them all in the
        // database, three times slower on a year of a busy cluster.
        let mut groups: BTreeMap<(String, usize), Vec<u64>> = BTreeMap::new();
        for r in self.query(&s, &[Kind::Text, Kind::Int, Kind::Int])? {
            let mut it = r.into_iter();
            let queue = it.next().and_then(Value::into_string).unwrap_or_default();
            let bucket = it.next().and_then(|v| v.as_u64()).unwrap_or(0) as usize;
            let wait = it.next().and_then(|v| v.as_i64()).unwrap_or(0).max(0) as u64;
            groups.entry((queue, bucket)).or_default().push(wait);
        }
        Ok(groups
            .into_iter()
            .map(|((queue, bucket), mut waits)| {
                let n = waits.len();
                let sum: u64 = waits.iter().sum();
                let max = waits.iter().copied().max().unwrap_or(0);
                // Nearest rank: the smallest wait at or above 95 % of them.
                let rank = (n * 95).div_ceil(100).max(1) - 1;
                let (_, p95, _) = waits.select_nth_unstable(rank);
                WaitRow {
                    queue,
                    size: WAIT_SIZES.get(bucket).map_or("?", |s| s.1).to_string(),
                    jobs: n as u64,
                    mean_secs: sum as f64 / n as f64,
                    p95_secs: *p95,
                    max_secs: max,
                }
            })
            .collect())
    }
}

/// Appends `part` to `s`, renumbering its placeholders after `s`'s.
fn append(s: &mut Sql, part: &Sql) {
    let base = s.params.len();
    let mut text = String::with_capacity(part.text.len() + 8);
    let mut chars = part.text.char_indices().peekable();
    while let Some((_, c)) = chars.next() {
        if c == '$' {
            let mut n = String::new();
            while let Some(&(_, d)) = chars.peek() {
                if d.is_ascii_digit() {
                    n.push(d);
                    chars.next();
                } else {
                    break;
                }
            }
            match n.parse::<usize>() {
                Ok(k) => text.push_str(&format!("${}", k + base)),
                Err(_) => text.push('$'),
            }
        } else {
            text.push(c);
        }
    }
    s.text.push_str(&text);
    s.params.extend(part.params.iter().cloned());
}
