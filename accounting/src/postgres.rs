//! The PostgreSQL backend: the blocking `postgres` client (its own small runtime, on the
//! accounting thread), TLS through rustls with the site's CA when `caFile` is set, the
//! password read from its file at each connect. Statements are prepared once per
//! connection.

use std::collections::HashMap;
use std::time::Duration;

use postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use postgres::{Client, NoTls, Statement};

use crate::error::AccountingError;
use crate::schema::{self, MIGRATIONS};
use crate::sql::{Kind, Sql, Value};
use crate::target::PostgresTarget;

/// How long a connect may take before it counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The advisory lock two planners migrating at once take turns on ("hyperplan" in ASCII).
const MIGRATION_LOCK: i64 = 0x6879_7065_7270_6c61;

pub(crate) struct Pg {
    client: Client,
    at: String,
    /// Statements prepared on this connection, by text.
    prepared: HashMap<String, Statement>,
}

impl std::fmt::Debug for Pg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pg").field("at", &self.at).finish()
    }
}

impl ToSql for Value {
    fn to_sql(&self, ty: &Type, out: &mut bytes::BytesMut) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Value::Int(Some(v)) => v.to_sql(ty, out),
            Value::Real(Some(v)) => v.to_sql(ty, out),
            Value::Text(Some(v)) => v.to_sql(ty, out),
            Value::Int(None) | Value::Real(None) | Value::Text(None) => Ok(IsNull::Yes),
        }
    }

    fn accepts(ty: &Type) -> bool {
        <i64 as ToSql>::accepts(ty) || <f64 as ToSql>::accepts(ty) || <String as ToSql>::accepts(ty)
    }

    to_sql_checked!();
}

impl Pg {
    pub(crate) fn connect(target: &PostgresTarget, at: String) -> Result<Self, AccountingError> {
        let mut config: postgres::Config = target.url.parse().map_err(|e: postgres::Error| AccountingError::Url {
            url: at.clone(),
            why: e.to_string(),
        })?;
        if config.get_password().is_some() {
            return Err(AccountingError::Url {
                url: at,
                why: "a password in the url is refused: put it in passwordFile".into(),
            });
        }
        if let Some(file) = &target.password_file {
            let text = std::fs::read_to_string(file).map_err(|e| AccountingError::File {
                at: at.clone(),
                file: file.display().to_string(),
                why: e.to_string(),
            })?;
            config.password(text.lines().next().unwrap_or("").trim_end_matches('\r'));
        }
        config.connect_timeout(CONNECT_TIMEOUT);
        config.application_name("hyperplan-planner");
        let e = |source| AccountingError::Postgres {
            at: at.clone(),
            doing: "connecting",
            source,
        };
        let client = match &target.ca_file {
            Some(ca) => {
                if config.get_ssl_mode() == postgres::config::SslMode::Disable {
                    return Err(AccountingError::Url {
                        url: at,
                        why: "caFile is set but the url says sslmode=disable".into(),
                    });
                }
                config.ssl_mode(postgres::config::SslMode::Require);
                config.connect(tls(ca, &at)?).map_err(e)?
            }
            None => {
                if config.get_ssl_mode() == postgres::config::SslMode::Require {
                    return Err(AccountingError::Url {
                        url: at,
                        why: "sslmode=require needs caFile: the CA certificate the server's is checked against".into(),
                    });
                }
                config.ssl_mode(postgres::config::SslMode::Disable);
                config.connect(NoTls).map_err(e)?
            }
        };
        let mut me = Self {
            client,
            at,
            prepared: HashMap::new(),
        };
        me.migrate()?;
        Ok(me)
    }

    fn err(&self, doing: &'static str) -> impl Fn(postgres::Error) -> AccountingError + '_ {
        move |source| AccountingError::Postgres {
            at: self.at.clone(),
            doing,
            source,
        }
    }

    fn migrate(&mut self) -> Result<(), AccountingError> {
        let at = self.at.clone();
        let e = |source| AccountingError::Postgres {
            at: at.clone(),
            doing: "migrating its schema",
            source,
        };
        let mut tx = self.client.transaction().map_err(e)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .map_err(e)?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS hp_migrations (version BIGINT PRIMARY KEY, description TEXT NOT NULL)",
        )
        .map_err(e)?;
        let found: i64 = tx
            .query_one("SELECT COALESCE(MAX(version), 0)::BIGINT FROM hp_migrations", &[])
            .map_err(e)?
            .get(0);
        if found > schema::latest() {
            return Err(AccountingError::Newer {
                at: at.clone(),
                found,
                known: schema::latest(),
            });
        }
        for m in MIGRATIONS.iter().filter(|m| m.version > found) {
            tx.batch_execute(m.sql).map_err(e)?;
            tx.execute(
                "INSERT INTO hp_migrations (version, description) VALUES ($1, $2)",
                &[&m.version, &m.description],
            )
            .map_err(e)?;
            tracing::info!(
                at,
                version = m.version,
                "accounting: schema migrated: {}",
                m.description
            );
        }
        tx.commit().map_err(e)
    }

    fn statement(&mut self, text: &str) -> Result<Statement, postgres::Error> {
        if let Some(s) = self.prepared.get(text) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(text)?;
        self.prepared.insert(text.to_string(), s.clone());
        Ok(s)
    }

    pub(crate) fn run(&mut self, statements: &[Sql]) -> Result<(), AccountingError> {
        let at = self.at.clone();
        let e = |source| AccountingError::Postgres {
            at: at.clone(),
            doing: "writing",
            source,
        };
        let mut prepared = Vec::with_capacity(statements.len());
        for s in statements {
            prepared.push(self.statement(&s.text).map_err(e)?);
        }
        let mut tx = self.client.transaction().map_err(e)?;
        for (s, st) in statements.iter().zip(&prepared) {
            let params: Vec<&(dyn ToSql + Sync)> = s.params.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
            tx.execute(st, &params).map_err(e)?;
        }
        tx.commit().map_err(e)
    }

    pub(crate) fn query(&mut self, sql: &Sql, kinds: &[Kind]) -> Result<Vec<Vec<Value>>, AccountingError> {
        let st = self.statement(&sql.text).map_err(self.err("reading"))?;
        let params: Vec<&(dyn ToSql + Sync)> = sql.params.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
        let rows = self.client.query(&st, &params).map_err(self.err("reading"))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let mut values = Vec::with_capacity(kinds.len());
            for (i, k) in kinds.iter().enumerate() {
                values.push(match k {
                    Kind::Int => Value::Int(row.try_get(i).map_err(self.err("reading"))?),
                    Kind::Real => Value::Real(row.try_get(i).map_err(self.err("reading"))?),
                    Kind::Text => Value::Text(row.try_get(i).map_err(self.err("reading"))?),
                });
            }
            out.push(values);
        }
        Ok(out)
    }
}

/// rustls with the roots in `ca` (PEM) and nothing else.
fn tls(ca: &std::path::Path, at: &str) -> Result<tokio_postgres_rustls::MakeRustlsConnect, AccountingError> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let bad = |why: String| AccountingError::File {
        at: at.to_string(),
        file: ca.display().to_string(),
        why,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(ca)
        .map_err(|e| bad(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("no PEM certificate in it".into()));
    }
    let mut roots = rustls::RootCertStore::empty();
    for c in certs {
        roots.add(c).map_err(|e| bad(e.to_string()))?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}
