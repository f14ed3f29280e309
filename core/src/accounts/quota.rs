//! The quotas an account keeps while the allocator walks: `maxRunningJobs`, `maxCpus` and
//! `maxGpus`, each over the account and everything below it, checked for the job's
//! account and every account above it. A job that would pass one waits, saying which,
//! and holds no reservation (the room is not what it lacks), as with a queue's limits.

use super::usage::{AccountCharge, AccountUse};
use crate::config::Accounts;
use crate::model::reason::{AccountRef, OverLimit, Reason};

/// Why a job charged to `ask.account` and asking `ask.cpu`/`ask.gpu` more may not start
/// now; `None` when it may. `running`: the job already has tasks running (it counts
/// against `maxRunningJobs` already).
pub fn blocked(accounts: &Accounts, used: &AccountUse, ask: &AccountCharge, running: bool) -> Option<Reason> {
    let own = ask.account?;
    for a in accounts.chain(own) {
        let account = accounts.get(a);
        if !account.has_quota() {
            continue;
        }
        let who = AccountRef {
            name: account.name.clone(),
            above: (a != own).then(|| accounts.get(own).name.clone()),
        };
        let at = |v: &Vec<u64>| v.get(a).copied().unwrap_or(0);
        if !running
            && let Some(max) = account.max_running_jobs
            && used.running_jobs.get(a).copied().unwrap_or(0) >= max
        {
            return Some(Reason::AccountJobs { account: who, max });
        }
        if let Some(max) = account.max_cpus {
            let (max, in_use) = (max.saturating_mul(1000), at(&used.cpu));
            if in_use.saturating_add(ask.cpu) > max {
                return Some(Reason::AccountCpus {
                    account: who,
                    over: OverLimit {
                        resource: hyperplan_shared::CPU.to_string(),
                        would: in_use.saturating_add(ask.cpu),
                        limit: max,
                        in_use,
                        asks: ask.cpu,
                    },
                });
            }
        }
        if let Some(max) = account.max_gpus {
            let in_use = at(&used.gpu);
            if in_use.saturating_add(ask.gpu) > max {
                return Some(Reason::AccountGpus {
                    account: who,
                    over: OverLimit {
                        resource: "gpu".to_string(),
                        would: in_use.saturating_add(ask.gpu),
                        limit: max,
                        in_use,
                        asks: ask.gpu,
                    },
                });
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use hyperplan_shared::{CPU, Resources};

    use super::*;
    use crate::config::PlannerConfig;

    #[test]
    fn quotas_of_the_account_and_those_above_it() {
        let c = PlannerConfig::parse(
            "[[account]]\nname = \"physics\"\nparent = \"science\"\nmaxRunningJobs = 1\n[[account]]\nname = \"science\"\nmaxCpus = 4\nmaxGpus = 2\n",
            "p.toml",
        )
        .unwrap();
        let a = &c.accounts;
        let mut u = AccountUse::default();
        u.reset(a);
        let ask = AccountCharge::of(
            a.find("physics"),
            &Resources::new().with(CPU, 3000).with("nvidia.com/gpu", 2),
        );
        assert_eq!(blocked(a, &u, &ask, false), None);
        u.charge(&ask, true);
        assert_eq!(
            blocked(a, &u, &ask, false).map(|r| r.to_string()).as_deref(),
            Some("account physics runs its maxRunningJobs (1) jobs already")
        );
        assert_eq!(
            blocked(a, &u, &ask, true).map(|r| r.to_string()).as_deref(),
            Some("account science (above physics) would use 6 CPUs of its maxCpus 4 (in use 3, the job asks 3)")
        );
        let gpu_only = AccountCharge::of(a.find("science"), &Resources::new().with("nvidia.com/gpu", 1));
        assert_eq!(
            blocked(a, &u, &gpu_only, false).map(|r| r.to_string()).as_deref(),
            Some("account science would use 3 GPUs of its maxGpus 2 (in use 2, the job asks 1)")
        );
        // No account: no quota.
        assert_eq!(blocked(a, &u, &AccountCharge::default(), false), None);
    }
}
