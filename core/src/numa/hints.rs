//! Topology manager for one task on one node: per-resource NUMA hints (CPU, memory, GPUs)
//! and their merge under the four kubelet policies, with current kubelet semantics (the
//! `HintMerger` of kubelet ≥ 1.26, volcano-semantics.md §8.6), not Volcano's old merge.
//!
//! Kubelet enumerates every NUMA mask per provider and the cartesian product of the
//! providers' hints. That is 2^N masks and up to 2^(N·P) permutations: hopeless on 24- or
//! 34-NUMA machines. [`decide`] computes the same answer directly from the structure of
//! the hint sets (see [`decide`] for the derivation and the bounded searches).

use std::fmt;
use std::str::FromStr;

use super::{NumaFree, NumaMachine, NumaMask};

/// A topology hint: a set of NUMA nodes (`None` = any) and whether it is preferred.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hint {
    /// Dense NUMA nodes the resources come from; `None` = any (no preference).
    pub mask: Option<NumaMask>,
    /// Kubelet's preferred flag: the mask is a narrowest fit (merged: for every resource).
    pub preferred: bool,
}

/// Kubelet's topology-manager policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// No alignment: resources come from anywhere, every task is admitted.
    None,
    /// Aligns where it can and admits the task even when the hint is not preferred.
    BestEffort,
    /// Admits the task only when the merged hint is preferred.
    Restricted,
    /// Admits the task only when everything fits on one NUMA node.
    SingleNumaNode,
}

impl Policy {
    /// The kubelet spelling (`best-effort`), as in task specs and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::None => "none",
            Policy::BestEffort => "best-effort",
            Policy::Restricted => "restricted",
            Policy::SingleNumaNode => "single-numa-node",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A topology policy name that is none of [`Policy`]'s (the text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown topology policy {0:?} (expected none, best-effort, restricted or single-numa-node)")]
pub struct UnknownPolicy(pub String);

impl FromStr for Policy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Policy::None),
            "best-effort" => Ok(Policy::BestEffort),
            "restricted" => Ok(Policy::Restricted),
            "single-numa-node" => Ok(Policy::SingleNumaNode),
            _ => Err(UnknownPolicy(s.to_string())),
        }
    }
}

/// What one task asks for. Zero means "not requested" (that provider does not care).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// Whole PUs.
    pub cpus: usize,
    /// Bytes.
    pub memory: u64,
    /// Whole GPUs.
    pub gpus: usize,
}

/// The topology manager's answer for one task on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Whether the task may run on the node under the policy.
    pub admit: bool,
    /// The merged best hint.
    pub hint: Hint,
    /// Why not, when `!admit`.
    pub reason: Option<String>,
}

/// Total work units (search steps) one [`decide`] call may spend in its backtracking
/// searches. Never reached on machines with ≤ 8 NUMA nodes (tested against the
/// exhaustive algorithm); on big machines it bounds pathological cases, see [`decide`].
const SEARCH_BUDGET: u64 = 200_000;

/// Steps one [`Search::separable`] check may take (a share of [`SEARCH_BUDGET`]), so one
/// hard candidate cannot eat the whole budget.
const CHECK_BUDGET: u64 = 5_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Cpu,
    Memory,
    Gpu,
}

/// One resource's hint provider. Amounts per NUMA node are additive for PUs and memory;
/// for GPUs a GPU counts for a mask when its (non-empty) NUMA mask is inside it, so the
/// per-node amounts attribute each GPU to every node of its mask (an upper bound, exact
/// for single-NUMA GPUs) and exact amounts come from `gpus`.
struct Provider {
    #[allow(dead_code)]
    kind: Kind,
    request: u64,
    free_node: Vec<u64>,
    total_node: Vec<u64>,
    /// GPUs with NUMA info: (NUMA mask, free).
    gpus: Option<Vec<(NumaMask, bool)>>,
    /// `top[h][j]` = sum of the j largest per-node amounts among nodes `0..h` (free, total).
    free_top: Vec<Vec<u64>>,
    total_top: Vec<Vec<u64>>,
}

fn top_table(nodes: &[u64]) -> Vec<Vec<u64>> {
    let mut out = Vec::with_capacity(nodes.len() + 1);
    let mut sorted: Vec<u64> = Vec::with_capacity(nodes.len());
    for h in 0..=nodes.len() {
        let mut row = Vec::with_capacity(h + 1);
        row.push(0u64);
        let mut acc = 0u64;
        for v in &sorted {
            acc = acc.saturating_add(*v);
            row.push(acc);
        }
        out.push(row);
        if h < nodes.len() {
            let v = nodes[h];
            let pos = sorted.partition_point(|x| *x >= v);
            sorted.insert(pos, v);
        }
    }
    out
}

fn bits(m: u64) -> impl Iterator<Item = usize> {
    let mut m = m;
    std::iter::from_fn(move || {
        if m == 0 {
            None
        } else {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            Some(i)
        }
    })
}

impl Provider {
    fn new(
        kind: Kind,
        request: u64,
        free_node: Vec<u64>,
        total_node: Vec<u64>,
        gpus: Option<Vec<(NumaMask, bool)>>,
    ) -> Self {
        let free_top = top_table(&free_node);
        let total_top = top_table(&total_node);
        Self {
            kind,
            request,
            free_node,
            total_node,
            gpus,
            free_top,
            total_top,
        }
    }

    fn nodes(&self, total: bool) -> &[u64] {
        if total { &self.total_node } else { &self.free_node }
    }

    /// Upper bound of the amount inside `m` (exact except for multi-NUMA GPUs).
    fn ub(&self, m: u64, total: bool) -> u64 {
        let nodes = self.nodes(total);
        bits(m).fold(0u64, |a, i| a.saturating_add(nodes[i]))
    }

