//! One node's hardware for NUMA decisions, with dense indices (NUMA nodes 0..n in OS
//! index order, PUs in OS index order), built from the probe's `NodeTopology`.

use hyperplan_shared::topology::NodeTopology;

/// A set of NUMA nodes by dense index (bit i = `NumaMachine::numa_os[i]`). 64 NUMA nodes
/// at most: the largest machines hyperplan targets (34-NUMA GB200 trays) fit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NumaMask(pub u64);

impl NumaMask {
    /// Only dense NUMA node `i` (`i` < 64).
    pub fn single(i: usize) -> Self {
        Self(1u64 << i)
    }
    /// Dense NUMA nodes `0..n`; every bit for `n` ≥ 64.
    pub fn all(n: usize) -> Self {
        if n >= 64 { Self(u64::MAX) } else { Self((1u64 << n) - 1) }
    }
    /// Number of NUMA nodes in the mask.
    pub fn count(self) -> u32 {
        self.0.count_ones()
    }
    /// No NUMA node at all.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// Whether dense NUMA node `i` is in the mask (false for `i` ≥ 64).
    pub fn contains(self, i: usize) -> bool {
        i < 64 && self.0 & (1u64 << i) != 0
    }
    /// Intersection.
    pub fn and(self, o: Self) -> Self {
        Self(self.0 & o.0)
    }
    /// Union.
    pub fn or(self, o: Self) -> Self {
        Self(self.0 | o.0)
    }
    /// Dense indices in the mask, ascending.
    pub fn iter(self) -> impl Iterator<Item = usize> {
        (0..64).filter(move |i| self.0 & (1u64 << i) != 0)
    }
    /// Kubelet's "narrower": fewer bits, or as many and numerically smaller.
    pub fn is_narrower_than(self, o: Self) -> bool {
        self.count() < o.count() || (self.count() == o.count() && self.0 < o.0)
    }
}

/// One PU (hardware thread) and where it sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PuInfo {
    /// OS index (what `taskset` and cgroups use).
    pub os: u32,
    /// Dense core index (hwloc logical core index); unique machine-wide.
    pub core: u32,
    /// Dense socket (package) index.
    pub socket: u32,
    /// Dense NUMA index.
    pub numa: u32,
}

/// One GPU and the NUMA nodes it is local to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GpuInfo {
    /// PCI bus id as the probe reports it (`0000:3b:00.0`).
    pub pci_bus_id: String,
    /// Dense NUMA indices local to the GPU (usually one).
    pub numa: NumaMask,
}

/// One node's hardware.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NumaMachine {
    /// OS index of each dense NUMA node.
    pub numa_os: Vec<u32>,
    /// Bytes of memory per dense NUMA node.
    pub numa_memory: Vec<u64>,
    /// PUs in OS index order.
    pub pus: Vec<PuInfo>,
    /// Number of sockets (packages).
    pub sockets: u32,
    /// GPUs in the probe's order.
    pub gpus: Vec<GpuInfo>,
}

/// What is free on a node now: PUs (indices into `NumaMachine::pus`), memory per NUMA
/// node, GPUs (indices into `NumaMachine::gpus`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NumaFree {
    /// Per PU, parallel to `NumaMachine::pus`: true if free.
    pub pus: Vec<bool>,
    /// Free bytes per dense NUMA node.
    pub memory: Vec<u64>,
    /// Per GPU, parallel to `NumaMachine::gpus`: true if free.
    pub gpus: Vec<bool>,
}

