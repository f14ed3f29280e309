//! The victims inside one HyperNode: the fewest jobs whose room, with what is free there,
//! lets the preemptor be placed, then the least work lost, then the fewest queues.
//!
//! First one victim alone, the cheapest that makes room. Else greedy, then pruned: jobs
//! are added by how much of what is still missing they free (the covering greedy, exact
//! for one resource), ties by the least work lost, a queue already touched, then name;
//! once the sums cover the request the real placement search is asked, and more are
//! added while it fails (fragmentation). Then every chosen job the search can do without
//! is dropped again, the costliest first, so no victim is needless.
//!
//! The greedy counts what a job frees summed over the HyperNode, not node by node: a wide
//! job that frees a little on many nodes comes before the few small ones that empty a
//! node, and the prune only drops victims. So last, when fewer victims than the greedy's
//! may do (by the sums), the sets of each smaller size are tried, fewest first: those
//! whose sums cover the request and whose room counted node by node could hold the tasks
//! ([`Room`]), least work first, and the search asked; within a [`Budget`] per decision,
//! past it the greedy's choice stands. The property test in `tests/preempt_props.rs`
//! compares the count with brute force (`benches/README.md`).

/// Sets the exact step may look at in one decision, over every HyperNode it tries (every
/// smaller set of 11 candidates); a size whose sets would pass it is not started.
pub const EXACT_SETS: u64 = 2048;

/// Placement searches the exact step may ask in one decision, its prune of a set found
/// included (each ~85 µs on a leaf of 16 nodes, `benches/README.md`).
pub const EXACT_SEARCHES: usize = 16;

/// What the exact step may still spend in one decision: it bounds what it adds to it.
#[derive(Clone, Debug)]
pub struct Budget {
    /// Sets it may still look at.
    pub sets: u64,
    /// Placement searches it may still ask.
    pub searches: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            sets: EXACT_SETS,
            searches: EXACT_SEARCHES,
        }
    }
}

/// A running job that may be preempted, as seen from one HyperNode.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// What its tasks inside the HyperNode hold, per dimension.
    pub freed: Vec<u64>,
    /// Work it would lose: seconds run × CPUs, summed over its tasks.
    pub work: u64,
    /// Its queue (dense index).
    pub queue: u32,
    /// Its name: the last tie-break.
    pub name: String,
}

/// The HyperNode's nodes as a cheap test sees them: a set can make room only if the tasks
/// that fit node by node once it has gone (NUMA, topology and labels left out, so never
/// fewer than the search finds) reach what the job must place.
#[derive(Clone, Debug, Default)]
pub struct Room {
    /// Per node some candidate holds part of: what is free there.
    free: Vec<Vec<u64>>,
    /// Per candidate: what it holds on each of those nodes (by index into `free`).
    on: Vec<Vec<(usize, Vec<u64>)>>,
    /// Tasks that fit on each of those nodes now.
    counts: Vec<u64>,
    /// Tasks that fit on all the HyperNode's nodes now.
    base: u64,
    /// Per role with tasks to place: its request.
    shapes: Vec<Vec<u64>>,
    /// Tasks the job must place.
    tasks: u64,
}

