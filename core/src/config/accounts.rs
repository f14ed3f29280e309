//! `[[account]]`: what jobs are charged to, as a tree (Slurm's accounts), who may charge
//! each, each user's default, and the most an account and everything below it may run at
//! once (Slurm's `GrpJobs` and `GrpTRES`).
//!
//! ```toml
//! [[account]]
//! name = "science"
//! users = ["carol"]            # may charge science and every account below it
//! maxCpus = 4096               # running CPUs (cores) of science and its descendants
//!
//! [[account]]
//! name = "physics"
//! parent = "science"           # optional: another account; the accounts form a tree
//! users = ["alice", "bob"]     # who may charge it (and the accounts below it)
//! defaultFor = ["alice"]       # a job of alice's that names no account is charged here
//! maxRunningJobs = 100         # jobs running at once, physics and its descendants
//! maxGpus = 64                 # running GPUs, physics and its descendants
//! shares = 2                   # its weight among its siblings in Fair Tree (default 1)
//! ```
//!
//! Without any `[[account]]` a job's `account` is free text (a name) and nothing is
//! refused for it. With them, every job is charged to one: the one it names, else its
//! submitter's default; a user may charge an account that lists them in `users`, or any
//! account below one that does (admins: any account). A `[[queue]]` with `accounts =
//! [...]` takes only jobs charged to those accounts or accounts below them.

use std::collections::BTreeMap;

use hyperplan_shared::names::{NameKind, check_name};
use serde::Deserialize;
use toml::Spanned;

use super::ConfigError;

/// Most accounts a planner keeps.
pub const MAX_ACCOUNTS: usize = 4096;

/// One account, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountConfig {
    /// Its name (`account` in a job).
    pub name: String,
    /// The account above it; `None`: a root.
    pub parent: Option<String>,
    /// Users who may charge it and the accounts below it, sorted.
    pub users: Vec<String>,
    /// Users whose default account it is, sorted.
    pub default_for: Vec<String>,
    /// The most jobs of it and its descendants running at once; `None`: no limit.
    pub max_running_jobs: Option<u32>,
    /// The most CPUs (cores) its and its descendants' running tasks hold; `None`: no limit.
    pub max_cpus: Option<u64>,
    /// The most GPUs its and its descendants' running tasks hold; `None`: no limit.
    pub max_gpus: Option<u64>,
    /// Its shares among its sibling accounts and users for Slurm's Fair Tree (`[fairshare]
    /// tree = "accounts"`); 1 unless set (a user has 1).
    pub shares: u32,
}

impl AccountConfig {
    /// Whether it bounds what runs (any of its quotas is set).
    pub fn has_quota(&self) -> bool {
        self.max_running_jobs.is_some() || self.max_cpus.is_some() || self.max_gpus.is_some()
    }
}

/// The `[[account]]` tree, checked: accounts by name, each with its parent's position.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Accounts {
    /// The accounts, in name order; an account's position here is its index.
    pub list: Vec<AccountConfig>,
    /// Per account (by position in `list`): its parent's position; `None`: a root.
    pub parent: Vec<Option<usize>>,
}

impl Accounts {
    /// Whether no `[[account]]` is configured (then accounts are free text).
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The position of the account called `name`.
    pub fn find(&self, name: &str) -> Option<usize> {
        self.list.binary_search_by(|a| a.name.as_str().cmp(name)).ok()
    }

    /// The account at `i`.
    pub fn get(&self, i: usize) -> &AccountConfig {
        &self.list[i]
    }

    /// Account `i`, then its parent, then its parent's parent, up to its root.
    pub fn chain(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        // The tree was checked for cycles; the bound keeps a hand-made one finite anyway.
        std::iter::successors(Some(i), move |&a| self.parent.get(a).copied().flatten()).take(self.list.len())
    }

    /// Whether `user` may charge account `i`: it, or an account above it, lists them.
    pub fn may_charge(&self, i: usize, user: &str) -> bool {
        self.chain(i)
            .any(|a| self.list[a].users.binary_search_by(|u| u.as_str().cmp(user)).is_ok())
    }

    /// The position of `user`'s default account (`defaultFor`), if they have one.
    pub fn default_of(&self, user: &str) -> Option<usize> {
        self.list
            .iter()
            .position(|a| a.default_for.binary_search_by(|u| u.as_str().cmp(user)).is_ok())
    }

