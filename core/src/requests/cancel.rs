//! A person's cancel: the owner check (`ownership`) and the cancellation, queued for the
//! next tick, which kills the job's tasks through `lifecycle`.

use crate::Planner;
use crate::caller::Caller;
use crate::jobs::ownership::CancelError;
use crate::model::events::Event;

impl Planner {
    /// Cancels `job` for `caller` (its owner or an admin): its tasks get SIGTERM, then
    /// SIGKILL `grace_secs` later, from the next tick on.
    pub fn cancel(&mut self, job: &str, grace_secs: u64, caller: Caller<'_>) -> Result<(), CancelError> {
        self.authorize_cancel(job, caller)?;
        self.push(Event::Cancel {
            job: job.to_string(),
            grace_secs,
        });
        Ok(())
    }
}