impl Room {
    /// `free`: per node candidates hold part of, what is free there; `others`: what is
    /// free on each other node of the HyperNode; `on`: per candidate, what it holds on
    /// each node of `free` (by index); `shapes`: the request of each role with tasks to
    /// place (one whose resource no node has left out); `tasks`: how many it must place.
    pub fn new<'a>(
        free: Vec<Vec<u64>>,
        others: impl IntoIterator<Item = &'a [u64]>,
        on: Vec<Vec<(usize, Vec<u64>)>>,
        shapes: Vec<Vec<u64>>,
        tasks: u64,
    ) -> Self {
        let mut room = Self {
            free,
            on,
            counts: Vec::new(),
            base: 0,
            shapes,
            tasks,
        };
        room.counts = room.free.iter().map(|f| room.count(f)).collect();
        room.base = others
            .into_iter()
            .map(|f| room.count(f))
            .chain(room.counts.iter().copied())
            .fold(0, u64::saturating_add);
        room
    }

    /// Tasks that fit in `free`: per role, summed over roles (a node may take tasks of
    /// several, so never fewer than it does).
    fn count(&self, free: &[u64]) -> u64 {
        self.shapes
            .iter()
            .map(|req| {
                req.iter()
                    .zip(free)
                    .filter(|(r, _)| **r > 0)
                    .map(|(r, f)| f / r)
                    .min()
                    .unwrap_or(u64::from(u32::MAX))
            })
            .fold(0, u64::saturating_add)
    }

    /// False when the job cannot be placed once `set` has gone (true says nothing).
    fn may_fit(&self, set: &[usize]) -> bool {
        let on = |v: usize| self.on.get(v).map_or(&[][..], Vec::as_slice);
        let mut nodes: Vec<usize> = set.iter().flat_map(|&v| on(v).iter().map(|(n, _)| *n)).collect();
        nodes.sort_unstable();
        nodes.dedup();
        let mut total = self.base;
        for n in nodes {
            let (Some(free), Some(&now)) = (self.free.get(n), self.counts.get(n)) else {
                continue;
            };
            let mut free = free.clone();
            for (_, f) in set.iter().flat_map(|&v| on(v).iter()).filter(|(m, _)| *m == n) {
                for (a, x) in free.iter_mut().zip(f) {
                    *a = a.saturating_add(*x);
                }
            }
            total = total.saturating_sub(now).saturating_add(self.count(&free));
        }
        total >= self.tasks
    }
}

/// The victims chosen in one HyperNode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// Indices into the candidates, in name order.
    pub victims: Vec<usize>,
    /// Their work lost, summed.
    pub work: u64,
    /// Distinct queues among them.
    pub queues: usize,
}

impl Choice {
    /// The order of choices: fewest victims, least work lost, fewest queues.
    pub fn key(&self) -> (usize, u64, usize) {
        (self.victims.len(), self.work, self.queues)
    }
}

/// Chooses victims among `cands` to cover `deficit` (per dimension: what the job needs
/// beyond what is free); `fits(set)` says whether the job is placeable once `set` has gone.
/// `at_most`: stop looking past this many victims (a choice elsewhere has that many).
/// `budget` and `room` (the nodes, made only when it runs): for the exact step.
pub fn choose(
    cands: &[Candidate],
    deficit: &[u64],
    need: &[u64],
    at_most: Option<usize>,
    budget: &mut Budget,
    room: impl FnOnce() -> Room,
    mut fits: impl FnMut(&[usize]) -> bool,
) -> Option<Choice> {
    if deficit.iter().all(|&m| m == 0) && fits(&[]) {
        return Some(Choice {
            victims: Vec::new(),
            work: 0,
            queues: 0,
        });
    }
    if at_most.is_some_and(|m| m < 1) {
        return None;
    }
    // One victim may do: the one that loses the least work, of those that free enough
    // alone (the greedy below can miss it: a small job that completes an almost free
    // node frees less than a big one in sum).
    let mut singles: Vec<usize> = (0..cands.len())
        .filter(|&i| cands[i].freed.iter().zip(deficit).all(|(f, d)| f >= d))
        .collect();
    singles.sort_by(|&a, &b| {
        cands[a]
            .work
            .cmp(&cands[b].work)
            .then(cands[a].name.cmp(&cands[b].name))
    });
    if let Some(v) = singles.into_iter().find(|&v| fits(&[v])) {
        return Some(Choice {
            victims: vec![v],
            work: cands[v].work,
            queues: 1,
        });
    }
    let greedy = match greedy(cands, deficit, need, at_most, &mut fits) {
        Greedy::Found(set) => Some(prune(cands, set, &mut fits)),
        Greedy::Bound => None,
        // Every candidate gone and still no room: no set makes it.
        Greedy::Exhausted => return None,
    };
    // Sizes below the greedy's, or below the bound where it stopped (one of the bound's
    // size would not be fewer than the choice elsewhere), may still do.
    let largest = greedy.as_ref().map_or(at_most.unwrap_or(0), Vec::len).saturating_sub(1);
    let mut chosen = match fewest(cands, deficit, largest, budget, room, &mut fits) {
        // The sums count every pending task: a gang that may start with fewer can do
        // without one of them, which the prune finds. Its searches come out of the budget
        // too (it ends them, so one prune at most goes past it).
        Some(set) => prune(cands, set, &mut |s: &[usize]| {
            budget.searches = budget.searches.saturating_sub(1);
            fits(s)
        }),
        None => greedy?,
    };
    chosen.sort_by(|&a, &b| cands[a].name.cmp(&cands[b].name));
    let mut qs: Vec<u32> = chosen.iter().map(|&v| cands[v].queue).collect();
    qs.sort_unstable();
    qs.dedup();
    Some(Choice {
        work: chosen.iter().map(|&v| cands[v].work).sum(),
        queues: qs.len(),
        victims: chosen,
    })
}

