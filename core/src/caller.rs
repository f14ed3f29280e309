//! Who asks the planner something, and what of other people's jobs they may see. With
//! `[server] privateData` (like Slurm's `PrivateData=jobs`) a plain user sees only their
//! own jobs: another user's job answers exactly as a job that does not exist, so its name,
//! owner, directories and pids do not leak. Admins see every job. Without it (the
//! default) everyone sees every job, as before.

use hyperplan_shared::report::JobReport;

use crate::Planner;

/// What a plain user reads under `privateData` in place of another user's job that one of
/// theirs names: the job that preempted theirs, or one preempted for theirs.
pub const ANOTHER_USERS_JOB: &str = "another user's job";

/// The person behind a request: the name and role of their certificate, and whether the
/// planner hides other users' jobs from plain users.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller<'a> {
    /// The certificate's user name (a job's owner when they submit it).
    pub user: &'a str,
    /// The certificate's role is `admin`: any job, any priority.
    pub admin: bool,
    /// `[server] privateData`.
    pub private_data: bool,
    /// The Unix groups of `user` on the planner's host (for queues that take groups);
    /// empty where the driver does not know them.
    pub groups: &'a [String],
}

impl<'a> Caller<'a> {
    /// A plain user (role `user`) on a planner without `privateData`.
    pub fn user(user: &'a str) -> Self {
        Self {
            user,
            admin: false,
            private_data: false,
            groups: &[],
        }
    }

    /// An admin on a planner without `privateData`.
    pub fn admin(user: &'a str) -> Self {
        Self {
            admin: true,
            ..Self::user(user)
        }
    }

    /// The same caller on a planner with `[server] privateData = private_data`.
    pub fn private(self, private_data: bool) -> Self {
        Self { private_data, ..self }
    }

    /// Whether this caller may see a job `owner` submitted (`None`: a job with no owner
    /// recorded, which only admins see under `privateData`).
    pub fn sees(&self, owner: Option<&str>) -> bool {
        !self.private_data || self.admin || owner == Some(self.user)
    }

    /// `reports` without the jobs this caller may not see, in their order.
    pub fn keep_visible(&self, reports: &mut Vec<JobReport>) {
        reports.retain(|r| self.sees(r.owner.as_deref()));
    }

    /// Whether this caller sees every job and every user's figures (no `privateData`,
    /// or an admin).
    pub fn sees_all(&self) -> bool {
        !self.private_data || self.admin
    }

    /// `name` as this caller may read it where one of their jobs names another job:
    /// itself where `sees_job(name)`, else [`ANOTHER_USERS_JOB`].
    pub fn job_name(&self, name: &str, sees_job: impl Fn(&str) -> bool) -> String {
        if self.sees_all() || sees_job(name) {
            name.to_string()
        } else {
            ANOTHER_USERS_JOB.to_string()
        }
    }

    /// `report` (one of this caller's jobs) without the names of other jobs they may not
    /// see (`sees_job`): the job that preempted it (`preemptedBy` and its reason) and the
    /// jobs preempted for it (its `preempting` and its reason). Else a preemption would
    /// tell whose jobs run where, which `privateData` hides.
    pub fn hide_other_jobs(&self, report: &mut JobReport, sees_job: impl Fn(&str) -> bool) {
        if self.sees_all() {
            return;
        }
        let name = |n: &str| self.job_name(n, &sees_job);
        if let Some(by) = report.preempted_by.take() {
            let shown = name(&by);
            if shown != by
                && let Some(reason) = &mut report.reason
            {
                let said = crate::preempt_reason::preempted_by(&by);
                *reason = reason.replace(&said, &format!("preempted by {ANOTHER_USERS_JOB}"));
            }
            report.preempted_by = Some(shown);
        }
        if let Some(n) = &mut report.preempting {
            for v in &mut n.victims {
                *v = name(v);
            }
        }
        if let Some(renamed) = report
            .reason
            .as_deref()
            .and_then(|r| crate::preempt_reason::rename_victims(r, name))
        {
            report.reason = Some(renamed);
        }
    }

