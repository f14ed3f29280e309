//! Per-task NUMA assignment on one candidate node: the topology manager's decision
//! ([`decide`]) turned into concrete PUs, memory per NUMA node and GPUs, plus the
//! numa-aware node score (volcano-semantics.md §8.1, §8.4, §11.3–11.4).
//!
//! [`assign`] only reads the free state; the caller applies the result with [`apply`] and
//! gives it back with [`release`].

use hyperplan_shared::MEMORY;
use hyperplan_shared::quantity::format_quantity;

use super::cpus::{CpuError, CpuPlacement, take_cpus};
use super::hints::{Policy, Request, decide};
use super::{NumaFree, NumaMachine, NumaMask};

/// What one task asks for on a node, and how it wants to be placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskNuma {
    /// Topology-manager policy the task is placed under.
    pub policy: Policy,
    /// Whole PUs (0 = none).
    pub cpus: usize,
    /// Bytes (0 = none).
    pub memory: u64,
    /// Whole GPUs (0 = none).
    pub gpus: usize,
    /// How its PUs are picked: packed or spread.
    pub placement: CpuPlacement,
    /// Kubelet `full-pcpus-only`: whole cores only.
    pub full_cores: bool,
}

/// Why a task cannot be pinned on a node; the text is the pending reason people read
/// (`single-numa-node: no NUMA node has 120 free PUs`), so each names the policy.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AssignError {
    /// The node has no hardware description to pin on.
    #[error("no hardware description")]
    NoHardware,
    /// The topology manager did not admit the task (its reason, or none given).
    #[error("{}", reason.clone().unwrap_or_else(|| format!("{policy}: topology manager did not admit the task")))]
    NotAdmitted {
        /// The task's policy.
        policy: Policy,
        /// The topology manager's reason; `None` = none given.
        reason: Option<String>,
    },
    /// No PUs could be taken for the task.
    #[error("{policy}: {source}")]
    Cpus {
        /// The task's policy.
        policy: Policy,
        /// Why the CPU assignment failed.
        source: CpuError,
    },
    /// Restricted / single-numa-node: too few free PUs on the hint's NUMA nodes.
    #[error("{policy}: only {free} of {requested} requested PUs are free on NUMA nodes {nodes}")]
    PusOutsideHint {
        /// The task's policy.
        policy: Policy,
        /// Free PUs inside the hint (whole free cores only with `full_cores`).
        free: usize,
        /// PUs requested.
        requested: usize,
        /// OS indexes of the hint's NUMA nodes (`0,1`).
        nodes: String,
    },
    /// Fewer free GPUs on the whole node than requested.
    #[error("{policy}: not enough free GPUs: requested {requested}, available {free}")]
    Gpus {
        /// The task's policy.
        policy: Policy,
        /// GPUs requested.
        requested: usize,
        /// Free GPUs on the node.
        free: usize,
    },
    /// Restricted / single-numa-node: too few free GPUs that keep the task inside the hint.
    #[error("{policy}: only {free} of {requested} requested GPUs are free on NUMA nodes {nodes}")]
    GpusOutsideHint {
        /// The task's policy.
        policy: Policy,
        /// Free GPUs inside the hint or without NUMA information.
        free: usize,
        /// GPUs requested.
        requested: usize,
        /// OS indexes of the hint's NUMA nodes (`0,1`).
        nodes: String,
    },
    /// Single-numa-node: no NUMA node of the hint has the whole memory request free.
    #[error("{policy}: no NUMA node of {nodes} has {memory} of free memory")]
    NoNumaNodeMemory {
        /// The task's policy.
        policy: Policy,
        /// OS indexes of the hint's NUMA nodes (`0,1`).
        nodes: String,
        /// The memory requested, as a quantity (`120Gi`).
        memory: String,
    },
    /// Not enough free memory on the NUMA nodes the policy allows.
    #[error("{policy}: not enough free memory: requested {memory}, {short} short")]
    Memory {
        /// The task's policy.
        policy: Policy,
        /// The memory requested, as a quantity (`120Gi`).
        memory: String,
        /// How much of it is missing, as a quantity.
        short: String,
    },
}

/// Concrete resources for one task on one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Assignment {
    /// NUMA nodes used (by PUs, memory and GPUs).
    pub numa: NumaMask,
    /// Indices into `machine.pus`.
    pub pus: super::PuSet,
    /// (dense NUMA index, bytes), one entry per NUMA node used, in the order taken.
    pub memory: Vec<(usize, u64)>,
    /// Indices into `machine.gpus`, ascending.
    pub gpus: Vec<usize>,
}

