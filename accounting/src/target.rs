//! Where the accounting database is: a SQLite file (the default, beside the planner's
//! state) or a PostgreSQL server (`postgres://user@host:port/db`, its password in a file
//! and, for TLS, the CA that signed the server's certificate).

use std::path::PathBuf;

/// A database to open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A SQLite file, made at first use.
    Sqlite { path: PathBuf },
    /// A PostgreSQL server.
    Postgres(PostgresTarget),
}

/// How to reach a PostgreSQL server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostgresTarget {
    /// `postgres://user@host:port/database[?sslmode=require]` (libpq's URL form). A
    /// password in it is refused: it goes in `password_file`.
    pub url: String,
    /// A file whose first line is the password (mode 0600, read at each connect, so a
    /// rotated password needs no restart).
    pub password_file: Option<PathBuf>,
    /// The CA certificate(s), PEM, that the server's certificate must chain to: TLS is
    /// then required (`sslmode` other than `disable`). Without it, no TLS.
    pub ca_file: Option<PathBuf>,
}

impl PostgresTarget {
    /// Checks the URL's form (the config's check; connecting checks the rest).
    pub fn check_url(url: &str) -> Result<(), crate::AccountingError> {
        url.parse::<::postgres::Config>()
            .map(|_| ())
            .map_err(|e| crate::AccountingError::Url {
                url: url.split('@').next_back().unwrap_or(url).to_string(),
                why: e.to_string(),
            })
    }
}

impl Target {
    /// How logs and `hyperplan planners` name it: the file, or the URL without secrets.
    pub fn describe(&self) -> String {
        match self {
            Target::Sqlite { path } => format!("sqlite {}", path.display()),
            Target::Postgres(p) => p.url.split('?').next().unwrap_or(&p.url).to_string(),
        }
    }
}
