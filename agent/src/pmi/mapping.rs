//! `PMI_process_mapping`: which ranks share a node, the value MPICH gets with
//! `cmd=get key=PMI_process_mapping` during `MPI_Init` to find its node-local peers
//! (shared memory) without exchanging hostnames.
//!
//! The format, as hydra writes it (`pmi_process_mapping` in
//! `src/pm/hydra/pm/pmiserv/pmiserv_utils.c`) and MPICH 4.0.2 reads it
//! (`MPIR_NODEMAP_parse_mapping` and `MPIR_NODEMAP_populate_ids_from_mapping` in
//! `src/util/mpir_nodemap.h`): `(vector,(S,C,Z),(S,C,Z),…)`, each triple `C` nodes
//! numbered from `S`, each given the next `Z` ranks in turn. When the triples cover fewer
//! ranks than the job has, the reader starts over from the first triple (hydra's
//! round-robin placement of 8 ranks on 2 nodes is `(vector,(0,2,1))`) and stops at the
//! job's size, even mid-triple.
//!
//! An empty value means "unknown", but MPICH 4.0.2 (`build_nodemap_pmi1` in
//! `src/util/mpir_pmi.c`) fails `MPI_Init` on it; only a failed get (`rc` not 0) makes it
//! fall back to exchanging hostnames through the key-value space (the `hostname[<rank>]`
//! keys and a barrier). So for an empty mapping the server answers the key as not found.

use std::collections::HashMap;

use super::wire::CLIENT_VALUE_MAX;

/// `PMI_process_mapping` for a job whose rank `r` runs on node `node_of_rank[r]`, exact
/// for every rank. Only which ranks share a node counts: nodes are numbered in the order
/// of their first rank, as the job's nodes are listed (another numbering gives the same
/// value). Runs of nodes with equal counts of consecutive ranks merge into one triple:
/// 8 ranks, 4 on each of 2 nodes, are `(vector,(0,2,4))`. Interleaved placements are
/// written as the repeating pattern when shorter (`0,1,0,1,…`: `(vector,(0,2,1))`), else
/// triple by triple.
///
/// Empty (let MPICH exchange hostnames) for no ranks, for a rank without a node
/// (`u32::MAX`), and for a mapping longer than an MPICH rank reads whole
/// ([`CLIENT_VALUE_MAX`]: it would cut it and fail to parse it).
pub fn process_mapping(node_of_rank: &[u32]) -> String {
    if node_of_rank.is_empty() || node_of_rank.contains(&u32::MAX) {
        return String::new();
    }
    let mut ids: HashMap<u32, u32> = HashMap::new();
    let nodes: Vec<u32> = node_of_rank
        .iter()
        .map(|&node| {
            let next = u32::try_from(ids.len()).unwrap_or(u32::MAX);
            *ids.entry(node).or_insert(next)
        })
        .collect();
    let whole = render(&triples(&nodes));
    let period = smallest_period(&nodes);
    let best = match nodes.get(..period) {
        Some(pattern) if period < nodes.len() => {
            let repeated = render(&triples(pattern));
            match (&whole, repeated) {
                (Some(w), Some(r)) if r.len() < w.len() => Some(r),
                (None, r) => r,
                _ => whole,
            }
        }
        _ => whole,
    };
    best.unwrap_or_default()
}

/// `(start node, nodes, ranks per node)` for `nodes[r]`, the node of each rank in turn.
fn triples(nodes: &[u32]) -> Vec<(u32, u32, usize)> {
    let mut out: Vec<(u32, u32, usize)> = Vec::new();
    for run in nodes.chunk_by(|a, b| a == b) {
        let node = run.first().copied().unwrap_or_default();
        match out.last_mut() {
            Some((start, count, size)) if *size == run.len() && start.checked_add(*count) == Some(node) => *count += 1,
            _ => out.push((node, 1, run.len())),
        }
    }
    out
}

/// The triples as MPICH reads them; `None` when longer than [`CLIENT_VALUE_MAX`].
fn render(triples: &[(u32, u32, usize)]) -> Option<String> {
    let mut s = String::from("(vector");
    for (start, count, size) in triples {
        s.push_str(&format!(",({start},{count},{size})"));
        if s.len() >= CLIENT_VALUE_MAX {
            return None;
        }
    }
    s.push(')');
    (s.len() <= CLIENT_VALUE_MAX).then_some(s)
}