/// Admits (or not) `task` on `machine` with `free` free and picks concrete resources.
/// On success `free` is not modified: the caller applies the result with [`apply`].
///
/// - `Policy::None`: no alignment. PUs from anywhere (exclusive, [`take_cpus`] with the
///   task's placement), the lowest-index free GPUs, memory from the NUMA nodes holding the
///   most of the task's PUs first (then most free memory, then lowest index).
/// - Otherwise the topology manager decides ([`decide`]); not admitted → `Err(reason)`. With
///   the hint mask M (`None` = all nodes):
///   - CPUs: `min(request, free PUs in M)` inside M, the remainder from anywhere (kubelet's
///     cpu manager, §8.4); under restricted / single-numa-node a remainder is an error.
///     With `full_cores`, "free PUs in M" counts only whole free cores.
///   - GPUs: free GPUs whose NUMA mask is inside M first (those sharing a NUMA node with the
///     task's PUs first, then lowest NUMA index, then lowest GPU index), then GPUs without
///     NUMA information (they break no alignment, like kubelet's device manager), then —
///     only under best-effort — the others.
///   - Memory: greedily from the nodes of M by most PUs assigned, most free memory, lowest
///     index; under best-effort the rest from the other nodes in the same order. Under
///     single-numa-node all of it comes from one node.
///
/// Deterministic.
pub fn assign(machine: &NumaMachine, free: &NumaFree, task: &TaskNuma) -> Result<Assignment, AssignError> {
    let n = machine.numa_count().clamp(1, 64);
    let all = NumaMask::all(n);
    let policy = task.policy;
    let (mask, strict) = if policy == Policy::None {
        (all, false)
    } else {
        let req = Request {
            cpus: task.cpus,
            memory: task.memory,
            gpus: task.gpus,
        };
        let d = decide(machine, free, &req, policy);
        if !d.admit {
            return Err(AssignError::NotAdmitted {
                policy,
                reason: d.reason,
            });
        }
        let strict = matches!(policy, Policy::Restricted | Policy::SingleNumaNode);
        (d.hint.mask.map_or(all, |m| m.and(all)), strict)
    };

    let pus = pick_pus(machine, free, task, mask, strict)?;
    let mut pu_count = vec![0usize; n];
    let mut pu_numa = NumaMask::default();
    for &p in &pus {
        let i = (machine.pus[p].numa as usize).min(n - 1);
        pu_count[i] += 1;
        pu_numa = pu_numa.or(NumaMask::single(i));
    }
    let gpus = pick_gpus(machine, free, task, mask, pu_numa, all)?;
    let memory = pick_memory(machine, free, task, mask, &pu_count, n)?;

    let mut numa = pu_numa;
    for &(i, _) in &memory {
        numa = numa.or(NumaMask::single(i));
    }
    for &g in &gpus {
        numa = numa.or(machine.gpus[g].numa.and(all));
    }
    Ok(Assignment {
        numa,
        pus: super::PuSet::from_indices(pus),
        memory,
        gpus,
    })
}

fn pick_pus(
    machine: &NumaMachine,
    free: &NumaFree,
    task: &TaskNuma,
    mask: NumaMask,
    strict: bool,
) -> Result<Vec<usize>, AssignError> {
    let policy = task.policy;
    let cpus = |source| AssignError::Cpus { policy, source };
    if task.cpus == 0 {
        return Ok(Vec::new());
    }
    let is_free = |i: usize| free.pus.get(i).copied().unwrap_or(false);
    if policy == Policy::None {
        return take_cpus(machine, free, None, task.cpus, task.placement, task.full_cores).map_err(cpus);
    }
    // Free PUs inside M (whole free cores only with `full_cores`).
    let in_mask = if task.full_cores {
        let mut cores: Vec<(u32, bool, usize)> = Vec::new(); // (core, usable, pus)
        for (i, p) in machine.pus.iter().enumerate() {
            let ok = is_free(i) && mask.contains(p.numa as usize);
            match cores.iter_mut().find(|c| c.0 == p.core) {
                Some(c) => {
                    c.1 &= ok;
                    c.2 += 1;
                }
                None => cores.push((p.core, ok, 1)),
            }
        }
        cores.iter().filter(|c| c.1).map(|c| c.2).sum::<usize>()
    } else {
        machine
            .pus
            .iter()
            .enumerate()
            .filter(|(i, p)| is_free(*i) && mask.contains(p.numa as usize))
            .count()
    };
    let first = task.cpus.min(in_mask);
    let rest = task.cpus - first;
    if strict && rest > 0 {
        return Err(AssignError::PusOutsideHint {
            policy,
            free: in_mask,
            requested: task.cpus,
            nodes: machine.os_list(mask),
        });
    }
    let mut out = if first > 0 {
        take_cpus(machine, free, Some(mask), first, task.placement, task.full_cores).map_err(cpus)?
    } else {
        Vec::new()
    };
    if rest > 0 {
        let mut left = free.clone();
        for &p in &out {
            if let Some(f) = left.pus.get_mut(p) {
                *f = false;
            }
        }
        let more = take_cpus(machine, &left, None, rest, task.placement, task.full_cores).map_err(cpus)?;
        out.extend(more);
        out.sort_unstable();
    }
    Ok(out)
}

