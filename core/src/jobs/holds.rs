//! Holds and begin times (Slurm's `hold`/`release` and `--begin`): a job held, or whose
//! begin time has not come, waits without being tried, without preempting and without a
//! reservation. A hold is kept in the job's stored record ([`Held`]) with who put it
//! there, so it survives a restart and an admin's hold is one its owner cannot lift; a
//! begin time is part of the job's spec.

use bevy_ecs::prelude::*;
use hyperplan_shared::JobSpec;

use crate::model::commands::Command;
use crate::model::components::{Job, JobPhase, JobState};
pub use crate::model::held::{Held, Waiting};
use crate::model::reason::Reason;
use crate::model::tick::Outbox;
use crate::names::JobNames;

/// Whether a pending job (or one rejected for the topology, which the walk would look
/// at again) is not tried now: held, its begin time is after `now_s`, or a gate keeps it
/// (a dependency, its array's limit, `singleton`: see `jobs::gates`). A job that runs
/// already is never stopped by any of them.
pub fn waits(job: &Job, st: &JobState, now_s: u64) -> bool {
    spec_waits(&job.spec, st, now_s)
}

/// [`waits`], from the job's spec.
pub fn spec_waits(spec: &JobSpec, st: &JobState, now_s: u64) -> bool {
    matches!(st.phase, JobPhase::Pending | JobPhase::Rejected)
        && st.next_rank == 0
        && (held_or_early(spec, st, now_s) || st.gate.is_some())
}

/// Held, or before its begin time: what a person decided, before any gate.
pub fn held_or_early(spec: &JobSpec, st: &JobState, now_s: u64) -> bool {
    st.held.is_some() || spec.begin.is_some_and(|b| b > now_s)
}

/// Why [`waits`] says it waits, in the words `status` and `explain` show.
pub fn not_yet(job: &Job, st: &JobState, now_s: u64) -> Option<Reason> {
    spec_not_yet(&job.spec, st, now_s)
}

/// [`not_yet`], from the job's spec.
pub fn spec_not_yet(spec: &JobSpec, st: &JobState, now_s: u64) -> Option<Reason> {
    if !spec_waits(spec, st, now_s) {
        return None;
    }
    Some(match (&st.held, spec.begin.filter(|&b| b > now_s), &st.gate) {
        (Some(h), _, _) => Reason::Held(h.clone()),
        (None, Some(b), _) => Reason::Begins(b),
        (None, None, Some(g)) => Reason::Gate(g.clone()),
        (None, None, None) => return None,
    })
}

/// `Event::Hold`: holds a pending job; an admin's hold over a user's makes it an
/// admin's, and a user's over an admin's changes nothing.
pub(crate) fn hold(world: &mut World, name: &str, by: String, admin: bool) {
    let Some(mut st) = job_state(world, name, "hold") else {
        return;
    };
    if st.phase != JobPhase::Pending {
        return;
    }
    if !admin && st.held.as_ref().is_some_and(|h| h.admin) {
        return;
    }
    let held = Held { by, admin };
    st.reason = Some(Reason::Held(held.clone()));
    st.reservation = None;
    st.held = Some(held);
}

/// `Event::Release`: lifts a job's hold; it is tried again at the next walk.
pub(crate) fn release(world: &mut World, name: &str) {
    let Some(mut st) = job_state(world, name, "release") else {
        return;
    };
    if st.held.take().is_some() {
        st.failed_epoch = None;
        if st.reason.as_ref().is_some_and(Reason::is_wait) {
            st.reason = None;
        }
        world.resource_mut::<Waiting>().unheld += 1;
    }
}

fn job_state<'w>(world: &'w mut World, name: &str, what: &str) -> Option<Mut<'w, JobState>> {
    let Some(&e) = world.resource::<JobNames>().0.get(name) else {
        let line = format!("{what}: no job {name}");
        world.resource_mut::<Outbox>().0.push(Command::Warn(line));
        return None;
    };
    world.get_mut::<JobState>(e)
}
