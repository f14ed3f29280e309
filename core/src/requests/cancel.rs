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
    ///
    /// `job` may name an array (`NAME`, its id: every element), some of its elements
    /// (`NAME[3-5]`, `ID_3`) or one job; every job named is checked before any is
    /// cancelled.
    pub fn cancel(&mut self, job: &str, grace_secs: u64, caller: Caller<'_>) -> Result<(), CancelError> {
        let names =
            crate::jobs::arrays::select(&self.world, job).map_err(|_| CancelError::NoSuchJob(job.to_string()))?;
        for name in &names {
            self.authorize_cancel(name, caller)?;
        }
        let max = self.world.resource::<PlannerConfig>().limits.max_cancel_grace;
        if grace_secs > max {
            return Err(CancelError::GraceTooLong { grace: grace_secs, max });
        }
        for name in names {
            self.push(Event::Cancel {
                job: name,
                grace_secs,
                by_admin: caller.admin,
            });
        }
        Ok(())
    }
}
