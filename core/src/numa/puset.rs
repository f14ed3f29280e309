//! The PUs a task is given, as runs of consecutive indices: a whole socket or a packed
//! set is one or two runs, so an assignment kept for a task's life (and for the status of
//! its finished job) costs a few bytes, not eight per PU.

/// Ascending, distinct indices into a machine's PUs, stored as `[start, end)` runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PuSet {
    runs: Box<[(u32, u32)]>,
    len: u32,
}

impl PuSet {
    /// From indices in any order (duplicates count once).
    pub fn from_indices(mut pus: Vec<usize>) -> Self {
        pus.sort_unstable();
        pus.dedup();
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for p in pus.iter().filter_map(|&p| u32::try_from(p).ok()) {
            match runs.last_mut() {
                Some(r) if r.1 == p => r.1 = p + 1,
                _ => runs.push((p, p.saturating_add(1))),
            }
        }
        let len = runs.iter().map(|r| r.1 - r.0).sum();
        Self {
            runs: runs.into_boxed_slice(),
            len,
        }
    }

    /// Number of PUs.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// No PU at all.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The indices, ascending.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.runs.iter().flat_map(|&(a, b)| (a as usize)..(b as usize))
    }

    /// Whether PU index `p` is in the set.
    pub fn contains(&self, p: usize) -> bool {
        u32::try_from(p).is_ok_and(|p| {
            let i = self.runs.partition_point(|r| r.1 <= p);
            self.runs.get(i).is_some_and(|r| r.0 <= p)
        })
    }

    /// The indices, ascending, as a vector.
    pub fn to_vec(&self) -> Vec<usize> {
        self.iter().collect()
    }
}

impl FromIterator<usize> for PuSet {
    fn from_iter<I: IntoIterator<Item = usize>>(it: I) -> Self {
        Self::from_indices(it.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_round_trip_in_order() {
        let s = PuSet::from_indices(vec![17, 0, 1, 2, 3, 16, 2, 40]);
        assert_eq!(s.to_vec(), [0, 1, 2, 3, 16, 17, 40]);
        assert_eq!(s.len(), 7);
        assert_eq!(s.runs.len(), 3);
        assert!(s.contains(16) && s.contains(3) && s.contains(40));
        assert!(!s.contains(4) && !s.contains(15) && !s.contains(41) && !s.contains(usize::MAX));
        assert!(PuSet::default().is_empty() && PuSet::from_indices(Vec::new()).iter().next().is_none());
    }

    #[test]
    fn a_whole_socket_is_one_run() {
        let s: PuSet = (0..64).chain(128..192).collect();
        assert_eq!(s.runs.len(), 2);
        assert_eq!(s.len(), 128);
        assert_eq!(s.iter().last(), Some(191));
    }
}
