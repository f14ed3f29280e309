//! Slurm's Fair Tree (<https://slurm.schedmd.com/fair_tree.html>) over the `[[account]]`
//! tree, for `[fairshare] tree = "accounts"`. Every (account, user) association with usage
//! or a waiting job is ranked: among siblings (the accounts of one parent, or the roots;
//! an account's users and child accounts together) each node's Level Fairshare is
//!
//! ```text
//! LF = S / U    S = its shares / its siblings' (itself included) shares
//!               U = its usage  / its siblings' (itself included) usage   (U = 0: LF = ∞)
//! ```
//!
//! (an account's `shares`, 1 unless set; a user's 1; an account's usage its users' and its
//! child accounts'). The tree is walked depth first from the roots, siblings in LF order
//! (higher first, then by name, then users before accounts of the same name), and each
//! association met takes the next rank: of `N` associations the first has factor 1, the
//! `k`-th `(N − k + 1) / N`, the last `1/N`. A heavy user so lowers only their own
//! account's standing among its siblings, not that of the users of other accounts.
//!
//! [`FairTree`] keeps the factors of the last ranking: it is worked out again only when
//! the tree (the queue table's generation), the usage (see [`super::Usage::epoch`]) or
//! the associations changed, or the order is recalculated (`recalcInterval`: usage has
//! decayed), in O(accounts + associations · log) time.

use crate::model::since::Since;
use std::collections::BTreeMap;

use bevy_ecs::prelude::*;

use crate::config::Accounts;
use crate::model::ids::UserIdx;
use crate::queues::Users;

/// The Fair Tree factors of the last ranking, by association.
#[derive(Debug, Default, Resource)]
pub struct FairTree {
    /// By (account position in the table's accounts, user): 1 for the first ranked down
    /// to 1/N for the last.
    pub factors: BTreeMap<(usize, UserIdx), f64>,
    /// The queue table generation (`order`) and [`super::Usage::epoch`] (`usage`) it
    /// was worked out for (`None`: never).
    pub since: Option<Since>,
    /// How many times it was worked out (for tests and benches).
    pub recomputes: u64,
}

impl FairTree {
    /// Whether the ranking must be worked out again: another tree or usage, or an
    /// association of `waiting` it has not ranked.
    pub fn stale(&self, generation: u64, epoch: u64, mut waiting: impl Iterator<Item = (usize, UserIdx)>) -> bool {
        self.since != Some(Self::key(generation, epoch)) || waiting.any(|k| !self.factors.contains_key(&k))
    }

    fn key(generation: u64, epoch: u64) -> Since {
        Since {
            order: generation,
            usage: epoch,
            ..Since::default()
        }
    }

    /// Ranks again, for the tree of `generation` and usage of `epoch` (see [`rank`]).
    pub fn update(
        &mut self,
        generation: u64,
        epoch: u64,
        accounts: &Accounts,
        users: &Users,
        usage: &BTreeMap<(usize, UserIdx), f64>,
    ) {
        self.factors = rank(accounts, users, usage);
        self.since = Some(Self::key(generation, epoch));
        self.recomputes += 1;
    }

    /// The factor of `user` charging account `account`; 0 for an association not ranked
    /// (a job whose account is no longer configured).
    pub fn factor(&self, account: Option<usize>, user: UserIdx) -> f64 {
        account
            .and_then(|a| self.factors.get(&(a, user)))
            .copied()
            .unwrap_or(0.0)
    }
}

/// A node among its siblings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    /// A user's association with the account being walked.
    User(usize, UserIdx),
    /// An account.
    Account(usize),
}