    /// Exact amount inside `m`.
    fn amount(&self, m: u64, total: bool) -> u64 {
        match &self.gpus {
            Some(gpus) => gpus
                .iter()
                .filter(|(g, free)| (total || *free) && g.0 & !m == 0)
                .count() as u64,
            None => self.ub(m, total),
        }
    }

    /// Sum of the j largest per-node amounts among nodes `0..h`.
    fn top(&self, total: bool, h: usize, j: usize) -> u64 {
        let row = if total { &self.total_top[h] } else { &self.free_top[h] };
        row[j.min(row.len() - 1)]
    }
}

struct Search {
    n: usize,
    budget: u64,
    /// Steps left for the current [`Search::separable`] check.
    local: u64,
    /// A budget ran out at least once: the answer may differ from kubelet's.
    exhausted: bool,
}

impl Search {
    /// Spend one step; true when the budget is gone.
    fn tick(&mut self) -> bool {
        if self.budget == 0 || self.local == 0 {
            self.exhausted = true;
            return true;
        }
        self.budget -= 1;
        self.local -= 1;
        false
    }

    /// The numerically smallest mask of `k` nodes in which every provider's amount
    /// (free or total) reaches its request. Bits are chosen from the top, each as low as
    /// possible, so the first hit is the smallest number; a branch is cut when the chosen
    /// nodes plus the `j` largest remaining amounts below it cannot reach a request.
    fn smallest_of_size(&mut self, ps: &[&Provider], total: bool, k: usize) -> Option<NumaMask> {
        if k == 0 || k > self.n {
            return None;
        }
        self.rec(ps, total, 0, k, self.n).map(NumaMask)
    }

    fn rec(&mut self, ps: &[&Provider], total: bool, chosen: u64, j: usize, hi: usize) -> Option<u64> {
        if j == 0 {
            return ps
                .iter()
                .all(|p| p.amount(chosen, total) >= p.request)
                .then_some(chosen);
        }
        for h in (j - 1)..hi {
            if self.tick() {
                return None;
            }
            let m = chosen | (1u64 << h);
            if ps
                .iter()
                .all(|p| p.ub(m, total).saturating_add(p.top(total, h, j - 1)) >= p.request)
                && let Some(r) = self.rec(ps, total, m, j - 1, h)
            {
                return Some(r);
            }
        }
        None
    }

    /// The narrowest mask (fewest nodes, then smallest number) reaching the provider's
    /// request: its size is kubelet's `minAffinitySize` (total) or the bit count of the
    /// provider's narrowest hint (free).
    fn narrowest(&mut self, p: &Provider, total: bool) -> Option<NumaMask> {
        // Additive amounts never backtrack (the bound is exact): at most n·k steps, so
        // no budget; multi-NUMA GPUs may, and share the budget.
        let additive = p.gpus.is_none();
        let saved = self.budget;
        if additive {
            self.budget = u64::MAX;
        }
        let mut found = None;
        for k in 1..=self.n {
            if p.top(total, self.n, k) < p.request {
                continue;
            }
            if let Some(m) = self.smallest_of_size(&[p], total, k) {
                found = Some(m);
                break;
            }
        }
        if additive {
            self.budget = saved;
        }
        found
    }

    /// Whether `x` is the AND of one free hint per provider: every node outside `x` must
    /// be left out of at least one provider's mask (exactly one, as hint sets are closed
    /// under supersets), each provider keeping enough. A node where some provider has
    /// nothing is left out of that one for free; the others are branched on, biggest
    /// first. Cuts: a provider falling below its request, and the total slack (in units
    /// of each request) falling below the least each remaining node must cost. One check
    /// gets at most [`CHECK_BUDGET`] steps; past that `x` counts as not separable.
    fn separable(&mut self, ps: &[&Provider], x: u64) -> bool {
        let all = NumaMask::all(self.n).0;
        let mut ub: Vec<u64> = ps.iter().map(|p| p.ub(all, false)).collect();
        let mut excl = vec![0u64; ps.len()];
        let mut contested = Vec::new();
        for i in bits(all & !x) {
            match ps.iter().position(|p| p.free_node[i] == 0) {
                Some(q) => excl[q] |= 1u64 << i,
                None => contested.push(i),
            }
        }
        let rel = |q: usize, i: usize| ps[q].free_node[i] as f64 / ps[q].request as f64;
        let most = |i: usize| (0..ps.len()).map(|q| rel(q, i)).fold(0.0, f64::max);
        contested.sort_by(|a, b| most(*b).total_cmp(&most(*a)).then(a.cmp(b)));
        let mut least = vec![0.0f64; contested.len() + 1];
        for k in (0..contested.len()).rev() {
            let i = contested[k];
            least[k] = least[k + 1] + (0..ps.len()).map(|q| rel(q, i)).fold(f64::INFINITY, f64::min);
        }
        self.local = CHECK_BUDGET;
        let ok = self.assign(ps, &contested, &least, &mut ub, &mut excl);
        self.local = u64::MAX;
        ok
    }

    fn assign(&mut self, ps: &[&Provider], nodes: &[usize], least: &[f64], ub: &mut [u64], excl: &mut [u64]) -> bool {
        if self.tick() {
            return false;
        }
        let slack: f64 = ps
            .iter()
            .zip(ub.iter())
            .map(|(p, u)| u.saturating_sub(p.request) as f64 / p.request as f64)
            .sum();
        if slack < least[0] * (1.0 - 1e-9) - 1e-9 {
            return false;
        }
        let Some((&i, rest)) = nodes.split_first() else {
            let all = NumaMask::all(self.n).0;
            return ps
                .iter()
                .zip(excl.iter())
                .all(|(p, e)| p.amount(all & !e, false) >= p.request);
        };
        // Leave the node out of the provider with the most slack first.
        let mut order: Vec<usize> = (0..ps.len()).collect();
        order.sort_by_key(|&q| {
            std::cmp::Reverse(ub[q].saturating_sub(ps[q].request).saturating_sub(ps[q].free_node[i]))
        });
        for q in order {
            let d = ps[q].free_node[i];
            if ub[q].saturating_sub(d) < ps[q].request {
                continue;
            }
            ub[q] -= d;
            excl[q] |= 1u64 << i;
            let ok = self.assign(ps, rest, &least[1..], ub, excl);
            ub[q] += d;
            excl[q] &= !(1u64 << i);
            if ok {
                return true;
            }
        }
        false
    }
}

