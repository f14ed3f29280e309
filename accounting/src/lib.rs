//! hyperplan-accounting: the accounting database, apart from the planner's live state.
//!
//! Every ended job (and array element) becomes one row in `jobs`, each of its tasks one
//! in `tasks` and each step one in `steps`, keyed by (cluster, job id, attempt) so that
//! writing the same end twice changes nothing: the planner writes from its committed
//! state, at least once, and the database keeps it exactly once in effect. The cursor
//! of what is written lives in the same database, written in the same transaction as
//! the rows it covers ([`Db::write`]).
//!
//! Two backends behind one [`Db`]: SQLite (bundled, a file beside the state; the
//! default) and PostgreSQL (a site's server, TLS and a password file). Both speak the
//! same SQL ([`sql`]): the schema is a list of versioned migrations ([`schema`]), and
//! `history` and `report` are plain queries over indexed columns ([`history`],
//! [`report`]).

pub mod db;
pub mod error;
pub mod history;
mod postgres;
pub mod record;
pub mod report;
pub mod retention;
pub mod rows;
pub mod schema;
pub mod sql;
mod sqlite;
pub mod target;
pub mod topology;

pub use db::{Cursor, Db};
pub use error::AccountingError;
pub use record::rows_of;
pub use retention::Keep;
pub use rows::{JobRow, Rows, StepRow, TaskRow};
pub use target::Target;
pub use topology::{Tiers, Topology};