    /// Whether account `i` is one of `names` or below one of them.
    pub fn within(&self, i: usize, names: &[String]) -> bool {
        self.chain(i).any(|a| names.iter().any(|n| *n == self.list[a].name))
    }

    /// The accounts' names, comma-separated, for messages.
    pub fn names(&self) -> String {
        self.list.iter().map(|a| a.name.as_str()).collect::<Vec<_>>().join(", ")
    }
}

/// `[[account]]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AccountSection {
    name: Spanned<String>,
    parent: Option<Spanned<String>>,
    #[serde(default)]
    users: Vec<Spanned<String>>,
    #[serde(default)]
    default_for: Vec<Spanned<String>>,
    max_running_jobs: Option<Spanned<i64>>,
    max_cpus: Option<Spanned<i64>>,
    max_gpus: Option<Spanned<i64>>,
    shares: Option<Spanned<i64>>,
}

/// Checks the `[[account]]` sections: unique names, parents that exist and make a tree
/// (no cycle), users and defaults (each user at most one default, and allowed to charge
/// it), quotas of whole numbers. `at` turns an offset and a message into an error naming
/// the line.
pub fn accounts_from_sections(
    sections: &[AccountSection],
    at: &dyn Fn(usize, String) -> ConfigError,
) -> Result<Accounts, ConfigError> {
    if sections.len() > MAX_ACCOUNTS {
        return Err(at(
            sections[MAX_ACCOUNTS].name.span().start,
            format!(
                "account: expected at most {MAX_ACCOUNTS} [[account]] sections, got {}",
                sections.len()
            ),
        ));
    }
    // Names first: a parent may be written after its children.
    let mut by_name: BTreeMap<&str, &AccountSection> = BTreeMap::new();
    for s in sections {
        let name = s.name.get_ref();
        check_name(NameKind::Account, name).map_err(|e| at(s.name.span().start, format!("account.name: {e}")))?;
        if by_name.insert(name, s).is_some() {
            return Err(at(
                s.name.span().start,
                format!("account.name: {name:?} is defined twice; account names must be unique"),
            ));
        }
    }
    let mut list: Vec<AccountConfig> = Vec::with_capacity(sections.len());
    for s in by_name.values() {
        let name = s.name.get_ref();
        let key = |k: &str| format!("account {name:?}: {k}");
        if let Some(p) = &s.parent {
            check_name(NameKind::Account, p.get_ref())
                .map_err(|e| at(p.span().start, format!("{}: {e}", key("parent"))))?;
            if !by_name.contains_key(p.get_ref().as_str()) {
                return Err(at(
                    p.span().start,
                    format!(
                        "{}: no account {:?}; a parent must be another [[account]] (accounts: {})",
                        key("parent"),
                        p.get_ref(),
                        by_name.keys().copied().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
        }
        let names = |list: &[Spanned<String>], k: &str| -> Result<Vec<String>, ConfigError> {
            let mut out: Vec<String> = Vec::new();
            for u in list {
                check_name(NameKind::User, u.get_ref()).map_err(|e| at(u.span().start, format!("{}: {e}", key(k))))?;
                out.push(u.get_ref().clone());
            }
            out.sort();
            out.dedup();
            Ok(out)
        };
        let whole = |v: &Option<Spanned<i64>>, k: &str, min: i64| -> Result<Option<u64>, ConfigError> {
            match v {
                None => Ok(None),
                Some(v) if *v.get_ref() >= min && *v.get_ref() <= i64::from(u32::MAX) => Ok(Some(*v.get_ref() as u64)),
                Some(v) => Err(at(
                    v.span().start,
                    format!(
                        "{}: expected a whole number from {min} to {}, got {}",
                        key(k),
                        u32::MAX,
                        v.get_ref()
                    ),
                )),
            }
        };
        list.push(AccountConfig {
            name: name.clone(),
            parent: s.parent.as_ref().map(|p| p.get_ref().clone()),
            users: names(&s.users, "users")?,
            default_for: names(&s.default_for, "defaultFor")?,
            max_running_jobs: whole(&s.max_running_jobs, "maxRunningJobs", 1)?.map(|n| n as u32),
            max_cpus: whole(&s.max_cpus, "maxCpus", 1)?,
            max_gpus: whole(&s.max_gpus, "maxGpus", 0)?,
            shares: whole(&s.shares, "shares", 1)?.map_or(1, |n| n as u32),
        });
    }
    let position = |name: &str| list.binary_search_by(|a| a.name.as_str().cmp(name)).ok();
    let parent: Vec<Option<usize>> = list.iter().map(|a| a.parent.as_deref().and_then(position)).collect();
    let accounts = Accounts { list, parent };
    // A cycle: reported at the parent key of the account written first in the file that
    // is on one.
    for s in sections {
        let Some(i) = accounts.find(s.name.get_ref()) else {
            continue;
        };
        let mut path = vec![i];
        let mut a = i;
        while let Some(p) = accounts.parent[a] {
            if p == i {
                path.push(p);
                let cycle: Vec<&str> = path.iter().map(|&k| accounts.list[k].name.as_str()).collect();
                let offset = s.parent.as_ref().map_or(s.name.span().start, |p| p.span().start);
                return Err(at(
                    offset,
                    format!(
                        "account {:?}: parent: the accounts make a cycle ({}); accounts must form a tree",
                        s.name.get_ref(),
                        cycle.join(" → ")
                    ),
                ));
            }
            if path.contains(&p) || path.len() > accounts.list.len() {
                break; // a cycle above it, reported at one of its own accounts
            }
            path.push(p);
            a = p;
        }
    }
    // Defaults: each user at most one, and one they may charge.
    let mut defaults: BTreeMap<&str, &str> = BTreeMap::new();
    for s in sections {
        let name = s.name.get_ref();
        let Some(i) = accounts.find(name) else { continue };
        for u in &s.default_for {
            let user = u.get_ref().as_str();
            if let Some(first) = defaults.insert(user, name)
                && first != name
            {
                return Err(at(
                    u.span().start,
                    format!(
                        "account {name:?}: defaultFor: user {user} already has the default account {first:?}; a user has at most one"
                    ),
                ));
            }
            if !accounts.may_charge(i, user) {
                return Err(at(
                    u.span().start,
                    format!(
                        "account {name:?}: defaultFor: user {user} may not charge it; add {user:?} to its users (or to an account above it)"
                    ),
                ));
            }
        }
    }
    Ok(accounts)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use crate::config::PlannerConfig;

    fn error(text: &str) -> String {
        PlannerConfig::parse(text, "planner.toml").unwrap_err().to_string()
    }

    #[test]
    fn a_tree_with_users_defaults_and_quotas() {
        let c = PlannerConfig::parse(
            r#"
[[account]]
name = "physics"
parent = "science"
users = ["bob", "alice"]
defaultFor = ["alice"]
maxRunningJobs = 10
maxGpus = 0

[[account]]
name = "science"
users = ["carol"]
defaultFor = ["carol"]
maxCpus = 64

[[account]]
name = "hep"
parent = "physics"
"#,
            "planner.toml",
        )
        .unwrap();
        let a = &c.accounts;
        let names: Vec<&str> = a.list.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, ["hep", "physics", "science"]);
        assert_eq!(a.parent, [Some(1), Some(2), None]);
        let physics = a.get(a.find("physics").unwrap());
        assert_eq!(physics.users, ["alice", "bob"]);
        assert_eq!(
            (physics.max_running_jobs, physics.max_cpus, physics.max_gpus),
            (Some(10), None, Some(0))
        );
        assert_eq!(a.get(2).max_cpus, Some(64));
        // Who may charge what: an account that lists them, or one below it.
        assert!(a.may_charge(0, "alice") && a.may_charge(0, "carol"));
        assert!(!a.may_charge(2, "alice") && a.may_charge(2, "carol"));
        assert!(!a.may_charge(0, "dave"));
        assert_eq!(a.default_of("alice"), Some(1));
        assert_eq!(a.default_of("carol"), Some(2));
        assert_eq!(a.default_of("bob"), None);
        assert_eq!(a.chain(0).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(a.within(0, &["physics".into()]) && !a.within(2, &["physics".into()]));
    }

    #[test]
    fn no_accounts_is_empty() {
        assert!(PlannerConfig::parse("", "planner.toml").unwrap().accounts.is_empty());
    }

    #[test]
    fn unknown_parent() {
        insta::assert_snapshot!(error("[[account]]\nname = \"physics\"\nparent = \"sciense\"\n\n[[account]]\nname = \"science\"\n"), @r#"planner.toml:3:10: account "physics": parent: no account "sciense"; a parent must be another [[account]] (accounts: physics, science)"#);
    }

    #[test]
    fn cycle() {
        insta::assert_snapshot!(error("[[account]]\nname = \"a\"\nparent = \"b\"\n\n[[account]]\nname = \"b\"\nparent = \"c\"\n\n[[account]]\nname = \"c\"\nparent = \"a\"\n"), @r#"planner.toml:3:10: account "a": parent: the accounts make a cycle (a → b → c → a); accounts must form a tree"#);
        insta::assert_snapshot!(error("[[account]]\nname = \"a\"\nparent = \"a\"\n"), @r#"planner.toml:3:10: account "a": parent: the accounts make a cycle (a → a); accounts must form a tree"#);
    }

    #[test]
    fn two_defaults_for_one_user() {
        insta::assert_snapshot!(error("[[account]]\nname = \"a\"\nusers = [\"alice\"]\ndefaultFor = [\"alice\"]\n\n[[account]]\nname = \"b\"\nusers = [\"alice\"]\ndefaultFor = [\"alice\"]\n"), @r#"planner.toml:9:15: account "b": defaultFor: user alice already has the default account "a"; a user has at most one"#);
    }

    #[test]
    fn a_default_the_user_may_not_charge() {
        insta::assert_snapshot!(error("[[account]]\nname = \"a\"\nusers = [\"bob\"]\ndefaultFor = [\"alice\"]\n"), @r#"planner.toml:4:15: account "a": defaultFor: user alice may not charge it; add "alice" to its users (or to an account above it)"#);
    }

    #[test]
    fn bad_names_duplicates_and_quotas() {
        insta::assert_snapshot!(error("[[account]]\nname = \"a b\"\n"), @r#"planner.toml:2:8: account.name: expected an account name of 1-63 letters, digits, `.`, `_` or `-` starting with a letter or digit, got "a b": a space is not allowed"#);
        insta::assert_snapshot!(error("[[account]]\nname = \"a\"\n[[account]]\nname = \"a\"\n"), @r#"planner.toml:4:8: account.name: "a" is defined twice; account names must be unique"#);
        insta::assert_snapshot!(error("[[account]]\nname = \"a\"\nmaxRunningJobs = 0\n"), @r#"planner.toml:3:18: account "a": maxRunningJobs: expected a whole number from 1 to 4294967295, got 0"#);
        insta::assert_snapshot!(error("[[account]]\nname = \"a\"\nmaxCpu = 4\n"), @"planner.toml:3:1: unknown field `maxCpu`, expected one of `name`, `parent`, `users`, `defaultFor`, `maxRunningJobs`, `maxCpus`, `maxGpus`, `shares`");
    }

    #[test]
    fn shares_are_one_unless_set_and_a_positive_whole_number() {
        let c = PlannerConfig::parse(
            "[[account]]\nname = \"a\"\nshares = 3\n[[account]]\nname = \"b\"\n",
            "planner.toml",
        )
        .unwrap();
        assert_eq!((c.accounts.get(0).shares, c.accounts.get(1).shares), (3, 1));
        insta::assert_snapshot!(error("[[account]]\nname = \"a\"\nshares = 0\n"), @r#"planner.toml:3:10: account "a": shares: expected a whole number from 1 to 4294967295, got 0"#);
        insta::assert_snapshot!(error("[[account]]\nname = \"a\"\nshares = -2\n"), @r#"planner.toml:3:10: account "a": shares: expected a whole number from 1 to 4294967295, got -2"#);
        insta::assert_snapshot!(error("[[account]]\nname = \"a\"\nshares = 1.5\n"), @"planner.toml:3:10: invalid type: floating point `1.5`, expected i64");
    }

    #[test]
    fn a_queue_for_accounts() {
        let c = PlannerConfig::parse(
            "[[account]]\nname = \"physics\"\n[[queue]]\nname = \"gpu\"\naccounts = [\"physics\"]\n",
            "planner.toml",
        )
        .unwrap();
        assert_eq!(c.queues[1].accounts, ["physics"]);
        insta::assert_snapshot!(error("[[account]]\nname = \"physics\"\n[[queue]]\nname = \"gpu\"\naccounts = [\"chem\"]\n"), @r#"planner.toml:5:13: queue "gpu": accounts: no [[account]] "chem" (accounts: physics)"#);
    }
}