/// How the greedy ended.
enum Greedy {
    /// This set makes room.
    Found(Vec<usize>),
    /// `at_most` victims and still no room.
    Bound,
    /// Every candidate and still no room.
    Exhausted,
}

/// The covering greedy (see the module).
fn greedy(
    cands: &[Candidate],
    deficit: &[u64],
    need: &[u64],
    at_most: Option<usize>,
    fits: &mut impl FnMut(&[usize]) -> bool,
) -> Greedy {
    let mut missing = deficit.to_vec();
    let mut chosen: Vec<usize> = Vec::new();
    let mut queues: Vec<u32> = Vec::new();
    let mut left: Vec<usize> = (0..cands.len()).collect();
    loop {
        if missing.iter().all(|&m| m == 0) && fits(&chosen) {
            return Greedy::Found(chosen);
        }
        if at_most.is_some_and(|m| chosen.len() >= m) {
            return Greedy::Bound;
        }
        let best = left.iter().copied().enumerate().min_by(|&(_, a), &(_, b)| {
            let (ca, cb) = (&cands[a], &cands[b]);
            cover(cb, &missing)
                .cmp(&cover(ca, &missing))
                .then(share(cb, need).cmp(&share(ca, need)))
                .then(ca.work.cmp(&cb.work))
                .then(queues.contains(&cb.queue).cmp(&queues.contains(&ca.queue)))
                .then(ca.name.cmp(&cb.name))
        });
        let Some((pos, v)) = best else {
            return Greedy::Exhausted;
        };
        left.swap_remove(pos);
        for (m, f) in missing.iter_mut().zip(&cands[v].freed) {
            *m = m.saturating_sub(*f);
        }
        if !queues.contains(&cands[v].queue) {
            queues.push(cands[v].queue);
        }
        chosen.push(v);
    }
}

/// Drops every victim the job can do without, the costliest first.
fn prune(cands: &[Candidate], mut chosen: Vec<usize>, fits: &mut impl FnMut(&[usize]) -> bool) -> Vec<usize> {
    let mut by_cost = chosen.clone();
    by_cost.sort_by(|&a, &b| {
        cands[b]
            .work
            .cmp(&cands[a].work)
            .then(cands[a].name.cmp(&cands[b].name))
    });
    for v in by_cost {
        let without: Vec<usize> = chosen.iter().copied().filter(|&c| c != v).collect();
        if fits(&without) {
            chosen = without;
        }
    }
    chosen
}

/// The exact step: the first size from the fewest the sums allow (two at least: one alone
/// was tried) up to `largest` for which some set makes room, and of that size the one that
/// loses the least work, then touches the fewest queues, then by names. `None` when none
/// does or the budget ran out first.
fn fewest(
    cands: &[Candidate],
    deficit: &[u64],
    largest: usize,
    budget: &mut Budget,
    room: impl FnOnce() -> Room,
    fits: &mut impl FnMut(&[usize]) -> bool,
) -> Option<Vec<usize>> {
    let n = cands.len();
    let smallest = fewest_by_sums(cands, deficit)?.max(2);
    let largest = largest.min(n);
    if smallest > largest {
        return None;
    }
    let room = room();
    for k in smallest..=largest {
        let sets = binomial(n, k);
        if sets > budget.sets {
            return None;
        }
        budget.sets -= sets;
        let mut ok: Vec<(u64, usize, Vec<usize>)> = Vec::new();
        let mut set: Vec<usize> = (0..k).collect();
        loop {
            let covers = deficit.iter().enumerate().all(|(d, &m)| {
                set.iter()
                    .map(|&v| cands[v].freed.get(d).copied().unwrap_or(0))
                    .fold(0, u64::saturating_add)
                    >= m
            });
            if covers && room.may_fit(&set) {
                let mut qs: Vec<u32> = set.iter().map(|&v| cands[v].queue).collect();
                qs.sort_unstable();
                qs.dedup();
                ok.push((set.iter().map(|&v| cands[v].work).sum(), qs.len(), set.clone()));
            }
            if !next_set(&mut set, n) {
                break;
            }
        }
        ok.sort_by(|a, b| {
            (a.0, a.1).cmp(&(b.0, b.1)).then_with(|| {
                let names = |s: &[usize]| s.iter().map(|&v| cands[v].name.as_str()).collect::<Vec<_>>();
                names(&a.2).cmp(&names(&b.2))
            })
        });
        for (_, _, set) in ok {
            if budget.searches == 0 {
                return None;
            }
            budget.searches -= 1;
            if fits(&set) {
                return Some(set);
            }
        }
    }
    None
}