fn describe(req: &Request, free: bool) -> String {
    let f = if free { "free " } else { "" };
    let mut parts = Vec::new();
    if req.cpus > 0 {
        parts.push(format!("{} {f}PUs", req.cpus));
    }
    if req.memory > 0 {
        parts.push(format!(
            "{} of {f}memory",
            hyperplan_shared::quantity::format_quantity(hyperplan_shared::MEMORY, req.memory)
        ));
    }
    if req.gpus > 0 {
        parts.push(format!("{} GPUs", req.gpus));
    }
    match parts.len() {
        0 => "nothing".to_string(),
        1 => parts.remove(0),
        _ => {
            let last = parts.pop().unwrap_or_default();
            format!("{} and {last}", parts.join(", "))
        }
    }
}

/// Build the providers for the requested resources.
fn providers(machine: &NumaMachine, free: &NumaFree, req: &Request, n: usize) -> Vec<Provider> {
    let mut out = Vec::new();
    if req.cpus > 0 {
        let mut fr = vec![0u64; n];
        let mut tot = vec![0u64; n];
        for (i, pu) in machine.pus.iter().enumerate() {
            let numa = (pu.numa as usize).min(n - 1);
            tot[numa] += 1;
            if free.pus.get(i).copied().unwrap_or(false) {
                fr[numa] += 1;
            }
        }
        out.push(Provider::new(Kind::Cpu, req.cpus as u64, fr, tot, None));
    }
    if req.memory > 0 {
        let tot: Vec<u64> = (0..n)
            .map(|i| machine.numa_memory.get(i).copied().unwrap_or(0))
            .collect();
        let fr: Vec<u64> = (0..n).map(|i| free.memory.get(i).copied().unwrap_or(0)).collect();
        out.push(Provider::new(Kind::Memory, req.memory, fr, tot, None));
    }
    let all = NumaMask::all(n).0;
    let gpus: Vec<(NumaMask, bool)> = machine
        .gpus
        .iter()
        .enumerate()
        .map(|(j, g)| (NumaMask(g.numa.0 & all), free.gpus.get(j).copied().unwrap_or(false)))
        .filter(|(m, _)| !m.is_empty())
        .collect();
    // Like kubelet's device manager: devices without NUMA information give no hints.
    if req.gpus > 0 && !gpus.is_empty() {
        let mut fr = vec![0u64; n];
        let mut tot = vec![0u64; n];
        for (m, f) in &gpus {
            for i in m.iter() {
                tot[i] += 1;
                if *f {
                    fr[i] += 1;
                }
            }
        }
        let single = gpus.iter().all(|(m, _)| m.count() == 1);
        out.push(Provider::new(
            Kind::Gpu,
            req.gpus as u64,
            fr,
            tot,
            (!single).then_some(gpus),
        ));
    }
    out
}

/// The topology manager's decision for a task asking `req` on `machine` with `free` free.
///
/// **Hint sets.** A requested provider's hints are the masks M whose free amount reaches
/// the request (`H_p`, closed under supersets, containing all nodes when non-empty);
/// preferred iff |M| = `min_p` (smallest size whose *total* reaches the request). An
/// unrequested provider gives `{any, preferred}`, a requested one without hints
/// `{any, not preferred}`.
///
/// **Merge without the product.** A merged hint is preferred iff every provider's mask
/// is the same M with |M| = `min_p`: so a preferred hint exists only when all `min_p`
/// are equal (= m), and the best one is the numerically smallest m-node mask in every
/// `H_p` (searched directly, pruned by the largest free amounts). Otherwise kubelet's
/// compare over non-preferred candidates is order-independent and ends at the narrowest
/// candidate of bit count B = max over providers of their narrowest hint's count, and
/// such a candidate always exists (that provider's narrowest hint ANDed with all nodes).
/// A candidate X is the AND of one hint per provider iff the nodes outside X can be
/// split so that each provider keeps enough (`Search::separable`); B-node masks are
/// tried in increasing numeric order below the known candidate. single-numa-node keeps
/// preferred one-node hints only: the answer is the lowest node fitting everything, and
/// only when every `min_p` is 1.
///
/// **Bounds.** Single-resource searches never backtrack (the "largest free amounts"
/// bound is exact for PUs and memory): at most n·k steps per size. The joint searches
/// (preferred mask for several resources, separability of a candidate) share a budget of
/// `SEARCH_BUDGET` steps, one separability check at most `CHECK_BUDGET`. When a
/// budget runs out (only with many NUMA nodes that all hold several requested resources,
/// e.g. CPU + memory on 24 nodes, badly fragmented; never with ≤ 8 NUMA nodes), the
/// preferred search reports "none" (the answer may be non-preferred where kubelet finds
/// a preferred one), a candidate whose separability check runs out counts as not
/// separable, and once the whole budget is gone the non-preferred search keeps the known
/// B-node candidate: always a hint kubelet could produce, possibly not the narrowest. Typical decisions take ~10 µs on 24- and 34-NUMA machines (release build);
/// the contested worst case in the tests, ~3 ms.
pub fn decide(machine: &NumaMachine, free: &NumaFree, req: &Request, policy: Policy) -> Decision {
    decide_with_budget(machine, free, req, policy, SEARCH_BUDGET).0
}

