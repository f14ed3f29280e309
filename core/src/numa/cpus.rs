//! Kubelet's CPU assignment (`pkg/kubelet/cm/cpumanager/cpu_assignment.go`, current
//! version, default "packed" sorting, no uncore-cache alignment) over a [`NumaMachine`]:
//! which free PUs a container with an integer CPU request gets.
//!
//! - [`CpuPlacement::Packed`] = `takeByTopologyNUMAPacked`: whole free NUMA nodes / sockets
//!   (the bigger unit first), then whole free cores, then single PUs, each list ordered so
//!   that the fullest units are used first (fewest free PUs, then lowest id).
//! - [`CpuPlacement::Spread`] = `takeByTopologyNUMADistributed` (kubelet option
//!   `distribute-cpus-across-numa`): spread the request evenly over the fewest NUMA nodes
//!   that can hold it, choosing the NUMA nodes that leave the free CPUs most balanced.
//!
//! Unlike Volcano's fork (volcano-semantics.md §8.5) a unit is "free" only when every PU of
//! it is free, and CPU ids are never compared with core or socket ids.

use super::{NumaFree, NumaMachine, NumaMask, PuInfo};

/// How to place a CPU request on a node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CpuPlacement {
    /// Kubelet's default `takeByTopologyNUMAPacked`.
    #[default]
    Packed,
    /// Kubelet's `takeByTopologyNUMADistributed` (`distribute-cpus-across-numa`).
    Spread,
}

/// Why [`take_cpus`] cannot give the PUs asked for; the text follows kubelet's messages.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CpuError {
    /// Fewer usable free PUs than requested.
    #[error("not enough cpus available to satisfy request: requested={requested}, available={available}")]
    NotEnough {
        /// PUs requested.
        requested: usize,
        /// Free PUs usable for the request (inside the mask, whole cores only if asked).
        available: usize,
    },
    /// Whole cores only (kubelet `full-pcpus-only`): the request must be a multiple of the
    /// core size (kubelet's SMTAlignmentError).
    #[error("whole cores only: requested {requested} cpus is not a multiple of the core size {core_size}")]
    NotWholeCores {
        /// PUs requested.
        requested: usize,
        /// PUs per core.
        core_size: usize,
    },
}

/// Picks `count` free PUs (indices into `machine.pus`), optionally only within `within` (a
/// NUMA mask; `None` = anywhere). The result is sorted ascending.
///
/// - `Packed`: kubelet `takeByTopologyNUMAPacked`. "numaFirst" when sockets >= NUMA nodes,
///   else "socketsFirst". Takes whole free first-level units (NUMA node or socket) whose size
///   fits the remaining need (too big ones are skipped, not a stop), then whole free
///   second-level units, then whole free cores, then single PUs. Ordering: ids by (#free
///   PUs ascending, id ascending); nested lists follow the hierarchy (numaFirst: NUMA →
///   sockets in it → cores in the socket; socketsFirst: socket → NUMA nodes in it → cores in
///   the NUMA node); the PUs of a core ascending. A unit is free when every PU of it is
///   free. Linear-ish in the number of PUs; no combinatorial search.
/// - `Spread`: kubelet `takeByTopologyNUMADistributed` with `cpuGroupSize` = PUs per core
///   (what the static policy passes). A request that is not a multiple of the group size,
///   or that no NUMA combination can hold evenly, falls back to `Packed`. See
///   [`EXACT_SPREAD_NUMA_LIMIT`] for the search bound on machines with many NUMA nodes.
/// - `full_cores` (kubelet `full-pcpus-only`): only cores whose PUs are all free (and inside
///   `within`) are candidates, and `count` must be a multiple of the core size, else
///   [`CpuError::NotWholeCores`]; no two tasks share a core.
///
/// Deterministic: the same inputs always give the same PUs.
pub fn take_cpus(
    machine: &NumaMachine,
    free: &NumaFree,
    within: Option<NumaMask>,
    count: usize,
    placement: CpuPlacement,
    full_cores: bool,
) -> Result<Vec<usize>, CpuError> {
    let topo = Topo::new(machine);
    let mut avail: Vec<bool> = machine
        .pus
        .iter()
        .enumerate()
        .map(|(i, p)| free.pus.get(i).copied().unwrap_or(false) && within.is_none_or(|w| w.contains(p.numa as usize)))
        .collect();
    if full_cores {
        if !count.is_multiple_of(topo.cpus_per_core) {
            return Err(CpuError::NotWholeCores {
                requested: count,
                core_size: topo.cpus_per_core,
            });
        }
        for c in 0..topo.core_total.len() {
            let pus = topo.core(c);
            if !pus.iter().all(|&p| avail[p]) {
                for &p in pus {
                    avail[p] = false;
                }
            }
        }
    }
    let mut out = match placement {
        CpuPlacement::Packed => topo.packed(&avail, count)?,
        CpuPlacement::Spread => topo.distributed(&avail, count, topo.cpus_per_core)?,
    };
    out.sort_unstable();
    Ok(out)
}

/// `Spread` searches NUMA combinations exactly like kubelet (every k-subset of the NUMA nodes
/// with free CPUs, and every subset of it for the remainder groups: about 3^n candidates in
/// the worst case) only while at most this many NUMA nodes have free CPUs. Beyond that
/// (24- and 34-NUMA machines) it evaluates, for each k, the one combination kubelet's
/// balance score favours: the k NUMA nodes with the most free CPUs (subtracting an equal
/// share from the largest values minimises the standard deviation of what remains), with the
/// remainder groups handed one at a time to the member with the most CPUs left. Feasibility
/// per k is unchanged (if the k fullest nodes cannot hold the request evenly, no k nodes
/// can), so the number of NUMA nodes used is kubelet's; only ties and rounding-level
/// differences of the balance score may pick other nodes of equal balance.
pub const EXACT_SPREAD_NUMA_LIMIT: usize = 10;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Numa,
    Socket,
}

