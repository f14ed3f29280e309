//! A person's cancel: the owner check (`ownership`) and the cancellation, queued for the
//! next tick, which kills the job's tasks through `lifecycle`.

use crate::Planner;
use crate::caller::Caller;
use crate::config::PlannerConfig;
use crate::jobs::ownership::CancelError;
use crate::model::events::Event;

impl Planner {
    /// Cancels `job` for `caller` (its owner or an admin): its tasks get SIGTERM, then
    /// SIGKILL `grace_secs` later, from the next tick on; a grace above `[limits]
    /// maxCancelGrace` is refused. A job already being stopped keeps the shorter grace,
    /// and an admin's cancel kills it at once.
    pub fn cancel(&mut self, job: &str, grace_secs: u64, caller: Caller<'_>) -> Result<(), CancelError> {
        self.authorize_cancel(job, caller)?;
        let max = self.world.resource::<PlannerConfig>().limits.max_cancel_grace;
        if grace_secs > max {
            return Err(CancelError::GraceTooLong { grace: grace_secs, max });
        }
        self.push(Event::Cancel {
            job: job.to_string(),
            grace_secs,
            by_admin: caller.admin,
        });
        Ok(())
    }
}
