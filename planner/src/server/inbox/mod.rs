//! The driver's inbox: every message the server's tasks (agents' and people's sessions,
//! exec sessions, the discovery pollers, the policy reloader, the metrics and web
//! endpoints) send to the one task that owns the `Planner` ([`ToCore`]), and what the
//! driver answers with. A room of its own at the bottom of the server: it imports no
//! other part of it, so each part speaks to the driver through these types instead of
//! through each other (issue 41 found 12 files in a circle around `ToCore` when it lived
//! in `driver`).
//!
//! - [`link`]: an agent's link as the driver holds it ([`AgentLink`], [`LinkControl`]);
//! - [`agent`]: what agents' links say ([`FromAgent`]);
//! - [`request`]: a person's request, a submitted file already read into jobs;
//! - [`exec`]: `hyperplan exec`'s question, its answer and its step's end.

mod agent;
mod exec;
mod link;
mod request;

use tokio::sync::oneshot;

pub use self::agent::FromAgent;
pub use self::exec::{ExecAsk, ExecCaller, ExecPlan, ExecRefused, StepEnded};
pub use self::link::{AgentLink, LinkControl};
pub use self::request::{Asked, Request, Submission};
use crate::discovery::Polled;

/// What connections and pollers tell the driver.
#[derive(Debug)]
pub enum ToCore {
    /// An agent's link: registrations, heartbeats, task reports, its end.
    Agent(FromAgent),
    /// A discovery source was read (see `crate::discovery`).
    Discovered(Polled),
    /// A person's request (see `Request`).
    Request(Request),
    /// `hyperplan exec`: where it may run (see `server::exec`).
    Exec(ExecAsk),
    /// An exec session ended: its step's end (see `server::exec`).
    StepEnded(StepEnded),
    /// planner.toml read again on SIGHUP: its queues, fair share, priority, scheduler
    /// and maintenance sections (see `server::policy`).
    Policy(Box<hyperplan_core::PlannerConfig>),
    /// A Prometheus scrape: the cluster's gauges now (see `crate::metrics::serve`).
    Metrics(oneshot::Sender<crate::metrics::snapshot::Snapshot>),
    /// The web view's state now, for each viewer to read as they may (see
    /// `crate::web::state`).
    WebState(oneshot::Sender<crate::web::state::Snapshot>),
}