fn pick_gpus(
    machine: &NumaMachine,
    free: &NumaFree,
    task: &TaskNuma,
    mask: NumaMask,
    pu_numa: NumaMask,
    all: NumaMask,
) -> Result<Vec<usize>, AssignError> {
    let policy = task.policy;
    if task.gpus == 0 {
        return Ok(Vec::new());
    }
    let free_gpus: Vec<usize> = (0..machine.gpus.len())
        .filter(|&g| free.gpus.get(g).copied().unwrap_or(false))
        .collect();
    if free_gpus.len() < task.gpus {
        return Err(AssignError::Gpus {
            policy,
            requested: task.gpus,
            free: free_gpus.len(),
        });
    }
    let mut out: Vec<usize> = if policy == Policy::None {
        free_gpus.into_iter().take(task.gpus).collect()
    } else {
        // (tier, not next to the task's PUs, lowest NUMA index, GPU index)
        let mut keyed: Vec<(u8, bool, u32, usize)> = free_gpus
            .into_iter()
            .filter_map(|g| {
                let m = machine.gpus[g].numa.and(all);
                let tier = if m.is_empty() {
                    1
                } else if m.and(mask) == m {
                    0
                } else if policy == Policy::BestEffort {
                    2
                } else {
                    return None;
                };
                Some((tier, m.and(pu_numa).is_empty(), m.0.trailing_zeros(), g))
            })
            .collect();
        keyed.sort_unstable();
        if keyed.len() < task.gpus {
            return Err(AssignError::GpusOutsideHint {
                policy,
                free: keyed.len(),
                requested: task.gpus,
                nodes: machine.os_list(mask),
            });
        }
        keyed.into_iter().take(task.gpus).map(|k| k.3).collect()
    };
    out.sort_unstable();
    Ok(out)
}

fn pick_memory(
    machine: &NumaMachine,
    free: &NumaFree,
    task: &TaskNuma,
    mask: NumaMask,
    pu_count: &[usize],
    n: usize,
) -> Result<Vec<(usize, u64)>, AssignError> {
    let policy = task.policy;
    if task.memory == 0 {
        return Ok(Vec::new());
    }
    let fmem = |i: usize| free.memory.get(i).copied().unwrap_or(0);
    // Nodes of M first, then (none / best-effort only) the others; each by most PUs
    // assigned, most free memory, lowest index.
    let mut order: Vec<usize> = (0..n)
        .filter(|&i| (policy != Policy::Restricted && policy != Policy::SingleNumaNode) || mask.contains(i))
        .collect();
    order.sort_by_key(|&i| {
        (
            !mask.contains(i),
            std::cmp::Reverse(pu_count[i]),
            std::cmp::Reverse(fmem(i)),
            i,
        )
    });
    if policy == Policy::SingleNumaNode {
        return match order.iter().find(|&&i| fmem(i) >= task.memory) {
            Some(&i) => Ok(vec![(i, task.memory)]),
            None => Err(AssignError::NoNumaNodeMemory {
                policy,
                nodes: machine.os_list(mask),
                memory: format_quantity(MEMORY, task.memory),
            }),
        };
    }
    let mut need = task.memory;
    let mut out = Vec::new();
    for i in order {
        if need == 0 {
            break;
        }
        let take = need.min(fmem(i));
        if take > 0 {
            out.push((i, take));
            need -= take;
        }
    }
    if need > 0 {
        return Err(AssignError::Memory {
            policy,
            memory: format_quantity(MEMORY, task.memory),
            short: format_quantity(MEMORY, need),
        });
    }
    Ok(out)
}