/// The machine's hierarchy with per-unit PU totals (kubelet's `CPUTopology`).
struct Topo<'a> {
    pus: &'a [PuInfo],
    /// Kubelet: numaFirst iff NumSockets >= NumNUMANodes (both counted over the PUs).
    numa_first: bool,
    numa_total: Vec<usize>,
    socket_total: Vec<usize>,
    core_total: Vec<usize>,
    /// PUs of core id c, ascending: `core_list[core_start[c]..core_start[c + 1]]` (one
    /// allocation instead of one per core: this is built for every task).
    core_start: Vec<usize>,
    core_list: Vec<usize>,
    /// NUMA nodes that have PUs.
    numa_nodes: usize,
    /// Kubelet `CPUsPerCore` = PUs / cores (at least 1).
    cpus_per_core: usize,
}

fn distinct(v: &[usize]) -> usize {
    v.iter().filter(|n| **n > 0).count()
}

impl<'a> Topo<'a> {
    fn new(m: &'a NumaMachine) -> Self {
        let size = |f: fn(&PuInfo) -> u32| m.pus.iter().map(|p| f(p) as usize + 1).max().unwrap_or(0);
        let mut numa_total = vec![0; size(|p| p.numa)];
        let mut socket_total = vec![0; size(|p| p.socket)];
        let mut core_total = vec![0; size(|p| p.core)];
        for p in &m.pus {
            numa_total[p.numa as usize] += 1;
            socket_total[p.socket as usize] += 1;
            core_total[p.core as usize] += 1;
        }
        let mut core_start = Vec::with_capacity(core_total.len() + 1);
        core_start.push(0);
        for t in &core_total {
            core_start.push(core_start[core_start.len() - 1] + t);
        }
        let mut fill = core_start.clone();
        let mut core_list = vec![0; m.pus.len()];
        for (i, p) in m.pus.iter().enumerate() {
            let c = p.core as usize;
            core_list[fill[c]] = i;
            fill[c] += 1;
        }
        let (numas, sockets, cores) = (distinct(&numa_total), distinct(&socket_total), distinct(&core_total));
        Self {
            pus: &m.pus,
            numa_first: sockets >= numas,
            numa_nodes: numas.max(1),
            cpus_per_core: m.pus.len().checked_div(cores).unwrap_or(1).max(1),
            numa_total,
            socket_total,
            core_total,
            core_start,
            core_list,
        }
    }

    /// The PUs of core `c`, ascending.
    fn core(&self, c: usize) -> &[usize] {
        &self.core_list[self.core_start[c]..self.core_start[c + 1]]
    }

    fn id(&self, pu: usize, level: Level) -> usize {
        match level {
            Level::Numa => self.pus[pu].numa as usize,
            Level::Socket => self.pus[pu].socket as usize,
        }
    }

    fn total(&self, level: Level) -> &[usize] {
        match level {
            Level::Numa => &self.numa_total,
            Level::Socket => &self.socket_total,
        }
    }

    fn levels(&self) -> (Level, Level) {
        if self.numa_first {
            (Level::Numa, Level::Socket)
        } else {
            (Level::Socket, Level::Numa)
        }
    }

    /// Free PUs per unit of `level`.
    fn counts(&self, avail: &[bool], level: Level) -> Vec<usize> {
        let mut c = vec![0; self.total(level).len()];
        for (i, _) in avail.iter().enumerate().filter(|(_, a)| **a) {
            c[self.id(i, level)] += 1;
        }
        c
    }

    fn core_counts(&self, avail: &[bool]) -> Vec<usize> {
        (0..self.core_total.len())
            .map(|c| self.core(c).iter().filter(|&&p| avail[p]).count())
            .collect()
    }

    /// Kubelet's sort helpers: first-level ids (flat), second-level ids (nested under the
    /// first level) and core ids (nested under the second level), each group ordered by
    /// (#free PUs ascending, id ascending); only units with a free PU; first occurrence
    /// kept when a unit appears under two parents.
    fn order(&self, avail: &[bool]) -> Order {
        let (l1, l2) = self.levels();
        let (c1, c2, cc) = (self.counts(avail, l1), self.counts(avail, l2), self.core_counts(avail));
        let mut first: Vec<usize> = (0..c1.len()).filter(|&i| c1[i] > 0).collect();
        first.sort_by_key(|&i| (c1[i], i));
        let free_pus: Vec<usize> = (0..avail.len()).filter(|&i| avail[i]).collect();
        let second = nested(&first, &free_pus, &c2, |p| self.id(p, l1), |p| self.id(p, l2));
        let cores = nested(
            &second,
            &free_pus,
            &cc,
            |p| self.id(p, l2),
            |p| self.pus[p].core as usize,
        );
        Order { first, second, cores }
    }

