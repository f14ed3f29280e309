//! Union-find over dense indices, for grouping leaves by shared hosts and tiers by
//! shared upper switches.

pub(crate) struct UnionFind {
    parent: Vec<usize>,
}

impl UnionFind {
    pub(crate) fn new(n: usize) -> Self {
        UnionFind {
            parent: (0..n).collect(),
        }
    }

    pub(crate) fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }

    /// Joins the sets of `a` and `b`; the smaller root wins, so roots are deterministic.
    pub(crate) fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            let (keep, drop) = if ra < rb { (ra, rb) } else { (rb, ra) };
            self.parent[drop] = keep;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_transitively() {
        let mut uf = UnionFind::new(5);
        uf.union(3, 4);
        uf.union(1, 4);
        assert_eq!(uf.find(3), 1);
        assert_ne!(uf.find(0), uf.find(1));
    }
}