/// The Fair Tree factor of every association in `usage` (usage per (account, user) now,
/// 0 for one with only a waiting job): see the module documentation. Associations of an
/// account not in `accounts` are left out.
pub fn rank(
    accounts: &Accounts,
    users: &Users,
    usage: &BTreeMap<(usize, UserIdx), f64>,
) -> BTreeMap<(usize, UserIdx), f64> {
    let n = accounts.list.len();
    // Each account's users and child accounts; the roots.
    let mut own: Vec<Vec<(UserIdx, f64)>> = vec![Vec::new(); n];
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut roots: Vec<usize> = Vec::new();
    let mut total = vec![0.0f64; n];
    let mut associations = 0usize;
    for (&(a, u), &x) in usage {
        if let Some(list) = own.get_mut(a) {
            list.push((u, x.max(0.0)));
            total[a] += x.max(0.0);
            associations += 1;
        }
    }
    for (a, p) in accounts.parent.iter().enumerate().take(n) {
        match p {
            Some(p) if *p < n && *p != a => children[*p].push(a),
            _ => roots.push(a),
        }
    }
    // Subtree usage: children before parents (the reverse of a preorder from the roots).
    let mut preorder: Vec<usize> = Vec::with_capacity(n);
    let mut stack: Vec<usize> = roots.clone();
    let mut seen = vec![false; n];
    while let Some(a) = stack.pop() {
        if std::mem::replace(&mut seen[a], true) {
            continue;
        }
        preorder.push(a);
        stack.extend(children[a].iter().copied());
    }
    for &a in preorder.iter().rev() {
        if let Some(p) = accounts.parent[a].filter(|&p| p < n && p != a) {
            total[p] += total[a];
        }
    }
    let shares = |node: Node| match node {
        Node::User(..) => 1.0,
        Node::Account(a) => f64::from(accounts.get(a).shares.max(1)),
    };
    let used = |node: Node| match node {
        Node::User(a, u) => own[a].binary_search_by(|(x, _)| x.cmp(&u)).map_or(0.0, |i| own[a][i].1),
        Node::Account(a) => total[a],
    };
    let name = |node: Node| match node {
        Node::User(_, u) => users.name(u),
        Node::Account(a) => accounts.get(a).name.as_str(),
    };
    // Siblings in walk order: Level Fairshare, higher first; then name; users first.
    let level = |nodes: &mut Vec<Node>| {
        let s: f64 = nodes.iter().map(|&x| shares(x)).sum();
        let u: f64 = nodes.iter().map(|&x| used(x)).sum();
        let lf = |x: Node| {
            let mine = used(x);
            if mine <= 0.0 || u <= 0.0 {
                f64::INFINITY
            } else {
                (shares(x) / s) / (mine / u)
            }
        };
        let mut keyed: Vec<(f64, Node)> = nodes.iter().map(|&x| (lf(x), x)).collect();
        keyed.sort_by(|(la, a), (lb, b)| {
            lb.total_cmp(la)
                .then_with(|| name(*a).cmp(name(*b)))
                .then_with(|| matches!(a, Node::Account(_)).cmp(&matches!(b, Node::Account(_))))
                .then_with(|| order_of(*a).cmp(&order_of(*b)))
        });
        *nodes = keyed.into_iter().map(|(_, x)| x).collect();
    };
    let mut out = BTreeMap::new();
    if associations == 0 {
        return out;
    }
    let mut top: Vec<Node> = roots.iter().map(|&a| Node::Account(a)).collect();
    level(&mut top);
    // Depth first: the stack holds what is still to visit, next on top.
    let mut walk: Vec<Node> = top.into_iter().rev().collect();
    let mut seen = vec![false; n];
    let mut next = associations;
    while let Some(node) = walk.pop() {
        match node {
            Node::User(a, u) => {
                out.insert((a, u), next as f64 / associations as f64);
                next = next.saturating_sub(1);
            }
            Node::Account(a) => {
                if std::mem::replace(&mut seen[a], true) {
                    continue;
                }
                let mut level_nodes: Vec<Node> = own[a]
                    .iter()
                    .map(|&(u, _)| Node::User(a, u))
                    .chain(children[a].iter().map(|&c| Node::Account(c)))
                    .collect();
                if level_nodes.is_empty() {
                    continue;
                }
                level(&mut level_nodes);
                walk.extend(level_nodes.into_iter().rev());
            }
        }
    }
    out
}

/// A last, total tie-break (two users of one name cannot be; kept for a total order).
fn order_of(node: Node) -> (usize, u32) {
    match node {
        Node::User(a, u) => (a, u.0),
        Node::Account(a) => (a, 0),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;

    use super::*;
    use crate::config::PlannerConfig;

    fn setup(text: &str, names: &[&str]) -> (Accounts, Users, Vec<UserIdx>) {
        let c = PlannerConfig::parse(text, "p.toml").unwrap();
        let mut users = Users::default();
        let ids = names.iter().map(|n| users.intern(&Arc::from(*n))).collect();
        (c.accounts, users, ids)
    }

    /// The users in rank order, with their factors.
    fn order(accounts: &Accounts, users: &Users, usage: &[(&str, UserIdx, f64)]) -> Vec<(String, f64)> {
        let usage: BTreeMap<(usize, UserIdx), f64> = usage
            .iter()
            .map(|(a, u, x)| ((accounts.find(a).unwrap(), *u), *x))
            .collect();
        let mut out: Vec<(String, f64)> = rank(accounts, users, &usage)
            .into_iter()
            .map(|((_, u), f)| (users.name(u).to_string(), f))
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1));
        out
    }

    #[test]
    fn siblings_by_level_fairshare_then_depth_first() {
        let (accounts, users, ids) = setup(
            "[[account]]\nname = \"a\"\n[[account]]\nname = \"b\"\n",
            &["alice", "amy", "bob", "bea"],
        );
        let o = order(
            &accounts,
            &users,
            &[
                ("a", ids[0], 100.0),
                ("a", ids[1], 1.0),
                ("b", ids[2], 10.0),
                ("b", ids[3], 0.0),
            ],
        );
        assert_eq!(
            o,
            [
                ("bea".to_string(), 1.0),
                ("bob".to_string(), 0.75),
                ("amy".to_string(), 0.5),
                ("alice".to_string(), 0.25)
            ]
        );
    }

    #[test]
    fn shares_weigh_and_nothing_used_is_infinite_with_ties_by_name() {
        let (accounts, users, ids) = setup(
            "[[account]]\nname = \"small\"\n[[account]]\nname = \"zeta\"\nshares = 3\n",
            &["sam", "zed"],
        );
        // Same usage: 3 shares to 1 puts zeta first.
        let o = order(&accounts, &users, &[("small", ids[0], 5.0), ("zeta", ids[1], 5.0)]);
        assert_eq!(o[0].0, "zed");
        // Nothing used: by name.
        let o = order(&accounts, &users, &[("small", ids[0], 0.0), ("zeta", ids[1], 0.0)]);
        assert_eq!(o[0].0, "sam");
        // Nothing at all: nothing ranked.
        assert!(rank(&accounts, &users, &BTreeMap::new()).is_empty());
    }

    #[test]
    fn a_nested_account_counts_its_children() {
        let (accounts, users, ids) = setup(
            "[[account]]\nname = \"science\"\n[[account]]\nname = \"physics\"\nparent = \"science\"\n[[account]]\nname = \"chem\"\nparent = \"science\"\n[[account]]\nname = \"eng\"\n",
            &["alice", "bob", "carol"],
        );
        // science (6 + 1) is heavier than eng (2): carol first although bob used less.
        let o = order(
            &accounts,
            &users,
            &[("physics", ids[0], 6.0), ("chem", ids[1], 1.0), ("eng", ids[2], 2.0)],
        );
        let names: Vec<&str> = o.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["carol", "bob", "alice"]);
    }
}
