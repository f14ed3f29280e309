//! A job's account at submit. With `[[account]]` sections every job is charged to one:
//! the account it names, else its submitter's default (`defaultFor`); the submitter must
//! be allowed to charge it (listed in it or in an account above it; admins may charge
//! any), and its queue must take it (a queue's `accounts`). The account found is written
//! into the spec, so the job's record carries it. Without `[[account]]` an account is
//! free text: checked as a name, nothing else.

use hyperplan_shared::JobSpec;
use hyperplan_shared::names::{NameError, NameKind, check_name};

use crate::caller::Caller;
use crate::config::{Accounts, QueueConfig};

/// Why a job may not be charged to its account.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AccountRefusal {
    /// The account is not a name (it came over the wire unchecked).
    #[error("job {job}: account: {error}")]
    Name {
        /// The job.
        job: String,
        /// What is wrong with the name.
        error: NameError,
    },
    /// The job names no account and its submitter has no default.
    #[error(
        "job {job}: user {user} has no default account: name one in the job file (`account: NAME`) or with `hyperplan submit --account NAME`, or have an admin add defaultFor = [\"{user}\"] to an [[account]] in planner.toml; accounts: {known}"
    )]
    NoDefault {
        /// The job.
        job: String,
        /// The submitter.
        user: String,
        /// The accounts there are.
        known: String,
    },
    /// No account of that name.
    #[error("job {job}: account {account:?} does not exist; accounts: {known}")]
    Unknown {
        /// The job.
        job: String,
        /// The account it names.
        account: String,
        /// The accounts there are.
        known: String,
    },
    /// The submitter may not charge the account.
    #[error("job {job}: user {user} may not charge account {account:?}; {who}")]
    NotAllowed {
        /// The job.
        job: String,
        /// The submitter.
        user: String,
        /// The account.
        account: String,
        /// Who may, in words.
        who: String,
    },
    /// The job's queue takes jobs of other accounts.
    #[error("job {job}: queue {queue:?} takes jobs of account{s} {takes} (and the accounts below), not of {account:?}", s = if takes.contains(',') { "s" } else { "" })]
    Queue {
        /// The job.
        job: String,
        /// Its queue.
        queue: String,
        /// Its account.
        account: String,
        /// The accounts the queue takes, comma-separated.
        takes: String,
    },
}