impl NumaMachine {
    /// From the probe's view. A topology without NUMA nodes is one NUMA node holding
    /// every PU and all memory.
    pub fn from_topology(t: &NodeTopology) -> Self {
        let mut numa_os: Vec<u32> = t.numa_nodes.iter().map(|n| n.os_index).collect();
        numa_os.sort_unstable();
        numa_os.truncate(64);
        let dense = |os: Option<u32>| os.and_then(|o| numa_os.iter().position(|x| *x == o)).unwrap_or(0) as u32;
        let mut sockets: Vec<Option<u32>> = t.cores.iter().map(|c| c.package).collect();
        sockets.sort_unstable();
        sockets.dedup();
        let mut pus = Vec::new();
        for c in &t.cores {
            let socket = sockets.iter().position(|s| *s == c.package).unwrap_or(0) as u32;
            for &os in &c.pus {
                pus.push(PuInfo {
                    os,
                    core: c.index,
                    socket,
                    numa: dense(c.numa),
                });
            }
        }
        pus.sort_by_key(|p| p.os);
        let numa_memory = if numa_os.is_empty() {
            vec![t.total_memory]
        } else {
            numa_os
                .iter()
                .map(|os| {
                    t.numa_nodes
                        .iter()
                        .find(|n| n.os_index == *os)
                        .map_or(0, |n| n.local_memory)
                })
                .collect()
        };
        if numa_os.is_empty() {
            numa_os.push(0);
        }
        let gpus = t
            .gpus
            .iter()
            .map(|g| GpuInfo {
                pci_bus_id: g.pci_bus_id.clone(),
                numa: g
                    .numa
                    .iter()
                    .filter_map(|os| numa_os.iter().position(|x| x == os))
                    .fold(NumaMask::default(), |m, i| m.or(NumaMask::single(i))),
            })
            .collect();
        Self {
            numa_os,
            numa_memory,
            pus,
            sockets: sockets.len().max(1) as u32,
            gpus,
        }
    }

    /// OS indexes of the NUMA nodes in `m`, for messages: `0,1` (sparse ids stay sparse).
    pub fn os_list(&self, m: NumaMask) -> String {
        m.iter()
            .map(|i| self.numa_os.get(i).map_or_else(|| format!("#{i}"), |os| os.to_string()))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Number of NUMA nodes (dense indices run `0..numa_count()`).
    pub fn numa_count(&self) -> usize {
        self.numa_os.len()
    }

    /// Everything free.
    pub fn all_free(&self) -> NumaFree {
        NumaFree {
            pus: vec![true; self.pus.len()],
            memory: self.numa_memory.clone(),
            gpus: vec![true; self.gpus.len()],
        }
    }
}

#[cfg(test)]
mod tests {
    use hyperplan_shared::topology::{Core, Gpu, NumaNode};

    use super::*;

    #[test]
    fn dense_indices_keep_sparse_os_numbering_and_gpu_locality() {
        let t = NodeTopology {
            total_memory: 3 << 30,
            numa_nodes: vec![
                NumaNode {
                    os_index: 33,
                    local_memory: 2 << 30,
                    cpus: vec![2, 3],
                    distances: vec![],
                },
                NumaNode {
                    os_index: 0,
                    local_memory: 1 << 30,
                    cpus: vec![0, 1],
                    distances: vec![],
                },
            ],
            cores: vec![
                Core {
                    index: 0,
                    package: Some(0),
                    numa: Some(0),
                    pus: vec![0, 1],
                },
                Core {
                    index: 1,
                    package: Some(1),
                    numa: Some(33),
                    pus: vec![3, 2],
                },
            ],
            gpus: vec![Gpu {
                pci_bus_id: "0000:3b:00.0".into(),
                numa: vec![33],
                ..Gpu::default()
            }],
            ..NodeTopology::default()
        };
        let m = NumaMachine::from_topology(&t);
        assert_eq!(m.numa_os, [0, 33]);
        assert_eq!(m.numa_memory, [1 << 30, 2 << 30]);
        assert_eq!(m.sockets, 2);
        let pus: Vec<(u32, u32, u32)> = m.pus.iter().map(|p| (p.os, p.socket, p.numa)).collect();
        assert_eq!(pus, [(0, 0, 0), (1, 0, 0), (2, 1, 1), (3, 1, 1)]);
        assert_eq!(m.gpus[0].numa, NumaMask::single(1));
        assert_eq!(m.all_free().memory, m.numa_memory);
    }

    #[test]
    fn no_numa_info_is_one_node() {
        let t = NodeTopology {
            total_memory: 1 << 30,
            cores: vec![Core {
                index: 0,
                package: None,
                numa: None,
                pus: vec![0],
            }],
            ..NodeTopology::default()
        };
        let m = NumaMachine::from_topology(&t);
        assert_eq!((m.numa_count(), m.numa_memory[0]), (1, 1 << 30));
        assert!(NumaMask(0b101).is_narrower_than(NumaMask(0b111)));
        assert!(NumaMask(0b011).is_narrower_than(NumaMask(0b101)));
    }
}
