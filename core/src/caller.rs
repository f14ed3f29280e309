//! Who asks the planner something, and what of other people's jobs they may see. With
//! `[server] privateData` (like Slurm's `PrivateData=jobs`) a plain user sees only their
//! own jobs: another user's job answers exactly as a job that does not exist, so its name,
//! owner, directories and pids do not leak. Admins see every job. Without it (the
//! default) everyone sees every job, as before.

use hyperplan_shared::report::JobReport;

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
}
