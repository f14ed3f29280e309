//! Who may preempt whom. A job never preempts one of a non-preemptible queue or class.
//! Otherwise on priority: the victim's (queue priority, class value) is strictly lower
//! than the preemptor's, never equal or higher. Or reclaiming: the preemptor's queue has
//! a quota and stays within it with the job, and the victim's queue (another one) uses
//! more than its own quota: it borrowed, and gives back.

use crate::config::PlannerConfig;
use crate::model::ids::QueueIdx;
use crate::queues::{QueueTable, QueueUse};

/// What decides whether a job may be preempted, and by whom.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Standing {
    /// Its queue.
    pub queue: QueueIdx,
    /// Its queue's priority.
    pub queue_priority: i32,
    /// Its class's value (0 without one).
    pub class_value: i32,
    /// Its class's name, for messages.
    pub class: Option<String>,
    /// Its queue and its class both allow preempting it.
    pub preemptible: bool,
}

impl Standing {
    /// The standing of a job of `queue` and priority class `class`.
    pub fn of(config: &PlannerConfig, table: &QueueTable, queue: QueueIdx, class: Option<&str>) -> Self {
        let (class_value, class_ok) = config.preemption.of(class);
        let q = table.get(queue);
        Self {
            queue,
            queue_priority: q.priority,
            class_value,
            class: class.map(str::to_string),
            preemptible: q.preemptible && class_ok,
        }
    }

    fn rank(&self) -> (i32, i32) {
        (self.queue_priority, self.class_value)
    }

    /// `queue gpu (priority 10), class urgent (1000)`.
    fn describe(&self, table: &QueueTable) -> String {
        let q = table.get(self.queue);
        match &self.class {
            Some(c) => format!(
                "queue {} (priority {}), class {c} ({})",
                q.name, q.priority, self.class_value
            ),
            None => format!("queue {} (priority {}), no class (0)", q.name, q.priority),
        }
    }
}

/// Whether queue `q` may reclaim for a request of `req` (over the table's dimensions): it
/// has a quota in some dimension the request uses, and in every such dimension its use
/// with the request stays within it.
pub fn may_reclaim(table: &QueueTable, used: &QueueUse, q: QueueIdx, req: &[u64]) -> bool {
    let quota = &table.quota[q.ix()];
    let now = used.used.get(q.ix());
    let mut any = false;
    for (k, (&r, &qk)) in req.iter().zip(quota).enumerate() {
        if r == 0 || qk == 0 {
            continue;
        }
        any = true;
        let u = now.and_then(|u| u.get(k)).copied().unwrap_or(0);
        if u.saturating_add(r) > qk {
            return false;
        }
    }
    any
}

/// Whether queue `q` uses more than its quota in some dimension (all it uses, where it has
/// none): what it holds there is borrowed.
pub fn borrows(table: &QueueTable, used: &QueueUse, q: QueueIdx) -> bool {
    let quota = &table.quota[q.ix()];
    used.used
        .get(q.ix())
        .is_some_and(|u| u.iter().zip(quota).any(|(&u, &qk)| u > qk))
}

/// Why `preemptor` may preempt `victim`, in words, or `None` when it may not.
/// `reclaiming`: the preemptor's queue may reclaim ([`may_reclaim`]); `victim_borrows`:
/// the victim's queue uses more than its quota ([`borrows`]).
pub fn ground(
    table: &QueueTable,
    preemptor: &Standing,
    victim: &Standing,
    reclaiming: bool,
    victim_borrows: bool,
) -> Option<String> {
    if !victim.preemptible {
        return None;
    }
    if victim.rank() < preemptor.rank() {
        return Some(format!(
            "its priority ({}) is below that of the job ({})",
            victim.describe(table),
            preemptor.describe(table)
        ));
    }
    if reclaiming && victim_borrows && victim.queue != preemptor.queue {
        return Some(format!(
            "queue {} reclaims its quota from queue {}, which uses more than its own",
            table.get(preemptor.queue).name,
            table.get(victim.queue).name
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn table() -> (PlannerConfig, QueueTable) {
        let c = PlannerConfig::parse(
            "[[queue]]\nname = \"hi\"\npriority = 10\nquota = { cpu = 8 }\n[[queue]]\nname = \"lo\"\npreemptible = true\n[[queue]]\nname = \"safe\"\n[[queue]]\nname = \"quota\"\npriority = -5\nquota = { cpu = 8 }\n[[priorityClass]]\nname = \"urgent\"\nvalue = 100\n[[priorityClass]]\nname = \"keep\"\nvalue = -1\npreemptible = false\n",
            "planner.toml",
        )
        .unwrap();
        let t = QueueTable::new(&c, 0);
        (c, t)
    }

    #[test]
    fn strictly_lower_and_preemptible_only() {
        let (c, t) = table();
        let q = |n: &str| t.of_spec(Some(n)).unwrap();
        let st = |queue: &str, class: Option<&str>| Standing::of(&c, &t, q(queue), class);
        let hi = st("hi", None);
        let lo = st("lo", None);
        assert!(ground(&t, &hi, &lo, false, false).unwrap().contains("below"));
        // Equal standing: never.
        assert_eq!(ground(&t, &lo, &st("lo", None), false, false), None);
        // A class lifts a job of the same queue above another.
        assert!(ground(&t, &st("lo", Some("urgent")), &lo, false, false).is_some());
        assert_eq!(ground(&t, &lo, &st("lo", Some("urgent")), false, false), None);
        // Not preemptible: the queue says so, or the class.
        assert_eq!(ground(&t, &hi, &st("safe", None), false, false), None);
        assert_eq!(ground(&t, &hi, &st("lo", Some("keep")), false, false), None);
        // Queue priority comes first.
        assert!(ground(&t, &hi, &st("lo", Some("urgent")), false, false).is_some());
        // Reclaim: from another queue that borrows, whatever the priorities.
        let (quota, lo_urgent) = (st("quota", None), st("lo", Some("urgent")));
        assert_eq!(ground(&t, &quota, &lo_urgent, false, true), None);
        assert!(ground(&t, &quota, &lo_urgent, true, true).unwrap().contains("reclaims"));
        assert_eq!(ground(&t, &quota, &lo_urgent, true, false), None);
        assert_eq!(
            ground(&t, &quota, &st("quota", None), true, true),
            None,
            "not its own queue"
        );
    }

    #[test]
    fn reclaim_needs_a_quota_the_job_stays_within() {
        let (_, t) = table();
        let mut used = QueueUse::default();
        used.reset(&t);
        let hi = t.of_spec(Some("hi")).unwrap();
        let lo = t.of_spec(Some("lo")).unwrap();
        let cpu = t.dims.iter().position(|d| d == "cpu").unwrap();
        let mut req = vec![0; t.dims.len()];
        req[cpu] = 8000;
        assert!(may_reclaim(&t, &used, hi, &req));
        req[cpu] = 9000;
        assert!(!may_reclaim(&t, &used, hi, &req));
        req[cpu] = 1000;
        assert!(!may_reclaim(&t, &used, lo, &req), "lo has no quota");
        assert!(!borrows(&t, &used, lo));
        used.used[lo.ix()][cpu] = 1;
        assert!(borrows(&t, &used, lo));
    }
}