    /// Kubelet `takeByTopologyNUMAPacked` over the PUs marked in `avail`.
    fn packed(&self, avail: &[bool], count: usize) -> Result<Vec<usize>, CpuError> {
        let available = avail.iter().filter(|a| **a).count();
        if count == 0 {
            return Ok(Vec::new());
        }
        if count > available {
            return Err(CpuError::NotEnough {
                requested: count,
                available,
            });
        }
        let mut acc = Acc {
            avail: avail.to_vec(),
            need: count,
            result: Vec::with_capacity(count),
        };
        let (l1, l2) = self.levels();
        // 1. Whole free first-level units, then whole free second-level units.
        for (level, is_first) in [(l1, true), (l2, false)] {
            let counts = self.counts(&acc.avail, level);
            let total = self.total(level);
            // Nothing whole and small enough at this level: skip the (costly) ordering.
            if !(0..counts.len()).any(|id| counts[id] > 0 && counts[id] == total[id] && acc.need >= total[id]) {
                continue;
            }
            let order = self.order(&acc.avail);
            let ids = if is_first { order.first } else { order.second };
            for id in ids.into_iter().filter(|&id| counts[id] == total[id]) {
                if acc.need >= total[id] {
                    let pus: Vec<usize> = (0..acc.avail.len()).filter(|&p| self.id(p, level) == id).collect();
                    acc.take(&pus);
                }
            }
            if acc.need == 0 {
                return Ok(acc.result);
            }
        }
        // 2. Whole free cores.
        let order = self.order(&acc.avail);
        let counts = self.core_counts(&acc.avail);
        for c in order.cores.into_iter().filter(|&c| counts[c] == self.core_total[c]) {
            if acc.need >= self.core_total[c] {
                acc.take(self.core(c));
            }
        }
        if acc.need == 0 {
            return Ok(acc.result);
        }
        // 3. Single PUs, core by core in the sorted core order.
        let order = self.order(&acc.avail);
        let cpus: Vec<usize> = order
            .cores
            .iter()
            .flat_map(|&c| self.core(c).iter().copied().filter(|&p| acc.avail[p]))
            .collect();
        for p in cpus {
            acc.take(&[p]);
            if acc.need == 0 {
                break;
            }
        }
        Ok(acc.result)
    }

    /// Kubelet `takeByTopologyNUMADistributed` over the PUs marked in `avail`.
    fn distributed(&self, avail: &[bool], count: usize, group: usize) -> Result<Vec<usize>, CpuError> {
        let g = group.max(1);
        if !count.is_multiple_of(g) {
            return self.packed(avail, count);
        }
        let available = avail.iter().filter(|a| **a).count();
        if count == 0 {
            return Ok(Vec::new());
        }
        if count > available {
            return Err(CpuError::NotEnough {
                requested: count,
                available,
            });
        }
        // NUMA nodes with free PUs in kubelet's sortAvailableNUMANodes order.
        let order = self.order(avail);
        let numas = if self.numa_first { order.first } else { order.second };
        let counts = self.counts(avail, Level::Numa);
        let free: Vec<usize> = numas.iter().map(|&n| counts[n]).collect();
        // rangeNUMANodesNeededToSatisfy (machine-wide totals, as kubelet).
        let groups = (self.pus.len().max(1) - 1) / g + 1;
        let groups_per_numa = (groups - 1) / self.numa_nodes + 1;
        let groups_needed = (count - 1) / g + 1;
        let min_numas = (groups_needed - 1) / groups_per_numa + 1;
        let max_numas = groups_needed.min(numas.len());
        for k in min_numas..=max_numas {
            let plan = if numas.len() <= EXACT_SPREAD_NUMA_LIMIT {
                best_combo_exact(&free, count, g, k)
            } else {
                best_combo_greedy(&free, count, g, k)
            };
            let Some(plan) = plan else { continue };
            let mut acc = Acc {
                avail: avail.to_vec(),
                need: count,
                result: Vec::with_capacity(count),
            };
            let takes = plan
                .combo
                .iter()
                .map(|&i| (i, plan.distribution))
                .chain(plan.remainder.iter().map(|&i| (i, g)));
            for (i, n) in takes {
                let numa = numas[i];
                let sub: Vec<bool> = (0..acc.avail.len())
                    .map(|p| acc.avail[p] && self.id(p, Level::Numa) == numa)
                    .collect();
                let got = self.packed(&sub, n)?;
                acc.take(&got);
            }
            if acc.need == 0 {
                return Ok(acc.result);
            }
        }
        self.packed(avail, count)
    }
}

struct Order {
    first: Vec<usize>,
    second: Vec<usize>,
    cores: Vec<usize>,
}

struct Acc {
    avail: Vec<bool>,
    need: usize,
    result: Vec<usize>,
}

impl Acc {
    fn take(&mut self, pus: &[usize]) {
        for &p in pus {
            if self.avail[p] {
                self.avail[p] = false;
                self.result.push(p);
                self.need = self.need.saturating_sub(1);
            }
        }
    }
}

/// A chosen spread: positions (into the sorted NUMA list) getting `distribution` PUs each,
/// then one `cpuGroupSize` group per entry of `remainder`, in order.
struct Plan {
    combo: Vec<usize>,
    distribution: usize,
    remainder: Vec<usize>,
}

/// Kubelet's mean / standard deviation, each rounded to 3 decimals.
fn std_dev(xs: &[usize]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let n = xs.len() as f64;
    let mean = (xs.iter().map(|&x| x as f64).sum::<f64>() / n * 1000.0).round() / 1000.0;
    let var = xs.iter().map(|&x| (x as f64 - mean) * (x as f64 - mean)).sum::<f64>() / n;
    (var.sqrt() * 1000.0).round() / 1000.0
}