/// Resolves and checks `spec`'s account for `caller`, who submits it to `queue`; writes
/// the account it is charged to into the spec.
pub fn resolve(
    accounts: &Accounts,
    queue: &QueueConfig,
    spec: &mut JobSpec,
    caller: Caller<'_>,
) -> Result<(), AccountRefusal> {
    if let Some(a) = &spec.account {
        check_name(NameKind::Account, a).map_err(|error| AccountRefusal::Name {
            job: spec.name.clone(),
            error,
        })?;
    }
    if accounts.is_empty() {
        return Ok(());
    }
    let i = match &spec.account {
        Some(name) => accounts.find(name).ok_or_else(|| AccountRefusal::Unknown {
            job: spec.name.clone(),
            account: name.clone(),
            known: accounts.names(),
        })?,
        None => accounts
            .default_of(caller.user)
            .ok_or_else(|| AccountRefusal::NoDefault {
                job: spec.name.clone(),
                user: caller.user.to_string(),
                known: accounts.names(),
            })?,
    };
    let account = accounts.get(i);
    if !caller.admin && !accounts.may_charge(i, caller.user) {
        let mut users: Vec<&str> = accounts
            .chain(i)
            .flat_map(|a| accounts.get(a).users.iter().map(String::as_str))
            .collect();
        users.sort_unstable();
        users.dedup();
        let who = if users.is_empty() {
            "no user is listed in it or in an account above it (only admins may charge it)".to_string()
        } else {
            format!(
                "it takes users {} (listed in it or in an account above it)",
                users.join(", ")
            )
        };
        return Err(AccountRefusal::NotAllowed {
            job: spec.name.clone(),
            user: caller.user.to_string(),
            account: account.name.clone(),
            who,
        });
    }
    if !queue.accounts.is_empty() && !accounts.within(i, &queue.accounts) {
        return Err(AccountRefusal::Queue {
            job: spec.name.clone(),
            queue: queue.name.clone(),
            account: account.name.clone(),
            takes: queue.accounts.join(", "),
        });
    }
    spec.account = Some(account.name.clone());
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::config::PlannerConfig;
    use crate::testing::JobBuilder;

    fn config() -> PlannerConfig {
        PlannerConfig::parse(
            "[[account]]\nname = \"science\"\nusers = [\"carol\"]\n[[account]]\nname = \"physics\"\nparent = \"science\"\nusers = [\"alice\"]\ndefaultFor = [\"alice\"]\n[[account]]\nname = \"chem\"\n[[queue]]\nname = \"gpu\"\naccounts = [\"physics\"]\n",
            "p.toml",
        )
        .unwrap()
    }

    #[test]
    fn defaults_permissions_and_queues() {
        let c = config();
        let (default, gpu) = (&c.queues[0], &c.queues[1]);
        let mut j = JobBuilder::gang("a", 1, "cpu=1").build();
        resolve(&c.accounts, default, &mut j, Caller::user("alice")).unwrap();
        assert_eq!(j.account.as_deref(), Some("physics"), "the default is written in");
        j.account = None;
        assert_eq!(
            resolve(&c.accounts, default, &mut j, Caller::user("bob"))
                .unwrap_err()
                .to_string(),
            "job a: user bob has no default account: name one in the job file (`account: NAME`) or with `hyperplan submit --account NAME`, or have an admin add defaultFor = [\"bob\"] to an [[account]] in planner.toml; accounts: chem, physics, science"
        );
        j.account = Some("phys".into());
        assert_eq!(
            resolve(&c.accounts, default, &mut j, Caller::user("alice"))
                .unwrap_err()
                .to_string(),
            "job a: account \"phys\" does not exist; accounts: chem, physics, science"
        );
        j.account = Some("science".into());
        assert_eq!(
            resolve(&c.accounts, default, &mut j, Caller::user("alice"))
                .unwrap_err()
                .to_string(),
            "job a: user alice may not charge account \"science\"; it takes users carol (listed in it or in an account above it)"
        );
        j.account = Some("chem".into());
        assert_eq!(
            resolve(&c.accounts, default, &mut j, Caller::user("alice"))
                .unwrap_err()
                .to_string(),
            "job a: user alice may not charge account \"chem\"; no user is listed in it or in an account above it (only admins may charge it)"
        );
        // carol may charge physics (below science); admins anything.
        j.account = Some("physics".into());
        resolve(&c.accounts, gpu, &mut j, Caller::user("carol")).unwrap();
        j.account = Some("chem".into());
        resolve(&c.accounts, default, &mut j, Caller::admin("root")).unwrap();
        assert_eq!(
            resolve(&c.accounts, gpu, &mut j, Caller::admin("root"))
                .unwrap_err()
                .to_string(),
            "job a: queue \"gpu\" takes jobs of account physics (and the accounts below), not of \"chem\""
        );
    }

    #[test]
    fn without_accounts_any_name_goes() {
        let c = PlannerConfig::default();
        let mut j = JobBuilder::gang("a", 1, "cpu=1").build();
        resolve(&c.accounts, &c.queues[0], &mut j, Caller::user("bob")).unwrap();
        assert_eq!(j.account, None);
        j.account = Some("anything".into());
        resolve(&c.accounts, &c.queues[0], &mut j, Caller::user("bob")).unwrap();
        assert_eq!(j.account.as_deref(), Some("anything"));
        j.account = Some("../x".into());
        assert!(matches!(
            resolve(&c.accounts, &c.queues[0], &mut j, Caller::user("bob")),
            Err(AccountRefusal::Name { .. })
        ));
    }
}
