//! What can go wrong between the planner and its accounting database.

use thiserror::Error;

/// An accounting database error, naming the database and what was being done.
#[derive(Debug, Error)]
pub enum AccountingError {
    /// SQLite said no.
    #[error("accounting database {at}: {doing}: {source}")]
    Sqlite {
        at: String,
        doing: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    /// PostgreSQL said no, or could not be reached.
    #[error("accounting database {at}: {doing}: {source}")]
    Postgres {
        at: String,
        doing: &'static str,
        #[source]
        source: ::postgres::Error,
    },
    /// A file it needs (password, CA certificate) could not be read or is not right.
    #[error("accounting database {at}: {file}: {why}")]
    File { at: String, file: String, why: String },
    /// `[accounting] url` is not one it can use.
    #[error("accounting database url {url:?}: {why}")]
    Url { url: String, why: String },
    /// The database was written by a later hyperplan: its schema is newer than this build's.
    #[error(
        "accounting database {at}: its schema is version {found}, this hyperplan knows up to {known}: \
         run the newer hyperplan, or point [accounting] at another database"
    )]
    Newer { at: String, found: i64, known: i64 },
    /// A value read back is not what the schema promises (a row edited by hand).
    #[error("accounting database {at}: {what}")]
    Damaged { at: String, what: String },
}

impl AccountingError {
    /// Whether asking again later may succeed (the server is down, a connection broke),
    /// as opposed to a refusal that stays (a newer schema, a bad password file).
    pub fn is_transient(&self) -> bool {
        match self {
            AccountingError::Postgres { source, .. } => source.is_closed() || source.as_db_error().is_none(),
            AccountingError::Sqlite { source, .. } => matches!(
                source.sqlite_error_code(),
                Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
            ),
            _ => false,
        }
    }
}