/// Kubelet's iterateCombinations: k-subsets of 0..n in lexicographic order.
fn for_each_combination(n: usize, k: usize, f: &mut dyn FnMut(&[usize])) {
    fn rec(n: usize, k: usize, start: usize, acc: &mut Vec<usize>, f: &mut dyn FnMut(&[usize])) {
        if acc.len() == k {
            f(acc);
            return;
        }
        for i in start..=(n - (k - acc.len())) {
            acc.push(i);
            rec(n, k, i + 1, acc, f);
            acc.pop();
        }
    }
    if k >= 1 && k <= n {
        rec(n, k, 0, &mut Vec::with_capacity(k), f);
    }
}

/// Kubelet's remainder hand-out: cycle over `subset` taking one group from each member
/// with at least a group left, until `remainder` is covered. `None` if it cannot progress.
fn hand_out(after: &mut [usize], subset: &[usize], mut remainder: usize, g: usize) -> Option<Vec<usize>> {
    let mut seq = Vec::new();
    while remainder > 0 {
        let before = remainder;
        for &i in subset {
            if remainder == 0 {
                break;
            }
            if after[i] < g {
                continue;
            }
            after[i] -= g;
            remainder = remainder.saturating_sub(g);
            seq.push(i);
        }
        if remainder == before {
            return None;
        }
    }
    Some(seq)
}

/// Common checks of one combination; returns (distribution, free after the even share).
fn even_share(free: &[usize], combo: &[usize], count: usize, g: usize) -> Option<(usize, Vec<usize>)> {
    if combo.iter().map(|&i| free[i]).sum::<usize>() < count {
        return None;
    }
    if combo.iter().map(|&i| free[i] / g).sum::<usize>() * g < count {
        return None;
    }
    let distribution = count / combo.len() / g * g;
    if combo.iter().any(|&i| free[i] < distribution) {
        return None;
    }
    let mut after = free.to_vec();
    for &i in combo {
        after[i] -= distribution;
    }
    Some((distribution, after))
}

/// Kubelet's search for one k: every k-combination, every remainder subset (largest
/// first), lowest balance score wins, first found on ties.
fn best_combo_exact(free: &[usize], count: usize, g: usize, k: usize) -> Option<Plan> {
    let mut best: Option<(f64, Plan)> = None;
    for_each_combination(free.len(), k, &mut |combo| {
        if best.as_ref().is_some_and(|(b, _)| *b == 0.0) {
            return;
        }
        let Some((distribution, after)) = even_share(free, combo, count, g) else {
            return;
        };
        let remainder = count - distribution * combo.len();
        let mut local: Option<(f64, Vec<usize>)> = None;
        if remainder == 0 {
            local = Some((std_dev(&after), Vec::new()));
        } else {
            let candidates: Vec<usize> = combo.iter().copied().filter(|&i| after[i] >= g).collect();
            for kk in (1..=candidates.len()).rev() {
                for_each_combination(candidates.len(), kk, &mut |sub| {
                    let subset: Vec<usize> = sub.iter().map(|&j| candidates[j]).collect();
                    if subset.iter().map(|&i| after[i]).sum::<usize>() < remainder {
                        return;
                    }
                    let mut trial = after.clone();
                    let Some(seq) = hand_out(&mut trial, &subset, remainder, g) else {
                        return;
                    };
                    let score = std_dev(&trial);
                    if local.as_ref().is_none_or(|(b, _)| score < *b) {
                        local = Some((score, seq));
                    }
                });
            }
        }
        if let Some((score, seq)) = local
            && best.as_ref().is_none_or(|(b, _)| score < *b)
        {
            best = Some((
                score,
                Plan {
                    combo: combo.to_vec(),
                    distribution,
                    remainder: seq,
                },
            ));
        }
    });
    best.map(|(_, p)| p)
}

/// Bounded search for many NUMA nodes (see [`EXACT_SPREAD_NUMA_LIMIT`]).
fn best_combo_greedy(free: &[usize], count: usize, g: usize, k: usize) -> Option<Plan> {
    let mut by_free: Vec<usize> = (0..free.len()).collect();
    by_free.sort_by_key(|&i| (std::cmp::Reverse(free[i]), i));
    let mut combo: Vec<usize> = by_free.into_iter().take(k).collect();
    combo.sort_unstable();
    if combo.len() < k {
        return None;
    }
    let (distribution, mut after) = even_share(free, &combo, count, g)?;
    let mut remainder = count - distribution * k;
    let mut seq = Vec::new();
    while remainder > 0 {
        let &i = combo
            .iter()
            .filter(|&&i| after[i] >= g)
            .max_by_key(|&&i| (after[i], std::cmp::Reverse(i)))?;
        after[i] -= g;
        remainder = remainder.saturating_sub(g);
        seq.push(i);
    }
    Some(Plan {
        combo,
        distribution,
        remainder: seq,
    })
}

