//! What each account and everything below it runs now: jobs with a task running, the
//! CPUs and GPUs their running tasks hold. A task's charge goes to its job's account and
//! every account above it, so a parent's total always counts its children (Slurm's
//! `GrpJobs`/`GrpTRES`). Kept inside the queues' use ([`crate::queues::QueueUse`]), which
//! charges and uncharges it with each task.

use hyperplan_shared::{CPU, Resources};

use crate::config::Accounts;

/// A running task's charge to its account: which account, and what it holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccountCharge {
    /// The account's position in the table's [`Accounts`]; `None`: no configured account
    /// (nothing counted).
    pub account: Option<usize>,
    /// Millicores.
    pub cpu: u64,
    /// GPUs (see [`super::gpus`]).
    pub gpu: u64,
}

impl AccountCharge {
    /// The charge of a task asking `request`, of a job charged to `account`.
    pub fn of(account: Option<usize>, request: &Resources) -> Self {
        Self {
            account,
            cpu: request.get(CPU),
            gpu: super::gpus(request),
        }
    }
}

/// Per account (by position in [`Accounts`]), the running totals of it and its descendants.
#[derive(Clone, Debug, Default)]
pub struct AccountUse {
    /// Each account's parent, as in the table these totals belong to.
    parent: Vec<Option<usize>>,
    /// Jobs with a task running.
    pub running_jobs: Vec<u32>,
    /// Millicores held by running tasks.
    pub cpu: Vec<u64>,
    /// GPUs held by running tasks.
    pub gpu: Vec<u64>,
}

impl AccountUse {
    /// Starts over for `accounts`: nothing charged.
    pub fn reset(&mut self, accounts: &Accounts) {
        let n = accounts.list.len();
        self.parent.clone_from(&accounts.parent);
        self.running_jobs = vec![0; n];
        self.cpu = vec![0; n];
        self.gpu = vec![0; n];
    }

    /// Account `a`, then every account above it.
    fn chain(&self, a: usize) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors(Some(a), |&a| self.parent.get(a).copied().flatten())
            .take(self.parent.len())
            .filter(|&a| a < self.running_jobs.len())
    }

    /// Counts `c`; `first`: it is its job's first running task (the job starts running).
    pub fn charge(&mut self, c: &AccountCharge, first: bool) {
        let Some(a) = c.account else { return };
        let chain: Vec<usize> = self.chain(a).collect();
        for a in chain {
            self.cpu[a] = self.cpu[a].saturating_add(c.cpu);
            self.gpu[a] = self.gpu[a].saturating_add(c.gpu);
            if first {
                self.running_jobs[a] = self.running_jobs[a].saturating_add(1);
            }
        }
    }

    /// Takes `c` back; `last`: it was its job's last running task.
    pub fn uncharge(&mut self, c: &AccountCharge, last: bool) {
        let Some(a) = c.account else { return };
        let chain: Vec<usize> = self.chain(a).collect();
        for a in chain {
            self.cpu[a] = self.cpu[a].saturating_sub(c.cpu);
            self.gpu[a] = self.gpu[a].saturating_sub(c.gpu);
            if last {
                self.running_jobs[a] = self.running_jobs[a].saturating_sub(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::config::PlannerConfig;

    #[test]
    fn a_charge_counts_up_the_tree_and_goes_back() {
        let c = PlannerConfig::parse(
            "[[account]]\nname = \"physics\"\nparent = \"science\"\n[[account]]\nname = \"science\"\n[[account]]\nname = \"chem\"\n",
            "p.toml",
        )
        .unwrap();
        let mut u = AccountUse::default();
        u.reset(&c.accounts);
        let physics = c.accounts.find("physics");
        let r = Resources::new().with(CPU, 2000).with("nvidia.com/gpu", 1);
        let charge = AccountCharge::of(physics, &r);
        u.charge(&charge, true);
        u.charge(&charge, false);
        // chem, physics, science (by name)
        assert_eq!(u.running_jobs, [0, 1, 1]);
        assert_eq!(u.cpu, [0, 4000, 4000]);
        assert_eq!(u.gpu, [0, 2, 2]);
        u.uncharge(&charge, false);
        u.uncharge(&charge, true);
        assert_eq!(
            (&u.running_jobs, &u.cpu, &u.gpu),
            (&vec![0; 3], &vec![0; 3], &vec![0; 3])
        );
        // No account: nothing counted.
        u.reset(&c.accounts);
        u.charge(&AccountCharge::of(None, &r), true);
        assert_eq!(u.cpu, [0, 0, 0]);
    }
}