/// The fewest candidates whose sums can cover `deficit`: per dimension the largest first,
/// the most over dimensions; `None` when all of them cannot.
fn fewest_by_sums(cands: &[Candidate], deficit: &[u64]) -> Option<usize> {
    let mut most = 0;
    for (d, &m) in deficit.iter().enumerate().filter(|(_, m)| **m > 0) {
        let mut freed: Vec<u64> = cands.iter().map(|c| c.freed.get(d).copied().unwrap_or(0)).collect();
        freed.sort_unstable_by(|a, b| b.cmp(a));
        let mut sum = 0u64;
        let k = freed.iter().position(|&f| {
            sum = sum.saturating_add(f);
            sum >= m
        })?;
        most = most.max(k + 1);
    }
    Some(most)
}

/// The next `set.len()`-subset of `0..n` in lexicographic order; false after the last.
fn next_set(set: &mut [usize], n: usize) -> bool {
    let k = set.len();
    let Some(i) = (0..k).rev().find(|&i| set[i] < n - k + i) else {
        return false;
    };
    set[i] += 1;
    for j in i + 1..k {
        set[j] = set[j - 1] + 1;
    }
    true
}

/// n choose k; `u64::MAX` once a step overflows (only ever compared with [`EXACT_SETS`]).
fn binomial(n: usize, k: usize) -> u64 {
    let k = k.min(n.saturating_sub(k)) as u64;
    let mut c: u64 = 1;
    for i in 0..k {
        // Exact at each step: c × (n − i) is divisible by i + 1.
        match c.checked_mul(n as u64 - i) {
            Some(x) => c = x / (i + 1),
            None => return u64::MAX,
        }
    }
    c
}

/// How much of what is missing `c` frees: the sum over dimensions of the share of each
/// dimension's shortfall it covers, in millionths.
fn cover(c: &Candidate, missing: &[u64]) -> u64 {
    c.freed
        .iter()
        .zip(missing)
        .filter(|(_, m)| **m > 0)
        .map(|(f, m)| ((*f).min(*m) as u128 * 1_000_000 / *m as u128) as u64)
        .sum()
}

