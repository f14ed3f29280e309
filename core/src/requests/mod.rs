//! The planner's answers to people's requests, as methods on [`Planner`](crate::Planner):
//! a driver hands over what was asked and who asked ([`Caller`](crate::caller::Caller))
//! and gets a typed answer or a typed refusal. Every decision (admission and job ids,
//! who may cancel or read a job, how live and stored jobs merge for `status`) is made
//! here, so a driver only carries bytes.
//!
//! - [`submit`]: checks a submission and admits it at once, with its ids and records;
//! - [`cancel`]: the owner check and the cancellation;
//! - [`hold`]: who may hold and release a job;
//! - [`exec`]: who may run a command inside a running job, and on which nodes;
//! - [`logs`]: which task's output a person may read, and on which node;
//! - [`status`]: the jobs a `status` request shows, live and stored;
//! - [`nodes`]: an admin's drain, resume and removal of nodes.

pub mod cancel;
pub mod exec;
pub mod hold;
pub mod logs;
pub mod nodes;
pub mod status;
pub mod submit;
