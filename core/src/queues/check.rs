//! A job's queue at submit: it must exist, the submitter must be allowed in it, and its
//! time limit must be within the queue's `maxTimeLimit`; a job without a time limit gets
//! the queue's `defaultTimeLimit` (written into its spec, so the agent enforces it and the
//! store keeps it).

use hyperplan_shared::JobSpec;
use hyperplan_shared::timelimit::format_time_limit;

use super::QueueTable;
use crate::caller::Caller;
use crate::model::ids::QueueIdx;

/// Why a job may not go to its queue.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QueueRefusal {
    /// No queue of that name.
    #[error("job {job}: queue {queue:?} does not exist; queues: {known}")]
    Unknown {
        /// The job.
        job: String,
        /// The queue it names.
        queue: String,
        /// The queues there are.
        known: String,
    },
    /// The queue takes other users.
    #[error("job {job}: user {user} may not submit to queue {queue:?}; it takes {who}")]
    NotAllowed {
        /// The job.
        job: String,
        /// The submitter.
        user: String,
        /// The queue.
        queue: String,
        /// Its users and groups.
        who: String,
    },
    /// The job names a priority class that does not exist, or is not for its queue.
    #[error("job {job}: {why}")]
    Class {
        /// The job's name.
        job: String,
        /// What is wrong with its `priorityClassName`.
        why: String,
    },
    /// The job's time limit is above the queue's most.
    #[error("job {job}: timeLimit {asked} is above queue {queue:?}'s maxTimeLimit of {max}")]
    OverMaxTime {
        /// The job.
        job: String,
        /// Its limit, as written back (`2d`).
        asked: String,
        /// The queue.
        queue: String,
        /// The queue's most (`1d`).
        max: String,
    },
}

/// The queue `spec` goes to, checked for `caller` (`None`: no permission check, as for
/// the simulator's jobs and jobs brought back from the store); the queue's default time
/// limit is written into a spec that has none.
pub fn check(
    table: &QueueTable,
    preemption: &crate::config::PreemptionConfig,
    spec: &mut JobSpec,
    caller: Option<Caller<'_>>,
) -> Result<QueueIdx, QueueRefusal> {
    let Some(q) = table.of_spec(spec.queue.as_deref()) else {
        return Err(QueueRefusal::Unknown {
            job: spec.name.clone(),
            queue: spec.queue.clone().unwrap_or_default(),
            known: table.by_name.keys().cloned().collect::<Vec<_>>().join(", "),
        });
    };
    let queue = table.get(q);
    if let Some(c) = caller
        && !c.admin
        && !queue.is_open()
        && !queue.users.iter().any(|u| u == c.user)
        && !queue.groups.iter().any(|g| c.groups.contains(g))
    {
        let mut who = Vec::new();
        if !queue.users.is_empty() {
            who.push(format!("users {}", queue.users.join(", ")));
        }
        if !queue.groups.is_empty() {
            who.push(format!("groups {}", queue.groups.join(", ")));
        }
        return Err(QueueRefusal::NotAllowed {
            job: spec.name.clone(),
            user: c.user.to_string(),
            queue: queue.name.clone(),
            who: who.join(" and "),
        });
    }
    if let (Some(asked), Some(max)) = (spec.run.time_limit, queue.max_time_limit)
        && asked > max
    {
        return Err(QueueRefusal::OverMaxTime {
            job: spec.name.clone(),
            asked: format_time_limit(asked),
            queue: queue.name.clone(),
            max: format_time_limit(max),
        });
    }
    if let Some(why) = spec
        .priority_class
        .as_deref()
        .and_then(|c| preemption.refusal(c, &queue.name))
    {
        return Err(QueueRefusal::Class {
            job: spec.name.clone(),
            why,
        });
    }
    if spec.run.time_limit.is_none() {
        spec.run.time_limit = queue.default_time_limit;
    }
    Ok(q)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::config::PlannerConfig;
    use crate::testing::JobBuilder;

    fn table() -> (QueueTable, crate::config::PreemptionConfig) {
        let c = PlannerConfig::parse(
            "[[queue]]\nname = \"gpu\"\nusers = [\"alice\"]\ngroups = [\"ml\"]\ndefaultTimeLimit = \"1h\"\nmaxTimeLimit = \"1d\"\n[[priorityClass]]\nname = \"urgent\"\nvalue = 9\nqueues = [\"gpu\"]\n",
            "p.toml",
        )
        .unwrap();
        (QueueTable::new(&c, 0), c.preemption)
    }

    #[test]
    fn unknown_queue_other_users_and_long_limits_are_refused() {
        let (t, p) = table();
        let mut j = JobBuilder::gang("a", 1, "cpu=1").build();
        j.queue = Some("cpu".into());
        assert_eq!(
            check(&t, &p, &mut j, None).unwrap_err().to_string(),
            "job a: queue \"cpu\" does not exist; queues: default, gpu"
        );
        j.queue = Some("gpu".into());
        assert_eq!(
            check(&t, &p, &mut j, Some(Caller::user("bob")))
                .unwrap_err()
                .to_string(),
            "job a: user bob may not submit to queue \"gpu\"; it takes users alice and groups ml"
        );
        let groups = ["ml".to_string()];
        let mut bob = Caller::user("bob");
        bob.groups = &groups;
        assert_eq!(check(&t, &p, &mut j, Some(bob)), Ok(QueueIdx(1)));
        assert_eq!(j.run.time_limit, Some(3600), "the queue's default limit is written in");
        j.run.time_limit = Some(2 * 86_400);
        assert_eq!(
            check(&t, &p, &mut j, Some(Caller::user("alice")))
                .unwrap_err()
                .to_string(),
            "job a: timeLimit 2d is above queue \"gpu\"'s maxTimeLimit of 1d"
        );
        assert_eq!(
            check(&t, &p, &mut j, Some(Caller::admin("root"))).map_err(|_| ()),
            Err(())
        );
        j.queue = None;
        assert_eq!(check(&t, &p, &mut j, Some(Caller::user("bob"))), Ok(QueueIdx(0)));
        // A priority class: it must exist, and be for the job's queue.
        j.priority_class = Some("urgnet".into());
        assert_eq!(
            check(&t, &p, &mut j, None).unwrap_err().to_string(),
            "job a: priorityClassName: no priority class \"urgnet\" (known: urgent)"
        );
        j.priority_class = Some("urgent".into());
        assert_eq!(
            check(&t, &p, &mut j, None).unwrap_err().to_string(),
            "job a: priorityClassName: class \"urgent\" is for jobs of queue gpu only, not of \"default\""
        );
        j.queue = Some("gpu".into());
        j.run.time_limit = None;
        assert_eq!(check(&t, &p, &mut j, None), Ok(QueueIdx(1)));
    }
}
