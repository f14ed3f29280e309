//! [`Db`]: one connection to the accounting database, whichever backend, and what the
//! planner does with it: write ended jobs with the cursor, copy the topology, delete
//! what is past retention, answer `history` and `report`.

use crate::error::AccountingError;
use crate::postgres::Pg;
use crate::retention::Keep;
use crate::rows::Rows;
use crate::sql::{Kind, Sql, Value, upsert};
use crate::sqlite::Sqlite;
use crate::target::Target;
use crate::topology::Topology;

/// Where the planner's writing stands: every ended job up to this (end time, id), in the
/// store's order, is in the database.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    pub end_time: u64,
    pub job_id: u64,
}

#[derive(Debug)]
enum Conn {
    Sqlite(Sqlite),
    Postgres(Box<Pg>),
}

/// An open accounting database, its schema up to date.
#[derive(Debug)]
pub struct Db {
    conn: Conn,
    at: String,
}

impl Db {
    /// Connects (a SQLite file is made at first use) and applies missing migrations.
    pub fn open(target: &Target) -> Result<Self, AccountingError> {
        let at = target.describe();
        let conn = match target {
            Target::Sqlite { path } => Conn::Sqlite(Sqlite::open(path, at.clone())?),
            Target::Postgres(p) => Conn::Postgres(Box::new(Pg::connect(p, at.clone())?)),
        };
        Ok(Self { conn, at })
    }

    /// The file or URL (no secrets).
    pub fn describe(&self) -> &str {
        &self.at
    }

    /// Runs `statements` in one transaction.
    pub fn run(&mut self, statements: &[Sql]) -> Result<(), AccountingError> {
        match &mut self.conn {
            Conn::Sqlite(c) => c.run(statements),
            Conn::Postgres(c) => c.run(statements),
        }
    }

    /// The rows of a query, each column read as `kinds` says.
    pub fn query(&mut self, sql: &Sql, kinds: &[Kind]) -> Result<Vec<Vec<Value>>, AccountingError> {
        match &mut self.conn {
            Conn::Sqlite(c) => c.query(sql, kinds),
            Conn::Postgres(c) => c.query(sql, kinds),
        }
    }

    /// How far `cluster`'s ended jobs are written; `None`: nothing yet.
    pub fn cursor(&mut self, cluster: &str) -> Result<Option<Cursor>, AccountingError> {
        let mut s = Sql::new("SELECT end_time, job_id FROM ingest_cursor WHERE cluster = ");
        s.bind(Value::text(cluster));
        let rows = self.query(&s, &[Kind::Int, Kind::Int])?;
        Ok(rows.first().map(|r| Cursor {
            end_time: r[0].as_u64().unwrap_or(0),
            job_id: r[1].as_u64().unwrap_or(0),
        }))
    }

    /// Writes `jobs` and moves the cursor to `cursor`, in one transaction: either all of
    /// it is in the database or none (and the next try writes it again, changing nothing
    /// that is already there).
    pub fn write(&mut self, cluster: &str, jobs: &[Rows], cursor: Cursor) -> Result<(), AccountingError> {
        let mut statements = crate::rows::statements(cluster, jobs);
        statements.push(upsert(
            "ingest_cursor",
            &["cluster", "end_time", "job_id"],
            &["cluster"],
            vec![
                Value::text(cluster),
                Value::int(cursor.end_time),
                Value::int(cursor.job_id),
            ],
        ));
        self.run(&statements)
    }

    /// Makes the database's nodes and HyperNodes of `cluster` these.
    pub fn set_topology(&mut self, cluster: &str, topology: &Topology) -> Result<(), AccountingError> {
        self.run(&topology.statements(cluster))
    }

    /// Deletes what `keep` says is past at `now`.
    pub fn purge(&mut self, cluster: &str, keep: &Keep, now: u64) -> Result<(), AccountingError> {
        let statements = keep.statements(cluster, now);
        if statements.is_empty() {
            return Ok(());
        }
        self.run(&statements)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::rows::{JobRow, TaskRow};

    fn job(id: u64, user: &str, end: u64) -> Rows {
        Rows {
            job: JobRow {
                job_id: id,
                name: format!("j{id}"),
                user: user.into(),
                account: "physics".into(),
                queue: "default".into(),
                submit: end - 100,
                eligible: end - 100,
                start: Some(end - 60),
                end,
                state: "COMPLETED".into(),
                exit_code: Some(0),
                nnodes: 1,
                ntasks: 1,
                nodelist: "n1".into(),
                alloc_cpus: 2.0,
                core_seconds: 120.0,
                ..JobRow::default()
            },
            tasks: vec![TaskRow {
                index: 0,
                name: "t-0".into(),
                node: Some("n1".into()),
                start: Some(end - 60),
                end,
                outcome: "exited".into(),
                cpus: 2.0,
                ..TaskRow::default()
            }],
        }
    }

    #[test]
    fn writing_twice_keeps_one_row_and_the_cursor_moves_with_the_rows() {
        let dir = tempfile::tempdir().unwrap();
        let target = Target::Sqlite {
            path: dir.path().join("acct.db"),
        };
        let mut db = Db::open(&target).unwrap();
        assert_eq!(db.cursor("c").unwrap(), None);
        let rows = vec![job(1, "alice", 1000), job(2, "bob", 1001)];
        let cursor = Cursor {
            end_time: 1001,
            job_id: 2,
        };
        db.write("c", &rows, cursor).unwrap();
        db.write("c", &rows, cursor).unwrap();
        let n = db.query(&Sql::new("SELECT COUNT(*) FROM jobs"), &[Kind::Int]).unwrap();
        assert_eq!(n[0][0].as_i64(), Some(2));
        let n = db.query(&Sql::new("SELECT COUNT(*) FROM tasks"), &[Kind::Int]).unwrap();
        assert_eq!(n[0][0].as_i64(), Some(2));
        assert_eq!(db.cursor("c").unwrap(), Some(cursor));
        assert_eq!(db.cursor("other").unwrap(), None);
        drop(db);
        // Opened again: nothing migrates twice, the rows are there.
        let mut db = Db::open(&target).unwrap();
        assert_eq!(db.cursor("c").unwrap(), Some(cursor));
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = Target::Sqlite {
            path: dir.path().join("acct.db"),
        };
        let mut db = Db::open(&target).unwrap();
        db.run(&[Sql::new(
            "INSERT INTO hp_migrations (version, description) VALUES (99, 'from the future')",
        )])
        .unwrap();
        drop(db);
        let e = Db::open(&target).unwrap_err().to_string();
        assert!(e.contains("schema is version 99"), "{e}");
    }

    #[test]
    fn retention_deletes_by_table() {
        let dir = tempfile::tempdir().unwrap();
        let mut db = Db::open(&Target::Sqlite {
            path: dir.path().join("acct.db"),
        })
        .unwrap();
        db.write("c", &[job(1, "a", 1000), job(2, "a", 5000)], Cursor::default())
            .unwrap();
        let keep = Keep {
            jobs: None,
            tasks: Some(1000),
            steps: None,
        };
        db.purge("c", &keep, 5500).unwrap();
        let count = |db: &mut Db, t: &str| {
            db.query(&Sql::new(&format!("SELECT COUNT(*) FROM {t}")), &[Kind::Int])
                .unwrap()[0][0]
                .as_i64()
                .unwrap()
        };
        assert_eq!(count(&mut db, "jobs"), 2);
        assert_eq!(count(&mut db, "tasks"), 1);
    }
}
