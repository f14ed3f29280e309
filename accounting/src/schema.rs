//! The schema, as a list of numbered migrations. A database records the ones applied in
//! `hp_migrations`; opening it applies the missing ones in order, each in its own
//! transaction (PostgreSQL: under an advisory lock, so two planners starting at once do
//! not both apply one), and refuses a database with a migration this build does not
//! know. A later version appends a migration; it never edits one that shipped.
//!
//! The SQL is the subset SQLite and PostgreSQL share: BIGINT, DOUBLE PRECISION and TEXT
//! columns, composite primary keys, `CREATE … IF NOT EXISTS`.
//!
//! Indexes are chosen for what `history` and `report` ask (see `benches/accounting.rs`),
//! each under the cluster (several share one PostgreSQL): a user's jobs by end time, all
//! jobs by end time (usage and waits over a period, retention), an account's and a
//! queue's by end time, jobs by name and by array, tasks and steps by end.

/// One step of the schema.
#[derive(Debug)]
pub struct Migration {
    pub version: i64,
    pub description: &'static str,
    pub sql: &'static str,
}

/// Every migration, in order.
pub const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    description: "jobs, tasks, steps, nodes, HyperNodes and the ingest cursor",
    sql: r#"
CREATE TABLE IF NOT EXISTS jobs (
    cluster         TEXT NOT NULL,
    job_id          BIGINT NOT NULL,
    attempt         BIGINT NOT NULL,
    array_job_id    BIGINT,
    array_index     BIGINT,
    name            TEXT NOT NULL,
    user_name       TEXT NOT NULL,
    account         TEXT NOT NULL,
    queue           TEXT NOT NULL,
    submit_time     BIGINT NOT NULL,
    eligible_time   BIGINT NOT NULL,
    start_time      BIGINT,
    end_time        BIGINT NOT NULL,
    state           TEXT NOT NULL,
    reason          TEXT,
    exit_code       BIGINT,
    signal          BIGINT,
    nnodes          BIGINT NOT NULL,
    ntasks          BIGINT NOT NULL,
    nodelist        TEXT NOT NULL,
    hypernode       TEXT,
    tier            BIGINT,
    req_cpus        DOUBLE PRECISION NOT NULL,
    req_gpus        BIGINT NOT NULL,
    req_memory      BIGINT NOT NULL,
    alloc_cpus      DOUBLE PRECISION NOT NULL,
    alloc_gpus      BIGINT NOT NULL,
    alloc_memory    BIGINT NOT NULL,
    time_limit      BIGINT,
    cpu_seconds     DOUBLE PRECISION NOT NULL,
    max_rss         BIGINT NOT NULL,
    core_seconds    DOUBLE PRECISION NOT NULL,
    gpu_seconds     DOUBLE PRECISION NOT NULL,
    requeues        BIGINT NOT NULL,
    restarts        BIGINT NOT NULL,
    preempted_by    TEXT,
    PRIMARY KEY (cluster, job_id, attempt)
);
CREATE INDEX IF NOT EXISTS jobs_by_user ON jobs (cluster, user_name, end_time);
CREATE INDEX IF NOT EXISTS jobs_by_end ON jobs (cluster, end_time);
CREATE INDEX IF NOT EXISTS jobs_by_account ON jobs (cluster, account, end_time);
CREATE INDEX IF NOT EXISTS jobs_by_queue ON jobs (cluster, queue, end_time);
CREATE INDEX IF NOT EXISTS jobs_by_name ON jobs (cluster, name);
CREATE INDEX IF NOT EXISTS jobs_by_array ON jobs (cluster, array_job_id);

CREATE TABLE IF NOT EXISTS tasks (
    cluster         TEXT NOT NULL,
    job_id          BIGINT NOT NULL,
    attempt         BIGINT NOT NULL,
    task_index      BIGINT NOT NULL,
    name            TEXT NOT NULL,
    task_rank       BIGINT,
    node            TEXT,
    start_time      BIGINT,
    end_time        BIGINT NOT NULL,
    outcome         TEXT NOT NULL,
    exit_code       BIGINT,
    signal          BIGINT,
    cpus            DOUBLE PRECISION NOT NULL,
    gpus            BIGINT NOT NULL,
    memory          BIGINT NOT NULL,
    cpu_seconds     DOUBLE PRECISION NOT NULL,
    max_rss         BIGINT NOT NULL,
    PRIMARY KEY (cluster, job_id, attempt, task_index)
);
CREATE INDEX IF NOT EXISTS tasks_by_end ON tasks (cluster, end_time);

CREATE TABLE IF NOT EXISTS steps (
    cluster         TEXT NOT NULL,
    job_id          BIGINT NOT NULL,
    attempt         BIGINT NOT NULL,
    step            BIGINT NOT NULL,
    nodelist        TEXT NOT NULL,
    nnodes          BIGINT NOT NULL,
    start_time      BIGINT,
    end_time        BIGINT,
    exit_code       BIGINT,
    signal          BIGINT,
    command         TEXT,
    job_end_time    BIGINT NOT NULL,
    PRIMARY KEY (cluster, job_id, attempt, step)
);
CREATE INDEX IF NOT EXISTS steps_by_end ON steps (cluster, job_end_time);

CREATE TABLE IF NOT EXISTS nodes (
    cluster         TEXT NOT NULL,
    name            TEXT NOT NULL,
    cpus            DOUBLE PRECISION NOT NULL,
    gpus            BIGINT NOT NULL,
    memory          BIGINT NOT NULL,
    PRIMARY KEY (cluster, name)
);

CREATE TABLE IF NOT EXISTS node_hypernodes (
    cluster         TEXT NOT NULL,
    node            TEXT NOT NULL,
    hypernode       TEXT NOT NULL,
    tier            BIGINT NOT NULL,
    PRIMARY KEY (cluster, node, hypernode)
);
CREATE INDEX IF NOT EXISTS node_hypernodes_by_hypernode ON node_hypernodes (cluster, hypernode);

CREATE TABLE IF NOT EXISTS ingest_cursor (
    cluster         TEXT NOT NULL PRIMARY KEY,
    end_time        BIGINT NOT NULL,
    job_id          BIGINT NOT NULL
);
"#,
}];

/// The newest schema this build writes.
pub fn latest() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Splits a migration's text into statements (on `;` at a line's end; the schema has no
/// string holding one).
pub fn statements(sql: &str) -> impl Iterator<Item = &str> {
    sql.split(";\n")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches(';'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_count_up_from_one() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1, "{}", m.description);
        }
    }

    #[test]
    fn every_statement_is_one_statement() {
        for m in MIGRATIONS {
            for s in statements(m.sql) {
                assert!(!s.contains(';'), "{s}");
            }
        }
    }
}