/// [`decide`] with an explicit search budget; also says whether the budget ran out.
fn decide_with_budget(
    machine: &NumaMachine,
    free: &NumaFree,
    req: &Request,
    policy: Policy,
    budget: u64,
) -> (Decision, bool) {
    if policy == Policy::None {
        let hint = Hint {
            mask: None,
            preferred: true,
        };
        return (
            Decision {
                admit: true,
                hint,
                reason: None,
            },
            false,
        );
    }
    let n = machine.numa_count().clamp(1, 64);
    let all = NumaMask::all(n);
    let ps = providers(machine, free, req, n);
    let mut search = Search {
        n,
        budget,
        local: u64::MAX,
        exhausted: false,
    };

    // Per provider: narrowest free hint (None = no hints at all), minAffinitySize.
    let mut live: Vec<&Provider> = Vec::new();
    let mut any_empty = false;
    let mut min_sizes = Vec::new();
    let mut narrowest = Vec::new();
    for p in &ps {
        if p.amount(all.0, false) < p.request {
            any_empty = true;
            continue;
        }
        let nar = search.narrowest(p, false).unwrap_or(all);
        let min = search.narrowest(p, true).map_or(n as u32, |m| m.count());
        live.push(p);
        min_sizes.push(min);
        narrowest.push(nar);
    }

    if policy == Policy::SingleNumaNode {
        let single = !any_empty && !live.is_empty() && min_sizes.iter().all(|m| *m == 1);
        let node = if single {
            (0..n).find(|&i| live.iter().all(|p| p.amount(1u64 << i, false) >= p.request))
        } else {
            None
        };
        let hint = match node {
            Some(i) if NumaMask::single(i) != all => Hint {
                mask: Some(NumaMask::single(i)),
                preferred: true,
            },
            Some(_) => Hint {
                mask: None,
                preferred: true,
            },
            None if ps.is_empty() => Hint {
                mask: None,
                preferred: true,
            },
            None => Hint {
                mask: None,
                preferred: false,
            },
        };
        let reason = (!hint.preferred).then(|| format!("single-numa-node: no NUMA node has {}", describe(req, true)));
        let d = Decision {
            admit: hint.preferred,
            hint,
            reason,
        };
        return (d, search.exhausted);
    }

    let hint = merge(&mut search, &live, any_empty, &min_sizes, &narrowest, all);
    let admit = policy == Policy::BestEffort || hint.preferred;
    let reason = (!admit).then(|| {
        format!(
            "restricted: no preferred NUMA alignment for {} (best: NUMA nodes {})",
            describe(req, false),
            hint.mask.map_or_else(|| "any".to_string(), |m| machine.os_list(m))
        )
    });
    (Decision { admit, hint, reason }, search.exhausted)
}