/// Child units of each parent in `parents` order (children of one parent by (#free PUs
/// ascending, id ascending)), from the free PUs; a child is listed under its first parent
/// only.
fn nested(
    parents: &[usize],
    free_pus: &[usize],
    counts: &[usize],
    parent_of: impl Fn(usize) -> usize,
    child_of: impl Fn(usize) -> usize,
) -> Vec<usize> {
    let mut out = Vec::new();
    let mut seen = vec![false; counts.len()];
    for &a in parents {
        let mut group: Vec<usize> = free_pus
            .iter()
            .filter(|&&p| parent_of(p) == a)
            .map(|&p| child_of(p))
            .filter(|&b| !seen[b])
            .collect();
        group.sort_by_key(|&b| (counts[b], b));
        group.dedup();
        for &b in &group {
            seen[b] = true;
        }
        out.extend(group);
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A machine whose PU index == OS cpu id; `f(cpu) = (core, socket, numa)`.
    fn machine(cpus: u32, f: impl Fn(u32) -> (u32, u32, u32)) -> NumaMachine {
        let pus: Vec<PuInfo> = (0..cpus)
            .map(|os| {
                let (core, socket, numa) = f(os);
                PuInfo { os, core, socket, numa }
            })
            .collect();
        let numas = pus.iter().map(|p| p.numa + 1).max().unwrap_or(1);
        let sockets = pus.iter().map(|p| p.socket + 1).max().unwrap_or(1);
        NumaMachine {
            numa_os: (0..numas).collect(),
            numa_memory: vec![0; numas as usize],
            pus,
            sockets,
            gpus: vec![],
        }
    }

    /// kubelet topoSingleSocketHT: 1 socket, 1 NUMA, core i = {i, i+4}.
    fn single_socket_ht() -> NumaMachine {
        machine(8, |c| (c % 4, 0, 0))
    }

    /// kubelet topoDualSocketHT: core i = {i, i+6}, socket = NUMA = i % 2.
    fn dual_socket_ht() -> NumaMachine {
        machine(12, |c| (c % 6, c % 2, c % 2))
    }

    /// kubelet topoDualSocketMultiNumaPerSocketHT: 40 cores {i, i+40}; NUMA n = cores
    /// 10n..10n+9; socket 0 = NUMA 0,1; socket 1 = NUMA 2,3.
    fn dual_socket_multi_numa_ht() -> NumaMachine {
        machine(80, |c| (c % 40, (c % 40) / 20, (c % 40) / 10))
    }

    /// Stand-in for kubelet's topoQuadSocketFourWayHT (not reconstructed): 4 sockets, 4 NUMA,
    /// 4 cores × 2 threads each; core i = {i, i+16}, socket = NUMA = i / 4.
    fn quad_socket_ht() -> NumaMachine {
        machine(32, |c| (c % 16, (c % 16) / 4, (c % 16) / 4))
    }

    /// kubelet's cpuset syntax: "0-6,10,12-13".
    fn set(s: &str) -> Vec<usize> {
        let mut v: Vec<usize> = s
            .split(',')
            .filter(|p| !p.is_empty())
            .flat_map(|p| match p.split_once('-') {
                Some((a, b)) => a.trim().parse::<usize>().unwrap()..=b.trim().parse::<usize>().unwrap(),
                None => {
                    let x = p.trim().parse::<usize>().unwrap();
                    x..=x
                }
            })
            .collect();
        v.sort_unstable();
        v
    }

    fn free_of(m: &NumaMachine, avail: &str) -> NumaFree {
        let a = set(avail);
        let mut f = m.all_free();
        for (i, x) in f.pus.iter_mut().enumerate() {
            *x = a.contains(&i);
        }
        f
    }

    fn mask(m: &NumaMachine, avail: &str) -> Vec<bool> {
        free_of(m, avail).pus
    }

    fn packed(m: &NumaMachine, avail: &str, n: usize) -> Result<Vec<usize>, CpuError> {
        take_cpus(m, &free_of(m, avail), None, n, CpuPlacement::Packed, false)
    }

    /// takeByTopologyNUMADistributed with an explicit cpuGroupSize (as kubelet's tests do).
    fn distributed(m: &NumaMachine, avail: &str, n: usize, g: usize) -> Result<Vec<usize>, CpuError> {
        Topo::new(m).distributed(&mask(m, avail), n, g).map(|mut v| {
            v.sort_unstable();
            v
        })
    }

    type Want = Result<&'static str, CpuError>;
    /// (name, machine, available, request, expected).
    type Case = (&'static str, NumaMachine, &'static str, usize, Want);
    /// (name, machine, available, request, cpuGroupSize, expected).
    type GroupCase = (&'static str, NumaMachine, &'static str, usize, usize, Want);

    /// kubelet commonTakeByTopologyTestCases.
    fn common_cases() -> Vec<Case> {
        vec![
            (
                "take more cpus than are available from single socket with HT",
                single_socket_ht(),
                "0,2,4,6",
                5,
                Err(CpuError::NotEnough {
                    requested: 5,
                    available: 4,
                }),
            ),
            (
                "take zero cpus from single socket with HT",
                single_socket_ht(),
                "0-7",
                0,
                Ok(""),
            ),
            (
                "take one cpu from single socket with HT",
                single_socket_ht(),
                "0-7",
                1,
                Ok("0"),
            ),
            // cores {1,5},{6},{3,7}: the one-free-PU core 2 sorts first.
            (
                "take one cpu from single socket with HT, some cpus are taken",
                single_socket_ht(),
                "1,3,5,6,7",
                1,
                Ok("6"),
            ),
            (
                "take two cpus from single socket with HT",
                single_socket_ht(),
                "0-7",
                2,
                Ok("0,4"),
            ),
            (
                "take all cpus from single socket with HT",
                single_socket_ht(),
                "0-7",
                8,
                Ok("0-7"),
            ),
            // volcano-semantics §8.5: kubelet takes the whole free core {2,6}, Volcano {0,1}.
            (
                "take two cpus from single socket with HT, only one core totally free",
                single_socket_ht(),
                "0,1,2,3,6",
                2,
                Ok("2,6"),
            ),
            (
                "take a socket of cpus from dual socket with HT",
                dual_socket_ht(),
                "0-11",
                6,
                Ok("0,2,4,6,8,10"),
            ),
            (
                "take a socket of cpus from dual socket with multi-numa-per-socket with HT",
                dual_socket_multi_numa_ht(),
                "0-79",
                40,
                Ok("0-19,40-59"),
            ),
            (
                "take a NUMA node of cpus from dual socket with multi-numa-per-socket with HT",
                dual_socket_multi_numa_ht(),
                "0-79",
                20,
                Ok("0-9,40-49"),
            ),
            (
                "take a NUMA node of cpus from dual socket with multi-numa-per-socket with HT, with 1 NUMA node already taken",
                dual_socket_multi_numa_ht(),
                "10-39,50-79",
                20,
                Ok("10-19,50-59"),
            ),
            (
                "take a socket and a NUMA node of cpus from dual socket with multi-numa-per-socket with HT",
                dual_socket_multi_numa_ht(),
                "0-79",
                60,
                Ok("0-29,40-69"),
            ),
            // socketsFirst: socket 1 (free), then NUMA 1 (free, in the fuller socket 0).
            (
                "take a socket and a NUMA node of cpus from dual socket with multi-numa-per-socket with HT, a core taken",
                dual_socket_multi_numa_ht(),
                "1-39,41-79",
                60,
                Ok("10-39,50-79"),
            ),
        ]
    }

    fn check(name: &str, got: Result<Vec<usize>, CpuError>, want: &Result<&str, CpuError>) {
        match want {
            Ok(s) => assert_eq!(got, Ok(set(s)), "{name}"),
            Err(e) => assert_eq!(got.as_ref().err(), Some(e), "{name}"),
        }
    }

    #[test]
    fn kubelet_take_by_topology_numa_packed() {
        let mut cases = common_cases();
        cases.extend([
            // core 0 ({0,6}) taken: NUMA 0 is fuller, its first core is core 2.
            ("take one cpu from dual socket with HT - core from Socket 0", dual_socket_ht(), "1-5,7-11", 1, Ok("2")),
            (
                "allocate 4 full cores with 3 coming from the first NUMA node (filling it up) and 1 coming from the second NUMA node",
                dual_socket_ht(),
                "0-11",
                8,
                Ok("0,6,2,8,4,10,1,7"),
            ),
            (
                "allocate 32 full cores with 30 coming from the first 3 NUMA nodes (filling them up) and 2 coming from the fourth NUMA node",
                dual_socket_multi_numa_ht(),
                "0-79",
                64,
                Ok("0-29,40-69,30,31,70,71"),
            ),
        ]);
        for (name, m, avail, n, want) in &cases {
            check(name, packed(m, avail, *n), want);
        }
    }

    #[test]
    fn kubelet_take_by_topology_numa_distributed() {
        // kubelet runs the common cases with cpuGroupSize 1.
        let mut cases: Vec<GroupCase> = common_cases()
            .into_iter()
            .map(|(a, m, av, n, w)| (a, m, av, n, 1, w))
            .collect();
        let dsm = dual_socket_multi_numa_ht;
        cases.extend([
            ("allocate 4 full cores with 2 distributed across each NUMA node", dual_socket_ht(), "0-11", 8, 1, Ok("0,6,2,8,1,7,3,9")),
            (
                "allocate 32 full cores with 8 distributed across each NUMA node",
                dsm(),
                "0-79",
                64,
                1,
                Ok("0-7,10-17,20-27,30-37,40-47,50-57,60-67,70-77"),
            ),
            (
                "allocate 24 full cores with 8 distributed across the first 3 NUMA nodes",
                dsm(),
                "0-79",
                48,
                1,
                Ok("0-7,10-17,20-27,40-47,50-57,60-67"),
            ),
            (
                "allocate 24 full cores with 8 distributed across the first 3 NUMA nodes (taking all but 2 from the first NUMA node)",
                dsm(),
                "1-29,32-39,41-69,72-79",
                48,
                1,
                Ok("1-8,10-17,20-27,41-48,50-57,60-67"),
            ),
            (
                "allocate 24 full cores with 8 distributed across the last 3 NUMA nodes (even though all 8 could be allocated from the first NUMA node)",
                dsm(),
                "2-29,31-39,42-69,71-79",
                48,
                1,
                Ok("10-17,20-27,31-38,50-57,60-67,71-78"),
            ),
            (
                "allocate 8 full cores with 2 distributed across each NUMA node",
                dsm(),
                "0-2,10-12,20-22,30-32,40-41,50-51,60-61,70-71",
                16,
                1,
                Ok("0-1,10-11,20-21,30-31,40-41,50-51,60-61,70-71"),
            ),
            ("take one cpu from dual socket with HT - core from Socket 0", dual_socket_ht(), "1-5,7-11", 1, 1, Ok("1")),
            (
                "take one cpu from dual socket with HT - core from Socket 0 - cpuGroupSize 2",
                dual_socket_ht(),
                "1-5,7-11",
                1,
                2,
                Ok("2"),
            ),
            (
                "allocate 13 full cores distributed across the first 2 NUMA nodes",
                dsm(),
                "0-79",
                26,
                1,
                Ok("0-6,10-16,40-45,50-55"),
            ),
            (
                "allocate 13 full cores distributed across the first 2 NUMA nodes (cpuGroupSize 2)",
                dsm(),
                "0-79",
                26,
                2,
                Ok("0-6,10-15,40-46,50-55"),
            ),
            (
                "allocate 31 full cores with 15 CPUs distributed across each NUMA node and 1 CPU spilling over to each of NUMA 0, 1",
                dsm(),
                "0-79",
                62,
                1,
                Ok("0-7,10-17,20-27,30-37,40-47,50-57,60-66,70-76"),
            ),
            (
                "allocate 31 full cores with 14 CPUs distributed across each NUMA node and 2 CPUs spilling over to each of NUMA 0, 1, 2 (cpuGroupSize 2)",
                dsm(),
                "0-79",
                62,
                2,
                Ok("0-7,10-17,20-27,30-36,40-47,50-57,60-67,70-76"),
            ),
            (
                "allocate 31 full cores with 15 CPUs distributed across each NUMA node and 1 CPU spilling over to each of NUMA 2, 3 (to keep balance)",
                dsm(),
                "0-8,10-18,20-39,40-48,50-58,60-79",
                62,
                1,
                Ok("0-7,10-17,20-27,30-37,40-46,50-56,60-67,70-77"),
            ),
            (
                "allocate 31 full cores with 14 CPUs distributed across each NUMA node and 2 CPUs spilling over to each of NUMA 0, 2, 3 (to keep balance with cpuGroupSize 2)",
                dsm(),
                "0-8,10-18,20-39,40-48,50-58,60-79",
                62,
                2,
                Ok("0-7,10-16,20-27,30-37,40-47,50-56,60-67,70-77"),
            ),
            (
                "ensure bestRemainder chosen with NUMA nodes that have enough CPUs to satisfy the request",
                dsm(),
                "0-3,10-13,20-23,30-36,40-43,50-53,60-63,70-76",
                34,
                1,
                Ok("0-3,10-13,20-23,30-34,40-43,50-53,60-63,70-74"),
            ),
        ]);
        for (name, m, avail, n, g, want) in &cases {
            check(name, distributed(m, avail, *n, *g), want);
        }
    }

    #[test]
    fn kubelet_sort_orders() {
        // kubelet TestCPUAccumulatorFreeCPUs / FreeCores (packed sorting).
        let cpus = |m: &NumaMachine, avail: &str| {
            let t = Topo::new(m);
            let a = mask(m, avail);
            let order = t.order(&a);
            order
                .cores
                .iter()
                .flat_map(|&c| t.core(c).iter().copied().filter(|&p| a[p]))
                .collect::<Vec<_>>()
        };
        assert_eq!(cpus(&single_socket_ht(), "0-7"), [0, 4, 1, 5, 2, 6, 3, 7]);
        assert_eq!(cpus(&single_socket_ht(), "3-7"), [4, 5, 6, 3, 7]);
        assert_eq!(cpus(&dual_socket_ht(), "0-11"), [0, 6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11]);
        assert_eq!(cpus(&dual_socket_ht(), "1-11"), [6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11]);
        assert_eq!(cpus(&dual_socket_ht(), "1-5,7-11"), [2, 8, 4, 10, 1, 7, 3, 9, 5, 11]);
        // Free cores: dual socket HT, one core consumed from each socket → cores 2,4,3,5.
        let m = dual_socket_ht();
        let t = Topo::new(&m);
        let a = mask(&m, "2-5,8-11");
        let cc = t.core_counts(&a);
        let free: Vec<usize> = t
            .order(&a)
            .cores
            .into_iter()
            .filter(|&c| cc[c] == t.core_total[c])
            .collect();
        assert_eq!(free, [2, 4, 3, 5]);
    }

    #[test]
    fn quad_socket_packed_and_spread() {
        let m = quad_socket_ht();
        // numaFirst (4 sockets >= 4 NUMA): a whole NUMA node, the lowest id on ties.
        assert_eq!(packed(&m, "0-31", 8), Ok(set("0-3,16-19")));
        // NUMA 0 partly used (core 0 = {0,16} gone): NUMA 1 is free and fits 8 → taken whole.
        assert_eq!(packed(&m, "1-15,17-31", 8), Ok(set("4-7,20-23")));
        // 10 = NUMA 1 (free, 8) + the fullest NUMA 0's first free core {1,17}.
        assert_eq!(packed(&m, "1-15,17-31", 10), Ok(set("1,4-7,17,20-23")));
        // Spread 12 (6 cores, group = 2 PUs per core): at least 2 NUMA nodes of 4 cores are
        // needed, so 3 cores from each of the first two (all combinations balance equally).
        let got = take_cpus(&m, &m.all_free(), None, 12, CpuPlacement::Spread, false).unwrap();
        assert_eq!(got, set("0-2,4-6,16-18,20-22"));
        // NUMA 0 half used cannot take an even share of 6: the first feasible pair is NUMA 1, 2.
        let got = take_cpus(
            &m,
            &free_of(&m, "2,3,4-15,18,19,20-31"),
            None,
            12,
            CpuPlacement::Spread,
            false,
        )
        .unwrap();
        assert_eq!(got, set("4-6,8-10,20-22,24-26"));
    }

    #[test]
    fn within_restricts_to_the_mask() {
        let m = dual_socket_multi_numa_ht();
        let all = m.all_free();
        let got = take_cpus(&m, &all, Some(NumaMask::single(2)), 4, CpuPlacement::Packed, false).unwrap();
        assert_eq!(got, set("20,21,60,61"));
        let got = take_cpus(&m, &all, Some(NumaMask(0b1010)), 40, CpuPlacement::Packed, false).unwrap();
        assert_eq!(got, set("10-19,30-39,50-59,70-79"));
        let err = take_cpus(&m, &all, Some(NumaMask::single(3)), 21, CpuPlacement::Spread, false).unwrap_err();
        assert_eq!(
            err,
            CpuError::NotEnough {
                requested: 21,
                available: 20
            }
        );
        let got = take_cpus(&m, &all, Some(NumaMask(0b0110)), 8, CpuPlacement::Spread, false).unwrap();
        assert!(got.iter().all(|&p| matches!(m.pus[p].numa, 1 | 2)), "{got:?}");
        // 8 fit in one NUMA node: kubelet spreads only over as many nodes as needed.
        assert_eq!(got, set("10-13,50-53"));
        let got = take_cpus(&m, &all, Some(NumaMask(0b0110)), 24, CpuPlacement::Spread, false).unwrap();
        assert_eq!(got, set("10-15,20-25,50-55,60-65"));
        assert_eq!(
            take_cpus(&m, &all, Some(NumaMask(0)), 1, CpuPlacement::Packed, false),
            Err(CpuError::NotEnough {
                requested: 1,
                available: 0
            })
        );
    }

    #[test]
    fn not_enough_error_text_matches_kubelet() {
        let m = single_socket_ht();
        let err = packed(&m, "0,2,4,6", 5).unwrap_err();
        assert_eq!(
            err.to_string(),
            "not enough cpus available to satisfy request: requested=5, available=4"
        );
        // Free flags shorter than the PU list count as busy.
        let short = NumaFree {
            pus: vec![true; 3],
            ..NumaFree::default()
        };
        assert_eq!(
            take_cpus(&m, &short, None, 4, CpuPlacement::Spread, false),
            Err(CpuError::NotEnough {
                requested: 4,
                available: 3
            })
        );
    }

    #[test]
    fn full_cores_only_takes_whole_free_cores() {
        let m = single_socket_ht();
        let f = free_of(&m, "0,1,2,3,6");
        let take = |n, p| take_cpus(&m, &f, None, n, p, true);
        assert_eq!(take(2, CpuPlacement::Packed), Ok(vec![2, 6]));
        assert_eq!(take(2, CpuPlacement::Spread), Ok(vec![2, 6]));
        assert_eq!(
            take(4, CpuPlacement::Packed),
            Err(CpuError::NotEnough {
                requested: 4,
                available: 2
            })
        );
        assert_eq!(
            take(3, CpuPlacement::Packed),
            Err(CpuError::NotWholeCores {
                requested: 3,
                core_size: 2
            })
        );
        assert_eq!(take(0, CpuPlacement::Packed), Ok(vec![]));
        // Without full_cores a half-busy core may be used.
        assert_eq!(
            take_cpus(&m, &f, None, 3, CpuPlacement::Packed, false),
            Ok(vec![0, 2, 6])
        );
        // Several tasks in a row never share a core.
        let m = dual_socket_ht();
        let mut f = m.all_free();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..3 {
            let got = take_cpus(&m, &f, None, 4, CpuPlacement::Packed, true).unwrap();
            let cores: std::collections::BTreeSet<u32> = got.iter().map(|&p| m.pus[p].core).collect();
            assert_eq!(cores.len(), 2);
            assert!(cores.is_disjoint(&seen));
            seen.extend(cores);
            for p in got {
                f.pus[p] = false;
            }
        }
    }

    #[test]
    fn deterministic_and_sorted() {
        let m = dual_socket_multi_numa_ht();
        let f = free_of(&m, "1-29,32-39,41-69,72-79");
        for placement in [CpuPlacement::Packed, CpuPlacement::Spread] {
            for n in [1, 2, 7, 24, 48, 62] {
                let a = take_cpus(&m, &f, None, n, placement, false).unwrap();
                assert_eq!(a.len(), n);
                assert!(a.windows(2).all(|w| w[0] < w[1]));
                assert!(a.iter().all(|&p| f.pus[p]));
                for _ in 0..3 {
                    assert_eq!(take_cpus(&m, &f, None, n, placement, false).unwrap(), a);
                }
            }
        }
    }

    /// 34 NUMA nodes, 2 sockets, 384 PUs (NUMA sizes 12 or 10): every request is met from free
    /// PUs, and Spread stays even.
    #[test]
    fn large_machine_takes_free_pus_and_spreads_evenly() {
        // 192 cores; core c -> NUMA by cumulative sizes (22 nodes × 6 cores + 12 nodes × 5 cores).
        let numa_of = |core: u32| if core < 132 { core / 6 } else { 22 + (core - 132) / 5 };
        let m = machine(384, |c| {
            let core = c % 192;
            let numa = numa_of(core);
            (core, numa / 17, numa)
        });
        assert_eq!(m.numa_count(), 34);
        let mut f = m.all_free();
        for p in (0..384).step_by(7) {
            f.pus[p] = false;
        }
        for n in [1, 3, 16, 64, 100, 200, 300] {
            for placement in [CpuPlacement::Packed, CpuPlacement::Spread] {
                let got = take_cpus(&m, &f, None, n, placement, false).unwrap();
                assert_eq!(got.len(), n);
                assert!(got.iter().all(|&p| f.pus[p]));
            }
        }
        // 68 PUs spread = 34 groups of 2 over the minimum number of NUMA nodes, evenly.
        let got = take_cpus(&m, &m.all_free(), None, 68, CpuPlacement::Spread, true).unwrap();
        let mut per = vec![0; 34];
        for &p in &got {
            per[m.pus[p].numa as usize] += 1;
        }
        let used: Vec<usize> = per.iter().copied().filter(|&x| x > 0).collect();
        assert!(used.iter().max().unwrap() - used.iter().min().unwrap() <= 2, "{per:?}");
    }
}