/// The smallest `p` with `s[i] == s[i - p]` for every `i >= p` (a last repetition may be
/// cut short): the length of the pattern that, repeated, gives `s`.
fn smallest_period(s: &[u32]) -> usize {
    // The prefix function: the longest proper prefix of s[..=i] that is also its suffix.
    let mut border = vec![0usize; s.len()];
    for i in 1..s.len() {
        let mut k = border.get(i - 1).copied().unwrap_or(0);
        while k > 0 && s.get(k) != s.get(i) {
            k = border.get(k - 1).copied().unwrap_or(0);
        }
        if s.get(k) == s.get(i) {
            k += 1;
        }
        if let Some(b) = border.get_mut(i) {
            *b = k;
        }
    }
    s.len() - border.last().copied().unwrap_or(0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// MPICH 4.0.2's reading of a mapping for `size` ranks
    /// (`MPIR_NODEMAP_parse_mapping`, `MPIR_NODEMAP_populate_ids_from_mapping`), with its
    /// start-over rule; `None` where it fails (or would loop forever).
    fn mpich_reads(mapping: &str, size: usize) -> Option<Vec<u32>> {
        let inner = mapping.strip_prefix("(vector,")?.strip_suffix(')')?;
        let mut blocks = Vec::new();
        for triple in inner.split("),(") {
            let triple = triple.trim_start_matches('(').trim_end_matches(')');
            let v: Vec<u32> = triple.split(',').map(|n| n.parse().ok()).collect::<Option<_>>()?;
            let [start, count, per] = v[..] else { return None };
            blocks.push((start, count, per));
        }
        let mut out = Vec::with_capacity(size);
        let mut found_wrap = false;
        loop {
            let before = out.len();
            let mut first = 0;
            while found_wrap && blocks[first].0 != 0 {
                first += 1;
            }
            for &(start, count, per) in &blocks[first..] {
                if start == 0 {
                    found_wrap = true;
                }
                for node in 0..count {
                    for _ in 0..per {
                        out.push(start + node);
                        if out.len() == size {
                            return Some(out);
                        }
                    }
                }
            }
            if out.len() == before {
                return None;
            }
        }
    }

    fn canonical(node_of_rank: &[u32]) -> Vec<u32> {
        let mut ids = HashMap::new();
        node_of_rank
            .iter()
            .map(|&n| {
                let next = ids.len() as u32;
                *ids.entry(n).or_insert(next)
            })
            .collect()
    }

    fn check(node_of_rank: &[u32], expected: &str) {
        let mapping = process_mapping(node_of_rank);
        assert_eq!(mapping, expected, "{node_of_rank:?}");
        if !mapping.is_empty() {
            assert_eq!(
                mpich_reads(&mapping, node_of_rank.len()).unwrap(),
                canonical(node_of_rank),
                "{mapping}"
            );
        }
    }

    #[test]
    fn one_node() {
        check(&[0], "(vector,(0,1,1))");
        check(&[0; 4], "(vector,(0,1,4))");
    }

    #[test]
    fn block_placement_merges_equal_nodes() {
        check(&[0, 0, 0, 0, 1, 1, 1, 1], "(vector,(0,2,4))");
        check(&[0, 0, 1, 1, 2, 2, 3, 3], "(vector,(0,4,2))");
    }

    #[test]
    fn uneven_blocks() {
        check(&[0, 0, 0, 1, 1, 1, 2, 2], "(vector,(0,2,3),(2,1,2))");
        check(&[0, 0, 1, 1, 1, 2, 2, 2], "(vector,(0,1,2),(1,2,3))");
    }

    #[test]
    fn interleaved_placements_repeat_a_pattern() {
        // Round robin, as hydra writes it.
        check(&[0, 1, 0, 1, 0, 1, 0, 1], "(vector,(0,2,1))");
        check(&[0, 1, 2, 0, 1, 2, 0], "(vector,(0,3,1))");
        check(&[0, 0, 1, 1, 0, 0, 1, 1, 0], "(vector,(0,2,2))");
        // A pattern that does not repeat is written whole.
        check(&[0, 1, 1, 0, 2], "(vector,(0,1,1),(1,1,2),(0,1,1),(2,1,1))");
        // One that repeats once, cut short, is shorter as the pattern.
        check(&[0, 1, 1, 0], "(vector,(0,1,1),(1,1,2))");
    }

    #[test]
    fn node_numbers_are_taken_in_order_of_first_rank() {
        check(&[5, 5, 2, 2], "(vector,(0,2,2))");
        check(&[1, 0, 1, 0], "(vector,(0,2,1))");
    }

    #[test]
    fn empty_when_it_cannot_be_given() {
        check(&[], "");
        check(&[0, u32::MAX, 1], "");
        // Too long for the client's buffer: 200 nodes with no pattern.
        let mut rng = fastrand::Rng::with_seed(7);
        let ranks: Vec<u32> = (0..400).map(|_| rng.u32(0..200)).collect();
        check(&ranks, "");
    }

    #[test]
    fn mpich_reads_back_every_placement() {
        let mut rng = fastrand::Rng::with_seed(42);
        for _ in 0..2000 {
            let size = rng.usize(1..64);
            let nodes = rng.u32(1..6);
            let ranks: Vec<u32> = match rng.u8(0..3) {
                // Blocks of random sizes.
                0 => {
                    let mut v = Vec::new();
                    let mut node = 0;
                    while v.len() < size {
                        v.extend(std::iter::repeat_n(node, rng.usize(1..6)));
                        node += 1;
                    }
                    v.truncate(size);
                    v
                }
                // A repeated random pattern.
                1 => {
                    let pattern: Vec<u32> = (0..rng.usize(1..8)).map(|_| rng.u32(0..nodes)).collect();
                    (0..size).map(|i| pattern[i % pattern.len()]).collect()
                }
                _ => (0..size).map(|_| rng.u32(0..nodes)).collect(),
            };
            let mapping = process_mapping(&ranks);
            assert!(!mapping.is_empty() && mapping.len() <= CLIENT_VALUE_MAX, "{ranks:?}");
            assert_eq!(
                mpich_reads(&mapping, ranks.len()).unwrap(),
                canonical(&ranks),
                "{ranks:?}: {mapping}"
            );
        }
    }

    #[test]
    fn the_period_is_the_smallest() {
        assert_eq!(smallest_period(&[0]), 1);
        assert_eq!(smallest_period(&[0, 0, 0]), 1);
        assert_eq!(smallest_period(&[0, 1, 0, 1, 0]), 2);
        assert_eq!(smallest_period(&[0, 1, 1]), 3);
        assert_eq!(smallest_period(&[0, 0, 1, 0, 0, 1, 0, 0]), 3);
    }
}