fn merge(
    search: &mut Search,
    live: &[&Provider],
    any_empty: bool,
    min_sizes: &[u32],
    narrowest: &[NumaMask],
    all: NumaMask,
) -> Hint {
    if live.is_empty() {
        // Only `any` hints: one candidate, all nodes, preferred iff nobody lacked hints.
        return Hint {
            mask: Some(all),
            preferred: !any_empty,
        };
    }
    if !any_empty
        && let Some(&m) = min_sizes.first()
        && min_sizes.iter().all(|x| *x == m)
        && let Some(mask) = search.smallest_of_size(live, false, m as usize)
    {
        return Hint {
            mask: Some(mask),
            preferred: true,
        };
    }
    let b = narrowest.iter().map(|m| m.count()).max().unwrap_or(0);
    let known = narrowest
        .iter()
        .filter(|m| m.count() == b)
        .min()
        .copied()
        .unwrap_or(all);
    if live.len() == 1 {
        return Hint {
            mask: Some(known),
            preferred: false,
        };
    }
    // B-node masks in increasing numeric order (Gosper's hack), below the known one.
    let mut x: u64 = if b >= 64 { u64::MAX } else { (1u64 << b) - 1 };
    while x < known.0 {
        if search.budget == 0 {
            break;
        }
        if search.separable(live, x) {
            return Hint {
                mask: Some(NumaMask(x)),
                preferred: false,
            };
        }
        let c = x & x.wrapping_neg();
        let r = x.wrapping_add(c);
        if r == 0 {
            break;
        }
        x = (((r ^ x) >> 2) / c) | r;
    }
    Hint {
        mask: Some(known),
        preferred: false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::{GpuInfo, PuInfo};
    use super::*;

    const GIB: u64 = 1 << 30;

    /// `cpus[i]` PUs, `mem[i]` bytes and `gpus[i]` single-NUMA GPUs on NUMA node i; two
    /// PUs per core; sockets = `sockets` (NUMA nodes split evenly).
    fn machine(cpus: &[usize], mem: &[u64], gpus: &[usize], sockets: u32) -> NumaMachine {
        let n = cpus.len();
        let mut pus = Vec::new();
        for (numa, &c) in cpus.iter().enumerate() {
            for _ in 0..c {
                let os = pus.len() as u32;
                let socket = (numa as u32 * sockets) / n as u32;
                pus.push(PuInfo {
                    os,
                    core: os / 2,
                    socket,
                    numa: numa as u32,
                });
            }
        }
        let mut gs = Vec::new();
        for (numa, &g) in gpus.iter().enumerate() {
            for _ in 0..g {
                gs.push(GpuInfo {
                    pci_bus_id: format!("0000:{:02x}:00.0", gs.len()),
                    numa: NumaMask::single(numa),
                });
            }
        }
        NumaMachine {
            numa_os: (0..n as u32).collect(),
            numa_memory: mem.to_vec(),
            pus,
            sockets,
            gpus: gs,
        }
    }

    fn dual_socket() -> NumaMachine {
        machine(&[8, 8], &[64 * GIB, 64 * GIB], &[2, 2], 2)
    }

    /// Free state: `busy_pus[i]` PUs of NUMA node i busy, GPUs `busy_gpus` busy.
    fn take(m: &NumaMachine, busy_pus: &[usize], busy_gpus: &[usize]) -> NumaFree {
        let mut f = m.all_free();
        let mut left = busy_pus.to_vec();
        for (i, pu) in m.pus.iter().enumerate() {
            let numa = pu.numa as usize;
            if left[numa] > 0 {
                left[numa] -= 1;
                f.pus[i] = false;
            }
        }
        for &g in busy_gpus {
            f.gpus[g] = false;
        }
        f
    }

    fn req(cpus: usize, memory: u64, gpus: usize) -> Request {
        Request { cpus, memory, gpus }
    }

    fn h(mask: u64, preferred: bool) -> Hint {
        Hint {
            mask: Some(NumaMask(mask)),
            preferred,
        }
    }

    // ---------------------------------------------------------------- reference

    /// Kubelet's exhaustive algorithm, verbatim in structure: per-provider hint lists over
    /// all masks, filterProvidersHints, single-numa filter, cartesian product,
    /// mergePermutation, HintMerger.compare with BestNonPreferredAffinityCount.
    fn reference(machine: &NumaMachine, free: &NumaFree, req: &Request, policy: Policy) -> Decision {
        if policy == Policy::None {
            return Decision {
                admit: true,
                hint: Hint {
                    mask: None,
                    preferred: true,
                },
                reason: None,
            };
        }
        let n = machine.numa_count();
        let all = NumaMask::all(n);
        let ps = providers(machine, free, req, n);
        // Provider "nothing requested" → [{nil, true}] (handled by the absence of a provider).
        let mut lists: Vec<Vec<Hint>> = Vec::new();
        for p in &ps {
            let mut min = n as u32;
            let mut hints = Vec::new();
            for m in 1..=all.0 {
                if p.amount(m, true) >= p.request && m.count_ones() < min {
                    min = m.count_ones();
                }
                if p.amount(m, false) >= p.request {
                    hints.push(NumaMask(m));
                }
            }
            let list: Vec<Hint> = hints
                .iter()
                .map(|m| Hint {
                    mask: Some(*m),
                    preferred: m.count() == min,
                })
                .collect();
            lists.push(if list.is_empty() {
                vec![Hint {
                    mask: None,
                    preferred: false,
                }]
            } else {
                list
            });
        }
        if lists.is_empty() {
            lists.push(vec![Hint {
                mask: None,
                preferred: true,
            }]);
        }
        if policy == Policy::SingleNumaNode {
            for l in &mut lists {
                l.retain(|h| h.preferred && h.mask.is_none_or(|m| m.count() == 1));
            }
        }
        // maxOfMinAffinityCounts
        let mut b = 0;
        for l in &lists {
            if let Some(nar) = l.iter().filter_map(|h| h.mask).min_by(|x, y| {
                if x.is_narrower_than(*y) {
                    std::cmp::Ordering::Less
                } else if y.is_narrower_than(*x) {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            }) {
                b = b.max(nar.count());
            }
        }
        let narrower = |cur: Hint, cand: Hint| {
            if cand.mask.unwrap().is_narrower_than(cur.mask.unwrap()) {
                cand
            } else {
                cur
            }
        };
        let compare = |cur: Option<Hint>, cand: Hint| -> Option<Hint> {
            let cc = cand.mask.unwrap().count();
            if cc == 0 {
                return cur;
            }
            let Some(cur) = cur else { return Some(cand) };
            if !cur.preferred && cand.preferred {
                return Some(cand);
            }
            if cur.preferred && !cand.preferred {
                return Some(cur);
            }
            if cur.preferred && cand.preferred {
                return Some(narrower(cur, cand));
            }
            let cu = cur.mask.unwrap().count();
            if cu > b {
                return Some(narrower(cur, cand));
            }
            if cu == b {
                return Some(if cc != b { cur } else { narrower(cur, cand) });
            }
            if cc > b {
                return Some(cur);
            }
            if cc == b {
                return Some(cand);
            }
            if cc > cu {
                return Some(cand);
            }
            if cc < cu {
                return Some(cur);
            }
            Some(narrower(cur, cand))
        };
        let mut best: Option<Hint> = None;
        let mut idx = vec![0usize; lists.len()];
        if lists.iter().all(|l| !l.is_empty()) {
            'outer: loop {
                let mut preferred = true;
                let mut first: Option<NumaMask> = None;
                let mut merged = all;
                for hh in lists.iter().zip(&idx).map(|(l, &i)| &l[i]) {
                    if let Some(m) = hh.mask {
                        if first.is_some_and(|f| f != m) {
                            preferred = false;
                        }
                        first.get_or_insert(m);
                        merged = merged.and(m);
                    }
                    if !hh.preferred {
                        preferred = false;
                    }
                }
                best = compare(
                    best,
                    Hint {
                        mask: Some(merged),
                        preferred,
                    },
                );
                let mut k = 0;
                loop {
                    if k == lists.len() {
                        break 'outer;
                    }
                    idx[k] += 1;
                    if idx[k] < lists[k].len() {
                        break;
                    }
                    idx[k] = 0;
                    k += 1;
                }
            }
        }
        let mut best = best.unwrap_or(Hint {
            mask: Some(all),
            preferred: false,
        });
        if policy == Policy::SingleNumaNode && best.mask == Some(all) {
            best.mask = None;
        }
        let admit = policy == Policy::BestEffort || best.preferred;
        Decision {
            admit,
            hint: best,
            reason: None,
        }
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            if n == 0 { 0 } else { self.next() % n }
        }
    }

    const POLICIES: [Policy; 4] = [
        Policy::None,
        Policy::BestEffort,
        Policy::Restricted,
        Policy::SingleNumaNode,
    ];

    #[test]
    fn matches_exhaustive_kubelet_on_small_machines() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut cases = 0;
        for &n in &[1usize, 2, 4, 8] {
            for _ in 0..150 {
                // Irregular machines: some nodes without CPUs, GPUs or memory.
                let cpus: Vec<usize> = (0..n).map(|_| [0, 2, 4, 4, 8][rng.below(5) as usize]).collect();
                let mem: Vec<u64> = (0..n).map(|_| [0, 4, 8, 8, 16][rng.below(5) as usize] * GIB).collect();
                let gpus: Vec<usize> = (0..n).map(|_| rng.below(3) as usize).collect();
                let mut m = machine(&cpus, &mem, &gpus, 1 + rng.below(2) as u32);
                // Now and then a GPU local to two NUMA nodes.
                if n >= 2 && !m.gpus.is_empty() && rng.below(4) == 0 {
                    let a = rng.below(n as u64) as usize;
                    let b = (a + 1) % n;
                    m.gpus[0].numa = NumaMask::single(a).or(NumaMask::single(b));
                }
                let mut f = m.all_free();
                for p in f.pus.iter_mut() {
                    *p = rng.below(3) != 0;
                }
                for (i, x) in f.memory.iter_mut().enumerate() {
                    *x = m.numa_memory[i] / 4 * rng.below(5);
                }
                for g in f.gpus.iter_mut() {
                    *g = rng.below(3) != 0;
                }
                let total_cpus = m.pus.len() as u64;
                let total_gpus = m.gpus.len() as u64;
                for shape in 0..4 {
                    let r = match shape {
                        0 => req(1 + rng.below(total_cpus.max(1) + 2) as usize, 0, 0),
                        1 => req(
                            1 + rng.below(total_cpus / 2 + 2) as usize,
                            0,
                            1 + rng.below(total_gpus + 1) as usize,
                        ),
                        2 => req(0, 0, 1 + rng.below(total_gpus + 1) as usize),
                        _ => req(
                            rng.below(total_cpus / 2 + 1) as usize,
                            (1 + rng.below(24)) * GIB,
                            // Three providers on 8 nodes: 255^3 permutations, too slow for the reference.
                            if n < 8 { rng.below(2) as usize } else { 0 },
                        ),
                    };
                    for policy in POLICIES {
                        let (got, exhausted) = decide_with_budget(&m, &f, &r, policy, SEARCH_BUDGET);
                        assert!(!exhausted, "search budget ran out on {n} NUMA nodes");
                        let want = reference(&m, &f, &r, policy);
                        assert_eq!(
                            (got.admit, got.hint),
                            (want.admit, want.hint),
                            "n={n} policy={policy} req={r:?} machine={m:?} free={f:?}"
                        );
                        assert_eq!(got.reason.is_some(), !got.admit);
                        cases += 1;
                    }
                }
            }
        }
        assert_eq!(cases, 4 * 150 * 4 * 4);
    }

    #[test]
    fn policy_parses_and_prints() {
        for p in POLICIES {
            assert_eq!(p.as_str().parse::<Policy>().unwrap(), p);
            assert_eq!(p.to_string(), p.as_str());
        }
        assert!("single-numa".parse::<Policy>().is_err());
    }

    #[test]
    fn cpu_only_on_dual_socket() {
        let m = dual_socket();
        let f = take(&m, &[6, 0], &[]);
        let r = req(4, 0, 0);
        // Node 1 has 8 free: preferred {1}.
        for p in [Policy::BestEffort, Policy::Restricted] {
            let d = decide(&m, &f, &r, p);
            assert_eq!((d.admit, d.hint), (true, h(0b10, true)));
        }
        let d = decide(&m, &f, &r, Policy::SingleNumaNode);
        assert_eq!((d.admit, d.hint), (true, h(0b10, true)));
        let d = decide(&m, &f, &r, Policy::None);
        assert_eq!(
            (d.admit, d.hint),
            (
                true,
                Hint {
                    mask: None,
                    preferred: true
                }
            )
        );
        // 10 PUs need both nodes: min size 2, {0,1} preferred.
        let f = m.all_free();
        let r = req(10, 0, 0);
        assert_eq!(decide(&m, &f, &r, Policy::Restricted).hint, h(0b11, true));
        let d = decide(&m, &f, &r, Policy::SingleNumaNode);
        assert!(!d.admit);
        assert_eq!(
            d.hint,
            Hint {
                mask: None,
                preferred: false
            }
        );
        assert_eq!(
            d.reason.as_deref(),
            Some("single-numa-node: no NUMA node has 10 free PUs")
        );
        // 6 PUs but only 3 + 3 free: fits only on both, not preferred.
        let f = take(&m, &[5, 5], &[]);
        let r = req(6, 0, 0);
        let d = decide(&m, &f, &r, Policy::BestEffort);
        assert_eq!((d.admit, d.hint), (true, h(0b11, false)));
        let d = decide(&m, &f, &r, Policy::Restricted);
        assert!(!d.admit);
        assert_eq!(
            d.reason.as_deref(),
            Some("restricted: no preferred NUMA alignment for 6 PUs (best: NUMA nodes 0,1)")
        );
        assert!(!decide(&m, &f, &r, Policy::SingleNumaNode).admit);
        assert!(decide(&m, &f, &r, Policy::None).admit);
    }

    #[test]
    fn cpu_and_gpu_on_dual_socket() {
        let m = dual_socket();
        // GPUs 0,1 on node 0, 2,3 on node 1. Node 0 has free CPUs, node 1 free GPUs.
        let f = take(&m, &[2, 2], &[2]);
        let r = req(4, 0, 2);
        // CPU preferred {0} or {1}; GPU: node 0 has 2 free → {0} preferred.
        for p in [Policy::BestEffort, Policy::Restricted, Policy::SingleNumaNode] {
            let d = decide(&m, &f, &r, p);
            assert_eq!((d.admit, d.hint), (true, h(0b01, true)), "{p}");
        }
        // GPUs only free on different nodes: 2 GPUs need {0,1}; min size 1 ⇒ not preferred.
        let f = take(&m, &[0, 0], &[0, 2]);
        let d = decide(&m, &f, &r, Policy::BestEffort);
        assert_eq!((d.admit, d.hint), (true, h(0b11, false)));
        let d = decide(&m, &f, &r, Policy::Restricted);
        assert!(!d.admit);
        let d = decide(&m, &f, &r, Policy::SingleNumaNode);
        assert!(!d.admit);
        assert_eq!(
            d.reason.as_deref(),
            Some("single-numa-node: no NUMA node has 4 free PUs and 2 GPUs")
        );
        // CPUs free only on node 1, GPUs only on node 0.
        let f = take(&m, &[8, 0], &[2, 3]);
        let d = decide(&m, &f, &r, Policy::Restricted);
        assert!(!d.admit);
        assert!(!decide(&m, &f, &r, Policy::SingleNumaNode).admit);
        assert!(!decide(&m, &f, &r, Policy::BestEffort).hint.preferred);
        // 16 PUs and 2 GPUs: single-numa-node can't, restricted takes {0,1} only if
        // GPUs' min size is 2 too: 4 GPUs.
        let f = m.all_free();
        let d = decide(&m, &f, &req(16, 0, 4), Policy::Restricted);
        assert_eq!((d.admit, d.hint), (true, h(0b11, true)));
        let d = decide(&m, &f, &req(16, 0, 2), Policy::SingleNumaNode);
        assert_eq!(
            d.reason.as_deref(),
            Some("single-numa-node: no NUMA node has 16 free PUs and 2 GPUs")
        );
    }

    #[test]
    fn gpu_only_on_dual_socket() {
        let m = dual_socket();
        let f = take(&m, &[0, 0], &[0]);
        let r = req(0, 0, 2);
        // Node 0 has one free GPU, node 1 two.
        for p in [Policy::BestEffort, Policy::Restricted, Policy::SingleNumaNode] {
            let d = decide(&m, &f, &r, p);
            assert_eq!((d.admit, d.hint), (true, h(0b10, true)), "{p}");
        }
        let d = decide(&m, &f, &req(0, 0, 1), Policy::SingleNumaNode);
        assert_eq!(d.hint, h(0b01, true));
        // 3 GPUs: min size 2, preferred {0,1}; single-numa-node rejects.
        let d = decide(&m, &f, &req(0, 0, 3), Policy::Restricted);
        assert_eq!((d.admit, d.hint), (true, h(0b11, true)));
        assert!(!decide(&m, &f, &req(0, 0, 3), Policy::SingleNumaNode).admit);
        // More GPUs than free: no hints ⇒ {all, not preferred}.
        let d = decide(&m, &f, &req(0, 0, 4), Policy::BestEffort);
        assert_eq!((d.admit, d.hint), (true, h(0b11, false)));
        assert!(!decide(&m, &f, &req(0, 0, 4), Policy::Restricted).admit);
    }

    #[test]
    fn memory_requests() {
        let m = dual_socket();
        let mut f = m.all_free();
        f.memory = vec![10 * GIB, 40 * GIB];
        let d = decide(&m, &f, &req(2, 20 * GIB, 0), Policy::SingleNumaNode);
        assert_eq!((d.admit, d.hint), (true, h(0b10, true)));
        let d = decide(&m, &f, &req(2, 45 * GIB, 0), Policy::Restricted);
        assert!(!d.admit);
        assert_eq!(d.hint.mask, Some(NumaMask(0b11)));
        assert!(d.reason.unwrap().contains("2 PUs and 45Gi of memory"));
    }

    #[test]
    fn equal_masks_needed_for_preferred() {
        // CPU: 10 of 16 PUs ⇒ only hint {0,1}, preferred (min size 2). GPUs: 1, free only on
        // node 0 ⇒ {0} preferred (min size 1), {0,1} not. The permutation ({0,1}, {0}) is
        // {0} ∧ {0,1} with both preferred ⇒ {0}, *not* preferred (masks differ; Volcano's
        // old merge would call it preferred and pick it). Best non-preferred aims at
        // B = max(2, 1) = 2 ⇒ {0,1}.
        let m = dual_socket();
        let f = take(&m, &[0, 0], &[2, 3]);
        let r = req(10, 0, 1);
        let d = decide(&m, &f, &r, Policy::BestEffort);
        assert_eq!((d.admit, d.hint), (true, h(0b11, false)));
        let want = reference(&m, &f, &r, Policy::BestEffort);
        assert_eq!(d.hint, want.hint);
        let d = decide(&m, &f, &r, Policy::Restricted);
        assert!(!d.admit);
        assert_eq!(reference(&m, &f, &r, Policy::Restricted).hint, h(0b11, false));
        // With B = 1 the unequal-mask merge itself wins: CPU 4 PUs free only on node 0
        // ({0} preferred, {0,1} not), GPU free only on node 1 ({1} preferred, {0,1} not):
        // {0} ∧ {0,1} = {0} (count 1 = B, narrowest), not preferred.
        let f = take(&m, &[0, 8], &[0, 1]);
        let r = req(4, 0, 1);
        let d = decide(&m, &f, &r, Policy::BestEffort);
        assert_eq!((d.admit, d.hint), (true, h(0b01, false)));
        assert_eq!(reference(&m, &f, &r, Policy::BestEffort).hint, d.hint);
    }

    #[test]
    fn no_request_and_one_numa_node() {
        let m = dual_socket();
        let f = m.all_free();
        let d = decide(&m, &f, &Request::default(), Policy::Restricted);
        assert_eq!((d.admit, d.hint), (true, h(0b11, true)));
        let d = decide(&m, &f, &Request::default(), Policy::SingleNumaNode);
        assert_eq!(
            (d.admit, d.hint),
            (
                true,
                Hint {
                    mask: None,
                    preferred: true
                }
            )
        );
        let one = machine(&[4], &[GIB], &[1], 1);
        let d = decide(&one, &one.all_free(), &req(2, 0, 1), Policy::SingleNumaNode);
        assert_eq!(
            (d.admit, d.hint),
            (
                true,
                Hint {
                    mask: None,
                    preferred: true
                }
            )
        );
    }

    fn big24() -> NumaMachine {
        machine(&[16; 24], &[32 * GIB; 24], &[0; 24], 2)
    }

    #[test]
    fn non_preferred_search_on_24_numa_nodes_with_contested_nodes() {
        // Every node has some free PUs and memory, so every node is contested between the
        // CPU and memory masks. Nodes 0..=20: 1 free PU, 1 GiB; 21..=23: 16 PUs, 20 GiB.
        // 40 PUs: min size 3, narrowest free hint {21,22,23} (B = 3). 40 GiB: min size 2
        // ({21,22}). No preferred hint (3 ≠ 2). Three small nodes can't be the AND (the
        // big nodes can't serve both masks), {0,1,21} can: CPU keeps {0,1,21,22,23},
        // memory keeps {0,1,21} and every small node.
        let m = big24();
        let mut f = take(&m, &[15; 24], &[]);
        for (i, x) in f.memory.iter_mut().enumerate() {
            *x = if i >= 21 { 20 * GIB } else { GIB };
        }
        for (k, pu) in f.pus.iter_mut().enumerate() {
            if k >= 21 * 16 {
                *pu = true;
            }
        }
        let r = req(40, 40 * GIB, 0);
        let (d, exhausted) = decide_with_budget(&m, &f, &r, Policy::BestEffort, SEARCH_BUDGET);
        assert!(!exhausted);
        assert_eq!((d.admit, d.hint), (true, h(0b11 | 1 << 21, false)));
        // Starved of budget, the search keeps the known candidate: a valid kubelet
        // candidate with B nodes, only not the narrowest.
        let (d, exhausted) = decide_with_budget(&m, &f, &r, Policy::BestEffort, 50);
        assert!(exhausted);
        assert_eq!(d.hint, h(0b111 << 21, false));
        let d = decide(&m, &f, &r, Policy::Restricted);
        assert!(!d.admit);
        assert!(
            d.reason
                .unwrap()
                .starts_with("restricted: no preferred NUMA alignment for 40 PUs and")
        );
    }

    /// GB200-like tray: NUMA 0,1 with 72 PUs and 480 GiB each, 32 CPU-less NUMA nodes
    /// (one per GPU, as with MIG/CDMM-style GPU memory nodes) with 6 GiB and 1 GPU each.
    fn gb200() -> NumaMachine {
        let mut cpus = vec![72, 72];
        cpus.extend([0; 32]);
        let mut mem = vec![480 * GIB, 480 * GIB];
        mem.extend([6 * GIB; 32]);
        let mut gpus = vec![0, 0];
        gpus.extend([1; 32]);
        machine(&cpus, &mem, &gpus, 2)
    }

    #[test]
    fn many_numa_nodes_decide_fast() {
        let m = big24();
        let mut rng = Rng(42);
        let mut admitted = 0;
        for i in 0..1000 {
            let mut f = m.all_free();
            for p in f.pus.iter_mut() {
                *p = rng.below(4) != 0;
            }
            for x in f.memory.iter_mut() {
                *x = GIB * rng.below(33);
            }
            let r = req(1 + rng.below(40) as usize, GIB * rng.below(48), 0);
            let (d, exhausted) = decide_with_budget(&m, &f, &r, POLICIES[i % 4], SEARCH_BUDGET);
            assert!(!exhausted, "{r:?}");
            admitted += usize::from(d.admit);
            if d.hint.preferred
                && let Some(mask) = d.hint.mask
            {
                assert!(mask.count() <= 3, "{r:?} {mask:?}");
            }
        }
        assert!(admitted > 0);

        let m = gb200();
        for i in 0..1000 {
            let mut f = m.all_free();
            for p in f.pus.iter_mut() {
                *p = rng.below(3) != 0;
            }
            for g in f.gpus.iter_mut() {
                *g = rng.below(3) != 0;
            }
            let r = match i % 4 {
                0 => req(1 + rng.below(100) as usize, 0, 0),
                1 => req(
                    1 + rng.below(40) as usize,
                    GIB * rng.below(100),
                    1 + rng.below(4) as usize,
                ),
                2 => req(0, 0, 1 + rng.below(8) as usize),
                _ => req(0, GIB * (1 + rng.below(900)), 0),
            };
            let (d, exhausted) = decide_with_budget(&m, &f, &r, POLICIES[(i / 4) % 4], SEARCH_BUDGET);
            assert!(!exhausted, "{r:?}");
            assert_eq!(d.reason.is_some(), !d.admit);
        }
        // GPU-only, 1 GPU: single-numa-node picks the first free GPU node.
        let mut f = m.all_free();
        f.gpus[0] = false;
        let d = decide(&m, &f, &req(0, 0, 1), Policy::SingleNumaNode);
        assert_eq!((d.admit, d.hint), (true, h(1 << 3, true)));
        // 8 PUs + 4 GPUs: sizes 1 vs 4 ⇒ never preferred; B = 4, narrowest candidate
        // {0,1,2,3}: CPU mask {0,1,2,3}, GPU mask {0,1,2,3,4,5} excluding nothing CPU needs.
        let d = decide(&m, &m.all_free(), &req(8, 0, 4), Policy::BestEffort);
        assert_eq!((d.admit, d.hint), (true, h(0b1111, false)));
        assert!(!decide(&m, &m.all_free(), &req(8, 0, 4), Policy::Restricted).admit);
    }
}