/// Takes the assignment's resources out of `free`.
pub fn apply(free: &mut NumaFree, a: &Assignment) {
    update(free, a, true);
}

/// Gives the assignment's resources back to `free`.
pub fn release(free: &mut NumaFree, a: &Assignment) {
    update(free, a, false);
}

/// Out-of-range indices are ignored and memory saturates: a stale assignment must not
/// panic or wrap.
fn update(free: &mut NumaFree, a: &Assignment, take: bool) {
    for p in a.pus.iter() {
        if let Some(f) = free.pus.get_mut(p) {
            *f = !take;
        }
    }
    for &(i, b) in &a.memory {
        if let Some(m) = free.memory.get_mut(i) {
            *m = if take { m.saturating_sub(b) } else { m.saturating_add(b) };
        }
    }
    for &g in &a.gpus {
        if let Some(f) = free.gpus.get_mut(g) {
            *f = !take;
        }
    }
}

/// Volcano's numa-aware node score per candidate node from the number of NUMA nodes its
/// assignment spans: `100 - floor(100 * n / max_n)`, max over the candidates; all zero →
/// 100 each (the plugin weight is applied by the caller).
pub fn numa_score(spans: &[u32]) -> Vec<u32> {
    let max = spans.iter().copied().max().unwrap_or(0);
    if max == 0 {
        return vec![100; spans.len()];
    }
    spans
        .iter()
        .map(|&s| 100 - (100 * u64::from(s.min(max)) / u64::from(max)) as u32)
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::{GpuInfo, PuInfo};
    use super::*;

    const GIB: u64 = 1 << 30;

    /// `numa` NUMA nodes, `cores` cores per NUMA node, two hyperthreads per core (Linux
    /// numbering: PU os i and i + total cores are siblings), one socket per
    /// `numa_per_socket` NUMA nodes, `gpus_per_numa` GPUs on each NUMA node.
    fn machine(numa: u32, cores: u32, numa_per_socket: u32, gpus_per_numa: u32) -> NumaMachine {
        let total = numa * cores;
        let pus = (0..2 * total)
            .map(|os| {
                let core = os % total;
                let n = core / cores;
                PuInfo {
                    os,
                    core,
                    socket: n / numa_per_socket,
                    numa: n,
                }
            })
            .collect();
        let gpus = (0..numa * gpus_per_numa)
            .map(|g| GpuInfo {
                pci_bus_id: format!("0000:{g:02x}:00.0"),
                numa: NumaMask::single((g / gpus_per_numa) as usize),
            })
            .collect();
        NumaMachine {
            numa_os: (0..numa).collect(),
            numa_memory: vec![64 * GIB; numa as usize],
            pus,
            sockets: numa / numa_per_socket,
            gpus,
        }
    }

    /// Dual socket, 2 NUMA nodes, 8 cores / 16 PUs each, 64 GiB each, 2 GPUs each.
    fn dual() -> NumaMachine {
        machine(2, 8, 1, 2)
    }

    fn task(policy: Policy, cpus: usize, memory: u64, gpus: usize) -> TaskNuma {
        TaskNuma {
            policy,
            cpus,
            memory,
            gpus,
            placement: CpuPlacement::Packed,
            full_cores: false,
        }
    }

    const POLICIES: [Policy; 4] = [
        Policy::None,
        Policy::BestEffort,
        Policy::Restricted,
        Policy::SingleNumaNode,
    ];

    fn pu_numa(m: &NumaMachine, a: &Assignment) -> NumaMask {
        a.pus.iter().fold(NumaMask::default(), |acc, p| {
            acc.or(NumaMask::single(m.pus[p].numa as usize))
        })
    }

    fn gpu_numa(m: &NumaMachine, a: &Assignment) -> NumaMask {
        a.gpus
            .iter()
            .fold(NumaMask::default(), |acc, &g| acc.or(m.gpus[g].numa))
    }

    fn check_shape(m: &NumaMachine, t: &TaskNuma, a: &Assignment) {
        assert_eq!(a.pus.len(), t.cpus);
        assert_eq!(a.gpus.len(), t.gpus);
        assert_eq!(a.memory.iter().map(|c| c.1).sum::<u64>(), t.memory);
        assert!(a.gpus.windows(2).all(|w| w[0] < w[1]));
        let mem = a
            .memory
            .iter()
            .fold(NumaMask::default(), |acc, c| acc.or(NumaMask::single(c.0)));
        assert_eq!(a.numa, pu_numa(m, a).or(gpu_numa(m, a)).or(mem));
    }

    #[test]
    fn cpu_only_each_policy() {
        let m = dual();
        let free = m.all_free();
        for p in POLICIES {
            let t = task(p, 8, 16 * GIB, 0);
            let a = assign(&m, &free, &t).unwrap();
            check_shape(&m, &t, &a);
            assert_eq!(a.numa, NumaMask::single(0), "{p}");
            assert_eq!(a.memory, [(0, 16 * GIB)], "{p}");
            // 8 PUs = 4 whole cores, packed.
            assert_eq!(a.pus.to_vec(), [0, 1, 2, 3, 16, 17, 18, 19], "{p}");
        }
        // 24 PUs cannot fit one NUMA node.
        for p in POLICIES {
            let t = task(p, 24, 0, 0);
            let r = assign(&m, &free, &t);
            match p {
                Policy::SingleNumaNode => {
                    let e = r.unwrap_err().to_string();
                    assert!(e.starts_with("single-numa-node:"), "{e}");
                }
                _ => {
                    // restricted: preferred mask is both nodes (minimum size 2).
                    let a = r.unwrap();
                    check_shape(&m, &t, &a);
                    assert_eq!(a.numa, NumaMask(0b11), "{p}");
                }
            }
        }
    }

    #[test]
    fn cpu_gpu_each_policy_aligns() {
        let m = dual();
        let mut free = m.all_free();
        // Node 0 has 8 free PUs and both GPUs; node 1 has 16 PUs, GPUs taken.
        for p in 0..4 {
            free.pus[p] = false;
            free.pus[p + 16] = false;
        }
        free.gpus[2] = false;
        free.gpus[3] = false;
        // 4 PUs + 1 GPU: node 0 still has 8 free PUs and 2 GPUs.
        for p in POLICIES {
            let t = task(p, 4, GIB, 1);
            let a = assign(&m, &free, &t).unwrap();
            check_shape(&m, &t, &a);
            assert_eq!(a.gpus, [0], "{p}");
            if p != Policy::None {
                assert_eq!(a.numa, NumaMask::single(0), "{p}");
                assert_eq!(pu_numa(&m, &a), gpu_numa(&m, &a), "{p}");
            }
        }
        // 12 PUs + 1 GPU: no node holds both.
        for p in POLICIES {
            let t = task(p, 12, 0, 1);
            let r = assign(&m, &free, &t);
            match p {
                Policy::None | Policy::BestEffort => {
                    let a = r.unwrap();
                    check_shape(&m, &t, &a);
                    assert_eq!(a.gpus, [0]);
                }
                Policy::Restricted => {
                    // Preferred needs masks of size 1 for both; merged on {0,1} is not preferred.
                    let e = r.unwrap_err().to_string();
                    assert!(e.starts_with("restricted:"), "{e}");
                }
                Policy::SingleNumaNode => {
                    let e = r.unwrap_err().to_string();
                    assert!(e.starts_with("single-numa-node: no NUMA node has"), "{e}");
                }
            }
        }
        // Fresh machine, 16 PUs + 2 GPUs: single-numa-node and restricted keep everything on node 0.
        let free = m.all_free();
        for p in [Policy::Restricted, Policy::SingleNumaNode, Policy::BestEffort] {
            let t = task(p, 16, 32 * GIB, 2);
            let a = assign(&m, &free, &t).unwrap();
            check_shape(&m, &t, &a);
            assert_eq!(a.numa, NumaMask::single(0), "{p}");
            assert_eq!(a.gpus, [0, 1]);
        }
        // GPUs follow the PUs to node 1 when node 0 lacks PUs.
        let mut free = m.all_free();
        for p in 0..4 {
            free.pus[p] = false;
        }
        for p in [Policy::Restricted, Policy::SingleNumaNode] {
            let t = task(p, 16, 0, 2);
            let a = assign(&m, &free, &t).unwrap();
            assert_eq!(a.numa, NumaMask::single(1), "{p}");
            assert_eq!(a.gpus, [2, 3]);
            assert_eq!(pu_numa(&m, &a), gpu_numa(&m, &a));
        }
    }

    #[test]
    fn gpu_only_each_policy() {
        let m = dual();
        let mut free = m.all_free();
        free.gpus[0] = false;
        for p in POLICIES {
            let t = task(p, 0, 0, 2);
            let a = assign(&m, &free, &t).unwrap();
            check_shape(&m, &t, &a);
            match p {
                Policy::None => assert_eq!(a.gpus, [1, 2]),
                _ => assert_eq!(
                    (a.gpus.as_slice(), a.numa),
                    ([2, 3].as_slice(), NumaMask::single(1)),
                    "{p}"
                ),
            }
        }
        // Three GPUs, two per node: only best-effort / none take them.
        free.gpus[0] = true;
        for p in POLICIES {
            let t = task(p, 0, 0, 3);
            let r = assign(&m, &free, &t);
            match p {
                Policy::SingleNumaNode => assert!(r.unwrap_err().to_string().starts_with("single-numa-node:")),
                _ => {
                    // Restricted: minimum size 2 = the preferred mask {0,1}.
                    let a = r.unwrap();
                    assert_eq!(a.gpus, [0, 1, 2], "{p}");
                    assert_eq!(a.numa, NumaMask(0b11));
                }
            }
        }
        // More GPUs than free: every policy rejects.
        for p in POLICIES {
            assert!(assign(&m, &free, &task(p, 0, 0, 5)).is_err(), "{p}");
        }
    }

    #[test]
    fn best_effort_spills_and_restricted_does_not() {
        let m = dual();
        let mut free = m.all_free();
        // Node 0: 4 free PUs, node 1: 6 free PUs.
        for p in 0..32 {
            free.pus[p] = false;
        }
        for p in [0, 1, 16, 17, 8, 9, 10, 24, 25, 26] {
            free.pus[p] = true;
        }
        let t = task(Policy::BestEffort, 8, 0, 0);
        let a = assign(&m, &free, &t).unwrap();
        check_shape(&m, &t, &a);
        assert_eq!(a.numa, NumaMask(0b11));
        // Restricted: one node's total (16) holds 8 PUs, so only a one-node hint is preferred.
        let e = assign(&m, &free, &task(Policy::Restricted, 8, 0, 0))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("restricted:"), "{e}");
        // Memory: the hint is node 0 (the only node with 16 free PUs), which has 4 GiB; best-effort
        // takes the rest from node 1, restricted rejects.
        let mut free = m.all_free();
        free.memory[0] = 4 * GIB;
        free.pus[31] = false;
        let t = task(Policy::BestEffort, 16, 8 * GIB, 0);
        let a = assign(&m, &free, &t).unwrap();
        check_shape(&m, &t, &a);
        assert_eq!(pu_numa(&m, &a), NumaMask::single(0));
        assert_eq!(a.memory, [(0, 4 * GIB), (1, 4 * GIB)]);
        assert_eq!(a.numa, NumaMask(0b11));
        assert!(assign(&m, &free, &task(Policy::Restricted, 16, 8 * GIB, 0)).is_err());
        assert!(assign(&m, &free, &task(Policy::SingleNumaNode, 16, 8 * GIB, 0)).is_err());
    }

    /// Assign + apply until nothing fits; no PU, GPU or byte handed out twice; release
    /// restores the free state.
    #[test]
    fn fill_until_full_and_release() {
        let m = dual();
        for p in POLICIES {
            for shape in [(4usize, 3 * GIB, 1usize), (6, 5 * GIB, 0), (0, GIB, 1), (2, 0, 0)] {
                let t = task(p, shape.0, shape.1, shape.2);
                let start = m.all_free();
                let mut free = start.clone();
                let mut done = Vec::new();
                while let Ok(a) = assign(&m, &free, &t) {
                    check_shape(&m, &t, &a);
                    if matches!(p, Policy::Restricted | Policy::SingleNumaNode) && t.cpus > 0 && t.gpus > 0 {
                        assert_eq!(pu_numa(&m, &a), gpu_numa(&m, &a), "{p}");
                    }
                    if p == Policy::SingleNumaNode {
                        assert_eq!(a.numa.count(), 1);
                    }
                    for x in a.pus.iter() {
                        assert!(free.pus[x]);
                    }
                    for &g in &a.gpus {
                        assert!(free.gpus[g]);
                    }
                    for &(i, b) in &a.memory {
                        assert!(free.memory[i] >= b);
                    }
                    apply(&mut free, &a);
                    done.push(a);
                    assert!(done.len() < 1000);
                }
                let used_pus: usize = done.iter().map(|a| a.pus.len()).sum();
                let used_gpus: usize = done.iter().map(|a| a.gpus.len()).sum();
                let used_mem: u64 = done.iter().flat_map(|a| a.memory.iter().map(|c| c.1)).sum();
                assert_eq!(used_pus, free.pus.iter().filter(|f| !**f).count());
                assert_eq!(used_gpus, free.gpus.iter().filter(|f| !**f).count());
                assert_eq!(used_mem, 128 * GIB - free.memory.iter().sum::<u64>());
                let mut all: Vec<usize> = done.iter().flat_map(|a| a.pus.iter()).collect();
                all.sort_unstable();
                all.dedup();
                assert_eq!(all.len(), used_pus);
                assert!(!done.is_empty(), "{p} {shape:?}");
                if t.gpus > 0 {
                    assert_eq!(used_gpus, 4, "{p} {shape:?}: GPUs run out first");
                }
                for a in done.iter().rev() {
                    release(&mut free, a);
                }
                assert_eq!(free, start);
            }
        }
    }

    #[test]
    fn full_cores() {
        let m = dual();
        let mut free = m.all_free();
        // Half-busy cores 0..4 on node 0: PUs 16..20 busy.
        for p in 16..20 {
            free.pus[p] = false;
        }
        let mut t = task(Policy::SingleNumaNode, 8, 0, 0);
        t.full_cores = true;
        let a = assign(&m, &free, &t).unwrap();
        // Node 0 has 12 free PUs but only 8 in whole cores (cores 4..8).
        assert_eq!(a.pus.to_vec(), [4, 5, 6, 7, 20, 21, 22, 23]);
        // 10 PUs: hint says node 0 (12 free), but only 8 whole-core PUs there.
        t.cpus = 10;
        let e = assign(&m, &free, &t).unwrap_err().to_string();
        assert!(e.starts_with("single-numa-node:"), "{e}");
        // Best-effort takes the rest from node 1.
        t.policy = Policy::BestEffort;
        let a = assign(&m, &free, &t).unwrap();
        assert_eq!(a.pus.len(), 10);
        assert_eq!(a.numa, NumaMask(0b11));
        // Odd count: not whole cores.
        t.cpus = 3;
        assert!(assign(&m, &free, &t).unwrap_err().to_string().contains("whole cores"));
        t.policy = Policy::None;
        assert!(assign(&m, &free, &t).unwrap_err().to_string().contains("whole cores"));
    }

    #[test]
    fn scores() {
        assert_eq!(numa_score(&[1, 2, 4]), [75, 50, 0]);
        assert_eq!(numa_score(&[0, 0]), [100, 100]);
        assert_eq!(numa_score(&[1, 3]), [67, 0]);
        assert_eq!(numa_score(&[0, 1]), [100, 0]);
        assert!(numa_score(&[]).is_empty());
    }

    #[test]
    fn big_machine_loop() {
        // 24 NUMA nodes, 4 sockets, 4 cores (8 PUs) and 1 GPU per NUMA node.
        let m = machine(24, 4, 6, 1);
        for p in POLICIES {
            // 12 PUs need two NUMA nodes, and so does 100 GiB: preferred for restricted.
            for shape in [(4usize, 8 * GIB, 1usize), (12, 100 * GIB, 0), (6, GIB, 0)] {
                let mut t = task(p, shape.0, shape.1, shape.2);
                t.placement = if shape.0 == 6 {
                    CpuPlacement::Spread
                } else {
                    CpuPlacement::Packed
                };
                let mut free = m.all_free();
                let mut n = 0;
                while let Ok(a) = assign(&m, &free, &t) {
                    check_shape(&m, &t, &a);
                    if p == Policy::SingleNumaNode {
                        assert_eq!(a.numa.count(), 1);
                    }
                    apply(&mut free, &a);
                    n += 1;
                    assert!(n <= 200);
                }
                assert!(n > 0 || (p == Policy::SingleNumaNode && shape.0 == 12), "{p} {shape:?}");
                if shape.2 == 1 {
                    assert_eq!(n, 24, "{p}: one GPU task per NUMA node");
                }
            }
        }
    }
}