/// How much of the whole request `c` frees (once the sums are covered and the search
/// still fails, the biggest hole helps most).
fn share(c: &Candidate, need: &[u64]) -> u64 {
    c.freed
        .iter()
        .zip(need)
        .filter(|(_, n)| **n > 0)
        .map(|(f, n)| ((*f).min(*n) as u128 * 1_000_000 / *n as u128) as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn cand(freed: u64, work: u64, queue: u32, name: &str) -> Candidate {
        Candidate {
            freed: vec![freed],
            work,
            queue,
            name: name.into(),
        }
    }

    /// Sums only: fits when the chosen free at least `need`.
    fn by_sum<'a>(cands: &'a [Candidate], need: u64) -> impl FnMut(&[usize]) -> bool + 'a {
        move |set| set.iter().map(|&v| cands[v].freed[0]).sum::<u64>() >= need
    }

    /// `choose` with the default budget and no node-by-node room (the greedy's cases).
    fn plain(
        c: &[Candidate],
        deficit: &[u64],
        need: &[u64],
        at_most: Option<usize>,
        fits: impl FnMut(&[usize]) -> bool,
    ) -> Option<Choice> {
        choose(c, deficit, need, at_most, &mut Budget::default(), Room::default, fits)
    }

    #[test]
    fn fewest_first_then_least_work() {
        let c = vec![
            cand(2, 10, 0, "a"),
            cand(2, 10, 0, "b"),
            cand(4, 100, 1, "big"),
            cand(4, 50, 2, "big2"),
        ];
        // One job of 4 beats two of 2; of the two of 4, the one that loses less.
        let got = plain(&c, &[4], &[4], None, by_sum(&c, 4)).unwrap();
        assert_eq!(got.victims, vec![3]);
        assert_eq!(got.key(), (1, 50, 1));
    }

    #[test]
    fn needless_victims_are_dropped() {
        // The search needs a whole node: the sums are covered by a and b but the job
        // only fits once c goes; a and b are then needless.
        let c = vec![cand(3, 1, 0, "a"), cand(3, 1, 0, "b"), cand(1, 5, 0, "c")];
        let got = plain(&c, &[4], &[4], None, |set: &[usize]| set.contains(&2)).unwrap();
        assert_eq!(got.victims, vec![2]);
    }

    #[test]
    fn no_victims_when_nothing_is_missing_and_it_fits() {
        let c = vec![cand(4, 1, 0, "a")];
        let got = plain(&c, &[0], &[4], None, |_: &[usize]| true).unwrap();
        assert!(got.victims.is_empty());
    }

    #[test]
    fn none_when_even_all_do_not_free_enough_or_past_the_bound() {
        let c = vec![cand(1, 1, 0, "a"), cand(1, 1, 0, "b")];
        assert_eq!(plain(&c, &[4], &[4], None, by_sum(&c, 4)), None);
        let c = vec![cand(2, 1, 0, "a"), cand(2, 1, 0, "b")];
        assert_eq!(plain(&c, &[4], &[4], Some(1), by_sum(&c, 4)), None);
        assert!(plain(&c, &[4], &[4], Some(2), by_sum(&c, 4)).is_some());
    }

    #[test]
    fn one_victim_that_completes_a_node_beats_two_bigger_ones() {
        // x frees the most in sum, but only z completes the node the job needs.
        let c = vec![cand(6, 100, 0, "x"), cand(2, 10, 0, "y"), cand(2, 50, 0, "z")];
        let fits = |set: &[usize]| set == [2] || (set.contains(&0) && set.contains(&1));
        assert_eq!(plain(&c, &[2], &[8], None, fits).unwrap().victims, vec![2]);
        // Of two that do alone, the one that loses less.
        let c = vec![cand(8, 1632, 0, "w"), cand(6, 612, 0, "x")];
        let got = plain(&c, &[6], &[8], None, |set: &[usize]| set.len() == 1).unwrap();
        assert_eq!((got.victims, got.work), (vec![1], 612));
    }

    /// Per candidate: (node, what it holds there).
    type On = Vec<Vec<(usize, Vec<u64>)>>;

    /// A job: (node, what it holds there), its work, its name.
    type Held = (&'static [(usize, u64)], u64, &'static str);

    /// A job of `tasks` tasks of `size` on nodes with `free` room: fits when, once the set
    /// has gone, that many fit node by node.
    fn by_nodes<'a>(on: &'a On, free: &'a [u64], size: u64, tasks: u64) -> impl FnMut(&[usize]) -> bool + 'a {
        move |set| {
            let mut f = free.to_vec();
            for (n, x) in set.iter().flat_map(|&v| on[v].iter()) {
                f[*n] += x[0];
            }
            f.iter().map(|x| x / size).sum::<u64>() >= tasks
        }
    }

    /// Six full nodes of 8, a job of one task of 8: a and b empty node 0; w, x, y and z,
    /// each bigger, together empty node 1.
    fn wide_first() -> (Vec<Candidate>, On) {
        let jobs: [Held; 6] = [
            (&[(1, 2), (2, 5)], 1, "w"),
            (&[(1, 2), (3, 3)], 1, "x"),
            (&[(1, 2), (4, 3)], 1, "y"),
            (&[(1, 2), (5, 3)], 1, "z"),
            (&[(0, 4)], 5, "a"),
            (&[(0, 4)], 5, "b"),
        ];
        let c = jobs
            .iter()
            .map(|(on, work, name)| cand(on.iter().map(|(_, x)| x).sum(), *work, 0, name))
            .collect();
        let on = jobs
            .iter()
            .map(|(on, _, _)| on.iter().map(|&(n, x)| (n, vec![x])).collect())
            .collect();
        (c, on)
    }

    fn room(on: &On) -> impl FnOnce() -> Room {
        let on = on.clone();
        move || Room::new(vec![vec![0]; 6], [], on, vec![vec![8]], 1)
    }

    #[test]
    fn fewer_victims_than_the_greedy_when_its_wide_picks_need_more() {
        // The greedy takes w, x, y, z (by sums, the biggest first), none needless; a and b
        // do.
        let (c, on) = wide_first();
        let free = [0; 6];
        let mut budget = Budget::default();
        let got = choose(&c, &[8], &[8], None, &mut budget, room(&on), by_nodes(&on, &free, 8, 1)).unwrap();
        assert_eq!((got.victims, got.work), (vec![4, 5], 10));
        // Size 2 only (15 sets); the node by node count rules out every pair but {a, b}:
        // one search, and two for the prune.
        assert_eq!((budget.sets, budget.searches), (EXACT_SETS - 15, EXACT_SEARCHES - 3));
        // Without the exact step: four.
        let g = match greedy(&c, &[8], &[8], None, &mut by_nodes(&on, &free, 8, 1)) {
            Greedy::Found(set) => prune(&c, set, &mut by_nodes(&on, &free, 8, 1)),
            _ => panic!("the greedy finds a set"),
        };
        assert_eq!(g.len(), 4);
    }

    #[test]
    fn a_bound_that_stops_the_greedy_does_not_hide_a_set_below_it() {
        // Three victims at most (a choice elsewhere has three): the greedy's first three
        // (w, x, y) make no room, a and b do.
        let (c, on) = wide_first();
        let free = [0; 6];
        let got = choose(
            &c,
            &[8],
            &[8],
            Some(3),
            &mut Budget::default(),
            room(&on),
            by_nodes(&on, &free, 8, 1),
        );
        assert_eq!(got.unwrap().victims, vec![4, 5]);
        // At most two: only fewer than two would do better, and one alone does not.
        let got = choose(
            &c,
            &[8],
            &[8],
            Some(2),
            &mut Budget::default(),
            room(&on),
            by_nodes(&on, &free, 8, 1),
        );
        assert_eq!(got, None);
    }

    #[test]
    fn the_exact_step_keeps_to_its_bounds() {
        assert_eq!(binomial(12, 6), 924);
        assert_eq!(binomial(60, 30), 118_264_581_564_861_424);
        assert_eq!(binomial(200, 100), u64::MAX);
        let mut set = vec![0, 1];
        let mut all = vec![set.clone()];
        while next_set(&mut set, 4) {
            all.push(set.clone());
        }
        assert_eq!(all, [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]]);
        // Sizes from the fewest the sums allow: 4 of 12 candidates (495 sets) are looked
        // at, 4 of 20 (4,845) are not.
        let jobs = |n: usize| -> Vec<Candidate> { (0..n).map(|i| cand(1, 1, 0, &format!("j{i:02}"))).collect() };
        let (c12, c20) = (jobs(12), jobs(20));
        let four = |set: &[usize]| set.len() >= 4;
        assert_eq!(
            fewest(&c12, &[4], 5, &mut Budget::default(), Room::default, &mut { four }),
            Some(vec![0, 1, 2, 3])
        );
        assert_eq!(
            fewest(&c20, &[4], 5, &mut Budget::default(), Room::default, &mut { four }),
            None
        );
        // The budget is the decision's, over every HyperNode: what one spent, the next lacks.
        let mut budget = Budget { sets: 500, searches: 2 };
        assert!(fewest(&c12, &[4], 5, &mut budget, Room::default, &mut { four }).is_some());
        assert_eq!((budget.sets, budget.searches), (5, 1));
        assert_eq!(fewest(&c12, &[4], 5, &mut budget, Room::default, &mut { four }), None);
        // Searches: EXACT_SEARCHES at most.
        let mut searches = 0;
        let got = fewest(
            &c20,
            &[2],
            5,
            &mut Budget::default(),
            Room::default,
            &mut |_: &[usize]| {
                searches += 1;
                false
            },
        );
        assert_eq!((got, searches), (None, EXACT_SEARCHES));
    }

    #[test]
    fn a_touched_queue_wins_a_tie() {
        let c = vec![cand(2, 1, 0, "a"), cand(1, 1, 1, "b"), cand(1, 1, 0, "c")];
        let got = plain(&c, &[3], &[3], None, by_sum(&c, 3)).unwrap();
        assert_eq!(got.victims, vec![0, 2]);
        assert_eq!(got.queues, 1);
    }
}
