//! The SQLite backend: one file, WAL (readers do not wait for the writer; a crash loses
//! at most what was not yet committed, and the cursor is committed with its rows),
//! statements prepared once and cached.

use std::path::Path;
use std::time::Duration;

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, OpenFlags, ToSql};

use crate::error::AccountingError;
use crate::schema::{self, MIGRATIONS};
use crate::sql::{Kind, Sql, Value};

/// An open SQLite database.
pub(crate) struct Sqlite {
    conn: Connection,
    at: String,
}

impl std::fmt::Debug for Sqlite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sqlite").field("at", &self.at).finish()
    }
}

impl ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Value::Int(Some(v)) => ToSqlOutput::from(*v),
            Value::Real(Some(v)) => ToSqlOutput::from(*v),
            Value::Text(Some(v)) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
            Value::Int(None) | Value::Real(None) | Value::Text(None) => ToSqlOutput::from(rusqlite::types::Null),
        })
    }
}

impl Sqlite {
    /// Opens (making it at first use) and brings the schema up to date.
    pub(crate) fn open(path: &Path, at: String) -> Result<Self, AccountingError> {
        let e = |doing| {
            let at = at.clone();
            move |source| AccountingError::Sqlite { at, doing, source }
        };
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(e("opening"))?;
        conn.busy_timeout(Duration::from_secs(10))
            .map_err(e("setting its busy timeout"))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(e("turning on its write-ahead log"))?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(e("setting synchronous"))?;
        conn.set_prepared_statement_cache_capacity(64);
        let mut me = Self { conn, at };
        me.migrate()?;
        Ok(me)
    }

    fn err(&self, doing: &'static str) -> impl Fn(rusqlite::Error) -> AccountingError + '_ {
        move |source| AccountingError::Sqlite {
            at: self.at.clone(),
            doing,
            source,
        }
    }

    fn migrate(&mut self) -> Result<(), AccountingError> {
        let at = self.at.clone();
        let e = |doing| {
            let at = at.clone();
            move |source| AccountingError::Sqlite { at, doing, source }
        };
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(e("migrating its schema"))?;
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS hp_migrations (version BIGINT PRIMARY KEY, description TEXT NOT NULL)",
        )
        .map_err(e("migrating its schema"))?;
        let found: i64 = tx
            .query_row("SELECT COALESCE(MAX(version), 0) FROM hp_migrations", [], |r| r.get(0))
            .map_err(e("reading its schema version"))?;
        if found > schema::latest() {
            return Err(AccountingError::Newer {
                at: at.clone(),
                found,
                known: schema::latest(),
            });
        }
        for m in MIGRATIONS.iter().filter(|m| m.version > found) {
            for s in schema::statements(m.sql) {
                tx.execute_batch(s).map_err(e("migrating its schema"))?;
            }
            tx.execute(
                "INSERT INTO hp_migrations (version, description) VALUES (?1, ?2)",
                rusqlite::params![m.version, m.description],
            )
            .map_err(e("migrating its schema"))?;
            tracing::info!(
                at,
                version = m.version,
                "accounting: schema migrated: {}",
                m.description
            );
        }
        tx.commit().map_err(e("migrating its schema"))
    }

    /// Runs `statements` in one transaction.
    pub(crate) fn run(&mut self, statements: &[Sql]) -> Result<(), AccountingError> {
        let at = self.at.clone();
        let e = move |source| AccountingError::Sqlite {
            at: at.clone(),
            doing: "writing",
            source,
        };
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(&e)?;
        for s in statements {
            let mut st = tx.prepare_cached(&s.text).map_err(&e)?;
            st.execute(rusqlite::params_from_iter(s.params.iter())).map_err(&e)?;
        }
        tx.commit().map_err(&e)
    }

    /// The rows of `sql`, each column read as `kinds` says.
    pub(crate) fn query(&mut self, sql: &Sql, kinds: &[Kind]) -> Result<Vec<Vec<Value>>, AccountingError> {
        let e = self.err("reading");
        let mut st = self.conn.prepare_cached(&sql.text).map_err(&e)?;
        let mut rows = st.query(rusqlite::params_from_iter(sql.params.iter())).map_err(&e)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(&e)? {
            let mut values = Vec::with_capacity(kinds.len());
            for (i, k) in kinds.iter().enumerate() {
                values.push(match k {
                    Kind::Int => Value::Int(row.get(i).map_err(&e)?),
                    Kind::Real => Value::Real(row.get(i).map_err(&e)?),
                    Kind::Text => Value::Text(row.get(i).map_err(&e)?),
                });
            }
            out.push(values);
        }
        Ok(out)
    }
}