    /// Whether this caller may read `user`'s own figures (their usage and share of a
    /// queue): their own, or anyone's when they see everything.
    pub fn sees_user(&self, user: &str) -> bool {
        self.sees_all() || user == self.user
    }
}

impl Planner {
    /// [`Caller::hide_other_jobs`] with the jobs this planner holds: a job it no longer
    /// knows is hidden too (whose it was cannot be told).
    pub fn hide_other_jobs(&self, caller: Caller<'_>, report: &mut JobReport) {
        if !caller.sees_all() {
            caller.hide_other_jobs(report, |name| self.sees_job(name, caller));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(name: &str, owner: Option<&str>) -> JobReport {
        JobReport {
            name: name.into(),
            owner: owner.map(str::to_string),
            ..JobReport::default()
        }
    }

    #[test]
    fn without_private_data_everyone_sees_every_job() {
        let bob = Caller::user("bob");
        assert!(bob.sees(Some("alice")) && bob.sees(None) && bob.sees(Some("bob")));
    }

    #[test]
    fn with_private_data_a_user_sees_their_own_jobs_and_an_admin_all() {
        let bob = Caller::user("bob").private(true);
        assert!(bob.sees(Some("bob")));
        assert!(!bob.sees(Some("alice")));
        assert!(!bob.sees(None), "a job with no owner is no plain user's");
        let root = Caller::admin("root").private(true);
        assert!(root.sees(Some("alice")) && root.sees(None));
        let mut reports = vec![report("a", Some("alice")), report("b", Some("bob")), report("s", None)];
        bob.keep_visible(&mut reports);
        assert_eq!(reports.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["b"]);
    }

    /// Issue 38: a preemption's reasons read back and name only jobs the caller sees.
    #[test]
    fn a_plain_user_under_private_data_reads_no_other_users_job_in_a_preemption() {
        use hyperplan_shared::report::Nomination;
        let mine = |n: &str| n.starts_with("b-");
        let bob = Caller::user("bob").private(true);
        let said = crate::preempt_reason::preempting(&["a-1".into(), "b-2".into()], None);
        let mut preemptor = JobReport {
            reason: Some(said),
            preempting: Some(Nomination {
                victims: vec!["a-1".into(), "b-2".into()],
                ..Nomination::default()
            }),
            ..report("b-big", Some("bob"))
        };
        bob.hide_other_jobs(&mut preemptor, mine);
        assert_eq!(
            preemptor.reason.as_deref(),
            Some("preempting 2 jobs in the cluster (another user's job, b-2); it starts when they have ended")
        );
        assert_eq!(
            preemptor.preempting.map(|n| n.victims),
            Some(vec![ANOTHER_USERS_JOB.into(), "b-2".into()])
        );
        let mut victim = JobReport {
            reason: Some("requeued: preempted by job a-big: its priority is below".into()),
            preempted_by: Some("a-big".into()),
            ..report("b-1", Some("bob"))
        };
        let admin_reads = victim.clone();
        Caller::admin("root").private(true).hide_other_jobs(&mut victim, mine);
        bob.private(false).hide_other_jobs(&mut victim, mine);
        assert_eq!(
            victim, admin_reads,
            "an admin, and everyone without privateData, reads every name"
        );
        bob.hide_other_jobs(&mut victim, mine);
        assert_eq!(
            victim.reason.as_deref(),
            Some("requeued: preempted by another user's job: its priority is below")
        );
        assert_eq!(victim.preempted_by.as_deref(), Some(ANOTHER_USERS_JOB));
        // Another kind of reason, or a preemptor of one's own, stays as it is.
        assert_eq!(
            crate::preempt_reason::rename_victims("no tier-1 HyperNode has room (yet)", str::to_string),
            None
        );
        let own = crate::preempt_reason::preempting(&["b-2".into()], Some("leaf-1"));
        assert_eq!(crate::preempt_reason::rename_victims(&own, str::to_string), Some(own));
        assert!(
            bob.sees_user("bob") && !bob.sees_user("alice") && Caller::admin("root").private(true).sees_user("bob")
        );
    }
}
