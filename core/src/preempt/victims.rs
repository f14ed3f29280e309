//! The victims inside one HyperNode: the fewest jobs whose room, with what is free there,
//! lets the preemptor be placed, then the least work lost, then the fewest queues.
//!
//! First one victim alone, the cheapest that makes room. Else greedy, then pruned: jobs
//! are added by how much of what is still missing they free (the covering greedy, exact
//! for one resource), ties by the least work lost, a queue already touched, then name;
//! once the sums cover the request the real placement search is asked, and more are
//! added while it fails (fragmentation). Then every chosen job the search can do without
//! is dropped again, the costliest first, so no victim is needless. The property test in
//! `tests/preempt_props.rs` compares the count with brute force (`benches/README.md`).

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
pub fn choose(
    cands: &[Candidate],
    deficit: &[u64],
    need: &[u64],
    at_most: Option<usize>,
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
    let mut missing = deficit.to_vec();
    let mut chosen: Vec<usize> = Vec::new();
    let mut queues: Vec<u32> = Vec::new();
    let mut left: Vec<usize> = (0..cands.len()).collect();
    loop {
        if missing.iter().all(|&m| m == 0) && fits(&chosen) {
            break;
        }
        if at_most.is_some_and(|m| chosen.len() >= m) {
            return None;
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
        let (pos, v) = best?;
        left.swap_remove(pos);
        for (m, f) in missing.iter_mut().zip(&cands[v].freed) {
            *m = m.saturating_sub(*f);
        }
        if !queues.contains(&cands[v].queue) {
            queues.push(cands[v].queue);
        }
        chosen.push(v);
    }
    // Drop every victim the job can do without, the costliest first.
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

    #[test]
    fn fewest_first_then_least_work() {
        let c = vec![
            cand(2, 10, 0, "a"),
            cand(2, 10, 0, "b"),
            cand(4, 100, 1, "big"),
            cand(4, 50, 2, "big2"),
        ];
        // One job of 4 beats two of 2; of the two of 4, the one that loses less.
        let got = choose(&c, &[4], &[4], None, by_sum(&c, 4)).unwrap();
        assert_eq!(got.victims, vec![3]);
        assert_eq!(got.key(), (1, 50, 1));
    }

    #[test]
    fn needless_victims_are_dropped() {
        // The search needs a whole node: the sums are covered by a and b but the job
        // only fits once c goes; a and b are then needless.
        let c = vec![cand(3, 1, 0, "a"), cand(3, 1, 0, "b"), cand(1, 5, 0, "c")];
        let got = choose(&c, &[4], &[4], None, |set: &[usize]| set.contains(&2)).unwrap();
        assert_eq!(got.victims, vec![2]);
    }

    #[test]
    fn no_victims_when_nothing_is_missing_and_it_fits() {
        let c = vec![cand(4, 1, 0, "a")];
        let got = choose(&c, &[0], &[4], None, |_: &[usize]| true).unwrap();
        assert!(got.victims.is_empty());
    }

    #[test]
    fn none_when_even_all_do_not_free_enough_or_past_the_bound() {
        let c = vec![cand(1, 1, 0, "a"), cand(1, 1, 0, "b")];
        assert_eq!(choose(&c, &[4], &[4], None, by_sum(&c, 4)), None);
        let c = vec![cand(2, 1, 0, "a"), cand(2, 1, 0, "b")];
        assert_eq!(choose(&c, &[4], &[4], Some(1), by_sum(&c, 4)), None);
        assert!(choose(&c, &[4], &[4], Some(2), by_sum(&c, 4)).is_some());
    }

    #[test]
    fn one_victim_that_completes_a_node_beats_two_bigger_ones() {
        // x frees the most in sum, but only z completes the node the job needs.
        let c = vec![cand(6, 100, 0, "x"), cand(2, 10, 0, "y"), cand(2, 50, 0, "z")];
        let fits = |set: &[usize]| set == [2] || (set.contains(&0) && set.contains(&1));
        assert_eq!(choose(&c, &[2], &[8], None, fits).unwrap().victims, vec![2]);
        // Of two that do alone, the one that loses less.
        let c = vec![cand(8, 1632, 0, "w"), cand(6, 612, 0, "x")];
        let got = choose(&c, &[6], &[8], None, |set: &[usize]| set.len() == 1).unwrap();
        assert_eq!((got.victims, got.work), (vec![1], 612));
    }

    #[test]
    fn a_touched_queue_wins_a_tie() {
        let c = vec![cand(2, 1, 0, "a"), cand(1, 1, 1, "b"), cand(1, 1, 0, "c")];
        let got = choose(&c, &[3], &[3], None, by_sum(&c, 3)).unwrap();
        assert_eq!(got.victims, vec![0, 2]);
        assert_eq!(got.queues, 1);
    }
}
